//! The server's own port pair for a UDP unicast RTSP session: RTP leaves
//! from the even-or-odd port P, RTCP from P + 1, and SETUP's
//! `server_port=P-P+1` tells the client where its receiver reports go.
//! A pair per session (not one for the server) keeps each client's RTCP
//! on a socket connected to that client alone, so the kernel sorts
//! reports by sender and a stranger's datagrams never reach a session.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;

use nagare_proto::rtsp::PortPair;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Tries at finding a free port P whose P + 1 is free too.
const TRIES: usize = 32;

/// A session's RTP and RTCP sockets.
pub(super) struct SessionPorts {
    /// Their ports.
    pub(super) pair: PortPair,
    /// RTP, bound, connected when PLAY makes the session's output.
    pub(super) rtp: Socket,
    /// RTCP, connected to the client's RTCP port; non-blocking (the RTSP
    /// event loop reads it, the pacing thread sends on it).
    pub(super) rtcp: Arc<UdpSocket>,
}

impl SessionPorts {
    /// Binds a pair for a client whose RTCP port is `client_rtcp`.
    pub(super) fn bind(client_rtcp: SocketAddr) -> io::Result<SessionPorts> {
        let any = match client_rtcp.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let mut last = io::Error::from(io::ErrorKind::AddrInUse);
        for _ in 0..TRIES {
            let rtp = Socket::new(
                Domain::for_address(client_rtcp),
                Type::DGRAM,
                Some(Protocol::UDP),
            )?;
            rtp.bind(&SockAddr::from(SocketAddr::new(any, 0)))?;
            let port = rtp.local_addr()?.as_socket().map_or(0, |a| a.port());
            let Some(pair) = PortPair::from_rtp(port) else {
                continue;
            };
            match UdpSocket::bind(SocketAddr::new(any, pair.rtcp)) {
                Ok(rtcp) => {
                    rtcp.connect(client_rtcp)?;
                    rtcp.set_nonblocking(true)?;
                    return Ok(SessionPorts {
                        pair,
                        rtp,
                        rtcp: Arc::new(rtcp),
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}
