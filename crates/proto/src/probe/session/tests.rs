//! One session at a time, fed by hand: the handshake's checks and
//! refusals, deadlines, hostile control streams and datagrams. Whole tests
//! between two sessions are in `tests/probe_sim.rs`.

use super::*;
use crate::probe::control::FrameDecoder;
use crate::probe::error::MessageKind;
use crate::probe::params::{DEFAULT_BURST_US, Direction};
use crate::probe::wire::{DataHeader, PROTOCOL_VERSION};

const T0: Nanos = Nanos::ZERO;

fn client_addr() -> SocketAddr {
    "10.0.0.1:40000".parse().unwrap()
}

fn server_addr() -> SocketAddr {
    "10.0.0.2:5201".parse().unwrap()
}

fn params() -> TestParams {
    TestParams {
        rate_bps: 6_400_000,
        duration_ms: 500,
        packet_size: 200,
        fps: None,
        reverse: false,
        records: false,
        playout_us: 50_000,
        burst_threshold: 5,
        interval_ms: 100,
        burst_us: DEFAULT_BURST_US,
        streams: 1,
        bidir: false,
    }
}

fn hello(version: u32, token: Option<&str>, params: TestParams) -> Vec<u8> {
    ControlMessage::Hello {
        version,
        token: token.map(String::from),
        params,
    }
    .to_frame()
}

fn server(config: ServerConfig) -> Session {
    Session::server(T0, client_addr(), config, 42)
}

/// Every control message and event the session has queued.
fn drain(s: &mut Session, now: Nanos) -> (Vec<ControlMessage>, Vec<Event>) {
    let mut d = FrameDecoder::new();
    let mut msgs = Vec::new();
    while let Some(t) = s.poll_transmit(now) {
        if let Transmit::Control(bytes) = t {
            d.extend(&bytes);
            while let Some(Frame::Message(m)) = d.next_frame().unwrap() {
                msgs.push(m);
            }
        }
    }
    let events = std::iter::from_fn(|| s.poll_event()).collect();
    (msgs, events)
}

/// What the server says to `hello`, and its final event.
fn answer(config: ServerConfig, hello: &[u8]) -> (ControlMessage, Event) {
    let mut s = server(config);
    s.handle_input(T0, Input::Control(hello));
    let (mut msgs, mut events) = drain(&mut s, T0);
    assert_eq!((msgs.len(), events.len()), (1, 1), "{msgs:?} {events:?}");
    (msgs.remove(0), events.remove(0))
}

