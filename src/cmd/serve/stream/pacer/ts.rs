//! MPEG-TS flows of one pacing thread: one nagare-proto `mpegts::Sender`
//! schedules all of them (PCR pacing, pauses, loops, underruns); this
//! driver answers its chunk requests from each flow's ring and sends each
//! datagram it writes to all the flow's destinations.

use std::collections::HashMap;

use nagare_api::serve::{Encapsulation, StreamState};
use nagare_proto::mpegts::sender::{Event, FlowId, FlowSpec, Input, Sender, Transmit};
use nagare_proto::mpegts::{self, DatagramWriter, ScheduleConfig};
use nagare_proto::rtcp::Anchor;
use nagare_proto::{MediaTime, Nanos, Ssrc};
use tracing::warn;

use super::Start;
use crate::cmd::serve::hub::media::Kind;
use crate::cmd::serve::hub::table::{Counters, StreamId};
use crate::cmd::serve::stream::output::Sent;
use crate::cmd::serve::stream::reader::Delivery;
use crate::cmd::serve::stream::rtcp::{Farewells, FlowRtcp};

/// How early a TS datagram may leave with others due before it: one
/// wake-up per window, not per datagram. Measured with `bench/serve.sh`
/// (docs/serve.md).
const BATCH_WINDOW: Nanos = Nanos(50_000);

/// Every TS flow of one pacing thread.
pub(crate) struct TsFlows {
    sender: Sender,
    flows: HashMap<FlowId, Start>,
    ids: HashMap<StreamId, FlowId>,
    /// Sender reports and BYE of the RTP flows of RTSP sessions.
    rtcp: HashMap<FlowId, FlowRtcp>,
    /// Ended flows whose BYE is yet to go.
    farewells: Farewells,
    /// Datagrams handed to the kernel since the load meter last took them.
    sent: u64,
}

impl Default for TsFlows {
    fn default() -> TsFlows {
        let mut sender = Sender::default();
        sender.set_batch_window(BATCH_WINDOW);
        TsFlows {
            sender,
            flows: HashMap::new(),
            ids: HashMap::new(),
            rtcp: HashMap::new(),
            farewells: Farewells::default(),
            sent: 0,
        }
    }
}

impl TsFlows {
    /// Adds a flow whose time zero is `at`.
    pub(crate) fn start(&mut self, start: Start, at: Nanos) {
        let Kind::Ts { rate, .. } = start.media.kind else {
            return;
        };
        let enc = match start.encapsulation {
            Encapsulation::Rtp => mpegts::Encapsulation::Rtp,
            Encapsulation::Udp => mpegts::Encapsulation::Udp,
        };
        let random = || getrandom::u32().unwrap_or(0x6e61_6761);
        let ssrc = Ssrc(start.ssrc.unwrap_or_else(random));
        let writer = DatagramWriter::new(enc, ssrc, random() as u16, random());
        let spec = FlowSpec::new(ScheduleConfig::new(rate), writer).start(at);
        start.counters.set_state(StreamState::Playing);
        let id = self.sender.add_flow(spec);
        if enc == mpegts::Encapsulation::Rtp
            && let Some(r) = FlowRtcp::for_outputs(&start.outputs, ssrc)
        {
            self.rtcp.insert(id, r);
        }
        self.ids.insert(start.id, id);
        self.flows.insert(id, start);
    }

    /// Datagrams sent since the last call.
    pub(crate) fn take_sent(&mut self) -> u64 {
        std::mem::take(&mut self.sent)
    }

    /// Sends every datagram due at `now`, answering the sender's requests
    /// as they come (the polling order of `mpegts::sender`).
    pub(crate) fn step(&mut self, now: Nanos) {
        self.farewells.step(now);
        loop {
            let mut busy = false;
            while let Some(t) = self.sender.poll_transmit(now) {
                busy = true;
                let id = t.flow;
                let flow = self.flows.get_mut(&id);
                self.sent += flow.as_ref().map_or(0, |f| f.outputs.len()) as u64;
                let alive = send(flow, &t);
                if let (Some(r), Some(f)) = (self.rtcp.get_mut(&id), self.flows.get(&id)) {
                    report(r, now, &t, f);
                }
                if !alive {
                    // Its only TCP reader was dropped.
                    if let Some(f) = self.flows.get(&id) {
                        f.counters.fail(super::start::READER_DROPPED);
                    }
                    self.stop_flow(id, StreamState::Failed);
                }
            }
            while let Some(e) = self.sender.poll_event() {
                busy = true;
                self.event(e, now);
            }
            if !busy {
                return;
            }
        }
    }

    /// The earliest departure (or retry) of any flow, or BYE.
    pub(crate) fn next_deadline(&mut self) -> Option<Nanos> {
        let bye = self.farewells.next_deadline();
        self.sender.poll_timeout().into_iter().chain(bye).min()
    }

