//! The connection machine against what real clients send, on virtual time.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use rtsp_types::{Message, Response};

use super::*;
use crate::units::Nanos;

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9));
const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3));
const SEED: u64 = 0x0123_4567_89ab_cdef;
const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=clip\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
a=control:*\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:trackID=0\r\n";

#[derive(Debug, Default)]
struct TestCatalog {
    streams: HashMap<String, StreamInfo>,
    allowed: Vec<IpAddr>,
    ports: Option<PortPair>,
    ssrc: Option<u32>,
}

impl Catalog for TestCatalog {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        self.streams.get(path).copied()
    }
    fn sdp(&self, path: &str) -> Option<String> {
        self.streams.contains_key(path).then(|| SDP.to_owned())
    }
    fn destination_allowed(&self, _client: IpAddr, destination: IpAddr) -> bool {
        self.allowed.contains(&destination)
    }
    fn server_port(&self, _transport: &Transport) -> Option<PortPair> {
        self.ports
    }
    fn ssrc(&self, _transport: &Transport) -> Option<u32> {
        self.ssrc
    }
}

fn catalog() -> TestCatalog {
    let mut streams = HashMap::new();
    let one = StreamInfo {
        tracks: 1,
        multicast: None,
    };
    streams.insert("clip.ts".to_owned(), one);
    streams.insert(
        "live".to_owned(),
        StreamInfo {
            tracks: 2,
            multicast: Some(MulticastGroup {
                group: GROUP,
                ports: PortPair {
                    rtp: 5000,
                    rtcp: 5001,
                },
                ttl: 4,
            }),
        },
    );
    TestCatalog {
        streams,
        ..TestCatalog::default()
    }
}

fn config() -> Config {
    Config {
        server_port: Some(PortPair {
            rtp: 40000,
            rtcp: 40001,
        }),
        ..Config::default()
    }
}

thread_local! {
    /// The tests' driver, one per test thread: whether it refuses
    /// admission, and the events it took while answering admissions
    /// (handed out by [`events`] first, in order).
    static REFUSE: Cell<bool> = const { Cell::new(false) };
    static SEEN: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

/// A machine for `catalog`, with the tests' driver reset: it admits.
fn machine_with(config: Config, catalog: TestCatalog) -> Connection<TestCatalog> {
    REFUSE.set(false);
    SEEN.take();
    Connection::new(Nanos::ZERO, config, catalog, CLIENT, SEED)
}

fn machine() -> Connection<TestCatalog> {
    machine_with(config(), catalog())
}

/// The tests' driver's refusal: a budget spent, in serve's words.
fn over_rate() -> Refusal {
    let why =
        "a stream of 98.3 Mbit/s on top of the 0 bit/s in use would exceed --max-rate 10 Mbit/s";
    Refusal::new(RefusalKind::Capacity, why)
}

/// From now on the tests' driver refuses admission (the budget is gone).
fn refuse_admission(refuse: bool) {
    REFUSE.set(refuse);
}

/// Feeds bytes read at `now` as serve's driver does: every admission the
/// machine asks for is answered at once; other events wait for [`events`].
fn feed<C: Catalog>(m: &mut Connection<C>, now: Nanos, bytes: &[u8]) {
    m.handle_input(now, Input::Bytes(bytes));
    answer_admissions(m, now);
}

fn answer_admissions<C: Catalog>(m: &mut Connection<C>, now: Nanos) {
    while let Some(e) = m.poll_event() {
        if let Event::Admit { .. } = e {
            let verdict = if REFUSE.get() {
                Admission::Refused(over_rate())
            } else {
                Admission::Admitted
            };
            m.handle_input(now, Input::Admission(verdict));
        } else {
            SEEN.with_borrow_mut(|seen| seen.push(e));
        }
    }
}

const SID: &str = "0123456789abcdef";

/// Every response the machine has queued, parsed back, checked to be a
/// whole RTSP/1.0 response each.
fn responses<C: Catalog>(m: &mut Connection<C>) -> Vec<Response<Vec<u8>>> {
    let mut out = Vec::new();
    while let Some(bytes) = m.poll_transmit(Nanos::ZERO) {
        let (msg, used) = Message::<Vec<u8>>::parse(&bytes).expect("well-formed response");
        assert_eq!(used, bytes.len(), "one message per transmit");
        match msg {
            Message::Response(r) => out.push(r),
            other => panic!("not a response: {other:?}"),
        }
    }
    out
}

fn events<C: Catalog>(m: &mut Connection<C>) -> Vec<Event> {
    let mut seen = SEEN.take();
    seen.extend(std::iter::from_fn(|| m.poll_event()));
    seen
}

fn send(m: &mut Connection<TestCatalog>, now: Nanos, text: &str) -> Vec<Response<Vec<u8>>> {
    feed(m, now, text.as_bytes());
    responses(m)
}

fn header(r: &Response<Vec<u8>>, name: &str) -> Option<String> {
    let name = rtsp_types::HeaderName::try_from(name).unwrap();
    r.header(&name).map(|v| v.as_str().to_owned())
}

fn status(r: &Response<Vec<u8>>) -> u16 {
    u16::from(r.status())
}

fn one(m: &mut Connection<TestCatalog>, now: Nanos, text: &str) -> Response<Vec<u8>> {
    let mut r = send(m, now, text);
    assert_eq!(r.len(), 1, "one response to {text:?}");
    r.remove(0)
}

fn request(method: &str, url: &str, cseq: u32, extra: &str) -> String {
    format!("{method} {url} RTSP/1.0\r\nCSeq: {cseq}\r\n{extra}\r\n")
}

const URL: &str = "rtsp://127.0.0.1:8554/clip.ts";

/// OPTIONS, DESCRIBE, SETUP over `transport`, with the session id checked.
fn set_up(m: &mut Connection<TestCatalog>, transport: &str) -> Response<Vec<u8>> {
    let r = one(
        m,
        Nanos::ZERO,
        &request(
            "SETUP",
            &format!("{URL}/trackID=0"),
            1,
            &format!("Transport: {transport}\r\n"),
        ),
    );
    assert_eq!(status(&r), 200, "{r:?}");
    assert_eq!(header(&r, "Session").unwrap(), format!("{SID};timeout=60"));
    r
}

#[test]
fn options_lists_the_methods_and_echoes_cseq() {
    let mut m = machine();
    let r = one(&mut m, Nanos::ZERO, &request("OPTIONS", URL, 7, ""));
    assert_eq!(status(&r), 200);
    assert_eq!(header(&r, "CSeq").as_deref(), Some("7"));
    assert_eq!(header(&r, "Public").as_deref(), Some(PUBLIC));
    assert_eq!(header(&r, "Session"), None);
    let r = one(&mut m, Nanos::ZERO, &request("OPTIONS", "*", 8, ""));
    assert_eq!(status(&r), 200);
}

#[test]
fn describe_serves_the_catalog_sdp() {
    let mut m = machine();
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "DESCRIBE",
            &format!("{URL}?loop=1"),
            2,
            "Accept: application/sdp\r\n",
        ),
    );
    assert_eq!(status(&r), 200);
    assert_eq!(r.body().as_slice(), SDP.as_bytes());
    assert_eq!(
        header(&r, "Content-Type").as_deref(),
        Some("application/sdp")
    );
    assert_eq!(
        header(&r, "Content-Base").as_deref(),
        Some("rtsp://127.0.0.1:8554/clip.ts/")
    );
    assert_eq!(header(&r, "Content-Length"), Some(SDP.len().to_string()));

    let r = one(
        &mut m,
        Nanos::ZERO,
        &request("DESCRIBE", "rtsp://h/nope", 3, ""),
    );
    assert_eq!(status(&r), 404);
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request("DESCRIBE", URL, 4, "Accept: text/html\r\n"),
    );
    assert_eq!(status(&r), 406);
    let r = one(&mut m, Nanos::ZERO, &request("DESCRIBE", "*", 5, ""));
    assert_eq!(status(&r), 400);
    assert_eq!(
        events(&mut m),
        vec![
            Event::Refused {
                method: Some(Method::Describe),
                error: Error::NotFound
            },
            Event::Refused {
                method: Some(Method::Describe),
                error: Error::NotAcceptable
            },
            Event::Refused {
                method: Some(Method::Describe),
                error: Error::BadUri
            },
        ]
    );
}

