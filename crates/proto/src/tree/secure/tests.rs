//! The handshake and the records, link by link and through [`Secure`].

use std::sync::Arc;

use super::*;
use crate::screen::ScreenMessage;
use crate::tree::link::Message;

const KEY: SessionKey = [7; 16];
const NONCE: Nonce = [3; 32];

fn request() -> Vec<u8> {
    Control::Attach {
        proof: crate::tree::auth::proof(&KEY, &NONCE, Role::Attach),
        peer: crate::tree::PeerId(5),
        version: None,
    }
    .to_bytes()
}

fn challenge() -> Vec<u8> {
    Control::Challenge { nonce: NONCE }.to_bytes()
}

/// A dialer's link and its handshake hello, for the standard request.
fn dial() -> (SecureLink, Vec<u8>) {
    SecureLink::initiator(
        &KEY,
        &NONCE,
        Role::Attach,
        &challenge(),
        &request(),
        [1; 32],
    )
    .unwrap()
}

/// A dialer and an acceptor through the handshake.
fn pair() -> (SecureLink, SecureLink) {
    let (mut dialer, hello) = dial();
    let mut acceptor =
        SecureLink::responder(&KEY, &NONCE, Role::Attach, &request(), [2; 32]).unwrap();
    let Ok(Opened::Reply(reply)) = acceptor.open(&hello) else {
        panic!("no reply");
    };
    assert_eq!(dialer.open(&reply), Ok(Opened::Established));
    assert!(dialer.is_open() && acceptor.is_open());
    (dialer, acceptor)
}

