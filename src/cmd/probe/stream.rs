//! The test stream's sockets and its paced sender.
//!
//! The sender shares `nagare send`'s schedule and batch I/O (`net::udp`):
//! trains of packets whose slots fall in one burst window leave in one GSO
//! or `sendmmsg` call. What goes in each packet is the session's
//! [`StreamPlan`], and each train's packet headers are laid out by proto
//! (`StreamPlan::train`, `DataTrain::write`); this loop only keeps time
//! and moves bytes.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nagare_proto::probe::{SenderLog, SenderReport, StreamPlan, wire};
use nagare_proto::video::sender::{Event, FlowSpec, Input, Sender};
use nagare_proto::{Nanos, Ssrc};
use socket2::SockAddr;

use crate::net::udp;

/// Sends the whole test stream of `plan` (each of its parallel streams)
/// on its schedule, in trains of up to one burst window; stops early when
/// `stop` is set. Every packet carries its stream's session id, its own
/// sequence number and its train's send time, and is logged against its
/// own slot. The schedule is the same [`video::Sender`] that paces
/// `nagare send`, with one flow per stream; proto writes each train's
/// headers over the packet buffers. Returns one report per stream.
pub(super) fn send_stream(
    sock: &UdpSocket,
    plan: &StreamPlan,
    stop: &AtomicBool,
) -> Vec<SenderReport> {
    let size = plan.packet_size;
    let schedule = &plan.schedule;
    let mut gso = udp::gso_available(sock);
    let (mut sender, max_train) = pacer(plan, gso);
    // One packet buffer per train slot, laid end to end so a GSO train is
    // one contiguous run.
    let mut bufs = vec![0u8; size * max_train];
    bufs.chunks_mut(size).for_each(wire::fill);
    let dest = SockAddr::from(plan.to);
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(max_train);
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(max_train);
    let mut logs: Vec<SenderLog> = (0..plan.streams.max(1))
        .map(|_| SenderLog::new(schedule))
        .collect();
    let start = Instant::now() + Duration::from_millis(2);
    while !stop.load(Ordering::Relaxed) {
        // The test stream's frames are synthetic: always ready.
        while let Some(ev) = sender.poll_event() {
            if let Event::NeedFrame { flow, .. } = ev {
                let _ = sender.handle_input(Nanos::ZERO, Input::Frame { flow });
            }
        }
        let Some(at) = sender.poll_timeout() else {
            break;
        };
        crate::clock::wait_until(start + Duration::from(at));
        let sent_at = Nanos::from(start.elapsed());
        let Some(train) = sender.poll_transmit(sent_at) else {
            continue;
        };
        let lane = train.flow.index();
        let packets = plan.train(&train, sent_at);
        let (first, n) = (packets.first, packets.count);
        let log = &mut logs[lane];
        // The buffers hold max_train packets of at least MIN_PACKET_SIZE
        // (validated), which holds the header.
        if packets.write(&mut bufs, size, schedule).is_err() {
            log.error();
            return logs.into_iter().map(SenderLog::finish).collect();
        }
        iov.clear();
        iov.extend(bufs.chunks(size).take(n).map(udp::iovec));
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
    }
    logs.into_iter().map(SenderLog::finish).collect()
}

/// The pacer of `plan`: one flow per stream on the same schedule, in
/// trains GSO (`gso`) or sendmmsg can carry; and the longest train.
fn pacer(plan: &StreamPlan, gso: bool) -> (Sender, usize) {
    let schedule = &plan.schedule;
    let ppf = schedule.packets_per_frame;
    let mut sender = Sender::new();
    let flows: Vec<_> = (0..plan.streams.max(1))
        .map(|i| {
            sender.add_flow(
                FlowSpec::new(schedule.rate, ppf as usize, Ssrc(i))
                    .trains(plan.burst, udp::train_cap(gso, plan.packet_size))
                    .frame_limit(Some(schedule.total_packets / ppf.max(1))),
            )
        })
        .collect();
    let max_train = flows
        .iter()
        .filter_map(|&f| sender.max_train(f))
        .max()
        .unwrap_or(1);
    (sender, max_train)
}
