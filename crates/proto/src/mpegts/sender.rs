//! Many TS flows, one schedule: the send side of `.ts` files as a state
//! machine.
//!
//! Each flow plays one file, read by its driver in chunks of whole
//! datagrams. The flow's [`Schedule`] times each 7-packet datagram from
//! the file's PCR; the sender places those offsets on its own timeline
//! (the flow's start, moved on by every pause), keeps every flow's next
//! departure in one binary heap (a pacing thread serving hundreds of flows
//! pays O(log n) per datagram and never scans them), restamps the packets
//! of every pass after the first with a [`LoopStamper`], and writes each
//! datagram once with the flow's [`DatagramWriter`] (RTP or plain UDP).
//!
//! A flow cannot time a datagram before its driver has read it: when the
//! schedule knows no next departure, the sender asks with
//! [`Event::NeedChunk`], and the driver answers at once with
//! [`Input::Chunk`], [`Input::End`], [`Input::Failed`] or, when its ring is
//! empty, [`Input::Dry`]. A dry flow counts one underrun
//! ([`Event::Underrun`]) per dry spell, and asks again [`RETRY`] later;
//! its timeline does not move, so what was late leaves at once when the
//! data comes.
//!
//! # Polling order
//!
//! As with quinn-proto's `Connection`, a driver, whenever it wakes:
//!
//! 1. hands in what happened with [`Sender::handle_input`] (pauses,
//!    resumes; new flows with [`Sender::add_flow`]);
//! 2. calls [`Sender::poll_transmit`] with `now` and sends each datagram,
//!    until it returns `None`;
//! 3. drains [`Sender::poll_event`], answering every
//!    [`Event::NeedChunk`] at once with the same `now`;
//! 4. goes back to 2 until a round of 2 and 3 yields nothing (a datagram
//!    or a flow's wake-up may raise events, and an answer may make
//!    datagrams due);
//! 5. sleeps until [`Sender::poll_timeout`] or until an input arrives.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::Error;
use super::datagram::DatagramWriter;
use super::looping::LoopStamper;
use super::packet::PACKET_LEN;
use super::schedule::{DATAGRAM_LEN, Departure, Schedule, ScheduleConfig};
use crate::slots::{SlotId, Slots};
use crate::units::Nanos;

/// How long a flow whose driver had no data waits before asking again.
pub const RETRY: Nanos = Nanos::from_millis(2);

/// Names a flow of a [`Sender`]. Ids of removed flows are never reused
/// (the slot index is, under a new generation), so a stale id is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(SlotId);

impl FlowId {
    /// A small dense index (the slot the flow occupies), for drivers that
    /// keep per-flow state in a `Vec`. A removed flow's index is reused by
    /// a later flow.
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// Everything a flow needs to join a [`Sender`].
#[derive(Debug, Clone)]
pub struct FlowSpec {
    schedule: ScheduleConfig,
    writer: DatagramWriter,
    start: Nanos,
}

impl FlowSpec {
    /// A flow paced by `schedule`, whose datagrams `writer` wraps (its SSRC,
    /// first sequence number and timestamp offset drawn by the driver).
    pub fn new(schedule: ScheduleConfig, writer: DatagramWriter) -> FlowSpec {
        FlowSpec {
            schedule,
            writer,
            start: Nanos::ZERO,
        }
    }

