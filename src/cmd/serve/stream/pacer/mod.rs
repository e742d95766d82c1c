//! The pacing threads: one per core, each serving many flows from one
//! schedule. Raw video flows share one nagare-proto `video::Sender` (a
//! heap of next-release times); MPEG-TS flows share one
//! `mpegts::Sender` (a heap of next departures, timed from each file's
//! PCR). No thread and no spin per flow: a thread sleeps until the
//! earliest deadline of all its flows, or until a command arrives.

mod raw;
mod start;
mod ts;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, Sender, unbounded};
use nagare_api::serve::StreamState;
use nagare_proto::Nanos;
use nagare_proto::serve::Cost;
use nagare_proto::serve::budget::Slack;

pub(crate) use start::{Leg, Start};

use tracing::info;

use crate::clock::Origin;
use crate::cmd::serve::hub::table::StreamId;
use crate::cmd::serve::stream::meter::{LoadMeter, Published};
use crate::net::placement::{Placement, Role};
use crate::net::tuning::Realtime;

/// How far ahead of now a new flow's first packet is scheduled, so its
/// ring holds data by then.
pub(crate) const START_LEAD: Duration = Duration::from_millis(100);

/// Longest a stop waits for its pacer to confirm.
const STOP_ACK: Duration = Duration::from_secs(1);

enum Command {
    Start(Box<Start>),
    Pause(StreamId),
    Resume(StreamId),
    /// Stop a flow; the pacer answers on the sender once it has, so the
    /// caller's view of the counters is final.
    Stop(StreamId, Option<Sender<()>>),
}

struct Handle {
    commands: Sender<Command>,
    /// Its last second of work.
    load: Arc<Published>,
    flows: AtomicUsize,
    thread: Option<JoinHandle<()>>,
}

impl Handle {
    /// Sends the thread `c` and wakes it; false once it has stopped.
    fn command(&self, c: Command) -> bool {
        let sent = self.commands.send(c).is_ok();
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        sent
    }
}

/// Places pacing thread `k` and makes it real-time as asked; the first
/// thread to be refused says why, once.
fn tune(placement: &Placement, k: usize, realtime: Realtime, noted: &AtomicBool) {
    crate::net::tuning::precise_timers();
    let placed = placement.apply(Role::Pacer { index: k });
    let rt = realtime.apply();
    let note = match (placed, rt) {
        (Err(e), _) => Some(format!("{e:#}")),
        (_, Err(e)) => Some(format!("{e:#}")),
        (Ok(_), Ok((_, note))) => note.filter(|_| realtime == Realtime::Auto),
    };
    if let Some(note) = note
        && !noted.swap(true, Ordering::Relaxed)
    {
        info!("note: pacing threads: {note}");
    }
}

/// The pacing threads and which flow each serves.
pub(crate) struct Pacers {
    handles: Vec<Handle>,
    /// Cores the pacing threads and the reader share.
    cores: usize,
    placed: std::sync::Mutex<std::collections::HashMap<StreamId, usize>>,
    stop: Arc<AtomicBool>,
}

impl Pacers {
    /// Starts `n` pacing threads, pacer k placed on the k-th highest CPU
    /// and SCHED_FIFO as `realtime` says (net::placement, net::tuning).
    pub(crate) fn start(n: usize, realtime: Realtime, placement: Placement) -> Result<Pacers> {
        if realtime == Realtime::Required {
            // Checked here, on the caller's thread, so a refusal stops the
            // server with its reason.
            crate::net::tuning::realtime()?;
            crate::net::tuning::ordinary();
        }
        // Readers, the API and RTSP threads stay off the pacers' CPUs where
        // there are more CPUs than pacers.
        placement.apply(Role::Helper { pacers: n.max(1) })?;
        let stop = Arc::new(AtomicBool::new(false));
        let noted = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(n);
        for k in 0..n.max(1) {
            let (commands, rx) = unbounded();
            let load = Arc::new(Published::default());
            let (load2, stop2) = (load.clone(), stop.clone());
            let (placement, noted) = (placement.clone(), noted.clone());
            let thread = std::thread::Builder::new()
                .name(format!("serve-pacer-{k}"))
                .spawn(move || {
                    tune(&placement, k, realtime, &noted);
                    Pacer::new(rx, load2).run(&stop2)
                })
                .context("starting a pacing thread")?;
            handles.push(Handle {
                commands,
                load,
                flows: AtomicUsize::new(0),
                thread: Some(thread),
            });
        }
        Ok(Pacers {
            handles,
            cores: std::thread::available_parallelism().map_or(1, |c| c.get()),
            placed: Default::default(),
            stop,
        })
    }

    /// Hands a flow to the pacing thread with the fewest flows.
    pub(crate) fn start_flow(&self, start: Start) {
        let k = (0..self.handles.len())
            .min_by_key(|&k| self.handles[k].flows.load(Ordering::Relaxed))
            .unwrap_or(0);
        self.handles[k].flows.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(start.id, k);
        self.handles[k].command(Command::Start(Box::new(start)));
    }

    /// Pauses a flow (keeps its position).
    pub(crate) fn pause(&self, id: StreamId) {
        self.send(id, Command::Pause(id));
    }

    /// Resumes a paused flow.
    pub(crate) fn resume(&self, id: StreamId) {
        self.send(id, Command::Resume(id));
    }

