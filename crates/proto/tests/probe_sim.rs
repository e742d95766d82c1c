//! A whole probe test on virtual time, with no sockets: a client
//! `Session` and a server `Session` talk over an in-order control pipe,
//! and their datagrams (test stream and echoes) cross a `Netem` each way.
//! What netem does to the stream must show in the report exactly.

use std::collections::VecDeque;
use std::net::SocketAddr;

use nagare_proto::Nanos;
use nagare_proto::netem::{ImpairConfig, ImpairCounters, Netem, parse_seq_list};
use nagare_proto::probe::{
    ClientConfig, DEFAULT_BURST_US, DataHeader, Datagram, Direction, Event, Input, Results,
    SenderLog, ServerConfig, Session, StreamPlan, TestParams, Transmit,
};

/// One-way latency of the control connection.
const CONTROL_LATENCY: Nanos = Nanos::from_micros(300);
/// The control connection delivers in reads of at most this many bytes.
const READ_SIZE: usize = 1000;
/// Virtual time after which a simulation is a failure (it must end).
const LIMIT: Nanos = Nanos::from_secs(120);

#[derive(Debug, Clone)]
struct Packet {
    from: SocketAddr,
    bytes: Vec<u8>,
}

/// A paced stream as the driver's sending thread runs it, packet by
/// packet on virtual time.
struct Stream {
    plan: StreamPlan,
    start: Nanos,
    next: u64,
    stop: bool,
    log: SenderLog,
}

impl Stream {
    /// The next packet, logged as sent on its slot.
    fn packet(&mut self) -> Vec<u8> {
        let seq = self.next;
        let schedule = &self.plan.schedule;
        let slot = schedule.slot(seq);
        let mut bytes = vec![0u8; self.plan.packet_size];
        let header = DataHeader {
            session: self.plan.session,
            seq,
            sent_at: slot,
            marker: schedule.ends_frame(seq),
        };
        header.write(&mut bytes).unwrap();
        self.log.record(slot, slot, bytes.len() as u64);
        self.next += 1;
        bytes
    }

    fn due(&self) -> Option<Nanos> {
        (!self.stop && self.next < self.plan.schedule.total_packets)
            .then(|| self.start + self.plan.schedule.slot(self.next))
    }
}

struct Host {
    session: Session,
    addr: SocketAddr,
    stream: Option<Stream>,
    /// Control bytes on their way to this host, with their arrival time.
    inbox: VecDeque<(Nanos, Vec<u8>)>,
    /// When the peer's close reaches this host.
    close_at: Option<Nanos>,
    /// Every event, in order.
    events: Vec<Event>,
    /// The session ended and its last bytes left.
    done: bool,
}

impl Host {
    fn new(session: Session, addr: SocketAddr) -> Host {
        Host {
            session,
            addr,
            stream: None,
            inbox: VecDeque::new(),
            close_at: None,
            events: Vec::new(),
            done: false,
        }
    }

