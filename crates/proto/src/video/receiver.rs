//! Datagrams in, frames and events out: the receive side of raw video as
//! a state machine.
//!
//! Per datagram: RTP validity, RFC 4175 headers checked against the format
//! (garbage is refused before it can touch any statistic), the SSRC
//! decision ([`Selector`]: probation, source filter, takeover), the extended sequence number (RFC 4175's ESN
//! where the sender fills it), duplicate and reorder classification, RFC
//! 3550 jitter, then reassembly by the [`Depacketizer`]. Frames leave as
//! [`Event::Frame`] in stream order, with runs of frames of which nothing
//! arrived as [`Event::Lost`]; a frame limit is accounted here too, so a
//! driver only moves datagrams in and frames out. Frame buffers are
//! recycled ([`Receiver::recycle`]): nothing is allocated per packet.
//!
//! # Polling order
//!
//! The receiver sends nothing and sets no timer. For each batch of
//! datagrams the driver calls [`Receiver::handle_input`]`(now, ..)` per
//! datagram, `now` being its kernel receive stamp, then takes every
//! [`Receiver::poll_event`] (writing frames out and handing their buffers
//! back with [`Receiver::recycle`]). A frame is never held back for a
//! timer: it leaves when a later frame's packets show it is over.

use std::collections::VecDeque;
use std::fmt;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::str::FromStr;

use super::format::{FrameRate, VIDEO_CLOCK_RATE, VideoFormat};
use super::landing::{Landed, Landing, LandingStats, Plan};
use super::selector::{Admission, HeldPacket, Lock, RivalNotice, Selector, SelectorConfig};
use super::st2110_20::{Depacketizer, Frame, Output, Prepared};
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
    /// A stream was locked on (the first, or a followed takeover: a new
    /// take, whose frames are numbered on after the last one's).
    Stream {
        /// The SSRC the receiver locked on.
        ssrc: Ssrc,
        /// Where it came from.
        from: Option<SocketAddr>,
        /// Its first sequence number.
        first_seq: u16,
        /// The stream it replaces, on a takeover.
        replaces: Option<Ssrc>,
        /// Index its frames are numbered from.
        first_frame: u64,
    },
    /// Another SSRC behaves like a stream on the port and is not followed:
    /// its packets are counted as foreign. With `took_over`, the stream
    /// had gone silent, so this is a restarted sender a driver should not
    /// ignore; else two senders are talking at once.
    Rival {
        /// The other SSRC.
        ssrc: Ssrc,
        /// Where it came from.
        from: Option<SocketAddr>,
        /// The stream's SSRC.
        stream: Ssrc,
        /// The stream had gone silent.
        took_over: bool,
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
    /// Not the stream: another SSRC, a stray, or outside the source
    /// filter.
    pub packets_foreign: u64,
    /// Streams locked on: 1, plus one per followed takeover.
    pub takes: u32,
    /// Bytes of the stream's distinct packets (RTP headers included).
    pub bytes: u64,
    /// Arrival of the first datagram of any kind.
    pub first_at: Option<Nanos>,
    /// Arrival of the last datagram of any kind.
    pub last_at: Option<Nanos>,
    /// RFC 3550 interarrival jitter.
    pub jitter: Nanos,
}

/// The stream choice for `config`. The stream must be silent for three
/// frame periods (at least 20 ms; 100 ms while the rate is unknown)
/// before another SSRC takes over: a restarted sender is silent far
/// longer, a paced one never is. Four frames of a new sender are held
/// meanwhile, so a followed takeover loses none of them.
fn selection(config: &Config, source: Option<std::net::IpAddr>, follow: bool) -> SelectorConfig {
    let silence = config.rate.map_or(Nanos::from_millis(100), |r| {
        Nanos::from_secs_f64(3.0 / r.as_f64()).max(Nanos::from_millis(20))
    });
    SelectorConfig {
        source,
        silence,
        follow,
        held_bytes: 4 * config.format.frame_bytes() + (64 << 10),
    }
}

/// One stream's reassembly state: a takeover starts a new one.
struct Take {
    depack: Depacketizer,
    ext: SeqExtender,
    tracker: SequenceTracker,
    jitter: Jitter,
    /// Recording index of this take's frame 0.
    base: u64,
}

