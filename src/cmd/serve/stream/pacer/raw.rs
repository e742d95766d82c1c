//! Raw video flows of one pacing thread: one nagare-proto
//! `video::Sender` schedules all of them; this driver answers its frame
//! requests from each flow's ring and gathers each train's headers, frame
//! slices and padding into one send per destination.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use nagare_api::serve::StreamState;
use nagare_proto::rtcp::{Anchor, WallTime};
use nagare_proto::serve::describe;
use nagare_proto::video::sender::{
    Event, FlowId, FlowSpec, Input, RingFrame, Sender, Transmit, locked_seq_base,
};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::{ExtSeq, FrameRate, Nanos, Ssrc};
use tracing::warn;

use super::start::READER_DROPPED;
use super::{Leg, Start};
use crate::clock::{EpochStart, Origin};
use crate::cmd::serve::hub::media::Kind;
use crate::cmd::serve::hub::table::{Counters, StreamId};
use crate::cmd::serve::stream::output::Sent;
use crate::cmd::serve::stream::reader::{Chunk, Delivery};
use crate::cmd::serve::stream::rtcp::{Farewells, FlowRtcp};
use crate::net::train::{TrainBuf, TrainIo};
use crate::net::udp;

/// One raw flow's driver state.
struct RawFlow {
    start: Start,
    rate: FrameRate,
    packetizer: Packetizer,
    /// Frames in hand, by epoch frame number.
    held: VecDeque<(u64, Chunk)>,
    /// The frame the schedule asked for.
    pending: Option<u64>,
    /// The request is new: not yet tried against the ring.
    fresh: bool,
    /// A frame has been taken from the ring (its first one primes it).
    fed: bool,
    train: TrainBuf,
    /// A chunk taken ahead of its frame (epoch-aligned flows).
    ahead: Option<Chunk>,
    /// Stripe buffers to split frames into (one-stripe legs).
    spare: Vec<Vec<u8>>,
    /// Its sender reports and BYE (RTSP sessions only).
    rtcp: Option<FlowRtcp>,
}

impl RawFlow {
    /// The chunk for epoch frame `frame`: an epoch-aligned flow drops
    /// chunks of frames already given up and keeps one that comes early.
    fn take(&mut self, frame: u64) -> Option<Delivery> {
        let aligned = self.start.leg.is_some();
        loop {
            let d = match self.ahead.take() {
                Some(c) => Delivery::Chunk(c),
                None => self.start.ring.take()?,
            };
            let place = match &d {
                Delivery::Chunk(c) if aligned => RingFrame::of(c.number, frame),
                _ => RingFrame::Due,
            };
            match (d, place) {
                (Delivery::Chunk(c), RingFrame::Behind) => self.start.ring.give_back(c.data),
                (Delivery::Chunk(c), RingFrame::Ahead) => {
                    self.ahead = Some(c);
                    return None;
                }
                (Delivery::Chunk(c), RingFrame::Due) => {
                    return Some(Delivery::Chunk(self.cut(c)));
                }
                (other, _) => return Some(other),
            }
        }
    }

    /// A one-stripe leg's stripe of the frame in `c` (the frame buffer goes
    /// back to the reader at once); other flows keep the frame.
    fn cut(&mut self, c: Chunk) -> Chunk {
        let Some((stripes, k)) = self.start.leg.and_then(|l| l.stripe) else {
            return c;
        };
        let bytes = stripes.stripe_format().frame_bytes();
        let mut out = self.spare.pop().unwrap_or_default();
        out.resize(bytes, 0);
        if stripes.split(&c.data[..c.len], k, &mut out).is_err() {
            out.fill(0);
        }
        self.start.ring.give_back(c.data);
        Chunk {
            data: out,
            len: bytes,
            end_of_pass: c.end_of_pass,
            number: c.number,
        }
    }

    /// Hands a sent chunk's buffer back where it came from.
    fn release(&mut self, c: Chunk) {
        if self.start.leg.is_some_and(|l| l.stripe.is_some()) {
            self.spare.push(c.data);
        } else {
            self.start.ring.give_back(c.data);
        }
    }
}

/// Every raw flow of one pacing thread.
#[derive(Default)]
pub(crate) struct RawFlows {
    sender: Sender,
    flows: HashMap<FlowId, RawFlow>,
    ids: HashMap<StreamId, FlowId>,
    io: TrainIoCell,
    /// Datagrams handed to the kernel since the load meter last took them.
    sent: u64,
    /// Ended flows whose BYE is yet to go.
    farewells: Farewells,
    /// A running flow's ring was found empty since the last look.
    dry: bool,
}

