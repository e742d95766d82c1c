//! The two machines step by step: what each sends, closes and reports
//! for one input at a time (the whole tree runs in tests/tree_sim.rs).

use std::net::SocketAddr;

use super::coordinator::{self, Coordinator, CoordinatorConfig, SETTLING};
use super::peer::{self, Event, Failure, Loss, Peer, PeerConfig, SILENCE, SILENCE_PER_HOP};
use super::*;
use crate::framing::{self, Kind};
use crate::units::Nanos;
use crate::video::format::{PixelFormat, VideoFormat};
use std::collections::{BTreeMap, VecDeque};

const KEY: SessionKey = [9; 16];

fn source_addr() -> SocketAddr {
    "10.0.0.1:7450".parse().unwrap()
}

fn format() -> VideoFormat {
    VideoFormat::new(64, 64, PixelFormat::Rgb24).unwrap()
}

/// The far ends of a machine's links, as a well-behaved other side: it
/// completes each link's handshake, seals what the test hands in once the
/// link is open and opens what the machine sends, so tests read and
/// write cleartext. Like a driver, it reports every cleartext and
/// handshake write as done at once; the stream's writes are reported by
/// the tests.
#[derive(Default)]
struct Wire {
    far: BTreeMap<LinkId, SecureLink>,
    challenge: BTreeMap<LinkId, Vec<u8>>,
    request: BTreeMap<LinkId, Vec<u8>>,
}

trait Machine {
    fn feed(&mut self, now: Nanos, l: LinkInput);
    fn poll(&mut self) -> Option<Transmit>;
}

impl Machine for Peer {
    fn feed(&mut self, now: Nanos, l: LinkInput) {
        self.handle_input(now, peer::Input::Link(l));
    }
    fn poll(&mut self) -> Option<Transmit> {
        self.poll_transmit(Nanos(0))
    }
}

impl Wire {
    /// Hands `input` to `m` (sealed if its link is open) and returns what
    /// `m` wants done, opened.
    fn run(&mut self, m: &mut impl Machine, now: Nanos, input: LinkInput) -> Vec<Transmit> {
        let inputs = self.inbound(input);
        self.drive(m, now, inputs)
    }

    /// Feeds `inputs` as they are, then what the wire answers itself.
    fn drive(&mut self, m: &mut impl Machine, now: Nanos, inputs: Vec<LinkInput>) -> Vec<Transmit> {
        let mut pending = VecDeque::from(inputs);
        let mut out = Vec::new();
        while let Some(i) = pending.pop_front() {
            m.feed(now, i);
            while let Some(t) = m.poll() {
                self.outbound(t, &mut pending, &mut out);
            }
        }
        out
    }

    /// What `m` wants done now, opened.
    fn poll(&mut self, m: &mut impl Machine, now: Nanos) -> Vec<Transmit> {
        let mut pending = VecDeque::new();
        let mut out = Vec::new();
        while let Some(t) = m.poll() {
            self.outbound(t, &mut pending, &mut out);
        }
        out.extend(self.drive(m, now, pending.into()));
        out
    }

    fn inbound(&mut self, i: LinkInput) -> Vec<LinkInput> {
        let LinkInput::Received { link, msg } = i else {
            return vec![i];
        };
        match self.far.get_mut(&link) {
            Some(f) if f.is_open() => {
                let sealed = f.seal(&msg).unwrap();
                framing::messages(&sealed)
                    .map(|r| LinkInput::Received {
                        link,
                        msg: r.into(),
                    })
                    .collect()
            }
            _ => {
                if framing::split(&msg).is_ok_and(|(k, _)| k == Kind::Challenge) {
                    self.challenge.insert(link, msg.to_vec());
                }
                vec![LinkInput::Received { link, msg }]
            }
        }
    }

    fn outbound(
        &mut self,
        t: Transmit,
        pending: &mut VecDeque<LinkInput>,
        out: &mut Vec<Transmit>,
    ) {
        let Transmit::Send { link, msg } = t else {
            if let Transmit::Close { link, .. } = t {
                self.far.remove(&link);
            }
            return out.push(t);
        };
        let kind = framing::split(&msg).map(|(k, _)| k).ok();
        if kind != Some(Kind::Sealed) {
            pending.push_back(LinkInput::Sent { link });
        }
        match kind {
            Some(Kind::Handshake) => self.handshake(link, &msg, pending),
            Some(Kind::Sealed) => {
                let far = self.far.get_mut(&link).expect("sealed before a handshake");
                for r in framing::messages(&msg) {
                    if let Ok(secure::Opened::Message(m)) = far.open(r) {
                        out.push(Transmit::Send {
                            link,
                            msg: m.into(),
                        });
                    }
                }
            }
            _ => {
                if matches!(kind, Some(Kind::Join | Kind::Attach)) {
                    self.request.insert(link, msg.to_vec());
                }
                out.push(Transmit::Send { link, msg });
            }
        }
    }

