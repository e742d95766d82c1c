//! The send schedule: packet `i` of frame `f` leaves at
//! `start(f) + i × period / packets_per_frame` (linear spreading over the
//! whole frame), or, for a shaped pacer ([`Pacer::shaped`]), when an
//! ST 2110-21 [`SenderSchedule`] releases it (trains of a sender type
//! from TRoffset on); either is computed from integers each time so it
//! never drifts.
//!
//! Time is [`Nanos`] since the start of the first scheduled frame; the
//! owner (a [`crate::video::Sender`], the probe) maps it to its timeline. When the sender falls behind, packets leave
//! no closer together than `interval / catch_up`, so a stall is followed by
//! a bounded-rate catch-up rather than a burst, and packets released more
//! than `late_after` behind their slot are counted late.

use serde::Serialize;

use crate::units::Nanos;
use crate::video::format::FrameRate;
use crate::video::st2110_21::{CinstGate, SenderSchedule};

/// Default lateness tolerance.
pub const DEFAULT_LATE_AFTER: Nanos = Nanos::from_micros(100);
/// Default catch-up speed: 1.5 × the nominal packet rate.
pub const DEFAULT_CATCH_UP: f64 = 1.5;

/// Counters of a [`Pacer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PacingStats {
    /// Packets released.
    pub packets: u64,
    /// Packets released more than `late_after` behind their slot.
    pub late: u64,
    /// Largest lateness seen.
    pub max_late: Nanos,
    /// Frame slots skipped because no frame was ready (underruns).
    pub skipped_frames: u64,
    /// Frame slots passed over because the sender fell more than a frame
    /// behind (see [`Pacer::slip`]).
    pub slipped_frames: u64,
}

/// A per-flow packet schedule on virtual time.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: FrameRate,
    packets_per_frame: u64,
    first_frame: u64,
    base_ns: u128,
    next: u64,
    last_release: Option<(Nanos, u32)>,
    min_gap: Nanos,
    late_after: Nanos,
    wake_slack: Nanos,
    stats: PacingStats,
    /// The ST 2110-21 release schedule, if shaped.
    shape: Option<SenderSchedule>,
    /// A shaped pacer's copy of the receiver's Cinst bucket.
    gate: Option<CinstGate>,
}

impl Pacer {
    /// A schedule of `packets_per_frame` packets per frame at `rate`,
    /// whose time zero is the start of frame `first_frame` (frames are
    /// numbered from the epoch, so this also fixes RTP timestamps).
    pub fn new(rate: FrameRate, packets_per_frame: usize, first_frame: u64) -> Self {
        let ppf = packets_per_frame.max(1) as u64;
        let mut p = Pacer {
            rate,
            packets_per_frame: ppf,
            first_frame,
            base_ns: 0,
            next: 0,
            last_release: None,
            min_gap: Nanos::ZERO,
            late_after: DEFAULT_LATE_AFTER,
            wake_slack: Nanos::ZERO,
            stats: PacingStats::default(),
            shape: None,
            gate: None,
        };
        p.base_ns = p.abs_ns(0);
        p.set_catch_up(DEFAULT_CATCH_UP);
        p
    }

    /// A schedule whose packets leave when `schedule` releases them:
    /// packets per frame and rate are the schedule's model's, trains of
    /// [`SenderSchedule::train`] share one slot, and time zero is still
    /// the start of `first_frame`.
    pub fn shaped(schedule: SenderSchedule, first_frame: u64) -> Self {
        let model = schedule.model();
        let packets = model.packets() as usize;
        let mut p = Pacer::new(model.rate(), packets, first_frame);
        p.gate = Some(CinstGate::for_schedule(&schedule));
        p.shape = Some(schedule);
        p
    }

    /// The ST 2110-21 schedule of a shaped pacer.
    pub fn shape(&self) -> Option<&SenderSchedule> {
        self.shape.as_ref()
    }

    /// Sets how much faster than nominal a late sender may catch up
    /// (≥ 1; `f64::INFINITY` means no limit).
    pub fn set_catch_up(&mut self, factor: f64) {
        let interval = self.rate.frame_start_ns(1) as f64 / self.packets_per_frame as f64;
        let factor = factor.max(1.0);
        self.min_gap = Nanos((interval / factor) as u64);
    }

