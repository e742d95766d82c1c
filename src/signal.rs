//! One way to stop for every subcommand and daemon: SIGINT (Ctrl-C),
//! SIGTERM (`timeout`, systemd, `docker stop`, Kubernetes) and SIGHUP all
//! ask for a clean stop. Drivers poll [`stop_flag`] (or sleep in
//! [`wait`], which wakes at once on a signal), then flush whole frames,
//! print their report and exit with their own verdict, never 143.
//!
//! A second signal while stopping means "now": the process exits at once
//! with 128 + 2, as a shell reports an interrupted command, without
//! flushing (the operator asked twice).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Exit status after a second signal.
const FORCED_EXIT: i32 = 130;

struct Stop {
    flag: AtomicBool,
    count: AtomicU32,
    lock: Mutex<()>,
    wake: Condvar,
}

fn state() -> &'static Stop {
    static STOP: OnceLock<Stop> = OnceLock::new();
    STOP.get_or_init(|| Stop {
        flag: AtomicBool::new(false),
        count: AtomicU32::new(0),
        lock: Mutex::new(()),
        wake: Condvar::new(),
    })
}

/// Installs the handler. `main` calls it first, so no subcommand can be
/// killed by a signal it forgot to ask for; later calls do nothing.
pub(crate) fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // ctrlc runs this on its own thread, not in signal context, so it
        // may lock, print and exit. Without a handler (another one was
        // installed) signals keep their default action.
        let _ = ctrlc::set_handler(|| {
            let s = state();
            if s.count.fetch_add(1, Ordering::AcqRel) >= 1 {
                eprintln!("nagare: second signal; exiting without flushing");
                std::process::exit(FORCED_EXIT);
            }
            let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.flag.store(true, Ordering::Release);
            s.wake.notify_all();
        });
    });
}

/// Set once SIGINT, SIGTERM or SIGHUP arrived: stop cleanly, flush and
/// report. Installs the handler if `main` has not.
pub(crate) fn stop_flag() -> &'static AtomicBool {
    install();
    &state().flag
}

/// Whether a stop was asked for.
pub(crate) fn stopping() -> bool {
    stop_flag().load(Ordering::Acquire)
}

/// Sleeps up to `timeout`, waking at once when a stop is asked for;
/// true when it was. The way for a daemon's idle loop to wait.
#[allow(dead_code, reason = "for daemons with no socket to poll (serve)")]
pub(crate) fn wait(timeout: Duration) -> bool {
    let s = state();
    let deadline = Instant::now() + timeout;
    let mut guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if s.flag.load(Ordering::Acquire) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        guard = match s.wake.wait_timeout(guard, left) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}

/// How often a blocked accept looks at the stop flag.
const ACCEPT_TICK: Duration = Duration::from_millis(100);

/// Accepts the next connection on `listener`, or `None` once a stop is
/// asked for: a daemon's accept loop that still ends on SIGTERM. A
/// connection is taken the moment it arrives (poll(2), not a sleep).
pub(crate) fn accept(listener: &TcpListener) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
    accept_while(listener, || true)
}

/// Like [`accept`], also ending (`None`) once `more` says no: a daemon
/// told to serve a number of clients.
pub(crate) fn accept_while(
    listener: &TcpListener,
    more: impl Fn() -> bool,
) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let tick = PollTimeout::try_from(ACCEPT_TICK).unwrap_or(PollTimeout::MAX);
    loop {
        if stopping() || !more() {
            return None;
        }
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, tick) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => return Some(listener.accept()),
            Err(e) => return Some(Err(e.into())),
        }
    }
}

/// Asks for a stop as a signal would.
#[cfg(test)]
fn request_stop() {
    let s = state();
    let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
    s.flag.store(true, Ordering::Release);
    s.wake.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_times_out_then_wakes_on_a_stop() {
        assert!(!wait(Duration::from_millis(1)));
        let t = std::thread::spawn(|| wait(Duration::from_secs(30)));
        request_stop();
        assert!(t.join().unwrap());
        assert!(stopping() && wait(Duration::ZERO));
    }
}
