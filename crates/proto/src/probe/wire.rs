//! The probe protocol: test-stream datagrams, echo datagrams, test
//! parameters and the TCP control messages (Sperf's "information packet"
//! and the results that come back).
//!
//! Every parser here takes bytes straight from the network and must never
//! panic or allocate without bound; they are the fuzz entry points
//! ([`Datagram::parse`], [`FrameHeader::parse`], [`ControlMessage::from_json`],
//! [`records_from_bytes`]).

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::probe::analysis::{Arrival, ReceiverReport};
use crate::rtp::{HEADER_LEN, RtpHeader, RtpPacket};
use crate::video::format;
use crate::video::format::FrameRate;
use crate::video::pacer::Pacer;

/// Version of the probe wire protocol (datagrams and control messages).
pub const PROTOCOL_VERSION: u32 = 1;

/// RTP payload type of the test stream (dynamic range).
pub const PAYLOAD_TYPE: u8 = 98;

/// Magic after the RTP header of a test-stream packet.
pub const DATA_MAGIC: [u8; 4] = *b"NGPD";
/// Magic at the start of an echo / open datagram. Its first byte makes the
/// RTP version field read 1, so RTP-aware tools (and `nagare impair`'s
/// scripted actions) never take an echo for part of the stream.
pub const ECHO_MAGIC: [u8; 4] = *b"NGPE";

/// Bytes of a test-stream packet before its filler: RTP header, magic,
/// version, flags, session id, sequence number, send time.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 4 + 1 + 3 + 8 + 8 + 8;
/// Bytes of an echo datagram.
pub const ECHO_LEN: usize = 4 + 1 + 1 + 2 + 8 + 8 + 8;

/// Smallest `--packet-size` (the header must fit, plus room to spare).
pub const MIN_PACKET_SIZE: u64 = 64;
/// Largest `--packet-size`: the IPv4 UDP payload limit.
pub const MAX_PACKET_SIZE: u64 = 65_507;
/// Lowest test rate, bits of UDP payload per second.
pub const MIN_RATE_BPS: u64 = 100_000;
/// Highest test rate accepted (far above what one host sends today).
pub const MAX_RATE_BPS: u64 = 400_000_000_000;
/// Shortest test.
pub const MIN_DURATION_MS: u64 = 100;
/// Longest test.
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Most packets one test may plan: the receiver keeps one 24-byte record
/// per packet, so this bounds its memory (240 MB).
pub const MAX_PACKETS: u64 = 10_000_000;
/// Largest `--playout` delay.
pub const MAX_PLAYOUT_US: u64 = 10_000_000;
/// Largest reporting interval.
pub const MAX_INTERVAL_MS: u64 = 60_000;
/// Default train window of the sender (as `nagare send --burst-us`).
pub const DEFAULT_BURST_US: u64 = 100;
/// Largest train window: beyond a few ms the stream is no longer paced.
pub const MAX_BURST_US: u64 = 10_000;
/// Most reporting intervals in one test (an hour of 1 s intervals), over
/// the whole send schedule: the report carries one entry per interval and
/// must fit one control frame ([`MAX_FRAME_LEN`]); 3600 entries take
/// about 700 KB of JSON.
pub const MAX_INTERVALS: u64 = 3600;

/// One parsed datagram of a probe test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram {
    /// A test-stream packet.
    Data(DataHeader),
    /// An echo request, echo reply or open datagram.
    Echo(Echo),
}

impl Datagram {
    /// Parses any probe datagram; everything else is an error, which the
    /// receiver counts as a stranger.
    pub fn parse(buf: &[u8]) -> Result<Datagram, Error> {
        if buf.len() >= 4 && buf[..4] == ECHO_MAGIC {
            Echo::parse(buf).map(Datagram::Echo)
        } else {
            DataHeader::parse(buf).map(Datagram::Data)
        }
    }
}

/// The fields of a test-stream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Per-test session id, chosen by the server.
    pub session: u64,
    /// Sequence number, from 0; its low 16 bits are the RTP sequence number.
    pub seq: u64,
    /// Send time, nanoseconds since the sender's schedule zero.
    pub send_ns: u64,
    /// Last packet of a frame (RTP marker).
    pub marker: bool,
}

