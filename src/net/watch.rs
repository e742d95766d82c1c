//! Watches a pacing thread from another thread: every few milliseconds it
//! reads the pacer's run-queue wait (`/proc/self/task/TID/schedstat`), its
//! involuntary context switches (`…/status`) and its CPUs' steal time
//! (`/proc/stat`), next to the pacer's own late-packet count, and feeds
//! them to nagare-proto's [`StallLog`], which says what made each late
//! episode late. The pacer pays two relaxed atomic stores per train.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use nagare_proto::Nanos;
use nagare_proto::stats::stall::{HostSample, StallLog, StallSummary};

use super::placement::{Placement, Role};
use crate::clock::Origin;

/// How often the watcher samples: fine enough to bracket a VM stall of a
/// few ms, coarse enough to cost about 1% of the helper CPU.
const PERIOD: Duration = Duration::from_millis(5);

/// What the pacer publishes for its watcher.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    late_packets: AtomicU64,
    lateness_ns: AtomicU64,
}

impl Gauge {
    /// Records the pacer's late count and its latest train's lateness.
    pub(crate) fn record(&self, late_packets: u64, lateness: Nanos) {
        self.late_packets.store(late_packets, Ordering::Relaxed);
        self.lateness_ns
            .store(lateness.as_nanos(), Ordering::Relaxed);
    }
}

/// The calling thread's kernel id.
pub(crate) fn thread_id() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// A watcher thread; [`Watch::finish`] stops it and returns the summary.
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<StallSummary>,
}

impl Watch {
    /// Starts watching thread `tid`, which runs on `cpus` (empty: any),
    /// from a helper CPU. `None` where /proc does not have the counters.
    pub(crate) fn start(
        tid: i32,
        cpus: Vec<usize>,
        gauge: Arc<Gauge>,
        origin: Origin,
        placement: &Placement,
        pacers: usize,
    ) -> Option<Watch> {
        let mut counters = ThreadCounters::open(tid, cpus)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let placement = placement.clone();
        let handle = std::thread::Builder::new()
            .name("nagare-watch".into())
            .spawn(move || {
                super::tuning::ordinary();
                let _ = placement.apply(Role::Helper { pacers });
                let mut log = StallLog::new();
                loop {
                    let last = stop2.load(Ordering::Relaxed);
                    let (run_delay, involuntary, steal) = counters.read();
                    log.handle_sample(HostSample {
                        at: origin.elapsed(),
                        run_delay,
                        steal,
                        involuntary,
                        late_packets: gauge.late_packets.load(Ordering::Relaxed),
                        lateness: Nanos(gauge.lateness_ns.load(Ordering::Relaxed)),
                    });
                    if last {
                        return log.finish();
                    }
                    std::thread::sleep(PERIOD);
                }
            })
            .ok()?;
        Some(Watch { stop, handle })
    }

    /// Takes a last sample, stops the watcher and returns what it saw.
    pub(crate) fn finish(self) -> StallSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Open /proc files of one thread and its CPUs.
struct ThreadCounters {
    schedstat: File,
    status: File,
    stat: File,
    cpus: Vec<usize>,
    tick_ns: u64,
    buf: String,
}

impl ThreadCounters {
    fn open(tid: i32, cpus: Vec<usize>) -> Option<ThreadCounters> {
        let task = format!("/proc/self/task/{tid}");
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&h| h > 0)
            .unwrap_or(100);
        Some(ThreadCounters {
            schedstat: File::open(format!("{task}/schedstat")).ok()?,
            status: File::open(format!("{task}/status")).ok()?,
            stat: File::open("/proc/stat").ok()?,
            cpus,
            tick_ns: 1_000_000_000 / hz as u64,
            buf: String::with_capacity(16 << 10),
        })
    }

