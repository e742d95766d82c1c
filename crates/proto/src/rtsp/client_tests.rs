//! The client machine against the server machine, on virtual time, and
//! against replies a broken or hostile server sends.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;
use crate::units::Nanos;

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const URL: &str = "rtsp://127.0.0.1:8554/clip.ts";
const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=clip\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
a=control:*\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:trackID=0\r\n";
const PORTS: PortPair = PortPair {
    rtp: 6000,
    rtcp: 6001,
};

/// One stream, `clip.ts`, that anyone may play.
struct OneClip;

impl Catalog for OneClip {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        (path == "clip.ts").then_some(StreamInfo {
            tracks: 1,
            multicast: None,
        })
    }
    fn sdp(&self, path: &str) -> Option<String> {
        (path == "clip.ts").then(|| SDP.to_owned())
    }
    fn destination_allowed(&self, _client: IpAddr, _destination: IpAddr) -> bool {
        false
    }
    fn server_port(&self, _transport: &Transport) -> Option<PortPair> {
        None
    }
}

fn server(now: Nanos) -> Connection<OneClip> {
    let config = Config {
        session_timeout: Nanos::from_secs(30),
        ..Config::default()
    };
    Connection::new(now, config, OneClip, CLIENT, 7)
}

fn client(url: &str) -> Client {
    Client::new(Nanos::ZERO, url, ClientConfig::new(PORTS)).expect("an rtsp:// URL")
}

/// Moves every queued message both ways until neither side has more,
/// admitting every stream the server asks about; returns the server's
/// other events.
fn exchange(now: Nanos, c: &mut Client, s: &mut Connection<OneClip>) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let mut moved = false;
        while let Some(req) = c.poll_transmit(now) {
            s.handle_input(now, Input::Bytes(&req));
            moved = true;
        }
        while let Some(e) = s.poll_event() {
            match e {
                Event::Admit { .. } => s.handle_input(now, Input::Admission(Admission::Admitted)),
                e => events.push(e),
            }
        }
        while let Some(reply) = s.poll_transmit(now) {
            c.handle_input(now, ClientInput::Bytes(&reply));
            moved = true;
        }
        if !moved {
            return events;
        }
    }
}

fn client_events(c: &mut Client) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn plays_keeps_alive_and_tears_down_against_the_server_machine() {
    let mut c = client(URL);
    let mut s = server(Nanos::ZERO);
    let events = exchange(Nanos::ZERO, &mut c, &mut s);
    assert!(
        matches!(&events[..], [Event::Setup { path, track: 0, transport, .. }, Event::Play { .. }]
            if path == "clip.ts" && *transport == Transport::Udp { destination: CLIENT, ports: PORTS }),
        "{events:?}"
    );
    let got = client_events(&mut c);
    let [
        ClientEvent::Playing {
            session,
            sdp,
            track,
        },
    ] = &got[..]
    else {
        panic!("{got:?}")
    };
    assert_eq!(Some(session.as_str()), c.session());
    assert_eq!(sdp, SDP);
    assert_eq!(track, "rtsp://127.0.0.1:8554/clip.ts/trackID=0");

    // The server said timeout=30: a keep-alive every 15 s keeps the
    // session through three server timeouts.
    let mut now = Nanos::ZERO;
    for _ in 0..6 {
        let due = c.poll_timeout().expect("a keep-alive is due");
        assert_eq!(due, now + Nanos::from_secs(15));
        now = due;
        c.handle_input(now, ClientInput::Timer);
        s.handle_input(now, Input::Timer);
        let events = exchange(now, &mut c, &mut s);
        assert!(events.is_empty(), "{events:?}");
        assert!(client_events(&mut c).is_empty());
    }
    assert_eq!(s.state(), State::Playing);

    c.close(now);
    let events = exchange(now, &mut c, &mut s);
    assert!(
        matches!(
            &events[..],
            [Event::SessionClosed {
                reason: SessionEnd::Teardown,
                ..
            }]
        ),
        "{events:?}"
    );
    assert_eq!(client_events(&mut c), [ClientEvent::Closed]);
    assert!(c.is_over());
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn a_refusal_names_the_request_and_the_status() {
    let mut c = client("rtsp://127.0.0.1:8554/nothing.ts");
    let mut s = server(Nanos::ZERO);
    exchange(Nanos::ZERO, &mut c, &mut s);
    let got = client_events(&mut c);
    let [
        ClientEvent::Failed(ClientError::Refused {
            method,
            status,
            url,
            ..
        }),
    ] = &got[..]
    else {
        panic!("{got:?}")
    };
    assert_eq!((*method, *status), (Method::Describe, 404));
    assert_eq!(url, "rtsp://127.0.0.1:8554/nothing.ts");
    assert_eq!(
        c.poll_transmit(Nanos::ZERO),
        None,
        "nothing after a failure"
    );
}

#[test]
fn an_unanswered_request_fails_at_its_deadline() {
    let mut c = client(URL);
    assert!(c.poll_transmit(Nanos::ZERO).is_some());
    let deadline = c.poll_timeout().expect("a reply deadline");
    assert_eq!(deadline, Nanos::from_secs(10));
    c.handle_input(deadline - Nanos::from_micros(1), ClientInput::Timer);
    assert!(client_events(&mut c).is_empty(), "not before the deadline");
    c.handle_input(deadline, ClientInput::Timer);
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(ClientError::NoReply {
            method: Method::Describe,
            secs: 10,
            ..
        })]
    ));
}

