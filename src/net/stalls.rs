//! What the host takes from a CPU that never sleeps.
//!
//! A pacer holds its CPU awake between trains (`awake.rs`), so what
//! makes it late is not how fast a sleeping thread wakes (`wakeup.rs`)
//! but the times the host does not run that virtual CPU at all. A thread
//! here spins on each CPU reading the clock; every gap of more than
//! [`MIN_STALL`] between two reads is a stall. The thread's run-queue
//! wait (`schedstat`) tells the guest's own stalls (another thread of
//! this machine ran) from the host's.
//!
//! Why both with the other CPUs idle and with all busy: on a 2-vCPU
//! Firecracker VM (AMD EPYC), one CPU spinning for 30 s met 2 stalls over
//! 2.5 ms (the longest 4.0 ms); both spinning at once met 39 and 4 (5.7
//! ms), never both CPUs at the same instant. A host that shares its
//! cores takes much more from a guest that keeps them all busy.

use std::fs::File;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use super::placement::pin_to;
use super::watch::{parse_run_delay, reread};

/// The shortest gap between two clock reads counted as a stall: far
/// above a read's cost and an interrupt's, and below the slack of any
/// wide (W) sender.
pub(crate) const MIN_STALL: Duration = Duration::from_millis(1);

/// Most stalls kept per CPU, so that a host that stops a CPU every
/// millisecond does not grow the list without bound.
const MAX_STALLS: usize = 4096;

/// One gap in a spinning thread's clock reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stall {
    /// When it began, from the probe's start.
    pub at: Duration,
    /// How long the thread did not run.
    pub len: Duration,
    /// Whether the guest ran another thread meanwhile (the thread's
    /// run-queue wait grew by half the gap or more), rather than the host
    /// not running the CPU.
    pub guest: bool,
}

/// The stalls one CPU met while kept busy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BusyCpu {
    /// The CPU.
    pub cpu: usize,
    /// How long it was kept busy.
    pub span: Duration,
    /// Its stalls in order (at most [`MAX_STALLS`]).
    pub stalls: Vec<Stall>,
}

impl BusyCpu {
    /// The host's stalls (not the guest's) longer than `limit`.
    pub(crate) fn host_longer_than(&self, limit: Duration) -> usize {
        self.host().filter(|s| s.len > limit).count()
    }

    /// The host's longest stall (zero without one).
    pub(crate) fn longest_host(&self) -> Duration {
        self.host().map(|s| s.len).max().unwrap_or_default()
    }

    /// The host's stalls.
    pub(crate) fn host(&self) -> impl Iterator<Item = &Stall> {
        self.stalls.iter().filter(|s| !s.guest)
    }

    /// Stalls the guest caused.
    pub(crate) fn guest_count(&self) -> usize {
        self.stalls.iter().filter(|s| s.guest).count()
    }
}

/// Keeps every CPU of `cpus` busy at once for `total`, each with one
/// pinned thread at normal priority (a real-time spinner would meet the
/// kernel's RT throttling, not the host), and returns what each met.
pub(crate) fn probe(cpus: &[usize], total: Duration) -> Result<Vec<BusyCpu>> {
    let start = Arc::new(Barrier::new(cpus.len()));
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let placed = pin_to(&[cpu]);
                // Every thread reaches the barrier, placed or not, so
                // that none waits for ever.
                start.wait();
                placed?;
                Ok(spin(cpu, total))
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| anyhow!("a stall probe thread panicked"))?
        })
        .collect()
}

/// Spins on the calling thread's CPU for `total`, noting every gap.
fn spin(cpu: usize, total: Duration) -> BusyCpu {
    let mut waits = RunDelay::open();
    let mut waited = waits.as_mut().map_or(0, RunDelay::read);
    let start = Instant::now();
    let end = start + total;
    let mut stalls = Vec::new();
    let mut last = start;
    while last < end {
        let now = Instant::now();
        let gap = now - last;
        if gap > MIN_STALL && stalls.len() < MAX_STALLS {
            let w = waits.as_mut().map_or(waited, RunDelay::read);
            let guest = u128::from(w.saturating_sub(waited)) * 2 >= gap.as_nanos();
            waited = w;
            stalls.push(Stall {
                at: last - start,
                len: gap,
                guest,
            });
        }
        last = now;
    }
    BusyCpu {
        cpu,
        span: last - start,
        stalls,
    }
}

/// Host stalls longer than `limit` that every CPU of `busy` was in at
/// the same instant, counted on the first CPU: for a sender that could
/// move to another CPU, the ones it could not escape.
pub(crate) fn stopped_together(busy: &[BusyCpu], limit: Duration) -> usize {
    let Some((first, rest)) = busy.split_first() else {
        return 0;
    };
    let overlaps = |a: &Stall, b: &Stall| a.at < b.at + b.len && b.at < a.at + a.len;
    first
        .host()
        .filter(|s| s.len > limit)
        .filter(|s| {
            rest.iter()
                .all(|o| o.host().any(|t| t.len > limit && overlaps(s, t)))
        })
        .count()
}