fn refusal(config: ServerConfig, hello: &[u8]) -> (Refusal, String) {
    match answer(config, hello) {
        (
            ControlMessage::Refused {
                reason, message, ..
            },
            Event::Refused { reason: r, .. },
        ) => {
            assert_eq!(r, reason);
            (reason, message)
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn server_accepts_a_good_hello_with_the_token() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        max_rate_bps: Some(10_000_000),
    };
    let (msg, event) = answer(config, &hello(PROTOCOL_VERSION, Some("s3cret"), params()));
    assert_eq!(
        msg,
        ControlMessage::Welcome {
            version: PROTOCOL_VERSION,
            session: 42
        }
    );
    assert_eq!(event, Event::Accepted { session: 42 });
}

#[test]
fn server_refuses_with_the_reason_and_value() {
    let token = || ServerConfig {
        token: Some("s3cret".into()),
        max_rate_bps: None,
    };
    let (r, m) = refusal(token(), &hello(99, None, params()));
    assert_eq!(r, Refusal::Version);
    assert!(m.contains("client speaks probe protocol version 99"), "{m}");
    // A release from before bidir (version 3) is told what to do.
    let (r, m) = refusal(token(), &hello(3, Some("s3cret"), params()));
    assert_eq!(r, Refusal::Version);
    assert_eq!(
        m,
        "client speaks probe protocol version 3, this server speaks 4: run the same nagare \
         release on both ends"
    );
    let both = TestParams {
        reverse: true,
        bidir: true,
        ..params()
    };
    let (r, m) = refusal(token(), &hello(PROTOCOL_VERSION, Some("s3cret"), both));
    assert_eq!(r, Refusal::Params);
    assert!(m.contains("drop --reverse"), "{m}");
    for t in [None, Some("s3creT"), Some("s3cre")] {
        let (r, m) = refusal(token(), &hello(PROTOCOL_VERSION, t, params()));
        assert_eq!(
            (r, m.as_str()),
            (Refusal::Token, "missing or wrong --token")
        );
    }
    let capped = ServerConfig {
        max_rate_bps: Some(5_000_000),
        ..ServerConfig::default()
    };
    let (r, m) = refusal(capped, &hello(PROTOCOL_VERSION, None, params()));
    assert_eq!(r, Refusal::Params);
    assert!(m.starts_with("rate 6.4 Mbit/s above this server's --max-rate 5 Mbit/s"));
    let absurd = TestParams {
        rate_bps: 10_000_000_000_000,
        ..params()
    };
    let (r, m) = refusal(
        ServerConfig::default(),
        &hello(PROTOCOL_VERSION, None, absurd),
    );
    assert_eq!(r, Refusal::Params);
    assert!(
        m.starts_with("rate (bit/s) = 10000000000000 is out of range"),
        "{m}"
    );
    let abort = ControlMessage::Abort {
        message: "hi".into(),
    }
    .to_frame();
    let (r, m) = refusal(ServerConfig::default(), &abort);
    assert_eq!((r, m.as_str()), (Refusal::Other, "expected a hello first"));
}

#[test]
fn busy_server_refuses_after_the_hello_or_its_deadline() {
    let mut s = Session::busy(T0, client_addr());
    assert!(drain(&mut s, T0).0.is_empty());
    s.handle_input(T0, Input::Control(&hello(PROTOCOL_VERSION, None, params())));
    let (msgs, events) = drain(&mut s, T0);
    assert!(matches!(
        (&msgs[..], &events[..]),
        (
            [ControlMessage::Refused {
                reason: Refusal::Busy,
                ..
            }],
            [Event::Refused { .. }]
        )
    ));
    let mut s = Session::busy(T0, client_addr());
    assert_eq!(s.poll_timeout(), Some(HELLO_TIMEOUT));
    s.handle_input(HELLO_TIMEOUT, Input::Timer);
    assert!(matches!(drain(&mut s, T0).1[..], [Event::Refused { .. }]));
    assert!(s.is_ended() && s.poll_timeout().is_none());
}

#[test]
fn garbage_and_silence_end_a_server_session() {
    let mut s = server(ServerConfig::default());
    s.handle_input(T0, Input::Control(b"Z\xff\xff\xff\xffgarbage"));
    assert_eq!(
        drain(&mut s, T0).1,
        vec![Event::Failed(Error::FrameType(b'Z'))]
    );
    // A length beyond the limit is refused from the header alone.
    let mut s = server(ServerConfig::default());
    s.handle_input(T0, Input::Control(&[b'J', 0xff, 0xff, 0xff, 0xff]));
    assert!(matches!(
        drain(&mut s, T0).1[..],
        [Event::Failed(Error::FrameTooLarge { .. })]
    ));
    let mut s = server(ServerConfig::default());
    s.handle_input(HELLO_TIMEOUT, Input::Timer);
    assert_eq!(
        drain(&mut s, T0).1,
        vec![Event::Failed(Error::Timeout {
            stage: Stage::Hello,
            after: HELLO_TIMEOUT
        })]
    );
    let mut s = server(ServerConfig::default());
    s.handle_input(T0, Input::ControlClosed);
    assert_eq!(
        drain(&mut s, T0).1,
        vec![Event::Failed(Error::Closed {
            stage: Stage::Hello
        })]
    );
}

fn accepted_server(p: TestParams) -> Session {
    let mut s = server(ServerConfig::default());
    s.handle_input(T0, Input::Control(&hello(PROTOCOL_VERSION, None, p)));
    drain(&mut s, T0);
    s
}

fn data(session: u64, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; 200];
    DataHeader {
        session,
        seq,
        sent_at: Nanos(seq),
        marker: false,
    }
    .write(&mut b)
    .unwrap();
    b
}