#[test]
fn a_reply_to_another_cseq_is_an_error_not_a_hang() {
    let mut c = client(URL);
    let _ = c.poll_transmit(Nanos::ZERO);
    c.handle_input(
        Nanos::ZERO,
        ClientInput::Bytes(b"RTSP/1.0 200 OK\r\nCSeq: 9\r\n\r\n"),
    );
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(ClientError::Malformed { cseq: 1, .. })]
    ));
}

#[test]
fn a_closed_connection_fails_a_session_but_ends_a_teardown() {
    let mut c = client(URL);
    c.handle_input(Nanos::ZERO, ClientInput::Closed);
    assert_eq!(
        client_events(&mut c),
        [ClientEvent::Failed(ClientError::ConnectionClosed)]
    );

    let mut c = client(URL);
    let mut s = server(Nanos::ZERO);
    exchange(Nanos::ZERO, &mut c, &mut s);
    let _ = client_events(&mut c);
    c.close(Nanos::ZERO);
    let _ = c.poll_transmit(Nanos::ZERO);
    // Some servers close instead of answering TEARDOWN.
    c.handle_input(Nanos::ZERO, ClientInput::Closed);
    assert_eq!(client_events(&mut c), [ClientEvent::Closed]);
}

#[test]
fn byte_at_a_time_replies_and_a_gstreamer_content_base() {
    let mut c = client("rtsp://127.0.0.1:8554/test?x=1");
    let feed = |c: &mut Client, text: &str| {
        for b in text.as_bytes() {
            c.handle_input(Nanos::ZERO, ClientInput::Bytes(std::slice::from_ref(b)));
        }
    };
    let _ = c.poll_transmit(Nanos::ZERO);
    let sdp = "v=0\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\na=control:stream=0\r\n";
    feed(
        &mut c,
        &format!(
            "RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Base: rtsp://127.0.0.1:8554/test/\r\n\
             Content-Length: {}\r\n\r\n{sdp}",
            sdp.len()
        ),
    );
    let setup = String::from_utf8(c.poll_transmit(Nanos::ZERO).expect("SETUP")).unwrap();
    assert!(
        setup.starts_with("SETUP rtsp://127.0.0.1:8554/test/stream=0 RTSP/1.0\r\n"),
        "{setup}"
    );
    assert!(setup.contains("Transport: RTP/AVP;unicast;client_port=6000-6001\r\n"));
    feed(
        &mut c,
        "RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: abc;timeout=4\r\n\r\n",
    );
    let play = String::from_utf8(c.poll_transmit(Nanos::ZERO).expect("PLAY")).unwrap();
    assert!(
        play.contains("Session: abc\r\n") && play.contains("Range: npt=0-\r\n"),
        "{play}"
    );
    feed(&mut c, "RTSP/1.0 200 OK\r\nCSeq: 3\r\n\r\n");
    assert!(
        matches!(&client_events(&mut c)[..], [ClientEvent::Playing { session, .. }] if session == "abc")
    );
    assert_eq!(
        c.poll_timeout(),
        Some(Nanos::from_secs(2)),
        "half of timeout=4"
    );
}

#[test]
fn a_reply_past_the_limits_is_refused_with_bounded_memory() {
    let mut c = client(URL);
    let _ = c.poll_transmit(Nanos::ZERO);
    let junk = vec![b'a'; 1 << 20];
    c.handle_input(Nanos::ZERO, ClientInput::Bytes(&junk));
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(ClientError::Malformed { .. })]
    ));
}

#[test]
fn only_rtsp_urls() {
    for bad in ["http://127.0.0.1/x", "clip.ts", "rtsp://", ""] {
        assert!(
            matches!(
                Client::new(Nanos::ZERO, bad, ClientConfig::new(PORTS)),
                Err(ClientError::BadUrl(_))
            ),
            "{bad}"
        );
    }
}

proptest! {
    /// Whatever a server sends, the client neither panics nor sends more
    /// than its next request, and ends up playing, waiting or failed.
    #[test]
    fn any_reply_bytes(chunks in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..300), 0..8)) {
        let mut c = client(URL);
        let _ = c.poll_transmit(Nanos::ZERO);
        for chunk in &chunks {
            c.handle_input(Nanos::ZERO, ClientInput::Bytes(chunk));
            prop_assert!(c.poll_transmit(Nanos::ZERO).is_none() || !c.is_over());
        }
        let _ = client_events(&mut c);
    }
}