    /// The file's time zero (its first datagram) is `at` on the sender's
    /// timeline.
    pub fn start(mut self, at: Nanos) -> FlowSpec {
        self.start = at;
        self
    }
}

/// What a driver tells the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The next chunk of the flow's file (answers [`Event::NeedChunk`]):
    /// whole datagrams of TS in `data[..len]`; its buffer comes back with
    /// [`Event::ChunkSent`].
    Chunk {
        /// The flow.
        flow: FlowId,
        /// The buffer.
        data: Vec<u8>,
        /// Bytes of TS in it.
        len: usize,
        /// The last chunk of a pass: the file starts over after it.
        end_of_pass: bool,
    },
    /// The file ended: the flow finishes once its last datagram is out.
    End {
        /// The flow.
        flow: FlowId,
    },
    /// Reading failed: the flow sends what it has timed and finishes.
    Failed {
        /// The flow.
        flow: FlowId,
    },
    /// No chunk is ready: ask again [`RETRY`] later.
    Dry {
        /// The flow.
        flow: FlowId,
    },
    /// Hold the flow where it is.
    Pause {
        /// The flow.
        flow: FlowId,
    },
    /// Go on after a pause: the flow's timeline moves on by the pause, so
    /// its next datagram leaves at `at` (a due one at once on resuming
    /// with `at` = now).
    Resume {
        /// The flow.
        flow: FlowId,
        /// When the next datagram leaves.
        at: Nanos,
    },
}

/// What the sender tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The flow needs its next chunk; answer at once with
    /// [`Input::Chunk`], [`Input::End`], [`Input::Failed`] or
    /// [`Input::Dry`].
    NeedChunk {
        /// The flow.
        flow: FlowId,
    },
    /// The flow's driver had no data when it was needed (once per dry
    /// spell, however often it is asked again).
    Underrun {
        /// The flow.
        flow: FlowId,
    },
    /// Every datagram of a chunk has left: its buffer is free.
    ChunkSent {
        /// The flow.
        flow: FlowId,
        /// The chunk's buffer.
        data: Vec<u8>,
    },
    /// A datagram that could not be written (not whole TS packets): it is
    /// skipped.
    Refused {
        /// The flow.
        flow: FlowId,
        /// Why.
        error: Error,
    },
    /// The flow's file ended (or failed) and all of it has left; the
    /// sender no longer holds the flow.
    Finished {
        /// The flow.
        flow: FlowId,
    },
}

/// One datagram to leave now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<'a> {
    /// The flow.
    pub flow: FlowId,
    /// Its departure on the file's timeline (datagram of the pass, offset,
    /// 90 kHz time).
    pub departure: Departure,
    /// When it was due on the sender's timeline.
    pub due: Nanos,
    /// How far behind `due` it leaves.
    pub late: Nanos,
    /// The datagram (RTP header and TS packets, or the packets alone).
    pub datagram: &'a [u8],
}

/// Counters of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Datagrams written.
    pub datagrams: u64,
    /// Dry spells.
    pub underruns: u64,
    /// Passes of the file begun after the first.
    pub loops: u64,
}

/// A chunk being sent, and which pass of the file it belongs to.
#[derive(Debug)]
struct Queued {
    data: Vec<u8>,
    len: usize,
    pass: u64,
    /// Datagrams of it already sent.
    sent: usize,
}

impl Queued {
    fn datagrams(&self) -> usize {
        self.len.div_ceil(DATAGRAM_LEN)
    }
}

#[derive(Debug)]
struct Flow {
    schedule: Schedule,
    writer: DatagramWriter,
    stamper: LoopStamper,
    queue: VecDeque<Queued>,
    /// Pass of the file being fed to the schedule.
    fed_pass: u64,
    /// The next departure, once the schedule knows it.
    next: Option<Departure>,
    /// Where the file's time zero lies on the sender's timeline.
    origin: Nanos,
    /// The driver said the file ended (or failed).
    ended: bool,
    /// A [`Event::NeedChunk`] is unanswered.
    asking: bool,
    /// The driver had no data and has not delivered since.
    starving: bool,
    paused_at: Option<Nanos>,
    /// Bumped by each heap entry made for the flow (and by a pause), so
    /// only the newest is live.
    wake: u32,
    out: Vec<u8>,
    stats: FlowStats,
}

/// A datagram written (or refused), and the buffer of the chunk it ended.
struct Written {
    len: Result<usize, Error>,
    free: Option<Vec<u8>>,
}

