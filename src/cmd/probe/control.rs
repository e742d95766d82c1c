//! Framed control messages on the TCP connection.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nagare_proto::probe::analysis::Arrival;
use nagare_proto::probe::{
    ControlMessage, FRAME_HEADER_LEN, FrameHeader, FrameKind, records_from_bytes,
};

/// Sends one message.
pub fn send(stream: &mut TcpStream, msg: &ControlMessage) -> Result<()> {
    stream
        .write_all(&msg.to_frame())
        .context("sending a control message to the peer")
}

/// One control frame read within `timeout`.
pub enum Frame {
    /// A JSON message.
    Message(ControlMessage),
    /// A batch of records.
    Records(Vec<Arrival>),
}

/// Reads one frame, waiting at most `timeout`; `Ok(None)` when the peer
/// closed the connection cleanly before a frame began.
pub fn receive(stream: &mut TcpStream, timeout: Duration) -> Result<Option<Frame>> {
    stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut head = [0u8; FRAME_HEADER_LEN];
    match read_full(stream, &mut head) {
        Ok(0) => return Ok(None),
        Ok(n) if n < head.len() => bail!("control connection closed in the middle of a frame"),
        Ok(_) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            bail!(
                "no control message from the peer within {:.1} s",
                timeout.as_secs_f64()
            )
        }
        Err(e) => return Err(e).context("reading the control connection"),
    }
    let h = FrameHeader::parse(&head).context("bad control frame from the peer")?;
    // Bounded by MAX_FRAME_LEN in FrameHeader::parse.
    let mut body = vec![0u8; h.len];
    let n = read_full(stream, &mut body).context("reading a control frame body")?;
    if n < h.len {
        bail!("control connection closed in the middle of a frame");
    }
    Ok(Some(match h.kind {
        FrameKind::Json => Frame::Message(
            ControlMessage::from_json(&body).context("bad control message from the peer")?,
        ),
        FrameKind::Records => {
            let mut v = Vec::new();
            records_from_bytes(&body, &mut v).context("bad records frame from the peer")?;
            Frame::Records(v)
        }
    }))
}

/// Reads until `buf` is full or EOF; returns the bytes read. A timeout
/// before the first byte is an error; after it, reading goes on (the rest
/// of a frame is on its way).
fn read_full(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    let mut stalls = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e)
                if got > 0
                    && matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                    && stalls < 10 =>
            {
                stalls += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