impl DataHeader {
    /// Writes the header into the front of `buf` (the rest is filler the
    /// caller leaves as it is). Returns the header length.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.len() < DATA_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: DATA_HEADER_LEN,
            });
        }
        RtpHeader {
            marker: self.marker,
            payload_type: PAYLOAD_TYPE,
            sequence_number: self.seq as u16,
            // 90 kHz media clock derived from the send time, so RTP tools
            // see a sensible timestamp.
            timestamp: (u128::from(self.send_ns) * 90_000 / 1_000_000_000) as u32,
            ssrc: self.session as u32,
        }
        .write(buf)?;
        let b = &mut buf[HEADER_LEN..DATA_HEADER_LEN];
        b[..4].copy_from_slice(&DATA_MAGIC);
        b[4] = PROTOCOL_VERSION as u8;
        b[5..8].fill(0);
        b[8..16].copy_from_slice(&self.session.to_be_bytes());
        b[16..24].copy_from_slice(&self.seq.to_be_bytes());
        b[24..32].copy_from_slice(&self.send_ns.to_be_bytes());
        Ok(DATA_HEADER_LEN)
    }

    /// Parses a test-stream packet.
    pub fn parse(buf: &[u8]) -> Result<DataHeader, Error> {
        let rtp = RtpPacket::new_checked(buf)?;
        if rtp.payload_type() != PAYLOAD_TYPE {
            return Err(Error::NotProbe);
        }
        let p = rtp.payload();
        if p.len() < DATA_HEADER_LEN - HEADER_LEN {
            return Err(Error::Truncated {
                needed: DATA_HEADER_LEN,
                got: buf.len(),
            });
        }
        if p[..4] != DATA_MAGIC {
            return Err(Error::NotProbe);
        }
        if u32::from(p[4]) != PROTOCOL_VERSION {
            return Err(Error::ProbeVersion {
                got: u32::from(p[4]),
                want: PROTOCOL_VERSION,
            });
        }
        Ok(DataHeader {
            session: be64(&p[8..16]),
            seq: be64(&p[16..24]),
            send_ns: be64(&p[24..32]),
            marker: rtp.marker(),
        })
    }
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// What an echo datagram is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchoKind {
    /// Asks the peer to send it straight back as a reply.
    Request,
    /// The reply to a request, with the request's id and time.
    Reply,
    /// Sent by a reverse-mode client so the server learns (and checks)
    /// the address to stream to.
    Open,
}

/// An echo datagram (RTT probe, or the reverse-mode opener).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// Request, reply or open.
    pub kind: EchoKind,
    /// Session id of the test.
    pub session: u64,
    /// Id chosen by the requester.
    pub id: u64,
    /// Requester's send time, nanoseconds on its own clock.
    pub send_ns: u64,
}

impl Echo {
    /// Writes the datagram into `buf`; returns its length.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let b = buf
            .get_mut(..ECHO_LEN)
            .ok_or(Error::BufferTooSmall { needed: ECHO_LEN })?;
        b[..4].copy_from_slice(&ECHO_MAGIC);
        b[4] = PROTOCOL_VERSION as u8;
        b[5] = match self.kind {
            EchoKind::Request => 1,
            EchoKind::Reply => 2,
            EchoKind::Open => 3,
        };
        b[6..8].fill(0);
        b[8..16].copy_from_slice(&self.session.to_be_bytes());
        b[16..24].copy_from_slice(&self.id.to_be_bytes());
        b[24..32].copy_from_slice(&self.send_ns.to_be_bytes());
        Ok(ECHO_LEN)
    }

    /// Parses an echo datagram.
    pub fn parse(buf: &[u8]) -> Result<Echo, Error> {
        if buf.len() < ECHO_LEN {
            return Err(Error::Truncated {
                needed: ECHO_LEN,
                got: buf.len(),
            });
        }
        if buf[..4] != ECHO_MAGIC {
            return Err(Error::NotProbe);
        }
        if u32::from(buf[4]) != PROTOCOL_VERSION {
            return Err(Error::ProbeVersion {
                got: u32::from(buf[4]),
                want: PROTOCOL_VERSION,
            });
        }
        let kind = match buf[5] {
            1 => EchoKind::Request,
            2 => EchoKind::Reply,
            3 => EchoKind::Open,
            _ => return Err(Error::NotProbe),
        };
        Ok(Echo {
            kind,
            session: be64(&buf[8..16]),
            id: be64(&buf[16..24]),
            send_ns: be64(&buf[24..32]),
        })
    }
}