    fn handshake(&mut self, link: LinkId, msg: &[u8], pending: &mut VecDeque<LinkInput>) {
        if let Some(far) = self.far.get_mut(&link) {
            assert_eq!(far.open(msg), Ok(secure::Opened::Established));
            return;
        }
        // The machine dialled: this side is the acceptor.
        let challenge = &self.challenge[&link];
        let request = &self.request[&link];
        let (_, body) = framing::split(challenge).unwrap();
        let nonce: Nonce = body.try_into().unwrap();
        let role = match framing::split(request).unwrap().0 {
            Kind::Join => Role::Join,
            _ => Role::Attach,
        };
        let mut far = SecureLink::responder(&KEY, &nonce, role, request, [0xfa; 32]).unwrap();
        let Ok(secure::Opened::Reply(reply)) = far.open(msg) else {
            panic!("handshake refused");
        };
        self.far.insert(link, far);
        pending.push_back(LinkInput::Received {
            link,
            msg: reply.into(),
        });
    }

    /// The dialer's side of an accepted link the machine admitted.
    fn dial(&mut self, link: LinkId, nonce: Nonce, request: &[u8]) -> LinkInput {
        let role = match framing::split(request).unwrap().0 {
            Kind::Join => Role::Join,
            _ => Role::Attach,
        };
        let challenge = Control::Challenge { nonce }.to_bytes();
        let (far, hello) =
            SecureLink::initiator(&KEY, &nonce, role, &challenge, request, [0xdf; 32]).unwrap();
        self.far.insert(link, far);
        LinkInput::Received {
            link,
            msg: hello.into(),
        }
    }
}

thread_local! {
    static PEER_WIRE: std::cell::RefCell<Wire> = std::cell::RefCell::new(Wire::default());
}

fn transmits(p: &mut Peer) -> Vec<Transmit> {
    PEER_WIRE.with(|w| w.borrow_mut().poll(p, Nanos(0)))
}

fn events(p: &mut Peer) -> Vec<Event> {
    std::iter::from_fn(|| p.poll_event()).collect()
}

fn sent(t: &[Transmit]) -> Vec<(LinkId, Control)> {
    t.iter()
        .filter_map(|t| match t {
            Transmit::Send { link, msg } => Some((*link, Control::parse_framed(msg).ok()?)),
            _ => None,
        })
        .collect()
}

fn input(p: &mut Peer, now: Nanos, l: LinkInput) -> Vec<Transmit> {
    PEER_WIRE.with(|w| w.borrow_mut().run(p, now, l))
}

fn receive(p: &mut Peer, now: Nanos, link: LinkId, c: &Control) -> Vec<Transmit> {
    let msg = c.to_bytes().into();
    input(p, now, LinkInput::Received { link, msg })
}

fn new_peer() -> Peer {
    PEER_WIRE.with(|w| *w.borrow_mut() = Wire::default());
    Peer::new(
        Nanos(0),
        PeerConfig {
            key: KEY,
            source: source_addr(),
            relay_port: 7000,
            limits: Limits::default(),
            give_up: Nanos::from_secs(30),
            retry_seed: 7,
        },
    )
}

/// Takes a new peer through the join (the control link is 0); returns
/// it with what it asked for on being placed.
fn placed_peer() -> (Peer, Vec<Transmit>) {
    let mut p = new_peer();
    let t = transmits(&mut p);
    assert_eq!(
        t,
        [Transmit::Connect {
            dial: DialId(0),
            addr: source_addr(),
            role: Role::Join
        }]
    );
    input(
        &mut p,
        Nanos(0),
        LinkInput::Connected {
            dial: DialId(0),
            link: LinkId(0),
            seed: [0xd0; 32],
        },
    );
    let nonce = [1; 32];
    let t = receive(&mut p, Nanos(1), LinkId(0), &Control::Challenge { nonce });
    let [
        (
            LinkId(0),
            Control::Join {
                proof: pr,
                relay_port: 7000,
            },
        ),
    ] = sent(&t)[..]
    else {
        panic!("no join: {t:?}");
    };
    assert!(proof_matches(&KEY, &nonce, Role::Join, &pr));
    let placed = Control::Placed {
        peer: PeerId(4),
        slot: 4,
        depth: 2,
        parent: PeerId::SOURCE,
        parent_addr: "0.0.0.0:0".parse().unwrap(),
    };
    let t = receive(&mut p, Nanos(2), LinkId(0), &placed);
    (p, t)
}