/// Found by fuzz target rtsp_client_reply: a mangled header made the
/// Content-Base "nt-base: rtsp://…", which parses as a URL of scheme
/// `nt-base`; the SETUP request line then had spaces in it. A base or a
/// control URL that is not rtsp:// with a host is not used.
#[test]
fn only_rtsp_urls_are_set_up() {
    let sdp = "v=0\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\na=control:trackID=0\r\n";
    let reply = |base: &str| {
        format!(
            "RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Base: {base}\r\nContent-Length: {}\r\n\r\n{sdp}",
            sdp.len()
        )
    };
    for base in [
        "nt-base: rtsp://127.0.0.1:8554/clip.ts/",
        "http://10.0.0.1/x/",
        "rtsp:nohost",
    ] {
        let mut c = client(URL);
        let _ = c.poll_transmit(Nanos::ZERO);
        c.handle_input(Nanos::ZERO, ClientInput::Bytes(reply(base).as_bytes()));
        let setup = String::from_utf8(c.poll_transmit(Nanos::ZERO).expect("SETUP")).unwrap();
        assert!(
            setup.starts_with("SETUP rtsp://127.0.0.1:8554/clip.ts/trackID=0 RTSP/1.0\r\n"),
            "{base}: {setup}"
        );
    }
    let sdp = "v=0\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\na=control:http://10.0.0.1/x\r\n";
    let mut c = client(URL);
    let _ = c.poll_transmit(Nanos::ZERO);
    let r = format!(
        "RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    c.handle_input(Nanos::ZERO, ClientInput::Bytes(r.as_bytes()));
    assert!(matches!(
        &client_events(&mut c)[..],
        [ClientEvent::Failed(ClientError::Sdp(_))]
    ));
    assert_eq!(c.poll_transmit(Nanos::ZERO), None);
}

#[test]
fn a_busy_server_says_why_and_when_to_ask_again() {
    let mut c = client(URL);
    let mut s = server(Nanos::ZERO);
    // DESCRIBE and SETUP as usual, the SETUP answered 503 for a while.
    loop {
        while let Some(req) = c.poll_transmit(Nanos::ZERO) {
            s.handle_input(Nanos::ZERO, Input::Bytes(&req));
        }
        let mut admit = false;
        while let Some(e) = s.poll_event() {
            admit |= matches!(e, Event::Admit { .. });
        }
        if admit {
            let busy = RefusalKind::Busy {
                retry_after_secs: 1,
            };
            let why = Refusal::new(busy, "the streams admitted just now are not yet measured");
            s.handle_input(Nanos::ZERO, Input::Admission(Admission::Refused(why)));
        }
        let mut moved = false;
        while let Some(reply) = s.poll_transmit(Nanos::ZERO) {
            c.handle_input(Nanos::ZERO, ClientInput::Bytes(&reply));
            moved = true;
        }
        if !moved {
            break;
        }
    }
    let got = client_events(&mut c);
    let [ClientEvent::Failed(e)] = &got[..] else {
        panic!("{got:?}")
    };
    let ClientError::Refused {
        method,
        status,
        body,
        retry_after,
        ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((*method, *status), (Method::Setup, 503));
    assert_eq!(body, "the streams admitted just now are not yet measured");
    assert_eq!(*retry_after, Some(1));
    assert!(
        e.to_string().ends_with(
            "503 Service Unavailable: the streams admitted just now are not yet measured"
        ),
        "{e}"
    );
}

/// Found by the `rtsp_client_reply` fuzz target: a DESCRIBE reply and a
/// "reply" to the SETUP that reply makes the client queue, in one read,
/// set two requests in flight. A reply before its request was sent is
/// malformed.
#[test]
fn a_reply_to_a_request_not_yet_sent_is_malformed() {
    let mut c = client(URL);
    assert!(c.poll_transmit(Nanos::ZERO).is_some());
    let sdp = "v=0\r\ns=clip\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\na=control:trackID=0\r\n";
    let both = format!(
        "RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Base: {URL}/\r\nContent-Length: {}\r\n\r\n{sdp}\
         RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: 12345678\r\n\r\n",
        sdp.len()
    );
    c.handle_input(Nanos::ZERO, ClientInput::Bytes(both.as_bytes()));
    // The SETUP was queued, and nothing after it.
    assert!(c.poll_transmit(Nanos::ZERO).is_some());
    assert_eq!(c.poll_transmit(Nanos::ZERO), None);
    let got = client_events(&mut c);
    let [ClientEvent::Failed(ClientError::Malformed { method, cseq, what })] = &got[..] else {
        panic!("{got:?}")
    };
    assert_eq!((*method, *cseq), (Method::Setup, 2));
    assert!(what.contains("before it was sent"), "{what}");
}
