//! The read-ahead thread (seed 002's periodic disk reader): one thread
//! fills every stream's ring, always serving the ring that will run dry
//! first. A ring's deadline is now plus the play time it still holds
//! (chunks waiting times one chunk's duration); among equal deadlines the
//! higher priority reads first (the rule is
//! `nagare_proto::serve::readahead`). So a busy disk delays the reads
//! whose deadline is furthest away, and a stream whose ring did run dry
//! shows it as underruns in its counters, never as a stalled pacer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded, select, unbounded};
use nagare_proto::mpegts::DATAGRAM_LEN;
use nagare_proto::serve::Cost;
use nagare_proto::serve::readahead::{self, RingFill};
use nagare_proto::video::pattern::Pattern;
use nagare_proto::{ByteSize, Nanos};
use tracing::warn;

use crate::clock::Origin;
use crate::cmd::serve::hub::media::{Kind, Media};
use crate::cmd::serve::hub::table::{Counters, StreamId};
use crate::cmd::serve::stream::meter::{LoadMeter, Published};
use crate::net::file::Passes;

/// Datagrams of TS per chunk: a chunk boundary is always a datagram
/// boundary, so a datagram never spans two chunks.
pub(crate) const TS_CHUNK_DATAGRAMS: usize = 16;

/// One chunk of a stream: a raw frame, or up to
/// [`TS_CHUNK_DATAGRAMS`] datagrams of TS.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// The buffer (only `..len` is data).
    pub data: Vec<u8>,
    /// Bytes of data.
    pub len: usize,
    /// The last chunk of a pass of the source.
    pub end_of_pass: bool,
    /// Its number: chunks read so far plus the first number the ring was
    /// opened with (for an epoch-aligned raw stream, its epoch frame).
    pub number: u64,
}

/// What a ring delivers.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The next chunk.
    Chunk(Chunk),
    /// The source ended (no loop).
    End,
    /// Reading failed; the stream stops with this reason.
    Failed(String),
}

/// The consumer end of a stream's ring, held by its pacer.
#[derive(Debug)]
pub(crate) struct Ring {
    full: Receiver<Delivery>,
    empty: Sender<Vec<u8>>,
    /// Wakes the reader on a give-back: a raw ring's only (see
    /// [`Ring::give_back`]).
    wake: Option<Sender<()>>,
    counters: Arc<Counters>,
}

impl Ring {
    /// The next delivery, without waiting.
    pub(crate) fn take(&self) -> Option<Delivery> {
        let d = self.full.try_recv().ok();
        self.counters
            .ring_fill
            .store(self.full.len() as u64, Ordering::Relaxed);
        d
    }

    /// Hands a sent chunk's buffer back for the next read. A raw ring
    /// (a few frames, a few give-backs a second) wakes the reader; a TS
    /// ring, which holds the read-ahead time, does not, and the reader
    /// finds its buffer on its next look ([`IDLE_LOOK`]): at 300 TS flows
    /// a wake per give-back had the pacers spinning on the wake channel's
    /// tail 46% of the time (`perf record`, 2026-11-27), and waking the
    /// reader for each cost a cross-CPU wake-up.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        let _ = self.empty.try_send(buf);
        if let Some(w) = &self.wake {
            let _ = w.try_send(());
        }
    }
}

/// Where one stream's reading stands.
struct Flow {
    looping: bool,
    priority: u8,
    full: Sender<Delivery>,
    empty: Receiver<Vec<u8>>,
    spare: Option<Vec<u8>>,
    /// Play time of one chunk.
    period: Nanos,
    chunk_bytes: usize,
    pattern: Option<Pattern>,
    /// The file of a raw or TS path.
    file: Option<Passes>,
    /// Chunks read in all passes.
    number: u64,
    done: bool,
    counters: Arc<Counters>,
}

enum Command {
    Open(StreamId, Box<Flow>),
    Close(StreamId),
}

/// The reader thread's handle.
pub(crate) struct Reader {
    commands: Sender<Command>,
    wake: Sender<()>,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    read_ahead: Duration,
    ring_frames: usize,
    load: Arc<Published>,
    /// The cost of a MiB assumed from this machine's copy rate, measured
    /// as the reader starts (before serve listens).
    assumed_per_mib: Option<Nanos>,
}

/// The buffer of the copy-rate sample taken as the reader starts: past
/// the caches of most machines, small enough to cost about 20 ms.
const COPY_SAMPLE: usize = 16 << 20;

/// How a stream's ring is laid out: chunk size, play time of a chunk,
/// and chunks held.
struct RingPlan {
    chunk_bytes: usize,
    period: Nanos,
    capacity: usize,
}