#[test]
fn only_the_peers_datagrams_of_this_session_count() {
    let mut s = accepted_server(params());
    let stranger: SocketAddr = "10.9.9.9:40000".parse().unwrap();
    let feed = |s: &mut Session, from, payload: &[u8]| {
        s.handle_input(Nanos(1), Input::Datagram { from, payload });
    };
    feed(&mut s, client_addr(), &data(42, 0));
    feed(&mut s, client_addr(), &data(42, 1));
    feed(&mut s, stranger, &data(42, 2)); // another host
    feed(&mut s, client_addr(), &data(41, 2)); // another session
    feed(&mut s, client_addr(), b"garbage");
    // An echo request is answered to its sender, same size.
    let req = Echo {
        kind: EchoKind::Request,
        session: 42,
        id: 5,
        sent_at: Nanos(9),
    };
    feed(&mut s, client_addr(), &req.to_bytes());
    let reply = Echo {
        kind: EchoKind::Reply,
        ..req
    };
    assert_eq!(
        s.poll_transmit(Nanos(2)),
        Some(Transmit::Datagram {
            to: client_addr(),
            payload: reply.to_bytes()
        })
    );
    let done = ControlMessage::Done {
        sender: vec![SenderReport {
            sent: 3,
            ..SenderReport::default()
        }],
    };
    s.handle_input(Nanos(3), Input::Control(&done.to_frame()));
    s.handle_input(Nanos(3) + DRAIN, Input::Timer);
    let (msgs, events) = drain(&mut s, Nanos(3) + DRAIN);
    // The last, partial live interval, then the report.
    let [
        ControlMessage::Interval { intervals },
        ControlMessage::Report { receiver, records },
    ] = &msgs[..]
    else {
        panic!("{msgs:?}");
    };
    let receiver = &receiver[0];
    assert_eq!((intervals[0].received, intervals[0].lost), (2, 1));
    assert_eq!(
        (receiver.received, receiver.lost, receiver.strangers),
        (2, 1, 3)
    );
    assert_eq!(*records, 0);
    assert_eq!(
        events,
        vec![
            Event::Interval {
                direction: Direction::ClientToServer,
                intervals: intervals.clone()
            },
            Event::Finished
        ]
    );
}

#[test]
fn reverse_server_streams_only_to_the_peers_address() {
    let mut s = accepted_server(TestParams {
        reverse: true,
        ..params()
    });
    let open = Echo {
        kind: EchoKind::Open,
        session: 42,
        id: 0,
        sent_at: T0,
    }
    .to_bytes();
    let elsewhere: SocketAddr = "10.9.9.9:40000".parse().unwrap();
    s.handle_input(
        Nanos(1),
        Input::Datagram {
            from: elsewhere,
            payload: &open,
        },
    );
    assert_eq!(s.poll_event(), None);
    let nat: SocketAddr = "10.0.0.1:50000".parse().unwrap();
    s.handle_input(
        Nanos(2),
        Input::Datagram {
            from: nat,
            payload: &open,
        },
    );
    let Some(Event::StartStream(plan)) = s.poll_event() else {
        panic!("no stream");
    };
    assert_eq!((plan.to, plan.session, plan.packet_size), (nat, 42, 200));
    // The client's abort stops the stream; its end is reported, then the
    // session ends on its own.
    s.handle_input(
        Nanos(3),
        Input::Control(
            &ControlMessage::Abort {
                message: "^C".into(),
            }
            .to_frame(),
        ),
    );
    assert_eq!(s.poll_event(), Some(Event::StopStream));
    s.handle_input(
        Nanos(4),
        Input::StreamFinished(vec![SenderReport::default()]),
    );
    let (msgs, _) = drain(&mut s, Nanos(4));
    assert!(matches!(msgs[..], [ControlMessage::Done { .. }]));
    s.handle_input(Nanos(4) + SETTLE, Input::Timer);
    assert_eq!(s.poll_event(), Some(Event::Finished));
}

