//! The probe control stream, frame by frame: frame headers
//! (`type (1) | length (4, big-endian)`) with `FrameHeader::parse`, JSON
//! bodies with `ControlMessage::from_json`, record bodies with
//! `records_from_bytes`; and the same bytes through `FrameDecoder`, which
//! must give the same frames.
//!
//! Input: the bytes of the stream, read frame after frame until one is
//! refused or the input ends.
//! Invariants: no panic; a header is accepted exactly when its type is
//! `J` or `R` and its length at most 1 MiB, and parsing it allocates
//! nothing (a hostile length is refused before the reader allocates);
//! `to_bytes` gives the header back; a message that parses survives
//! `to_frame` + parse, and its frame fits the limit; records are the
//! 24-byte big-endian triples of the body, nothing is appended when the
//! body is refused, and `records_to_frames` gives the body back; heap use
//! while parsing a body stays within a fixed multiple of its length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::CountingAlloc;
use nagare_proto::Nanos;
use nagare_proto::probe::{
    Arrival, ControlMessage, Error, FRAME_HEADER_LEN, Frame, FrameDecoder, FrameHeader, FrameKind,
    MAX_FRAME_LEN, RECORD_LEN, records_from_bytes, records_to_frames,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Checks one header; returns it if accepted.
fn header(rest: &[u8]) -> Option<FrameHeader> {
    CountingAlloc::reset_peak();
    let before = CountingAlloc::live();
    let parsed = FrameHeader::parse(rest);
    assert_eq!(
        CountingAlloc::peak(),
        before,
        "FrameHeader::parse allocated"
    );
    let Some(head) = rest.get(..FRAME_HEADER_LEN) else {
        assert!(matches!(parsed, Err(Error::Truncated { .. })), "{parsed:?}");
        return None;
    };
    let len = u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
    match (head[0], parsed) {
        (b'J' | b'R', _) if len > MAX_FRAME_LEN => {
            assert!(
                matches!(parsed, Err(Error::FrameTooLarge { .. })),
                "{parsed:?}"
            );
            None
        }
        (t @ (b'J' | b'R'), Ok(h)) => {
            let kind = if t == b'J' {
                FrameKind::Json
            } else {
                FrameKind::Records
            };
            assert_eq!((h.kind, h.len), (kind, len));
            assert_eq!(h.to_bytes(), head);
            Some(h)
        }
        (b'J' | b'R', Err(e)) => panic!("valid header refused: {e:?}"),
        (t, parsed) => {
            assert_eq!(parsed, Err(Error::FrameType(t)));
            None
        }
    }
}

fn json(body: &[u8]) -> bool {
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let parsed = ControlMessage::from_json(body);
    let used = CountingAlloc::peak() - base;
    // serde buffers an internally tagged enum as generic content first:
    // tens of bytes per input byte, never more.
    assert!(
        used <= 128 * body.len() + 4096,
        "{used} heap bytes to parse {} bytes of JSON",
        body.len()
    );
    let Ok(m) = parsed else { return false };
    let frame = m.to_frame();
    let h = FrameHeader::parse(&frame).expect("our own frame header is valid");
    assert_eq!(h.kind, FrameKind::Json);
    assert_eq!(h.len, frame.len() - FRAME_HEADER_LEN);
    let again = ControlMessage::from_json(&frame[FRAME_HEADER_LEN..])
        .expect("nagare reads the JSON it writes");
    // Exact for floats too: this crate turns on serde_json's
    // float_roundtrip (without it serde_json may read a float back one
    // ulp off, which is its documented trade-off, not nagare's).
    assert_eq!(again, m);
    true
}

fn records(body: &[u8]) -> bool {
    let mut out = vec![Arrival {
        seq: 7,
        sent_at: Nanos(8),
        received_at: Nanos(9),
    }];
    if records_from_bytes(body, &mut out).is_err() {
        assert_ne!(body.len() % RECORD_LEN, 0, "whole records refused");
        assert_eq!(out.len(), 1, "a refused body appended records");
        return false;
    }
    assert_eq!(body.len() % RECORD_LEN, 0);
    let got = &out[1..];
    assert_eq!(got.len(), body.len() / RECORD_LEN);
    for (a, c) in got.iter().zip(body.chunks_exact(RECORD_LEN)) {
        assert_eq!(
            (a.seq, a.sent_at, a.received_at),
            (be64(c), Nanos(be64(&c[8..])), Nanos(be64(&c[16..])))
        );
    }
    let frames = records_to_frames(got);
    let mut back = Vec::new();
    for f in &frames {
        let h = FrameHeader::parse(f).expect("our own records header is valid");
        assert_eq!(h.kind, FrameKind::Records);
        assert_eq!(h.len, f.len() - FRAME_HEADER_LEN);
        back.extend_from_slice(&f[FRAME_HEADER_LEN..]);
    }
    assert_eq!(back, body);
    true
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let mut frames = 0;
    while let Some(h) = header(rest) {
        let Some(body) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.len) else {
            break; // the stream ends inside the body
        };
        rest = &rest[FRAME_HEADER_LEN + h.len..];
        let ok = match h.kind {
            FrameKind::Json => json(body),
            FrameKind::Records => records(body),
        };
        if !ok {
            break; // the reader drops the connection
        }
        frames += 1;
    }
    decoder(data, frames);
});

/// The decoder, fed the stream in reads of 7 bytes, gives exactly the
/// `frames` whole frames read above, then stops at the same place.
fn decoder(data: &[u8], frames: usize) {
    let mut d = FrameDecoder::new();
    let mut got = 0;
    let mut failed = false;
    for chunk in data.chunks(7) {
        d.extend(chunk);
        loop {
            match d.next_frame() {
                Ok(Some(Frame::Message(_) | Frame::Records(_))) => got += 1,
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            break;
        }
        // It never holds more than one frame and one read.
        assert!(d.pending() <= FRAME_HEADER_LEN + MAX_FRAME_LEN + 7);
    }
    assert_eq!(got, frames);
}
