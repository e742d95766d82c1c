//! The drivers' clock: maps pacer time (a `Duration` since the first
//! frame's start on the epoch grid) to `Instant`s, and waits precisely.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nagare_proto::FrameRate;

/// Below this much remaining time the wait spins instead of sleeping:
/// even with 1 µs timer slack (see `tuning::precise_timers`) a sleep here
/// overshoots by about 20 µs typically and 50 µs at p99 under load, which
/// is the whole pacing budget at gigabit rates.
const SPIN_BELOW: Duration = Duration::from_micros(60);

/// Sleeps most of the way to `deadline`, then spins the rest.
pub fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN_BELOW {
            std::thread::sleep(left - SPIN_BELOW);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Nanoseconds since the Unix epoch on the system clock.
pub fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The schedule's origin: the epoch frame number at which sending starts
/// and the `Instant` that frame begins at.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    /// First frame number counted from the epoch.
    pub first_frame: u64,
    /// When that frame starts on this host's monotonic clock.
    pub instant: Instant,
}

impl Origin {
    /// The first frame boundary on the epoch grid at least `lead` from now,
    /// so every sender of the same rate starts on the same grid.
    pub fn aligned(rate: FrameRate, lead: Duration) -> Origin {
        let now_i = Instant::now();
        let now_e = epoch_ns();
        let first_frame = rate.frame_at_or_after_ns(now_e + lead.as_nanos());
        let start_e = rate.frame_start_ns(first_frame);
        let ahead = Duration::from_nanos(u64::try_from(start_e.saturating_sub(now_e)).unwrap_or(0));
        Origin {
            first_frame,
            instant: now_i + ahead,
        }
    }

    /// Pacer time of `at`.
    pub fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.instant)
    }

    /// The instant of pacer time `t`.
    pub fn at(&self, t: Duration) -> Instant {
        self.instant + t
    }
}
