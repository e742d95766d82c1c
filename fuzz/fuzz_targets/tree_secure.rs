//! The encrypted tree link's decoder (`tree::SecureLink::open`) fed
//! records from an attacker on the path.
//!
//! Input: steps of `op (1) | arg (1)`, then bytes as each op needs.
//! `op % 6`: 0 the other side seals a message of `arg * 300` bytes (split
//! into records when long) and it arrives intact; 1 the same with one
//! byte (picked by the next two input bytes) flipped; 2 the last sealed
//! record arrives again (a replay); 3 two sealed messages arrive in the
//! wrong order; 4 an arbitrary framed message (`kind (1) | len (2) |
//! body (len)`) arrives; 5 the handshake answer arrives again.
//! Invariants: no panic; an intact message arrives byte for byte while
//! the link is sound; a flipped byte, a replay or a reordering is always
//! refused; once refused the link stays refused (Error::Broken) and
//! never yields a message again; no record is over Noise's 65535 bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::Reader;
use nagare_proto::framing::{HEADER_LEN, messages};
use nagare_proto::screen::ScreenMessage;
use nagare_proto::tree::secure::{MAX_RECORD, Opened};
use nagare_proto::tree::{Control, PeerId, Role, SecureLink, proof};

const KEY: [u8; 16] = [0x42; 16];
const NONCE: [u8; 32] = [0x17; 32];

fn pair() -> (SecureLink, SecureLink, Vec<u8>) {
    let challenge = Control::Challenge { nonce: NONCE }.to_bytes();
    let request = Control::Attach {
        proof: proof(&KEY, &NONCE, Role::Attach),
        peer: PeerId(3),
        version: None,
    }
    .to_bytes();
    let (mut dialer, hello) =
        SecureLink::initiator(&KEY, &NONCE, Role::Attach, &challenge, &request, [1; 32])
            .expect("initiator");
    let mut acceptor =
        SecureLink::responder(&KEY, &NONCE, Role::Attach, &request, [2; 32]).expect("responder");
    let Ok(Opened::Reply(reply)) = acceptor.open(&hello) else {
        panic!("handshake refused");
    };
    assert_eq!(dialer.open(&reply), Ok(Opened::Established));
    (dialer, acceptor, reply)
}

struct Harness {
    rx: SecureLink,
    tx: SecureLink,
    reply: Vec<u8>,
    broken: bool,
    last: Vec<u8>,
}

impl Harness {
    /// Feeds every record of `sealed` as it came off the sealer; the
    /// message it yields, if any.
    fn feed(&mut self, sealed: &[u8]) -> Result<Option<Vec<u8>>, ()> {
        for r in messages(sealed) {
            assert!(r.len() - HEADER_LEN - 1 <= MAX_RECORD, "record over 65535");
        }
        self.feed_tampered(sealed)
    }

    /// Feeds every record of bytes an attacker may have changed: a flipped
    /// length prefix can join records into one over the limit, which the
    /// link must refuse like any other bad record.
    fn feed_tampered(&mut self, sealed: &[u8]) -> Result<Option<Vec<u8>>, ()> {
        let mut got = None;
        for r in messages(sealed) {
            match self.rx.open(r) {
                Ok(Opened::Message(m)) => {
                    assert!(!self.broken, "a message after the link broke");
                    got = Some(m);
                }
                Ok(Opened::Partial) => assert!(!self.broken),
                Ok(other) => panic!("{other:?} on an open link"),
                Err(_) => {
                    self.broken = true;
                    return Err(());
                }
            }
        }
        Ok(got)
    }

    fn seal(&mut self, len: usize) -> (Vec<u8>, Vec<u8>) {
        let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let msg = ScreenMessage::Tiles(&body).to_bytes();
        let sealed = self.tx.seal(&msg).expect("an open link seals");
        (msg, sealed)
    }
}

fuzz_target!(|data: &[u8]| {
    let (rx, tx, reply) = pair();
    let mut h = Harness {
        rx,
        tx,
        reply,
        broken: false,
        last: Vec::new(),
    };
    let mut r = Reader::new(data);
    for _ in 0..64 {
        if r.remaining() == 0 {
            break;
        }
        let (op, arg) = (r.u8(), r.u8());
        let len = usize::from(arg) * 300;
        match op % 6 {
            0 => {
                let (msg, sealed) = h.seal(len);
                let was_broken = h.broken;
                let got = h.feed(&sealed);
                if !was_broken {
                    assert_eq!(got, Ok(Some(msg)), "an intact message was refused");
                }
                h.last = sealed;
            }
            1 => {
                let (_, mut sealed) = h.seal(len);
                let at = usize::from(r.u16()) % sealed.len();
                sealed[at] ^= arg | 1;
                // A flip in a length prefix may cut the records short; the
                // link must still not deliver the message.
                assert!(
                    !matches!(h.feed_tampered(&sealed), Ok(Some(_))),
                    "a flipped byte got through"
                );
                // The sender moved on: the link is out of step for good.
                h.broken = true;
            }
            2 => {
                if !h.last.is_empty() {
                    let last = h.last.clone();
                    assert!(h.feed(&last).is_err(), "a replay got through");
                }
            }
            3 => {
                let (_, first) = h.seal(len);
                let (_, second) = h.seal(len / 2 + 1);
                assert!(h.feed(&second).is_err(), "reordered records got through");
                let _ = h.feed(&first);
            }
            4 => {
                let kind = r.u8();
                let n = usize::from(r.u16());
                let body = r.bytes(n);
                let mut msg = (1 + body.len() as u32).to_be_bytes().to_vec();
                msg.push(kind);
                msg.extend_from_slice(body);
                // Anything not sealed by the other side is refused.
                let opened = h.rx.open(&msg);
                assert!(opened.is_err(), "a forged record was accepted: {opened:?}");
                h.broken = true;
            }
            _ => {
                let reply = h.reply.clone();
                assert!(
                    h.rx.open(&reply).is_err(),
                    "a second handshake was accepted"
                );
                h.broken = true;
            }
        }
    }
});