/// What advancing a flow came to.
enum Step {
    /// A datagram of `len` bytes is written; it was due at `due`.
    Send {
        departure: Departure,
        due: Nanos,
        len: usize,
    },
    /// Nothing more now (it waits for its time, or for data).
    Wait,
    /// All of the flow has left.
    Finished,
}

impl Flow {
    fn new(spec: FlowSpec) -> Flow {
        Flow {
            schedule: Schedule::new(spec.schedule),
            out: vec![0; spec.writer.max_len()],
            writer: spec.writer,
            stamper: LoopStamper::new(),
            queue: VecDeque::new(),
            fed_pass: 0,
            next: None,
            origin: spec.start,
            ended: false,
            asking: false,
            starving: false,
            paused_at: None,
            wake: 0,
            stats: FlowStats::default(),
        }
    }

    /// Hands a chunk's packets to the schedule and queues it for sending;
    /// an empty chunk's buffer is free at once and comes back.
    fn feed(&mut self, data: Vec<u8>, len: usize, end_of_pass: bool) -> Option<Vec<u8>> {
        self.starving = false;
        for p in data[..len].chunks(PACKET_LEN) {
            self.schedule.feed(p);
        }
        let free = if len == 0 {
            Some(data)
        } else {
            self.queue.push_back(Queued {
                data,
                len,
                pass: self.fed_pass,
                sent: 0,
            });
            None
        };
        if end_of_pass {
            // More passes follow (the driver says End otherwise).
            self.schedule.restart();
            self.fed_pass += 1;
        }
        free
    }

    /// Makes `at` the flow's one live wake-up: the heap entry to push, none
    /// while it is paused.
    fn arm(&mut self, id: FlowId, at: Nanos) -> Option<Wake> {
        self.wake = self.wake.wrapping_add(1);
        self.paused_at
            .is_none()
            .then_some(Reverse((at, id, self.wake)))
    }

    /// Restamps and writes the next datagram of the front chunk into
    /// `out`; returns the finished chunk's buffer with the result.
    fn write(&mut self, d: &Departure) -> Option<Written> {
        let q = self.queue.front_mut()?;
        if q.pass > self.stamper.loops() {
            self.stamper.next_pass();
            self.stats.loops = self.stamper.loops();
        }
        let from = q.sent * DATAGRAM_LEN;
        let to = (from + DATAGRAM_LEN).min(q.len);
        let packets = &mut q.data[from..to];
        // Every pass goes through the stamper: the first goes out
        // unchanged, but the stamper must see its counters for the second
        // to continue them.
        for p in packets.chunks_mut(PACKET_LEN) {
            // A packet that does not parse goes out as it is.
            let _ = self.stamper.stamp(p);
        }
        q.sent += 1;
        let written = self.writer.write(d, packets, &mut self.out);
        let done = q.sent >= q.datagrams();
        let free = if done {
            self.queue.pop_front().map(|q| q.data)
        } else {
            None
        };
        Some(Written { len: written, free })
    }
}

/// A heap entry: (time, flow, wake).
type Wake = Reverse<(Nanos, FlowId, u32)>;

/// The send schedule of any number of TS flows (see the module docs).
#[derive(Debug, Default)]
pub struct Sender {
    flows: Slots<Flow>,
    /// Next wake-up of every flow.
    heap: BinaryHeap<Wake>,
    events: VecDeque<Event>,
    /// How early a datagram may leave with others (see
    /// [`Sender::set_batch_window`]).
    window: Nanos,
}

impl Sender {
    /// A sender with no flows.
    pub fn new() -> Sender {
        Sender::default()
    }

    /// Lets a datagram due within `window` after `now` leave with those
    /// due by `now`. A driver of many flows then wakes at most once per
    /// `window`, not once per datagram (at 6 Mbit/s, 100 flows of
    /// 1316-byte datagrams are 57,000 deadlines a second), and no
    /// datagram leaves more than `window` before it is due. Zero (the
    /// default) sends every datagram at or after its due time.
    pub fn set_batch_window(&mut self, window: Nanos) {
        self.window = window;
    }