/// What the client asks for: Sperf's information packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    /// Target rate, bits of UDP payload per second.
    pub rate_bps: u64,
    /// Test length in milliseconds.
    pub duration_ms: u64,
    /// UDP payload bytes per packet.
    pub packet_size: u32,
    /// Video frame rate `(num, den)` grouping packets into frames, if any.
    pub fps: Option<(u32, u32)>,
    /// The server sends and the client receives.
    pub reverse: bool,
    /// The client wants per-packet records back.
    pub records: bool,
    /// Playout delay for late packets and frames, microseconds.
    pub playout_us: u64,
    /// Shortest run of consecutive losses that counts as a Sperf burst.
    pub burst_threshold: u32,
    /// Reporting interval of the time series, milliseconds.
    pub interval_ms: u64,
    /// Sender's train window, microseconds: packets whose slots fall
    /// within it of a train's first slot leave in one send call. Clients
    /// that predate it get the default.
    #[serde(default = "default_burst_us")]
    pub burst_us: u64,
}

fn default_burst_us() -> u64 {
    DEFAULT_BURST_US
}

fn check(what: &'static str, value: u64, min: u64, max: u64) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::TestParam {
            what,
            value,
            min,
            max,
        })
    }
}

/// How a test's packets are laid out in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Frame rate of the pacer (virtual frames without `--fps`).
    pub rate: FrameRate,
    /// Packets per (possibly virtual) frame.
    pub packets_per_frame: u64,
    /// Packets in the whole test.
    pub total_packets: u64,
    /// Whether frames are real video frames (`--fps`).
    pub video_frames: bool,
}

impl Schedule {
    /// A pacer for this schedule, time zero at the first packet.
    pub fn pacer(&self) -> Pacer {
        Pacer::new(self.rate, self.packets_per_frame as usize, 0)
    }

    /// Bits per second the schedule really sends with `packet_size`-byte
    /// packets (rounding to whole packets per frame).
    pub fn rate_bps(&self, packet_size: u32) -> f64 {
        self.rate.as_f64() * self.packets_per_frame as f64 * f64::from(packet_size) * 8.0
    }
}

impl TestParams {
    /// Checks every field against its range, and the planned packet count
    /// against [`MAX_PACKETS`]; the server runs this too, so a client can
    /// never make it allocate or send without bound.
    pub fn validate(&self) -> Result<Schedule, Error> {
        check("rate (bit/s)", self.rate_bps, MIN_RATE_BPS, MAX_RATE_BPS)?;
        check(
            "duration (ms)",
            self.duration_ms,
            MIN_DURATION_MS,
            MAX_DURATION_MS,
        )?;
        check(
            "packet size (bytes)",
            u64::from(self.packet_size),
            MIN_PACKET_SIZE,
            MAX_PACKET_SIZE,
        )?;
        check("playout (us)", self.playout_us, 0, MAX_PLAYOUT_US)?;
        check(
            "burst threshold (packets)",
            u64::from(self.burst_threshold),
            1,
            1_000_000,
        )?;
        check("interval (ms)", self.interval_ms, 10, MAX_INTERVAL_MS)?;
        check("burst (us)", self.burst_us, 0, MAX_BURST_US)?;
        let schedule = self.schedule()?;
        check(
            "packets in the test",
            schedule.total_packets,
            1,
            MAX_PACKETS,
        )?;
        // The report's intervals follow the send schedule, which runs up
        // to a frame period past the duration (a slow --fps).
        let span_ms = schedule.pacer().slot(schedule.total_packets - 1).as_nanos() / 1_000_000;
        check(
            "intervals in the test",
            (span_ms / self.interval_ms.max(1)).saturating_add(1),
            1,
            MAX_INTERVALS,
        )?;
        Ok(schedule)
    }

