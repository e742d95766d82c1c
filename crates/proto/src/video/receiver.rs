//! Datagrams in, frames and events out: the receive side of raw video as
//! a state machine.
//!
//! Per datagram: RTP validity, RFC 4175 headers checked against the format
//! (garbage is refused before it can touch any statistic), the SSRC
//! decision ([`SsrcLock`]), the extended sequence number (RFC 4175's ESN
//! where the sender fills it), duplicate and reorder classification, RFC
//! 3550 jitter, then reassembly by the [`Depacketizer`]. Frames leave as
//! [`Event::Frame`] in stream order, with runs of frames of which nothing
//! arrived as [`Event::Lost`]; a frame limit is accounted here too, so a
//! driver only moves datagrams in and frames out. Frame buffers are
//! recycled ([`Receiver::recycle`]): nothing is allocated per packet.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use super::format::{FrameRate, VIDEO_CLOCK_RATE, VideoFormat};
use super::st2110_20::{Depacketizer, Frame, Output};
use crate::rtp::RtpPacket;
use crate::stats::{Arrival, Jitter, SeqExtender, SequenceTracker};
use crate::units::{MediaTime, Nanos, Ssrc};

/// What is recorded in place of a frame that arrived with bytes missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Incomplete {
    /// Nothing: a recording holds complete frames only.
    #[default]
    Drop,
    /// The frame, its missing bytes zero (each buffer is zeroed before
    /// use, one memset a frame).
    Keep,
    /// The last complete frame, also in place of lost frames, so a
    /// recording keeps its timing.
    RepeatLast,
}

/// What a recorder writes for one frame slot under an [`Incomplete`] policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The frame's own bytes.
    Frame,
    /// The last complete frame's bytes (nothing if there was none yet).
    LastComplete,
    /// Nothing.
    Nothing,
}

impl Incomplete {
    /// The names on the command line, in order.
    pub const NAMES: [&'static str; 3] = ["drop", "keep", "repeat-last"];

    /// What to record for a frame handed out complete or not.
    pub fn record(self, complete: bool) -> Record {
        match (complete, self) {
            (true, _) | (false, Incomplete::Keep) => Record::Frame,
            (false, Incomplete::Drop) => Record::Nothing,
            (false, Incomplete::RepeatLast) => Record::LastComplete,
        }
    }

    /// What to record for each frame of which nothing arrived.
    pub fn record_lost(self) -> Record {
        match self {
            Incomplete::RepeatLast => Record::LastComplete,
            _ => Record::Nothing,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Incomplete::Drop => Self::NAMES[0],
            Incomplete::Keep => Self::NAMES[1],
            Incomplete::RepeatLast => Self::NAMES[2],
        }
    }
}

impl fmt::Display for Incomplete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown [`Incomplete`] policy name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown incomplete-frame policy: use drop, keep or repeat-last")]
pub struct UnknownPolicy;

impl FromStr for Incomplete {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Incomplete, UnknownPolicy> {
        [Incomplete::Drop, Incomplete::Keep, Incomplete::RepeatLast]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or(UnknownPolicy)
    }
}

/// Which SSRC is the stream. Today the first SSRC heard is, for good:
/// anything else on the port is someone else's and must not corrupt
/// frames. (Kept in one small type so that stream selection, or following
/// a sender that restarts with a new SSRC, replaces only this.)
#[derive(Debug, Clone, Copy, Default)]
pub struct SsrcLock {
    stream: Option<Ssrc>,
}

/// The [`SsrcLock`]'s verdict on one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The first packet of the stream: it is locked on this SSRC now.
    First,
    /// A packet of the stream.
    Stream,
    /// A packet of another stream, to be dropped and counted.
    Foreign,
}

impl SsrcLock {
    /// Decides on one packet's SSRC.
    pub fn admit(&mut self, ssrc: Ssrc) -> Admission {
        match self.stream {
            None => {
                self.stream = Some(ssrc);
                Admission::First
            }
            Some(s) if s == ssrc => Admission::Stream,
            Some(_) => Admission::Foreign,
        }
    }

    /// The stream's SSRC, once a packet was admitted.
    pub fn stream(&self) -> Option<Ssrc> {
        self.stream
    }
}

