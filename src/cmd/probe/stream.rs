//! The test stream's sockets and its paced sender.
//!
//! The sender shares `nagare send`'s pacer and batch I/O (`net::udp`):
//! trains of packets whose slots fall in one burst window leave in one GSO
//! or `sendmmsg` call. What goes in each packet is the session's
//! [`StreamPlan`]; this loop only keeps time and moves bytes.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nagare_proto::Nanos;
use nagare_proto::probe::{DataHeader, SenderLog, SenderReport, StreamPlan, wire};
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

/// Sends the whole test stream of `plan` on its schedule, in trains of up
/// to one burst window; stops early when `stop` is set. Every packet
/// carries its own sequence number and its train's send time, and is
/// logged against its own slot.
pub fn send_stream(sock: &UdpSocket, plan: &StreamPlan, stop: &AtomicBool) -> SenderReport {
    let size = plan.packet_size;
    let schedule = &plan.schedule;
    let burst = plan.burst;
    let mut pacer = schedule.pacer();
    let mut gso = udp::gso_available(sock);
    let max_train = pacer.max_train(burst, udp::train_cap(gso, size));
    // One packet buffer per train slot, laid end to end so a GSO train is
    // one contiguous run.
    let mut bufs = vec![0u8; size * max_train];
    bufs.chunks_mut(size).for_each(wire::fill);
    let dest = SockAddr::from(plan.to);
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(max_train);
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(max_train);
    let mut log = SenderLog::new(schedule);
    let start = Instant::now() + Duration::from_millis(2);
    let total = schedule.total_packets;
    while pacer.next_packet() < total && !stop.load(Ordering::Relaxed) {
        crate::clock::wait_until(start + Duration::from(pacer.next_release()));
        let now = Nanos::from(start.elapsed());
        let first = pacer.next_packet();
        let left = usize::try_from(total - first).unwrap_or(usize::MAX);
        let n = pacer.due(now, max_train, burst).clamp(1, left);
        let sent_at = now;
        iov.clear();
        for (j, buf) in bufs.chunks_mut(size).take(n).enumerate() {
            let seq = first + j as u64;
            let h = DataHeader {
                session: plan.session,
                seq,
                sent_at,
                marker: schedule.ends_frame(seq),
            };
            // The buffer is at least MIN_PACKET_SIZE (validated), which
            // holds the header.
            if h.write(buf).is_err() {
                log.error();
                return log.finish();
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
            Some(&dest),
            "nagare probe",
        )
        .unwrap_or(0);
        for j in 0..n as u64 {
            if j < sent as u64 {
                log.record(schedule.slot(first + j), sent_at, size as u64);
            } else {
                log.error();
            }
        }
        pacer.sent(now, n);
    }
    log.finish()
}