/// Takes a new peer through join and attach to the source; the control
/// link is 0, the parent link 1.
fn attached_peer() -> Peer {
    let (mut p, t) = placed_peer();
    let attach_dial = Transmit::Connect {
        dial: DialId(1),
        addr: source_addr(),
        role: Role::Attach,
    };
    assert_eq!(t, [attach_dial]);
    input(
        &mut p,
        Nanos(3),
        LinkInput::Connected {
            dial: DialId(1),
            link: LinkId(1),
            seed: [0xd1; 32],
        },
    );
    let t = receive(
        &mut p,
        Nanos(4),
        LinkId(1),
        &Control::Challenge { nonce: [2; 32] },
    );
    let [
        (
            LinkId(1),
            Control::Attach {
                peer,
                version: None,
                ..
            },
        ),
    ] = sent(&t)[..]
    else {
        panic!("no attach: {t:?}");
    };
    assert_eq!(peer, PeerId(4));
    let t = receive(
        &mut p,
        Nanos(5),
        LinkId(1),
        &Control::Welcome { format: format() },
    );
    assert_eq!(sent(&t), [(LinkId(0), Control::Ready)]);
    p
}

#[test]
fn peer_joins_attaches_and_says_ready() {
    let mut p = attached_peer();
    let e = events(&mut p);
    assert!(matches!(e[0], Event::Placed { moved: false, .. }), "{e:?}");
    assert_eq!(
        e[1],
        Event::Attached {
            parent: PeerId::SOURCE,
            format: format()
        }
    );
    assert_eq!(p.stats().depth, 2);
    assert!(!p.is_done());
}

