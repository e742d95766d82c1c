//! Per-thread tuning for the time-critical threads: precise timers, CPU
//! pinning and real-time scheduling.
//!
//! Timer slack and affinity go through nix's safe wrappers; nix has no
//! `sched_setscheduler`, so the scheduling policy is one raw call.

use std::io;
use std::sync::OnceLock;

use anyhow::{Result, bail};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// Shrinks this thread's timer slack to 1 µs. Linux otherwise lets sleeps
/// end up to 50 µs late to batch wake-ups, which is more than a packet
/// interval at gigabit rates; with it the pacer can sleep closer to each
/// slot and spin less.
pub fn precise_timers() {
    // Failure only leaves the default slack in place.
    let _ = nix::sys::prctl::set_timerslack(1000);
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    let count = cpu_count();
    let mut set = CpuSet::new();
    if set.set(cpu).is_err() {
        bail!("--cpu {cpu} is out of range: this machine has {count} CPUs, numbered from 0");
    }
    // Pid 0 is the calling thread.
    if let Err(e) = sched_setaffinity(Pid::from_raw(0), &set) {
        bail!(
            "cannot pin to CPU {cpu}: {e} (this machine has {count} CPUs, numbered from 0; \
             see taskset -p $$ for the ones this process may use)"
        );
    }
    Ok(())
}

/// Sets the calling thread's scheduling policy and priority.
fn set_policy(policy: libc::c_int, priority: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0
    // is the calling thread, so no other thread's state is touched.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Switches the calling thread to SCHED_FIFO at a middle priority, so a
/// busy machine cannot delay a packet train by a scheduler tick.
pub fn realtime() -> Result<()> {
    if let Err(e) = set_policy(libc::SCHED_FIFO, 50) {
        bail!(
            "--realtime: cannot switch to SCHED_FIFO: {e}; run as root, grant CAP_SYS_NICE, \
             or raise the rtprio limit (ulimit -r)"
        );
    }
    Ok(())
}

/// The CPUs this process was allowed as it started.
static START_CPUS: OnceLock<CpuSet> = OnceLock::new();

/// Notes the CPUs this process may use as it starts (what `taskset` or a
/// cgroup allowed), for [`ordinary`] to go back to. Call it before any
/// thread is pinned.
pub fn note_start_cpus() {
    if let Ok(set) = sched_getaffinity(Pid::from_raw(0)) {
        let _ = START_CPUS.set(set);
    }
}

/// Undoes what a tuned parent thread passed on (Linux threads inherit
/// affinity and scheduling policy): the CPUs the process started with,
/// normal priority. For helper threads such as the recorder's writer.
/// (Counting CPUs here would count the pinned parent's one, and a
/// `taskset` the user gave would be lost.)
pub fn ordinary() {
    let set = START_CPUS.get().copied().unwrap_or_else(|| {
        let mut all = CpuSet::new();
        for cpu in 0..CpuSet::count() {
            let _ = all.set(cpu);
        }
        all
    });
    // Failure leaves the inherited settings, which is only less ideal.
    let _ = sched_setaffinity(Pid::from_raw(0), &set);
    let _ = set_policy(libc::SCHED_OTHER, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_slack_is_one_microsecond_after_precise_timers() {
        std::thread::spawn(|| {
            precise_timers();
            assert_eq!(nix::sys::prctl::get_timerslack().unwrap(), 1000);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pinning_to_a_cpu_out_of_range_names_the_count() {
        let e = pin_to_cpu(1 << 20).unwrap_err().to_string();
        assert!(e.starts_with("--cpu 1048576 is out of range"), "{e}");
    }

    fn allowed_cpus() -> Vec<usize> {
        let set = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap())
            .collect()
    }

    #[test]
    fn ordinary_goes_back_to_the_cpus_the_process_started_with() {
        note_start_cpus();
        std::thread::spawn(|| {
            let before = allowed_cpus();
            // The last CPU: counting the pinned thread's CPUs would give
            // back CPU 0 alone.
            let last = *before.last().unwrap();
            pin_to_cpu(last).unwrap();
            assert_eq!(allowed_cpus(), [last]);
            ordinary();
            assert_eq!(allowed_cpus(), before);
        })
        .join()
        .unwrap();
    }
}
