//! Why a pacing thread was late: run-queue wait, hypervisor steal, or the
//! timer.
//!
//! A driver samples a pacing thread's cumulative host counters every few
//! milliseconds from another thread (the kernel's `schedstat` run-queue
//! wait, the CPU's steal time, involuntary context switches) together with
//! the pacer's own count of late packets and its latest lateness, and
//! feeds them to a [`StallLog`]. A run of samples in which the late count
//! grows is one late *episode*; the counters' growth over the episode,
//! looked back far enough to cover its worst lateness, says what took the
//! time. What the run queue and the hypervisor do not explain is put down
//! to the timer: the thread was free to run and simply woke late.
//!
//! Sampling is coarse (the driver's period, and steal in clock ticks), so
//! each cause is capped by the lateness it has to explain: the split is an
//! attribution, not a measurement of each packet.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::units::Nanos;

/// Samples kept for looking back from an episode: at a 5 ms period, 2 s.
const HISTORY: usize = 400;
/// Episodes kept in detail, worst first.
pub const WORST_KEPT: usize = 10;

/// One reading of a pacing thread's counters, all cumulative except
/// `lateness`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostSample {
    /// When it was read, on the driver's timeline.
    pub at: Nanos,
    /// Time the thread spent runnable but waiting for its CPU.
    pub run_delay: Nanos,
    /// Time the hypervisor took from the thread's CPU.
    pub steal: Nanos,
    /// Involuntary context switches of the thread.
    pub involuntary: u64,
    /// Packets the pacer released late so far.
    pub late_packets: u64,
    /// The pacer's lateness at its latest release.
    pub lateness: Nanos,
}

/// What one late episode is put down to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    /// First sample that saw late packets.
    pub start: Nanos,
    /// First sample after it that saw none.
    pub end: Nanos,
    /// Worst lateness seen in it.
    pub worst: Nanos,
    /// Packets released late in it.
    pub late_packets: u64,
    /// Of `worst`, time spent waiting behind other threads.
    pub run_queue: Nanos,
    /// Of `worst`, time the hypervisor stole.
    pub steal: Nanos,
    /// The rest of `worst`: the thread woke late though free to run.
    pub timer: Nanos,
    /// Involuntary context switches in it.
    pub involuntary: u64,
}

impl Episode {
    /// The cause that took most of the time.
    pub fn main_cause(&self) -> Cause {
        if self.run_queue >= self.steal && self.run_queue >= self.timer {
            Cause::RunQueue
        } else if self.steal >= self.timer {
            Cause::Steal
        } else {
            Cause::Timer
        }
    }
}

/// The three causes of lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    /// Other threads ran on the pacer's CPU.
    RunQueue,
    /// The hypervisor ran something else on the vCPU.
    Steal,
    /// The thread woke late though nothing held it.
    Timer,
}

/// Totals over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallSummary {
    /// Late episodes.
    pub episodes: u64,
    /// Late packets in them.
    pub late_packets: u64,
    /// Sum of each episode's worst lateness.
    pub lateness: Nanos,
    /// Of that, waiting behind other threads.
    pub run_queue: Nanos,
    /// Of that, stolen by the hypervisor.
    pub steal: Nanos,
    /// Of that, late wake-ups.
    pub timer: Nanos,
    /// Involuntary context switches over the whole run.
    pub involuntary: u64,
    /// Run-queue wait over the whole run, late or not.
    pub run_queue_total: Nanos,
    /// Steal over the whole run.
    pub steal_total: Nanos,
    /// The worst episodes, worst first (at most [`WORST_KEPT`]).
    pub worst: Vec<Episode>,
}

/// Turns periodic [`HostSample`]s into attributed late episodes.
#[derive(Debug, Clone, Default)]
pub struct StallLog {
    history: VecDeque<HostSample>,
    first: Option<HostSample>,
    open: Option<Episode>,
    summary: StallSummary,
}

impl StallLog {
    /// An empty log.
    pub fn new() -> StallLog {
        StallLog::default()
    }

