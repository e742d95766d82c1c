//! `analyze --pcap FILE`: the capture's bytes moved through proto's
//! `capture::CaptureParser` into the monitor, one stream picked out by
//! its destination.

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use nagare_proto::capture::{CaptureParser, MAX_RECORD, UdpDatagram};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::video::st2110_21::Monitor;

use crate::analysis::collect::Collector;

/// Which datagrams of a capture are the stream.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Filter {
    /// To this address and port (from the SDP).
    Destination(SocketAddr),
    /// To this port, any address.
    Port(u16),
    /// The destination of the first RTP-looking datagram.
    First,
}

/// Bytes read from the file at a time.
const CHUNK: usize = 1 << 20;

/// The capture file's bytes, read as the parser takes them; never more
/// than a record and a chunk in memory.
struct Bytes<R> {
    file: R,
    buf: Vec<u8>,
    start: usize,
    eof: bool,
}

impl<R: Read> Bytes<R> {
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Reads another chunk (dropping what was taken); false at the end.
    fn more(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        self.buf.drain(..self.start);
        self.start = 0;
        let have = self.buf.len();
        self.buf.resize(have + CHUNK, 0);
        let n = self
            .file
            .read(&mut self.buf[have..])
            .context("reading the capture")?;
        self.buf.truncate(have + n);
        self.eof = n == 0;
        Ok(n > 0)
    }
}

/// Whether a datagram is the stream's, locking `filter` on the first
/// RTP one when it names none.
fn wanted(filter: &mut Filter, d: &UdpDatagram<'_>) -> bool {
    match *filter {
        Filter::Destination(a) => d.destination == a,
        Filter::Port(p) => d.destination.port() == p,
        Filter::First => {
            let rtp = RtpPacket::new_checked(d.payload).is_ok();
            if rtp {
                *filter = Filter::Destination(d.destination);
            }
            rtp
        }
    }
}

/// Feeds every datagram of the stream in `path` to `monitor`, events to
/// `collector` (printing a line per second with `each_second`). Returns
/// the captured frames that were not the stream's.
pub(crate) fn run(
    path: &Path,
    mut filter: Filter,
    monitor: &mut Monitor,
    collector: &mut Collector,
    each_second: &mut dyn FnMut(&nagare_api::st2110::SecondLine),
    stop: &AtomicBool,
) -> Result<u64> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open capture '{}'", path.display()))?;
    let mut bytes = Bytes {
        file: std::io::BufReader::new(file),
        buf: Vec::with_capacity(CHUNK + MAX_RECORD),
        start: 0,
        eof: false,
    };
    let shown = path.display();
    let mut parser = loop {
        if let Some((p, used)) =
            CaptureParser::new(bytes.pending()).with_context(|| format!("capture '{shown}'"))?
        {
            bytes.start += used;
            break p;
        }
        if !bytes.more()? {
            bail!("capture '{shown}' is too short to be a pcap or pcapng file");
        }
    };
    let mut other = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let record = parser
            .next_record(bytes.pending())
            .with_context(|| format!("capture '{shown}'"))?;
        let Some((r, used)) = record else {
            if bytes.more()? {
                continue;
            }
            // A capture cut mid-record (tcpdump killed) just ends.
            break;
        };
        match r.datagram {
            Some(d) if wanted(&mut filter, &d) => monitor.handle_input(r.at, d.payload),
            _ => other += 1,
        }
        bytes.start += used;
        while let Some(e) = monitor.poll_event() {
            if let Some(line) = collector.event(e) {
                each_second(&line);
            }
        }
    }
    monitor.flush();
    while let Some(e) = monitor.poll_event() {
        if let Some(line) = collector.event(e) {
            each_second(&line);
        }
    }
    Ok(other)
}
