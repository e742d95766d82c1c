//! Keeps a pacer's CPU from halting while the pacer sleeps between trains.
//!
//! On a virtual machine an idle CPU halts, which hands the virtual CPU
//! back to the host; the pacer's next timer then waits for the host to
//! run that virtual CPU again, and on a busy host that can take
//! milliseconds. Measured on a 2-vCPU Firecracker VM (Intel Xeon @
//! 2.50 GHz, Linux 6.18): with the pacer's CPU left to halt, `nagare demo`
//! kept its sender type in 2 of 10 runs even with the receiver polling;
//! with the CPU held awake, 10 of 10. A real machine gains little
//! (its idle states wake in microseconds) and loses nothing the pacer
//! needs: the holder runs at SCHED_IDLE, so the pacer, or any other
//! thread that wakes on that CPU, takes the CPU from it at once.
//!
//! The holder only runs where the pacer has a CPU to itself (placement
//! gave it one), for the precise pacing mode, and stops when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use super::placement::pin_to;
use super::tuning::idle_priority;

/// Threads that keep CPUs busy at the lowest priority until dropped.
pub(crate) struct KeepAwake {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl KeepAwake {
    /// Starts one holder on each of `cpus`. A CPU the holder cannot be
    /// placed on or lowered to SCHED_IDLE on gets none (a holder at
    /// normal priority would compete with the pacer); returns `None`
    /// when no holder runs.
    pub(crate) fn start(cpus: &[usize]) -> Option<KeepAwake> {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<JoinHandle<()>> = cpus
            .iter()
            .filter_map(|&cpu| {
                let stop = Arc::clone(&stop);
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let handle = std::thread::Builder::new()
                    .name(format!("awake-{cpu}"))
                    .spawn(move || {
                        // Lower first, then move: never a moment at normal
                        // priority on the pacer's CPU.
                        let ok = idle_priority().is_ok() && pin_to(&[cpu]).is_ok();
                        let _ = ready_tx.send(ok);
                        if ok {
                            hold(&stop);
                        }
                    })
                    .ok()?;
                match ready_rx.recv() {
                    Ok(true) => Some(handle),
                    _ => {
                        let _ = handle.join();
                        None
                    }
                }
            })
            .collect();
        (!threads.is_empty()).then_some(KeepAwake { stop, threads })
    }
}

/// Spins until `stop`: a CPU running this never halts.
fn hold(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (policy, Cpus_allowed_list) of this process's thread named `name`.
    fn thread_named(name: &str) -> Option<(u32, String)> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let dir = task.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the parenthesised name; policy is field 41.
            let rest = &stat[stat.rfind(')')? + 2..];
            let policy = rest.split(' ').nth(41 - 3)?.parse().ok()?;
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_string();
            return Some((policy, cpus));
        }
        None
    }

    #[test]
    fn holders_run_at_idle_priority_on_their_cpu_until_dropped() {
        let cpus = super::super::placement::current_cpus();
        let cpu = *cpus.last().expect("a CPU");
        let held = KeepAwake::start(&[cpu]).expect("SCHED_IDLE needs no privilege");
        let name = format!("awake-{cpu}");
        let (policy, allowed) = thread_named(&name).expect("the holder thread");
        assert_eq!(policy, libc::SCHED_IDLE as u32);
        assert_eq!(allowed, cpu.to_string());
        drop(held);
        // The joined thread's /proc entry can outlive the join by a
        // moment (the kernel wakes the joiner before it reaps the task):
        // look again until a bounded deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while thread_named(&name).is_some() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(thread_named(&name).is_none(), "the holder stopped");
    }
}