    fn schedule(&self) -> Result<Schedule, Error> {
        let bits = u64::from(self.packet_size) * 8;
        let (rate, ppf, video) = match self.fps {
            Some((num, den)) => {
                let fr = FrameRate::new(num, den)?;
                let per_frame = self.rate_bps as f64 / fr.as_f64() / bits as f64;
                (fr, (per_frame.round() as u64).max(1), true)
            }
            None => {
                // Constant bit rate: virtual frames of ppf packets at most
                // 1000 times a second, with the frame rate as an exact
                // fraction rate / (bits × ppf), reduced to fit u32.
                let ppf = self.rate_bps.div_ceil(bits * 1000).max(1);
                let mut num = u128::from(self.rate_bps);
                let mut den = u128::from(bits) * u128::from(ppf);
                let g = gcd(num, den);
                num /= g;
                den /= g;
                while num > u128::from(u32::MAX) || den > u128::from(u32::MAX) {
                    num = (num / 2).max(1);
                    den = (den / 2).max(1);
                }
                let fr = FrameRate::new(num as u32, den as u32).map_err(|_| Error::TestParam {
                    what: "rate (bit/s)",
                    value: self.rate_bps,
                    min: MIN_RATE_BPS,
                    max: MAX_RATE_BPS,
                })?;
                (fr, ppf, false)
            }
        };
        // Whole frames that start within the duration.
        let frames = rate.frame_at_or_after_ns(u128::from(self.duration_ms) * 1_000_000);
        let total = frames.saturating_mul(ppf);
        Ok(Schedule {
            rate,
            packets_per_frame: ppf,
            total_packets: total,
            video_frames: video,
        })
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Parses a frame rate for `--fps` into the `(num, den)` of [`TestParams`].
pub fn parse_fps(s: &str) -> Result<(u32, u32), Error> {
    let fr: format::FrameRate = s.parse()?;
    Ok((fr.num, fr.den))
}

/// Percentiles of a distribution, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of nanosecond values, sorting them in
    /// place; all zero when empty.
    pub fn of_ns(values: &mut [i64]) -> Percentiles {
        values.sort_unstable();
        Percentiles::of_sorted_ns(values)
    }

    /// As [`Percentiles::of_ns`] for already sorted values.
    pub fn of_sorted_ns(v: &[i64]) -> Percentiles {
        if v.is_empty() {
            return Percentiles::default();
        }
        let at = |q: f64| {
            let rank = (q * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1] as f64 / 1e6
        };
        Percentiles {
            p50: at(0.5),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: v[v.len() - 1] as f64 / 1e6,
        }
    }
}

/// What the sender measured about itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderReport {
    /// Packets sent.
    pub sent: u64,
    /// UDP payload bytes sent.
    pub bytes: u64,
    /// Packets the socket refused (counted, not retried).
    pub send_errors: u64,
    /// Bits per second over the sending span (first to last packet).
    pub achieved_bps: f64,
    /// Send time minus scheduled time, milliseconds.
    pub pacing_error_ms: Percentiles,
    /// Most packets sent within any 1 ms window.
    pub max_packets_per_ms: u64,
    /// Packets the schedule would put in 1 ms (for comparison).
    pub scheduled_packets_per_ms: f64,
}

/// Folds the sender's own send times into a [`SenderReport`].
#[derive(Debug, Clone, Default)]
pub struct SenderLog {
    errors_ns: Vec<i64>,
    window: std::collections::VecDeque<u64>,
    max_in_window: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    report: SenderReport,
}

impl SenderLog {
    /// Records one packet of `bytes` sent at `sent_ns` for slot `slot_ns`.
    pub fn record(&mut self, slot_ns: u64, sent_ns: u64, bytes: u64) {
        self.errors_ns
            .push(sent_ns.saturating_sub(slot_ns) as i64 - slot_ns.saturating_sub(sent_ns) as i64);
        self.window.push_back(sent_ns);
        while self
            .window
            .front()
            .is_some_and(|&t| t + 1_000_000 <= sent_ns)
        {
            self.window.pop_front();
        }
        self.max_in_window = self.max_in_window.max(self.window.len() as u64);
        self.first_ns.get_or_insert(sent_ns);
        self.last_ns = sent_ns;
        self.report.sent += 1;
        self.report.bytes += bytes;
    }

    /// Counts a packet the socket refused.
    pub fn error(&mut self) {
        self.report.send_errors += 1;
    }

    /// The report; `scheduled_pps` is the nominal packet rate.
    pub fn finish(mut self, scheduled_pps: f64) -> SenderReport {
        let mut r = self.report;
        let span = self.last_ns - self.first_ns.unwrap_or(self.last_ns);
        if span > 0 && r.sent > 1 {
            // n packets cover n-1 intervals: count the bytes after the first.
            let per = r.bytes as f64 / r.sent as f64;
            r.achieved_bps = (r.bytes as f64 - per) * 8.0 / (span as f64 / 1e9);
        }
        r.pacing_error_ms = Percentiles::of_ns(&mut self.errors_ns);
        r.max_packets_per_ms = self.max_in_window;
        r.scheduled_packets_per_ms = scheduled_pps / 1000.0;
        r
    }
}

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
    /// Sender → receiver: the stream is over.
    Done {
        /// What the sender measured.
        sender: SenderReport,
    },
    /// Server → client (forward mode): the receiver's results; per-packet
    /// record frames follow when they were asked for.
    Report {
        /// The receiver's analysis.
        receiver: Box<ReceiverReport>,
        /// Records that follow in binary frames.
        records: u64,
    },
    /// Either way: the peer gives up, with a reason.
    Abort {
        /// Why.
        message: String,
    },
}

