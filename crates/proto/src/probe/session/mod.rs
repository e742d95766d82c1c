//! One probe test as a state machine, for the client and for the server:
//! the control protocol (hello, welcome or refusal, done, report,
//! records, abort), the echo datagrams (idle and loaded RTT, the reverse
//! opener), the receiving side of the test stream, and every deadline.
//!
//! The driver owns the sockets, the clock and the thread that sends the
//! paced stream, and moves bytes and time in and out:
//!
//! ```text
//! session.handle_input(now, Input::Control(bytes))      // read from TCP
//! session.handle_input(now, Input::Datagram { from, payload })
//! session.handle_input(now, Input::StreamFinished(reports)) // one per stream
//! session.handle_input(now, Input::Timer)               // poll_timeout came
//! while let Some(e) = session.poll_event() { ... }      // start/stop the stream, results
//! while let Some(t) = session.poll_transmit(now) { ... } // write to TCP / send a datagram
//! ```
//!
//! Poll events before transmits: [`Event::Accepted`] comes before the
//! welcome leaves, so a server can first discard datagrams left over from
//! an earlier test. Times are [`Nanos`] on the driver's monotonic clock;
//! a datagram's `now` is its receive time.
//!
//! A test, seen from the client:
//!
//! 1. hello → welcome (or a refusal), within [`HANDSHAKE_TIMEOUT`];
//! 2. idle RTT: [`IDLE_ECHOES`] echo requests with nothing else on the path;
//! 3. the stream, with an echo request every [`ECHO_EVERY`] (loaded RTT).
//!    Forward, the client sends it and then says done; reverse, it opens
//!    the path with open datagrams and the server sends, then says done;
//! 4. results: forward, the server's report and records come back;
//!    reverse, the client analyzes what it received [`DRAIN`] after done.
//!
//! A bidirectional test (`bidir`) runs both at once: the client sends its
//! stream and opens the path, the server streams back to the opened
//! address, each side counts live intervals of what it receives and says
//! done when its own stream ends. The server reports the client's stream
//! as in forward mode; the client analyzes the server's stream [`DRAIN`]
//! after the server's done, and its results carry both ([`Results::back`]).

mod client;
mod server;

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::probe::analysis::analyze;
use crate::probe::control::{ControlMessage, Frame, FrameDecoder, Refusal};
use crate::probe::error::{Error, Stage};
use crate::probe::live::LiveMeter;
use crate::probe::params::{Direction, Schedule, TestParams};
use crate::probe::report::{Arrival, LiveInterval, ReceiverReport, RttSummary, SenderReport};
use crate::probe::wire::{DataTrain, Datagram, ECHO_LEN, Echo, EchoKind};
use crate::stats::Distribution;
use crate::units::Nanos;
use crate::video;

/// Longest the client waits for the server to answer its hello, and the
/// server for a client's hello: one deadline for the whole handshake.
pub const HANDSHAKE_TIMEOUT: Nanos = Nanos::from_secs(10);
/// Longest a server waits for a connected client's hello.
pub const HELLO_TIMEOUT: Nanos = Nanos::from_secs(5);
/// Longest a reverse-mode server waits for the client's open datagram.
pub const OPEN_TIMEOUT: Nanos = Nanos::from_secs(5);
/// Time a test may take beyond its duration before a side gives up.
pub const TEST_GRACE: Nanos = Nanos::from_secs(30);
/// Longest wait for the next frame of the results (report, records).
pub const RESULTS_TIMEOUT: Nanos = Nanos::from_secs(30);
/// How long the receiver keeps listening after the sender said it is done.
pub const DRAIN: Nanos = Nanos::from_millis(300);
/// How long a sender still answers (reverse server) or waits for (forward
/// client) echoes in flight after its stream ended.
pub const SETTLE: Nanos = Nanos::from_millis(100);
/// After an interrupt in reverse mode, how long the client waits for the
/// server's report of what it sent.
pub const INTERRUPT_GRACE: Nanos = Nanos::from_secs(5);
/// Echo requests before the stream starts (idle RTT).
pub const IDLE_ECHOES: u64 = 10;
/// Spacing of the idle echo requests.
pub const IDLE_SPACING: Nanos = Nanos::from_millis(10);
/// Longest wait for idle echo replies after the last request.
pub const IDLE_WAIT: Nanos = Nanos::from_millis(100);
/// Spacing of echo requests during the stream: a low rate that does not
/// disturb the test.
pub const ECHO_EVERY: Nanos = Nanos::from_millis(50);
/// Echo datagrams that may wait for [`Session::poll_transmit`]; a peer
/// flooding requests gets no more answers than this between polls.
const MAX_QUEUED_DATAGRAMS: usize = 1024;

