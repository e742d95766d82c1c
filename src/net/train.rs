//! Gathering a raw video train for one send: nagare-proto's
//! `video::Sender::lay_out` writes each packet's headers and says where its
//! frame bytes and padding are; this puts the three parts of every packet
//! side by side, without copying the frame, for one GSO send (or
//! `sendmmsg`) or for a TCP reader's frames.

use std::io;

use nagare_proto::video::Error;
use nagare_proto::video::sender::{FlowId, PacketLayout, Sender, Transmit};

use super::udp;

/// A train's headers and layout, made by [`TrainBuf::gather`].
#[derive(Debug, Default)]
pub(crate) struct TrainBuf {
    headers: Vec<u8>,
    stride: usize,
    layout: Vec<PacketLayout>,
}

/// One gathered train: per packet its headers, frame bytes and padding.
pub(crate) struct Train<'a> {
    buf: &'a TrainBuf,
    frame: &'a [u8],
    /// Bytes of all its packets.
    pub bytes: usize,
    /// The GSO segment size, when every packet but the last fills one.
    pub segment: Option<usize>,
}

impl TrainBuf {
    /// Room for the longest train of flow `id` of `sender`.
    pub(crate) fn for_flow(sender: &Sender, id: FlowId) -> TrainBuf {
        let stride = sender.header_stride(id).unwrap_or(0);
        let max = sender.max_train(id).unwrap_or(1);
        TrainBuf {
            headers: vec![0; stride * max],
            stride,
            layout: Vec::with_capacity(max),
        }
    }

    /// Lays out train `t` of `sender` over `frame`, the bytes it carries.
    pub(crate) fn gather<'a>(
        &'a mut self,
        sender: &Sender,
        t: &Transmit,
        frame: &'a [u8],
    ) -> Result<Train<'a>, Error> {
        let need = self.stride * t.len();
        if self.headers.len() < need {
            self.headers.resize(need, 0);
        }
        let l = sender.lay_out(t, &mut self.headers, self.stride, &mut self.layout)?;
        if let Some(p) = self.layout.last()
            && p.data.end > frame.len()
        {
            return Err(Error::NoSuchPacket(t.packets.end - 1));
        }
        Ok(Train {
            buf: self,
            frame,
            bytes: l.bytes,
            segment: l.segment,
        })
    }
}

impl<'a> Train<'a> {
    /// Each packet's headers, frame bytes and padding, in order.
    pub(crate) fn parts(&self) -> impl Iterator<Item = [&'a [u8]; 3]> + 'a {
        let (buf, frame) = (self.buf, self.frame);
        let slots = buf.headers.chunks_exact(buf.stride.max(1));
        buf.layout
            .iter()
            .zip(slots)
            .map(move |(p, slot)| [&slot[..p.header], &frame[p.data.clone()], p.padding])
    }
}

/// Scratch space for sending trains: iovecs and message headers (raw
/// pointers: made and used on one thread).
#[derive(Default)]
pub(crate) struct TrainIo {
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
}

impl TrainIo {
    /// Sends `train` on `sock` as one GSO send when `*gso` is on (see
    /// [`udp::send_train`]), else with `sendmmsg`.
    pub(crate) fn send(
        &mut self,
        sock: &udp::Sender,
        train: &Train<'_>,
        gso: &mut bool,
    ) -> io::Result<usize> {
        self.iov.clear();
        self.iov
            .extend(train.parts().flat_map(|p| p.map(udp::iovec)));
        let r = sock.send_train(&self.iov, 3, train.segment, gso, &mut self.mmsg);
        // No pointer into the frame outlives the send.
        self.iov.clear();
        r
    }
}