    /// Stops a flow for good.
    pub(crate) fn stop_flow(&self, id: StreamId) {
        if let Some(k) = self.lock().remove(&id) {
            self.handles[k].flows.fetch_sub(1, Ordering::Relaxed);
            let (done, stopped) = crossbeam_channel::bounded(1);
            if self.handles[k].command(Command::Stop(id, Some(done))) {
                // A train already handed to the kernel is counted after the
                // send returns; waiting here keeps it in the final counters.
                // Bounded: a wedged pacer must not hang the API.
                let _ = stopped.recv_timeout(STOP_ACK);
            }
        }
    }

    /// The busiest thread's working share of the last second, 0 to 1.
    pub(crate) fn load(&self) -> f64 {
        self.handles
            .iter()
            .map(|h| h.load.load())
            .fold(0.0, f64::max)
    }

    /// Working time per datagram over every thread's last second, once
    /// enough were sent to tell.
    pub(crate) fn cost_per_packet(&self) -> Option<Nanos> {
        let (busy, packets) = self.handles.iter().fold((0u64, 0u64), |(b, n), h| {
            let (busy, units) = h.load.work();
            (b + busy.as_nanos(), n + units)
        });
        Cost::per_packet_from(Nanos(busy), packets)
    }

    /// Number of pacing threads.
    pub(crate) fn threads(&self) -> usize {
        self.handles.len()
    }

    /// Cores the pacing threads and the read-ahead thread share.
    pub(crate) fn cores(&self) -> usize {
        self.cores
    }

    /// How close the flows are to running late now: the thread longest
    /// behind its schedule, and the latest ring found empty.
    pub(crate) fn slack(&self) -> Slack {
        let loads = self.handles.iter().map(|h| &h.load);
        Slack {
            pacer_behind: loads
                .clone()
                .map(|l| l.behind_for())
                .max()
                .unwrap_or_default(),
            since_dry_ring: loads.filter_map(|l| l.since_dry_ring()).min(),
        }
    }

    fn send(&self, id: StreamId, c: Command) {
        if let Some(&k) = self.lock().get(&id) {
            self.handles[k].command(c);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<StreamId, usize>> {
        self.placed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Pacers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in &mut self.handles {
            // Wakes a thread waiting for a command.
            h.command(Command::Stop(0, None));
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One pacing thread's state.
struct Pacer {
    commands: Receiver<Command>,
    origin: Origin,
    raw: raw::RawFlows,
    ts: ts::TsFlows,
    meter: LoadMeter,
}

impl Pacer {
    fn new(commands: Receiver<Command>, load: Arc<Published>) -> Pacer {
        Pacer {
            commands,
            origin: Origin::now(),
            raw: raw::RawFlows::default(),
            ts: ts::TsFlows::default(),
            meter: LoadMeter::new(load),
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        crate::net::tuning::precise_timers();
        while !stop.load(Ordering::Acquire) {
            while let Ok(c) = self.commands.try_recv() {
                self.command(c);
            }
            let now = self.origin.elapsed();
            self.raw.step(now, &self.origin);
            self.ts.step(now);
            self.meter
                .worked(self.raw.take_sent() + self.ts.take_sent());
            if self.raw.take_dry() {
                self.meter.dry_ring();
            }
            let next = [self.raw.next_deadline(), self.ts.next_deadline()]
                .into_iter()
                .flatten()
                .min();
            self.wait(next);
        }
        self.raw.stop_all();
        self.ts.stop_all();
    }

    /// Sleeps until `next` (at most 100 ms) or a command, whichever first.
    fn wait(&mut self, next: Option<Nanos>) {
        let now = self.origin.elapsed();
        let left = match next {
            // Behind: no idle time, but the window must still close, or a
            // saturated pacer would keep reporting its last idle second
            // (2,000 streams were admitted at a load of 0.00003).
            Some(at) if at <= now => {
                self.meter.behind(true);
                self.meter.idle(Duration::ZERO);
                return;
            }
            Some(at) => Duration::from(at.saturating_sub(now)).min(Duration::from_millis(100)),
            None => Duration::from_millis(100),
        };
        self.meter.behind(false);
        let t0 = Instant::now();
        // Parked, not in the channel's timed receive: that spins and
        // yields before it sleeps, which at hundreds of TS flows (a
        // deadline every few tens of µs) was a seventh of serve's CPU.
        // A command unparks the thread (`Handle::command`; one sent since
        // the loop drained the channel has left the token, so this returns
        // at once), and the loop takes it.
        std::thread::park_timeout(left);
        self.meter.idle(t0.elapsed());
    }

    fn command(&mut self, c: Command) {
        let now = self.origin.elapsed();
        let lead = Nanos::from(START_LEAD);
        match c {
            Command::Start(s) if s.media.is_ts() => self.ts.start(*s, now + lead),
            Command::Start(s) => self.raw.start(*s, &self.origin, START_LEAD),
            Command::Pause(id) => {
                self.raw.pause(id, now);
                self.ts.pause(id, now);
            }
            Command::Resume(id) => {
                self.raw.resume(id, now + lead);
                self.ts.resume(id, now + lead);
            }
            Command::Stop(id, done) => {
                self.raw.stop(id, StreamState::Finished);
                self.ts.stop(id, StreamState::Finished);
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
        }
    }
}