    /// Takes one sample (samples must come in time order).
    pub fn handle_sample(&mut self, s: HostSample) {
        self.first.get_or_insert(s);
        let prev = self.history.back().copied();
        let grew = prev.is_some_and(|p| s.late_packets > p.late_packets);
        match (&mut self.open, grew, prev) {
            (Some(e), true, Some(p)) => {
                e.worst = e.worst.max(s.lateness);
                e.late_packets += s.late_packets - p.late_packets;
            }
            (None, true, Some(p)) => {
                self.open = Some(Episode {
                    start: s.at,
                    worst: s.lateness,
                    late_packets: s.late_packets - p.late_packets,
                    ..Episode::default()
                });
            }
            (Some(_), false, _) => self.close(s),
            _ => {}
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(s);
    }

    /// Closes an open episode at `end` and attributes it.
    fn close(&mut self, end: HostSample) {
        let Some(mut e) = self.open.take() else {
            return;
        };
        e.end = end.at;
        // The stall began up to its worst lateness (and a sample period)
        // before the first late packet was seen.
        let from = e.start.saturating_sub(e.worst);
        let before = self
            .history
            .iter()
            .rev()
            .find(|h| h.at < from)
            .or(self.history.front())
            .copied()
            .unwrap_or(end);
        let rq = end.run_delay.saturating_sub(before.run_delay);
        let steal = end.steal.saturating_sub(before.steal);
        e.run_queue = rq.min(e.worst);
        e.steal = steal.min(e.worst.saturating_sub(e.run_queue));
        e.timer = e.worst.saturating_sub(e.run_queue).saturating_sub(e.steal);
        e.involuntary = end.involuntary.saturating_sub(before.involuntary);
        let s = &mut self.summary;
        s.episodes += 1;
        s.late_packets += e.late_packets;
        s.lateness = s.lateness.saturating_add(e.worst);
        s.run_queue = s.run_queue.saturating_add(e.run_queue);
        s.steal = s.steal.saturating_add(e.steal);
        s.timer = s.timer.saturating_add(e.timer);
        let at = s.worst.partition_point(|w| w.worst >= e.worst);
        if at < WORST_KEPT {
            s.worst.insert(at, e);
            s.worst.truncate(WORST_KEPT);
        }
    }

    /// Closes any open episode at the last sample and returns the totals.
    pub fn finish(&mut self) -> StallSummary {
        if let Some(last) = self.history.back().copied() {
            self.close(last);
            if let Some(first) = self.first {
                let s = &mut self.summary;
                s.involuntary = last.involuntary.saturating_sub(first.involuntary);
                s.run_queue_total = last.run_delay.saturating_sub(first.run_delay);
                s.steal_total = last.steal.saturating_sub(first.steal);
            }
        }
        self.summary.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    /// Samples every 5 ms; `f` edits the one at each step.
    fn run(steps: u64, f: impl Fn(u64, &mut HostSample)) -> StallSummary {
        let mut log = StallLog::new();
        let mut s = HostSample::default();
        for i in 0..steps {
            s.at = ms(5 * i);
            s.lateness = Nanos::ZERO;
            f(i, &mut s);
            log.handle_sample(s);
        }
        log.finish()
    }

    #[test]
    fn a_quiet_run_has_no_episode() {
        let s = run(100, |_, _| {});
        assert_eq!(s.episodes, 0);
        assert!(s.worst.is_empty());
    }

    #[test]
    fn a_stall_behind_another_thread_is_put_down_to_the_run_queue() {
        // 8 ms waiting on the run queue between samples 10 and 12, then
        // 30 late packets, 8 ms late at worst.
        let s = run(40, |i, s| {
            if i == 12 {
                s.run_delay += ms(8);
                s.involuntary += 3;
            }
            if i == 12 || i == 13 {
                s.late_packets += 15;
                s.lateness = ms(8);
            }
        });
        assert_eq!(s.episodes, 1);
        assert_eq!(s.late_packets, 30);
        let e = s.worst[0];
        assert_eq!((e.start, e.end, e.worst), (ms(60), ms(70), ms(8)));
        assert_eq!(
            (e.run_queue, e.steal, e.timer),
            (ms(8), Nanos::ZERO, Nanos::ZERO)
        );
        assert_eq!(e.involuntary, 3);
        assert_eq!(e.main_cause(), Cause::RunQueue);
        assert_eq!(s.involuntary, 3);
    }

    #[test]
    fn steal_and_timer_share_what_they_explain() {
        // 10 ms stolen, worst lateness 12 ms: 10 steal, 2 timer.
        let s = run(40, |i, s| {
            if i == 20 {
                s.steal += ms(10);
                s.late_packets += 5;
                s.lateness = ms(12);
            }
        });
        let e = s.worst[0];
        assert_eq!(
            (e.run_queue, e.steal, e.timer),
            (Nanos::ZERO, ms(10), ms(2))
        );
        assert_eq!(e.main_cause(), Cause::Steal);
        assert_eq!((s.steal, s.timer, s.steal_total), (ms(10), ms(2), ms(10)));
    }

    #[test]
    fn counters_never_explain_more_than_the_lateness() {
        // 50 ms of run-queue wait around a 1 ms late episode.
        let s = run(40, |i, s| {
            if i == 20 {
                s.run_delay += ms(50);
                s.late_packets += 1;
                s.lateness = ms(1);
            }
        });
        let e = s.worst[0];
        assert_eq!(
            (e.run_queue, e.steal, e.timer),
            (ms(1), Nanos::ZERO, Nanos::ZERO)
        );
        assert_eq!(s.run_queue_total, ms(50));
    }

    #[test]
    fn a_late_wake_up_with_nothing_in_the_way_is_the_timer() {
        let s = run(40, |i, s| {
            if i == 30 {
                s.late_packets += 2;
                s.lateness = Nanos::from_micros(300);
            }
        });
        assert_eq!(s.worst[0].main_cause(), Cause::Timer);
        assert_eq!(s.timer, Nanos::from_micros(300));
    }

    #[test]
    fn the_worst_episodes_are_kept_worst_first_and_bounded() {
        let s = run(400, |i, s| {
            if i % 10 == 5 {
                s.late_packets += 1;
                s.lateness = Nanos::from_micros(100 + i);
            }
        });
        assert_eq!(s.episodes, 40);
        assert_eq!(s.worst.len(), WORST_KEPT);
        assert_eq!(s.worst[0].worst, Nanos::from_micros(495));
        assert!(s.worst.windows(2).all(|w| w[0].worst >= w[1].worst));
    }

    #[test]
    fn an_episode_still_open_at_the_end_is_counted() {
        let s = run(10, |i, s| {
            if i >= 8 {
                s.late_packets += 4;
                s.lateness = ms(2);
            }
        });
        assert_eq!((s.episodes, s.late_packets), (1, 8));
    }
}
