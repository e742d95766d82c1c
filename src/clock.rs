//! The drivers' clock: maps proto time ([`Nanos`] on an [`Origin`]'s
//! timeline) to `Instant`s and back, finds the epoch frame grid, and
//! waits precisely.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nagare_proto::{FrameRate, Nanos};

/// Bounds of the spin margin: how long before a deadline the wait stops
/// sleeping and spins. Linux sleeps end late by the timer slack (1 µs with
/// `tuning::precise_timers`) plus wake-up latency, about 20 µs typically
/// and 50 µs at p99 on a loaded VM, which is the whole pacing budget at
/// gigabit rates; spinning the whole time would cost a core.
const MIN_MARGIN_NS: u64 = 10_000;
const MAX_MARGIN_NS: u64 = 100_000;

thread_local! {
    /// Smoothed sleep overshoot of this thread, in nanoseconds (x16 fixed point).
    static OVERSHOOT: std::cell::Cell<u64> = const { std::cell::Cell::new(20_000 * 16) };
    /// Spinning budget of a real-time thread (None for a normal one).
    static SPIN: std::cell::Cell<Option<SpinBudget>> = const { std::cell::Cell::new(None) };
}

/// How long a real-time thread's CPU share is measured over.
const SPIN_WINDOW: Duration = Duration::from_millis(10);
/// Above this share of a window on the CPU, a real-time thread stops
/// spinning for the next window. The kernel throttles SCHED_FIFO threads
/// that run 95% of a second (sched_rt_runtime_us) and then takes 50 ms
/// from them at once; a precise pacer that spun between close trains hit
/// that every second (52-54 ms stalls measured at 2.5 Gbit/s).
const SPIN_SHARE: f64 = 0.80;

/// A real-time thread's recent CPU share, to keep it under throttling.
#[derive(Debug, Clone, Copy)]
struct SpinBudget {
    since: Instant,
    cpu: Duration,
    allowed: bool,
}

/// Marks the calling thread real-time: from now on its waits spin only
/// while its CPU share stays below [`SPIN_SHARE`].
pub(crate) fn mark_realtime() {
    SPIN.with(|s| {
        s.set(Some(SpinBudget {
            since: Instant::now(),
            cpu: thread_cpu_time(),
            allowed: true,
        }))
    });
}

/// The calling thread's CPU time (zero if the kernel does not say).
fn thread_cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

/// Whether the calling thread may spin now (always, unless real-time and
/// over its share in the last window).
fn may_spin(now: Instant) -> bool {
    SPIN.with(|s| {
        let Some(mut b) = s.get() else {
            return true;
        };
        let wall = now.saturating_duration_since(b.since);
        if wall >= SPIN_WINDOW {
            let cpu = thread_cpu_time();
            let share = cpu.saturating_sub(b.cpu).as_secs_f64() / wall.as_secs_f64();
            b = SpinBudget {
                since: now,
                cpu,
                allowed: share < SPIN_SHARE,
            };
            s.set(Some(b));
        }
        b.allowed
    })
}

/// How a sender waits for its next train: the trade between pacing
/// precision and CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Pacing {
    /// Sleep, then spin the last stretch: trains leave within a few µs of
    /// their slot, at the cost of a spinning core between close trains.
    #[default]
    Precise,
    /// Only sleep (1 µs timer slack): trains leave up to the wake-up
    /// latency (tens of µs) behind their slot, which ST 2110-21's wide
    /// sender (W) absorbs, for a fraction of the CPU.
    Efficient,
}

impl Pacing {
    /// Waits for `deadline` the way this mode does.
    pub(crate) fn wait(self, deadline: Instant) {
        match self {
            Pacing::Precise => wait_until(deadline),
            Pacing::Efficient => sleep_until(deadline),
        }
    }
}

/// Sleeps until `deadline` without spinning; returns at once if it has
/// passed.
pub(crate) fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if now < deadline {
        std::thread::sleep(deadline - now);
    }
}