impl Take {
    fn new(config: &Config, base: u64) -> Take {
        let mut depack = Depacketizer::new(config.format, config.rate.map(FrameRate::period_ticks));
        depack.set_zero_fill(config.incomplete == Incomplete::Keep);
        Take {
            depack,
            ext: SeqExtender::default(),
            tracker: SequenceTracker::new(),
            jitter: Jitter::default(),
            base,
        }
    }

    /// See [`Receiver::set_tolerance`].
    fn tolerate(&mut self, frames: usize) {
        if frames > 0 {
            self.depack.set_in_flight(frames + 1);
            self.depack.set_patient(true);
        }
    }
}

/// Counters of the takes before the current one.
#[derive(Debug, Clone, Copy, Default)]
struct Carried {
    received: u64,
    lost: u64,
    reordered: u64,
    duplicates: u64,
    malformed: u64,
    late: u64,
}

/// Turns datagrams into frames and events (see the module docs).
pub struct Receiver {
    config: Config,
    take: Take,
    /// Frames an incomplete frame waits for (0: the default rule).
    tolerance: usize,
    selector: Selector,
    carried: Carried,
    /// Recording index after the last frame handed out or lost.
    next_index: u64,
    frame_limit: Option<u64>,
    accounted: u64,
    events: VecDeque<Event>,
    stats: Stats,
    /// Reads planned into frame memory ([`Receiver::land`]), once asked for.
    landing: Option<Box<Landing>>,
}

impl Receiver {
    /// A receiver expecting `config.format`.
    pub fn new(config: Config) -> Receiver {
        Receiver {
            config,
            take: Take::new(&config, 0),
            tolerance: 0,
            selector: Selector::new(selection(&config, None, false)),
            carried: Carried::default(),
            next_index: 0,
            frame_limit: config.frame_limit,
            accounted: 0,
            events: VecDeque::new(),
            stats: Stats::default(),
            landing: None,
        }
    }

    /// Takes only datagrams from `source` as the stream (an SDP's source
    /// filter), and with `follow` follows a takeover as a new take
    /// instead of reporting it ([`Event::Rival`]).
    pub fn with_selection(mut self, source: Option<std::net::IpAddr>, follow: bool) -> Receiver {
        self.selector = Selector::new(selection(&self.config, source, follow));
        self
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
        // Garbage is refused before it can touch the statistics or the
        // stream choice (the depacketizer counts it malformed).
        let Ok(prepared) = self.take.depack.prepare(&pkt) else {
            return;
        };
        let ssrc = Ssrc(pkt.ssrc());
        let seq = pkt.sequence_number();
        match self
            .selector
            .admit(now, ssrc, seq, datagram.from, datagram.bytes)
        {
            Admission::Stream => self.commit(now, &pkt, prepared, datagram.bytes),
            Admission::Foreign | Admission::Held => {}
            Admission::Locked(lock) => self.lock(lock),
        }
        self.rivals();
    }

    /// Plans reads into frame memory from now on (see
    /// [`crate::video::landing`]): [`Receiver::land`] works without it
    /// too, but only learns the stream's layout once asked to.
    pub fn enable_landing(&mut self) {
        self.landing.get_or_insert_with(|| Box::new(Landing::new()));
    }

    /// Counters of the reads planned into frame memory (zeros until
    /// [`Receiver::enable_landing`]).
    pub fn landing_stats(&self) -> LandingStats {
        self.landing
            .as_deref()
            .map(Landing::stats)
            .unwrap_or_default()
    }

