//! The screen codec's messages: `ScreenMessage::parse` on any kind and
//! body, `TileIter` over a `Tiles` body, and `relay::Chunk::of`.
//!
//! Input: `kind (1) | body`.
//! Invariants: no panic; `parse` gives `None` exactly for the control
//! kinds; a message that parses is written back byte for byte by
//! `to_bytes` and `split` returns the same kind and body; `Chunk::of`
//! classifies the framed message as the parsed value says; `TileIter`
//! walks the body as an independent reading of
//! `index (4) | mode (1) | len (4) | data` does, stops after its first
//! error, and when it yields no error its tiles written back are the body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::framing::{Kind, MAX_MESSAGE, split};
use nagare_proto::screen::{ScreenMessage, TileIter, TileMode};
use nagare_proto::tree::relay::Chunk;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}

fn check_tiles(body: &[u8]) {
    let mut rest = body;
    let mut written = Vec::with_capacity(body.len());
    let mut it = TileIter::new(body);
    loop {
        let got = it.next();
        if rest.is_empty() {
            assert!(got.is_none(), "tile after the end: {got:?}");
            assert_eq!(written, body);
            return;
        }
        // Independent reading of the next tile.
        let expect = (rest.len() >= 9)
            .then(|| (be32(rest), rest[4], be32(&rest[5..]) as usize))
            .filter(|&(_, mode, len)| mode <= 1 && rest.len() - 9 >= len);
        match (got, expect) {
            (Some(Ok(t)), Some((index, mode, len))) => {
                assert_eq!(t.index, index);
                assert_eq!(t.mode as u8, mode);
                assert_eq!(
                    t.mode,
                    [TileMode::Xor, TileMode::Replace][usize::from(mode)]
                );
                assert_eq!(t.data, &rest[9..9 + len]);
                written.extend_from_slice(&t.index.to_be_bytes());
                written.push(t.mode as u8);
                written.extend_from_slice(&(t.data.len() as u32).to_be_bytes());
                written.extend_from_slice(t.data);
                rest = &rest[9 + len..];
            }
            (Some(Err(_)), None) => {
                assert!(it.next().is_none(), "TileIter went on after an error");
                return;
            }
            (got, expect) => panic!("TileIter gave {got:?}, expected {expect:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let Ok(kind) = Kind::try_from(kind) else {
        return;
    };
    if 1 + body.len() > MAX_MESSAGE {
        return; // no such message on the wire
    }
    let screen = matches!(kind, Kind::FrameStart | Kind::Tiles | Kind::FrameEnd);
    let msg = match ScreenMessage::parse(kind, body) {
        Ok(Some(m)) => m,
        Ok(None) => return assert!(!screen, "{kind:?} ignored"),
        Err(_) => return assert!(screen && kind != Kind::Tiles, "{kind:?} refused"),
    };
    assert!(screen, "control kind {kind:?} parsed as {msg:?}");
    let bytes = msg.to_bytes();
    let (k, b) = split(&bytes).expect("the codec's own framing");
    assert_eq!((k, b), (kind, body));
    assert_eq!(ScreenMessage::parse(k, b), Ok(Some(msg)));
    assert_eq!(Chunk::of(&bytes), Ok(Chunk::from(&msg)));
    match msg {
        ScreenMessage::Tiles(t) => {
            assert_eq!(t, body);
            check_tiles(body);
        }
        ScreenMessage::FrameStart { number, base, .. } => {
            assert_eq!(Chunk::of(&bytes), Ok(Chunk::Start { number, base }));
        }
        ScreenMessage::FrameEnd { number } => {
            assert_eq!(Chunk::of(&bytes), Ok(Chunk::End { number }));
        }
    }
});
