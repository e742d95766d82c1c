//! MPEG-TS flows of one pacing thread. Each flow's departures come from
//! nagare-proto's `mpegts::Schedule` (PCR pacing, loops continued on one
//! timeline); this driver keeps the flows' next departures in one heap,
//! feeds each schedule the chunks its ring delivers, and writes each
//! datagram once (RTP MP2T or plain UDP) for all its destinations.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use nagare_api::serve::{Encapsulation, StreamState};
use nagare_proto::mpegts::{
    self, DATAGRAM_LEN, DatagramWriter, Departure, LoopStamper, PACKET_LEN, Schedule,
    ScheduleConfig,
};
use nagare_proto::{Nanos, Ssrc};

use super::super::media::Kind;
use super::super::output::Sent;
use super::super::reader::{Chunk, Delivery};
use super::super::table::{Counters, StreamId};
use super::Start;

/// How long a flow whose ring ran dry waits before looking again.
const RETRY: Nanos = Nanos::from_millis(2);

/// A chunk being sent, and which pass of the file it belongs to.
struct Queued {
    chunk: Chunk,
    pass: u64,
    /// Datagrams of it already sent.
    sent: usize,
}

impl Queued {
    fn datagrams(&self) -> usize {
        self.chunk.len.div_ceil(DATAGRAM_LEN)
    }
}

/// One TS flow's driver state.
struct TsFlow {
    start: Start,
    schedule: Schedule,
    writer: DatagramWriter,
    stamper: LoopStamper,
    queue: VecDeque<Queued>,
    /// Pass of the file being fed to the schedule.
    fed_pass: u64,
    /// The next departure, once the schedule knows it.
    next: Option<Departure>,
    /// Where the stream's time zero lies on the pacer's timeline.
    origin: Nanos,
    /// The ring delivered its end.
    ended: bool,
    /// The ring was found empty and has not delivered since.
    starving: bool,
    paused_at: Option<Nanos>,
    /// Bumped to invalidate heap entries (pause, stop).
    generation: u32,
    out: Vec<u8>,
}

/// Every TS flow of one pacing thread.
#[derive(Default)]
pub(super) struct TsFlows {
    flows: HashMap<StreamId, TsFlow>,
    heap: BinaryHeap<Reverse<(Nanos, StreamId, u32)>>,
}

impl TsFlows {
    /// Adds a flow whose time zero is `at`.
    pub(super) fn start(&mut self, start: Start, at: Nanos) {
        let Kind::Ts { rate, .. } = start.media.kind else {
            return;
        };
        let enc = match start.encapsulation {
            Encapsulation::Rtp => mpegts::Encapsulation::Rtp,
            Encapsulation::Udp => mpegts::Encapsulation::Udp,
        };
        let random = || getrandom::u32().unwrap_or(0x6e61_6761);
        let writer = DatagramWriter::new(enc, Ssrc(random()), random() as u16, random());
        start.counters.set_state(StreamState::Playing);
        let id = start.id;
        let flow = TsFlow {
            start,
            schedule: Schedule::new(ScheduleConfig::new(rate)),
            out: vec![0; writer.max_len()],
            writer,
            stamper: LoopStamper::new(),
            queue: VecDeque::new(),
            fed_pass: 0,
            next: None,
            origin: at,
            ended: false,
            starving: false,
            paused_at: None,
            generation: 0,
        };
        self.flows.insert(id, flow);
        self.heap.push(Reverse((at, id, 0)));
    }

    /// Sends every datagram due at `now`.
    pub(super) fn step(&mut self, now: Nanos) {
        while let Some(&Reverse((at, id, generation))) = self.heap.peek() {
            if at > now {
                return;
            }
            self.heap.pop();
            let Some(f) = self.flows.get_mut(&id) else {
                continue;
            };
            if f.generation != generation || f.paused_at.is_some() {
                continue;
            }
            match f.advance(now) {
                Some(next) => self.heap.push(Reverse((next, id, generation))),
                None => self.finish(id),
            }
        }
    }