/// Scratch for trains, made on the pacing thread (it holds raw pointers,
/// so it is not `Send`, and is never moved across threads).
#[derive(Default)]
struct TrainIoCell(Option<TrainIo>);

impl RawFlows {
    /// Adds a flow whose first frame leaves `lead` from now, on the epoch
    /// grid.
    pub(crate) fn start(&mut self, start: Start, origin: &Origin, lead: Duration) {
        let (mut format, rate) = match &start.media.kind {
            Kind::Raw { format, rate, .. } | Kind::Pattern { format, rate } => (*format, *rate),
            Kind::Ts { .. } => return,
        };
        if let Some((stripes, _)) = start.leg.and_then(|l| l.stripe) {
            format = stripes.stripe_format();
        }
        let ssrc = Ssrc(
            start
                .leg
                .and_then(|l| l.ssrc)
                .or(start.ssrc)
                .unwrap_or_else(|| getrandom::u32().unwrap_or(0x6e61_6761)),
        );
        let packetizer = match Packetizer::new(format, start.pacing.packet_size, ssrc) {
            Ok(p) => p,
            Err(e) => {
                let size = start.pacing.packet_size;
                start.counters.fail(format!("packet_size {size}: {e}"));
                return;
            }
        };
        let packetizer = packetizer.uniform();
        let rtcp = FlowRtcp::for_outputs(&start.outputs, ssrc);
        let flow = RawFlow {
            start,
            rate,
            packetizer,
            held: VecDeque::new(),
            pending: None,
            fresh: false,
            fed: false,
            train: TrainBuf::default(),
            ahead: None,
            spare: Vec::new(),
            rtcp,
        };
        let at = match flow.start.leg {
            Some(l) => origin.frame_start(rate, l.first_frame),
            None => origin.epoch_start(rate, lead),
        };
        self.schedule(flow, at);
    }

    /// Puts `flow` on the schedule from epoch frame `at`.
    fn schedule(&mut self, mut flow: RawFlow, at: EpochStart) {
        let gso = flow.start.outputs.iter().all(|o| o.gso());
        let cap = udp::train_cap(gso, flow.start.pacing.packet_size);
        let first_seq = u64::from(getrandom::u32().unwrap_or(0));
        let mut spec = FlowSpec::video(flow.rate, flow.packetizer.clone())
            .start(at.at, at.first_frame)
            .first_seq(ExtSeq(first_seq))
            .trains(Nanos::from_micros(flow.start.pacing.burst_us), cap);
        // The 2110-21 type its SDPs declare (describe::SENDER_TYPE).
        let packets = flow.packetizer.packets_per_frame();
        if let Some(shape) = describe::raw_schedule(
            flow.packetizer.format(),
            flow.rate,
            (packets, flow.start.pacing.packet_size),
        ) {
            spec = spec.shaped(shape);
        }
        // A stream sends the frame in hand on a later slot after a stall
        // of a frame period; a cluster leg's frame belongs to its slot, so
        // it catches up instead.
        spec = leg_spec(spec, flow.start.leg).slip_late_frames(flow.start.leg.is_none());
        let id = self.sender.add_flow(spec);
        flow.train = TrainBuf::for_flow(&self.sender, id);
        flow.start.counters.set_state(StreamState::Playing);
        self.ids.insert(flow.start.id, id);
        self.flows.insert(id, flow);
    }

    /// Answers frame requests, sends every train due at `now`.
    pub(crate) fn step(&mut self, now: Nanos, origin: &Origin) {
        self.farewells.step(now);
        loop {
            self.events();
            self.answer(now);
            if let Some(t) = self.sender.poll_transmit(now) {
                self.transmit(&t, now);
                // A shaped flow's Cinst bucket counts the train from when
                // its sends returned (video::Sender's Input::Departed); a
                // flow that ended in `transmit` has nothing left to count.
                let _ = self
                    .sender
                    .handle_input(origin.elapsed(), Input::Departed { flow: t.flow });
                continue;
            }
            // Slots given up at their deadline ask for the next frames.
            if !self.events() {
                return;
            }
        }
    }

    /// Whether a running flow's ring was found empty when the schedule
    /// asked for its next frame, since the last call: the read-ahead
    /// thread is a whole frame behind, the last warning before an
    /// underrun.
    pub(crate) fn take_dry(&mut self) -> bool {
        std::mem::take(&mut self.dry)
    }

    /// Datagrams sent since the last call.
    pub(crate) fn take_sent(&mut self) -> u64 {
        std::mem::take(&mut self.sent)
    }