#[test]
fn setup_udp_unicast_goes_to_the_client_ports() {
    let mut m = machine();
    let r = set_up(&mut m, "RTP/AVP/UDP;unicast;client_port=34304-34305");
    assert_eq!(
        header(&r, "Transport").as_deref(),
        Some("RTP/AVP;unicast;client_port=34304-34305;server_port=40000-40001")
    );
    assert_eq!(
        events(&mut m),
        vec![Event::Setup {
            session: SessionId(SEED),
            path: "clip.ts".into(),
            track: 0,
            transport: Transport::Udp {
                destination: CLIENT,
                ports: PortPair {
                    rtp: 34304,
                    rtcp: 34305
                },
            },
        }]
    );
    assert_eq!(m.state(), State::Ready);
}

#[test]
fn setup_tcp_interleaved_uses_the_channels_asked_for_or_picks_free_ones() {
    let mut m = machine_with(config(), catalog());
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            "rtsp://h/live/trackID=0",
            1,
            "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n",
        ),
    );
    assert_eq!(
        header(&r, "Transport").as_deref(),
        Some("RTP/AVP/TCP;unicast;interleaved=0-1")
    );
    // The second track may not reuse them; without a choice it gets 2-3.
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            "rtsp://h/live/trackID=1",
            2,
            &format!("Session: {SID}\r\nTransport: RTP/AVP/TCP;unicast;interleaved=1-2\r\n"),
        ),
    );
    assert_eq!(status(&r), 461);
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            "rtsp://h/live/trackID=1",
            3,
            &format!("Session: {SID}\r\nTransport: RTP/AVP/TCP;unicast\r\n"),
        ),
    );
    assert_eq!(
        header(&r, "Transport").as_deref(),
        Some("RTP/AVP/TCP;unicast;interleaved=2-3")
    );
    let setups: Vec<_> = events(&mut m)
        .into_iter()
        .filter_map(|e| match e {
            Event::Setup {
                track, transport, ..
            } => Some((track, transport)),
            _ => None,
        })
        .collect();
    assert_eq!(
        setups,
        vec![
            (0, Transport::Interleaved { rtp: 0, rtcp: 1 }),
            (1, Transport::Interleaved { rtp: 2, rtcp: 3 }),
        ]
    );
}

#[test]
fn setup_multicast_uses_the_stream_group() {
    let mut m = machine();
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            "rtsp://h/live/trackID=1",
            1,
            "Transport: RTP/AVP;multicast;ttl=16\r\n",
        ),
    );
    assert_eq!(status(&r), 200);
    assert_eq!(
        header(&r, "Transport").as_deref(),
        Some("RTP/AVP;multicast;ttl=4;port=5002-5003;destination=239.1.2.3")
    );
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            &format!("{URL}/trackID=0"),
            2,
            "Transport: RTP/AVP;multicast\r\n",
        ),
    );
    assert_eq!(status(&r), 455, "one session, one stream");
    let mut m = machine();
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            &format!("{URL}/trackID=0"),
            2,
            "Transport: RTP/AVP;multicast\r\n",
        ),
    );
    assert_eq!(status(&r), 461);
}

#[test]
fn a_foreign_destination_is_refused_unless_allowed() {
    let udp = |dest: &str| {
        format!("Transport: RTP/AVP;unicast;destination={dest};client_port=6000-6001\r\n")
    };
    let mut m = machine();
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request("SETUP", URL, 1, &udp("127.0.0.9")),
    );
    assert_eq!(status(&r), 403);
    assert_eq!(
        events(&mut m),
        vec![Event::Refused {
            method: Some(Method::Setup),
            error: Error::DestinationForbidden {
                client: CLIENT,
                destination: OTHER
            },
        }]
    );
    // Names are not resolved; a multicast group chosen by the client is
    // just as foreign.
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request("SETUP", URL, 2, &udp("example.com")),
    );
    assert_eq!(status(&r), 403);
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            "rtsp://h/live",
            3,
            "Transport: RTP/AVP;multicast;destination=239.9.9.9\r\n",
        ),
    );
    assert_eq!(status(&r), 403);
    // A refused offer does not hide an acceptable one after it.
    let two = "Transport: RTP/AVP;unicast;destination=127.0.0.9;client_port=6000-6001,RTP/AVP/TCP;interleaved=0-1\r\n";
    let r = one(&mut m, Nanos::ZERO, &request("SETUP", URL, 4, two));
    assert_eq!(status(&r), 200);
    events(&mut m);

    // Its own address is fine; the allow-list admits others.
    let mut m = machine();
    assert_eq!(
        status(&one(
            &mut m,
            Nanos::ZERO,
            &request("SETUP", URL, 1, &udp("127.0.0.1"))
        )),
        200
    );
    let mut cat = catalog();
    cat.allowed.push(OTHER);
    let mut m = machine_with(config(), cat);
    assert_eq!(
        status(&one(
            &mut m,
            Nanos::ZERO,
            &request("SETUP", URL, 1, &udp("127.0.0.9"))
        )),
        200
    );
    assert!(matches!(
        events(&mut m).as_slice(),
        [Event::Setup {
            transport: Transport::Udp {
                destination: OTHER,
                ..
            },
            ..
        }]
    ));
}

