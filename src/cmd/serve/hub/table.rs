//! The stream table (seed 002): one entry per push stream or RTSP
//! session. The HTTP API and the RTSP sessions only edit it and tell the
//! pacers; the pacers and the reader publish each stream's counters into
//! its [`Counters`] of atomics, which the API and /metrics read without
//! ever taking a lock the media path holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use nagare_api::serve::{
    ReaderReport, StreamCounters, StreamInfo, StreamKind, StreamRequest, StreamState, StripeSpec,
};
use nagare_proto::BitRate;
use nagare_proto::serve::idempotency::{self, Replay};

use crate::cmd::serve::hub::reservation::Held;

/// A stream's number in the table (never reused while the server runs).
/// Push streams and RTSP sessions are numbered apart, so the API's
/// streams are 1, 2, 3 … however many players connected first (the
/// README's `curl …/v1/streams/1` names the first push): push streams
/// count from 1, RTSP sessions' streams from [`RTSP_IDS`] + 1. One
/// listing (`GET /v1/streams`) never shows two streams with one id, and
/// the API's id stays a plain number for every kind.
pub(crate) type StreamId = u64;

/// Where RTSP sessions' stream ids begin (the first is 1000000001): far
/// above any count of push streams a server makes (one a second for 30
/// years), and readable as "RTSP session 1".
pub(crate) const RTSP_IDS: StreamId = 1_000_000_000;

/// Live counters of one stream, written by its pacer and reader.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Datagrams sent.
    pub packets: AtomicU64,
    /// Payload bytes sent.
    pub bytes: AtomicU64,
    /// Datagrams sent more than 100 µs after their slot.
    pub late: AtomicU64,
    /// Largest lateness, ns.
    pub max_late_ns: AtomicU64,
    /// Frames or chunks not read in time.
    pub underruns: AtomicU64,
    /// Chunks in the ring now.
    pub ring_fill: AtomicU64,
    /// Ring capacity.
    pub ring_capacity: AtomicU64,
    /// Sends the kernel refused.
    pub send_errors: AtomicU64,
    /// Interleaved packets dropped for a full write queue.
    pub queue_drops: AtomicU64,
    /// Passes begun after the first.
    pub loops: AtomicU64,
    state: AtomicU8,
    /// Why it failed: set once, by whoever failed it first, so the API
    /// shows the cause rather than a later consequence.
    failure: OnceLock<String>,
    /// Its reader's latest RTCP receiver report (RTSP sessions), written
    /// by the session on the RTSP thread, never by the media path.
    reader: Mutex<Option<ReaderReport>>,
}

impl Counters {
    /// Adds `n` to a counter.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Records the lateness of `packets` datagrams sent together.
    pub(crate) fn lateness(&self, ns: u64, packets: u64) {
        if ns > 100_000 {
            self.late.fetch_add(packets, Ordering::Relaxed);
        }
        self.max_late_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Moves the stream to `state`.
    pub(crate) fn set_state(&self, state: StreamState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Moves the stream to `failed`, saying why (the API shows it).
    pub(crate) fn fail(&self, why: impl Into<String>) {
        let _ = self.failure.set(why.into());
        self.set_state(StreamState::Failed);
    }

    /// Records its reader's latest receiver report.
    pub(crate) fn set_reader(&self, report: ReaderReport) {
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
    }

    /// Its readers' latest receiver reports.
    pub(crate) fn readers(&self) -> Vec<ReaderReport> {
        let r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        r.iter().cloned().collect()
    }

    /// Why it failed, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure.get().cloned()
    }

    /// Its state now.
    pub(crate) fn state(&self) -> StreamState {
        match self.state.load(Ordering::Relaxed) {
            s if s == StreamState::Playing as u8 => StreamState::Playing,
            s if s == StreamState::Paused as u8 => StreamState::Paused,
            s if s == StreamState::Finished as u8 => StreamState::Finished,
            s if s == StreamState::Failed as u8 => StreamState::Failed,
            _ => StreamState::Ready,
        }
    }

    /// A copy for the API.
    pub(crate) fn snapshot(&self) -> StreamCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StreamCounters {
            packets: get(&self.packets),
            bytes: get(&self.bytes),
            late: get(&self.late),
            max_late_us: get(&self.max_late_ns) / 1000,
            underruns: get(&self.underruns),
            ring_fill: get(&self.ring_fill),
            ring_capacity: get(&self.ring_capacity),
            send_errors: get(&self.send_errors),
            queue_drops: get(&self.queue_drops),
            loops: get(&self.loops),
        }
    }
}

