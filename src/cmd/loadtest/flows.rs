//! What the load test measures per stream: every stream arrives on one
//! socket (kernel receive stamps, recvmmsg) and is told apart by its SSRC;
//! loss comes from nagare-proto's sequence tracker, frames from RTP
//! timestamps, jitter from consecutive packets' arrival against their RTP
//! timestamps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::stats::{Arrival, Distribution, SeqExtender, SequenceTracker};

use crate::net::udp::{ReceiveOptions, Receiver};

/// One stream's counters over the current window.
pub(super) struct Flow {
    seq: SeqExtender,
    tracker: SequenceTracker,
    /// Datagrams received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// First and last arrival.
    pub span: Option<(Instant, Instant)>,
    last: Option<(u64, u32, Instant)>,
    /// |arrival gap − timestamp gap| of consecutive packets, ns.
    pub jitter: Distribution,
    current: Option<u32>,
    current_lossy: bool,
    /// Frames (timestamps) that ended.
    pub frames: u64,
    /// Of those, frames with a gap.
    pub frames_dropped: u64,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            seq: SeqExtender::default(),
            tracker: SequenceTracker::new(),
            packets: 0,
            bytes: 0,
            span: None,
            last: None,
            jitter: Distribution::with_precision(2),
            current: None,
            current_lossy: false,
            frames: 0,
            frames_dropped: 0,
        }
    }

    /// Datagrams missing so far.
    pub(super) fn lost(&self) -> u64 {
        self.tracker.lost()
    }

    fn record(&mut self, seq: u16, ts: u32, len: usize, at: Instant) {
        let ext = self.seq.extend(seq, None);
        let arrival = self.tracker.record(ext);
        self.packets += 1;
        self.bytes += len as u64;
        self.span = Some(self.span.map_or((at, at), |(a, _)| (a, at)));
        if self.current != Some(ts) {
            if self.current.is_some() {
                self.frames += 1;
                self.frames_dropped += u64::from(self.current_lossy);
            }
            self.current = Some(ts);
            self.current_lossy = false;
        }
        if let Arrival::Ahead { .. } = arrival {
            self.current_lossy = true;
        }
        if let Some((prev, prev_ts, prev_at)) = self.last
            && prev + 1 == ext
            && prev_ts != ts
        {
            let media_ns = i64::from(ts.wrapping_sub(prev_ts) as i32) * 1_000_000 / 90;
            let arrival_ns = at.saturating_duration_since(prev_at).as_nanos() as i64;
            self.jitter
                .record(arrival_ns.saturating_sub(media_ns).unsigned_abs());
        }
        if self.last.is_none_or(|(p, _, _)| ext > p) {
            self.last = Some((ext, ts, at));
        }
    }
}

/// Streams by SSRC.
pub(super) type Flows = HashMap<u32, Flow>;

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
                receive(rx, &f, &d, &s)
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
                .or_insert_with(Flow::new)
                .record(seq, ts, len, at);
        }
    }
}