#[test]
fn transports_nagare_cannot_serve_get_461() {
    let mut m = machine();
    for t in [
        "RTP/SAVP;unicast;client_port=6000-6001",
        "RTP/AVP;unicast",
        "RTP/AVP;unicast;client_port=0-1",
        "RTP/AVP;unicast;client_port=65535",
        "RTP/AVP;unicast;client_port=6000-6001;mode=record",
        "RAW/RAW/UDP;unicast;client_port=6000-6001",
        "RTP/AVP/TCP;interleaved=5-5",
        // rtsp-types 0.1.3 panics on these two; they must come back 4xx.
        "RTP/AVP;unicast;dest_addr=\"\\",
        "RTP/AVP;unicast;dest_addr=\"",
    ] {
        let r = one(
            &mut m,
            Nanos::ZERO,
            &request("SETUP", URL, 1, &format!("Transport: {t}\r\n")),
        );
        assert_eq!(status(&r), 461, "{t}");
    }
    for t in [
        "RTP/AVP;mode=\"",
        "RTP/AVP;mode= \" ",
        "RTP/AVP;interleaved=x",
    ] {
        let r = one(
            &mut m,
            Nanos::ZERO,
            &request("SETUP", URL, 1, &format!("Transport: {t}\r\n")),
        );
        assert_eq!(status(&r), 400, "{t}");
    }
    let r = one(&mut m, Nanos::ZERO, &request("SETUP", URL, 1, ""));
    assert_eq!(status(&r), 461, "no Transport header");
    assert_eq!(m.state(), State::Init);
}

#[test]
fn admission_refusal_is_453_and_sets_nothing_up() {
    let mut m = machine();
    refuse_admission(true);
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            URL,
            1,
            "Transport: RTP/AVP;unicast;client_port=6000-6001\r\n",
        ),
    );
    assert_eq!(status(&r), 453);
    // The driver's reason, with the value and the limit, is the body.
    let ct = header(&r, "Content-Type");
    assert_eq!(ct.as_deref(), Some("text/plain; charset=utf-8"));
    let body = String::from_utf8(r.body().clone()).unwrap();
    assert_eq!(body, format!("{}\n", over_rate().reason));
    assert_eq!(m.state(), State::Init);
    assert_eq!(
        events(&mut m),
        vec![Event::Refused {
            method: Some(Method::Setup),
            error: Error::NotAdmitted(RefusalKind::Capacity)
        }]
    );
}

#[test]
fn an_admission_refusal_takes_the_status_of_its_kind() {
    let kinds = [
        (RefusalKind::Capacity, 453),
        (RefusalKind::Forbidden, 403),
        (RefusalKind::Gone, 404),
        (RefusalKind::Unplayable, 500),
        (
            RefusalKind::Busy {
                retry_after_secs: 2,
            },
            503,
        ),
    ];
    for (kind, code) in kinds {
        let mut m = machine();
        let setup = request(
            "SETUP",
            URL,
            1,
            "Transport: RTP/AVP;unicast;client_port=6000-6001\r\n",
        );
        m.handle_input(Nanos::ZERO, Input::Bytes(setup.as_bytes()));
        assert!(matches!(m.poll_event(), Some(Event::Admit { .. })));
        let why = format!("refused as {kind}");
        let verdict = Admission::Refused(Refusal::new(kind, why.clone()));
        m.handle_input(Nanos::ZERO, Input::Admission(verdict));
        let r = responses(&mut m);
        assert_eq!(r.len(), 1);
        assert_eq!(status(&r[0]), code, "{kind:?}");
        assert_eq!(header(&r[0], "CSeq").as_deref(), Some("1"));
        assert_eq!(r[0].body(), format!("{why}\n").as_bytes());
        assert_eq!(Error::NotAdmitted(kind).status(), code);
        // Only a refusal that time lifts says when to ask again.
        let retry = header(&r[0], "Retry-After");
        let busy = matches!(kind, RefusalKind::Busy { .. });
        assert_eq!(retry.as_deref(), busy.then_some("2"), "{kind:?}");
    }
}

#[test]
fn a_play_from_the_start_again_is_admitted_again() {
    let mut m = machine();
    set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    let s = format!("Session: {SID}\r\n");
    let from_start = format!("{s}Range: npt=0-\r\n");
    let r = one(&mut m, Nanos::ZERO, &request("PLAY", URL, 3, &from_start));
    assert_eq!(status(&r), 200);
    // The budget is gone (the HTTP API took it) before the restart.
    refuse_admission(true);
    let r = one(&mut m, Nanos::ZERO, &request("PLAY", URL, 4, &from_start));
    assert_eq!(status(&r), 453);
    // A resume is no new stream: it needs no admission.
    let r = one(&mut m, Nanos::ZERO, &request("PLAY", URL, 5, &s));
    assert_eq!(status(&r), 200);
    let plays: Vec<Event> = events(&mut m)
        .into_iter()
        .filter(|e| !matches!(e, Event::Setup { .. }))
        .collect();
    assert_eq!(
        plays,
        vec![
            Event::Play {
                session: SessionId(SEED),
                path: "clip.ts".into(),
                start: Start::Beginning,
                looping: false,
            },
            Event::Refused {
                method: Some(Method::Play),
                error: Error::NotAdmitted(RefusalKind::Capacity)
            },
        ]
    );
    assert_eq!(m.state(), State::Playing);
}

/// Status of `method` with the session id in each state of RFC 2326 A.1.
fn status_in(state: State, method: &str) -> u16 {
    let mut m = machine();
    if state != State::Init {
        set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    }
    if state == State::Playing {
        assert_eq!(
            status(&one(
                &mut m,
                Nanos::ZERO,
                &request("PLAY", URL, 2, &format!("Session: {SID}\r\n"))
            )),
            200
        );
    }
    let extra = match method {
        "SETUP" => {
            format!("Session: {SID}\r\nTransport: RTP/AVP;unicast;client_port=7000-7001\r\n")
        }
        _ if state == State::Init => String::new(),
        _ => format!("Session: {SID}\r\n"),
    };
    let url = if method == "SETUP" {
        format!("{URL}/trackID=0")
    } else {
        URL.to_owned()
    };
    let r = one(&mut m, Nanos::ZERO, &request(method, &url, 9, &extra));
    status(&r)
}

#[test]
fn the_state_table_of_rfc_2326_appendix_a() {
    use State::*;
    let table: &[(State, &str, u16)] = &[
        (Init, "OPTIONS", 200),
        (Init, "DESCRIBE", 200),
        (Init, "GET_PARAMETER", 200),
        (Init, "PLAY", 455),
        (Init, "PAUSE", 455),
        (Init, "TEARDOWN", 200),
        (Init, "SETUP", 454), // names a session that does not exist
        (Ready, "SETUP", 200),
        (Ready, "PLAY", 200),
        (Ready, "PAUSE", 455),
        (Ready, "TEARDOWN", 200),
        (Ready, "GET_PARAMETER", 200),
        (Playing, "SETUP", 200),
        (Playing, "PLAY", 200),
        (Playing, "PAUSE", 200),
        (Playing, "TEARDOWN", 200),
        (Playing, "OPTIONS", 200),
        (Playing, "RECORD", 405),
        (Playing, "ANNOUNCE", 405),
        (Playing, "SET_PARAMETER", 405),
        (Playing, "FLY", 501),
    ];
    for &(state, method, want) in table {
        assert_eq!(status_in(state, method), want, "{method} in {state}");
    }
}