    /// Run-queue wait, involuntary switches and steal, all cumulative.
    fn read(&mut self) -> (Nanos, u64, Nanos) {
        let run_delay = reread(&mut self.schedstat, &mut self.buf)
            .and_then(parse_run_delay)
            .unwrap_or(0);
        let involuntary = reread(&mut self.status, &mut self.buf)
            .and_then(parse_involuntary)
            .unwrap_or(0);
        let ticks = reread(&mut self.stat, &mut self.buf)
            .map(|s| parse_steal_ticks(s, &self.cpus))
            .unwrap_or(0);
        (
            Nanos(run_delay),
            involuntary,
            Nanos(ticks.saturating_mul(self.tick_ns)),
        )
    }
}

/// Reads a /proc file again from its start.
pub(crate) fn reread<'a>(f: &mut File, buf: &'a mut String) -> Option<&'a str> {
    buf.clear();
    f.seek(SeekFrom::Start(0)).ok()?;
    f.read_to_string(buf).ok()?;
    Some(buf)
}

/// The second field of `schedstat`: nanoseconds spent runnable on a run
/// queue, waiting for the CPU.
pub(crate) fn parse_run_delay(s: &str) -> Option<u64> {
    s.split_whitespace().nth(1)?.parse().ok()
}

/// `nonvoluntary_ctxt_switches` of a task's `status`.
fn parse_involuntary(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// Steal ticks (the 8th value of a `cpuN` line of /proc/stat) summed over
/// `cpus`, or of all CPUs averaged when `cpus` is empty.
fn parse_steal_ticks(s: &str, cpus: &[usize]) -> u64 {
    let mut sum = 0u64;
    let mut count = 0u64;
    for line in s.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            break;
        };
        // "cpu  …" sums every CPU; "cpuN …" is one.
        if rest.starts_with(' ') {
            continue;
        }
        let mut fields = rest.split_whitespace();
        let Some(Ok(cpu)) = fields.next().map(str::parse::<usize>) else {
            continue;
        };
        if !cpus.is_empty() && !cpus.contains(&cpu) {
            continue;
        }
        if let Some(Ok(steal)) = fields.nth(7).map(str::parse::<u64>) {
            sum += steal;
            count += 1;
        }
    }
    if cpus.is_empty() {
        sum / count.max(1)
    } else {
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_formats_parse() {
        assert_eq!(parse_run_delay("123 456 7\n"), Some(456));
        assert_eq!(parse_run_delay("123"), None);
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t42\n";
        assert_eq!(parse_involuntary(status), Some(42));
        let stat = "cpu  1 2 3 4 5 6 7 90 0 0\n\
                    cpu0 1 2 3 4 5 6 7 30 0 0\n\
                    cpu1 1 2 3 4 5 6 7 60 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(parse_steal_ticks(stat, &[1]), 60);
        assert_eq!(parse_steal_ticks(stat, &[0, 1]), 90);
        assert_eq!(parse_steal_ticks(stat, &[]), 45);
    }

    #[test]
    fn a_thread_sharing_its_cpu_waits_on_the_run_queue() {
        // Two spinning threads on one CPU: each waits about half the time.
        let cpu = *crate::net::placement::current_cpus()
            .first()
            .expect("a CPU");
        let spin = move || {
            crate::net::placement::pin_to(&[cpu]).expect("pin");
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(200) {
                std::hint::spin_loop();
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let watched = std::thread::spawn(move || {
            let mut c = ThreadCounters::open(thread_id(), vec![cpu]).expect("/proc has schedstat");
            let before = c.read();
            let other = std::thread::spawn(spin);
            spin();
            other.join().expect("spinner");
            tx.send((before, c.read())).expect("send");
        });
        watched.join().expect("watched thread");
        let ((rd0, inv0, _), (rd1, inv1, _)) = rx.recv().expect("counters");
        assert!(
            rd1 - rd0 >= Nanos::from_millis(20),
            "run delay {}",
            rd1 - rd0
        );
        assert!(inv1 > inv0, "involuntary switches {inv0} -> {inv1}");
    }
}
