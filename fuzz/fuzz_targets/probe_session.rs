//! `probe::Session`, client or server side, fed arbitrary control bytes,
//! datagrams and timer ticks, as a hostile peer could send them.
//!
//! Input: `mode (1)`: bit 0 server, bit 1 reverse test, bit 2 busy server,
//! bit 3 a token required / given, bit 4 a bidir test (with bit 1 too,
//! one the client refuses to ask for); then actions until the input ends, each
//! `tag (1) | ...`:
//! - 0..=3: control bytes, `len (2) | bytes`;
//! - 4: a datagram from the peer, `len (1) | bytes`;
//! - 5: a valid echo datagram from the peer, `kind (1) | session (8) | id (2)`;
//! - 6: a valid test-stream packet, `session (8) | seq (2)`;
//! - 7: time passes, `ms (2)`;
//! - 8: the control connection closes; 9: the stream this side sends ends;
//! - 10: interrupt; else: time jumps to the session's own timeout.
//!
//! The control bytes may be anything; seeds hold whole conversations.
//! Invariants: no panic; once the session has ended, no more events come,
//! and exactly one final event was queued; after every input nothing is
//! due at or before `now` (the session's timeout lies ahead, or there is
//! none); the session never asks to stop a stream it did not start, nor
//! to start two; transmits stay bounded; heap use stays within a fixed
//! multiple of the input's length plus a constant.

#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader, SESSION_ID, session_params};
use nagare_proto::Nanos;
use nagare_proto::probe::{
    ClientConfig, DataHeader, Echo, EchoKind, Event, Input, SenderReport, ServerConfig, Session,
    Transmit,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn session(mode: u8, peer: SocketAddr) -> Session {
    let token = (mode & 8 != 0).then(|| "s3cret".to_string());
    if mode & 1 == 0 {
        let bidir = mode & 16 != 0;
        // Reverse and bidir at once: a bidir client then, as the client
        // refuses to ask for both (the server side meets that hello in
        // the control bytes).
        let config = ClientConfig {
            params: session_params(mode & 2 != 0 && !bidir, bidir),
            token,
        };
        return Session::client(Nanos::ZERO, peer, config).expect("valid params");
    }
    if mode & 4 != 0 {
        return Session::busy(Nanos::ZERO, peer);
    }
    let config = ServerConfig {
        token,
        max_rate_bps: Some(50_000_000),
    };
    Session::server(Nanos::ZERO, peer, config, SESSION_ID)
}

/// Everything the session queued; checks the invariants of its events.
struct Watch {
    ended: bool,
    streaming: bool,
    transmits: usize,
}

impl Watch {
    fn poll(&mut self, s: &mut Session, now: Nanos) {
        while let Some(e) = s.poll_event() {
            assert!(!self.ended, "event {e:?} after the final one");
            match e {
                Event::StartStream(plan) => {
                    assert!(!self.streaming, "two streams at once");
                    assert!(plan.schedule.total_packets > 0);
                    self.streaming = true;
                }
                Event::StopStream => assert!(self.streaming, "stop without a stream"),
                // Live interval lines come while the test runs (protocol
                // 3), of both directions with bidir (4); they are not final.
                Event::Accepted { .. } | Event::Interval { .. } => {}
                _ => self.ended = true,
            }
        }
        assert_eq!(self.ended, s.is_ended());
        while let Some(t) = s.poll_transmit(now) {
            self.transmits += 1;
            if let Transmit::Control(frame) = t {
                assert!(frame.len() <= nagare_proto::probe::MAX_FRAME_LEN + 5);
            }
        }
        assert!(self.transmits < 1_000_000, "unbounded transmits");
        if let Some(t) = s.poll_timeout() {
            assert!(t > now, "timeout {t} not after now {now}");
        }
    }
}

fn datagram(r: &mut Reader<'_>, tag: u8) -> Vec<u8> {
    match tag {
        4 => {
            let len = usize::from(r.u8());
            r.bytes(len).to_vec()
        }
        5 => {
            let kind =
                [EchoKind::Request, EchoKind::Reply, EchoKind::Open][usize::from(r.u8() % 3)];
            let session = r.u64();
            let id = u64::from(r.u16());
            Echo {
                kind,
                session,
                id,
                sent_at: Nanos::ZERO,
            }
            .to_bytes()
            .to_vec()
        }
        _ => {
            let mut b = vec![0u8; 100];
            let h = DataHeader {
                session: r.u64(),
                seq: u64::from(r.u16()),
                sent_at: Nanos::ZERO,
                marker: false,
            };
            h.write(&mut b).expect("100 bytes hold the header");
            b
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let mut r = Reader::new(data);
    let mode = r.u8();
    let peer: SocketAddr = "10.0.0.1:5201".parse().expect("address");
    let mut s = session(mode, peer);
    let mut w = Watch {
        ended: false,
        streaming: false,
        transmits: 0,
    };
    let mut now = Nanos::ZERO;
    w.poll(&mut s, now);
    while r.remaining() > 0 {
        let tag = r.u8();
        let input_bytes;
        let input = match tag {
            0..=3 => {
                let len = usize::from(r.u16());
                input_bytes = r.bytes(len).to_vec();
                Input::Control(&input_bytes)
            }
            4..=6 => {
                input_bytes = datagram(&mut r, tag);
                Input::Datagram {
                    from: peer,
                    payload: &input_bytes,
                }
            }
            7 => {
                now = now + Nanos::from_millis(u64::from(r.u16()));
                Input::Timer
            }
            8 => Input::ControlClosed,
            9 if w.streaming => {
                w.streaming = false;
                Input::StreamFinished(vec![SenderReport::default()])
            }
            10 => Input::Interrupt,
            _ => {
                now = s.poll_timeout().unwrap_or(now).max(now);
                Input::Timer
            }
        };
        s.handle_input(now, input);
        w.poll(&mut s, now);
    }
    let used = CountingAlloc::peak() - base;
    // The decoder holds the control bytes of one frame, which serde
    // parses with tens of bytes per byte (see probe_control); records and
    // arrivals are bounded by the test's small plan, RTT histograms by a
    // constant.
    assert!(
        used <= 160 * data.len() + (4 << 20),
        "{used} heap bytes for {} input bytes",
        data.len()
    );
});
