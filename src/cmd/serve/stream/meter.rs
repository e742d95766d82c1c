//! How busy a thread is and what a unit of its work costs, measured over
//! one-second windows and published for admission to read from other
//! threads; and, at once rather than per window, whether it is falling
//! behind (admission must hear that within a request, not a second).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nagare_proto::Nanos;

/// Length of a measuring window.
const WINDOW: Duration = Duration::from_secs(1);

/// The last closed window of one thread, readable from any thread.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// Share of the window spent working, as f64 bits.
    load: AtomicU64,
    /// Working time in the window, ns.
    busy_ns: AtomicU64,
    /// Units of work done in the window (datagrams, bytes).
    units: AtomicU64,
    /// When the thread fell behind its schedule, if it has stayed behind
    /// since: [`mono`] time plus one, 0 while on time.
    behind_since: AtomicU64,
    /// When the thread last found a running stream's ring empty as it
    /// asked for the next frame: [`mono`] time plus one, 0 if never.
    dry_at: AtomicU64,
}

/// Nanoseconds on one monotonic timeline all threads share.
fn mono() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    Nanos::from(START.get_or_init(Instant::now).elapsed()).as_nanos()
}

/// Time since a stamp of [`mono`] plus one (0: none).
fn since(stamp: u64) -> Option<Nanos> {
    (stamp != 0).then(|| Nanos(mono().saturating_sub(stamp - 1)))
}

impl Published {
    /// Share of the last window spent working, 0 to 1.
    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.load.load(Ordering::Relaxed))
    }

    /// Working time and units of work of the last window.
    pub(crate) fn work(&self) -> (Nanos, u64) {
        (
            Nanos(self.busy_ns.load(Ordering::Relaxed)),
            self.units.load(Ordering::Relaxed),
        )
    }

    /// How long the thread has been behind its schedule (zero: on time).
    pub(crate) fn behind_for(&self) -> Nanos {
        since(self.behind_since.load(Ordering::Relaxed)).unwrap_or_default()
    }

    /// How long ago the thread last found a running stream's ring empty.
    pub(crate) fn since_dry_ring(&self) -> Option<Nanos> {
        since(self.dry_at.load(Ordering::Relaxed))
    }
}

/// Counts a thread's idle time and work; the rest of the wall time is
/// working time.
pub(crate) struct LoadMeter {
    window: Instant,
    idle: Duration,
    units: u64,
    out: Arc<Published>,
}

impl LoadMeter {
    /// A meter publishing to `out`.
    pub(crate) fn new(out: Arc<Published>) -> LoadMeter {
        LoadMeter {
            window: Instant::now(),
            idle: Duration::ZERO,
            units: 0,
            out,
        }
    }

    /// Counts `units` of work done.
    pub(crate) fn worked(&mut self, units: u64) {
        self.units += units;
    }

    /// Says whether the thread is behind its schedule now; the first
    /// call of a run of `true` marks when it fell behind.
    pub(crate) fn behind(&mut self, behind: bool) {
        let stamp = &self.out.behind_since;
        match (behind, stamp.load(Ordering::Relaxed)) {
            (true, 0) => stamp.store(mono() + 1, Ordering::Relaxed),
            (false, s) if s != 0 => stamp.store(0, Ordering::Relaxed),
            _ => {}
        }
    }

    /// Notes that a running stream's ring was found empty just now.
    pub(crate) fn dry_ring(&mut self) {
        self.out.dry_at.store(mono() + 1, Ordering::Relaxed);
    }

    /// Counts `d` spent waiting, and closes the window once it is a
    /// second long. A thread behind schedule calls this with zero, so its
    /// window still closes and reads as saturated.
    pub(crate) fn idle(&mut self, d: Duration) {
        self.idle += d;
        let span = self.window.elapsed();
        if span < WINDOW {
            return;
        }
        let busy = span.saturating_sub(self.idle);
        let share = (busy.as_secs_f64() / span.as_secs_f64()).clamp(0.0, 1.0);
        self.out.load.store(share.to_bits(), Ordering::Relaxed);
        self.out
            .busy_ns
            .store(Nanos::from(busy).as_nanos(), Ordering::Relaxed);
        self.out.units.store(self.units, Ordering::Relaxed);
        self.window = Instant::now();
        self.idle = Duration::ZERO;
        self.units = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_publishes_its_share_and_work() {
        let out = Arc::new(Published::default());
        let mut m = LoadMeter::new(out.clone());
        m.window = Instant::now() - Duration::from_millis(1_000);
        m.worked(4_000);
        m.idle(Duration::from_millis(750));
        let load = out.load();
        // A stall between the lines adds to the span; bounded generously.
        assert!((0.24..0.4).contains(&load), "{load}");
        let (busy, units) = out.work();
        assert_eq!(units, 4_000);
        assert!(
            (249..=500).contains(&(busy.as_nanos() / 1_000_000)),
            "{busy}"
        );
        // The next window starts from nothing.
        assert_eq!(m.units, 0);
    }

    #[test]
    fn falling_behind_and_dry_rings_are_published_at_once() {
        let out = Arc::new(Published::default());
        let mut m = LoadMeter::new(out.clone());
        assert_eq!(
            (out.behind_for(), out.since_dry_ring()),
            (Nanos::ZERO, None)
        );
        m.behind(true);
        std::thread::sleep(Duration::from_millis(5));
        m.behind(true);
        let behind = out.behind_for();
        assert!(behind >= Nanos::from_millis(5), "{behind}");
        m.behind(false);
        assert_eq!(out.behind_for(), Nanos::ZERO);
        m.dry_ring();
        assert!(
            out.since_dry_ring()
                .is_some_and(|d| d < Nanos::from_secs(5))
        );
    }
}