    /// The earliest train, frame or BYE deadline.
    pub(crate) fn next_deadline(&mut self) -> Option<Nanos> {
        let bye = self.farewells.next_deadline();
        self.sender.poll_timeout().into_iter().chain(bye).min()
    }

    /// Takes the schedule's events; returns whether there were any.
    fn events(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.sender.poll_event() {
            any = true;
            match e {
                Event::NeedFrame { flow, frame, .. } => {
                    if let Some(f) = self.flows.get_mut(&flow) {
                        f.pending = Some(frame);
                        f.fresh = true;
                    }
                }
                Event::Underrun { flow, .. } => {
                    if let Some(f) = self.flows.get_mut(&flow) {
                        f.pending = None;
                        Counters::add(&f.start.counters.underruns, 1);
                    }
                }
                Event::Slipped { flow, first, count } => self.slipped(flow, first, count),
                Event::FrameSent { flow, frame } => self.free(flow, frame),
                Event::Dropped { flow, frame } => {
                    // Paused: the request is withdrawn, the frame let go.
                    if let Some(f) = self.flows.get_mut(&flow)
                        && f.pending == Some(frame)
                    {
                        f.pending = None;
                    }
                    self.free(flow, frame);
                }
                Event::Finished { .. } => {}
            }
        }
        any
    }

    /// The pacer of a stream (never a cluster leg's, see `schedule`)
    /// passed over `count` slots from `first` after a stall: the frame in
    /// hand goes on the slot asked for next, so none is lost.
    fn slipped(&mut self, flow: FlowId, first: u64, count: u64) {
        let Some(f) = self.flows.get_mut(&flow) else {
            return;
        };
        warn!(
            stream = f.start.id,
            first,
            count,
            "stream {}: fell a frame period behind; passed over {count} frame slot(s) from epoch frame {first} to be back on time",
            f.start.id
        );
        if let Some(h) = f.held.iter_mut().find(|h| h.0 == first) {
            h.0 = first + count;
        }
    }

    /// Hands the buffer of `flow`'s `frame` back, if it holds it.
    fn free(&mut self, flow: FlowId, frame: u64) {
        if let Some(f) = self.flows.get_mut(&flow)
            && let Some(pos) = f.held.iter().position(|h| h.0 == frame)
            && let Some((_, c)) = f.held.remove(pos)
        {
            f.release(c);
        }
    }

    /// Answers every pending frame request the ring can (the schedule
    /// gives up the slots of the others at their deadline).
    fn answer(&mut self, now: Nanos) {
        let mut ended = Vec::new();
        for (&id, f) in self.flows.iter_mut() {
            let Some(frame) = f.pending else {
                continue;
            };
            let fresh = std::mem::take(&mut f.fresh);
            // The frame in hand when the flow slipped goes on this slot.
            let kept = f.held.iter().any(|h| h.0 == frame);
            let taken = if kept { None } else { f.take(frame) };
            let input = match taken {
                None if kept => Input::Frame { flow: id },
                Some(Delivery::Chunk(c)) => {
                    f.fed = true;
                    f.held.push_back((frame, c));
                    Input::Frame { flow: id }
                }
                None => {
                    // An epoch-aligned flow's early chunk is no shortage.
                    self.dry |= fresh && f.fed && f.ahead.is_none();
                    continue;
                }
                Some(Delivery::End) => {
                    ended.push((id, StreamState::Finished));
                    continue;
                }
                Some(Delivery::Failed(e)) => {
                    warn!(stream = f.start.id, "stream {}: {e}", f.start.id);
                    f.start.counters.fail(e);
                    ended.push((id, StreamState::Failed));
                    continue;
                }
            };
            f.pending = None;
            let _ = self.sender.handle_input(now, input);
        }
        for (id, state) in ended {
            self.end(id, state, now);
        }
    }