    /// One read planned into frame memory. `read` fills the slices it is
    /// given in order, as `recvmsg` fills its iovecs with one datagram or
    /// GRO batch, and says what came (`None`: nothing to read). Packets
    /// that landed where the plan put them are booked in place; the rest
    /// are taken as [`Receiver::handle_input`] takes datagrams. Returns
    /// what `read` returned.
    pub fn land<E>(
        &mut self,
        read: impl FnOnce(&mut [IoSliceMut<'_>]) -> Result<Option<Landed>, E>,
    ) -> Result<Option<Landed>, E> {
        let landing = self.landing.get_or_insert_with(|| Box::new(Landing::new()));
        let plan = landing.plan(self.selector.stream());
        let region = plan.map(|p| landing.region(&p));
        let target = match (plan, region) {
            (Some(p), Some(r)) => self
                .take
                .depack
                .landing_region(p.timestamp, r)
                .map(|r| (p, r)),
            _ => None,
        };
        let plan = target.as_ref().map(|(p, _)| *p);
        let mut slices = landing.slices(plan.as_ref(), target.map(|(_, r)| r));
        let Some(landed) = read(&mut slices)? else {
            return Ok(None);
        };
        drop(slices);
        self.settle(plan, &landed);
        Ok(Some(landed))
    }

    /// Books what one planned read brought (see [`Receiver::land`]).
    fn settle(&mut self, plan: Option<Plan>, landed: &Landed) {
        let Some(landing) = self.landing.as_deref_mut() else {
            return;
        };
        let stream = plan.is_some_and(|_| {
            self.selector
                .stream()
                .is_some_and(|s| self.selector.is_stream(s, landed.from))
        });
        landing.note_read(plan.is_some());
        let (count, at) = match &plan {
            Some(p) if stream => landing.verify(p, landed),
            _ => (0, 0),
        };
        // What did not land as planned is gathered first: booking the
        // packets that did may zero gaps of their frame (coverage).
        if at < landed.len || landed.len == 0 {
            let region = plan.and_then(|p| {
                let r = landing.region(&p);
                self.take.depack.region(p.timestamp, r)
            });
            landing.gather(plan.as_ref(), region, at, landed.len);
        }
        if let Some(p) = &plan {
            for j in 0..count {
                self.commit_landed(p, j, landed);
            }
        }
        if at < landed.len || landed.len == 0 {
            self.copy_gathered(landed);
        }
    }

    /// The datagrams of a read that did not land as planned, through
    /// the copying path.
    fn copy_gathered(&mut self, landed: &Landed) {
        let Some(landing) = self.landing.as_deref_mut() else {
            return;
        };
        let segment = if landed.segment == 0 {
            landed.len
        } else {
            landed.segment
        };
        let gathered = landing.take_gathered(segment);
        // A zero-length datagram is one (empty) datagram, counted malformed.
        let empty = gathered.is_empty().then_some(&gathered[..]);
        for bytes in gathered.chunks(segment.max(1)).chain(empty) {
            let from = landed.from;
            self.handle_input(landed.at, Datagram { bytes, from });
        }
        if let Some(l) = self.landing.as_deref_mut() {
            l.put_gathered(gathered);
        }
    }

    /// Books packet `j` of `plan`, which landed in place and verified,
    /// as [`Receiver::handle_input`] and `commit` book a copied one.
    fn commit_landed(&mut self, plan: &Plan, j: usize, landed: &Landed) {
        let Some(v) = self.landing.as_deref().and_then(|l| l.verified(plan, j)) else {
            return;
        };
        let now = landed.at;
        self.stats.first_at.get_or_insert(now);
        self.stats.last_at = Some(now);
        let Some(ssrc) = self.selector.stream() else {
            return;
        };
        // Checked by `settle`: the stream's SSRC, from an allowed source.
        if !matches!(
            self.selector
                .admit(now, ssrc, v.wire as u16, landed.from, &[]),
            Admission::Stream
        ) {
            return;
        }
        self.rivals();
        let t = &mut self.take;
        let seq = t.ext.extend(v.wire as u16, Some((v.wire >> 16) as u16));
        if matches!(t.tracker.record(seq), Arrival::Duplicate | Arrival::TooOld) {
            return;
        }
        self.stats.bytes += v.len as u64;
        let ticks = MediaTime::nanos_to_ticks(now) as i64;
        t.jitter.record(ticks, v.timestamp);
        if t.depack.commit_in_place(v.timestamp, v.range).is_ok()
            && let Some(l) = self.landing.as_deref_mut()
        {
            l.advance(plan, j);
        }
        self.drain();
    }

    fn rivals(&mut self) {
        while let Some(RivalNotice { rival, took_over }) = self.selector.poll_rival() {
            self.events.push_back(Event::Rival {
                ssrc: rival.ssrc,
                from: rival.from,
                stream: rival.stream,
                took_over,
            });
        }
    }

    /// A stream was locked on: a followed takeover closes the last take
    /// first; the held packets go in, in arrival order.
    fn lock(&mut self, lock: Lock) {
        if lock.replaces.is_some() {
            self.take.depack.flush();
            self.drain();
            self.carry();
            let spares = self.take.depack.take_spares();
            let lender = self.take.depack.take_lender();
            self.take = Take::new(&self.config, self.next_index);
            self.take.tolerate(self.tolerance);
            for buf in spares {
                self.take.depack.recycle(buf);
            }
            if let Some(l) = lender {
                self.take.depack.set_lender(l);
            }
            if let Some(l) = self.landing.as_deref_mut() {
                l.reset();
            }
        }
        self.events.push_back(Event::Stream {
            ssrc: lock.ssrc,
            from: lock.from,
            first_seq: lock.first_seq,
            replaces: lock.replaces,
            first_frame: self.take.base,
        });
        for HeldPacket { at, bytes, .. } in lock.held {
            let Ok(pkt) = RtpPacket::new_checked(&bytes[..]) else {
                continue;
            };
            if let Ok(prepared) = self.take.depack.prepare(&pkt) {
                self.commit(at, &pkt, prepared, &bytes);
            }
        }
    }

    /// Adds the finished take's counters to the carried ones.
    fn carry(&mut self) {
        let t = &self.take;
        let (seq, depack) = (t.tracker.counters(), t.depack.stats());
        let c = &mut self.carried;
        c.received += seq.received;
        c.lost += t.tracker.lost();
        c.reordered += seq.reordered;
        c.duplicates += seq.duplicates;
        c.malformed += depack.malformed;
        c.late += depack.late + seq.too_old;
    }

    /// One packet of the stream (`bytes`): sequence, jitter, reassembly.
    fn commit(&mut self, now: Nanos, pkt: &RtpPacket<&[u8]>, prepared: Prepared<'_>, bytes: &[u8]) {
        let t = &mut self.take;
        // `prepare` checked that the payload holds the ESN and an SRD.
        let esn = pkt
            .payload()
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]));
        let seq = t.ext.extend(pkt.sequence_number(), esn);
        match t.tracker.record(seq) {
            Arrival::Duplicate | Arrival::TooOld => return,
            // The newest packet says which one comes next.
            Arrival::InOrder | Arrival::Ahead { .. } => {
                if let Some(l) = self.landing.as_deref_mut() {
                    l.learn(self.config.format, Ssrc(pkt.ssrc()), bytes);
                }
            }
            Arrival::Reordered => {}
        }
        let len = bytes.len();
        self.stats.bytes += len as u64;
        let ticks = MediaTime::nanos_to_ticks(now) as i64;
        t.jitter.record(ticks, pkt.timestamp());
        // A late packet is counted by the depacketizer.
        let _ = t.depack.commit(prepared);
        self.drain();
    }

    /// Moves the depacketizer's output into events, within the limit,
    /// numbered in the recording (after earlier takes' frames).
    fn drain(&mut self) {
        let base = self.take.base;
        while let Some(o) = self.take.depack.poll() {
            match o {
                Output::Frame(mut f) if self.within_limit(f.index + base) => {
                    f.index += base;
                    self.next_index = self.next_index.max(f.index + 1);
                    self.accounted += 1;
                    if f.complete {
                        self.stats.frames_complete += 1;
                    } else {
                        self.stats.frames_incomplete += 1;
                    }
                    self.events.push_back(Event::Frame(f));
                }
                Output::Frame(f) => self.take.depack.recycle(f.data),
                Output::Lost { first, count } => {
                    let first = first + base;
                    self.next_index = self.next_index.max(first + count);
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
        self.take.depack.flush();
        self.drain();
        if let Some(n) = self.frame_limit
            && self.accounted < n
        {
            let first = self.next_index;
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
        self.tolerance = frames.max(1);
        self.take.tolerate(self.tolerance);
    }

    /// Makes up to `frames` frame buffers before the stream starts (see
    /// [`crate::video::Depacketizer::warm`]); call it after
    /// [`Receiver::set_tolerance`], which sets how many are kept.
    pub fn warm(&mut self, frames: usize) {
        self.take.depack.warm(frames);
    }

    /// Writes frames in memory `lender` lends from the next frame on (see
    /// [`crate::video::st2110_20::Lender`]); such frames come out with
    /// their bytes in `Frame::lent`, not `Frame::data`.
    pub fn set_lender(&mut self, lender: Box<dyn crate::video::st2110_20::Lender>) {
        self.take.depack.set_lender(lender);
    }

    /// Hands a frame buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.take.depack.recycle(buf);
    }

    /// Whether every frame of the limit is accounted for.
    pub fn is_done(&self) -> bool {
        self.frame_limit.is_some_and(|n| self.accounted >= n)
    }

    /// The stream's SSRC, once known.
    pub fn ssrc(&self) -> Option<Ssrc> {
        self.selector.stream()
    }

    /// What the current take received, as a receiver report tells its
    /// sender (RFC 3550 §6.4.2); `None` before its first packet.
    pub fn reception(&self) -> Option<crate::rtcp::Reception> {
        let t = &self.take;
        Some(crate::rtcp::Reception {
            source: self.ssrc()?,
            highest_seq: t.tracker.highest()?,
            received: t.tracker.counters().received,
            lost: t.tracker.lost(),
            // Clock units, rounded down; a jitter of 2^32 ticks is 13 hours.
            jitter: t.jitter.value() as u32,
        })
    }

    /// Counters so far, over every take (jitter: the current take's).
    pub fn stats(&self) -> Stats {
        let t = &self.take;
        let (seq, depack, c) = (t.tracker.counters(), t.depack.stats(), self.carried);
        Stats {
            packets_received: c.received + seq.received,
            packets_lost: c.lost + t.tracker.lost(),
            packets_reordered: c.reordered + seq.reordered,
            packets_duplicate: c.duplicates + seq.duplicates,
            packets_malformed: self.stats.packets_malformed + c.malformed + depack.malformed,
            packets_late: c.late + depack.late + seq.too_old,
            packets_foreign: self.selector.foreign(),
            takes: self.selector.takes(),
            jitter: Nanos::from_secs_f64(t.jitter.value() / f64::from(VIDEO_CLOCK_RATE)),
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
        stream_from(n, ssrc, 0, 0)
    }

    /// Packets of frames `f0..f0 + n` with sequence numbers from `seq0`.
    fn stream_from(n: u64, ssrc: u32, seq0: u64, f0: u64) -> Vec<Vec<u8>> {
        let p = Packetizer::new(format(), 100, Ssrc(ssrc)).unwrap();
        let rate = FrameRate::new(30, 1).unwrap();
        let ppf = p.packets_per_frame() as u64;
        (0..n)
            .flat_map(|f| {
                p.frame_packets(
                    &frame(f as u8),
                    ExtSeq(seq0 + f * ppf),
                    MediaTime(rate.rtp_timestamp(f0 + f)),
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
                Event::Rival {
                    ssrc, took_over, ..
                } => format!("rival{}{}", ssrc.0, if *took_over { "!" } else { "" }),
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
    fn a_stray_datagram_before_the_stream_is_counted_and_ignored() {
        let mut script = vec![stream_from(1, 9, 4000, 77)[0].clone()];
        script.extend(stream(3, 5));
        let mut r = receiver(Incomplete::Drop, None);
        let mut ev = feed(&mut r, &script);
        r.finish();
        ev.extend(std::iter::from_fn(|| r.poll_event()));
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1", "f2"]);
        let s = r.stats();
        assert_eq!((s.packets_foreign, s.frames_complete, s.takes), (1, 3, 1));
        assert_eq!(s.packets_received, stream(3, 5).len() as u64);
    }

    /// Stream 5 for 3 frames, then (restarted, 0.2 s later) stream 6 for 2.
    fn restart(r: &mut Receiver) -> Vec<Event> {
        let mut ev = feed(r, &stream(3, 5));
        for (k, p) in stream_from(2, 6, 9000, 500).iter().enumerate() {
            let at = Nanos::from_millis(200) + Nanos::from_micros(100 * k as u64);
            r.handle_input(
                at,
                Datagram {
                    bytes: p,
                    from: None,
                },
            );
        }
        r.finish();
        ev.extend(std::iter::from_fn(|| r.poll_event()));
        ev
    }

    #[test]
    fn a_restarted_sender_is_a_new_take_or_a_rival() {
        let mut r = receiver(Incomplete::Drop, None).with_selection(None, true);
        let ev = restart(&mut r);
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1", "f2", "ssrc6", "f3", "f4"]);
        let Event::Stream {
            first_seq,
            replaces,
            ..
        } = &ev[4]
        else {
            unreachable!()
        };
        assert_eq!((*first_seq, *replaces), (9000, Some(Ssrc(5))));
        let s = r.stats();
        assert_eq!((s.takes, s.frames_complete, s.packets_foreign), (2, 5, 0));
        assert_eq!(s.packets_received, 5 * stream(1, 5).len() as u64);

        let mut r = receiver(Incomplete::Drop, None);
        let ev = restart(&mut r);
        assert_eq!(kinds(&ev), ["ssrc5", "f0", "f1", "f2", "rival6!"]);
        let s = r.stats();
        assert_eq!((s.takes, s.frames_complete), (1, 3));
        assert_eq!(s.packets_foreign, 2 * stream(1, 5).len() as u64);
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