/// What the driver hands a [`Session`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    /// Bytes read from the control connection, however the reads split
    /// the frames.
    Control(&'a [u8]),
    /// The peer closed the control connection.
    ControlClosed,
    /// A datagram that arrived on the test-stream socket from `from`;
    /// `now` is its receive time.
    Datagram {
        /// Source address.
        from: SocketAddr,
        /// The datagram (one GRO segment).
        payload: &'a [u8],
    },
    /// The paced streams this side was sending (after
    /// [`Event::StartStream`]) have ended, early or not: one report per
    /// stream, in stream order.
    StreamFinished(Vec<SenderReport>),
    /// The user asked to stop (Ctrl-C): the test ends early and reports
    /// what was done.
    Interrupt,
    /// Datagrams the receiving socket dropped since the test began for
    /// lack of buffer (the kernel's counter, which only the driver reads).
    ReceiverDrops(u64),
    /// Nothing new; the time from [`Session::poll_timeout`] has come.
    Timer,
}

/// What the driver must send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// Bytes to write on the control connection (one whole frame).
    Control(Vec<u8>),
    /// An echo datagram to send from the test-stream socket.
    Datagram {
        /// Destination.
        to: SocketAddr,
        /// The datagram.
        payload: [u8; ECHO_LEN],
    },
}

/// How the driver sends the paced test stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPlan {
    /// Session id of the first stream's packets; stream `i` carries
    /// `session + i` (wrapping).
    pub session: u64,
    /// Parallel streams, each on the whole schedule.
    pub streams: u32,
    /// When each packet leaves.
    pub schedule: Schedule,
    /// UDP payload bytes per packet (validated: holds the header).
    pub packet_size: usize,
    /// Train window: packets whose slots fall within it of a train's
    /// first slot leave in one send call.
    pub burst: Nanos,
    /// Where the stream goes.
    pub to: SocketAddr,
}

impl StreamPlan {
    /// The packets of one train the schedule's `video::Sender` released
    /// (one flow per parallel stream, one packet per slot of its frame),
    /// leaving at `sent_at`: stream `i`'s session id is `session + i`, and
    /// packet `p` of frame `f` is sequence number `f * packets_per_frame
    /// + p`. [`DataTrain::write`] lays their headers out.
    pub fn train(&self, t: &video::sender::Transmit, sent_at: Nanos) -> DataTrain {
        DataTrain {
            session: self.session.wrapping_add(t.flow.index() as u64),
            first: t
                .frame
                .wrapping_mul(self.schedule.packets_per_frame)
                .wrapping_add(t.packets.start as u64),
            count: t.len(),
            sent_at,
        }
    }
}

/// One direction of a test: what its sender and its receiver measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Leg {
    /// The sender's own measurements, one per stream.
    pub sender: Vec<SenderReport>,
    /// The receiver's analysis, one per stream.
    pub receiver: Vec<ReceiverReport>,
}

/// Everything the client reports at the end of a test.
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// The sender's own measurements, one per stream (with `bidir`, the
    /// client's stream).
    pub sender: Vec<SenderReport>,
    /// The receiver's analysis, one per stream (with `bidir`, of the
    /// client's stream).
    pub receiver: Vec<ReceiverReport>,
    /// With `bidir`: the stream the server sent back at the same time.
    pub back: Option<Leg>,
    /// RTT with the path idle.
    pub rtt_idle: RttSummary,
    /// RTT while the stream ran.
    pub rtt_loaded: RttSummary,
    /// Per-packet records of the first stream, arrival order (when asked
    /// for, or in reverse mode).
    pub records: Vec<Arrival>,
}