    fn event(&mut self, e: Event, now: Nanos) {
        match e {
            Event::NeedChunk { flow } => {
                if let Some(start) = self.flows.get(&flow) {
                    let input = answer(start, flow);
                    let _ = self.sender.handle_input(now, input);
                }
            }
            Event::Underrun { flow } => self.count(flow, |c| &c.underruns),
            Event::ChunkSent { flow, data } => {
                if let Some(start) = self.flows.get(&flow) {
                    start.ring.give_back(data);
                }
            }
            Event::Refused { flow, .. } => self.count(flow, |c| &c.send_errors),
            Event::Finished { flow } => {
                let rtcp = self.rtcp.remove(&flow);
                if let Some(mut start) = self.flows.remove(&flow) {
                    // Played to its end (or its file failed): the readers
                    // hear a BYE.
                    if let Some(r) = rtcp {
                        let outputs = std::mem::take(&mut start.outputs);
                        self.farewells.push(now, r, outputs);
                    }
                    self.ids.remove(&start.id);
                    let state = match start.counters.state() {
                        StreamState::Failed => StreamState::Failed,
                        _ => StreamState::Finished,
                    };
                    start.counters.set_state(state);
                }
            }
        }
    }

    fn count(&self, flow: FlowId, counter: impl Fn(&Counters) -> &std::sync::atomic::AtomicU64) {
        if let Some(start) = self.flows.get(&flow) {
            Counters::add(counter(&start.counters), 1);
        }
    }

    pub(crate) fn pause(&mut self, id: StreamId, now: Nanos) {
        if let Some(&flow) = self.ids.get(&id)
            && self.sender.handle_input(now, Input::Pause { flow }).is_ok()
            && let Some(start) = self.flows.get(&flow)
        {
            start.counters.set_state(StreamState::Paused);
        }
    }

    /// Resumes a paused flow: its timeline moves on by the pause, so its
    /// next datagram leaves at `at`.
    pub(crate) fn resume(&mut self, id: StreamId, at: Nanos) {
        if let Some(&flow) = self.ids.get(&id)
            && let Some(start) = self.flows.get(&flow)
            && start.counters.state() == StreamState::Paused
            && self
                .sender
                .handle_input(at, Input::Resume { flow, at })
                .is_ok()
        {
            start.counters.set_state(StreamState::Playing);
        }
    }

    pub(crate) fn stop(&mut self, id: StreamId, state: StreamState) {
        if let Some(&flow) = self.ids.get(&id) {
            self.stop_flow(flow, state);
        }
    }

    /// Stops a flow at its session's request, or as its reader is gone:
    /// no BYE (see `RawFlows::stop`).
    fn stop_flow(&mut self, flow: FlowId, state: StreamState) {
        self.sender.remove_flow(flow);
        self.rtcp.remove(&flow);
        if let Some(start) = self.flows.remove(&flow) {
            self.ids.remove(&start.id);
            start.counters.set_state(state);
        }
    }

    /// Stops every flow as the server stops (their connections close).
    pub(crate) fn stop_all(&mut self) {
        for (_, start) in self.flows.drain() {
            start.counters.set_state(StreamState::Finished);
        }
        self.rtcp.clear();
        self.ids.clear();
        self.sender = Sender::new();
    }
}

/// What the flow's ring has for the sender.
fn answer(start: &Start, flow: FlowId) -> Input {
    match start.ring.take() {
        Some(Delivery::Chunk(c)) => Input::Chunk {
            flow,
            data: c.data,
            len: c.len,
            end_of_pass: c.end_of_pass,
        },
        Some(Delivery::End) => Input::End { flow },
        Some(Delivery::Failed(e)) => {
            warn!(stream = start.id, "stream {}: {e}", start.id);
            start.counters.fail(e);
            Input::Failed { flow }
        }
        None => Input::Dry { flow },
    }
}

/// Feeds an RTP datagram about to leave to its flow's RTCP: its
/// timestamp is the media time of its due instant on the PCR schedule.
fn report(r: &mut FlowRtcp, now: Nanos, t: &Transmit<'_>, start: &Start) {
    let Some(ts) = t.datagram.get(4..8) else {
        return;
    };
    let anchor = Anchor {
        wall: r.wall(now, t.due),
        rtp: MediaTime(u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]])),
    };
    r.sent(now, 1, t.datagram.len() as u64, anchor, &start.outputs);
}

/// Sends one datagram to every destination of its flow; false when none
/// is left (its only TCP reader was dropped).
fn send(start: Option<&mut Start>, t: &Transmit<'_>) -> bool {
    let Some(start) = start else {
        return true;
    };
    let c = &start.counters;
    let len = t.datagram.len();
    let mut alive = false;
    for out in &mut start.outputs {
        match out.datagram(t.datagram) {
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
    c.lateness(t.late.as_nanos(), 1);
    alive
}
