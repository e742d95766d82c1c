//! When each datagram of a TS file leaves: a pacing schedule from the PCR.
//!
//! A file is sent as datagrams of 7 packets (datagram `d` holds packets
//! `7d..7d+7`). A packet's departure time is interpolated linearly by
//! position between the PCRs of the PCR PID that bracket it, which is what
//! a constant-rate multiplex implies; a datagram leaves at the time of its
//! first packet. The times are offsets on the stream's own timeline
//! (packet 0 at zero): the pacing thread adds its start time, and for a
//! loop the previous pass's [`Schedule::duration`].
//!
//! The schedule only counts packets and keeps the last timing anchor, so it
//! holds O(1) state plus the departures not yet taken, which are bounded
//! by the lookahead limit: serve's pacing thread can run hundreds. It
//! reads no clock and is no machine of its own: it is fed packets and
//! hands out offsets on the file's timeline, which the
//! [`Sender`](super::Sender) places on the pacing thread's.
//!
//! - PCR wrap (2^33 * 300 ticks) is taken forward.
//! - A PCR with the discontinuity indicator, a PCR that does not advance,
//!   or one that jumps more than `max_pcr_gap` starts a new time base:
//!   the packets before it are timed at the last known rate, so time never
//!   jumps and never goes backwards.
//! - Without PCRs (or when `max_pending` packets pass without one), the
//!   packets are timed at the last known rate, or at `fallback_rate` when
//!   none is known: a file without PCR is sent at a constant bit rate.

use std::collections::VecDeque;

use super::packet::{PACKET_LEN, PCR_HZ, Packet, Pcr, Pid};
use crate::units::{BitRate, MediaTime, Nanos};

/// TS packets per datagram (7 x 188 = 1316 bytes fits a 1500-byte MTU).
pub const PACKETS_PER_DATAGRAM: u64 = 7;
/// Bytes of TS in a full datagram.
pub const DATAGRAM_LEN: usize = PACKETS_PER_DATAGRAM as usize * PACKET_LEN;

/// Settings of a [`Schedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// The rate of a file without PCR (and of its start, until two PCRs
    /// give a rate).
    pub fallback_rate: BitRate,
    /// The PID whose PCRs pace the file; `None` follows the first PID
    /// that carries a PCR (the PMT's PCR_PID in a single-program file).
    pub pcr_pid: Option<Pid>,
    /// Packets that may wait for the next PCR before they are timed at the
    /// last known rate (the reader must read this far ahead at most).
    pub max_pending: u64,
    /// The largest step between two PCRs taken as continuous (ISO/IEC
    /// 13818-1 requires at most 100 ms).
    pub max_pcr_gap: Nanos,
}

impl ScheduleConfig {
    /// Follow the first PCR PID, wait at most 8192 packets (1.5 MB) for a
    /// PCR, treat PCR steps over 1 s as discontinuities.
    pub fn new(fallback_rate: BitRate) -> ScheduleConfig {
        ScheduleConfig {
            fallback_rate,
            pcr_pid: None,
            max_pending: 8192,
            max_pcr_gap: Nanos::from_secs(1),
        }
    }
}

/// One datagram's departure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// The datagram: packets `7 * datagram ..`.
    pub datagram: u64,
    /// Offset from the stream's start.
    pub at: Nanos,
    /// The same instant on the 90 kHz RTP clock (RFC 2250), from zero.
    pub media_time: MediaTime,
}

/// What the schedule counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleCounters {
    /// Packets read.
    pub packets: u64,
    /// PCRs of the PCR PID read.
    pub pcrs: u64,
    /// New time bases (discontinuity indicator, stalled or jumping PCR).
    pub discontinuities: u64,
    /// Times the lookahead ran out and packets were timed without a PCR
    /// after them.
    pub extrapolations: u64,
}

/// `ticks` of the 27 MHz clock per `packets` packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate {
    ticks: u64,
    packets: u64,
}

/// A packet whose time is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Anchor {
    index: u64,
    at: u64,
    pcr: Option<Pcr>,
}

const ORIGIN: Anchor = Anchor {
    index: 0,
    at: 0,
    pcr: None,
};