    fn next_time(&self) -> Option<Nanos> {
        [
            self.session.poll_timeout(),
            self.stream.as_ref().and_then(Stream::due),
            self.inbox.front().map(|(t, _)| *t),
            self.close_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

struct Sim {
    now: Nanos,
    client: Host,
    server: Host,
    /// Client to server, and server to client.
    up: Netem<Packet>,
    down: Netem<Packet>,
    /// Interrupt the client once a stream has sent this many packets.
    interrupt_at: Option<u64>,
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

impl Sim {
    fn new(params: TestParams, up: ImpairConfig, down: ImpairConfig) -> Sim {
        up.validate().unwrap();
        down.validate().unwrap();
        let (c, s) = (addr("10.0.0.1:40000"), addr("10.0.0.2:5201"));
        let config = ClientConfig {
            params,
            token: Some("s3cret".into()),
        };
        let server_config = ServerConfig {
            token: Some("s3cret".into()),
            max_rate_bps: None,
        };
        Sim {
            now: Nanos::ZERO,
            client: Host::new(Session::client(Nanos::ZERO, s, config).unwrap(), c),
            server: Host::new(Session::server(Nanos::ZERO, c, server_config, 77), s),
            up: Netem::new(up),
            down: Netem::new(down),
            interrupt_at: None,
        }
    }

    /// Runs until both sessions ended; the client's results.
    fn run(&mut self) -> Box<Results> {
        loop {
            self.poll(true);
            self.poll(false);
            if self.client.done && self.server.done {
                break;
            }
            let next = [
                self.client.next_time(),
                self.server.next_time(),
                self.up.poll_timeout(),
                self.down.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("a simulation with nothing left to happen has hung");
            assert!(next < LIMIT, "still running at {next}");
            self.now = self.now.max(next);
            self.deliver();
        }
        match self.client.events.last() {
            Some(Event::Results(r)) => r.clone(),
            other => panic!("the client ended with {other:?}"),
        }
    }

    fn host(&mut self, client: bool) -> &mut Host {
        if client {
            &mut self.client
        } else {
            &mut self.server
        }
    }

    /// Events, then transmits, of one host; its stream's due packets.
    fn poll(&mut self, client: bool) {
        let now = self.now;
        self.events(client);
        loop {
            let h = self.host(client);
            let Some(t) = h.session.poll_transmit(now) else {
                break;
            };
            let from = h.addr;
            match t {
                Transmit::Control(bytes) => self.send_control(client, bytes),
                Transmit::Datagram { payload, .. } => self.send_datagram(
                    client,
                    Packet {
                        from,
                        bytes: payload.to_vec(),
                    },
                ),
            }
        }
        let h = self.host(client);
        if h.session.is_ended() && !h.done {
            h.done = true;
            let peer = self.host(!client);
            peer.close_at = Some(now + CONTROL_LATENCY);
        }
        self.stream(client);
    }

    fn events(&mut self, client: bool) {
        let now = self.now;
        let h = self.host(client);
        while let Some(e) = h.session.poll_event() {
            match &e {
                Event::StartStream(plan) => {
                    h.stream = Some(Stream {
                        plan: *plan,
                        start: now,
                        next: 0,
                        stop: false,
                        log: SenderLog::new(&plan.schedule),
                    });
                }
                Event::StopStream => {
                    if let Some(s) = &mut h.stream {
                        s.stop = true;
                    }
                }
                _ => {}
            }
            h.events.push(e);
        }
    }

    /// Sends the stream's packets due now; reports the stream's end.
    fn stream(&mut self, client: bool) {
        let now = self.now;
        loop {
            let h = self.host(client);
            let from = h.addr;
            let Some(s) = &mut h.stream else { return };
            match s.due() {
                Some(at) if at <= now => {
                    let bytes = s.packet();
                    let sent = s.next;
                    self.send_datagram(client, Packet { from, bytes });
                    if self.interrupt_at == Some(sent) {
                        // Ctrl-C at the client.
                        self.interrupt_at = None;
                        self.client.session.handle_input(now, Input::Interrupt);
                        return;
                    }
                }
                Some(_) => return,
                None => {
                    let report = h.stream.take().map(|s| s.log.finish());
                    h.session
                        .handle_input(now, Input::StreamFinished(vec![report.unwrap_or_default()]));
                    return self.poll(client);
                }
            }
        }
    }

    fn send_control(&mut self, from_client: bool, bytes: Vec<u8>) {
        let at = self.now + CONTROL_LATENCY;
        let peer = self.host(!from_client);
        for chunk in bytes.chunks(READ_SIZE) {
            peer.inbox.push_back((at, chunk.to_vec()));
        }
    }

    fn send_datagram(&mut self, from_client: bool, p: Packet) {
        // Netem impairs the stream under test (RTP) and only delays the rest.
        let seq = match Datagram::parse(&p.bytes) {
            Ok(Datagram::Data(h)) => Some(h.seq as u16),
            _ => None,
        };
        let len = p.bytes.len();
        let link = if from_client {
            &mut self.up
        } else {
            &mut self.down
        };
        link.handle_input(self.now, p, len, seq);
    }

    /// Hands each host what reached it by now.
    fn deliver(&mut self) {
        let now = self.now;
        while let Some(p) = self.up.poll_transmit(now) {
            let h = &mut self.server;
            let payload = &p.bytes;
            h.session.handle_input(
                now,
                Input::Datagram {
                    from: p.from,
                    payload,
                },
            );
        }
        while let Some(p) = self.down.poll_transmit(now) {
            let h = &mut self.client;
            let payload = &p.bytes;
            h.session.handle_input(
                now,
                Input::Datagram {
                    from: p.from,
                    payload,
                },
            );
        }
        for h in [&mut self.client, &mut self.server] {
            while h.inbox.front().is_some_and(|(t, _)| *t <= now) {
                let (_, bytes) = h.inbox.pop_front().unwrap();
                h.session.handle_input(now, Input::Control(&bytes));
            }
            if h.inbox.is_empty() && h.close_at.is_some_and(|t| t <= now) {
                h.close_at = None;
                h.session.handle_input(now, Input::ControlClosed);
            }
            h.session.handle_input(now, Input::Timer);
        }
    }
}

/// 4000 packets/s of 200 bytes for 0.5 s: 2000 packets.
fn light() -> TestParams {
    TestParams {
        rate_bps: 6_400_000,
        duration_ms: 500,
        packet_size: 200,
        fps: None,
        reverse: false,
        records: true,
        playout_us: 50_000,
        burst_threshold: 5,
        interval_ms: 100,
        burst_us: DEFAULT_BURST_US,
        streams: 1,
        bidir: false,
    }
}

/// The scripted impairments of the integration test, on a 2 ms link.
fn scripted() -> ImpairConfig {
    ImpairConfig {
        drop_seq: parse_seq_list("100,200-209,300-303,500").unwrap(),
        reorder_seq: parse_seq_list("600,700").unwrap(),
        duplicate_seq: parse_seq_list("800-802").unwrap(),
        reorder_gap: 3,
        delay: Nanos::from_millis(2),
        ..ImpairConfig::default()
    }
}

fn link(delay_ms: u64) -> ImpairConfig {
    ImpairConfig {
        delay: Nanos::from_millis(delay_ms),
        ..ImpairConfig::default()
    }
}

fn assert_scripted_counts(r: &Results) {
    let x = &r.receiver[0];
    assert_eq!((x.sent, x.received, x.lost), (2000, 1984, 16));
    assert_eq!(
        (x.loss_episodes, x.burst_losses, x.loss_episode_max),
        (4, 1, 10)
    );
    assert_eq!(
        (x.reordered, x.order_errors, x.reorder_max_extent),
        (2, 2, 3)
    );
    assert_eq!((x.duplicates, x.strangers, x.late), (3, 0, 0));
    assert_eq!(r.sender[0].sent, 2000);
}

fn stream_counts(c: ImpairCounters) -> (u64, u64, u64, u64) {
    (c.dropped(), c.loss_episodes, c.duplicated, c.reordered)
}

#[test]
fn forward_scripted_impairments_are_reported_exactly() {
    let mut sim = Sim::new(light(), scripted(), link(2));
    let r = sim.run();
    assert_scripted_counts(&r);
    // Every datagram that arrived, duplicates included, comes back as a
    // record, over 1000-byte reads of the control connection.
    assert_eq!(r.records.len(), 1984 + 3);
    // Echoes are not stream packets: netem only delays them, so every
    // RTT is exactly the 2 + 2 ms of the path.
    assert_eq!((r.rtt_idle.samples, r.rtt_idle.lost), (10, 0));
    assert_eq!((r.rtt_idle.min_ms, r.rtt_idle.max_ms), (4.0, 4.0));
    assert!(r.rtt_loaded.samples >= 10 && r.rtt_loaded.lost == 0);
    assert_eq!(r.rtt_loaded.max_ms, 4.0);
    // A constant delay: the only PDV is that of the two reordered
    // packets, held while three others (250 us apart) overtook them.
    let pdv = r.receiver[0].pdv_ms;
    assert_eq!((pdv.p99, pdv.max, pdv.count), (0.0, 0.75, 1984));
    assert!(r.receiver[0].jitter_rfc3550_ms < 1e-3);
    let up = sim.up.counters();
    assert_eq!(stream_counts(up), (16, 4, 3, 2));
    assert!(matches!(sim.server.events.last(), Some(Event::Finished)));
}

#[test]
fn reverse_scripted_impairments_are_reported_exactly() {
    let params = TestParams {
        reverse: true,
        fps: Some((50, 1)),
        ..light()
    };
    let mut sim = Sim::new(params, link(2), scripted());
    let r = sim.run();
    assert_scripted_counts(&r);
    // 25 frames of 80 packets; the losses hit frames 1, 2, 3 and 6.
    let f = r.receiver[0].frames.unwrap();
    assert_eq!((f.frames, f.incomplete, f.complete), (25, 4, 21));
    assert_eq!(r.records.len(), 1984 + 3);
    assert_eq!(stream_counts(sim.down.counters()), (16, 4, 3, 2));
    // The server streamed to the address the client opened from.
    let to = sim.server.events.iter().find_map(|e| match e {
        Event::StartStream(p) => Some(p.to),
        _ => None,
    });
    assert_eq!(to, Some(sim.client.addr));
}

#[test]
fn seeded_random_impairments_match_netem_counters() {
    let random = ImpairConfig {
        loss: 0.01,
        duplicate: 0.005,
        reorder: 0.005,
        gilbert: Some((0.001, 0.3)),
        seed: 7,
        ..link(1)
    };
    for reverse in [false, true] {
        let params = TestParams {
            rate_bps: 32_000_000, // 20000 packets/s for 1 s
            duration_ms: 1000,
            records: false,
            reverse,
            ..light()
        };
        let (up, down) = if reverse {
            (link(1), random.clone())
        } else {
            (random.clone(), link(1))
        };
        let mut sim = Sim::new(params, up, down);
        let r = sim.run();
        let k = if reverse {
            sim.down.counters()
        } else {
            sim.up.counters()
        };
        let x = &r.receiver[0];
        assert_eq!(x.sent, 20_000);
        assert_eq!((x.lost, x.loss_episodes), (k.dropped(), k.loss_episodes));
        assert_eq!((x.duplicates, x.reordered), (k.duplicated, k.reordered));
        assert!(
            k.dropped() > 100 && k.duplicated > 50 && k.reordered > 50,
            "{k:?}"
        );
        assert!(r.records.is_empty() || reverse);
    }
}

#[test]
fn interrupted_tests_report_what_was_sent() {
    for reverse in [false, true] {
        let params = TestParams {
            reverse,
            duration_ms: 10_000, // 40000 packets planned
            ..light()
        };
        let mut sim = Sim::new(params, link(1), link(1));
        sim.interrupt_at = Some(1234);
        let r = sim.run();
        let x = &r.receiver[0];
        // Forward, the client stops at once; reverse, the stop takes the
        // control connection's latency to reach the server.
        assert!(
            x.sent >= 1234 && x.sent < 1300,
            "reverse {reverse}: {}",
            x.sent
        );
        assert_eq!((x.received, x.lost), (x.sent, 0), "reverse {reverse}");
        assert_eq!(r.sender[0].sent, x.sent);
        assert!(sim.interrupt_at.is_none());
    }
}

/// The live intervals `host` saw of the stream going `direction`:
/// packets received and lost, summed.
fn live_totals(host: &Host, direction: Direction) -> (u64, u64) {
    host.events
        .iter()
        .filter_map(|e| match e {
            Event::Interval {
                direction: d,
                intervals,
            } if *d == direction => Some(intervals),
            _ => None,
        })
        .flatten()
        .fold((0, 0), |(r, l), iv| (r + iv.received, l + iv.lost))
}

/// Where `host` sent its streams.
fn stream_targets(host: &Host) -> Vec<SocketAddr> {
    host.events
        .iter()
        .filter_map(|e| match e {
            Event::StartStream(p) => Some(p.to),
            _ => None,
        })
        .collect()
}

#[test]
fn bidir_measures_both_ways_and_loss_only_where_it_happened() {
    for lossy_up in [true, false] {
        let params = TestParams {
            bidir: true,
            ..light()
        };
        let (up, down) = if lossy_up {
            (scripted(), link(2))
        } else {
            (link(2), scripted())
        };
        let mut sim = Sim::new(params, up, down);
        let r = sim.run();
        let back = r
            .back
            .clone()
            .expect("bidir results carry the server's stream");
        // The lossy direction's report is exact, the other one clean.
        let (lossy, clean) = if lossy_up {
            (
                Results {
                    back: None,
                    ..(*r).clone()
                },
                (back.sender, back.receiver),
            )
        } else {
            (
                Results {
                    sender: back.sender,
                    receiver: back.receiver,
                    back: None,
                    ..(*r).clone()
                },
                (r.sender.clone(), r.receiver.clone()),
            )
        };
        assert_scripted_counts(&lossy);
        let (sender, receiver) = clean;
        let x = &receiver[0];
        assert_eq!(sender[0].sent, 2000, "lossy up {lossy_up}");
        assert_eq!(
            (x.sent, x.received, x.lost, x.duplicates, x.reordered),
            (2000, 2000, 0, 0, 0),
            "lossy up {lossy_up}"
        );
        // Netem saw each stream once, in its own direction.
        let (hit, spared) = if lossy_up {
            (sim.up.counters(), sim.down.counters())
        } else {
            (sim.down.counters(), sim.up.counters())
        };
        assert_eq!(stream_counts(hit), (16, 4, 3, 2));
        assert_eq!(stream_counts(spared), (0, 0, 0, 0));
        // The client streamed to the server, the server to the client.
        assert_eq!(stream_targets(&sim.client), vec![sim.server.addr]);
        assert_eq!(stream_targets(&sim.server), vec![sim.client.addr]);
        // Each receiver's live lines hold every packet that arrived once
        // (duplicates included); the live loss is the sequence numbers
        // passed over, which only the lossy way has. The peer prints
        // them too, but for the last, partial interval (counted after
        // the sender's done, when the peer may be on its way out).
        let (c2s, s2c) = (Direction::ClientToServer, Direction::ServerToClient);
        let (up, down) = (live_totals(&sim.server, c2s), live_totals(&sim.client, s2c));
        let (lossy_live, clean_live) = if lossy_up { (up, down) } else { (down, up) };
        assert_eq!((lossy_live.0, clean_live), (1987, (2000, 0)));
        assert!(lossy_live.1 >= 16, "{lossy_live:?}");
        let (up_told, down_told) = (live_totals(&sim.client, c2s), live_totals(&sim.server, s2c));
        assert!(up_told.0 <= up.0 && up_told.0 >= 1500, "{up_told:?}");
        assert!(
            down_told.0 <= down.0 && down_told.0 >= 1500,
            "{down_told:?}"
        );
        assert!(matches!(sim.server.events.last(), Some(Event::Finished)));
        // Records are the client's stream's, as the server received it.
        let records = if lossy_up { 1984 + 3 } else { 2000 };
        assert_eq!(r.records.len(), records);
    }
}

#[test]
fn bidir_interrupted_reports_what_each_side_sent() {
    let params = TestParams {
        bidir: true,
        duration_ms: 10_000, // 40000 packets planned each way
        ..light()
    };
    let mut sim = Sim::new(params, link(1), link(1));
    sim.interrupt_at = Some(1234);
    let r = sim.run();
    assert!(sim.interrupt_at.is_none());
    let back = r.back.as_ref().expect("the server's stream");
    for (sender, receiver) in [(&r.sender, &r.receiver), (&back.sender, &back.receiver)] {
        let x = &receiver[0];
        assert!(x.sent >= 1200 && x.sent < 1300, "{}", x.sent);
        assert_eq!((x.received, x.lost), (x.sent, 0));
        assert_eq!(sender[0].sent, x.sent);
    }
}