/// What happened, for the driver to act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The test was accepted with this session id (server: discard stale
    /// datagrams now, before the welcome leaves).
    Accepted {
        /// Session id of the test.
        session: u64,
    },
    /// The test was refused, by the server (which this session may be).
    /// Final.
    Refused {
        /// Why.
        reason: Refusal,
        /// The server's protocol version.
        version: u32,
        /// The server's explanation.
        message: String,
    },
    /// Start sending the paced test stream.
    StartStream(StreamPlan),
    /// Stop the stream early; report it with [`Input::StreamFinished`].
    StopStream,
    /// A reporting interval ended: each stream's count, here (receiver)
    /// or by the peer (sender), for live lines.
    Interval {
        /// Which stream was counted (both come with `bidir`).
        direction: Direction,
        /// Each parallel stream's count.
        intervals: Vec<LiveInterval>,
    },
    /// Client: the test is over; close the control connection. Final.
    Results(Box<Results>),
    /// Server: the test is over; close the control connection. Final.
    Finished,
    /// The peer gave up, with its reason. Final.
    Aborted {
        /// The peer's message.
        message: String,
    },
    /// The session failed. Final.
    Failed(Error),
}

/// What a client asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// The test.
    pub params: TestParams,
    /// Token the server asks for.
    pub token: Option<String>,
}

/// What a server demands of its clients.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerConfig {
    /// Token clients must present (compared in constant time).
    pub token: Option<String>,
    /// Highest rate a client may ask for, bits/s.
    pub max_rate_bps: Option<u64>,
}

/// One accepted test.
#[derive(Debug, Clone, Copy)]
struct Test {
    id: u64,
    params: TestParams,
    schedule: Schedule,
}

/// Where a session is, with the times that matter there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Client: hello sent, waiting for the answer.
    Welcome { deadline: Nanos },
    /// Server: waiting for the hello (busy: to refuse it).
    Hello { deadline: Nanos, busy: bool },
    /// Client: idle RTT; `last` is when the last request was due.
    IdleRtt { last: Option<Nanos> },
    /// Reverse server: waiting for the client's open datagram.
    Open { deadline: Nanos },
    /// The stream runs. `done`: when the sender said done (receiver);
    /// `stopping`: when the client asked to stop (reverse client).
    Stream {
        deadline: Nanos,
        done: Option<Nanos>,
        stopping: Option<Nanos>,
    },
    /// Forward client: stream over, waiting for late echo replies.
    Settle { until: Nanos },
    /// Forward client: done sent, waiting for the report, then for the
    /// records it announced.
    Results {
        deadline: Nanos,
        announced: Option<u64>,
    },
    /// Bidir server: the client's stream is reported; its own still runs.
    Finishing { deadline: Nanos },
    /// Bidir client: the server's report is in; waiting for the server's
    /// done, then [`DRAIN`] after it (or the results deadline).
    Draining { deadline: Nanos },
    /// Server: results queued; ends when they are out.
    Sending,
    /// Reverse server: done sent, answering echoes in flight until the
    /// client closes or the deadline.
    Closing { deadline: Nanos },
    /// Over; a final event was queued.
    Ended,
}

/// The stream this side sends, as far as the session knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
    /// Not started, or finished.
    Idle,
    /// Started ([`Event::StartStream`]).
    Running,
    /// Asked to stop ([`Event::StopStream`]), not finished yet.
    Stopping,
}

/// The receiving side of the test stream, and round-trip times.
#[derive(Debug, Default)]
struct Meter {
    /// Per stream.
    arrivals: Vec<Vec<Arrival>>,
    /// Per stream.
    cap: usize,
    strangers: u64,
    drops: u64,
    /// Echo requests sent (their ids are `0..requests`).
    requests: u64,
    answered: Vec<bool>,
    rtt_idle: Distribution,
    rtt_loaded: Distribution,
    next_echo: Nanos,
    /// Running per-interval counts of the stream received.
    live: LiveMeter,
}