    /// Sends one train to every destination of its flow.
    fn transmit(&mut self, t: &Transmit, now: Nanos) {
        let Some(f) = self.flows.get_mut(&t.flow) else {
            return;
        };
        let Some((_, frame)) = f.held.iter().find(|h| h.0 == t.frame) else {
            return;
        };
        let Ok(train) = f.train.gather(&self.sender, t, &frame.data) else {
            return;
        };
        let bytes = train.bytes;
        let io = self.io.0.get_or_insert_with(TrainIo::default);
        let c = &f.start.counters;
        let mut dropped = false;
        for out in &mut f.start.outputs {
            match out.train(&train, io) {
                Sent::Ok => {
                    Counters::add(&c.packets, t.len() as u64);
                    Counters::add(&c.bytes, bytes as u64);
                }
                Sent::Refused => Counters::add(&c.send_errors, t.len() as u64),
                Sent::ReaderDropped => {
                    Counters::add(&c.queue_drops, t.len() as u64);
                    dropped = true;
                }
            }
        }
        c.lateness(now.saturating_sub(t.at).as_nanos(), t.len() as u64);
        if let Some(r) = &mut f.rtcp {
            // Raw flows run on the epoch grid: frame n starts n periods
            // after the Unix epoch, and its timestamp is that instant's.
            let start = f.rate.frame_start_ns(t.frame);
            let anchor = Anchor {
                wall: WallTime(u64::try_from(start).unwrap_or(u64::MAX)),
                rtp: t.timestamp,
            };
            r.sent(now, t.len() as u64, bytes as u64, anchor, &f.start.outputs);
        }
        self.sent += (t.len() * f.start.outputs.len()) as u64;
        if dropped {
            c.fail(READER_DROPPED);
            self.end(t.flow, StreamState::Failed, now);
        }
    }

    /// Takes a flow off the schedule, handing its frames back.
    fn unschedule(&mut self, id: FlowId) -> Option<RawFlow> {
        self.sender.remove_flow(id);
        let mut f = self.flows.remove(&id)?;
        self.ids.remove(&f.start.id);
        let held: Vec<Chunk> = f.held.drain(..).map(|h| h.1).collect();
        for c in held {
            f.release(c);
        }
        f.pending = None;
        Some(f)
    }

    /// Ends a flow for good (played out, or failed): its readers get a
    /// BYE.
    fn end(&mut self, id: FlowId, state: StreamState, now: Nanos) {
        if let Some(mut f) = self.unschedule(id) {
            if let Some(r) = f.rtcp.take() {
                let outputs = std::mem::take(&mut f.start.outputs);
                self.farewells.push(now, r, outputs);
            }
            f.start.counters.set_state(state);
        }
    }

    /// Pauses a flow: the sender holds it (its frame is let go by
    /// `Event::Dropped`), keeping its place on the epoch grid and its
    /// sequence numbers.
    pub(crate) fn pause(&mut self, id: StreamId, now: Nanos) {
        if let Some(&flow) = self.ids.get(&id)
            && self.sender.handle_input(now, Input::Pause { flow }).is_ok()
            && let Some(f) = self.flows.get(&flow)
        {
            f.start.counters.set_state(StreamState::Paused);
        }
    }

    /// Resumes a paused flow with the first frame of its grid that starts
    /// at or after `at`.
    pub(crate) fn resume(&mut self, id: StreamId, at: Nanos) {
        if let Some(&flow) = self.ids.get(&id)
            && let Some(f) = self.flows.get(&flow)
            && f.start.counters.state() == StreamState::Paused
            && self
                .sender
                .handle_input(at, Input::Resume { flow, at })
                .is_ok()
        {
            f.start.counters.set_state(StreamState::Playing);
        }
    }

    /// Stops a flow at its session's request (TEARDOWN, a PLAY from the
    /// start again, the connection gone): no BYE, for the reader asked
    /// for it or is already gone, and a restarted stream goes on.
    pub(crate) fn stop(&mut self, id: StreamId, state: StreamState) {
        if let Some(f) = self.take(id) {
            f.start.counters.set_state(state);
        }
    }

    /// Stops every flow as the server stops (their connections close).
    pub(crate) fn stop_all(&mut self) {
        let ids: Vec<StreamId> = self.ids.keys().copied().collect();
        for id in ids {
            self.stop(id, StreamState::Finished);
        }
    }

    /// Takes a flow off the schedule, playing or paused.
    fn take(&mut self, id: StreamId) -> Option<RawFlow> {
        let fid = *self.ids.get(&id)?;
        self.unschedule(fid)
    }
}

/// A cluster leg's schedule: the stripe's stagger (as the whole sender
/// would time it, so a node sending one stripe keeps that stripe's
/// timing) and, with a fixed SSRC, sequence numbers locked to the epoch.
fn leg_spec(spec: FlowSpec, leg: Option<Leg>) -> FlowSpec {
    let Some(leg) = leg else { return spec };
    let spec = match leg.stripe {
        Some((stripes, k)) => spec.stripe(k, stripes.count()),
        None => spec,
    };
    match leg.ssrc {
        Some(ssrc) => spec.epoch_locked(locked_seq_base(Ssrc(ssrc))),
        None => spec,
    }
}
