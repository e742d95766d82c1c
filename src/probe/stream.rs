//! The UDP side of a test: the paced sender and the receiver that keeps
//! per-packet records, answers echo requests and times echo replies.
//!
//! The socket setup is small and local: `udp.rs` sizes buffers for its
//! batch sender/receiver, while the probe needs plain `recv_from` with
//! source addresses on one socket that both receives and echoes.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nagare_proto::metrics::Arrival;
use nagare_proto::probe::{
    DataHeader, Datagram, ECHO_LEN, Echo, EchoKind, Schedule, SenderLog, SenderReport,
};
use socket2::{Domain, Protocol, Socket, Type};

const BUFFER_BYTES: usize = 64 << 20;

/// A UDP socket with big buffers, bound to `addr`.
pub fn bind(addr: SocketAddr) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    grow_buffers(&s);
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}: is the port taken?"))?;
    Ok(s.into())
}

/// Asks for big buffers; the kernel caps them at net.core.*mem_max unless
/// we may force them (root), which is what a multi-gigabit stream needs.
fn grow_buffers(s: &Socket) {
    let _ = s.set_recv_buffer_size(BUFFER_BYTES);
    let _ = s.set_send_buffer_size(BUFFER_BYTES);
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let v = BUFFER_BYTES as libc::c_int;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            // SAFETY: setsockopt with a valid fd and a c_int option value of
            // the right size; failure (no CAP_NET_ADMIN) is harmless.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

/// The unspecified address of `peer`'s family, port 0.
pub fn any_for(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap_or(peer),
        SocketAddr::V6(_) => "[::]:0".parse().unwrap_or(peer),
    }
}

/// Sends the whole test stream on its schedule to `to` (or the connected
/// peer); stops early when `stop` is set.
pub fn send_stream(
    sock: &UdpSocket,
    to: Option<SocketAddr>,
    session: u64,
    schedule: &Schedule,
    packet_size: usize,
    stop: &AtomicBool,
) -> SenderReport {
    let mut pacer = schedule.pacer();
    let mut buf = vec![0u8; packet_size];
    // Filler that compresses badly, so no link compression flatters us.
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
    }
    let mut log = SenderLog::default();
    let start = Instant::now() + Duration::from_millis(2);
    let ppf = schedule.packets_per_frame;
    while pacer.next_packet() < schedule.total_packets && !stop.load(Ordering::Relaxed) {
        crate::clock::wait_until(start + pacer.next_release());
        let seq = pacer.next_packet();
        let sent = start.elapsed();
        let h = DataHeader {
            session,
            seq,
            send_ns: sent.as_nanos() as u64,
            marker: seq % ppf == ppf - 1,
        };
        // The buffer is at least MIN_PACKET_SIZE (validated), which holds
        // the header.
        if h.write(&mut buf).is_err() {
            log.error();
            break;
        }
        let r = match to {
            Some(a) => sock.send_to(&buf, a),
            None => sock.send(&buf),
        };
        match r {
            Ok(_) => log.record(
                pacer.slot(seq).as_nanos() as u64,
                h.send_ns,
                packet_size as u64,
            ),
            Err(_) => log.error(),
        }
        pacer.sent(sent, 1);
    }
    let pps = schedule.rate.as_f64() * schedule.packets_per_frame as f64;
    log.finish(pps)
}

/// Receives a test: data records, strangers, echo service and RTT samples.
pub struct Receiver {
    /// This test's session id.
    pub session: u64,
    /// Only datagrams from this address count (the TCP peer).
    pub peer_ip: IpAddr,
    /// Records, arrival order.
    pub arrivals: Vec<Arrival>,
    /// Most records kept; more are counted as strangers.
    pub cap: usize,
    /// Datagrams not part of the test.
    pub strangers: u64,
    /// Echo request round-trip times, ns, with the id they answered.
    pub rtts: Vec<(u64, i64)>,
    /// Source of the first `Open` datagram from the peer.
    pub opened: Option<SocketAddr>,
    /// Clock zero of receive times.
    pub start: Instant,
    buf: Vec<u8>,
}

impl Receiver {
    /// A receiver for `session` from `peer_ip`, keeping at most `cap` records.
    pub fn new(session: u64, peer_ip: IpAddr, cap: usize, start: Instant) -> Receiver {
        Receiver {
            session,
            peer_ip,
            arrivals: Vec::with_capacity(cap.min(1 << 20)),
            cap,
            strangers: 0,
            rtts: Vec::new(),
            opened: None,
            start,
            buf: vec![0u8; 65_536],
        }
    }

    /// Handles datagrams until `until`.
    pub fn poll(&mut self, sock: &UdpSocket, until: Instant) -> Result<()> {
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            sock.set_read_timeout(Some((until - now).max(Duration::from_micros(100))))?;
            let (n, src) = match sock.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(());
                }
                // ICMP errors from earlier sends surface here; not ours to act on.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("receiving the test stream"),
            };
            let recv_ns = self.start.elapsed().as_nanos() as u64;
            self.handle(sock, n, src, recv_ns);
        }
    }

    fn handle(&mut self, sock: &UdpSocket, n: usize, src: SocketAddr, recv_ns: u64) {
        let ours = src.ip() == self.peer_ip;
        match Datagram::parse(&self.buf[..n]) {
            Ok(Datagram::Data(h)) if ours && h.session == self.session => {
                if self.arrivals.len() < self.cap {
                    self.arrivals.push(Arrival {
                        seq: h.seq,
                        send_ns: h.send_ns,
                        recv_ns,
                    });
                } else {
                    self.strangers += 1;
                }
            }
            Ok(Datagram::Echo(e)) if ours && e.session == self.session => match e.kind {
                EchoKind::Request => {
                    let mut out = [0u8; ECHO_LEN];
                    let reply = Echo {
                        kind: EchoKind::Reply,
                        ..e
                    };
                    // Same size as the request: no amplification.
                    if reply.write(&mut out).is_ok() {
                        let _ = sock.send_to(&out, src);
                    }
                }
                EchoKind::Reply => {
                    let rtt = recv_ns as i64 - e.send_ns as i64;
                    self.rtts.push((e.id, rtt));
                }
                EchoKind::Open => {
                    self.opened.get_or_insert(src);
                }
            },
            _ => self.strangers += 1,
        }
    }

    /// Sends an echo datagram of `kind` with `id` on `sock` (connected) or
    /// to `to`.
    pub fn send_echo(&self, sock: &UdpSocket, to: Option<SocketAddr>, kind: EchoKind, id: u64) {
        let e = Echo {
            kind,
            session: self.session,
            id,
            send_ns: self.start.elapsed().as_nanos() as u64,
        };
        let mut out = [0u8; ECHO_LEN];
        if e.write(&mut out).is_ok() {
            let _ = match to {
                Some(a) => sock.send_to(&out, a),
                None => sock.send(&out),
            };
        }
    }
}

/// Receive-time cap on records: the plan plus room for duplicates.
pub fn record_cap(schedule: &Schedule) -> usize {
    let t = schedule.total_packets as usize;
    t + t / 2 + 1024
}