/// A probe test, client or server side; see the module docs.
#[derive(Debug)]
pub struct Session {
    server: Option<ServerConfig>,
    peer: SocketAddr,
    phase: Phase,
    test: Option<Test>,
    decoder: FrameDecoder,
    control: VecDeque<Vec<u8>>,
    /// Records still to send (server), and how many are out.
    records_out: Option<(Vec<Arrival>, usize)>,
    /// Echo datagrams to send; requests get their send time when polled.
    datagrams: VecDeque<(SocketAddr, Echo)>,
    events: VecDeque<Event>,
    meter: Meter,
    /// The server's report and records (forward client).
    report_in: Option<Vec<ReceiverReport>>,
    records_in: Vec<Arrival>,
    /// Session id a server gives the test it accepts.
    offered_id: u64,
    sender: Option<Vec<SenderReport>>,
    interrupted: bool,
    /// The stream this side sends.
    stream: StreamState,
    control_closed: bool,
    /// Server: the reports it sent the client, for its log.
    told: (Option<Vec<SenderReport>>, Option<Vec<ReceiverReport>>),
    /// Bidir client: the server's done (its report of what it sent) and
    /// when it came.
    server_done: Option<(Vec<SenderReport>, Nanos)>,
}

impl Session {
    fn new(peer: SocketAddr, phase: Phase, server: Option<ServerConfig>) -> Session {
        Session {
            server,
            peer,
            phase,
            test: None,
            decoder: FrameDecoder::new(),
            control: VecDeque::new(),
            records_out: None,
            datagrams: VecDeque::new(),
            events: VecDeque::new(),
            meter: Meter::default(),
            report_in: None,
            records_in: Vec::new(),
            offered_id: 0,
            sender: None,
            interrupted: false,
            stream: StreamState::Idle,
            control_closed: false,
            told: (None, None),
            server_done: None,
        }
    }

    /// The test's parameters, once known (client: from the start; server:
    /// once the hello is accepted).
    pub fn params(&self) -> Option<&TestParams> {
        self.test.as_ref().map(|t| &t.params)
    }