#[test]
fn play_pause_teardown_drive_the_session() {
    let mut m = machine();
    one(
        &mut m,
        Nanos::ZERO,
        &request("DESCRIBE", &format!("{URL}?loop=1"), 1, ""),
    );
    set_up(&mut m, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let s = format!("Session: {SID}\r\n");
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "PLAY",
            &format!("{URL}/"),
            3,
            &format!("{s}Range: npt=0.000-\r\n"),
        ),
    );
    assert_eq!(header(&r, "Range").as_deref(), Some("npt=0.000-"));
    assert_eq!(m.state(), State::Playing);
    one(&mut m, Nanos::ZERO, &request("PAUSE", URL, 4, &s));
    assert_eq!(m.state(), State::Ready);
    one(&mut m, Nanos::ZERO, &request("PLAY", URL, 5, &s));
    one(&mut m, Nanos::ZERO, &request("PLAY", URL, 6, &s)); // no-op
    one(
        &mut m,
        Nanos::ZERO,
        &request("PLAY", URL, 7, &format!("{s}Range: npt=0-\r\n")),
    );
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request("PLAY", URL, 8, &format!("{s}Range: npt=12.5-\r\n")),
    );
    assert_eq!(status(&r), 457);
    let r = one(&mut m, Nanos::ZERO, &request("TEARDOWN", URL, 9, &s));
    assert_eq!(status(&r), 200);
    assert_eq!(header(&r, "Session"), None);
    assert_eq!(m.state(), State::Init);
    let id = SessionId(SEED);
    let play = |start| Event::Play {
        session: id,
        path: "clip.ts".into(),
        start,
        looping: true,
    };
    let ev: Vec<Event> = events(&mut m)
        .into_iter()
        .filter(|e| !matches!(e, Event::Setup { .. }))
        .collect();
    assert_eq!(
        ev,
        vec![
            play(Start::Beginning),
            Event::Pause { session: id },
            play(Start::Resume),
            play(Start::Beginning),
            Event::Refused {
                method: Some(Method::Play),
                error: Error::SeekUnsupported { start_ms: 12_500 }
            },
            Event::SessionClosed {
                session: id,
                reason: SessionEnd::Teardown
            },
        ]
    );
    // A new session gets a new id.
    set_up_with_id(&mut m, "0123456789abcdf0");
}

fn set_up_with_id(m: &mut Connection<TestCatalog>, id: &str) {
    let r = one(
        m,
        Nanos::ZERO,
        &request(
            "SETUP",
            URL,
            20,
            "Transport: RTP/AVP;unicast;client_port=6000-6001\r\n",
        ),
    );
    assert_eq!(header(&r, "Session").unwrap(), format!("{id};timeout=60"));
}

#[test]
fn requests_for_another_session_get_454() {
    let mut m = machine();
    set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    for method in [
        "PLAY",
        "PAUSE",
        "TEARDOWN",
        "GET_PARAMETER",
        "OPTIONS",
        "SETUP",
    ] {
        let r = one(
            &mut m,
            Nanos::ZERO,
            &request(
                method,
                URL,
                3,
                "Session: deadbeefdeadbeef\r\nTransport: RTP/AVP;unicast;client_port=6000-6001\r\n",
            ),
        );
        assert_eq!(status(&r), 454, "{method}");
    }
    // PLAY without its session, and a second session on one connection.
    assert_eq!(
        status(&one(&mut m, Nanos::ZERO, &request("PLAY", URL, 4, ""))),
        454
    );
    let r = one(
        &mut m,
        Nanos::ZERO,
        &request(
            "SETUP",
            URL,
            5,
            "Transport: RTP/AVP;unicast;client_port=6000-6001\r\n",
        ),
    );
    assert_eq!(status(&r), 455);
    assert_eq!(m.state(), State::Ready);
}

#[test]
fn protocol_errors_get_the_right_status() {
    let mut m = machine();
    let cases: &[(&str, u16)] = &[
        ("OPTIONS * RTSP/2.0\r\nCSeq: 1\r\n\r\n", 505),
        (
            "OPTIONS * RTSP/1.0\r\nCSeq: 2\r\nRequire: play.basic\r\n\r\n",
            551,
        ),
        ("OPTIONS * RTSP/1.0\r\n\r\n", 400),
        ("OPTIONS * RTSP/1.0\r\nCSeq: x\r\n\r\n", 400),
        ("OPTIONS /relative RTSP/1.0\r\nCSeq: 3\r\n\r\n", 400),
        (
            "PLAY rtsp://h/clip.ts RTSP/1.0\r\nCSeq: 4\r\nRange: smpte=0:10:00-\r\n\r\n",
            455,
        ),
    ];
    for (text, want) in cases {
        let r = one(&mut m, Nanos::ZERO, text);
        assert_eq!(status(&r), *want, "{text:?}");
    }
    let r = one(
        &mut m,
        Nanos::ZERO,
        "OPTIONS * RTSP/1.0\r\nCSeq: 2\r\nRequire: play.basic\r\n\r\n",
    );
    assert_eq!(header(&r, "Unsupported").as_deref(), Some("play.basic"));
    let r = one(
        &mut m,
        Nanos::ZERO,
        "OPTIONS * RTSP/1.0\r\nCSeq: 2\r\nRequire: a\nX-Injected: 1\r\n\r\n",
    );
    assert_eq!(header(&r, "Unsupported").as_deref(), Some("aX-Injected: 1"));
    assert_eq!(header(&r, "X-Injected"), None);
    let r = one(
        &mut m,
        Nanos::ZERO,
        "ANNOUNCE rtsp://h/x RTSP/1.0\r\nCSeq: 9\r\n\r\n",
    );
    assert_eq!(header(&r, "Allow").as_deref(), Some(PUBLIC));
    let r = one(
        &mut m,
        Nanos::ZERO,
        "OPTIONS /relative RTSP/1.0\r\nCSeq: 3\r\n\r\n",
    );
    assert_eq!(
        header(&r, "CSeq").as_deref(),
        Some("3"),
        "the 400 still names its request"
    );
    assert!(!m.is_closed(), "a bad URI keeps the connection");
}

/// FFmpeg 5.1 (Lavf59.27.100), captured from `ffprobe -rtsp_transport udp`.
const FFMPEG_UDP: &[&[u8]] = &[
    b"OPTIONS rtsp://127.0.0.1:8554/clip.ts?loop=1 RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"DESCRIBE rtsp://127.0.0.1:8554/clip.ts?loop=1 RTSP/1.0\r\nAccept: application/sdp\r\nCSeq: 2\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"SETUP rtsp://127.0.0.1:8554/clip.ts/trackID=0 RTSP/1.0\r\nTransport: RTP/AVP/UDP;unicast;client_port=34304-34305\r\nCSeq: 3\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"PLAY rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nRange: npt=0.000-\r\nCSeq: 4\r\nUser-Agent: Lavf59.27.100\r\nSession: 0123456789abcdef\r\n\r\n",
    b"TEARDOWN rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 5\r\nUser-Agent: Lavf59.27.100\r\nSession: 0123456789abcdef\r\n\r\n",
];