/// How a [`Receiver`] is set up.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The format frames are assembled in.
    pub format: VideoFormat,
    /// Frame rate, when known, to number frames and count lost ones
    /// (otherwise learned from the first two frames).
    pub rate: Option<FrameRate>,
    /// What an incomplete frame is recorded as (sets zero-filling).
    pub incomplete: Incomplete,
    /// Account for frames `0..n` only (complete, incomplete or lost).
    pub frame_limit: Option<u64>,
}

/// One datagram as the socket delivered it.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Its bytes (one RTP packet).
    pub bytes: &'a [u8],
    /// Who sent it.
    pub from: Option<SocketAddr>,
}

/// What the receiver has to say, in stream order.
#[derive(Debug)]
pub enum Event {
    /// The stream's first packet: SSRC and sender.
    Stream {
        /// The SSRC the receiver locked on.
        ssrc: Ssrc,
        /// Where it came from.
        from: Option<SocketAddr>,
    },
    /// A frame, complete or not; hand its buffer back with
    /// [`Receiver::recycle`].
    Frame(Frame),
    /// Frames `first..first + count` of which no packet arrived.
    Lost {
        /// Index of the first.
        first: u64,
        /// How many.
        count: u64,
    },
    /// At [`Receiver::finish`]: frames `first..first + count` that the
    /// frame limit expected but the stream ended before.
    Missing {
        /// Index of the first.
        first: u64,
        /// How many.
        count: u64,
    },
}

/// Counters of a [`Receiver`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames handed out with every byte (within the frame limit).
    pub frames_complete: u64,
    /// Frames handed out with bytes missing.
    pub frames_incomplete: u64,
    /// Frames of which nothing arrived, and frames missing at the end.
    pub frames_lost: u64,
    /// Distinct packets of the stream.
    pub packets_received: u64,
    /// Packets missing from the first..highest sequence range.
    pub packets_lost: u64,
    /// Packets behind the highest sequence number seen.
    pub packets_reordered: u64,
    /// Copies, dropped.
    pub packets_duplicate: u64,
    /// Not RTP, or RFC 4175 headers invalid for the format.
    pub packets_malformed: u64,
    /// For frames already handed out, or too old to classify.
    pub packets_late: u64,
    /// Of another SSRC than the stream's.
    pub packets_foreign: u64,
    /// Bytes of the stream's distinct packets (RTP headers included).
    pub bytes: u64,
    /// Arrival of the first datagram of any kind.
    pub first_at: Option<Nanos>,
    /// Arrival of the last datagram of any kind.
    pub last_at: Option<Nanos>,
    /// RFC 3550 interarrival jitter.
    pub jitter: Nanos,
}

/// Turns datagrams into frames and events (see the module docs).
pub struct Receiver {
    depack: Depacketizer,
    ssrc: SsrcLock,
    ext: SeqExtender,
    tracker: SequenceTracker,
    jitter: Jitter,
    frame_limit: Option<u64>,
    accounted: u64,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Receiver {
    /// A receiver expecting `config.format`.
    pub fn new(config: Config) -> Receiver {
        let mut depack = Depacketizer::new(config.format, config.rate.map(FrameRate::period_ticks));
        depack.set_zero_fill(config.incomplete == Incomplete::Keep);
        Receiver {
            depack,
            ssrc: SsrcLock::default(),
            ext: SeqExtender::default(),
            tracker: SequenceTracker::new(),
            jitter: Jitter::default(),
            frame_limit: config.frame_limit,
            accounted: 0,
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Takes one datagram that arrived at `now`. Nothing it holds is an
    /// error: what cannot be used is counted and dropped.
    pub fn handle_input(&mut self, now: Nanos, datagram: Datagram<'_>) {
        self.stats.first_at.get_or_insert(now);
        self.stats.last_at = Some(now);
        let Ok(pkt) = RtpPacket::new_checked(datagram.bytes) else {
            self.stats.packets_malformed += 1;
            return;
        };
        // Garbage is refused before it can touch the statistics (the
        // depacketizer counts it malformed).
        let Ok(prepared) = self.depack.prepare(&pkt) else {
            return;
        };
        let ssrc = Ssrc(pkt.ssrc());
        match self.ssrc.admit(ssrc) {
            Admission::Foreign => {
                self.stats.packets_foreign += 1;
                return;
            }
            Admission::First => self.events.push_back(Event::Stream {
                ssrc,
                from: datagram.from,
            }),
            Admission::Stream => {}
        }
        // `prepare` checked that the payload holds the ESN and an SRD.
        let esn = pkt
            .payload()
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]));
        let seq = self.ext.extend(pkt.sequence_number(), esn);
        if matches!(
            self.tracker.record(seq),
            Arrival::Duplicate | Arrival::TooOld
        ) {
            return;
        }
        self.stats.bytes += datagram.bytes.len() as u64;
        let ticks = MediaTime::nanos_to_ticks(now) as i64;
        self.jitter.record(ticks, pkt.timestamp());
        // A late packet is counted by the depacketizer.
        let _ = self.depack.commit(prepared);
        self.drain();
    }

