//! Host-wide kernel state that `doctor` reads and sets: sysctls, the
//! kernel's clock discipline, and whether this process may change them.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The kernel's view of the system clock (from `adjtimex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClockSync {
    /// Whether a time service (NTP, PTP via phc2sys) disciplines the clock.
    pub synced: bool,
    /// The kernel's bound on the clock's error, in microseconds.
    pub max_error_us: i64,
}

/// Reads the kernel's clock discipline state. nix has no wrapper for
/// `adjtimex`, hence the one raw call.
pub(crate) fn clock_sync() -> ClockSync {
    // SAFETY: timex is plain data (glibc pads it with private fields, so
    // it cannot be built field by field); all-zero is a valid value and
    // modes = 0 makes adjtimex only read the kernel's state into it.
    let (state, tx) = unsafe {
        let mut tx: libc::timex = std::mem::zeroed();
        let state = libc::adjtimex(&mut tx);
        (state, tx)
    };
    ClockSync {
        synced: state >= 0 && state != libc::TIME_ERROR,
        max_error_us: tx.maxerror,
    }
}

/// Whether this process runs as root (sysctl writes need it).
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn sysctl_path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// The value of sysctl `key` (`net.core.rmem_max`), trimmed; `None` when
/// unreadable.
pub(crate) fn sysctl(key: &str) -> Option<String> {
    std::fs::read_to_string(sysctl_path(key))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Sets sysctl `key` to `value` (root only).
pub(crate) fn set_sysctl(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key);
    std::fs::write(&path, value).with_context(|| {
        format!(
            "writing {} = {value}: run as root, or run the printed sysctl lines with sudo",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sysctls_of_this_host() {
        let max: u64 = sysctl("net.core.rmem_max").unwrap().parse().unwrap();
        assert!(max > 0);
        assert_eq!(sysctl("net.core.no_such_knob"), None);
    }
}