#[test]
fn reverse_server_without_an_open_gives_up() {
    let mut s = accepted_server(TestParams {
        reverse: true,
        ..params()
    });
    assert_eq!(s.poll_timeout(), Some(OPEN_TIMEOUT));
    s.handle_input(OPEN_TIMEOUT, Input::Timer);
    assert_eq!(
        s.poll_event(),
        Some(Event::Failed(Error::Timeout {
            stage: Stage::Open,
            after: OPEN_TIMEOUT
        }))
    );
}

fn client(p: TestParams) -> Session {
    let config = ClientConfig {
        params: p,
        token: None,
    };
    let mut s = Session::client(T0, server_addr(), config).unwrap();
    let (msgs, _) = drain(&mut s, T0);
    assert!(matches!(msgs[..], [ControlMessage::Hello { .. }]));
    s
}

fn welcome(version: u32) -> Vec<u8> {
    ControlMessage::Welcome {
        version,
        session: 7,
    }
    .to_frame()
}

#[test]
fn client_checks_params_and_the_servers_answer() {
    let bad = ClientConfig {
        params: TestParams {
            packet_size: 10,
            ..params()
        },
        token: None,
    };
    assert!(matches!(
        Session::client(T0, server_addr(), bad),
        Err(Error::OutOfRange { .. })
    ));
    let mut s = client(params());
    s.handle_input(T0, Input::Control(&welcome(99)));
    assert_eq!(
        drain(&mut s, T0).1,
        vec![Event::Failed(Error::Version {
            got: 99,
            want: PROTOCOL_VERSION
        })]
    );
    let mut s = client(params());
    s.handle_input(HANDSHAKE_TIMEOUT, Input::Timer);
    assert!(matches!(
        drain(&mut s, T0).1[..],
        [Event::Failed(Error::Timeout {
            stage: Stage::Welcome,
            ..
        })]
    ));
    let mut s = client(params());
    s.handle_input(
        T0,
        Input::Control(
            &ControlMessage::Done {
                sender: vec![SenderReport::default()],
            }
            .to_frame(),
        ),
    );
    assert_eq!(
        drain(&mut s, T0).1,
        vec![Event::Failed(Error::Unexpected {
            got: MessageKind::Done,
            stage: Stage::Welcome
        })]
    );
}

/// A forward client through its idle RTT (no replies) and stream, done
/// sent: waiting for the report.
fn client_awaiting_report(p: TestParams) -> (Session, Nanos) {
    let mut s = client(p);
    s.handle_input(T0, Input::Control(&welcome(PROTOCOL_VERSION)));
    let mut now = T0;
    while !matches!(s.phase, Phase::Results { .. }) {
        if let Some(Event::StartStream(_)) = s.poll_event() {
            s.handle_input(now, Input::StreamFinished(vec![SenderReport::default()]));
        }
        while s.poll_transmit(now).is_some() {}
        now = s.poll_timeout().unwrap();
        s.handle_input(now, Input::Timer);
        assert!(now < Nanos::from_secs(5), "stuck in {:?}", s.phase);
    }
    while s.poll_transmit(now).is_some() {}
    (s, now)
}