    /// Moves the depacketizer's output into events, within the limit.
    fn drain(&mut self) {
        while let Some(o) = self.depack.poll() {
            match o {
                Output::Frame(f) if self.within_limit(f.index) => {
                    self.accounted += 1;
                    if f.complete {
                        self.stats.frames_complete += 1;
                    } else {
                        self.stats.frames_incomplete += 1;
                    }
                    self.events.push_back(Event::Frame(f));
                }
                Output::Frame(f) => self.depack.recycle(f.data),
                Output::Lost { first, count } => {
                    let count = match self.frame_limit {
                        Some(n) => count.min(n.saturating_sub(first)),
                        None => count,
                    };
                    if count > 0 {
                        self.accounted += count;
                        self.stats.frames_lost += count;
                        self.events.push_back(Event::Lost { first, count });
                    }
                }
            }
        }
    }

    fn within_limit(&self, index: u64) -> bool {
        self.frame_limit.is_none_or(|n| index < n)
    }

    /// Ends the stream: hands out every frame still being assembled, then
    /// the frames the limit expected that never came.
    pub fn finish(&mut self) {
        self.depack.flush();
        self.drain();
        if let Some(n) = self.frame_limit
            && self.accounted < n
        {
            let first = self.depack.last_index().map_or(0, |i| i + 1);
            let count = n - self.accounted;
            self.accounted = n;
            self.stats.frames_lost += count;
            self.events.push_back(Event::Missing { first, count });
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Holds an incomplete frame until `frames` newer frames have begun
    /// (at least one), instead of until the next frame completes: the
    /// path-differential tolerance of an ST 2022-7 receiver, whose second
    /// leg may bring a missing packet that many frame periods late.
    pub fn set_tolerance(&mut self, frames: usize) {
        self.depack.set_in_flight(frames.max(1) + 1);
        self.depack.set_patient(true);
    }

    /// Hands a frame buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.depack.recycle(buf);
    }

    /// Whether every frame of the limit is accounted for.
    pub fn is_done(&self) -> bool {
        self.frame_limit.is_some_and(|n| self.accounted >= n)
    }

    /// The stream's SSRC, once known.
    pub fn ssrc(&self) -> Option<Ssrc> {
        self.ssrc.stream()
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        let seq = self.tracker.counters();
        let depack = self.depack.stats();
        Stats {
            packets_received: seq.received,
            packets_lost: self.tracker.lost(),
            packets_reordered: seq.reordered,
            packets_duplicate: seq.duplicates,
            packets_malformed: self.stats.packets_malformed + depack.malformed,
            packets_late: depack.late + seq.too_old,
            jitter: Nanos::from_secs_f64(self.jitter.value() / f64::from(VIDEO_CLOCK_RATE)),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::ExtSeq;
    use crate::video::format::PixelFormat;
    use crate::video::st2110_20::Packetizer;

    fn format() -> VideoFormat {
        VideoFormat::new(32, 4, PixelFormat::Rgb24).unwrap()
    }

    fn frame(seed: u8) -> Vec<u8> {
        (0..format().frame_bytes())
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    /// Packets of frames `0..n` at 30 fps, with SSRC `ssrc`.
    fn stream(n: u64, ssrc: u32) -> Vec<Vec<u8>> {
        let p = Packetizer::new(format(), 100, Ssrc(ssrc)).unwrap();
        let rate = FrameRate::new(30, 1).unwrap();
        let ppf = p.packets_per_frame() as u64;
        (0..n)
            .flat_map(|f| {
                p.frame_packets(
                    &frame(f as u8),
                    ExtSeq(f * ppf),
                    MediaTime(rate.rtp_timestamp(f)),
                )
                .unwrap()
            })
            .collect()
    }

    fn receiver(incomplete: Incomplete, limit: Option<u64>) -> Receiver {
        Receiver::new(Config {
            format: format(),
            rate: Some(FrameRate::new(30, 1).unwrap()),
            incomplete,
            frame_limit: limit,
        })
    }

    fn feed(r: &mut Receiver, packets: &[Vec<u8>]) -> Vec<Event> {
        for (k, p) in packets.iter().enumerate() {
            let d = Datagram {
                bytes: p,
                from: None,
            };
            r.handle_input(Nanos::from_micros(100 * k as u64), d);
        }
        std::iter::from_fn(|| r.poll_event()).collect()
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Stream { ssrc, .. } => format!("ssrc{}", ssrc.0),
                Event::Frame(f) if f.complete => format!("f{}", f.index),
                Event::Frame(f) => format!("f{}!", f.index),
                Event::Lost { first, count } => format!("lost{first}+{count}"),
                Event::Missing { first, count } => format!("missing{first}+{count}"),
            })
            .collect()
    }

    #[test]
    fn frames_come_out_byte_identical() {
        let mut r = receiver(Incomplete::Drop, None);
        let mut ev = feed(&mut r, &stream(3, 5));
        r.finish();
        ev.extend(std::iter::from_fn(|| r.poll_event()));
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1", "f2"]);
        for e in &ev {
            if let Event::Frame(f) = e {
                assert!(f.data == frame(f.index as u8));
            }
        }
        let s = r.stats();
        assert_eq!(
            (s.packets_received, s.packets_lost, s.frames_complete),
            (stream(3, 5).len() as u64, 0, 3)
        );
        assert_eq!(s.first_at, Some(Nanos::ZERO));
    }

    #[test]
    fn foreign_malformed_duplicate_and_reordered_are_counted_exactly() {
        let pk = stream(2, 5);
        let mut bad = pk[1].clone();
        bad[12 + 2 + 2] = 0x7f; // line 32512: outside the frame
        let mut script = vec![
            b"no rtp".to_vec(),
            pk[0].clone(),
            stream(1, 6)[0].clone(),
            bad,
        ];
        script.extend([pk[2].clone(), pk[1].clone(), pk[3].clone(), pk[3].clone()]);
        script.extend_from_slice(&pk[4..]);
        let mut r = receiver(Incomplete::Drop, Some(2));
        let ev = feed(&mut r, &script);
        // The first SSRC heard is the stream; the other one is foreign.
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1"]);
        let s = r.stats();
        assert_eq!(
            (
                s.packets_received,
                s.packets_lost,
                s.packets_reordered,
                s.packets_duplicate
            ),
            (pk.len() as u64, 0, 1, 1)
        );
        assert_eq!((s.packets_foreign, s.packets_malformed), (1, 2));
        assert!(r.is_done());
    }

    #[test]
    fn a_lost_packet_leaves_a_zeroed_hole_when_kept() {
        let mut pk = stream(3, 5);
        let ppf = pk.len() / 3;
        pk.remove(ppf + 1); // frame 1, packet 1
        let mut r = receiver(Incomplete::Keep, None);
        // Recycled buffers are zeroed too: hand frame 0's back first.
        let mut ev = feed(&mut r, &pk[..ppf]);
        for e in ev.drain(..) {
            if let Event::Frame(f) = e {
                r.recycle(f.data);
            }
        }
        ev = feed(&mut r, &pk[ppf..]);
        r.finish();
        ev.extend(std::iter::from_fn(|| r.poll_event()));
        assert_eq!(kinds(&ev), ["f1!", "f2"]);
        let s = r.stats();
        assert_eq!(
            (s.packets_lost, s.frames_incomplete, s.frames_complete),
            (1, 1, 2)
        );
        let Event::Frame(f) = &ev[0] else {
            unreachable!()
        };
        let hole = Packetizer::new(format(), 100, Ssrc(5))
            .unwrap()
            .data_range(1);
        let want = frame(1);
        for (i, b) in f.data.iter().enumerate() {
            assert_eq!(*b, if hole.contains(&i) { 0 } else { want[i] }, "byte {i}");
        }
    }

    #[test]
    fn lost_frames_and_the_limit() {
        let all = stream(6, 5);
        let ppf = all.len() / 6;
        // Frames 2 and 3 never arrive; the limit is 8, the stream ends at 6.
        let pk: Vec<Vec<u8>> = all
            .iter()
            .enumerate()
            .filter(|(k, _)| !(2..4).contains(&(k / ppf)))
            .map(|(_, p)| p.clone())
            .collect();
        let mut r = receiver(Incomplete::RepeatLast, Some(8));
        let mut ev = feed(&mut r, &pk);
        assert!(!r.is_done());
        r.finish();
        ev.extend(std::iter::from_fn(|| r.poll_event()));
        assert_eq!(
            kinds(&ev),
            ["ssrc5", "f0", "f1", "lost2+2", "f4", "f5", "missing6+2"]
        );
        assert_eq!(r.stats().frames_lost, 4);
        assert!(r.is_done());
        // A limit below the stream cuts it: frames past it are not events.
        let mut r = receiver(Incomplete::Drop, Some(1));
        let ev = feed(&mut r, &all);
        assert_eq!(kinds(&ev), ["ssrc5", "f0"]);
    }

    #[test]
    fn a_tolerant_receiver_waits_for_a_copy_frames_behind() {
        // Packet 1 of frame 1 comes after all of frame 2, as a second
        // ST 2022-7 leg running behind would bring it.
        let mut pk = stream(4, 5);
        let ppf = pk.len() / 4;
        let late = pk.remove(ppf + 1);
        pk.insert(3 * ppf - 1, late);
        let mut strict = receiver(Incomplete::Keep, None);
        let mut ev = feed(&mut strict, &pk);
        strict.finish();
        ev.extend(std::iter::from_fn(|| strict.poll_event()));
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1!", "f2", "f3"]);
        let mut tolerant = receiver(Incomplete::Keep, None);
        tolerant.set_tolerance(2);
        let mut ev = feed(&mut tolerant, &pk);
        tolerant.finish();
        ev.extend(std::iter::from_fn(|| tolerant.poll_event()));
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1", "f2", "f3"]);
        for e in &ev {
            if let Event::Frame(f) = e {
                assert!(f.data == frame(f.index as u8));
            }
        }
    }

    #[test]
    fn jitter_is_zero_for_a_steady_stream() {
        let p = stream(10, 5);
        let ppf = p.len() / 10;
        let mut r = receiver(Incomplete::Drop, None);
        // Every frame's packets arrive exactly one period apart.
        for (k, pk) in p.iter().enumerate() {
            let f = (k / ppf) as u64;
            let at = Nanos((f * 1_000_000_000).div_ceil(30) + 1_000 * (k % ppf) as u64);
            r.handle_input(
                at,
                Datagram {
                    bytes: pk,
                    from: None,
                },
            );
        }
        assert_eq!(r.stats().jitter, Nanos::ZERO);
    }

    #[test]
    fn policies_say_what_to_record() {
        assert_eq!(Incomplete::Drop.record(false), Record::Nothing);
        assert_eq!(Incomplete::Keep.record(false), Record::Frame);
        assert_eq!(Incomplete::RepeatLast.record(false), Record::LastComplete);
        assert_eq!(Incomplete::RepeatLast.record_lost(), Record::LastComplete);
        assert_eq!(Incomplete::Keep.record_lost(), Record::Nothing);
        assert_eq!("repeat-last".parse(), Ok(Incomplete::RepeatLast));
        assert_eq!("x".parse::<Incomplete>(), Err(UnknownPolicy));
    }
}
