//! The TCP control connection: its messages ([`ControlMessage`], JSON) and
//! records (binary), the frames that carry them, and [`FrameDecoder`],
//! which turns the bytes read from the connection back into frames.
//!
//! A frame is `type (1: 'J' or 'R') | length (4, big-endian) | body`. The
//! parsers take bytes straight from the network and never panic; a
//! hostile length is refused before anything is allocated. They are fuzz
//! entry points ([`FrameHeader::parse`], [`ControlMessage::from_json`],
//! [`records_from_bytes`], [`FrameDecoder`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::probe::error::{Error, MessageKind};
use crate::probe::params::TestParams;
use crate::probe::report::{Arrival, LiveInterval, ReceiverReport, SenderReport};
use crate::probe::wire::be64;
use crate::units::Nanos;

/// Why a server turned a test down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Another test is running.
    Busy,
    /// The client speaks another protocol version.
    Version,
    /// Missing or wrong token.
    Token,
    /// A parameter is out of range.
    Params,
    /// Anything else.
    Other,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Busy => "server busy",
            Refusal::Version => "protocol version mismatch",
            Refusal::Token => "access refused",
            Refusal::Params => "test parameters refused",
            Refusal::Other => "refused",
        })
    }
}

/// A message on the TCP control connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMessage {
    /// Client → server: what to run.
    Hello {
        /// Client's protocol version.
        version: u32,
        /// Access token, if the server requires one.
        token: Option<String>,
        /// The test.
        params: TestParams,
    },
    /// Server → client: accepted; UDP is ready on the same port.
    Welcome {
        /// Server's protocol version.
        version: u32,
        /// Session id every test datagram must carry.
        session: u64,
    },
    /// Server → client: not accepted.
    Refused {
        /// Server's protocol version.
        version: u32,
        /// Why.
        reason: Refusal,
        /// Human-readable detail.
        message: String,
    },
    /// Sender → receiver: the streams are over.
    Done {
        /// What the sender measured, one report per stream.
        sender: Vec<SenderReport>,
    },
    /// Server → client (forward mode): the receiver's results; per-packet
    /// record frames follow when they were asked for.
    Report {
        /// The receiver's analysis, one report per stream.
        receiver: Vec<ReceiverReport>,
        /// Records that follow in binary frames.
        records: u64,
    },
    /// Receiver → sender, while the stream runs: one reporting interval,
    /// so both ends print it live.
    Interval {
        /// What the receiver counted in it, one entry per stream.
        intervals: Vec<LiveInterval>,
    },
    /// Either way: the peer gives up, with a reason.
    Abort {
        /// Why.
        message: String,
    },
}

/// Largest control frame body (one JSON message or one batch of records).
pub const MAX_FRAME_LEN: usize = 1 << 20;
/// Largest first frame (the client's hello) a server reads before the
/// client is known: the hello is a few hundred bytes of JSON, so a length
/// prefix beyond this is refused before anything is allocated.
pub const MAX_HELLO_LEN: usize = 16 << 10;
/// Bytes of a control frame header: type byte and 32-bit big-endian length.
pub const FRAME_HEADER_LEN: usize = 5;
/// Bytes of one record in a records frame.
pub const RECORD_LEN: usize = 24;
/// Records per records frame.
pub const RECORDS_PER_FRAME: usize = MAX_FRAME_LEN / RECORD_LEN;

/// Type of a control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A JSON [`ControlMessage`].
    Json,
    /// A batch of binary [`Arrival`] records.
    Records,
}

/// A parsed control frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the body holds.
    pub kind: FrameKind,
    /// Body length.
    pub len: usize,
}

impl FrameHeader {
    /// Parses the 5-byte header, refusing lengths over [`MAX_FRAME_LEN`]
    /// before anything is allocated.
    pub fn parse(b: &[u8]) -> Result<FrameHeader, Error> {
        if b.len() < FRAME_HEADER_LEN {
            return Err(Error::Truncated {
                needed: FRAME_HEADER_LEN,
                got: b.len(),
            });
        }
        let kind = match b[0] {
            b'J' => FrameKind::Json,
            b'R' => FrameKind::Records,
            t => return Err(Error::FrameType(t)),
        };
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        if len > MAX_FRAME_LEN {
            return Err(Error::FrameTooLarge {
                len,
                max: MAX_FRAME_LEN,
            });
        }
        Ok(FrameHeader { kind, len })
    }

    /// The header bytes.
    pub fn to_bytes(self) -> [u8; FRAME_HEADER_LEN] {
        let l = (self.len as u32).to_be_bytes();
        let t = match self.kind {
            FrameKind::Json => b'J',
            FrameKind::Records => b'R',
        };
        [t, l[0], l[1], l[2], l[3]]
    }
}