#[test]
fn a_refused_join_ends_with_the_reason_and_closes() {
    let mut p = new_peer();
    transmits(&mut p);
    input(
        &mut p,
        Nanos(0),
        LinkInput::Connected {
            dial: DialId(0),
            link: LinkId(0),
            seed: [0xd0; 32],
        },
    );
    let reason = "wrong session key".to_owned();
    let t = receive(
        &mut p,
        Nanos(1),
        LinkId(0),
        &Control::Refused {
            reason: reason.clone(),
        },
    );
    assert_eq!(
        t,
        [Transmit::Close {
            link: LinkId(0),
            how: Close::Flush
        }]
    );
    assert_eq!(events(&mut p), [Event::Failed(Failure::Refused(reason))]);
    assert!(p.is_done());
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn a_join_closed_before_placement_is_tried_again_with_a_growing_jittered_wait() {
    let mut p = new_peer();
    let mut now = Nanos(0);
    let mut waits = Vec::new();
    for attempt in 0..peer::JOIN_ATTEMPTS {
        let t = transmits(&mut p);
        let dial = DialId(u64::from(attempt));
        assert!(
            t.contains(&Transmit::Connect {
                dial,
                addr: source_addr(),
                role: Role::Join
            }),
            "attempt {attempt}: {t:?}"
        );
        let link = LinkId(u64::from(attempt));
        let seed = [0xd0; 32];
        input(&mut p, now, LinkInput::Connected { dial, link, seed });
        // The source evicts the handshake unanswered.
        input(&mut p, now, LinkInput::Closed { link });
        if attempt + 1 == peer::JOIN_ATTEMPTS {
            break;
        }
        let [
            Event::JoinRetry {
                attempt: next,
                after,
            },
        ] = events(&mut p)[..]
        else {
            panic!("no retry after attempt {attempt}");
        };
        assert_eq!(next, attempt + 2);
        let base = peer::JOIN_BACKOFF.0 << attempt;
        assert!(
            after.0 >= base && after.0 < base + base / 2,
            "{after:?} for base {base}"
        );
        waits.push(after);
        let due = p.poll_timeout().unwrap();
        assert_eq!(due, now + after);
        now = due;
        p.handle_input(now, peer::Input::Timeout);
    }
    assert_eq!(events(&mut p), [Event::Failed(Failure::SourceClosed)]);
    assert_eq!(waits.len() as u32, peer::JOIN_ATTEMPTS - 1);
}

#[test]
fn unreachable_and_silent_sources_fail() {
    let mut p = new_peer();
    transmits(&mut p);
    input(
        &mut p,
        Nanos(0),
        LinkInput::ConnectFailed { dial: DialId(0) },
    );
    assert_eq!(events(&mut p), [Event::Failed(Failure::SourceUnreachable)]);

    let mut p = new_peer();
    transmits(&mut p);
    input(
        &mut p,
        Nanos(0),
        LinkInput::Connected {
            dial: DialId(0),
            link: LinkId(0),
            seed: [0xd0; 32],
        },
    );
    let due = p.poll_timeout().unwrap();
    assert_eq!(due, HANDSHAKE_TIMEOUT);
    p.handle_input(due, peer::Input::Timeout);
    assert_eq!(events(&mut p), [Event::Failed(Failure::Timeout)]);
    assert!(
        p.poll_timeout().is_none_or(|t| t > due),
        "timer not cleared"
    );
}

#[test]
fn bad_data_from_the_parent_reattaches_to_it() {
    let mut p = attached_peer();
    events(&mut p);
    // A frame end with no frame open.
    let msg = crate::screen::ScreenMessage::FrameEnd { number: 3 }.to_bytes();
    let t = input(
        &mut p,
        Nanos(9),
        LinkInput::Received {
            link: LinkId(1),
            msg: msg.into(),
        },
    );
    assert_eq!(
        t,
        [
            Transmit::Close {
                link: LinkId(1),
                how: Close::Abort
            },
            Transmit::Connect {
                dial: DialId(2),
                addr: source_addr(),
                role: Role::Attach
            }
        ]
    );
    assert!(matches!(events(&mut p)[..], [Event::BadData { .. }]));
}

#[test]
fn a_silent_parent_is_reported_after_the_silence_of_its_depth() {
    let mut p = attached_peer();
    events(&mut p);
    let due = Nanos(5) + SILENCE + SILENCE_PER_HOP + SILENCE_PER_HOP;
    assert_eq!(p.poll_timeout(), Some(due));
    p.handle_input(due, peer::Input::Timeout);
    let t = transmits(&mut p);
    assert_eq!(
        sent(&t),
        [(
            LinkId(0),
            Control::Orphaned {
                parent: PeerId::SOURCE
            }
        )]
    );
    assert_eq!(
        events(&mut p),
        [Event::ParentLost {
            parent: PeerId::SOURCE,
            why: Loss::Silent
        }]
    );
}

struct Source {
    c: Coordinator,
    now: Nanos,
    wire: Wire,
}

impl Machine for Coordinator {
    fn feed(&mut self, now: Nanos, l: LinkInput) {
        self.handle_input(now, coordinator::Input::Link(l)).unwrap();
    }
    fn poll(&mut self) -> Option<Transmit> {
        self.poll_transmit(Nanos(0))
    }
}

impl Source {
    fn new() -> Source {
        let cfg = CoordinatorConfig {
            key: KEY,
            format: format(),
            key_interval: 0,
            limits: Limits::default(),
        };
        Source {
            c: Coordinator::new(cfg).unwrap(),
            now: Nanos(0),
            wire: Wire::default(),
        }
    }

    fn input(&mut self, i: coordinator::Input<'_>) -> Vec<Transmit> {
        self.c.handle_input(self.now, i).unwrap();
        self.wire.poll(&mut self.c, self.now)
    }

    fn link(&mut self, l: LinkInput) -> Vec<Transmit> {
        self.wire.run(&mut self.c, self.now, l)
    }

    /// Accepts `link` and answers its challenge with `answer(nonce)`.
    fn admit(&mut self, link: u64, answer: impl Fn([u8; 32]) -> Control) -> Vec<Transmit> {
        let nonce = [link as u8; 32];
        let from = format!("10.0.0.{}:40000", 10 + link).parse().unwrap();
        let t = self.link(LinkInput::Accepted {
            link: LinkId(link),
            from,
            nonce,
            seed: [0xac; 32],
        });
        assert_eq!(sent(&t), [(LinkId(link), Control::Challenge { nonce })]);
        let request = answer(nonce).to_bytes();
        let mut t = self.link(LinkInput::Received {
            link: LinkId(link),
            msg: request.clone().into(),
        });
        if t.is_empty() {
            // Admitted: the handshake, then what was held for it.
            let hello = self.wire.dial(LinkId(link), nonce, &request);
            t = self.link(hello);
        }
        t
    }

    fn join(&mut self, link: u64) -> Vec<Transmit> {
        self.admit(link, |nonce| Control::Join {
            proof: proof(&KEY, &nonce, Role::Join),
            relay_port: 7000,
        })
    }
}

#[test]
fn coordinator_refuses_wrong_keys_and_places_joins() {
    let mut s = Source::new();
    let t = s.admit(1, |nonce| Control::Join {
        proof: proof(&[0; 16], &nonce, Role::Join),
        relay_port: 7000,
    });
    let [
        Transmit::Send { .. },
        Transmit::Close {
            how: Close::Flush, ..
        },
    ] = t[..]
    else {
        panic!("{t:?}");
    };
    assert!(
        matches!(&sent(&t)[0].1, Control::Refused { reason } if reason.contains("wrong session key"))
    );
    for link in 2..5 {
        let t = s.join(link);
        let [(l, Control::Placed { peer, parent, .. })] = sent(&t)[..] else {
            panic!("{t:?}");
        };
        assert_eq!(l, LinkId(link));
        assert_eq!(peer, PeerId(link as u32 - 1));
        let want = if link < 4 { PeerId::SOURCE } else { PeerId(1) };
        assert_eq!(parent, want);
    }
    let ready = Control::Ready.to_bytes().into();
    s.link(LinkInput::Received {
        link: LinkId(2),
        msg: ready,
    });
    assert_eq!(s.c.ready(), 1);
    assert_eq!(s.c.topology().len(), 3);
}

#[test]
fn reports_against_a_peer_that_is_settling_are_stale() {
    let mut s = Source::new();
    for link in 1..=7 {
        s.join(link);
    }
    // Peer 1 (slot 1) dies; peer 7 (slot 7) moves into its slot.
    s.now = Nanos::from_secs(10);
    let t = s.link(LinkInput::Closed { link: LinkId(1) });
    let moved: Vec<(LinkId, PeerId)> = sent(&t)
        .into_iter()
        .filter_map(|(l, c)| match c {
            Control::Placed { parent, .. } => Some((l, parent)),
            _ => None,
        })
        .collect();
    assert_eq!(
        moved,
        [
            (LinkId(7), PeerId::SOURCE),
            (LinkId(3), PeerId(7)),
            (LinkId(4), PeerId(7))
        ]
    );
    // Peer 3's child would blame it while it re-attaches: only peer 3
    // is told where it sits again.
    s.now = s.now + SETTLING - Nanos(1);
    let orphaned = Control::Orphaned { parent: PeerId(7) }.to_bytes().into();
    let t = s.link(LinkInput::Received {
        link: LinkId(3),
        msg: orphaned,
    });
    assert!(matches!(
        sent(&t)[..],
        [(LinkId(3), Control::Placed { .. })]
    ));
    assert_eq!(s.c.topology().len(), 6);
}

#[test]
fn a_child_of_the_source_gets_welcome_frames_and_the_end() {
    let mut s = Source::new();
    s.join(1);
    let t = s.admit(2, |nonce| Control::Attach {
        proof: proof(&KEY, &nonce, Role::Attach),
        peer: PeerId(1),
        version: None,
    });
    assert_eq!(
        sent(&t),
        [(LinkId(2), Control::Welcome { format: format() })]
    );
    let pixels = vec![7; format().frame_bytes()];
    let t = s.input(coordinator::Input::Frame {
        pixels: &pixels,
        captured_us: 1,
    });
    assert!(t.is_empty(), "one message at a time: {t:?}");
    let t = s.link(LinkInput::Sent { link: LinkId(2) });
    let [
        Transmit::Send {
            link: LinkId(2),
            ref msg,
        },
    ] = t[..]
    else {
        panic!("{t:?}");
    };
    assert_eq!(crate::framing::split(msg).unwrap().0, Kind::FrameStart);
    let mut steps = Vec::new();
    s.input(coordinator::Input::End);
    while !s.c.is_finished() {
        let t = s.link(LinkInput::Sent { link: LinkId(2) });
        assert!(!t.is_empty(), "the end never came");
        for x in t {
            steps.push(match x {
                Transmit::Send { link, msg } => {
                    format!("{:?} to {}", crate::framing::split(&msg).unwrap().0, link.0)
                }
                Transmit::Close { link, how } => format!("{how:?} {}", link.0),
                Transmit::Connect { .. } => unreachable!("the source never dials"),
            });
        }
    }
    // The rest of the frame and the end of the stream, then the child's
    // link and the peer's control link close.
    assert_eq!(
        steps,
        [
            "Tiles to 2",
            "FrameEnd to 2",
            "End to 2",
            "Flush 2",
            "Flush 1"
        ]
    );
}