/// Sleeps most of the way to `deadline`, then spins the rest. The margin
/// left for spinning adapts to how late this thread's sleeps have been
/// ending (twice the smoothed overshoot), so an idle machine spins little
/// and a loaded one still meets its deadlines.
pub(crate) fn wait_until(deadline: Instant) {
    let now = Instant::now();
    if now >= deadline {
        return;
    }
    if !may_spin(now) {
        sleep_until(deadline);
        return;
    }
    let avg = OVERSHOOT.with(|o| o.get() / 16);
    let margin = Duration::from_nanos((2 * avg + 5_000).clamp(MIN_MARGIN_NS, MAX_MARGIN_NS));
    let left = deadline - now;
    if left > margin {
        let target = deadline - margin;
        std::thread::sleep(target - now);
        let woke = Instant::now();
        let over = woke
            .saturating_duration_since(target)
            .as_nanos()
            .min(10_000_000) as u64;
        // EWMA with weight 1/16, kept in x16 fixed point.
        OVERSHOOT.with(|o| o.set(o.get() - o.get() / 16 + over));
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// CPU time this process used, user plus system, in seconds (0 if the
/// kernel does not say).
pub(crate) fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| tv(u.user_time()) + tv(u.system_time()))
}

/// CPU time the calling thread used, user plus system, in seconds (0 if
/// the kernel does not say): the sending thread's own cost, without the
/// reader's.
pub(crate) fn thread_cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0.0, |u| tv(u.user_time()) + tv(u.system_time()))
}

/// Nanoseconds since the Unix epoch on the system clock.
pub(crate) fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The drivers' timeline: nagare-proto's machines count [`Nanos`] from
/// this `Instant`, and a driver converts at the edges (a deadline into an
/// `Instant` to wait for, a receive stamp into `Nanos`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    zero: Instant,
}

/// Where a stream starts on the epoch frame grid.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EpochStart {
    /// First frame number counted from the Unix epoch.
    pub first_frame: u64,
    /// When that frame starts, on the origin's timeline.
    pub at: Nanos,
}

impl Origin {
    /// A timeline starting now.
    pub(crate) fn now() -> Origin {
        Origin {
            zero: Instant::now(),
        }
    }

    /// `at` on this timeline (zero for instants before the origin).
    pub(crate) fn nanos(&self, at: Instant) -> Nanos {
        Nanos::from(at.saturating_duration_since(self.zero))
    }

    /// Now on this timeline.
    pub(crate) fn elapsed(&self) -> Nanos {
        self.nanos(Instant::now())
    }

    /// The `Instant` of `t` on this timeline.
    pub(crate) fn instant(&self, t: Nanos) -> Instant {
        self.zero + Duration::from(t)
    }

    /// Epoch frame `first_frame` of `rate` and when it starts on this
    /// timeline (now, if it is already past).
    pub(crate) fn frame_start(&self, rate: FrameRate, first_frame: u64) -> EpochStart {
        let now = self.elapsed();
        let ahead = rate.frame_start_ns(first_frame).saturating_sub(epoch_ns());
        EpochStart {
            first_frame,
            at: now + Nanos(u64::try_from(ahead).unwrap_or(u64::MAX)),
        }
    }

    /// The first frame boundary on the epoch grid at least `lead` from now,
    /// so every sender of the same rate starts on the same grid.
    pub(crate) fn epoch_start(&self, rate: FrameRate, lead: Duration) -> EpochStart {
        let now = self.elapsed();
        let now_e = epoch_ns();
        let first_frame = rate.frame_at_or_after_ns(now_e + lead.as_nanos());
        let ahead = rate.frame_start_ns(first_frame).saturating_sub(now_e);
        EpochStart {
            first_frame,
            at: now + Nanos(u64::try_from(ahead).unwrap_or(u64::MAX)),
        }
    }
}