impl Anchor {
    /// The time of packet `k` (not before this anchor) at `rate`.
    fn time_of(self, rate: Rate, k: u64) -> u64 {
        let ticks = u128::from(k.saturating_sub(self.index)) * u128::from(rate.ticks)
            / u128::from(rate.packets.max(1));
        self.at
            .saturating_add(u64::try_from(ticks).unwrap_or(u64::MAX))
    }
}

/// The departure schedule of one TS file (see the module docs).
#[derive(Debug, Clone)]
pub struct Schedule {
    cfg: ScheduleConfig,
    pcr_pid: Option<Pid>,
    // Where this pass of the file starts on the timeline.
    origin: Anchor,
    packets: u64,
    next_datagram: u64,
    anchor: Option<Anchor>,
    // The first PCR, until a second one gives the rate.
    first_pcr: Option<(u64, Pcr)>,
    rate: Option<Rate>,
    departures: VecDeque<Departure>,
    end: Option<u64>,
    counters: ScheduleCounters,
}

impl Schedule {
    /// A schedule that has read nothing.
    pub fn new(cfg: ScheduleConfig) -> Schedule {
        Schedule {
            cfg,
            pcr_pid: cfg.pcr_pid,
            origin: ORIGIN,
            packets: 0,
            next_datagram: 0,
            anchor: None,
            first_pcr: None,
            rate: None,
            departures: VecDeque::new(),
            end: None,
            counters: ScheduleCounters::default(),
        }
    }

    /// The next packet of the file, in order (normally 188 bytes; a
    /// short or unparsable one still takes its place, it just has no PCR).
    /// Ignored after [`Schedule::finish`].
    pub fn feed(&mut self, packet: &[u8]) {
        if self.end.is_some() {
            return;
        }
        let index = self.packets;
        self.packets += 1;
        self.counters.packets += 1;
        if let Some((pcr, discontinuity)) = self.pcr_of(packet) {
            self.counters.pcrs += 1;
            self.on_pcr(index, pcr, discontinuity);
        }
        let since = self.packets - self.anchor.map_or(0, |a| a.index);
        if since > self.cfg.max_pending {
            self.extrapolate();
        }
    }

    /// The file ended: every datagram gets its time, and
    /// [`Schedule::duration`] is known.
    pub fn finish(&mut self) {
        if self.end.is_some() {
            return;
        }
        let rate = self.rate.unwrap_or(self.fallback());
        let anchor = self.anchor.unwrap_or(self.origin);
        self.emit_until(self.packets, anchor, rate);
        self.end = Some(anchor.time_of(rate, self.packets));
    }

    /// The file starts over (a loop): datagram numbers restart at 0, and
    /// times (and media times) go on from [`Schedule::duration`] at the
    /// rate the last pass ended with, so the receiver sees one continuous
    /// stream. Finishes the current pass first.
    pub fn restart(&mut self) {
        self.finish();
        self.origin = Anchor {
            index: 0,
            at: self.end.unwrap_or(0),
            pcr: None,
        };
        self.anchor = self.rate.map(|_| self.origin);
        self.packets = 0;
        self.next_datagram = 0;
        self.first_pcr = None;
        self.end = None;
    }

    /// The next datagram whose departure is known, in datagram order.
    pub fn take_departure(&mut self) -> Option<Departure> {
        self.departures.pop_front()
    }

    /// After [`Schedule::finish`]: when the packet after the last would
    /// leave, so a loop's next pass starts there.
    pub fn duration(&self) -> Option<Nanos> {
        self.end.map(ticks_to_nanos)
    }

    /// The PID being followed for PCRs, once known.
    pub fn pcr_pid(&self) -> Option<Pid> {
        self.pcr_pid
    }

    /// Counters so far.
    pub fn counters(&self) -> ScheduleCounters {
        self.counters
    }

    /// The PCR and discontinuity flag of `packet` if it is on the PCR PID.
    fn pcr_of(&mut self, packet: &[u8]) -> Option<(Pcr, bool)> {
        let p = Packet::new_checked(packet).ok()?;
        let pcr = p.pcr()?;
        let pid = *self.pcr_pid.get_or_insert(p.pid());
        (pid == p.pid()).then(|| (pcr, p.discontinuity()))
    }