    /// Adds a flow; its first datagram is due at its start.
    pub fn add_flow(&mut self, spec: FlowSpec) -> FlowId {
        let at = spec.start;
        let id = FlowId(self.flows.insert(Flow::new(spec)));
        self.wake(id, at);
        id
    }

    /// Removes a flow, returning its final counters. Its chunks are
    /// dropped; events already queued for it stay queued.
    pub fn remove_flow(&mut self, id: FlowId) -> Option<FlowStats> {
        // A new generation makes the flow's heap entry stale.
        Some(self.flows.remove(id.0)?.stats)
    }

    /// The flow's counters.
    pub fn flow_stats(&self, id: FlowId) -> Option<FlowStats> {
        Some(self.flow(id)?.stats)
    }

    /// Flows held (playing or paused).
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    fn flow(&self, id: FlowId) -> Option<&Flow> {
        self.flows.get(id.0)
    }

    fn flow_mut(&mut self, id: FlowId) -> Option<&mut Flow> {
        self.flows.get_mut(id.0)
    }

    /// Makes `at` the flow's one live wake-up (none while it is paused).
    fn wake(&mut self, id: FlowId, at: Nanos) {
        if let Some(entry) = self.flow_mut(id).and_then(|f| f.arm(id, at)) {
            self.heap.push(entry);
        }
    }

    /// Takes in what the driver did or learnt (see [`Input`]).
    pub fn handle_input(&mut self, now: Nanos, input: Input) -> Result<(), Error> {
        match input {
            Input::Chunk {
                flow,
                data,
                len,
                end_of_pass,
            } => {
                let f = self.flow_mut(flow).ok_or(Error::NoSuchFlow)?;
                if len > data.len() {
                    return Err(Error::ChunkLength {
                        len,
                        buffer: data.len(),
                    });
                }
                if let Some(data) = f.feed(data, len, end_of_pass) {
                    self.events.push_back(Event::ChunkSent { flow, data });
                }
                self.answered(flow, now)
            }
            Input::End { flow } => {
                let f = self.flow_mut(flow).ok_or(Error::NoSuchFlow)?;
                f.schedule.finish();
                f.ended = true;
                self.answered(flow, now)
            }
            Input::Failed { flow } => {
                // What the schedule has timed still leaves.
                self.flow_mut(flow).ok_or(Error::NoSuchFlow)?.ended = true;
                self.answered(flow, now)
            }
            Input::Dry { flow } => self.dry(flow, now),
            Input::Pause { flow } => {
                let f = self.flow_mut(flow).ok_or(Error::NoSuchFlow)?;
                if f.paused_at.is_none() {
                    f.paused_at = Some(now);
                    f.wake = f.wake.wrapping_add(1);
                }
                Ok(())
            }
            Input::Resume { flow, at } => self.resume(flow, at),
        }
    }

    /// The flow's question is answered: it goes on at `now`.
    fn answered(&mut self, id: FlowId, now: Nanos) -> Result<(), Error> {
        let f = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
        f.asking = false;
        self.wake(id, now);
        Ok(())
    }

    /// The driver had nothing: one underrun per dry spell, ask again
    /// later.
    fn dry(&mut self, id: FlowId, now: Nanos) -> Result<(), Error> {
        let f = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
        f.asking = false;
        if !f.starving {
            f.starving = true;
            f.stats.underruns += 1;
            self.events.push_back(Event::Underrun { flow: id });
        }
        self.wake(id, now + RETRY);
        Ok(())
    }

    fn resume(&mut self, id: FlowId, at: Nanos) -> Result<(), Error> {
        let f = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
        let Some(paused) = f.paused_at.take() else {
            return Ok(());
        };
        // The pause is taken out of the timeline from the datagram that
        // was due (or the moment of pausing, if none was known), so that
        // one leaves at `at`.
        let due = f.next.map_or(paused, |d| f.origin + d.at);
        f.origin += at.saturating_sub(due.min(at));
        self.wake(id, at);
        Ok(())
    }