#[test]
fn client_refuses_records_beyond_what_it_asked_for() {
    let report = |records| {
        ControlMessage::Report {
            receiver: vec![ReceiverReport::default()],
            records,
        }
        .to_frame()
    };
    // Not asked for: none allowed.
    let (mut s, now) = client_awaiting_report(params());
    s.handle_input(now, Input::Control(&report(1)));
    assert_eq!(
        s.poll_event(),
        Some(Event::Failed(Error::TooManyRecords {
            announced: 1,
            max: 0
        }))
    );
    let logged = TestParams {
        records: true,
        ..params()
    };
    let (mut s, now) = client_awaiting_report(logged);
    s.handle_input(now, Input::Control(&report(u64::MAX)));
    assert!(matches!(
        s.poll_event(),
        Some(Event::Failed(Error::TooManyRecords { .. }))
    ));
    // Announced 2, sent 3.
    let (mut s, now) = client_awaiting_report(logged);
    s.handle_input(now, Input::Control(&report(2)));
    let three: Vec<Arrival> = (0..3)
        .map(|seq| Arrival {
            seq,
            sent_at: T0,
            received_at: T0,
        })
        .collect();
    s.handle_input(now, Input::Control(&crate::probe::records_frame(&three)));
    assert_eq!(
        s.poll_event(),
        Some(Event::Failed(Error::ExtraRecords { announced: 2 }))
    );
    // Announced 3, sent 3: results.
    let (mut s, now) = client_awaiting_report(logged);
    s.handle_input(now, Input::Control(&report(3)));
    s.handle_input(now, Input::Control(&crate::probe::records_frame(&three)));
    let Some(Event::Results(r)) = s.poll_event() else {
        panic!("no results");
    };
    assert_eq!(r.records, three);
    assert_eq!((r.rtt_idle.samples, r.rtt_idle.lost), (0, IDLE_ECHOES));
}

#[test]
fn client_reports_a_silent_server_and_an_abort() {
    let (mut s, now) = client_awaiting_report(params());
    s.handle_input(now + RESULTS_TIMEOUT, Input::Timer);
    assert_eq!(
        s.poll_event(),
        Some(Event::Failed(Error::Timeout {
            stage: Stage::Results,
            after: RESULTS_TIMEOUT
        }))
    );
    let (mut s, now) = client_awaiting_report(params());
    let abort = ControlMessage::Abort {
        message: "disk full".into(),
    };
    s.handle_input(now, Input::Control(&abort.to_frame()));
    assert_eq!(
        s.poll_event(),
        Some(Event::Aborted {
            message: "disk full".into()
        })
    );
}

#[test]
fn echo_replies_count_once_and_only_when_asked() {
    let mut s = client(params());
    s.handle_input(T0, Input::Control(&welcome(PROTOCOL_VERSION)));
    assert_eq!(s.poll_event(), Some(Event::Accepted { session: 7 }));
    // The first idle request leaves at once.
    let Some(Transmit::Datagram { to, payload }) = s.poll_transmit(Nanos(10)) else {
        panic!("no echo request");
    };
    assert_eq!(to, server_addr());
    let req = Echo::parse(&payload).unwrap();
    assert_eq!(
        (req.kind, req.id, req.sent_at),
        (EchoKind::Request, 0, Nanos(10))
    );
    let reply = Echo {
        kind: EchoKind::Reply,
        ..req
    }
    .to_bytes();
    let never = Echo {
        kind: EchoKind::Reply,
        id: 5,
        ..req
    }
    .to_bytes();
    for payload in [&reply, &reply, &never] {
        s.handle_input(
            Nanos(1010),
            Input::Datagram {
                from: server_addr(),
                payload,
            },
        );
    }
    assert_eq!(s.meter.rtt_idle.count(), 1);
    assert_eq!(s.meter.rtt_idle.max(), 1000);
}

#[test]
fn bidir_server_receives_then_streams_to_the_opened_address() {
    let p = TestParams {
        bidir: true,
        ..params()
    };
    let mut s = accepted_server(p);
    // The client's stream may come before its open: it counts.
    let now = Nanos::from_millis(1);
    s.handle_input(
        now,
        Input::Datagram {
            from: client_addr(),
            payload: &data(42, 0),
        },
    );
    let (_, events) = drain(&mut s, now);
    assert!(events.is_empty(), "{events:?}");
    let open = Echo {
        kind: EchoKind::Open,
        session: 42,
        id: 0,
        sent_at: T0,
    };
    s.handle_input(
        now,
        Input::Datagram {
            from: client_addr(),
            payload: &open.to_bytes(),
        },
    );
    let (_, events) = drain(&mut s, now);
    let [Event::StartStream(plan)] = &events[..] else {
        panic!("{events:?}");
    };
    assert_eq!((plan.to, plan.session), (client_addr(), 42));
    bidir_server_reports_then_says_done(s, now);
}