/// Splits concatenated framed records.
fn records(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        out.push(bytes[..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

/// Feeds every record; the result of the last.
fn deliver(to: &mut SecureLink, sealed: &[u8]) -> Result<Opened, Error> {
    let mut last = Opened::Partial;
    for r in records(sealed) {
        last = to.open(&r)?;
    }
    Ok(last)
}

/// A tile chunk a bit over `len` bytes with a recognisable pattern.
fn tiles(len: usize) -> Vec<u8> {
    let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    ScreenMessage::Tiles(&body).to_bytes()
}

#[test]
fn messages_round_trip_both_ways_and_big_ones_are_split() {
    let (mut d, mut a) = pair();
    for len in [
        0,
        1,
        RECORD_PIECE - 5,
        RECORD_PIECE - 4,
        3 * RECORD_PIECE + 17,
        1 << 19,
    ] {
        let msg = tiles(len);
        let sealed = a.seal(&msg).unwrap();
        let recs = records(&sealed);
        assert_eq!(recs.len(), msg.len().div_ceil(RECORD_PIECE));
        for r in &recs {
            assert!(
                r.len() - HEADER_LEN - 1 <= MAX_RECORD,
                "record over Noise's limit"
            );
            assert_eq!(r[HEADER_LEN], Kind::Sealed as u8);
        }
        assert_eq!(deliver(&mut d, &sealed), Ok(Opened::Message(msg.clone())));
        let back = d.seal(&msg).unwrap();
        assert_eq!(deliver(&mut a, &back), Ok(Opened::Message(msg)));
    }
}

#[test]
fn the_wire_never_carries_the_plaintext() {
    let (_, mut a) = pair();
    let msg = tiles(4096);
    let sealed = a.seal(&msg).unwrap();
    // No 16-byte window of the message appears in what is written.
    for w in msg.windows(16).step_by(7) {
        assert!(
            !sealed.windows(16).any(|s| s == w),
            "plaintext visible on the wire"
        );
    }
    // And a repeated message encrypts differently (the counter moves).
    assert_ne!(a.seal(&msg).unwrap(), sealed);
}

#[test]
fn a_flipped_byte_anywhere_in_a_record_drops_the_link() {
    let msg = tiles(1000);
    let len = {
        let (_, mut a) = pair();
        a.seal(&msg).unwrap().len()
    };
    for at in (HEADER_LEN + 1..len).step_by(37) {
        let (mut d, mut a) = pair();
        let mut sealed = a.seal(&msg).unwrap();
        sealed[at] ^= 0x20;
        assert_eq!(deliver(&mut d, &sealed), Err(Error::Tampered), "byte {at}");
        // Broken for good: even the genuine record is refused now.
        let good = a.seal(&msg).unwrap();
        assert_eq!(deliver(&mut d, &good), Err(Error::Broken));
    }
}

#[test]
fn replayed_reordered_and_missing_records_are_detected() {
    let (a_msg, b_msg) = (tiles(10), tiles(20));
    // Replay.
    let (mut d, mut a) = pair();
    let first = a.seal(&a_msg).unwrap();
    assert!(matches!(deliver(&mut d, &first), Ok(Opened::Message(_))));
    assert_eq!(deliver(&mut d, &first), Err(Error::Tampered));
    // Reorder.
    let (mut d, mut a) = pair();
    let first = a.seal(&a_msg).unwrap();
    let second = a.seal(&b_msg).unwrap();
    assert_eq!(deliver(&mut d, &second), Err(Error::Tampered));
    let _ = first;
    // A record of a split message cut out.
    let (mut d, mut a) = pair();
    let big = a.seal(&tiles(2 * RECORD_PIECE)).unwrap();
    let recs = records(&big);
    assert_eq!(d.open(&recs[0]), Ok(Opened::Partial));
    assert_eq!(d.open(&recs[2]), Err(Error::Tampered));
}

#[test]
fn another_key_or_a_tampered_handshake_fails_it() {
    let (_, hello) = dial();
    let mut other = [7; 16];
    other[0] = 8;
    let mut wrong =
        SecureLink::responder(&other, &NONCE, Role::Attach, &request(), [2; 32]).unwrap();
    assert_eq!(wrong.open(&hello), Err(Error::Handshake));
    // Same key, but the cleartext request was altered on the way.
    let mut altered = request();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    let mut a = SecureLink::responder(&KEY, &NONCE, Role::Attach, &altered, [2; 32]).unwrap();
    assert_eq!(a.open(&hello), Err(Error::Handshake));
    // The join key does not open an attach link.
    let mut a = SecureLink::responder(&KEY, &NONCE, Role::Join, &request(), [2; 32]).unwrap();
    assert_eq!(a.open(&hello), Err(Error::Handshake));
    // A flipped bit in the handshake itself.
    let mut bad = hello.clone();
    bad[HEADER_LEN + 3] ^= 1;
    let mut a = SecureLink::responder(&KEY, &NONCE, Role::Attach, &request(), [2; 32]).unwrap();
    assert_eq!(a.open(&bad), Err(Error::Handshake));
}

#[test]
fn cleartext_on_an_encrypted_link_is_refused() {
    let (mut d, mut a) = pair();
    let end = Control::End.to_bytes();
    assert_eq!(d.open(&end), Err(Error::Unencrypted(Kind::End)));
    // A refusal is the one cleartext a dialer may get instead of the answer.
    let (mut d, _) = dial();
    let refused = Control::Refused {
        reason: "no".into(),
    }
    .to_bytes();
    assert_eq!(d.open(&refused), Ok(Opened::Refusal(refused.clone())));
    // Not to the acceptor, and not once open.
    assert_eq!(a.open(&refused), Err(Error::Unencrypted(Kind::Refused)));
}

#[test]
fn a_sealed_record_that_is_not_a_framed_message_is_refused() {
    let (mut d, a) = pair();
    // Seal raw bytes that are not a framed message.
    let mut a = a;
    let sealed = a.seal(&[0, 0, 0, 9, 1]).unwrap();
    assert!(matches!(deliver(&mut d, &sealed), Err(Error::Framing(_))));
}

/// An acceptor's and a dialer's layer on `link`, through the handshake;
/// returns them and the sealed welcome the acceptor held until then.
fn layers(link: LinkId) -> (Secure, Secure, Message, Vec<Message>) {
    let from = "10.0.0.9:4000".parse().unwrap();
    let (mut acc, mut dial) = (Secure::new(), Secure::new());
    let accepted = LinkInput::Accepted {
        link,
        from,
        nonce: NONCE,
        seed: [5; 32],
    };
    assert_eq!(acc.input(accepted.clone()), Ok(Some(accepted)));
    let connected = LinkInput::Connected {
        dial: crate::tree::DialId(0),
        link,
        seed: [6; 32],
    };
    assert!(dial.input(connected).unwrap().is_some());
    // Cleartext challenge and request pass.
    let ch: Message = challenge().into();
    acc.push(Transmit::Send {
        link,
        msg: ch.clone(),
    });
    assert_eq!(
        acc.poll_transmit(Nanos::ZERO),
        Some(Transmit::Send {
            link,
            msg: ch.clone()
        })
    );
    let req: Message = request().into();
    dial.push(Transmit::Send {
        link,
        msg: req.clone(),
    });
    dial.initiate(link, &KEY, Role::Attach, &ch, &req).unwrap();
    let out: Vec<Transmit> = std::iter::from_fn(|| dial.poll_transmit(Nanos::ZERO)).collect();
    assert_eq!(out.len(), 2, "request, then the handshake");
    // The acceptor admits it; its welcome is held until the handshake.
    acc.respond(Nanos(0), link, &KEY, &NONCE, Role::Attach, &req)
        .unwrap();
    let format = crate::video::format::VideoFormat::new(64, 64, crate::PixelFormat::Rgb24);
    let welcome: Message = Control::Welcome {
        format: format.unwrap(),
    }
    .to_bytes()
    .into();
    acc.push(Transmit::Send {
        link,
        msg: welcome.clone(),
    });
    assert_eq!(acc.poll_transmit(Nanos::ZERO), None);
    let Transmit::Send { msg: hello, .. } = &out[1] else {
        panic!()
    };
    let got = acc.input(LinkInput::Received {
        link,
        msg: hello.clone(),
    });
    assert_eq!(got, Ok(None));
    let sends: Vec<Message> = std::iter::from_fn(|| acc.poll_transmit(Nanos::ZERO))
        .map(|t| match t {
            Transmit::Send { msg, .. } => msg,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sends.len(), 2, "handshake answer, then the sealed welcome");
    (acc, dial, welcome, sends)
}

#[test]
fn secure_layer_holds_until_the_handshake_and_hides_its_own_writes() {
    let link = LinkId(4);
    let (mut acc, mut dial, welcome, sends) = layers(link);
    // The challenge's, the answer's and the welcome's writes are
    // reported: the machine hears of the challenge's and the welcome's.
    let sent = LinkInput::Sent { link };
    assert_eq!(acc.input(sent.clone()), Ok(Some(sent.clone())));
    assert_eq!(acc.input(sent.clone()), Ok(None));
    assert_eq!(acc.input(sent.clone()), Ok(Some(sent)));
    // The dialer completes its handshake and opens the welcome.
    let received = |msg: &Message| LinkInput::Received {
        link,
        msg: msg.clone(),
    };
    assert_eq!(dial.input(received(&sends[0])), Ok(None));
    assert!(dial.is_open(link));
    assert_eq!(
        dial.input(received(&sends[1])),
        Ok(Some(LinkInput::Received { link, msg: welcome }))
    );
}

#[test]
fn secure_layer_names_a_tampered_link_and_never_writes_to_it_again() {
    let link = LinkId(4);
    let (mut acc, mut dial, _, sends) = layers(link);
    for m in &sends {
        dial.input(LinkInput::Received {
            link,
            msg: m.clone(),
        })
        .unwrap();
    }
    acc.push(Transmit::Send {
        link,
        msg: Arc::from(Control::End.to_bytes()),
    });
    let Some(Transmit::Send { msg, .. }) = acc.poll_transmit(Nanos::ZERO) else {
        panic!()
    };
    let mut bad = msg.to_vec();
    bad[HEADER_LEN + 2] ^= 1;
    assert_eq!(
        dial.input(LinkInput::Received {
            link,
            msg: bad.into()
        }),
        Err((link, Error::Tampered))
    );
    assert!(!dial.is_open(link));
    // Nothing is ever written to it in the clear afterwards.
    dial.push(Transmit::Send {
        link,
        msg: Arc::from(Control::Ready.to_bytes()),
    });
    assert_eq!(dial.poll_transmit(Nanos::ZERO), None);
}

#[test]
fn the_same_seeds_give_the_same_bytes() {
    let (_, mut a1) = pair();
    let (_, mut a2) = pair();
    let msg = tiles(100);
    assert_eq!(a1.seal(&msg).unwrap(), a2.seal(&msg).unwrap());
}

/// `link` accepted on the acceptor's layer and its newcomer admitted at
/// `at` (the handshake it then owes has not begun).
fn admit(acc: &mut Secure, link: LinkId, at: Nanos) {
    acc.input(LinkInput::Accepted {
        link,
        from: "10.0.0.9:4000".parse().unwrap(),
        nonce: NONCE,
        seed: [5; 32],
    })
    .unwrap();
    acc.respond(at, link, &KEY, &NONCE, Role::Attach, &request())
        .unwrap();
}

#[test]
fn a_refusal_after_admission_goes_out_sealed_before_the_close() {
    let link = LinkId(2);
    let mut acc = Secure::new();
    admit(&mut acc, link, Nanos(0));
    let refused: Message = Control::Refused {
        reason: "the tree is full".into(),
    }
    .to_bytes()
    .into();
    acc.push(Transmit::Send {
        link,
        msg: refused.clone(),
    });
    let flush = Transmit::Close {
        link,
        how: Close::Flush,
    };
    acc.push(flush.clone());
    assert_eq!(
        acc.poll_transmit(Nanos::ZERO),
        None,
        "nothing before the handshake"
    );
    let (mut dialer, hello) = dial();
    acc.input(LinkInput::Received {
        link,
        msg: hello.into(),
    })
    .unwrap();
    let out: Vec<Transmit> = std::iter::from_fn(|| acc.poll_transmit(Nanos::ZERO)).collect();
    let [
        Transmit::Send { msg: ref reply, .. },
        Transmit::Send {
            msg: ref sealed, ..
        },
        ref close,
    ] = out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(close, &flush);
    assert_eq!(dialer.open(reply), Ok(Opened::Established));
    assert_eq!(
        deliver(&mut dialer, sealed),
        Ok(Opened::Message(refused.to_vec()))
    );
}

#[test]
fn an_admitted_newcomer_that_never_shakes_hands_is_dropped_in_time() {
    let (a, b) = (LinkId(1), LinkId(2));
    let mut acc = Secure::new();
    for (link, at) in [(a, Nanos(0)), (b, Nanos(100))] {
        admit(&mut acc, link, at);
    }
    assert_eq!(acc.poll_timeout(), Some(HANDSHAKE_TIMEOUT));
    // b completes its handshake: only a is left to time out.
    let (_, hello) = dial();
    acc.input(LinkInput::Received {
        link: b,
        msg: hello.into(),
    })
    .unwrap();
    assert_eq!(acc.expire(HANDSHAKE_TIMEOUT - Nanos(1)), []);
    assert_eq!(acc.expire(HANDSHAKE_TIMEOUT), [a]);
    assert_eq!(acc.poll_timeout(), None);
    assert!(acc.is_open(b));
}