/// The calling thread's run-queue wait, in nanoseconds, re-read from
/// `/proc/thread-self/schedstat` as `watch` reads a pacer's.
struct RunDelay {
    file: File,
    buf: String,
}

impl RunDelay {
    fn open() -> Option<RunDelay> {
        Some(RunDelay {
            file: File::open("/proc/thread-self/schedstat").ok()?,
            buf: String::with_capacity(64),
        })
    }

    fn read(&mut self) -> u64 {
        reread(&mut self.file, &mut self.buf)
            .and_then(parse_run_delay)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(cpu: usize, stalls: &[(u64, u64, bool)]) -> BusyCpu {
        BusyCpu {
            cpu,
            span: Duration::from_secs(5),
            stalls: stalls
                .iter()
                .map(|&(at, len, guest)| Stall {
                    at: Duration::from_millis(at),
                    len: Duration::from_micros(len),
                    guest,
                })
                .collect(),
        }
    }

    #[test]
    fn the_hosts_stalls_are_counted_apart_from_the_guests() {
        let b = busy(1, &[(10, 1500, false), (20, 5700, false), (30, 9000, true)]);
        assert_eq!(b.host_longer_than(Duration::from_millis(3)), 1);
        assert_eq!(b.host_longer_than(Duration::from_millis(1)), 2);
        assert_eq!(b.longest_host(), Duration::from_micros(5700));
        assert_eq!(b.guest_count(), 1);
        assert_eq!(busy(0, &[]).longest_host(), Duration::ZERO);
    }

    #[test]
    fn only_stalls_of_every_cpu_at_once_count_as_together() {
        let limit = Duration::from_millis(3);
        let a = busy(
            0,
            &[(100, 5000, false), (200, 5000, false), (300, 5000, false)],
        );
        // Overlaps the first, misses the second, and the third only with
        // a stall under the limit.
        let b = busy(
            1,
            &[(103, 4000, false), (206, 4000, false), (301, 2000, false)],
        );
        assert_eq!(stopped_together(&[a.clone(), b], limit), 1);
        // A guest's stall on the other CPU is not the host's.
        let c = busy(1, &[(103, 4000, true)]);
        assert_eq!(stopped_together(&[a.clone(), c], limit), 0);
        // One CPU alone: every long stall of its own.
        assert_eq!(stopped_together(std::slice::from_ref(&a), limit), 3);
        assert_eq!(stopped_together(&[], limit), 0);
    }

    #[test]
    fn a_probe_spins_on_each_cpu_for_its_span() {
        let cpus = crate::net::placement::start_cpus();
        let got = probe(&cpus, Duration::from_millis(50)).unwrap();
        assert_eq!(got.iter().map(|b| b.cpu).collect::<Vec<_>>(), cpus);
        for b in &got {
            assert!(b.span >= Duration::from_millis(50), "{b:?}");
            assert!(b.stalls.len() <= MAX_STALLS);
            assert!(b.stalls.iter().all(|s| s.len > MIN_STALL), "{b:?}");
        }
    }

    #[test]
    fn a_real_time_thread_on_the_cpu_is_the_guests_stall() {
        // A spinner on the highest CPU for 300 ms; once it spins, a thread
        // waiting on another CPU moves there at SCHED_FIFO and spins 30
        // ms, so the spinner waits that long on its run queue.
        let cpus = crate::net::placement::start_cpus();
        let (&cpu, others) = cpus.split_last().unwrap();
        let Some(&other) = others.first() else {
            return eprintln!("skipped: one CPU");
        };
        let spinning = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&spinning);
        let probe = std::thread::spawn(move || {
            pin_to(&[cpu]).unwrap();
            flag.store(true, std::sync::atomic::Ordering::Release);
            spin(cpu, Duration::from_millis(300))
        });
        let hog = std::thread::spawn(move || {
            pin_to(&[other]).unwrap();
            let give_up = Instant::now() + Duration::from_secs(10);
            while !spinning.load(std::sync::atomic::Ordering::Acquire) {
                assert!(Instant::now() < give_up, "the spinner never started");
                std::hint::spin_loop();
            }
            if crate::net::tuning::realtime().is_err() || pin_to(&[cpu]).is_err() {
                return false;
            }
            let hold = Instant::now();
            while hold.elapsed() < Duration::from_millis(30) {
                std::hint::spin_loop();
            }
            true
        });
        let hogged = hog.join().unwrap();
        let b = probe.join().unwrap();
        if !hogged {
            return eprintln!("skipped: this process may not run SCHED_FIFO");
        }
        let guest: Duration = b.stalls.iter().filter(|s| s.guest).map(|s| s.len).sum();
        assert!(guest >= Duration::from_millis(25), "{b:?}");
    }
}
