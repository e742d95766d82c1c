//! The UDP side of a test: the paced sender and the receiver that keeps
//! per-packet records, answers echo requests and times echo replies.
//!
//! The sender shares `nagare send`'s pacer and batch I/O (`udp.rs`): trains
//! of packets whose slots fall in one burst window leave in one GSO or
//! `sendmmsg` call. The receiver reads in `recvmmsg` batches through the
//! same module, and echoes from the socket it receives on.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nagare_proto::probe::analysis::Arrival;
use nagare_proto::probe::{
    DataHeader, Datagram, ECHO_LEN, Echo, EchoKind, Schedule, SenderLog, SenderReport, TestParams,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::net::udp;

const BUFFER_BYTES: usize = 64 << 20;

/// A UDP socket with big buffers, bound to `addr`.
pub fn bind(addr: SocketAddr) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    // A multi-gigabit stream needs big buffers; where the kernel grants
    // less, say so, since the loss it causes would read as the path's.
    for receive in [true, false] {
        if let Some(w) = udp::size_buffer(&s, BUFFER_BYTES, receive) {
            eprintln!("nagare probe: note: {w}");
        }
    }
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}: is the port taken?"))?;
    Ok(s.into())
}

/// The unspecified address of `peer`'s family, port 0.
pub fn any_for(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap_or(peer),
        SocketAddr::V6(_) => "[::]:0".parse().unwrap_or(peer),
    }
}

/// How the test stream leaves: packet size and train window.
#[derive(Debug, Clone, Copy)]
pub struct StreamShape {
    /// UDP payload bytes per packet (validated, holds the header).
    pub packet_size: usize,
    /// Packets whose slots fall within this window of a train's first
    /// slot leave with it (as `nagare send --burst-us`).
    pub burst: Duration,
}

impl StreamShape {
    /// The shape a test's parameters ask for.
    pub fn of(params: &TestParams) -> StreamShape {
        StreamShape {
            packet_size: params.packet_size as usize,
            burst: Duration::from_micros(params.burst_us),
        }
    }
}

/// Sends the whole test stream on its schedule to `to` (or the connected
/// peer), in trains of up to one burst window; stops early when `stop` is
/// set. Every packet carries its own sequence number and its train's send
/// time, and is logged against its own slot.
pub fn send_stream(
    sock: &UdpSocket,
    to: Option<SocketAddr>,
    session: u64,
    schedule: &Schedule,
    shape: StreamShape,
    stop: &AtomicBool,
) -> SenderReport {
    let size = shape.packet_size;
    let mut pacer = schedule.pacer();
    let mut gso = udp::gso_available(sock);
    let max_train = pacer.max_train(shape.burst.into(), udp::train_cap(gso, size));
    // One packet buffer per train slot, laid end to end so a GSO train is
    // one contiguous run. Filler that compresses badly, so no link
    // compression flatters us.
    let mut bufs = vec![0u8; size * max_train];
    for buf in bufs.chunks_mut(size) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
        }
    }
    let dest = to.map(SockAddr::from);
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(max_train);
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(max_train);
    let mut log = SenderLog::default();
    let start = Instant::now() + Duration::from_millis(2);
    let ppf = schedule.packets_per_frame;
    let total = schedule.total_packets;
    'stream: while pacer.next_packet() < total && !stop.load(Ordering::Relaxed) {
        crate::clock::wait_until(start + Duration::from(pacer.next_release()));
        let now = nagare_proto::Nanos::from(start.elapsed());
        let first = pacer.next_packet();
        let left = usize::try_from(total - first).unwrap_or(usize::MAX);
        let n = pacer.due(now, max_train, shape.burst.into()).clamp(1, left);
        let send_ns = now.as_nanos();
        iov.clear();
        for (j, buf) in bufs.chunks_mut(size).take(n).enumerate() {
            let seq = first + j as u64;
            let h = DataHeader {
                session,
                seq,
                send_ns,
                marker: seq % ppf == ppf - 1,
            };
            // The buffer is at least MIN_PACKET_SIZE (validated), which
            // holds the header.
            if h.write(buf).is_err() {
                log.error();
                break 'stream;
            }
            iov.push(udp::iovec(buf));
        }
        let segment = (n > 1).then_some(size);
        let sent = udp::send_train(
            sock,
            &iov,
            1,
            segment,
            &mut gso,
            &mut hdrs,
            dest.as_ref(),
            "nagare probe",
        )
        .unwrap_or(0);
        for j in 0..n as u64 {
            if j < sent as u64 {
                log.record(pacer.slot(first + j).as_nanos(), send_ns, size as u64);
            } else {
                log.error();
            }
        }
        pacer.sent(now, n);
    }
    let pps = schedule.rate.as_f64() * schedule.packets_per_frame as f64;
    log.finish(pps)
}

