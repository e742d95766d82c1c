//! Waiting for a socket to become readable with a precise deadline.
//!
//! A socket's receive timeout (SO_RCVTIMEO) is kept in jiffies: on a
//! 250 Hz kernel a 1 ms wait becomes up to 4 ms. A relay that releases
//! delayed packets when its receive times out then adds those 4 ms to
//! every packet of an idle path (an idle RTT through `impair --delay 5ms`
//! read 12 ms), while on a busy path arrivals wake it early and hide the
//! error. ppoll's timeout is a high-resolution timer, so waits end on time.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;

/// Waits up to `wait` for `sock` to have something to read; returns
/// whether it has (an error pending on the socket counts as readable, so
/// the next receive reports it). An interrupting signal ends the wait
/// early, as readable=false.
pub(crate) fn readable_within(sock: &impl AsFd, wait: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    match ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn readable_once_a_datagram_waits() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!readable_within(&rx, Duration::from_micros(200)).unwrap());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert!(readable_within(&rx, Duration::from_secs(5)).unwrap());
    }
}