    /// The earliest departure of any flow.
    pub(super) fn next_deadline(&mut self) -> Option<Nanos> {
        while let Some(&Reverse((at, id, generation))) = self.heap.peek() {
            if self
                .flows
                .get(&id)
                .is_some_and(|f| f.generation == generation && f.paused_at.is_none())
            {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    fn finish(&mut self, id: StreamId) {
        if let Some(f) = self.flows.remove(&id) {
            let state = match f.start.counters.state() {
                StreamState::Failed => StreamState::Failed,
                _ => StreamState::Finished,
            };
            f.start.counters.set_state(state);
        }
    }

    pub(super) fn pause(&mut self, id: StreamId, now: Nanos) {
        if let Some(f) = self.flows.get_mut(&id)
            && f.paused_at.is_none()
        {
            f.paused_at = Some(now);
            f.generation = f.generation.wrapping_add(1);
            f.start.counters.set_state(StreamState::Paused);
        }
    }

    /// Resumes a paused flow: its timeline moves on by the pause, so its
    /// next datagram leaves at `at`.
    pub(super) fn resume(&mut self, id: StreamId, at: Nanos) {
        if let Some(f) = self.flows.get_mut(&id)
            && let Some(paused) = f.paused_at.take()
        {
            let due = f.next.map_or(paused, |d| f.origin + d.at);
            f.origin += at.saturating_sub(due.min(at));
            f.start.counters.set_state(StreamState::Playing);
            self.heap.push(Reverse((at, id, f.generation)));
        }
    }

    pub(super) fn stop(&mut self, id: StreamId, state: StreamState) {
        if let Some(f) = self.flows.remove(&id) {
            f.start.counters.set_state(state);
        }
    }

    pub(super) fn stop_all(&mut self) {
        for (_, f) in self.flows.drain() {
            f.start.counters.set_state(StreamState::Finished);
        }
        self.heap.clear();
    }
}

impl TsFlow {
    /// Sends the datagram due (if its time has come) and returns when to
    /// come back, or `None` when the flow is over.
    fn advance(&mut self, now: Nanos) -> Option<Nanos> {
        loop {
            let Some(d) = self.next_departure() else {
                if self.ended || self.start.counters.state() == StreamState::Failed {
                    return None;
                }
                return Some(now + RETRY);
            };
            let due = self.origin + d.at;
            if due > now {
                return Some(due);
            }
            self.next = None;
            if !self.send(&d, now.saturating_sub(due)) {
                return None;
            }
        }
    }

    /// The next departure, feeding the schedule chunks from the ring until
    /// it knows one.
    fn next_departure(&mut self) -> Option<Departure> {
        while self.next.is_none() {
            if let Some(d) = self.schedule.poll_event() {
                self.next = Some(d);
                break;
            }
            if self.ended {
                return None;
            }
            match self.start.ring.take() {
                Some(Delivery::Chunk(c)) => self.feed(c),
                Some(Delivery::End) => {
                    self.schedule.finish();
                    self.ended = true;
                }
                Some(Delivery::Failed(e)) => {
                    eprintln!("nagare serve: stream {}: {e}", self.start.id);
                    self.start.counters.set_state(StreamState::Failed);
                    self.ended = true;
                }
                None => {
                    if !self.starving {
                        self.starving = true;
                        Counters::add(&self.start.counters.underruns, 1);
                    }
                    return None;
                }
            }
        }
        self.next
    }

    /// Hands a chunk's packets to the schedule and queues it for sending.
    fn feed(&mut self, c: Chunk) {
        self.starving = false;
        for p in c.data[..c.len].chunks(PACKET_LEN) {
            self.schedule.handle_input(p);
        }
        let end = c.end_of_pass;
        self.queue.push_back(Queued {
            chunk: c,
            pass: self.fed_pass,
            sent: 0,
        });
        if end {
            // More passes follow (the reader sends End otherwise).
            self.schedule.restart();
            self.fed_pass += 1;
        }
    }

    /// Writes and sends the datagram of departure `d`; false when the flow
    /// must stop (its only TCP reader was dropped).
    fn send(&mut self, d: &Departure, late: Nanos) -> bool {
        let Some(q) = self.queue.front_mut() else {
            return true;
        };
        if q.pass > self.stamper.loops() {
            self.stamper.next_pass();
        }
        let from = q.sent * DATAGRAM_LEN;
        let to = (from + DATAGRAM_LEN).min(q.chunk.len);
        let packets = &mut q.chunk.data[from..to];
        if q.pass > 0 {
            for p in packets.chunks_mut(PACKET_LEN) {
                let _ = self.stamper.stamp(p);
            }
        }
        q.sent += 1;
        let c = &self.start.counters;
        let written = self.writer.write(d, packets, &mut self.out);
        if q.sent >= q.datagrams()
            && let Some(done) = self.queue.pop_front()
        {
            self.start.ring.give_back(done.chunk.data);
        }
        let Ok(len) = written else {
            Counters::add(&c.send_errors, 1);
            return true;
        };
        let mut alive = false;
        for out in &mut self.start.outputs {
            match out.datagram(&self.out[..len]) {
                Sent::Ok => {
                    Counters::add(&c.packets, 1);
                    Counters::add(&c.bytes, len as u64);
                    alive = true;
                }
                Sent::Refused => {
                    Counters::add(&c.send_errors, 1);
                    alive = true;
                }
                Sent::ReaderDropped => Counters::add(&c.queue_drops, 1),
            }
        }
        c.lateness(late.as_nanos(), 1);
        if !alive {
            c.set_state(StreamState::Failed);
        }
        alive
    }
}
