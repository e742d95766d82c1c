//! What the load test measures per stream: every stream arrives on one
//! socket (kernel receive stamps, recvmmsg) and is told apart by its SSRC;
//! each is measured by nagare-proto's `stats::FlowMeter` (loss, frames
//! with a gap, and packet arrivals against the flow's own schedule).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};
use nagare_proto::MediaTime;
use nagare_proto::rtp::RtpPacket;
use nagare_proto::stats::FlowMeter;

use crate::clock::Origin;
use crate::net::udp::{ReceiveOptions, Receiver};

/// Streams by SSRC.
pub(super) type Flows = HashMap<u32, FlowMeter>;

/// The receiving socket and the thread reading it.
pub(super) struct Sink {
    /// Where streams must be sent.
    pub addr: std::net::SocketAddr,
    flows: Arc<Mutex<Flows>>,
    drops: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Binds `bind` with a large forced buffer; with `realtime` the
    /// receiving thread runs SCHED_FIFO (a server given real-time pacing
    /// on a busy host would otherwise outrun its own load generator).
    pub(super) fn open(bind: std::net::SocketAddr, realtime: bool) -> Result<Sink> {
        let opts = ReceiveOptions {
            buffer_bytes: 256 << 20,
            ..ReceiveOptions::default()
        };
        let mut rx = Receiver::open(bind, &opts).context("opening the receiving socket")?;
        for n in &rx.notices {
            eprintln!("nagare loadtest: note: {n}");
        }
        rx.enable_timestamps();
        let addr = rx.local_addr().context("the receiving socket's address")?;
        let flows: Arc<Mutex<Flows>> = Arc::default();
        let drops: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, d, s) = (flows.clone(), drops.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("loadtest-rx".into())
            .spawn(move || {
                if realtime && let Err(e) = crate::net::tuning::realtime() {
                    eprintln!("nagare loadtest: receiver: {e:#}");
                }
                receive(rx, &f, &d, &s, Origin::now())
            })
            .context("starting the receiving thread")?;
        Ok(Sink {
            addr,
            flows,
            drops,
            stop,
            thread: Some(thread),
        })
    }

    /// Starts a new window: every stream's counters from zero.
    pub(super) fn reset(&self) {
        self.lock().clear();
    }

    /// The streams of the window so far.
    pub(super) fn lock(&self) -> MutexGuard<'_, Flows> {
        self.flows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Kernel drops of the socket so far.
    pub(super) fn kernel_drops(&self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn receive(
    mut rx: Receiver,
    flows: &Mutex<Flows>,
    drops: &std::sync::atomic::AtomicU64,
    stop: &AtomicBool,
    origin: Origin,
) {
    let mut batch: Vec<(u32, u16, u32, usize, Instant)> = Vec::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        batch.clear();
        let r = rx.recv_batch(|d| {
            for seg in d.segments() {
                if let Ok(p) = RtpPacket::new_checked(seg) {
                    batch.push((
                        p.ssrc(),
                        p.sequence_number(),
                        p.timestamp(),
                        seg.len(),
                        d.at,
                    ));
                }
            }
        });
        if r.is_err() {
            continue;
        }
        drops.store(u64::from(rx.kernel_drops), Ordering::Relaxed);
        let mut map = flows.lock().unwrap_or_else(|p| p.into_inner());
        for &(ssrc, seq, ts, len, at) in &batch {
            map.entry(ssrc)
                .or_default()
                .record(seq, MediaTime(ts), len, origin.nanos(at));
        }
    }
}