    /// Sets the lateness tolerance.
    pub fn set_late_after(&mut self, d: Nanos) {
        self.late_after = d;
    }

    /// Sets how late a wake-up may be without moving the catch-up limit.
    /// A sender that sleeps (rather than spins) wakes tens of µs after the
    /// release it asked for, every time; were the catch-up limit counted
    /// from when it actually sent, each wake-up's lateness would add to the
    /// next and a 3.2 Gbit/s stream would fall steadily behind (3.06 of
    /// 3.19 Gbit/s measured). Counted from the release it was due at, or
    /// `slack` before it sent if it was later than that, a late wake-up
    /// costs nothing, and a real stall still resumes at the bounded
    /// catch-up rate after at most `slack` worth of packets sooner.
    pub fn set_wake_slack(&mut self, slack: Nanos) {
        self.wake_slack = slack;
    }

    fn abs_ns(&self, packet: u64) -> u128 {
        let ppf = u128::from(self.packets_per_frame);
        let k = u128::from(self.first_frame) * ppf + u128::from(packet);
        k * u128::from(self.rate.den) * 1_000_000_000 / (u128::from(self.rate.num) * ppf)
    }

    /// The slot of schedule packet `packet` (counted from the first frame).
    pub fn slot(&self, packet: u64) -> Nanos {
        let ns = match &self.shape {
            None => self.abs_ns(packet) - self.base_ns,
            Some(s) => {
                let frame = self
                    .first_frame
                    .saturating_add(packet / self.packets_per_frame);
                // Below packets_per_frame, which came from a u32.
                let index = (packet % self.packets_per_frame) as u32;
                let at = u128::from(s.release(frame, index).0);
                // Never before the first frame's start: the schedule
                // releases a frame's first packet after TRoffset / 2.
                at.saturating_sub(self.base_ns)
            }
        };
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Packets per frame.
    pub fn packets_per_frame(&self) -> u64 {
        self.packets_per_frame
    }

    /// Index of the next packet to release, counted from the first frame.
    pub fn next_packet(&self) -> u64 {
        self.next
    }

    /// Epoch frame number of the next packet.
    pub fn frame(&self) -> u64 {
        self.first_frame + self.next / self.packets_per_frame
    }

    /// Position of the next packet within its frame.
    pub fn index_in_frame(&self) -> usize {
        (self.next % self.packets_per_frame) as usize
    }

    /// Earliest time the next packet may leave: its slot, or the catch-up
    /// limit after the previous train (`count × interval / catch_up`),
    /// whichever is later.
    pub fn next_release(&self) -> Nanos {
        let slot = self.slot(self.next);
        let slot = match &self.gate {
            // A late shaped train waits until the receiver's Cinst bucket
            // has room for all of it.
            Some(g) => slot.max(g.earliest(self.rest_of_train())),
            None => slot,
        };
        match self.last_release {
            Some((at, count)) => slot.max(at + self.min_gap.saturating_mul(u64::from(count))),
            None => slot,
        }
    }

    /// How many packets may leave at `now` as one train of at most `max`,
    /// without crossing the end of the current frame: the next packet (if
    /// due) and those whose slots fall within `burst` after its slot. A
    /// train never leaves before its first slot, `burst` bounds how early
    /// its last packet leaves, and a late sender's trains are spaced by the
    /// catch-up limit, so a stall never turns into an unbounded burst.
    pub fn due(&self, now: Nanos, max: usize, burst: Nanos) -> usize {
        if now < self.next_release() || max == 0 {
            return 0;
        }
        let left_in_frame = self.packets_per_frame - self.next % self.packets_per_frame;
        let limit = (max as u64).min(left_in_frame);
        let horizon = self.slot(self.next) + burst;
        // The rest of a shaped train shares its first packet's slot: no
        // need to compute each (a release costs u128 divisions).
        let mut n = self.rest_of_train().clamp(1, limit.max(1));
        while n < limit && self.slot(self.next + n) <= horizon {
            n += 1;
        }
        n as usize
    }

    /// Packets from the next one to the end of its shaped train (1 when
    /// not shaped).
    fn rest_of_train(&self) -> u64 {
        self.rest_of_train_at(self.next)
    }

    /// Packets from schedule packet `packet` to the end of its shaped
    /// train and frame (1 when not shaped).
    fn rest_of_train_at(&self, packet: u64) -> u64 {
        match &self.shape {
            Some(s) => {
                let train = s.train().max(1);
                let index = packet % self.packets_per_frame;
                let end = ((index / train + 1) * train).min(self.packets_per_frame);
                end - index
            }
            None => 1,
        }
    }

    /// Longest train worth sending in one go: the first packet plus those
    /// whose slots fall within `burst` of it, at most `cap` (what one
    /// syscall can carry) and at least one. Drivers size their batch
    /// buffers with it and pass it to [`Pacer::due`] as `max`.
    /// A shaped pacer's trains are its schedule's, cut to `cap`.
    pub fn max_train(&self, burst: Nanos, cap: usize) -> usize {
        if let Some(s) = &self.shape {
            let train = usize::try_from(s.train()).unwrap_or(usize::MAX);
            return train.clamp(1, cap.max(1));
        }
        let interval_ns = self.rate.frame_start_ns(1) as f64 / self.packets_per_frame as f64;
        let by_burst = (burst.as_nanos() as f64 / interval_ns).floor() as usize + 1;
        by_burst.clamp(1, cap.max(1))
    }

    /// Records that `count` packets left at `now`.
    pub fn sent(&mut self, now: Nanos, count: usize) {
        let due = self.next_release();
        let anchor = due.max(now.saturating_sub(self.wake_slack)).min(now);
        let end = self.next + count as u64;
        let mut packet = self.next;
        while packet < end {
            // A shaped train's packets share one slot: judge them at once.
            let same = self.rest_of_train_at(packet).min(end - packet);
            let late = now.saturating_sub(self.slot(packet));
            self.stats.max_late = self.stats.max_late.max(late);
            if late > self.late_after {
                self.stats.late += same;
            }
            packet += same;
        }
        if let Some(g) = self.gate.as_mut() {
            g.sent(now, count as u64);
        }
        self.stats.packets += count as u64;
        self.next += count as u64;
        self.last_release = Some((anchor, count as u32));
    }

    /// The last train's send call returned at `now`: a shaped pacer's
    /// Cinst bucket counts it from then (see [`CinstGate::departed`]).
    pub fn departed(&mut self, now: Nanos) {
        if let Some(g) = self.gate.as_mut() {
            g.departed(now);
        }
    }

    /// Lateness of the next packet at `now` (zero when not behind).
    pub fn lateness(&self, now: Nanos) -> Nanos {
        now.saturating_sub(self.slot(self.next))
    }

    /// Gives up the rest of the current frame's slot (no frame was ready)
    /// and moves to the start of the next frame; counts an underrun.
    pub fn skip_frame(&mut self) {
        let ppf = self.packets_per_frame;
        self.next = (self.next / ppf + 1) * ppf;
        self.stats.skipped_frames += 1;
        self.last_release = None;
    }

    /// Moves a shaped schedule that is about to begin a frame it can no
    /// longer begin inside that frame's own epoch frame on to the first
    /// frame it can still begin in time: the one running at `now` if its
    /// first packet is late by no more than the schedule's stall slack,
    /// else the one after. Returns the epoch frames passed over, if any.
    ///
    /// Why: a receiver places a frame by the epoch frame its first packet
    /// arrives in. Begun after its own epoch frame ended, a frame is
    /// judged against the next one's drain: its virtual receiver overfills
    /// (the stall simulation saw 1,101 packets where a wide receiver holds
    /// 863), and two frames are read in one frame time. Less late, the
    /// sender catches up within the standard instead (see
    /// [`Pacer::next_release`]); only a stall of about a frame period ends
    /// here, so a busy host's late wake-ups never cost a slot. The frame
    /// content need not be lost: see
    /// [`Event::Slipped`](crate::video::sender::Event::Slipped).
    pub fn slip(&mut self, now: Nanos) -> Option<std::ops::Range<u64>> {
        // An unshaped schedule has no virtual receiver to keep: it only
        // catches up.
        let slack = self.shape.as_ref()?.stall_slack();
        if self.index_in_frame() != 0 {
            return None;
        }
        let frame = self.frame();
        if now < self.frame_start(frame.saturating_add(1)) {
            return None;
        }
        // The frame running at `now` (a frame starting exactly at `now`
        // is running): at least the next one, as `now` is past its start.
        let mut to = (self.frame_at_or_after(now + Nanos(1)) - 1).max(frame + 1);
        if self.slot(self.first_packet_of(to)) + slack < now {
            to += 1;
        }
        self.jump_to(to);
        self.stats.slipped_frames += to - frame;
        Some(frame..to)
    }

    /// Schedule time of the start of epoch frame `frame` (zero for frames
    /// before the first).
    fn frame_start(&self, frame: u64) -> Nanos {
        let ns = self.rate.frame_start_ns(frame).saturating_sub(self.base_ns);
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Schedule index of the first packet of epoch frame `frame`.
    fn first_packet_of(&self, frame: u64) -> u64 {
        frame
            .saturating_sub(self.first_frame)
            .saturating_mul(self.packets_per_frame)
    }

    /// The first frame whose start is at or after `t` (schedule time, so
    /// negative times are the first frame's start): where a schedule
    /// resumed at `t` goes on, on the same epoch grid.
    pub fn frame_at_or_after(&self, t: Nanos) -> u64 {
        self.rate
            .frame_at_or_after_ns(self.base_ns + u128::from(t.as_nanos()))
            .max(self.first_frame)
    }

    /// Moves the schedule on to the start of epoch frame `frame` (a later
    /// one than the current; an earlier one is ignored) without counting
    /// the frames passed over as underruns: the flow was paused (or
    /// slipped), not short of frames.
    pub fn jump_to(&mut self, frame: u64) {
        let next = self.first_packet_of(frame);
        if next > self.next {
            self.next = next;
            self.last_release = None;
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> PacingStats {
        self.stats
    }

    /// The frame rate being paced.
    pub fn rate(&self) -> FrameRate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(n: u32, d: u32) -> FrameRate {
        FrameRate::new(n, d).unwrap()
    }

    #[test]
    fn a_late_wake_up_within_the_slack_does_not_push_the_catch_up_limit() {
        // 4 packets per 20 ms frame: a slot every 5 ms; catch-up 1.25x
        // spaces a late sender's packets 4 ms apart.
        let mut p = Pacer::new(rate(50, 1), 4, 0);
        p.set_catch_up(1.25);
        p.set_wake_slack(Nanos::from_micros(500));
        // Every wake-up 300 µs late: without the slack each would start the
        // 4 ms gap from the late send and the stream would drift.
        for k in 0..8u64 {
            let t = p.next_release() + Nanos::from_micros(300);
            assert_eq!(p.due(t, 1, Nanos::ZERO), 1);
            p.sent(t, 1);
            assert_eq!(p.next_release(), Nanos::from_millis(5 * (k + 1)));
        }
        // A 12 ms stall: the limit counts from 500 µs before the late send.
        let t = p.next_release() + Nanos::from_millis(12);
        p.sent(t, 1);
        assert_eq!(
            p.next_release(),
            t - Nanos::from_micros(500) + Nanos::from_millis(4)
        );
        // Without slack, the old rule: from the send itself.
        let mut q = Pacer::new(rate(50, 1), 4, 0);
        q.set_catch_up(1.25);
        let t = q.next_release() + Nanos::from_millis(12);
        q.sent(t, 1);
        assert_eq!(q.next_release(), t + Nanos::from_millis(4));
    }

    #[test]
    fn each_packet_at_its_instant() {
        let mut p = Pacer::new(rate(50, 1), 4, 0);
        // 20 ms frame, 4 packets: 0, 5, 10, 15 ms; next frame at 20 ms.
        let want = [0u64, 5, 10, 15, 20, 25];
        for w in want {
            let t = p.next_release();
            assert_eq!(t, Nanos::from_millis(w));
            assert_eq!(p.due(t, 1, Nanos::ZERO), 1);
            p.sent(t, 1);
        }
        assert_eq!(p.stats().late, 0);
        assert_eq!(p.frame(), 1);
        assert_eq!(p.index_in_frame(), 2);
    }

    #[test]
    fn max_train_fits_the_burst_window() {
        // 50 fps, 4 packets: one every 5 ms.
        let p = Pacer::new(rate(50, 1), 4, 0);
        assert_eq!(p.max_train(Nanos::ZERO, 64), 1);
        assert_eq!(p.max_train(Nanos::from_micros(4_999), 64), 1);
        assert_eq!(p.max_train(Nanos::from_millis(5), 64), 2);
        assert_eq!(p.max_train(Nanos::from_millis(100), 7), 7);
        assert_eq!(p.max_train(Nanos::from_millis(100), 0), 1);
    }

    #[test]
    fn no_drift_over_a_million_packets() {
        // 59.94 fps, 4319 packets a frame: the period is not a whole
        // number of nanoseconds, which is where accumulated sums drift.
        let r = rate(60000, 1001);
        let ppf = 4319;
        let mut p = Pacer::new(r, ppf, 123_456_789);
        let mut prev = Nanos::ZERO;
        for _ in 0..1_000_000u64 {
            let t = p.next_release();
            assert!(t >= prev);
            prev = t;
            p.sent(t, 1);
        }
        let n = 1_000_000u64;
        let exact = n as f64 * 1001.0 / 60000.0 / ppf as f64; // seconds
        let got = p.next_release().as_secs_f64();
        assert!(
            (got - exact).abs() < 2e-9,
            "drift {} ns",
            (got - exact) * 1e9
        );
        // and frame starts land exactly on the epoch grid
        let f = 1_000_000 / ppf as u64 + 1;
        let start = u128::from(p.slot(f * ppf as u64).as_nanos());
        let want = r.frame_start_ns(123_456_789 + f) - r.frame_start_ns(123_456_789);
        assert_eq!(start, want);
    }

    #[test]
    fn bounded_catch_up_after_a_stall() {
        // 1000 packets/s: interval 1 ms; catch-up 2x => 0.5 ms spacing.
        let mut p = Pacer::new(rate(10, 1), 100, 0);
        p.set_catch_up(2.0);
        p.sent(Nanos::ZERO, 1);
        // stall for 10 ms: packets 1..=10 are overdue
        let mut now = Nanos::from_millis(10);
        let mut releases = Vec::new();
        for _ in 0..30 {
            now = now.max(p.next_release());
            let n = p.due(now, 64, Nanos::ZERO);
            assert_eq!(n, 1, "overdue packets must not burst");
            releases.push(now);
            p.sent(now, n);
        }
        for w in releases.windows(2) {
            assert!(w[1] - w[0] >= Nanos::from_micros(500));
        }
        // Caught up after ~20 packets: the schedule is back on its slots.
        let t = p.next_release();
        assert_eq!(t, p.slot(p.next_packet()));
        assert!(p.stats().late > 0);
        assert!(p.stats().max_late >= Nanos(9_000_000));
    }

    #[test]
    fn trains_start_on_their_slot_and_stay_in_frame() {
        let mut p = Pacer::new(rate(1, 1), 10, 0); // 100 ms interval
        assert_eq!(p.due(Nanos::from_millis(0), 4, Nanos::from_millis(250)), 3);
        assert_eq!(p.due(Nanos::ZERO, 64, Nanos::from_secs(5)), 10);
        p.sent(Nanos::ZERO, 8);
        assert_eq!(p.due(p.next_release(), 64, Nanos::from_secs(5)), 2);
        assert_eq!(p.due(Nanos::from_millis(799), 64, Nanos::from_secs(5)), 0);
    }

    #[test]
    fn skip_frame_keeps_the_grid() {
        let mut p = Pacer::new(rate(25, 1), 10, 7);
        p.sent(Nanos::ZERO, 3);
        p.skip_frame();
        assert_eq!(p.frame(), 8);
        assert_eq!(p.next_release(), Nanos::from_millis(40));
        assert_eq!(p.stats().skipped_frames, 1);
    }
}
