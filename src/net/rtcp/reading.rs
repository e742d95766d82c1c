//! A receiver's RTCP: the sender's reports read on the stream's RTCP
//! port and answered with receiver reports (loss and jitter, RFC 3550
//! §6.4.2): to the address they came from on unicast, to the group's
//! RTCP port on multicast. Polled from the receive loop at most every
//! [`LOOK`]: a non-blocking read or two, never a wait.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use nagare_api::video::RecvRtcp;
use nagare_proto::Nanos;
use nagare_proto::rtcp::{Reader, Reception};

use crate::net::udp::{self, ReceiveOptions};

/// How often the receive loop looks at the RTCP port.
const LOOK: Duration = Duration::from_millis(10);

/// Datagrams read per look at most: a flood on the RTCP port costs the
/// receive loop no more than this.
const PER_LOOK: usize = 8;

/// The TTL of receiver reports to a multicast group whose SDP names none:
/// a receiver cannot know how far the sender's group reaches, so they
/// stay on the link, as `send`'s multicast does unless given `--ttl`.
pub(crate) const GROUP_TTL: u32 = 1;

/// The RTCP port of one received stream.
pub(crate) struct ReaderRtcp {
    socket: UdpSocket,
    reader: Reader,
    /// Where the sender's reports come from.
    sender: Option<SocketAddr>,
    /// A multicast stream's group and RTCP port, where reports go.
    group: Option<SocketAddr>,
    next_look: Instant,
}

/// The RTCP port beside RTP port `rtp`: its port + 1 on the same address
/// (RFC 3550 §11), or why there is none.
pub(crate) fn next_port(rtp: SocketAddr) -> Result<SocketAddr, String> {
    let port = rtp
        .port()
        .checked_add(1)
        .ok_or_else(|| format!("no RTCP: port {} has no port + 1", rtp.port()))?;
    Ok(SocketAddr::new(rtp.ip(), port))
}

impl ReaderRtcp {
    /// Binds RTCP port `at` of a received stream. On unicast `at` is the
    /// stream's own address; on a multicast group the port is joined as
    /// `opts` say (the interface, an SSM source), and the receiver
    /// reports go to the group from that interface with the session's
    /// TTL `ttl` (its SDP's, else [`GROUP_TTL`]), for the sender and
    /// every other receiver (RFC 3550 §6). `Err` says why there is none.
    pub(crate) fn bind(
        at: SocketAddr,
        opts: &ReceiveOptions,
        ttl: Option<u8>,
    ) -> Result<ReaderRtcp, String> {
        let (socket, group) = if at.ip().is_multicast() {
            let ttl = ttl.map_or(GROUP_TTL, u32::from);
            let s = udp::open_group(at, opts, ttl)
                .map_err(|e| format!("no RTCP (receiver reports) on {at}: {e:#}"))?;
            (s, Some(at))
        } else {
            let s = UdpSocket::bind(at)
                .map_err(|e| format!("no RTCP (receiver reports): binding {at}: {e}"))?;
            (s, None)
        };
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("no RTCP: {e}"))?;
        let seed = getrandom::u64().unwrap_or(u64::from(at.port()));
        // RFC 7022: a random CNAME, and an SSRC of the reader's own.
        let ssrc = nagare_proto::Ssrc(seed as u32);
        let reader = Reader::new(ssrc, format!("nagare-{seed:016x}@recv"), seed >> 32);
        Ok(ReaderRtcp {
            socket,
            reader,
            sender: None,
            group,
            next_look: Instant::now(),
        })
    }

    /// Reads what came and sends a receiver report if one is due;
    /// `reception` is what the stream's receiver counted so far, at `now`
    /// on its timeline. Cheap when called in a tight loop: it does
    /// nothing until [`LOOK`] has passed.
    pub(crate) fn step(&mut self, now: Nanos, reception: impl FnOnce() -> Option<Reception>) {
        let clock = Instant::now();
        if clock < self.next_look {
            return;
        }
        self.next_look = clock + LOOK;
        let mut buf = [0u8; 1500];
        for _ in 0..PER_LOOK {
            let Ok((n, from)) = self.socket.recv_from(&mut buf) else {
                break;
            };
            let before = self.reader.counters().sender_reports;
            self.reader.handle_input(now, &buf[..n]);
            if self.reader.counters().sender_reports > before {
                self.sender = Some(from);
            }
        }
        let (Some(to), true) = (
            self.group.or(self.sender),
            self.reader.poll_timeout().is_some_and(|t| t <= now),
        ) else {
            return;
        };
        if let Some(bytes) = self.reader.poll_transmit(now, reception()) {
            // A refused report is not worth stopping for: the sender
            // may have gone before its BYE reached us.
            let _ = self.socket.send_to(&bytes, to);
        }
    }

    /// The local RTCP port.
    pub(crate) fn port(&self) -> u16 {
        self.socket.local_addr().map_or(0, |a| a.port())
    }

    /// What it did, for the report.
    pub(crate) fn report(&self) -> RecvRtcp {
        let c = self.reader.counters();
        RecvRtcp {
            port: self.port(),
            sender: self.sender,
            sender_reports: c.sender_reports,
            byes: c.byes,
            receiver_reports: c.reports_sent,
            malformed: c.malformed,
        }
    }
}
