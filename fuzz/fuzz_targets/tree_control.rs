//! The tree protocol's framing and control messages: `tree_wire::body_len`,
//! `tree_wire::split` and `Control::parse`.
//!
//! Input: `mode (1) | rest`. With `mode & 1` the rest is a whole framed
//! message (`length (4) | kind (1) | body`) as read from a socket;
//! otherwise the rest is `kind (1) | body` and the target frames it with
//! the right length itself, so mutations reach the message parsers.
//! Invariants: no panic; `body_len` accepts exactly the lengths 1..=1 MiB
//! and allocates nothing; `split` accepts exactly a known kind with a
//! length that matches the message, and returns its kind and body; a
//! control message that parses is written back byte for byte by
//! `to_bytes` (so it also parses again to the same value); the screen
//! kinds are left to the screen codec (`Ok(None)`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::CountingAlloc;
use nagare_proto::framing::{Kind, MAX_MESSAGE, body_len, split};
use nagare_proto::tree::wire::Control;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn check_body_len(header: [u8; 4]) -> Option<usize> {
    CountingAlloc::reset_peak();
    let before = CountingAlloc::live();
    let got = body_len(header);
    assert_eq!(CountingAlloc::peak(), before, "body_len allocated");
    let len = u32::from_be_bytes(header) as usize;
    assert_eq!(got.ok(), (1..=MAX_MESSAGE).contains(&len).then_some(len));
    got.ok()
}

fn check_message(msg: &[u8]) {
    let Some(header) = msg.get(..4) else {
        assert!(split(msg).is_err());
        return;
    };
    let len = check_body_len(header.try_into().expect("4 bytes"));
    let parsed = split(msg);
    let kind = msg.get(4).and_then(|&k| Kind::try_from(k).ok());
    let expect_ok = len.is_some_and(|l| msg.len() == 4 + l) && kind.is_some();
    assert_eq!(parsed.is_ok(), expect_ok, "{parsed:?}");
    let Ok((k, body)) = parsed else { return };
    assert_eq!(Some(k), kind);
    assert_eq!(body, &msg[5..]);
    let screen = matches!(k, Kind::FrameStart | Kind::Tiles | Kind::FrameEnd);
    match Control::parse(k, body) {
        Ok(Some(c)) => {
            assert!(!screen, "{k:?} parsed as control");
            assert_eq!(c.to_bytes(), msg, "{c:?} written differently");
        }
        Ok(None) => assert!(screen, "{k:?} is a control kind"),
        Err(_) => assert!(!screen, "screen kind {k:?} refused by Control::parse"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 != 0 {
        check_message(rest);
    } else {
        let mut msg = Vec::with_capacity(4 + rest.len());
        msg.extend_from_slice(&(rest.len() as u32).to_be_bytes());
        msg.extend_from_slice(rest);
        check_message(&msg);
    }
});