impl ControlMessage {
    /// A complete frame (header and JSON body).
    pub fn to_frame(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail (no maps with
        // non-string keys, no custom serializers).
        let body = serde_json::to_vec(self).unwrap_or_default();
        let mut out = FrameHeader {
            kind: FrameKind::Json,
            len: body.len(),
        }
        .to_bytes()
        .to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// Parses a JSON frame body.
    pub fn from_json(body: &[u8]) -> Result<ControlMessage, Error> {
        serde_json::from_slice(body).map_err(|e| Error::Malformed {
            line: e.line(),
            column: e.column(),
        })
    }

    /// Which message this is.
    pub fn kind(&self) -> MessageKind {
        match self {
            ControlMessage::Hello { .. } => MessageKind::Hello,
            ControlMessage::Welcome { .. } => MessageKind::Welcome,
            ControlMessage::Refused { .. } => MessageKind::Refused,
            ControlMessage::Done { .. } => MessageKind::Done,
            ControlMessage::Report { .. } => MessageKind::Report,
            ControlMessage::Interval { .. } => MessageKind::Interval,
            ControlMessage::Abort { .. } => MessageKind::Abort,
        }
    }
}

/// One frame carrying `records` (at most [`RECORDS_PER_FRAME`] of them).
pub fn records_frame(records: &[Arrival]) -> Vec<u8> {
    let mut out = FrameHeader {
        kind: FrameKind::Records,
        len: records.len() * RECORD_LEN,
    }
    .to_bytes()
    .to_vec();
    out.reserve(records.len() * RECORD_LEN);
    for r in records {
        out.extend_from_slice(&r.seq.to_be_bytes());
        out.extend_from_slice(&r.sent_at.as_nanos().to_be_bytes());
        out.extend_from_slice(&r.received_at.as_nanos().to_be_bytes());
    }
    out
}

/// Frames carrying `records`, at most [`RECORDS_PER_FRAME`] per frame.
pub fn records_to_frames(records: &[Arrival]) -> Vec<Vec<u8>> {
    records
        .chunks(RECORDS_PER_FRAME)
        .map(records_frame)
        .collect()
}

/// Decodes a records frame body, appending to `out`; nothing is appended
/// when the body is not whole records.
pub fn records_from_bytes(body: &[u8], out: &mut Vec<Arrival>) -> Result<(), Error> {
    if body.len() % RECORD_LEN != 0 {
        return Err(Error::Truncated {
            needed: body.len().div_ceil(RECORD_LEN) * RECORD_LEN,
            got: body.len(),
        });
    }
    out.extend(body.chunks_exact(RECORD_LEN).map(|c| Arrival {
        seq: be64(&c[0..8]),
        sent_at: Nanos(be64(&c[8..16])),
        received_at: Nanos(be64(&c[16..24])),
    }));
    Ok(())
}

/// A whole control frame, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A JSON message.
    Message(ControlMessage),
    /// A batch of records.
    Records(Vec<Arrival>),
}

/// Reassembles frames from the bytes of the control connection, however
/// the reads split them. It holds at most one frame plus what the last
/// [`FrameDecoder::extend`] brought; errors are final, as the connection
/// is dropped after one.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    failed: Option<Error>,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Adds bytes read from the connection; take the frames they complete
    /// with [`FrameDecoder::next_frame`] before adding more.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Bytes received that do not make a whole frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame, `None` until one is complete.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let frame = self.take();
        if let Err(e) = frame {
            self.failed = Some(e);
            self.buf = Vec::new();
        }
        frame
    }

    fn take(&mut self) -> Result<Option<Frame>, Error> {
        if self.buf.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let h = FrameHeader::parse(&self.buf)?;
        let end = FRAME_HEADER_LEN + h.len;
        if self.buf.len() < end {
            return Ok(None);
        }
        let body = &self.buf[FRAME_HEADER_LEN..end];
        let frame = match h.kind {
            FrameKind::Json => Frame::Message(ControlMessage::from_json(body)?),
            FrameKind::Records => {
                let mut v = Vec::with_capacity(body.len() / RECORD_LEN);
                records_from_bytes(body, &mut v)?;
                Frame::Records(v)
            }
        };
        self.buf.drain(..end);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::params::DEFAULT_BURST_US;

    fn params() -> TestParams {
        TestParams {
            rate_bps: 3_200_000_000,
            duration_ms: 1000,
            packet_size: 8800,
            fps: None,
            reverse: false,
            records: false,
            playout_us: 20_000,
            burst_threshold: 5,
            burst_us: DEFAULT_BURST_US,
            interval_ms: 1000,
            streams: 1,
            bidir: false,
        }
    }

    fn record(seq: u64) -> Arrival {
        Arrival {
            seq,
            sent_at: Nanos(2),
            received_at: Nanos(3),
        }
    }

    #[test]
    fn control_frames() {
        let m = ControlMessage::Hello {
            version: crate::probe::PROTOCOL_VERSION,
            token: None,
            params: params(),
        };
        let f = m.to_frame();
        let h = FrameHeader::parse(&f).unwrap();
        assert_eq!(h.kind, FrameKind::Json);
        assert_eq!(ControlMessage::from_json(&f[5..5 + h.len]).unwrap(), m);
        assert_eq!(m.kind(), MessageKind::Hello);
        assert!(matches!(
            FrameHeader::parse(&[b'J', 0xff, 0xff, 0xff, 0xff]),
            Err(Error::FrameTooLarge { .. })
        ));
        assert_eq!(
            FrameHeader::parse(b"X\0\0\0\0"),
            Err(Error::FrameType(b'X'))
        );
        assert!(ControlMessage::from_json(b"{\"type\":\"hello\"}").is_err());
        let recs = vec![record(1); RECORDS_PER_FRAME + 3];
        let frames = records_to_frames(&recs);
        assert_eq!(frames.len(), 2);
        let mut back = Vec::new();
        for f in &frames {
            let h = FrameHeader::parse(f).unwrap();
            records_from_bytes(&f[5..5 + h.len], &mut back).unwrap();
        }
        assert_eq!(back, recs);
        assert!(records_from_bytes(&[0; 25], &mut back).is_err());
    }

    #[test]
    fn report_of_the_most_intervals_fits_a_control_frame() {
        // Found by the metrics_analyze fuzz target: an hour of 10 ms
        // intervals made a report of tens of MB that the client refused.
        let p = TestParams {
            rate_bps: 100_000,
            packet_size: 1250, // 10 packets/s: every interval has some
            duration_ms: 3_600_000,
            interval_ms: 1000,
            ..params()
        };
        let s = p.validate().unwrap();
        // Every packet received, with long-winded floats everywhere.
        let arrivals: Vec<Arrival> = (0..s.total_packets)
            .map(|k| {
                let send = s.slot(k).as_nanos();
                Arrival {
                    seq: k,
                    sent_at: Nanos(send + k % 7),
                    received_at: Nanos(send + 1_234_567 + k % 13 * 1_111),
                }
            })
            .collect();
        let r = crate::probe::analyze(&arrivals, s.total_packets, &p, &s);
        assert_eq!(r.intervals.len() as u64, crate::probe::MAX_INTERVALS);
        let f = ControlMessage::Report {
            receiver: vec![r],
            records: 0,
        }
        .to_frame();
        let h = FrameHeader::parse(&f).unwrap();
        assert_eq!(h.len, f.len() - FRAME_HEADER_LEN);
        assert!(h.len < MAX_FRAME_LEN * 3 / 4, "{}", h.len);
    }

    #[test]
    fn decoder_reassembles_frames_split_anywhere() {
        let mut stream = ControlMessage::Abort {
            message: "bye".into(),
        }
        .to_frame();
        stream.extend(records_frame(&[record(5), record(6)]));
        stream.extend(
            ControlMessage::Welcome {
                version: 2,
                session: 9,
            }
            .to_frame(),
        );
        for step in [1, 2, 5, 7, stream.len()] {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for chunk in stream.chunks(step) {
                d.extend(chunk);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(d.pending(), 0);
            assert_eq!(got.len(), 3, "step {step}");
            assert_eq!(got[1], Frame::Records(vec![record(5), record(6)]));
        }
    }

    #[test]
    fn decoder_errors_are_final() {
        let mut d = FrameDecoder::new();
        d.extend(b"Z\xff\xff\xff\xffgarbage");
        assert_eq!(d.next_frame(), Err(Error::FrameType(b'Z')));
        d.extend(
            &ControlMessage::Abort {
                message: "x".into(),
            }
            .to_frame(),
        );
        assert_eq!(d.next_frame(), Err(Error::FrameType(b'Z')));
        assert_eq!(d.pending(), 0);
        // A hostile length is refused from the header alone.
        let mut d = FrameDecoder::new();
        d.extend(&[b'R', 0x7f, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_frame(), Err(Error::FrameTooLarge { .. })));
    }
}
