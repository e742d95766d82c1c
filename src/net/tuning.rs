//! Per-thread tuning for the time-critical threads: precise timers, CPU
//! pinning and real-time scheduling.
//!
//! Timer slack and affinity go through nix's safe wrappers; nix has no
//! `sched_setscheduler`, so the scheduling policy is one raw call.

use std::io;

use anyhow::{Result, bail};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

/// Shrinks this thread's timer slack to 1 µs. Linux otherwise lets sleeps
/// end up to 50 µs late to batch wake-ups, which is more than a packet
/// interval at gigabit rates; with it the pacer can sleep closer to each
/// slot and spin less.
pub(crate) fn precise_timers() {
    // Failure only leaves the default slack in place.
    let _ = nix::sys::prctl::set_timerslack(1000);
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

/// Switches the calling thread to SCHED_IDLE: it runs only when nothing
/// else on its CPU wants to, and any other thread that wakes there takes
/// the CPU from it at once (see [`super::awake`]).
pub(crate) fn idle_priority() -> io::Result<()> {
    set_policy(libc::SCHED_IDLE, 0)
}

/// Switches the calling thread to SCHED_FIFO at a middle priority, so a
/// busy machine cannot delay a packet train by a scheduler tick.
pub(crate) fn realtime() -> Result<()> {
    if let Err(e) = set_policy(libc::SCHED_FIFO, 50) {
        bail!(
            "--realtime: cannot switch to SCHED_FIFO: {e}; run as root, grant CAP_SYS_NICE, \
             or raise the rtprio limit (ulimit -r)"
        );
    }
    Ok(())
}

/// Whether a pacing thread runs real-time: `--realtime` demands it,
/// `--no-realtime` refuses it, and by default it is taken where allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Realtime {
    /// SCHED_FIFO when the process may (CAP_SYS_NICE, root, `ulimit -r`)
    /// and the kernel's RT throttling is on; otherwise normal priority,
    /// said once.
    #[default]
    Auto,
    /// SCHED_FIFO or fail.
    Required,
    /// Normal priority.
    Off,
}

impl Realtime {
    /// From the `--realtime` / `--no-realtime` flags.
    pub(crate) fn from_flags(required: bool, off: bool) -> Realtime {
        match (required, off) {
            (true, _) => Realtime::Required,
            (false, true) => Realtime::Off,
            (false, false) => Realtime::Auto,
        }
    }

    /// Applies the choice to the calling thread. Returns whether it now
    /// runs SCHED_FIFO, and why not when it does not (for the report).
    pub(crate) fn apply(self) -> Result<(bool, Option<String>)> {
        match self {
            Realtime::Off => Ok((false, Some("--no-realtime".into()))),
            Realtime::Required => realtime().map(|()| {
                crate::clock::mark_realtime();
                (true, None)
            }),
            Realtime::Auto => {
                if let Some(why) = rt_throttling_off() {
                    return Ok((false, Some(why)));
                }
                Ok(match set_policy(libc::SCHED_FIFO, 50) {
                    Ok(()) => {
                        crate::clock::mark_realtime();
                        (true, None)
                    }
                    Err(e) => (
                        false,
                        Some(format!(
                            "SCHED_FIFO not allowed ({e}): run as root or grant CAP_SYS_NICE \
                             (setcap cap_sys_nice+ep) for real-time pacing"
                        )),
                    ),
                })
            }
        }
    }
}

/// Why real-time pacing would be unsafe here: with RT throttling off
/// (`sched_rt_runtime_us` = -1) a pacer that spins or catches up could
/// hold its CPU forever; the default 950000 of 1000000 µs leaves the
/// kernel's own threads 5% of every second.
fn rt_throttling_off() -> Option<String> {
    let runtime = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").ok()?;
    (runtime.trim() == "-1").then(|| {
        "the kernel's RT throttling is off (kernel.sched_rt_runtime_us = -1), so a real-time \
         pacer could starve its CPU; set it to 950000 or pass --realtime to insist"
            .to_string()
    })
}

/// Whether the process holds CAP_IPC_LOCK (mlock past RLIMIT_MEMLOCK).
fn has_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// Raises the open-file limit to its hard limit (as Go and systemd do):
/// the soft limit of 1024 that most shells start with is what a server
/// with thousands of connections runs out of first, and the hard limit
/// is the administrator's real bound. Failure leaves the limit as it was.
pub(crate) fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Locks the process's memory (current and future) so that no page of a
/// frame ring or socket batch faults in the middle of a stream. Only done
/// where the lock is unlimited (`ulimit -l unlimited`) or the process holds
/// CAP_IPC_LOCK (root): under a bounded limit, large ring allocations would
/// fail. Returns why not when not.
pub(crate) fn lock_memory() -> Option<String> {
    use nix::sys::mman::{MlockAllFlags, mlockall};
    use nix::sys::resource::{Resource, getrlimit};
    let unlimited = getrlimit(Resource::RLIMIT_MEMLOCK)
        .is_ok_and(|(soft, _)| soft == nix::sys::resource::RLIM_INFINITY);
    if !unlimited && !has_ipc_lock() {
        return Some(
            "memory not locked: the memlock limit is bounded (ulimit -l) and the process \
             lacks CAP_IPC_LOCK"
                .into(),
        );
    }
    // On fault, not at once: thread stacks and reserved-but-unused
    // capacity stay unbacked; the rings are prefaulted by their owners.
    let flags = MlockAllFlags::MCL_CURRENT
        | MlockAllFlags::MCL_FUTURE
        | MlockAllFlags::from_bits_retain(libc::MCL_ONFAULT);
    match mlockall(flags) {
        Ok(()) => None,
        Err(e) => Some(format!("memory not locked: mlockall: {e}")),
    }
}

/// Undoes what a tuned parent thread passed on (Linux threads inherit
/// affinity and scheduling policy): the CPUs the process started with,
/// normal priority. For helper threads such as the recorder's writer.
/// (Counting CPUs here would count the pinned parent's one, and a
/// `taskset` the user gave would be lost.)
pub(crate) fn ordinary() {
    // Placed helpers stay off the pacing CPUs.
    if let Some(cpus) = super::placement::helper_cpus() {
        let _ = super::placement::pin_to(cpus);
        let _ = set_policy(libc::SCHED_OTHER, 0);
        return;
    }
    let set = super::placement::start_set().unwrap_or_else(|| {
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

    fn allowed_cpus() -> Vec<usize> {
        let set = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap())
            .collect()
    }

    #[test]
    fn ordinary_goes_back_to_the_cpus_the_process_started_with() {
        super::super::placement::note_start_cpus();
        std::thread::spawn(|| {
            let before = allowed_cpus();
            // The last CPU: counting the pinned thread's CPUs would give
            // back CPU 0 alone.
            let last = *before.last().unwrap();
            super::super::placement::pin_to(&[last]).unwrap();
            assert_eq!(allowed_cpus(), [last]);
            ordinary();
            assert_eq!(allowed_cpus(), before);
        })
        .join()
        .unwrap();
    }
}