/// What the table shows of a cluster leg.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tags {
    /// The stripe sent.
    pub stripe: Option<StripeSpec>,
    /// Fixed SSRC.
    pub ssrc: Option<u32>,
    /// Free label.
    pub label: Option<String>,
    /// The idempotency key and the request that came with it, so a
    /// second POST with the key can be compared with the first.
    pub keyed: Option<(String, Arc<StreamRequest>)>,
}

/// One stream of the table.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Push or RTSP.
    pub kind: StreamKind,
    /// Catalog path.
    pub source: String,
    /// Destinations, for display.
    pub destinations: Vec<String>,
    /// Read-ahead priority.
    pub priority: u8,
    /// Nominal rate (reserved at admission).
    pub rate: BitRate,
    /// Loops.
    pub looping: bool,
    /// Live counters.
    pub counters: Arc<Counters>,
    /// Its admitted rate (shared with its flow).
    pub reservation: Held,
    /// Cluster leg details.
    pub tags: Tags,
}

impl Entry {
    /// The API's view of entry `id`.
    pub(crate) fn info(&self, id: StreamId) -> StreamInfo {
        StreamInfo {
            id,
            kind: self.kind,
            source: self.source.clone(),
            destinations: self.destinations.clone(),
            state: self.counters.state(),
            priority: self.priority,
            rate_bps: self.rate.bps(),
            looping: self.looping,
            counters: self.counters.snapshot(),
            stripe: self.tags.stripe,
            ssrc: self.tags.ssrc,
            label: self.tags.label.clone(),
            idempotency_key: self.tags.keyed.as_ref().map(|(k, _)| k.clone()),
            error: self.counters.failure(),
            readers: self.counters.readers(),
        }
    }
}

/// Every stream, live and finished (finished ones stay listed, with
/// their final counters, until stopped through the API).
#[derive(Debug, Default)]
pub(crate) struct Table {
    entries: Mutex<BTreeMap<StreamId, Entry>>,
    /// Push streams made so far.
    pushes: AtomicU64,
    /// RTSP sessions' streams made so far.
    sessions: AtomicU64,
}

impl Table {
    /// Adds `entry`; returns its id, the next of its kind's.
    pub(crate) fn insert(&self, entry: Entry) -> StreamId {
        let id = match entry.kind {
            StreamKind::Push => self.pushes.fetch_add(1, Ordering::Relaxed) + 1,
            StreamKind::Rtsp => RTSP_IDS + self.sessions.fetch_add(1, Ordering::Relaxed) + 1,
        };
        self.lock().insert(id, entry);
        id
    }

    /// Removes entry `id`, returning it.
    pub(crate) fn remove(&self, id: StreamId) -> Option<Entry> {
        self.lock().remove(&id)
    }

    /// A copy of entry `id`.
    pub(crate) fn get(&self, id: StreamId) -> Option<Entry> {
        self.lock().get(&id).cloned()
    }

    /// Every entry's API view, by id.
    pub(crate) fn infos(&self) -> Vec<StreamInfo> {
        self.lock().iter().map(|(id, e)| e.info(*id)).collect()
    }

    /// Ids and copies of every entry.
    pub(crate) fn entries(&self) -> Vec<(StreamId, Entry)> {
        self.lock().iter().map(|(id, e)| (*id, e.clone())).collect()
    }

    /// The id of the stream keyed `key`, if the same `request` made it;
    /// why not if another request did. Reads the table under its lock
    /// once; the answer holds until the caller inserts because callers
    /// hold `Server::keyed` from here to the insertion.
    pub(crate) fn replay(
        &self,
        key: &str,
        request: &StreamRequest,
    ) -> Result<Replay, nagare_proto::serve::Error> {
        let entries = self.lock();
        let keyed = entries.iter().filter_map(|(id, e)| {
            let (k, r) = e.tags.keyed.as_ref()?;
            Some((*id, k.as_str(), r.as_ref()))
        });
        idempotency::replay(key, request, keyed)
    }

    /// Streams in the table.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<StreamId, Entry>> {
        // A panic elsewhere never leaves the map half-edited (every edit
        // is one insert or remove), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}
