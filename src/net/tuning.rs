//! Per-thread tuning for the time-critical threads: precise timers, CPU
//! pinning and real-time scheduling.

use anyhow::{Result, bail};

/// Shrinks this thread's timer slack to 1 µs. Linux otherwise lets sleeps
/// end up to 50 µs late to batch wake-ups, which is more than a packet
/// interval at gigabit rates; with it the pacer can sleep closer to each
/// slot and spin less.
pub fn precise_timers() {
    // SAFETY: prctl with an integer argument; failure only leaves the
    // default slack in place.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpu >= libc::CPU_SETSIZE as usize {
        bail!("--cpu {cpu} is out of range: this machine has {count} CPUs, numbered from 0");
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; the call
    // affects only this thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        bail!(
            "cannot pin to CPU {cpu}: {} (this machine has {count} CPUs, numbered from 0; \
             see taskset -p $$ for the ones this process may use)",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Switches the calling thread to SCHED_FIFO at a middle priority, so a
/// busy machine cannot delay a packet train by a scheduler tick.
pub fn realtime() -> Result<()> {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: plain syscall on this thread (pid 0) with a valid param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        bail!(
            "--realtime: cannot switch to SCHED_FIFO: {}; run as root, grant CAP_SYS_NICE, or raise the rtprio limit (ulimit -r)",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Undoes what a tuned parent thread passed on (Linux threads inherit
/// affinity and scheduling policy): any CPU, normal priority. For helper
/// threads such as the recorder's writer.
pub fn ordinary() {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscalls on this thread with valid arguments; failure
    // leaves the inherited settings, which is only less ideal.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..count.min(libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
    }
}