    fn on_pcr(&mut self, index: u64, pcr: Pcr, discontinuity: bool) {
        let Some(anchor) = self.anchor else {
            // Nothing timed yet: a second PCR gives the rate, and the
            // packets before the first are timed at that rate from zero.
            let rate = match self.first_pcr {
                Some((i1, p1)) if !discontinuity => self.interval(i1, p1, index, pcr),
                _ => None,
            };
            match (rate, self.first_pcr) {
                (Some(rate), Some((i1, p1))) => {
                    self.emit_until(i1, self.origin, rate);
                    let first = Anchor {
                        index: i1,
                        at: self.origin.time_of(rate, i1),
                        pcr: Some(p1),
                    };
                    self.advance(first, rate, index, pcr);
                }
                _ => self.first_pcr = Some((index, pcr)),
            }
            return;
        };
        let measured = match anchor.pcr {
            Some(last) if !discontinuity => self.interval(anchor.index, last, index, pcr),
            _ => None,
        };
        if measured.is_none() && anchor.pcr.is_some() {
            self.counters.discontinuities += 1;
        }
        let rate = measured.or(self.rate).unwrap_or(self.fallback());
        self.advance(anchor, rate, index, pcr);
    }

    /// The rate between two PCRs, or `None` if the step is no continuous
    /// time base.
    fn interval(&self, i0: u64, p0: Pcr, i1: u64, p1: Pcr) -> Option<Rate> {
        let packets = i1.checked_sub(i0).filter(|n| *n > 0)?;
        let ticks = p1.ticks_since(p0);
        let max = u128::from(self.cfg.max_pcr_gap.as_nanos()) * u128::from(PCR_HZ) / 1_000_000_000;
        (ticks > 0 && u128::from(ticks) <= max).then_some(Rate { ticks, packets })
    }

    /// Times the datagrams before packet `index` from `anchor` at `rate`
    /// and makes `index` (carrying `pcr`) the new anchor.
    fn advance(&mut self, anchor: Anchor, rate: Rate, index: u64, pcr: Pcr) {
        self.emit_until(index, anchor, rate);
        self.rate = Some(rate);
        self.anchor = Some(Anchor {
            index,
            at: anchor.time_of(rate, index),
            pcr: Some(pcr),
        });
    }

    /// The lookahead ran out: time what is pending at the last known rate.
    fn extrapolate(&mut self) {
        self.counters.extrapolations += 1;
        let rate = self.rate.unwrap_or(self.fallback());
        let anchor = self.anchor.unwrap_or(self.origin);
        self.first_pcr = None;
        self.emit_until(self.packets, anchor, rate);
        self.anchor = Some(Anchor {
            index: self.packets,
            at: anchor.time_of(rate, self.packets),
            pcr: None,
        });
    }

    /// Queues the departures of datagrams whose first packet is before
    /// `end`.
    fn emit_until(&mut self, end: u64, anchor: Anchor, rate: Rate) {
        while self.next_datagram * PACKETS_PER_DATAGRAM < end {
            let first = self.next_datagram * PACKETS_PER_DATAGRAM;
            let ticks = anchor.time_of(rate, first);
            self.departures.push_back(Departure {
                datagram: self.next_datagram,
                at: ticks_to_nanos(ticks),
                media_time: MediaTime((ticks / 300) as u32),
            });
            self.next_datagram += 1;
        }
    }

    /// The fallback rate as ticks per packets.
    fn fallback(&self) -> Rate {
        Rate {
            ticks: PACKET_LEN as u64 * 8 * PCR_HZ,
            packets: self.cfg.fallback_rate.bps().max(1),
        }
    }
}

