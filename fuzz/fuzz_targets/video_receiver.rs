//! The raw video receive machine fed any datagrams: RTP checks, stream
//! selection (probation, source filter, takeovers), sequence extension,
//! duplicates, reassembly and the frame limit.
//!
//! Input: `format (3) | opts (1) | limit (1)` then datagrams as
//! `gap (1) | len (2) | bytes`, each arriving `gap` microseconds after the
//! one before, from 10.0.0.1 (even `gap`) or 10.0.0.2 (odd). `opts` bit 0
//! zero-fills (keep incomplete frames), bit 1 sets the frame limit to
//! `limit`, bit 2 recycles every frame buffer, bit 3 follows takeovers as
//! new takes, bit 4 takes only 10.0.0.1 as the stream, bits 5-7 make it
//! patient (ST 2022-7 tolerance of `opts >> 5` frames).
//! Invariants: no panic; frames are `frame_bytes` long; frame and lost
//! indices strictly increase and stay below the limit; every distinct
//! stream packet is counted once; with a limit, `finish` accounts for
//! exactly that many frames.

#![no_main]

use std::net::{IpAddr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{Reader, small_format};
use nagare_proto::Nanos;
use nagare_proto::video::receiver::{Config, Datagram, Event, Incomplete, Receiver};

#[derive(Default)]
struct Seen {
    next: u64,
    frames: u64,
    lost: u64,
}

fn drain(r: &mut Receiver, seen: &mut Seen, frame_bytes: usize, recycle: bool) {
    while let Some(e) = r.poll_event() {
        match e {
            Event::Frame(f) => {
                assert_eq!(f.data.len(), frame_bytes);
                assert_eq!(f.index, seen.next, "frames and lost runs tile the stream");
                seen.next = f.index + 1;
                seen.frames += 1;
                if recycle {
                    r.recycle(f.data);
                }
            }
            Event::Lost { first, count } | Event::Missing { first, count } => {
                assert!(
                    first == seen.next && count > 0,
                    "lost {first}+{count} at {}",
                    seen.next
                );
                seen.next = first + count;
                seen.lost += count;
            }
            Event::Stream { .. } | Event::Rival { .. } => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let format = small_format(input.u8(), input.u8(), input.u8());
    let opts = input.u8();
    let limit = (opts & 2 != 0).then(|| u64::from(input.u8()));
    let recycle = opts & 4 != 0;
    let source = (opts & 16 != 0).then(|| IpAddr::from([10, 0, 0, 1]));
    let mut r = Receiver::new(Config {
        format,
        rate: None,
        incomplete: if opts & 1 != 0 {
            Incomplete::Keep
        } else {
            Incomplete::Drop
        },
        frame_limit: limit,
    })
    .with_selection(source, opts & 8 != 0);
    if opts >> 5 != 0 {
        r.set_tolerance(usize::from(opts >> 5));
    }
    let mut seen = Seen::default();
    let mut now = Nanos::ZERO;
    let mut datagrams = 0u64;
    while input.remaining() > 0 {
        let gap = input.u8();
        now = now + Nanos::from_micros(u64::from(gap));
        let from = Some(SocketAddr::from(([10, 0, 0, 1 + (gap & 1)], 5000)));
        let len = usize::from(input.u16());
        let bytes = input.bytes(len);
        r.handle_input(now, Datagram { bytes, from });
        datagrams += 1;
        drain(&mut r, &mut seen, format.frame_bytes(), recycle);
    }
    r.finish();
    drain(&mut r, &mut seen, format.frame_bytes(), recycle);
    let s = r.stats();
    assert!(s.packets_received + s.packets_malformed + s.packets_foreign <= datagrams);
    assert_eq!(s.frames_complete + s.frames_incomplete, seen.frames);
    assert_eq!(s.frames_lost, seen.lost);
    if let Some(n) = limit {
        assert_eq!(seen.next, n, "the limit accounts for every frame");
        assert!(r.is_done());
    }
});