    /// Drops stale heap entries, then names the earliest live one.
    fn peek_live(&mut self) -> Option<(Nanos, FlowId)> {
        while let Some(&Reverse((at, id, wake))) = self.heap.peek() {
            if self
                .flow(id)
                .is_some_and(|f| f.wake == wake && f.paused_at.is_none())
            {
                return Some((at, id));
            }
            self.heap.pop();
        }
        None
    }

    /// The next datagram due at `now`, earliest first.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit<'_>> {
        let until = now + self.window;
        loop {
            let (at, id) = self.peek_live()?;
            if at > until {
                return None;
            }
            self.heap.pop();
            match self.advance(id, until) {
                Step::Send {
                    departure,
                    due,
                    len,
                } => {
                    let f = self.flow(id)?;
                    return Some(Transmit {
                        flow: id,
                        departure,
                        due,
                        late: now.saturating_sub(due),
                        datagram: &f.out[..len],
                    });
                }
                Step::Wait => {}
                Step::Finished => {
                    self.remove_flow(id);
                    self.events.push_back(Event::Finished { flow: id });
                }
            }
        }
    }

    /// Writes the flow's datagram due by `until` (now plus the batch
    /// window), or sets its next wake-up (or asks for data).
    fn advance(&mut self, id: FlowId, until: Nanos) -> Step {
        let Some(f) = self.flows.get_mut(id.0) else {
            return Step::Wait;
        };
        loop {
            if f.next.is_none() {
                f.next = f.schedule.take_departure();
            }
            let Some(d) = f.next else {
                if f.ended {
                    return Step::Finished;
                }
                if !f.asking {
                    f.asking = true;
                    self.events.push_back(Event::NeedChunk { flow: id });
                }
                return Step::Wait;
            };
            let due = f.origin + d.at;
            if due > until {
                self.heap.extend(f.arm(id, due));
                return Step::Wait;
            }
            f.next = None;
            let Some(written) = f.write(&d) else {
                continue;
            };
            if let Some(data) = written.free {
                self.events.push_back(Event::ChunkSent { flow: id, data });
            }
            match written.len {
                Ok(len) => {
                    f.stats.datagrams += 1;
                    // Come back for the next one once this has left.
                    self.heap.extend(f.arm(id, due));
                    return Step::Send {
                        departure: d,
                        due,
                        len,
                    };
                }
                Err(error) => self.events.push_back(Event::Refused { flow: id, error }),
            }
        }
    }

    /// The next event, in the order they happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the next datagram is due or a dry flow asks again (`None`
    /// while every flow is paused or waits for an answer).
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.peek_live().map(|(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;
    use crate::mpegts::{ContinuityChecker, Encapsulation, Packet, Pcr, synth};
    use crate::rtp::RtpPacket;
    use crate::units::{BitRate, Ssrc};

    /// 1316 bytes are 10 528 bits: one datagram a millisecond, exactly.
    const RATE: u64 = 10_528_000;
    const START: u64 = 10;
    const FIRST_SEQ: u16 = 65530;
    const TS_OFFSET: u32 = 1000;

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    /// 70 packets (10 datagrams) with a PCR in the first packet of every
    /// datagram but the first, so every datagram's time is a whole
    /// millisecond and is known once the next datagram's packets are read.
    fn file() -> Vec<u8> {
        let mut ts = synth::stream(70, RATE, 0, 0);
        for d in 1..10u64 {
            let i = 7 * d as usize;
            let cc = (i - 2) as u8;
            let p = synth::packet(0x100, cc, Some(Pcr(27_000 * d)), false, i as u8);
            ts[i * PACKET_LEN..(i + 1) * PACKET_LEN].copy_from_slice(&p);
        }
        ts
    }

    /// A driver's read-ahead ring on virtual time: the file in chunks of
    /// 4 datagrams for `passes` passes, empty during the `dry` windows.
    struct Ring {
        file: Vec<u8>,
        passes: u64,
        pass: u64,
        pos: usize,
        dry: Vec<Range<Nanos>>,
    }

    impl Ring {
        fn take(&mut self, flow: FlowId, now: Nanos) -> Input {
            if self.dry.iter().any(|w| w.contains(&now)) {
                return Input::Dry { flow };
            }
            if self.pass == self.passes {
                return Input::End { flow };
            }
            let to = (self.pos + 4 * DATAGRAM_LEN).min(self.file.len());
            let data = self.file[self.pos..to].to_vec();
            self.pos = to;
            let end_of_pass = to == self.file.len();
            if end_of_pass {
                self.pos = 0;
                self.pass += 1;
            }
            // The reader says End rather than ending the last pass.
            let end_of_pass = end_of_pass && self.pass < self.passes;
            let len = data.len();
            Input::Chunk {
                flow,
                data,
                len,
                end_of_pass,
            }
        }
    }

    /// One datagram as it left.
    #[derive(Debug)]
    struct Sent {
        now: Nanos,
        late: Nanos,
        datagram: Vec<u8>,
    }

    impl Sent {
        fn rtp(&self) -> RtpPacket<&[u8]> {
            RtpPacket::new_checked(&self.datagram[..]).unwrap()
        }

        fn packet(&self, k: usize) -> Packet<&[u8]> {
            let payload = &self.datagram[12..];
            Packet::new_checked(&payload[k * PACKET_LEN..(k + 1) * PACKET_LEN]).unwrap()
        }
    }

    /// A flow started at 10 ms, run on virtual time as the module docs'
    /// polling order says.
    struct Sim {
        s: Sender,
        flow: FlowId,
        ring: Ring,
        now: Nanos,
        sent: Vec<Sent>,
        asks: usize,
        underruns: usize,
        chunks_back: usize,
        finished: bool,
    }

    impl Sim {
        fn new(passes: u64, dry: Vec<Range<Nanos>>) -> Sim {
            let writer = DatagramWriter::new(Encapsulation::Rtp, Ssrc(7), FIRST_SEQ, TS_OFFSET);
            let spec = FlowSpec::new(ScheduleConfig::new(BitRate(RATE)), writer).start(ms(START));
            let mut s = Sender::new();
            let flow = s.add_flow(spec);
            let ring = Ring {
                file: file(),
                passes,
                pass: 0,
                pos: 0,
                dry,
            };
            Sim {
                s,
                flow,
                ring,
                now: Nanos::ZERO,
                sent: Vec::new(),
                asks: 0,
                underruns: 0,
                chunks_back: 0,
                finished: false,
            }
        }

        /// Everything due at `now`.
        fn step(&mut self) {
            loop {
                let mut busy = false;
                while let Some(t) = self.s.poll_transmit(self.now) {
                    busy = true;
                    assert_eq!(t.due + t.late, self.now);
                    self.sent.push(Sent {
                        now: self.now,
                        late: t.late,
                        datagram: t.datagram.to_vec(),
                    });
                }
                while let Some(e) = self.s.poll_event() {
                    busy = true;
                    self.event(e);
                }
                if !busy {
                    return;
                }
            }
        }

        fn event(&mut self, e: Event) {
            match e {
                Event::NeedChunk { flow } => {
                    self.asks += 1;
                    let input = self.ring.take(flow, self.now);
                    self.s.handle_input(self.now, input).unwrap();
                }
                Event::Underrun { .. } => self.underruns += 1,
                Event::ChunkSent { .. } => self.chunks_back += 1,
                Event::Refused { error, .. } => panic!("{error}"),
                Event::Finished { flow } => {
                    assert_eq!(flow, self.flow);
                    self.finished = true;
                }
            }
        }

        /// Runs to `until`, jumping from deadline to deadline.
        fn run(&mut self, until: Nanos) {
            self.step();
            while let Some(at) = self.s.poll_timeout().filter(|at| *at <= until) {
                self.now = self.now.max(at);
                self.step();
            }
            self.now = until;
        }

        fn times(&self) -> Vec<Nanos> {
            self.sent.iter().map(|d| d.now).collect()
        }
    }

    #[test]
    fn a_batch_window_sends_what_falls_due_within_it_early_and_none_late() {
        let mut sim = Sim::new(1, Vec::new());
        sim.s.set_batch_window(Nanos::from_micros(1_500));
        sim.now = ms(START);
        let mut sent = Vec::new();
        loop {
            let mut busy = false;
            while let Some(t) = sim.s.poll_transmit(sim.now) {
                busy = true;
                sent.push((t.due, t.late));
            }
            while let Some(e) = sim.s.poll_event() {
                busy = true;
                sim.event(e);
            }
            if !busy {
                break;
            }
        }
        // Due at 10 and 11 ms, both within 10 + 1.5 ms: one wake-up sends
        // both, the second 1 ms early; the one due at 12 ms waits.
        assert_eq!(sent, [(ms(10), Nanos::ZERO), (ms(11), Nanos::ZERO)]);
        assert_eq!(sim.s.poll_timeout(), Some(ms(12)));
        // Without a window, the same wake-up sends only what is due.
        let mut plain = Sim::new(1, Vec::new());
        plain.now = ms(START);
        plain.step();
        assert_eq!(plain.times(), [ms(10)]);
    }

    #[test]
    fn a_looped_file_is_one_stream_to_the_packet() {
        let mut sim = Sim::new(3, Vec::new());
        sim.run(ms(1000));
        // Thirty datagrams a millisecond apart: the loops add no gap.
        let want: Vec<Nanos> = (0..30).map(|k| ms(START + k)).collect();
        assert_eq!(sim.times(), want);
        for (k, d) in sim.sent.iter().enumerate() {
            assert_eq!(d.late, Nanos::ZERO);
            let rtp = d.rtp();
            assert_eq!(rtp.sequence_number(), FIRST_SEQ.wrapping_add(k as u16));
            // 90 kHz: 90 ticks a datagram, from the random offset.
            assert_eq!(rtp.timestamp(), TS_OFFSET + 90 * k as u32);
            assert_eq!(rtp.ssrc(), 7);
        }
        // Pass 2 continues every PID's counter: its PAT (packet 0) after
        // the PAT's 0, its first PES packet after the 68th's 67 % 16.
        let pass2 = &sim.sent[10];
        assert_eq!(pass2.packet(0).continuity_counter(), 1);
        assert_eq!(pass2.packet(2).continuity_counter(), 4);
        assert_eq!(sim.sent[20].packet(0).continuity_counter(), 2);
        // Only the first PCR of passes 2 and 3 announces a new time base.
        let flagged: Vec<(usize, usize)> = (0..30)
            .flat_map(|d| (0..7).map(move |k| (d, k)))
            .filter(|&(d, k)| sim.sent[d].packet(k).discontinuity())
            .collect();
        assert_eq!(flagged, [(11, 0), (21, 0)]);
        let mut checker = ContinuityChecker::new();
        for d in &sim.sent {
            for k in 0..7 {
                checker.check(&d.packet(k));
            }
        }
        assert_eq!(checker.counters().errors, 0);
        // Three chunks a pass, each asked for and given back; then End.
        assert_eq!((sim.asks, sim.chunks_back), (10, 9));
        assert!(sim.finished);
        assert_eq!(sim.s.flows(), 0);
        assert_eq!(sim.s.poll_timeout(), None);
    }

    #[test]
    fn a_pause_moves_the_timeline_on_and_numbers_go_on() {
        let mut sim = Sim::new(1, Vec::new());
        sim.run(Nanos::from_micros(13_500));
        assert_eq!(sim.sent.len(), 4);
        let flow = sim.flow;
        sim.s.handle_input(sim.now, Input::Pause { flow }).unwrap();
        assert_eq!(sim.s.poll_timeout(), None);
        sim.run(ms(50));
        assert_eq!(sim.sent.len(), 4, "nothing leaves while paused");
        sim.s
            .handle_input(ms(50), Input::Resume { flow, at: ms(60) })
            .unwrap();
        // Resuming twice changes nothing.
        sim.s
            .handle_input(ms(50), Input::Resume { flow, at: ms(70) })
            .unwrap();
        sim.run(ms(1000));
        let want: Vec<Nanos> = [10, 11, 12, 13, 60, 61, 62, 63, 64, 65]
            .into_iter()
            .map(ms)
            .collect();
        assert_eq!(sim.times(), want);
        for (k, d) in sim.sent.iter().enumerate() {
            assert_eq!(d.late, Nanos::ZERO);
            assert_eq!(d.rtp().sequence_number(), FIRST_SEQ.wrapping_add(k as u16));
            // Media time is the file's: the pause is no gap in it.
            assert_eq!(d.rtp().timestamp(), TS_OFFSET + 90 * k as u32);
        }
        assert_eq!(sim.s.flow_stats(flow), None, "finished");
        assert!(sim.finished);
    }

    #[test]
    fn a_dry_ring_is_one_underrun_per_spell_and_keeps_the_timeline() {
        // Chunk 1 (datagrams 3 to 6, whose PCRs time datagrams 2 to 5) is
        // asked for at 12 ms, once datagram 2 left; the ring is dry until
        // 15.5 ms. Pass 2's chunk 1 is asked for at 22 ms, dry until 23 ms.
        // Retries come every 2 ms.
        let dry = vec![ms(12)..Nanos::from_micros(15_500), ms(22)..ms(23)];
        let mut sim = Sim::new(2, dry);
        sim.run(ms(1000));
        let at: Vec<u64> = sim
            .times()
            .iter()
            .map(|t| t.as_nanos() / 1_000_000)
            .collect();
        let late: Vec<u64> = sim
            .sent
            .iter()
            .map(|d| d.late.as_nanos() / 1_000_000)
            .collect();
        // Dry at 12 and 14 ms, 16 ms delivers: datagrams 3 to 5 (due 13
        // to 15 ms) leave at once, late; dry at 22 ms, 24 ms delivers.
        let want_at = [
            10, 11, 12, 16, 16, 16, 16, 17, 18, 19, 20, 21, 22, 24, 24, 25, 26, 27, 28, 29,
        ];
        assert_eq!(at, want_at);
        let mut want_late = [0; 20];
        want_late[3..6].copy_from_slice(&[3, 2, 1]);
        want_late[13] = 1;
        assert_eq!(late, want_late);
        for (k, d) in sim.sent.iter().enumerate() {
            assert_eq!(d.rtp().sequence_number(), FIRST_SEQ.wrapping_add(k as u16));
            assert_eq!(d.rtp().timestamp(), TS_OFFSET + 90 * k as u32);
        }
        assert_eq!(sim.underruns, 2);
        // 3 chunks a pass, End, and the 2 + 1 asks in vain.
        assert_eq!(sim.asks, 3 * 2 + 1 + 3);
        assert!(sim.finished);
    }

    #[test]
    fn stale_ids_and_bad_chunks_are_refused() {
        let mut sim = Sim::new(1, Vec::new());
        let flow = sim.flow;
        let bad = Input::Chunk {
            flow,
            data: vec![0; 10],
            len: 11,
            end_of_pass: false,
        };
        assert_eq!(
            sim.s.handle_input(Nanos::ZERO, bad),
            Err(Error::ChunkLength {
                len: 11,
                buffer: 10
            })
        );
        assert!(sim.s.remove_flow(flow).is_some());
        assert_eq!(
            sim.s.handle_input(Nanos::ZERO, Input::Dry { flow }),
            Err(Error::NoSuchFlow)
        );
        assert_eq!(sim.s.poll_timeout(), None);
    }
}