impl Reader {
    /// Starts the thread. TS rings hold `read_ahead` of play time; raw
    /// rings hold `ring_frames` frames. With `realtime` the thread runs
    /// SCHED_FIFO like the pacers: a reader starved by a busy machine
    /// would leave every ring dry however well the pacers keep time.
    pub(crate) fn start(
        read_ahead: Duration,
        ring_frames: usize,
        realtime: bool,
    ) -> std::io::Result<Reader> {
        let (commands, rx) = unbounded();
        // A token says "look now"; one says it as well as many.
        let (wake, wake_rx) = bounded(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let load = Arc::new(Published::default());
        let meter = LoadMeter::new(load.clone());
        let copy = crate::net::copy_rate::measure_with(COPY_SAMPLE);
        let assumed_per_mib = Cost::per_mib_for_copy_rate(copy.bytes_per_second);
        let thread = std::thread::Builder::new()
            .name("serve-reader".into())
            .spawn(move || {
                if realtime && let Err(e) = crate::net::tuning::realtime() {
                    warn!("reader: {e:#}");
                }
                run(&rx, &wake_rx, &stop2, meter)
            })?;
        Ok(Reader {
            commands,
            wake,
            thread: Some(thread),
            stop,
            read_ahead,
            ring_frames: ring_frames.max(2),
            load,
            assumed_per_mib,
        })
    }

    /// The ring `media` gets: a raw frame per chunk, `ring_frames` of
    /// them; TS chunks of [`TS_CHUNK_DATAGRAMS`] datagrams, enough for
    /// the read-ahead time (4 to 256).
    fn plan(&self, media: &Media) -> RingPlan {
        let (chunk_bytes, period) = match &media.kind {
            Kind::Raw { format, rate, .. } | Kind::Pattern { format, rate } => {
                (format.frame_bytes(), period_of(rate.as_f64()))
            }
            Kind::Ts { rate, .. } => {
                let bytes = TS_CHUNK_DATAGRAMS * DATAGRAM_LEN;
                (bytes, rate.time_for(ByteSize::of_len(bytes)))
            }
        };
        let capacity = if media.is_ts() {
            let per = period.as_nanos().max(1);
            (self.read_ahead.as_nanos() as u64 / per).clamp(4, 256) as usize
        } else {
            self.ring_frames
        };
        RingPlan {
            chunk_bytes,
            period,
            capacity,
        }
    }

    /// Memory the ring of a stream of `media` holds.
    pub(crate) fn ring_bytes(&self, media: &Media) -> ByteSize {
        let plan = self.plan(media);
        ByteSize((plan.chunk_bytes * plan.capacity) as u64)
    }

    /// The thread's working share of the last second, 0 to 1.
    pub(crate) fn load(&self) -> f64 {
        self.load.load()
    }

    /// Working time per MiB read over the last second, once enough was
    /// read to tell; until then what this machine's copy rate makes of it.
    pub(crate) fn cost_per_mib(&self) -> Option<Nanos> {
        let (busy, bytes) = self.load.work();
        Cost::per_mib_from(busy, bytes).or(self.assumed_per_mib)
    }

    /// Starts reading `media` for stream `id` at chunk number `first`
    /// (raw video: frame `first mod frames` of a file, frame `first` of the
    /// pattern, so an epoch-aligned stream starts at its epoch frame);
    /// returns the ring the pacer takes chunks from.
    pub(crate) fn open(
        &self,
        id: StreamId,
        media: Arc<Media>,
        looping: bool,
        priority: u8,
        counters: Arc<Counters>,
        first: u64,
    ) -> Ring {
        let RingPlan {
            chunk_bytes,
            period,
            capacity,
        } = self.plan(&media);
        let pattern = match &media.kind {
            Kind::Pattern { format, .. } => Some(Pattern::new(*format)),
            _ => None,
        };
        let (full_tx, full) = bounded(capacity + 1);
        let (empty, empty_rx) = bounded(capacity);
        for _ in 0..capacity {
            let _ = empty.send(vec![0u8; chunk_bytes]);
        }
        counters
            .ring_capacity
            .store(capacity as u64, Ordering::Relaxed);
        // Errors name the catalog entry, never the server's path: they
        // reach API clients (a failed stream's `error`). An epoch-aligned
        // raw stream starts mid-file.
        let name = media.name.clone();
        let file = match &media.kind {
            Kind::Pattern { .. } => None,
            Kind::Raw { path, frames, .. } => {
                let total = frames.saturating_mul(chunk_bytes as u64);
                let start = (first % (*frames).max(1)) * chunk_bytes as u64;
                Some(Passes::new(path.clone(), name, total, start, false))
            }
            Kind::Ts { path, bytes, .. } => Some(Passes::new(path.clone(), name, *bytes, 0, false)),
        };
        let flow = Flow {
            looping,
            priority,
            full: full_tx,
            empty: empty_rx,
            spare: None,
            period,
            chunk_bytes,
            pattern,
            file,
            number: first,
            done: false,
            counters: counters.clone(),
        };
        // The command wakes a reader waiting with every ring full.
        let _ = self.commands.send(Command::Open(id, Box::new(flow)));
        Ring {
            full,
            empty,
            wake: (!media.is_ts()).then(|| self.wake.clone()),
            counters,
        }
    }

    /// Stops reading for stream `id`.
    pub(crate) fn close(&self, id: StreamId) {
        let _ = self.commands.send(Command::Close(id));
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.try_send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn period_of(fps: f64) -> Nanos {
    Nanos::from_secs_f64(1.0 / fps.max(1e-3))
}

/// How long the reader waits, with every ring full, before it looks for
/// buffers a TS ring gave back without waking it: far less than a TS
/// ring's play time (the read-ahead, at least 4 chunks). Not shorter:
/// polling at 500 Hz, SCHED_FIFO readers of several servers on one host
/// held up the rest of it (a cluster test's router joined late).
const IDLE_LOOK: Duration = Duration::from_millis(20);

/// The thread: take commands, then read one chunk for every ring that has
/// room, earliest deadline first; wait when every ring is full.
fn run(commands: &Receiver<Command>, wake: &Receiver<()>, stop: &AtomicBool, mut meter: LoadMeter) {
    let mut flows: HashMap<StreamId, Box<Flow>> = HashMap::new();
    let origin = Origin::now();
    while !stop.load(Ordering::Acquire) {
        loop {
            match commands.try_recv() {
                Ok(Command::Open(id, f)) => {
                    flows.insert(id, f);
                }
                Ok(Command::Close(id)) => {
                    flows.remove(&id);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        let order = due_order(&mut flows, origin.elapsed());
        if order.is_empty() {
            let waited = Instant::now();
            select! {
                recv(wake) -> _ => {}
                recv(commands) -> c => match c {
                    Ok(Command::Open(id, f)) => { flows.insert(id, f); }
                    Ok(Command::Close(id)) => { flows.remove(&id); }
                    Err(_) => return,
                },
                default(IDLE_LOOK) => {}
            }
            meter.idle(waited.elapsed());
            continue;
        }
        for id in order {
            if let Some(f) = flows.get_mut(&id) {
                meter.worked(read_one(f) as u64);
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
        }
        flows.retain(|_, f| !f.done);
        // A reader that never waits still closes its window.
        meter.idle(Duration::ZERO);
    }
}

/// Streams with a free buffer in the order to read them (the rule is
/// `readahead::due_order`); takes a returned buffer as each flow's spare.
fn due_order(flows: &mut HashMap<StreamId, Box<Flow>>, now: Nanos) -> Vec<StreamId> {
    let rings: Vec<RingFill> = flows
        .iter_mut()
        .filter(|(_, f)| !f.done)
        .map(|(id, f)| {
            if f.spare.is_none() {
                f.spare = f.empty.try_recv().ok();
            }
            // Play time left in the ring: when it runs dry.
            let left = f.period.saturating_mul(f.full.len() as u64);
            RingFill {
                id: *id,
                due: now.saturating_add(left),
                priority: f.priority,
                room: f.spare.is_some(),
            }
        })
        .collect();
    readahead::due_order(now, &rings)
}

/// Reads the next chunk of `f` into its spare buffer and delivers it;
/// returns the bytes read.
fn read_one(f: &mut Flow) -> usize {
    let Some(mut buf) = f.spare.take() else {
        return 0;
    };
    buf.resize(f.chunk_bytes, 0);
    let mut read = 0;
    let delivery = match fill(f, &mut buf) {
        Ok(Some((len, end_of_pass))) => {
            read = len;
            f.number += 1;
            Delivery::Chunk(Chunk {
                data: buf,
                len,
                end_of_pass,
                number: f.number - 1,
            })
        }
        Ok(None) => {
            f.done = true;
            Delivery::End
        }
        Err(e) => {
            f.done = true;
            Delivery::Failed(e)
        }
    };
    if matches!(delivery, Delivery::Chunk(ref c) if c.end_of_pass) && !f.looping {
        // The last chunk, then the end.
        let _ = f.full.try_send(delivery);
        let _ = f.full.try_send(Delivery::End);
        f.done = true;
        return read;
    }
    if let Delivery::Chunk(c) = &delivery
        && c.end_of_pass
    {
        Counters::add(&f.counters.loops, 1);
    }
    // The ring has one place more than buffers, so this never fails
    // while the pacer hands buffers back.
    let _ = f.full.try_send(delivery);
    read
}

/// Reads one chunk: `(bytes, end of pass)`, or `None` at the end.
fn fill(f: &mut Flow, buf: &mut [u8]) -> Result<Option<(usize, bool)>, String> {
    if let Some(p) = &f.pattern {
        p.render(f.number, buf);
        return Ok(Some((buf.len(), false)));
    }
    let file = f
        .file
        .as_mut()
        .ok_or("a path with neither a file nor a pattern")?;
    file.read(buf, f.looping).map_err(|e| format!("{e:#}"))
}
