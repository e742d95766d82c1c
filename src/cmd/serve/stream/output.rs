//! Where a stream's packets go: a UDP socket (unicast or multicast), or
//! the bounded write queue of an RTSP client's TCP connection
//! (interleaved `$` frames). A pacer never waits for either: a full UDP
//! buffer is counted and the packet dropped, and a full TCP queue drops
//! the reader (MediaMTX #162: one slow reader never stalls the others);
//! the connection's task on the RTSP event loop then closes it.
//!
//! An RTSP session's output also carries the session's RTCP path: a UDP
//! socket on the server's RTCP port, connected to the client's, or the
//! interleaved RTCP channel. API pushes have none.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result};
use nagare_proto::rtsp::write_interleaved;
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::net::train::{Train, TrainIo};
use crate::net::udp::{self, Interface, SendOptions};

/// What became of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The datagrams left (or were queued).
    Ok,
    /// The kernel refused them (no listener, full buffer): counted, and
    /// the stream goes on.
    Refused,
    /// The TCP reader's queue is full: it is disconnected.
    ReaderDropped,
}

/// A UDP destination with its own connected socket.
pub(crate) struct UdpOut {
    sender: udp::Sender,
    dest: SocketAddr,
    gso: bool,
    /// The session's RTCP socket, connected to the client's RTCP port.
    rtcp: Option<Arc<UdpSocket>>,
}

/// The media side of one RTSP TCP connection: a bounded queue of
/// interleaved frames that the pacers fill and the connection's task on
/// the RTSP event loop drains into the socket. tokio's channel, so that a
/// frame wakes that task; the pacers only ever `try_send`.
pub(crate) struct TcpLink {
    queue: mpsc::Sender<Vec<u8>>,
    peer: SocketAddr,
    dropped: AtomicBool,
    /// Wakes the connection's task when its reader is dropped.
    kick: Notify,
    /// Readers dropped server-wide, for metrics.
    dropped_total: Arc<AtomicU64>,
}

impl TcpLink {
    /// A link to `peer` whose queue holds `capacity` frames, and the
    /// queue's receiving end for the connection's task.
    pub(crate) fn new(
        capacity: usize,
        peer: SocketAddr,
        dropped_total: Arc<AtomicU64>,
    ) -> (Arc<TcpLink>, mpsc::Receiver<Vec<u8>>) {
        let (queue, rx) = mpsc::channel(capacity.max(1));
        let link = TcpLink {
            queue,
            peer,
            dropped: AtomicBool::new(false),
            kick: Notify::new(),
            dropped_total,
        };
        (Arc::new(link), rx)
    }

    /// Whether the reader was dropped for being slow.
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Drops the reader (once, counted): its task is woken and closes
    /// the connection.
    pub(crate) fn drop_reader(&self) {
        if !self.dropped.swap(true, Ordering::Relaxed) {
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            self.kick.notify_one();
        }
    }

    /// Resolves once the reader is dropped.
    pub(crate) async fn until_dropped(&self) {
        while !self.is_dropped() {
            self.kick.notified().await;
        }
    }

    /// Queues one interleaved frame; a full queue drops the reader.
    fn frame(&self, channel: u8, packet: &[&[u8]]) -> Sent {
        if self.is_dropped() {
            return Sent::ReaderDropped;
        }
        let mut out = Vec::new();
        if write_interleaved(channel, packet, &mut out).is_err() {
            // Over 65535 bytes: this packet cannot go on the connection.
            return Sent::Refused;
        }
        match self.queue.try_send(out) {
            Ok(()) => Sent::Ok,
            Err(TrySendError::Full(_) | TrySendError::Closed(_)) => {
                self.drop_reader();
                Sent::ReaderDropped
            }
        }
    }
}

/// One destination of a stream.
pub(crate) enum Output {
    /// UDP, unicast or multicast.
    Udp(UdpOut),
    /// Interleaved on an RTSP connection, RTP on `channel`.
    Tcp {
        /// The connection.
        link: Arc<TcpLink>,
        /// RTP channel.
        channel: u8,
        /// RTCP channel.
        rtcp: Option<u8>,
    },
}