/// FFmpeg 5.1 with `-rtsp_transport tcp`, captured.
const FFMPEG_TCP: &[&[u8]] = &[
    b"OPTIONS rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"DESCRIBE rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nAccept: application/sdp\r\nCSeq: 2\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"SETUP rtsp://127.0.0.1:8554/clip.ts/trackID=0 RTSP/1.0\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\nCSeq: 3\r\nUser-Agent: Lavf59.27.100\r\n\r\n",
    b"PLAY rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nRange: npt=0.000-\r\nCSeq: 4\r\nUser-Agent: Lavf59.27.100\r\nSession: 0123456789abcdef\r\n\r\n",
    // RTCP receiver report on channel 1, as FFmpeg sends it over TCP.
    b"$\x01\x00\x08\x80\xc9\x00\x01\x00\x00\x00\x01",
    b"TEARDOWN rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 5\r\nUser-Agent: Lavf59.27.100\r\nSession: 0123456789abcdef\r\n\r\n",
];

/// GStreamer 1.22 rtspsrc (default protocols), captured; it keeps alive
/// with GET_PARAMETER.
const GSTREAMER_UDP: &[&[u8]] = &[
    b"OPTIONS rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: GStreamer/1.22.0\r\nDate: Mon, 23 Nov 2026 11:29:48 GMT\r\n\r\n",
    b"DESCRIBE rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 2\r\nUser-Agent: GStreamer/1.22.0\r\nAccept: application/sdp\r\nDate: Mon, 23 Nov 2026 11:29:48 GMT\r\n\r\n",
    b"SETUP rtsp://127.0.0.1:8554/clip.ts/trackID=0 RTSP/1.0\r\nCSeq: 3\r\nUser-Agent: GStreamer/1.22.0\r\nTransport: RTP/AVP;unicast;client_port=59656-59657\r\nDate: Mon, 23 Nov 2026 11:29:48 GMT\r\n\r\n",
    b"PLAY rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 4\r\nUser-Agent: GStreamer/1.22.0\r\nRange: npt=0-\r\nSession: 0123456789abcdef\r\nDate: Mon, 23 Nov 2026 11:29:48 GMT\r\n\r\n",
    b"GET_PARAMETER rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 5\r\nUser-Agent: GStreamer/1.22.0\r\nSession: 0123456789abcdef\r\nDate: Mon, 23 Nov 2026 11:29:51 GMT\r\n\r\n",
    b"TEARDOWN rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 6\r\nUser-Agent: GStreamer/1.22.0\r\nSession: 0123456789abcdef\r\nDate: Mon, 23 Nov 2026 11:29:53 GMT\r\n\r\n",
];

/// Debian's cvlc 3.0 (built without live555) opens rtsp:// URLs with its
/// SAT>IP module: SETUP of the bare URL, then PLAY of `/stream=0`.
/// Captured.
const VLC_SATIP: &[&[u8]] = &[
    b"SETUP rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 0\r\nTransport: RTP/AVP;unicast;client_port=9204-9205\r\n\r\n",
    b"PLAY rtsp://127.0.0.1:8554/stream=0 RTSP/1.0\r\nCSeq: 1\r\nSession: 0123456789abcdef\r\n\r\n",
    b"TEARDOWN rtsp://127.0.0.1:8554/stream=0 RTSP/1.0\r\nCSeq: 2\r\nSession: 0123456789abcdef\r\n\r\n",
];

/// VLC builds with live555 (the official Windows and macOS ones), in
/// live555's RTSPClient request layout; reproduced, not captured.
const VLC_LIVE555: &[&[u8]] = &[
    b"OPTIONS rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 2\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\n\r\n",
    b"DESCRIBE rtsp://127.0.0.1:8554/clip.ts RTSP/1.0\r\nCSeq: 3\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\nAccept: application/sdp\r\n\r\n",
    b"SETUP rtsp://127.0.0.1:8554/clip.ts/trackID=0 RTSP/1.0\r\nCSeq: 4\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n",
    b"PLAY rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 5\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\nSession: 0123456789abcdef\r\nRange: npt=0.000-\r\n\r\n",
    b"GET_PARAMETER rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 6\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\nSession: 0123456789abcdef\r\n\r\n",
    b"TEARDOWN rtsp://127.0.0.1:8554/clip.ts/ RTSP/1.0\r\nCSeq: 7\r\nUser-Agent: LibVLC/3.0.18 (LIVE555 Streaming Media v2022.04.26)\r\nSession: 0123456789abcdef\r\n\r\n",
];

/// Runs a transcript cut into `step`-byte pieces; returns (status, CSeq)
/// of each response and the events.
fn run(transcript: &[&[u8]], step: usize) -> (Vec<(u16, String)>, Vec<Event>) {
    let mut m = machine();
    let all: Vec<u8> = transcript.concat();
    let mut out = Vec::new();
    for chunk in all.chunks(step) {
        feed(&mut m, Nanos::ZERO, chunk);
        out.extend(
            responses(&mut m)
                .iter()
                .map(|r| (status(r), header(r, "CSeq").unwrap())),
        );
    }
    (out, events(&mut m))
}

fn check_transcript(transcript: &[&[u8]], transport: Transport, looping: bool) {
    let requests = transcript.iter().filter(|r| !r.starts_with(b"$")).count();
    let whole = run(transcript, usize::MAX);
    assert_eq!(whole.0.len(), requests);
    assert!(whole.0.iter().all(|(s, _)| *s == 200), "{:?}", whole.0);
    for step in [1, 2, 5, 17, 100] {
        assert_eq!(run(transcript, step), whole, "cut every {step} bytes");
    }
    let id = SessionId(SEED);
    let path = "clip.ts".to_owned();
    let mut want = vec![
        Event::Setup {
            session: id,
            path: path.clone(),
            track: 0,
            transport,
        },
        Event::Play {
            session: id,
            path,
            start: Start::Beginning,
            looping,
        },
    ];
    // Each receiver report on the track's RTCP channel, handed on whole.
    want.extend(
        transcript
            .iter()
            .filter(|r| r.starts_with(b"$"))
            .map(|r| Event::Rtcp {
                session: id,
                track: 0,
                data: r[4..].to_vec(),
            }),
    );
    want.push(Event::SessionClosed {
        session: id,
        reason: SessionEnd::Teardown,
    });
    assert_eq!(whole.1, want);
}

#[test]
fn ffmpeg_gstreamer_and_vlc_transcripts_play() {
    let udp = |rtp| Transport::Udp {
        destination: CLIENT,
        ports: PortPair { rtp, rtcp: rtp + 1 },
    };
    let tcp = Transport::Interleaved { rtp: 0, rtcp: 1 };
    check_transcript(FFMPEG_UDP, udp(34304), true);
    check_transcript(FFMPEG_TCP, tcp, false);
    check_transcript(GSTREAMER_UDP, udp(59656), false);
    check_transcript(VLC_SATIP, udp(9204), false);
    check_transcript(VLC_LIVE555, tcp, false);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let mut m = machine();
    let text: String = (1..=5).map(|i| request("OPTIONS", "*", i, "")).collect();
    let r = send(&mut m, Nanos::ZERO, &text);
    let cseqs: Vec<String> = r.iter().map(|r| header(r, "CSeq").unwrap()).collect();
    assert_eq!(cseqs, ["1", "2", "3", "4", "5"]);
}

