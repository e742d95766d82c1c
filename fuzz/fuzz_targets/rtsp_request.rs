//! Any bytes, cut anywhere, into the RTSP connection machine
//! (`rtsp::Connection`), with timers and keep-alives in between.
//!
//! Input: `cuts (8)` then the stream. Cut byte `c` (used in turn) sends
//! the next `(c & 0x7f) + 1` bytes; with `c & 0x80` virtual time first
//! jumps 61 s and the timer fires (reaping the session or the idle
//! connection). With bit 0x40 of the first cut byte the connection needs
//! credentials (`rtsp::Guard`): its refusals are `401` with challenges.
//! Every admission the machine asks for (`Event::Admit`) is answered at
//! once, as serve does: refused when bit 0x20 of the current cut byte is
//! set, admitted otherwise.
//! Invariants: no panic; every transmit is exactly one RTSP/1.0 response
//! (rtsp-types reads it back whole) with status 200 or an error status,
//! and a numeric CSeq when it has one; nothing is sent after the machine
//! asked to close, and no event after `Closed`; every SETUP's destination
//! is the client, the one allowed address or the stream's own group (the
//! server never aims at a third party); PLAY and PAUSE only follow a SETUP
//! of their session; bytes held and heap use stay under bounds set by the
//! limits, not by the input's length.

#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader};
use nagare_proto::Nanos;
use nagare_proto::rtsp::{
    Admission, Catalog, Config, Connection, Credentials, Event, Guard, Input, Limits,
    MulticastGroup, NONCE_KEY_LEN, PortPair, Refusal, RefusalKind, SessionId, StreamInfo,
    Transport,
};
use rtsp_types::{Message, Version};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const ALLOWED: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9));
const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3));

struct Fixed;

impl Catalog for Fixed {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        match path {
            "clip.ts" => Some(StreamInfo {
                tracks: 1,
                multicast: None,
            }),
            "live" => Some(StreamInfo {
                tracks: 2,
                multicast: Some(MulticastGroup {
                    group: GROUP,
                    ports: PortPair {
                        rtp: 5000,
                        rtcp: 5001,
                    },
                    ttl: 4,
                }),
            }),
            _ => None,
        }
    }
    fn sdp(&self, path: &str) -> Option<String> {
        self.stream(path)
            .map(|_| format!("v=0\r\ns={path}\r\nm=video 0 RTP/AVP 33\r\na=control:trackID=0\r\n"))
    }
    fn destination_allowed(&self, _client: IpAddr, destination: IpAddr) -> bool {
        destination == ALLOWED
    }
}

/// Checks one transmit: a whole RTSP/1.0 response.
fn check_response(bytes: &[u8]) {
    let (msg, used) = Message::<Vec<u8>>::parse(bytes).expect("a well-formed response");
    assert_eq!(used, bytes.len(), "one message per transmit");
    let Message::Response(r) = msg else {
        panic!("not a response");
    };
    assert_eq!(r.version(), Version::V1_0);
    let status = u16::from(r.status());
    assert!(
        status == 200 || (400..600).contains(&status),
        "status {status}"
    );
    if let Some(c) = r.header(&rtsp_types::headers::CSEQ) {
        c.as_str().parse::<u32>().expect("numeric CSeq");
    }
}

#[derive(Default)]
struct Model {
    set_up: Option<SessionId>,
    closed: bool,
}

impl Model {
    fn event(&mut self, e: &Event) {
        assert!(!self.closed, "event after Closed: {e:?}");
        match e {
            Event::Admit { path, .. } => {
                assert!(Fixed.stream(path).is_some(), "admission of {path:?}");
            }
            Event::Setup {
                session, transport, ..
            } => {
                match *transport {
                    Transport::Udp { destination, .. } => {
                        assert!(destination == CLIENT || destination == ALLOWED, "{e:?}")
                    }
                    Transport::Multicast(g) => {
                        assert!(g.group == GROUP || g.group == ALLOWED, "{e:?}")
                    }
                    Transport::Interleaved { rtp, rtcp } => assert_ne!(rtp, rtcp),
                }
                self.set_up = Some(*session);
            }
            Event::Play { session, .. } | Event::Pause { session } => {
                assert_eq!(self.set_up, Some(*session), "{e:?} without SETUP");
            }
            Event::SessionClosed { session, .. } => {
                assert_eq!(self.set_up.take(), Some(*session));
            }
            Event::Refused { error, .. } => assert!(error.status() >= 400),
            Event::Closed(_) => self.closed = true,
            Event::Rtcp { session, data, .. } => {
                assert_eq!(self.set_up, Some(*session), "RTCP without SETUP");
                assert!(
                    data.len() <= Limits::default().body_bytes,
                    "{} bytes",
                    data.len()
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let cuts = r.bytes(8).to_vec();
    let stream = r.rest();
    let limits = Limits::default();
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();

    let mut m = Connection::new(Nanos::ZERO, Config::default(), Fixed, CLIENT, 0x5eed);
    if cuts.first().is_some_and(|c| c & 0x40 != 0) {
        let credentials = std::sync::Arc::new(Credentials::new("s3cret-token"));
        m = m.with_guard(Guard::new(credentials, [5; NONCE_KEY_LEN]));
    }
    let mut model = Model::default();
    let mut now = Nanos::ZERO;
    let mut rest = stream;
    let mut i = 0;
    while !rest.is_empty() {
        let c = cuts.get(i % cuts.len().max(1)).copied().unwrap_or(0x7f);
        i += 1;
        if c & 0x80 != 0 {
            now = now + Nanos::from_secs(61);
            m.handle_input(now, Input::Timer);
        }
        let n = (usize::from(c & 0x7f) + 1).min(rest.len());
        let was_closed = m.is_closed();
        m.handle_input(now, Input::Bytes(&rest[..n]));
        rest = &rest[n..];
        loop {
            let mut sent = 0;
            while let Some(t) = m.poll_transmit(now) {
                check_response(&t);
                sent += 1;
            }
            assert!(!was_closed || sent == 0, "sent after closing");
            assert!(sent <= limits.pending_responses + 1);
            let Some(e) = m.poll_event() else {
                break;
            };
            model.event(&e);
            if let Event::Admit { .. } = e {
                let verdict = if c & 0x20 != 0 {
                    Admission::Refused(Refusal::new(RefusalKind::Capacity, "over --max-rate"))
                } else {
                    Admission::Admitted
                };
                m.handle_input(now, Input::Admission(verdict));
            }
        }
        // Bytes held behind an admission are re-read once it is answered,
        // so at most one cut of them waits.
        assert!(m.buffered() <= limits.header_bytes + limits.body_bytes + 128);
    }
    m.handle_input(now, Input::Closed);
    while let Some(e) = m.poll_event() {
        model.event(&e);
    }
    assert!(m.poll_transmit(now).is_none());
    let used = CountingAlloc::peak() - base;
    assert!(used < 1 << 20, "{used} bytes of heap");
});