impl Output {
    /// A UDP destination (`interface` for multicast, `ttl` for its hops);
    /// `buffer` is the send buffer to ask for.
    pub(crate) fn udp(
        dest: SocketAddr,
        interface: Option<Interface>,
        ttl: Option<u32>,
        buffer: usize,
    ) -> Result<Output> {
        let opts = SendOptions {
            interface,
            ttl,
            buffer_bytes: buffer,
        };
        let sender = udp::Sender::open(dest, &opts)
            .with_context(|| format!("opening a socket to {dest}"))?;
        Ok(Output::udp_out(sender, dest, None))
    }

    fn udp_out(sender: udp::Sender, dest: SocketAddr, rtcp: Option<Arc<UdpSocket>>) -> Output {
        let gso = sender.gso;
        Output::Udp(UdpOut {
            sender,
            dest,
            gso,
            rtcp,
        })
    }

    /// An RTSP session's UDP unicast destination: RTP from `rtp`, a socket
    /// already bound to the server's RTP port, and RTCP on `rtcp`, bound
    /// to the server's RTCP port and connected to the client's.
    pub(crate) fn udp_session(
        rtp: socket2::Socket,
        dest: SocketAddr,
        rtcp: Arc<UdpSocket>,
        buffer: usize,
    ) -> Result<Output> {
        let opts = SendOptions {
            interface: None,
            ttl: None,
            buffer_bytes: buffer,
        };
        let sender = udp::Sender::open_on(rtp, dest, &opts)
            .with_context(|| format!("opening a socket to {dest}"))?;
        Ok(Output::udp_out(sender, dest, Some(rtcp)))
    }

    /// Whether RTCP can go with this output.
    pub(crate) fn takes_rtcp(&self) -> bool {
        match self {
            Output::Udp(u) => u.rtcp.is_some(),
            Output::Tcp { rtcp, .. } => rtcp.is_some(),
        }
    }

    /// Sends one RTCP compound on the output's RTCP path, if it has one.
    pub(crate) fn rtcp(&self, bytes: &[u8]) -> Sent {
        match self {
            Output::Udp(UdpOut {
                rtcp: Some(sock), ..
            }) => refused(sock.send(bytes)),
            Output::Tcp {
                link,
                rtcp: Some(channel),
                ..
            } => link.frame(*channel, &[bytes]),
            _ => Sent::Ok,
        }
    }

    /// How it is shown in the table.
    pub(crate) fn label(&self) -> String {
        match self {
            Output::Udp(u) => u.dest.to_string(),
            Output::Tcp { link, channel, .. } => format!("tcp:{}/channel {channel}", link.peer),
        }
    }

    /// Sends one datagram (a TS datagram).
    pub(crate) fn datagram(&mut self, bytes: &[u8]) -> Sent {
        match self {
            Output::Udp(u) => refused(u.sender.send(bytes)),
            Output::Tcp { link, channel, .. } => link.frame(*channel, &[bytes]),
        }
    }

    /// Sends a train of datagrams, each the concatenation of its three
    /// parts (header, data, padding), as one GSO send of `segment`-byte
    /// datagrams where possible; `io` is reused scratch space.
    pub(crate) fn train(&mut self, train: &Train<'_>, io: &mut TrainIo) -> Sent {
        match self {
            Output::Udp(u) => refused(io.send(&u.sender, train, &mut u.gso)),
            Output::Tcp { link, channel, .. } => {
                for p in train.parts() {
                    let s = link.frame(*channel, &p);
                    if s != Sent::Ok {
                        return s;
                    }
                }
                Sent::Ok
            }
        }
    }

    /// Whether trains may use GSO.
    pub(crate) fn gso(&self) -> bool {
        match self {
            Output::Udp(u) => u.gso,
            Output::Tcp { .. } => false,
        }
    }
}

fn refused(r: io::Result<usize>) -> Sent {
    match r {
        Ok(_) => Sent::Ok,
        Err(_) => Sent::Refused,
    }
}