/// A machine's config with tight limits: 512 header bytes, 8 headers,
/// 64 body bytes, 3 responses pending.
fn small_limits() -> Config {
    Config {
        limits: Limits {
            header_bytes: 512,
            headers: 8,
            body_bytes: 64,
            pending_responses: 3,
        },
        ..config()
    }
}

#[test]
fn limits_answer_and_close() {
    let small = small_limits();
    let new = || machine_with(small, catalog());

    let mut m = new();
    let r = send(&mut m, Nanos::ZERO, &"x".repeat(600));
    assert_eq!(
        (status(&r[0]), r[0].reason_phrase()),
        (400, "Header Section Too Large")
    );
    assert!(m.is_closed());
    assert_eq!(
        events(&mut m).last(),
        Some(&Event::Closed(CloseReason::Protocol(
            Error::HeaderTooLarge { limit: 512 }
        )))
    );
    // Nothing more is read once closed.
    assert!(send(&mut m, Nanos::ZERO, &request("OPTIONS", "*", 1, "")).is_empty());

    let mut m = new();
    let r = send(
        &mut m,
        Nanos::ZERO,
        &request("OPTIONS", "*", 1, &"A: b\r\n".repeat(9)),
    );
    assert_eq!(status(&r[0]), 400);
    assert!(m.is_closed());

    let mut m = new();
    let r = send(
        &mut m,
        Nanos::ZERO,
        &request("GET_PARAMETER", "*", 1, "Content-Length: 65\r\n"),
    );
    assert_eq!(status(&r[0]), 413);
    assert!(m.is_closed());

    // The driver did not take responses: the fourth pipelined request
    // is one too many.
    let mut m = new();
    let text: String = (1..=6).map(|i| request("OPTIONS", "*", i, "")).collect();
    feed(&mut m, Nanos::ZERO, text.as_bytes());
    let r = responses(&mut m);
    let got: Vec<(u16, String)> = r
        .iter()
        .map(|r| (status(r), header(r, "CSeq").unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (200, "1".into()),
            (200, "2".into()),
            (200, "3".into()),
            (400, "4".into())
        ]
    );
    assert!(m.is_closed());

    // Requests without CSeq count against the same limit.
    let mut m = new();
    let text = "OPTIONS * RTSP/1.0\r\n\r\n".repeat(6);
    feed(&mut m, Nanos::ZERO, text.as_bytes());
    assert_eq!(responses(&mut m).len(), 4);
    assert!(m.is_closed());
}

#[test]
fn buffered_bytes_stay_within_the_limits() {
    let mut m = machine();
    let limits = Limits::default();
    // A slow header that never ends, a byte at a time.
    for i in 0..limits.header_bytes + 100 {
        feed(&mut m, Nanos(i as u64), b"a");
        assert!(m.buffered() <= limits.header_bytes + limits.body_bytes);
    }
    assert!(m.is_closed());
}