/// Receives a test: data records, strangers, echo service and RTT samples.
///
/// Reads in batches through [`udp::Receiver`] (`recvmmsg`, with UDP GRO
/// where the kernel has it), so the receiver keeps up with the sender's
/// GSO trains instead of dropping packets itself. Receive times are the
/// kernel's per-datagram stamps (SO_TIMESTAMPNS) where available: they
/// leave out how long this thread took to reach the datagram, so batching
/// does not blur jitter or PDV. Without stamps every datagram of a batch
/// gets the batch's read time, which adds up to one batch's read latency
/// to PDV and shows as IPDV between batches. Segments of one GRO batch
/// share a stamp: the kernel received them as one (on loopback, one GSO
/// train, which also shares its send time), so jitter and IPDV between
/// them read 0 and the RFC 3550 jitter is that of trains, averaged over
/// packets. On loopback that is exact; through a NIC, GRO merges what one
/// interrupt poll brings, so spacing changes inside one poll (tens of
/// microseconds) do not show, while loss, order and PDV across polls do.
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
    rx: udp::Receiver,
    /// The socket's drop counter when this test began.
    drops_base: u32,
    /// Echo replies owed, sent once the batch that asked is handled.
    replies: Vec<([u8; ECHO_LEN], SocketAddr)>,
}

impl Receiver {
    /// A receiver on (a duplicate of) `sock` for `session` from `peer_ip`,
    /// keeping at most `cap` records.
    pub fn new(
        sock: &UdpSocket,
        session: u64,
        peer_ip: IpAddr,
        cap: usize,
        start: Instant,
    ) -> Result<Receiver> {
        let dup = sock
            .try_clone()
            .context("duplicating the test-stream socket for the receiver")?;
        let mut rx = udp::Receiver::from_socket(Socket::from(dup), Vec::new())?;
        rx.enable_timestamps();
        // The socket may have served earlier tests: count from here.
        let drops_base = rx.drops_now().unwrap_or(0);
        Ok(Receiver {
            session,
            peer_ip,
            arrivals: Vec::with_capacity(cap.min(1 << 20)),
            cap,
            strangers: 0,
            rtts: Vec::new(),
            opened: None,
            start,
            rx,
            drops_base,
            replies: Vec::new(),
        })
    }

    /// Datagrams the kernel dropped on this socket since the test began
    /// because this host did not read them fast enough (SO_RXQ_OVFL /
    /// SO_MEMINFO): loss of the receiving host, not of the path.
    pub fn receiver_drops(&self) -> u64 {
        let now = self.rx.drops_now().unwrap_or(self.rx.kernel_drops);
        u64::from(now.wrapping_sub(self.drops_base))
    }

    /// Handles datagrams until `until`.
    pub fn poll(&mut self, until: Instant) -> Result<()> {
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            self.rx
                .set_wait((until - now).max(Duration::from_micros(100)))
                .context("setting the receive timeout")?;
            let Receiver {
                session,
                peer_ip,
                arrivals,
                cap,
                strangers,
                rtts,
                opened,
                start,
                rx,
                replies,
                ..
            } = self;
            let got = rx.recv_batch(|d| {
                let recv_ns = d.at.saturating_duration_since(*start).as_nanos() as u64;
                let ours = d.from.is_some_and(|a| a.ip() == *peer_ip);
                for seg in d.segments() {
                    match Datagram::parse(seg) {
                        Ok(Datagram::Data(h)) if ours && h.session == *session => {
                            if arrivals.len() < *cap {
                                arrivals.push(Arrival {
                                    seq: h.seq,
                                    send_ns: h.send_ns,
                                    recv_ns,
                                });
                            } else {
                                *strangers += 1;
                            }
                        }
                        Ok(Datagram::Echo(e)) if ours && e.session == *session => match e.kind {
                            EchoKind::Request => {
                                let mut out = [0u8; ECHO_LEN];
                                let reply = Echo {
                                    kind: EchoKind::Reply,
                                    ..e
                                };
                                // Same size as the request: no amplification.
                                if let (Ok(_), Some(src)) = (reply.write(&mut out), d.from) {
                                    replies.push((out, src));
                                }
                            }
                            EchoKind::Reply => {
                                let rtt = recv_ns as i64 - e.send_ns as i64;
                                rtts.push((e.id, rtt));
                            }
                            EchoKind::Open => {
                                if let Some(src) = d.from {
                                    opened.get_or_insert(src);
                                }
                            }
                        },
                        _ => *strangers += 1,
                    }
                }
            });
            for (out, to) in self.replies.drain(..) {
                let _ = self.rx.send_to(&out, Some(to));
            }
            match got {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                // ICMP errors from earlier sends surface here; not ours to act on.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e).context("receiving the test stream"),
            }
        }
    }

    /// Sends an echo datagram of `kind` with `id` to `to`, or to the
    /// connected peer.
    pub fn send_echo(&self, to: Option<SocketAddr>, kind: EchoKind, id: u64) {
        let e = Echo {
            kind,
            session: self.session,
            id,
            send_ns: self.start.elapsed().as_nanos() as u64,
        };
        let mut out = [0u8; ECHO_LEN];
        if e.write(&mut out).is_ok() {
            let _ = self.rx.send_to(&out, to);
        }
    }
}

/// Receive-time cap on records: the plan plus room for duplicates.
pub fn record_cap(schedule: &Schedule) -> usize {
    let t = schedule.total_packets as usize;
    t + t / 2 + 1024
}