fn ticks_to_nanos(ticks: u64) -> Nanos {
    Nanos(u64::try_from(u128::from(ticks) * 1000 / 27).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::mpegts::packet::PCR_MODULUS;
    use crate::mpegts::synth;

    const RATE: u64 = 6_000_000;

    fn schedule(ts: &[u8], cfg: ScheduleConfig) -> (Vec<Departure>, Schedule) {
        let mut s = Schedule::new(cfg);
        let mut out = Vec::new();
        for p in ts.chunks(PACKET_LEN) {
            s.feed(p);
            out.extend(std::iter::from_fn(|| s.take_departure()));
        }
        s.finish();
        out.extend(std::iter::from_fn(|| s.take_departure()));
        (out, s)
    }

    /// Departure of datagram `d` at a constant `bps`.
    fn ideal(d: u64, bps: u64) -> i64 {
        (u128::from(d) * DATAGRAM_LEN as u128 * 8 * 1_000_000_000 / u128::from(bps)) as i64
    }

    fn assert_close(out: &[Departure], bps: u64, tolerance_ns: i64) {
        for dep in out {
            let err = dep.at.as_nanos() as i64 - ideal(dep.datagram, bps);
            assert!(
                err.abs() <= tolerance_ns,
                "datagram {} off by {err} ns",
                dep.datagram
            );
        }
    }

    #[test]
    fn a_constant_rate_file_is_paced_by_its_pcr() {
        let ts = synth::stream(7000, RATE, 20, 123_456);
        let (out, s) = schedule(&ts, ScheduleConfig::new(BitRate(1_000_000)));
        assert_eq!(out.len(), 1000);
        assert!(out.iter().enumerate().all(|(i, d)| d.datagram == i as u64));
        // PCRs are whole ticks (37 ns); interpolation stays within one.
        assert_close(&out, RATE, 40);
        assert_eq!(s.pcr_pid(), Some(Pid(0x100)));
        assert_eq!(s.counters().discontinuities, 0);
        let dur = s.duration().unwrap().as_nanos() as i64;
        assert!((dur - ideal(1000, RATE)).abs() <= 40);
        // The RTP clock is the same instant at 90 kHz.
        // (each truncated from the same 27 MHz count: at most one apart).
        for d in &out {
            let from_nanos = d.at.as_nanos() * 9 / 100_000;
            assert!(u64::from(d.media_time.0).abs_diff(from_nanos) <= 1, "{d:?}");
        }
    }

    #[test]
    fn a_loop_continues_the_timeline() {
        let ts = synth::stream(7000, RATE, 20, 5_000);
        let mut s = Schedule::new(ScheduleConfig::new(BitRate(1_000_000)));
        let mut passes = Vec::new();
        for _ in 0..3 {
            for p in ts.chunks(PACKET_LEN) {
                s.feed(p);
            }
            s.restart();
            passes.push(std::iter::from_fn(|| s.take_departure()).collect::<Vec<_>>());
        }
        for (n, pass) in passes.iter().enumerate() {
            assert_eq!(pass.len(), 1000);
            assert_eq!(pass[0].datagram, 0);
            let shifted: Vec<Departure> = pass
                .iter()
                .map(|d| Departure {
                    datagram: d.datagram + 1000 * n as u64,
                    ..*d
                })
                .collect();
            assert_close(&shifted, RATE, 80);
        }
        let last = passes[0][999].media_time;
        let next = passes[1][0].media_time;
        // One datagram (1316 bytes at 6 Mbit/s, 1.755 ms) later at 90 kHz.
        assert!((157..=158).contains(&next.ticks_since(last)));
        assert_eq!(s.counters().discontinuities, 0);
    }

    #[test]
    fn pcr_wrap_is_taken_forward() {
        let start = PCR_MODULUS - 27_000_000 / 10;
        let ts = synth::stream(7000, RATE, 20, start);
        let (out, s) = schedule(&ts, ScheduleConfig::new(BitRate(1_000_000)));
        assert_close(&out, RATE, 40);
        assert_eq!(s.counters().discontinuities, 0);
    }

    #[test]
    fn a_file_without_pcr_goes_at_the_fallback_rate() {
        let ts = synth::stream(700, RATE, 0, 0);
        let (out, s) = schedule(&ts, ScheduleConfig::new(BitRate(2_000_000)));
        assert_eq!(out.len(), 100);
        assert_close(&out, 2_000_000, 1);
        assert_eq!(s.counters().pcrs, 0);
    }

    #[test]
    fn the_lookahead_bounds_what_waits_for_a_pcr() {
        let ts = synth::stream(700, RATE, 0, 0);
        let cfg = ScheduleConfig {
            max_pending: 70,
            ..ScheduleConfig::new(BitRate(RATE))
        };
        let mut s = Schedule::new(cfg);
        for (i, p) in ts.chunks(PACKET_LEN).enumerate() {
            s.feed(p);
            while s.take_departure().is_some() {}
            // Never more than the lookahead without a time.
            let timed = s.next_datagram * PACKETS_PER_DATAGRAM;
            assert!((i as u64 + 1).saturating_sub(timed) <= 70 + PACKETS_PER_DATAGRAM);
        }
        assert_eq!(s.counters().extrapolations, 9);
    }

    #[test]
    fn a_discontinuity_keeps_time_continuous() {
        // Second half on a new time base far away, flagged.
        let mut ts = synth::stream(1400, RATE, 20, 0);
        let second = synth::stream(1400, RATE, 20, 999_000_000_000);
        ts.extend_from_slice(&second);
        // Flag the first PCR of the second half.
        let first_pcr = 1400 + 2;
        let p = &mut ts[first_pcr * PACKET_LEN..(first_pcr + 1) * PACKET_LEN];
        p[5] |= 0x80;
        let (out, s) = schedule(&ts, ScheduleConfig::new(BitRate(1_000_000)));
        assert_eq!(s.counters().discontinuities, 1);
        assert_close(&out, RATE, 80);

        // The same jump without the flag is caught by max_pcr_gap.
        let mut ts = synth::stream(1400, RATE, 20, 0);
        ts.extend_from_slice(&second);
        let (out, s) = schedule(&ts, ScheduleConfig::new(BitRate(1_000_000)));
        assert_eq!(s.counters().discontinuities, 1);
        assert_close(&out, RATE, 80);
    }

    #[test]
    fn a_pcr_on_another_pid_is_ignored_once_one_is_followed() {
        let mut ts = synth::stream(700, RATE, 20, 0);
        let stray = synth::packet(0x200, 0, Some(Pcr(5)), false, 0);
        ts[300 * PACKET_LEN..301 * PACKET_LEN].copy_from_slice(&stray);
        let (out, _) = schedule(&ts, ScheduleConfig::new(BitRate(1_000_000)));
        assert_close(&out, RATE, 40);
    }

    fn departures_are_monotonic(out: &[Departure], packets: usize) {
        assert_eq!(out.len(), packets.div_ceil(7));
        for (i, w) in out.windows(2).enumerate() {
            assert_eq!(w[0].datagram, i as u64);
            assert!(w[1].at >= w[0].at, "{:?} then {:?}", w[0], w[1]);
        }
    }

    proptest! {
        /// Whatever the PCRs do (wrap, jump, stall, vanish, garbage in
        /// between), every datagram gets a time, in order, never earlier
        /// than the one before.
        #[test]
        fn the_schedule_is_monotonic(
            n in 1usize..3000,
            bps in 100_000u64..1_000_000_000,
            pcr_every in 0usize..60,
            start in 0u64..PCR_MODULUS,
            edits in proptest::collection::vec((any::<usize>(), any::<u64>(), any::<u8>()), 0..20),
            fallback in 1u64..1_000_000_000,
        ) {
            let mut ts = synth::stream(n, bps, pcr_every, start);
            for (at, pcr, flags) in edits {
                let i = at % n;
                let p = if flags & 1 == 0 {
                    synth::packet(0x100, flags >> 4, Some(Pcr(pcr % PCR_MODULUS)), flags & 2 != 0, 0)
                } else {
                    [flags; PACKET_LEN]
                };
                ts[i * PACKET_LEN..(i + 1) * PACKET_LEN].copy_from_slice(&p);
            }
            let (out, _) = schedule(&ts, ScheduleConfig::new(BitRate(fallback)));
            departures_are_monotonic(&out, n);
        }
    }
}