/// Largest control frame body (one JSON message or one batch of records).
pub const MAX_FRAME_LEN: usize = 1 << 20;
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
            t => return Err(Error::ControlType(t)),
        };
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        if len > MAX_FRAME_LEN {
            return Err(Error::MessageTooLarge {
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
        serde_json::from_slice(body).map_err(|e| Error::ControlMalformed {
            line: e.line(),
            column: e.column(),
        })
    }
}

/// Frames carrying `records`, at most [`RECORDS_PER_FRAME`] per frame.
pub fn records_to_frames(records: &[Arrival]) -> Vec<Vec<u8>> {
    records
        .chunks(RECORDS_PER_FRAME)
        .map(|chunk| {
            let mut out = FrameHeader {
                kind: FrameKind::Records,
                len: chunk.len() * RECORD_LEN,
            }
            .to_bytes()
            .to_vec();
            for r in chunk {
                out.extend_from_slice(&r.seq.to_be_bytes());
                out.extend_from_slice(&r.send_ns.to_be_bytes());
                out.extend_from_slice(&r.recv_ns.to_be_bytes());
            }
            out
        })
        .collect()
}

/// Decodes a records frame body, appending to `out`.
pub fn records_from_bytes(body: &[u8], out: &mut Vec<Arrival>) -> Result<(), Error> {
    if body.len() % RECORD_LEN != 0 {
        return Err(Error::Truncated {
            needed: body.len().div_ceil(RECORD_LEN) * RECORD_LEN,
            got: body.len(),
        });
    }
    out.extend(body.chunks_exact(RECORD_LEN).map(|c| Arrival {
        seq: be64(&c[0..8]),
        send_ns: be64(&c[8..16]),
        recv_ns: be64(&c[16..24]),
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn data_round_trip_and_filler() {
        let h = DataHeader {
            session: 0xdead_beef_0000_0001,
            seq: 70_000,
            send_ns: 123_456_789,
            marker: true,
        };
        let mut buf = vec![0xaau8; 200];
        assert_eq!(h.write(&mut buf).unwrap(), DATA_HEADER_LEN);
        assert_eq!(Datagram::parse(&buf).unwrap(), Datagram::Data(h));
        let rtp = RtpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(rtp.sequence_number(), 70_000u64 as u16);
        assert!(h.write(&mut buf[..10]).is_err());
    }

    #[test]
    fn echo_round_trip_and_strangers() {
        let e = Echo {
            kind: EchoKind::Reply,
            session: 7,
            id: 9,
            send_ns: 11,
        };
        let mut buf = [0u8; ECHO_LEN];
        e.write(&mut buf).unwrap();
        assert_eq!(Datagram::parse(&buf).unwrap(), Datagram::Echo(e));
        // the echo magic is not RTP version 2
        assert!(RtpPacket::new_checked(&buf[..]).is_err());
        assert!(Datagram::parse(b"hello").is_err());
        assert!(Datagram::parse(&[0x80; 100]).is_err());
        let mut v = buf;
        v[4] = 9;
        assert_eq!(
            Datagram::parse(&v),
            Err(Error::ProbeVersion { got: 9, want: 1 })
        );
        v[4] = 1;
        v[5] = 77;
        assert!(Datagram::parse(&v).is_err());
    }

    #[test]
    fn cbr_schedule_hits_the_rate() {
        let s = params().validate().unwrap();
        let r = s.rate_bps(8800);
        assert!((r - 3.2e9).abs() / 3.2e9 < 1e-6, "{r}");
        // 3.2 Gbit/s of 8800-byte packets: 45454.5 packets/s for 1 s.
        assert!(
            (45_000..=45_500).contains(&s.total_packets),
            "{}",
            s.total_packets
        );
        let slow = TestParams {
            rate_bps: 100_000,
            packet_size: 1250,
            ..params()
        }
        .validate()
        .unwrap();
        assert_eq!(slow.total_packets, 10); // 10 packets/s
        assert_eq!(slow.pacer().slot(1), crate::Nanos::from_millis(100));
    }

    #[test]
    fn video_schedule_groups_frames() {
        let p = TestParams {
            rate_bps: 100_000_000,
            packet_size: 1000,
            fps: Some((50, 1)),
            ..params()
        };
        let s = p.validate().unwrap();
        assert_eq!(s.packets_per_frame, 250);
        assert_eq!(s.total_packets, 50 * 250);
        assert!(s.video_frames);
    }

    #[test]
    fn absurd_params_are_refused_with_their_value() {
        let e = TestParams {
            rate_bps: 5,
            ..params()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("= 5 "), "{e}");
        let e = TestParams {
            duration_ms: 3_600_000,
            rate_bps: 100_000_000_000,
            ..params()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::TestParam {
                    what: "packets in the test",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            TestParams {
                packet_size: 70_000,
                ..params()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn burst_window_defaults_and_is_bounded() {
        // A client that predates the field gets the default window.
        let mut v = serde_json::to_value(params()).unwrap();
        v.as_object_mut().unwrap().remove("burst_us");
        let old: TestParams = serde_json::from_value(v).unwrap();
        assert_eq!(old.burst_us, DEFAULT_BURST_US);
        assert!(
            TestParams {
                burst_us: MAX_BURST_US + 1,
                ..params()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn report_of_the_most_intervals_fits_a_control_frame() {
        // Found by the metrics_analyze fuzz target: an hour of 10 ms
        // intervals made a report of tens of MB that the client refused.
        let many = TestParams {
            rate_bps: 100_000,
            packet_size: 65_507,
            duration_ms: 3_600_000,
            interval_ms: 10,
            ..params()
        };
        let too_many = |p: TestParams| {
            matches!(
                p.validate(),
                Err(Error::TestParam {
                    what: "intervals in the test",
                    ..
                })
            )
        };
        assert!(too_many(many));
        // 100 ms of a 1/1001 fps video: one frame, its packets spread
        // over 1001 s.
        assert!(too_many(TestParams {
            duration_ms: 100,
            fps: Some((1, 1001)),
            packet_size: 9797,
            ..many
        }));
        let p = TestParams {
            interval_ms: 1000,
            packet_size: 1250, // 10 packets/s: every interval has some
            ..many
        };
        let s = p.validate().unwrap();
        // Every packet received, with long-winded floats everywhere.
        let arrivals: Vec<Arrival> = (0..s.total_packets)
            .map(|k| {
                let send = s.pacer().slot(k).as_nanos();
                Arrival {
                    seq: k,
                    send_ns: send + k % 7,
                    recv_ns: send + 1_234_567 + k % 13 * 1_111,
                }
            })
            .collect();
        let r = crate::probe::analysis::analyze(&arrivals, s.total_packets, &p, &s);
        assert_eq!(r.intervals.len() as u64, MAX_INTERVALS);
        let f = ControlMessage::Report {
            receiver: Box::new(r),
            records: 0,
        }
        .to_frame();
        let h = FrameHeader::parse(&f).unwrap();
        assert_eq!(h.len, f.len() - FRAME_HEADER_LEN);
        assert!(h.len < MAX_FRAME_LEN * 3 / 4, "{}", h.len);
    }

    #[test]
    fn control_frames() {
        let m = ControlMessage::Hello {
            version: PROTOCOL_VERSION,
            token: None,
            params: params(),
        };
        let f = m.to_frame();
        let h = FrameHeader::parse(&f).unwrap();
        assert_eq!(h.kind, FrameKind::Json);
        assert_eq!(ControlMessage::from_json(&f[5..5 + h.len]).unwrap(), m);
        assert!(matches!(
            FrameHeader::parse(&[b'J', 0xff, 0xff, 0xff, 0xff]),
            Err(Error::MessageTooLarge { .. })
        ));
        assert!(FrameHeader::parse(b"X\0\0\0\0").is_err());
        assert!(ControlMessage::from_json(b"{\"type\":\"hello\"}").is_err());
        let recs = vec![
            Arrival {
                seq: 1,
                send_ns: 2,
                recv_ns: 3,
            };
            RECORDS_PER_FRAME + 3
        ];
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
    fn sender_log_measures_bursts_and_error() {
        let mut l = SenderLog::default();
        // 10 packets 100 us apart, then 5 in one instant
        for i in 0..10 {
            l.record(i * 100_000, i * 100_000 + 1000, 100);
        }
        for _ in 0..5 {
            l.record(1_000_000, 1_500_000, 100);
        }
        let r = l.finish(10_000.0);
        assert_eq!(r.sent, 15);
        assert_eq!(r.max_packets_per_ms, 10); // 0.6..1.5 ms: 4 + 5 + ... within 1 ms
        assert_eq!(r.pacing_error_ms.max, 0.5);
        assert_eq!(r.pacing_error_ms.p50, 0.001);
    }
}