/// The rest of a bidir server's test, from its stream's start at `now`.
fn bidir_server_reports_then_says_done(mut s: Session, now: Nanos) {
    // The client's count of the server's stream is logged as such.
    let iv = ControlMessage::Interval {
        intervals: vec![LiveInterval::default()],
    };
    s.handle_input(now, Input::Control(&iv.to_frame()));
    let (_, events) = drain(&mut s, now);
    assert!(matches!(
        &events[..],
        [Event::Interval {
            direction: Direction::ServerToClient,
            ..
        }]
    ));
    // The client's stream ends first: its report waits for the drain,
    // and the server's done comes when its own stream ends.
    let done = ControlMessage::Done {
        sender: vec![SenderReport {
            sent: 2,
            ..SenderReport::default()
        }],
    };
    let t = Nanos::from_millis(600);
    s.handle_input(t, Input::Control(&done.to_frame()));
    let t = t + DRAIN;
    s.handle_input(t, Input::Timer);
    let (msgs, _) = drain(&mut s, t);
    let [.., ControlMessage::Report { receiver, .. }] = &msgs[..] else {
        panic!("{msgs:?}");
    };
    assert_eq!(
        (receiver[0].sent, receiver[0].received, receiver[0].lost),
        (2, 1, 1)
    );
    assert!(!s.is_ended(), "ended before its own stream");
    let mine = SenderReport {
        sent: 7,
        ..SenderReport::default()
    };
    s.handle_input(t, Input::StreamFinished(vec![mine.clone()]));
    let (msgs, _) = drain(&mut s, t);
    assert_eq!(msgs, vec![ControlMessage::Done { sender: vec![mine] }]);
    // Late intervals from the client are harmless while it settles.
    s.handle_input(t, Input::Control(&iv.to_frame()));
    let t = t + SETTLE;
    s.handle_input(t, Input::Timer);
    let (_, events) = drain(&mut s, t);
    assert!(matches!(events.last(), Some(Event::Finished)), "{events:?}");
    let (sent, received) = s.told();
    assert_eq!(
        (sent.unwrap()[0].sent, received.unwrap()[0].received),
        (7, 1)
    );
}

#[test]
fn bidir_client_opens_the_path_and_waits_for_both_reports() {
    let p = TestParams {
        bidir: true,
        ..params()
    };
    let (mut s, t) = client_awaiting_report(p);
    // The server's stream (the welcome's session 7): two of three packets.
    for seq in [0, 2] {
        s.handle_input(
            t,
            Input::Datagram {
                from: server_addr(),
                payload: &data(7, seq),
            },
        );
    }
    let report = ControlMessage::Report {
        receiver: vec![ReceiverReport {
            sent: 5,
            received: 5,
            ..ReceiverReport::default()
        }],
        records: 0,
    };
    s.handle_input(t, Input::Control(&report.to_frame()));
    assert!(!s.is_ended(), "no results before the server's done");
    let done = ControlMessage::Done {
        sender: vec![SenderReport {
            sent: 3,
            ..SenderReport::default()
        }],
    };
    let t = t + Nanos::from_millis(50);
    s.handle_input(t, Input::Control(&done.to_frame()));
    // The server may close once its done is out.
    s.handle_input(t, Input::ControlClosed);
    assert_eq!(s.poll_timeout(), Some(t + DRAIN));
    s.handle_input(t + DRAIN, Input::Timer);
    let events: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
    let Some(Event::Results(r)) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(r.receiver[0].received, 5);
    let back = r.back.as_ref().expect("the server's stream");
    assert_eq!(back.sender[0].sent, 3);
    let x = &back.receiver[0];
    assert_eq!((x.sent, x.received, x.lost), (3, 2, 1));
}