#[test]
fn interleaved_frames_are_skipped_and_keep_the_session_alive() {
    let mut m = machine();
    set_up(&mut m, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let mut frame = vec![b'$', 1, 0x10, 0];
    frame.extend(vec![0u8; 0x1000]);
    let t = Nanos::from_secs(50);
    feed(&mut m, t, &frame);
    assert_eq!(m.counters().interleaved_frames, 1);
    assert_eq!(m.counters().interleaved_bytes, 0x1000);
    assert_eq!(m.poll_timeout(), Some(t + Nanos::from_secs(60)));
    assert_eq!(m.buffered(), 0);
}

#[test]
fn sessions_time_out_on_virtual_time_unless_kept_alive() {
    let mut m = machine();
    assert_eq!(
        m.poll_timeout(),
        Some(Nanos::from_secs(60)),
        "idle connection"
    );
    set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    events(&mut m);
    let s = format!("Session: {SID}\r\n");
    // Keep-alive at 50 s moves the deadline to 110 s.
    one(
        &mut m,
        Nanos::from_secs(50),
        &request("GET_PARAMETER", URL, 2, &s),
    );
    assert_eq!(m.poll_timeout(), Some(Nanos::from_secs(110)));
    // RTCP seen by the driver on UDP counts too.
    m.handle_input(Nanos::from_secs(100), Input::KeepAlive);
    assert_eq!(m.poll_timeout(), Some(Nanos::from_secs(160)));
    // An early timer does nothing; the real one reaps the session.
    m.handle_input(Nanos::from_secs(159), Input::Timer);
    assert_eq!(m.state(), State::Ready);
    m.handle_input(Nanos::from_secs(160), Input::Timer);
    assert_eq!(
        events(&mut m),
        vec![
            Event::SessionClosed {
                session: SessionId(SEED),
                reason: SessionEnd::TimedOut
            },
            Event::Closed(CloseReason::TimedOut),
        ]
    );
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn a_closed_connection_ends_its_session() {
    let mut m = machine();
    set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    events(&mut m);
    m.handle_input(Nanos::from_secs(1), Input::Closed);
    assert_eq!(
        events(&mut m),
        vec![
            Event::SessionClosed {
                session: SessionId(SEED),
                reason: SessionEnd::ConnectionClosed
            },
            Event::Closed(CloseReason::PeerClosed),
        ]
    );
}

#[test]
fn garbage_gets_4xx_and_never_a_panic() {
    let inputs: &[&[u8]] = &[
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"OPTIONS\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
        b"SETUP rtsp://h/clip.ts RTSP/1.0\r\nCSeq: 1\r\nTransport: ,,,;;;==\r\n\r\n",
        b"SETUP rtsp://h/clip.ts RTSP/1.0\r\nCSeq: 1\r\nSession: \r\nTransport: RTP/AVP\r\n\r\n",
        b"PLAY rtsp://h/clip.ts RTSP/1.0\r\nCSeq: 1\r\nRange: npt=99999999999999999999-\r\n\r\n",
        b"OPTIONS * RTSP/1.0\r\nCSeq: 4294967296\r\n\r\n",
    ];
    for input in inputs {
        let mut m = machine();
        feed(&mut m, Nanos::ZERO, input);
        let r = responses(&mut m);
        assert!(!r.is_empty(), "{:?}", String::from_utf8_lossy(input));
        assert!(r.iter().all(|r| (400..600).contains(&status(r))), "{r:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes, cut anywhere: every response is a well-formed
    /// RTSP/1.0 response and the buffer stays within the limits.
    #[test]
    fn arbitrary_input_gets_well_formed_responses(
        data in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(1usize..64, 1..16),
    ) {
        let mut m = machine();
        let mut rest = &data[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            feed(&mut m, Nanos(i as u64), &rest[..n]);
            rest = &rest[n..];
            i += 1;
            for r in responses(&mut m) {
                prop_assert_eq!(r.version(), rtsp_types::Version::V1_0);
            }
            let l = Limits::default();
            prop_assert!(m.buffered() <= l.header_bytes + l.body_bytes);
        }
    }

    /// Mutated real requests are answered, never panicked on.
    #[test]
    fn mutated_transcripts_get_answers(
        index in 0usize..FFMPEG_UDP.len(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        let mut bytes = FFMPEG_UDP[index].to_vec();
        for (at, b) in flips {
            let at = at % bytes.len();
            bytes[at] = b;
        }
        let mut m = machine();
        feed(&mut m, Nanos::ZERO, &bytes);
        m.handle_input(Nanos::ZERO, Input::Closed);
        responses(&mut m);
        prop_assert!(m.is_closed());
    }
}

/// A connection that needs the password "s3cret-token".
fn guarded() -> Connection<TestCatalog> {
    let credentials = std::sync::Arc::new(Credentials::new("s3cret-token"));
    machine().with_guard(Guard::new(credentials, [3; NONCE_KEY_LEN]))
}

/// The one transmit, as bytes.
fn raw_one(m: &mut Connection<TestCatalog>, now: Nanos, text: &str) -> String {
    feed(m, now, text.as_bytes());
    let out = m.poll_transmit(now).expect("a response");
    assert!(m.poll_transmit(now).is_none());
    String::from_utf8(out).unwrap()
}

/// The nonce of the MD5 challenge in a 401.
fn md5_nonce(response: &str) -> String {
    let line = response
        .lines()
        .find(|l| l.starts_with("WWW-Authenticate: Digest") && l.contains("algorithm=MD5"))
        .expect("an MD5 challenge");
    let start = line.find("nonce=\"").unwrap() + 7;
    line[start..].split('"').next().unwrap().to_owned()
}

/// An `Authorization` line as FFmpeg writes it for MD5 without qop.
fn ffmpeg_digest(password: &str, nonce: &str, method: &str, uri: &str) -> String {
    use md5::{Digest, Md5};
    let h = |s: String| format!("{:x}", Md5::digest(s.as_bytes()));
    let ha1 = h(format!("user:nagare:{password}"));
    let ha2 = h(format!("{method}:{uri}"));
    let response = h(format!("{ha1}:{nonce}:{ha2}"));
    format!(
        "Authorization: Digest username=\"user\", realm=\"nagare\", nonce=\"{nonce}\", \
         uri=\"{uri}\", response=\"{response}\"\r\n"
    )
}

#[test]
fn a_guarded_connection_challenges_and_admits_digest_and_basic() {
    let mut m = guarded();
    // OPTIONS stays open.
    let r = one(&mut m, Nanos::ZERO, &request("OPTIONS", URL, 1, ""));
    assert_eq!(status(&r), 200);
    // Anything else without credentials: 401, three challenges, each on
    // its own line, SHA-256 first.
    let t = Nanos::from_secs(2);
    let text = raw_one(&mut m, t, &request("DESCRIBE", URL, 2, ""));
    assert!(text.starts_with("RTSP/1.0 401 Unauthorized\r\n"), "{text}");
    let challenges: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("WWW-Authenticate: "))
        .collect();
    assert_eq!(challenges.len(), 3, "{text}");
    assert!(challenges[0].ends_with("algorithm=SHA-256"), "{text}");
    assert!(challenges[1].ends_with("algorithm=MD5"), "{text}");
    assert_eq!(challenges[2], "Basic realm=\"nagare\"");
    assert!(text.contains("\r\nCSeq: 2\r\n") && text.ends_with("\r\n\r\n"));
    assert_eq!(
        events(&mut m),
        vec![Event::Refused {
            method: Some(Method::Describe),
            error: Error::Unauthorized(AuthFailure::Missing)
        }]
    );
    // FFmpeg's answer to the MD5 challenge passes.
    let nonce = md5_nonce(&text);
    let auth = ffmpeg_digest("s3cret-token", &nonce, "DESCRIBE", URL);
    let r = one(&mut m, t, &request("DESCRIBE", URL, 3, &auth));
    assert_eq!(status(&r), 200);
    assert_eq!(r.body().as_slice(), SDP.as_bytes());
    // A wrong password, by Digest and by Basic, sets nothing up.
    let setup = format!("{URL}/trackID=0");
    let transport = "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n";
    let wrong = ffmpeg_digest("s3cret-tokeN", &nonce, "SETUP", &setup);
    let r = one(
        &mut m,
        t,
        &request("SETUP", &setup, 4, &format!("{wrong}{transport}")),
    );
    assert_eq!(status(&r), 401);
    // "user:wrong-token", "user:s3cret-token"
    let basic = |b64: &str| format!("Authorization: Basic {b64}\r\n{transport}");
    let r = one(
        &mut m,
        t,
        &request("SETUP", &setup, 5, &basic("dXNlcjp3cm9uZy10b2tlbg==")),
    );
    assert_eq!(status(&r), 401);
    assert!(events(&mut m).iter().all(|e| matches!(
        e,
        Event::Refused {
            error: Error::Unauthorized(AuthFailure::WrongCredentials),
            ..
        }
    )));
    let r = one(
        &mut m,
        t,
        &request("SETUP", &setup, 6, &basic("dXNlcjpzM2NyZXQtdG9rZW4=")),
    );
    assert_eq!(status(&r), 200);
    assert!(matches!(events(&mut m)[..], [Event::Setup { .. }]));
}

#[test]
fn a_stale_nonce_is_told_so_and_a_fresh_one_passes() {
    let mut m = guarded();
    let text = raw_one(&mut m, Nanos::ZERO, &request("DESCRIBE", URL, 1, ""));
    let old = md5_nonce(&text);
    let late = NONCE_LIFETIME + Nanos::from_secs(1);
    let auth = ffmpeg_digest("s3cret-token", &old, "DESCRIBE", URL);
    let text = raw_one(&mut m, late, &request("DESCRIBE", URL, 2, &auth));
    assert!(text.starts_with("RTSP/1.0 401"), "{text}");
    assert_eq!(text.matches("stale=true").count(), 2, "{text}");
    let fresh = md5_nonce(&text);
    assert_ne!(fresh, old);
    let auth = ffmpeg_digest("s3cret-token", &fresh, "DESCRIBE", URL);
    let r = one(&mut m, late, &request("DESCRIBE", URL, 3, &auth));
    assert_eq!(status(&r), 200);
}

#[test]
fn setup_names_the_servers_port_pair_and_ssrc_when_the_catalog_has_them() {
    let with = || TestCatalog {
        ports: PortPair::from_rtp(7000),
        ssrc: Some(0x1234_abcd),
        ..catalog()
    };
    let mut m = machine_with(config(), with());
    let r = set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    let t = header(&r, "Transport").unwrap();
    assert!(t.contains("server_port=7000-7001"), "{t}");
    assert!(t.contains("ssrc=1234ABCD"), "{t}");
    // Over TCP the SSRC, and no server port.
    let mut m = machine_with(config(), with());
    let r = set_up(&mut m, "RTP/AVP/TCP;unicast;interleaved=0-1");
    let t = header(&r, "Transport").unwrap();
    assert!(!t.contains("server_port"), "{t}");
    assert!(t.contains("ssrc=1234ABCD"), "{t}");
    // Without them, no SSRC, and the configured server port.
    let r = set_up(&mut machine(), "RTP/AVP;unicast;client_port=6000-6001");
    let t = header(&r, "Transport").unwrap();
    assert!(t.contains("server_port=40000-40001"), "{t}");
    assert!(!t.contains("ssrc"), "{t}");
}

/// A SETUP and a PLAY pipelined behind it, in one read.
fn setup_then_play() -> String {
    let setup = request(
        "SETUP",
        &format!("{URL}/trackID=0"),
        1,
        "Transport: RTP/AVP;unicast;client_port=6000-6001\r\n",
    );
    let play = request("PLAY", URL, 2, &format!("Session: {SID}\r\n"));
    format!("{setup}{play}")
}

const UDP_6000: Transport = Transport::Udp {
    destination: CLIENT,
    ports: PortPair {
        rtp: 6000,
        rtcp: 6001,
    },
};

#[test]
fn admission_is_the_drivers_and_holds_the_requests_behind_it() {
    let mut m = machine();
    let t0 = Nanos::from_millis(10);
    m.handle_input(t0, Input::Bytes(setup_then_play().as_bytes()));
    // Nothing is answered, set up or read on until the driver decides.
    assert!(m.poll_transmit(t0).is_none());
    assert_eq!(
        std::iter::from_fn(|| m.poll_event()).collect::<Vec<_>>(),
        [Event::Admit {
            path: "clip.ts".into(),
            transport: UDP_6000,
            restart: false,
        }]
    );
    assert!(m.is_admitting());
    assert_eq!(m.state(), State::Init);
    // More bytes while it waits are held, not read.
    let t1 = t0 + Nanos::from_millis(5);
    let keep_alive = request("GET_PARAMETER", URL, 3, &format!("Session: {SID}\r\n"));
    m.handle_input(t1, Input::Bytes(keep_alive.as_bytes()));
    assert!(m.poll_transmit(t1).is_none());
    assert!(m.poll_event().is_none());
    // The driver admits 5 ms later: SETUP's answer, then the held PLAY's
    // and GET_PARAMETER's, in request order.
    let t2 = t1 + Nanos::from_millis(5);
    m.handle_input(t2, Input::Admission(Admission::Admitted));
    assert!(!m.is_admitting());
    let got: Vec<(u16, String)> = responses(&mut m)
        .iter()
        .map(|r| (status(r), header(r, "CSeq").unwrap()))
        .collect();
    assert_eq!(
        got,
        [(200, "1".into()), (200, "2".into()), (200, "3".into())]
    );
    assert_eq!(
        std::iter::from_fn(|| m.poll_event()).collect::<Vec<_>>(),
        [
            Event::Setup {
                session: SessionId(SEED),
                path: "clip.ts".into(),
                track: 0,
                transport: UDP_6000,
            },
            Event::Play {
                session: SessionId(SEED),
                path: "clip.ts".into(),
                start: Start::Beginning,
                looping: false,
            },
        ]
    );
    assert_eq!(m.state(), State::Playing);
    // The session's clock runs from the last request read: t2.
    assert_eq!(m.poll_timeout(), Some(t2 + config().session_timeout));
    // An answer with nothing asked changes nothing.
    m.handle_input(t2, Input::Admission(Admission::Refused(over_rate())));
    assert!(m.poll_transmit(t2).is_none());
    assert_eq!(m.state(), State::Playing);
}

#[test]
fn a_refused_admission_is_453_and_the_requests_behind_it_find_no_session() {
    let mut m = machine();
    m.handle_input(Nanos::ZERO, Input::Bytes(setup_then_play().as_bytes()));
    assert!(matches!(m.poll_event(), Some(Event::Admit { .. })));
    m.handle_input(
        Nanos::from_millis(1),
        Input::Admission(Admission::Refused(over_rate())),
    );
    let got: Vec<u16> = responses(&mut m).iter().map(status).collect();
    assert_eq!(got, [453, 454]);
    assert_eq!(
        std::iter::from_fn(|| m.poll_event()).collect::<Vec<_>>(),
        [
            Event::Refused {
                method: Some(Method::Setup),
                error: Error::NotAdmitted(RefusalKind::Capacity)
            },
            Event::Refused {
                method: Some(Method::Play),
                error: Error::SessionNotFound
            },
        ]
    );
    assert_eq!(m.state(), State::Init);
}

#[test]
fn a_restart_waits_for_admission_and_a_timeout_meanwhile_ends_it() {
    let mut m = machine();
    set_up(&mut m, "RTP/AVP;unicast;client_port=6000-6001");
    let s = format!("Session: {SID}\r\nRange: npt=0-\r\n");
    assert_eq!(
        status(&one(&mut m, Nanos::ZERO, &request("PLAY", URL, 2, &s))),
        200
    );
    events(&mut m);
    // PLAY from the start again asks, with the session's transport.
    m.handle_input(
        Nanos::from_secs(1),
        Input::Bytes(request("PLAY", URL, 3, &s).as_bytes()),
    );
    assert_eq!(
        m.poll_event(),
        Some(Event::Admit {
            path: "clip.ts".into(),
            transport: UDP_6000,
            restart: true,
        })
    );
    // The driver never answers: the session times out as any other.
    let late = Nanos::from_secs(1) + config().session_timeout;
    assert_eq!(m.poll_timeout(), Some(late));
    m.handle_input(late, Input::Timer);
    assert!(m.is_closed());
    m.handle_input(late, Input::Admission(Admission::Admitted));
    assert!(m.poll_transmit(late).is_none());
    assert_eq!(
        std::iter::from_fn(|| m.poll_event()).collect::<Vec<_>>(),
        [
            Event::SessionClosed {
                session: SessionId(SEED),
                reason: SessionEnd::TimedOut
            },
            Event::Closed(CloseReason::TimedOut),
        ]
    );
}

#[test]
fn bytes_held_behind_an_admission_are_bounded() {
    let small = small_limits();
    let mut m = machine_with(small, catalog());
    m.handle_input(Nanos::ZERO, Input::Bytes(setup_then_play().as_bytes()));
    assert!(m.is_admitting());
    let limit = m.held_limit();
    assert_eq!(limit, 3 * (512 + 64));
    // A driver that never answers, and a client that keeps sending:
    // the connection closes before more than the limit is held.
    let chunk = request("GET_PARAMETER", URL, 9, "");
    let mut fed = 0;
    while !m.is_closed() {
        m.handle_input(Nanos::ZERO, Input::Bytes(chunk.as_bytes()));
        fed += chunk.len();
        assert!(fed <= limit + chunk.len(), "{fed} bytes taken");
        assert!(m.buffered() <= 512 + 64 + limit);
    }
    let r = responses(&mut m);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (status(&r[0]), r[0].reason_phrase()),
        (400, "Too Many Pipelined Requests")
    );
}