    /// The test's schedule, once known.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.test.as_ref().map(|t| &t.schedule)
    }

    /// Server: what it told the client about the stream it sent
    /// (reverse, bidir) and the one it received (forward, bidir), once it
    /// did.
    pub fn told(&self) -> (Option<&[SenderReport]>, Option<&[ReceiverReport]>) {
        (self.told.0.as_deref(), self.told.1.as_deref())
    }

    /// Whether the session is over (a final event was queued).
    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// Takes one input at `now`.
    pub fn handle_input(&mut self, now: Nanos, input: Input<'_>) {
        if self.phase == Phase::Ended {
            return;
        }
        match input {
            Input::Control(bytes) => self.on_control(now, bytes),
            Input::ControlClosed => {
                self.control_closed = true;
                self.on_closed(now);
            }
            Input::Datagram { from, payload } => self.on_datagram(now, from, payload),
            Input::StreamFinished(report) => {
                self.stream = StreamState::Idle;
                self.on_stream_finished(now, report);
            }
            Input::Interrupt => {
                if !self.interrupted && self.server.is_none() {
                    self.interrupted = true;
                    self.client_interrupt(now);
                }
            }
            Input::ReceiverDrops(n) => self.meter.drops = n,
            Input::Timer => {}
        }
        self.on_time(now);
    }

    /// The next thing to send, if any. Echo requests are stamped with
    /// `now`, so poll right before sending.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(frame) = self.control.pop_front() {
            return Some(Transmit::Control(frame));
        }
        if let Some(frame) = self.next_records_frame(now) {
            return Some(Transmit::Control(frame));
        }
        let (to, mut echo) = self.datagrams.pop_front()?;
        if echo.kind != EchoKind::Reply {
            echo.sent_at = now;
        }
        Some(Transmit::Datagram {
            to,
            payload: echo.to_bytes(),
        })
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`Session::handle_input`] with [`Input::Timer`] at the
    /// latest; `None` once the session is over.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let echo = self.echoing().then_some(self.meter.next_echo);
        let live = self
            .counting_live()
            .then(|| self.meter.live.due())
            .flatten();
        let phase = match self.phase {
            Phase::Welcome { deadline }
            | Phase::Hello { deadline, .. }
            | Phase::Open { deadline }
            | Phase::Results { deadline, .. }
            | Phase::Finishing { deadline }
            | Phase::Draining { deadline }
            | Phase::Closing { deadline } => Some(deadline),
            Phase::IdleRtt { last } => last.map(|t| t + IDLE_WAIT),
            Phase::Stream {
                deadline,
                done,
                stopping,
            } => [
                Some(deadline),
                done.map(|t| t + DRAIN),
                stopping.map(|t| t + INTERRUPT_GRACE),
            ]
            .into_iter()
            .flatten()
            .min(),
            Phase::Settle { until } => Some(until),
            Phase::Sending | Phase::Ended => None,
        };
        [phase, echo, live].into_iter().flatten().min()
    }

    /// Ends the session with a final event.
    fn end(&mut self, event: Event) {
        self.stop_stream();
        self.events.push_back(event);
        self.phase = Phase::Ended;
    }

    fn fail(&mut self, error: Error) {
        self.end(Event::Failed(error));
    }

    fn send(&mut self, msg: &ControlMessage) {
        self.control.push_back(msg.to_frame());
    }

    fn start_stream(&mut self, to: SocketAddr) {
        let Some(t) = self.test else { return };
        self.stream = StreamState::Running;
        self.events.push_back(Event::StartStream(StreamPlan {
            session: t.id,
            streams: t.params.streams,
            schedule: t.schedule,
            packet_size: t.params.packet_size as usize,
            burst: t.params.burst(),
            to,
        }));
    }

    fn stop_stream(&mut self) {
        if self.stream == StreamState::Running {
            self.stream = StreamState::Stopping;
            self.events.push_back(Event::StopStream);
        }
    }

    /// The deadline of a stream phase that starts at `now`.
    fn stream_phase(&self, now: Nanos) -> Phase {
        let duration = self.test.map_or(Nanos::ZERO, |t| t.params.duration());
        Phase::Stream {
            deadline: now + duration + TEST_GRACE,
            done: None,
            stopping: None,
        }
    }

    fn on_control(&mut self, now: Nanos, bytes: &[u8]) {
        self.decoder.extend(bytes);
        while self.phase != Phase::Ended {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => self.on_frame(now, frame),
                Ok(None) => return,
                Err(e) => return self.on_bad_frame(e),
            }
        }
    }

    fn on_frame(&mut self, now: Nanos, frame: Frame) {
        if self.server.is_some() {
            self.server_frame(now, frame);
        } else {
            self.client_frame(now, frame);
        }
    }

    fn on_bad_frame(&mut self, e: Error) {
        if let Phase::Hello { busy: true, .. } = self.phase {
            self.refuse_busy();
        } else {
            self.fail(e);
        }
    }

    fn on_closed(&mut self, now: Nanos) {
        if self.server.is_some() {
            self.server_closed(now);
        } else if !matches!(
            self.phase,
            Phase::Stream { done: Some(_), .. } | Phase::Draining { .. }
        ) {
            // After its done, a reverse-mode server may go; a bidir
            // server, once its report and done are out.
            let stage = self.stage();
            self.fail(Error::Closed { stage });
        }
    }

    fn on_stream_finished(&mut self, now: Nanos, report: Vec<SenderReport>) {
        if self.server.is_some() {
            self.server_stream_finished(now, report);
        } else if let Phase::Stream { .. } = self.phase {
            self.sender = Some(report);
            self.phase = Phase::Settle {
                until: now + SETTLE,
            };
        }
    }

    /// Deadlines and timed sends due at `now`; afterwards nothing is due
    /// before [`Session::poll_timeout`], which lies after `now`.
    fn on_time(&mut self, now: Nanos) {
        if self.server.is_some() {
            self.server_time(now);
        } else {
            self.client_time(now);
        }
        // After the phase moved on: a stream that starts now sends its
        // first echo request now.
        if self.echoing() && now >= self.meter.next_echo {
            self.queue_echo_request(now);
        }
        if self.counting_live() {
            while let Some(ivs) = self.meter.live.tick(now) {
                self.live_interval(ivs);
            }
        }
    }

    /// Whether this side is receiving the stream, counting live intervals:
    /// until the sender says done; the rest goes in the last, partial
    /// interval, which ends at the last arrival (an interval that ran on
    /// into the drain would read as a rate drop). A bidir client counts
    /// on while its own stream settles and reports.
    fn counting_live(&self) -> bool {
        let running = matches!(
            self.phase,
            Phase::Stream { .. }
                | Phase::Settle { .. }
                | Phase::Results { .. }
                | Phase::Draining { .. }
        );
        running && self.receives_stream() && !self.peer_stream_over()
    }

    /// Whether the peer said its stream to this side is over.
    fn peer_stream_over(&self) -> bool {
        if self.server.is_none() && self.bidir() {
            self.server_done.is_some()
        } else {
            matches!(self.phase, Phase::Stream { done: Some(_), .. })
        }
    }

    /// Which way the stream this side receives goes.
    fn received_direction(&self) -> Direction {
        if self.server.is_some() {
            Direction::ClientToServer
        } else {
            Direction::ServerToClient
        }
    }

    /// A live interval this side counted: an event here, a message to the
    /// peer (which prints it too).
    fn live_interval(&mut self, ivs: Vec<LiveInterval>) {
        self.events.push_back(Event::Interval {
            direction: self.received_direction(),
            intervals: ivs.clone(),
        });
        // A server that said done is on its way out: a write to a closed
        // connection would fail the client's test.
        let peer_leaving = self.server.is_none() && self.peer_stream_over();
        if !self.control_closed && !peer_leaving {
            self.send(&ControlMessage::Interval { intervals: ivs });
        }
    }

    /// The last, partial live intervals, once the streams that `sent`
    /// reports are over.
    fn finish_live(&mut self, sent: &[SenderReport]) {
        let sent: Vec<u64> = sent.iter().map(|s| s.sent).collect();
        if let Some(ivs) = self.meter.live.finish(&sent) {
            self.live_interval(ivs);
        }
    }

    /// Whether this side sends echo requests now.
    fn echoing(&self) -> bool {
        self.server.is_none()
            && match self.phase {
                Phase::IdleRtt { .. } => self.meter.requests < IDLE_ECHOES,
                // Loaded RTT ends with the stream.
                Phase::Stream { done: None, .. } => true,
                _ => false,
            }
    }

    fn queue_echo_request(&mut self, now: Nanos) {
        let Some(t) = self.test else { return };
        let m = &mut self.meter;
        let reverse_opening = t.params.server_sends() && m.arrivals.iter().all(Vec::is_empty);
        if reverse_opening && matches!(self.phase, Phase::Stream { .. }) {
            // Until data flows, keep opening the path (an open may be lost).
            self.datagrams
                .push_back((self.peer, echo(EchoKind::Open, t.id, 0)));
        }
        self.datagrams
            .push_back((self.peer, echo(EchoKind::Request, t.id, m.requests)));
        m.requests += 1;
        m.answered.push(false);
        let every = match self.phase {
            Phase::IdleRtt { .. } => IDLE_SPACING,
            _ => ECHO_EVERY,
        };
        m.next_echo += every;
        if m.next_echo <= now {
            m.next_echo = now + every;
        }
        if let Phase::IdleRtt { last } = &mut self.phase {
            *last = Some(now);
        }
    }

    fn on_datagram(&mut self, now: Nanos, from: SocketAddr, payload: &[u8]) {
        let Some(t) = self.test else { return };
        let ours = from.ip() == self.peer.ip();
        match Datagram::parse(payload) {
            Ok(Datagram::Data(h)) if ours && self.receives_stream() => {
                let Some(lane) = stream_of(&t, h.session) else {
                    self.meter.strangers += 1;
                    return;
                };
                let m = &mut self.meter;
                let a = Arrival {
                    seq: h.seq,
                    sent_at: h.sent_at,
                    received_at: now,
                };
                match m.arrivals.get_mut(lane) {
                    Some(list) if list.len() < m.cap => {
                        m.live.arrival(lane, &a, payload.len() as u64);
                        list.push(a);
                    }
                    _ => m.strangers += 1,
                }
            }
            Ok(Datagram::Echo(e)) if ours && e.session == t.id => self.on_echo(now, from, e),
            _ => self.meter.strangers += 1,
        }
    }

    /// Whether this side receives a test stream.
    fn receives_stream(&self) -> bool {
        self.test.is_some_and(|t| {
            if self.server.is_some() {
                t.params.client_sends()
            } else {
                t.params.server_sends()
            }
        })
    }

    /// Whether the test is reverse (the server sends, the client receives).
    fn reverse(&self) -> bool {
        self.test.is_some_and(|t| t.params.reverse)
    }

    /// Whether both ends send (`bidir`).
    fn bidir(&self) -> bool {
        self.test.is_some_and(|t| t.params.bidir)
    }

    fn on_echo(&mut self, now: Nanos, from: SocketAddr, e: Echo) {
        match e.kind {
            EchoKind::Request => {
                // Same size as the request: no amplification.
                if self.datagrams.len() < MAX_QUEUED_DATAGRAMS {
                    let reply = Echo {
                        kind: EchoKind::Reply,
                        ..e
                    };
                    self.datagrams.push_back((from, reply));
                }
            }
            EchoKind::Reply => self.on_echo_reply(now, e),
            EchoKind::Open => self.on_open(now, from),
        }
    }

    fn on_echo_reply(&mut self, now: Nanos, e: Echo) {
        let m = &mut self.meter;
        let Some(seen) = usize::try_from(e.id)
            .ok()
            .and_then(|i| m.answered.get_mut(i))
        else {
            return; // never asked
        };
        if *seen || e.sent_at > now {
            return;
        }
        *seen = true;
        let rtt = (now - e.sent_at).as_nanos();
        if e.id < IDLE_ECHOES {
            m.rtt_idle.record(rtt);
        } else {
            m.rtt_loaded.record(rtt);
        }
        if matches!(self.phase, Phase::IdleRtt { .. }) && m.rtt_idle.count() >= IDLE_ECHOES {
            self.client_start_test(now);
        }
    }

    /// Sets up the receiving side of test `t`: per-stream records of at
    /// most `cap` packets (0 keeps none), live counts.
    fn meter_for(&mut self, t: &Test, cap: usize) {
        let n = t.params.streams as usize;
        self.meter.arrivals = vec![Vec::new(); n];
        self.meter.cap = cap;
        self.meter.live = LiveMeter::new(t.params.interval(), n);
    }

    /// The receiver's report of each stream, `sent` reporting what each
    /// sent. Datagrams that belong to no stream count in the first.
    fn analyze(&mut self, sent: &[SenderReport]) -> Vec<ReceiverReport> {
        let Some(t) = self.test else {
            return Vec::new();
        };
        let m = &mut self.meter;
        let mut out: Vec<ReceiverReport> = m
            .arrivals
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let n = sent.get(i).map_or(0, |s| s.sent);
                analyze(a, n, &t.params, &t.schedule)
            })
            .collect();
        if let Some(first) = out.first_mut() {
            first.strangers += m.strangers;
            first.receiver_drops = m.drops;
        }
        out
    }

    /// Where the session is, for error messages.
    fn stage(&self) -> Stage {
        match self.phase {
            Phase::Welcome { .. } => Stage::Welcome,
            Phase::Hello { .. } => Stage::Hello,
            Phase::IdleRtt { .. } => Stage::IdleRtt,
            Phase::Open { .. } => Stage::Open,
            Phase::Stream {
                stopping: Some(_), ..
            } => Stage::Stopping,
            Phase::Stream { .. }
            | Phase::Settle { .. }
            | Phase::Finishing { .. }
            | Phase::Closing { .. } => Stage::Stream,
            Phase::Results { .. } | Phase::Draining { .. } | Phase::Sending | Phase::Ended => {
                Stage::Results
            }
        }
    }
}

/// Which of test `t`'s streams carries session id `id`, if any.
fn stream_of(t: &Test, id: u64) -> Option<usize> {
    let i = id.wrapping_sub(t.id);
    (i < u64::from(t.params.streams)).then_some(i as usize)
}

fn echo(kind: EchoKind, session: u64, id: u64) -> Echo {
    Echo {
        kind,
        session,
        id,
        sent_at: Nanos::ZERO,
    }
}

#[cfg(test)]
mod tests;
