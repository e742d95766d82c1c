//! A peer's machine (`tree::Peer`) fed arbitrary messages and events:
//! the target plays the source, the parent, children and the clock.
//!
//! Input: `format (3) | seed (1)`, then steps of `op (1) | arg (1)`.
//! `op & 15`: 0 the oldest dial connects, 1 it fails, 2 a challenge on
//! the control link, 3 a challenge on the parent link, 4 a placement
//! (parent `arg & 3`, depth `arg >> 2 & 3`), 5 a welcome (another format
//! when `arg & 1`), 6 the next chunk of a real encoded stream on the
//! parent link, 7 the rest of a frame, 8 an arbitrary message (`kind (1)
//! | len (1) | body (len)`) on the link `arg` picks, 9 a child connects,
//! 10 a child answers its challenge (a wrong proof when `arg & 0x80`),
//! 11 a write is reported done, 12 a link closes, 13 `arg * 50 ms` pass,
//! 14 the peer is told to leave, 15 a refusal on the control or parent
//! link.
//! The target is also every link's other end of the encryption: it
//! answers the peer's handshakes, seals what it hands in once a link's
//! handshake is done (op 8's arbitrary messages too) and opens what the
//! peer seals.
//! Invariants: no panic; every send goes to an open link and is a framed
//! control or screen message that parses; a join and an attach carry
//! valid proofs for the challenges sent; closes name open links; after a
//! timeout input the next timeout lies in the future; while only the
//! real stream reached the parent link every completed frame is
//! bit-exact and newer than the last; heap use stays within a bound set
//! by the format and the number of links.

#![no_main]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader, fnv1a, screen_format, screen_picture};
use nagare_proto::framing::{Kind, messages, split};
use nagare_proto::screen::{Encoder, ScreenMessage, TILE};
use nagare_proto::tree::peer::{Event, Input};
use nagare_proto::tree::secure::Opened;
use nagare_proto::tree::{
    Control, DialId, Limits, LinkId, LinkInput, Peer, PeerConfig, PeerId, Role, SecureLink,
    Transmit, proof, proof_matches,
};
use nagare_proto::{Nanos, VideoFormat};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const KEY: [u8; 16] = [0x42; 16];
const MAX_FRAMES: u64 = 64;

struct Harness {
    peer: Peer,
    format: VideoFormat,
    now: Nanos,
    next_link: u64,
    open: BTreeSet<LinkId>,
    dials: VecDeque<(DialId, Role)>,
    control: Option<LinkId>,
    upstream: Option<LinkId>,
    children: Vec<LinkId>,
    /// The last challenge the peer sent on each link, and the last one
    /// it was sent on the control and parent links.
    challenges: BTreeMap<LinkId, [u8; 32]>,
    given: BTreeMap<LinkId, [u8; 32]>,
    enc: Encoder,
    picture: Vec<u8>,
    truth: Vec<u64>,
    chunks: VecDeque<Vec<u8>>,
    tainted: bool,
    last_frame: Option<u64>,
    /// The far end of each link's encryption, once its handshake began.
    far: BTreeMap<LinkId, SecureLink>,
    /// The join or attach the peer sent on each link it dialled.
    requests: BTreeMap<LinkId, Vec<u8>>,
    /// Handshake answers to hand in once the peer's writes are drained.
    replies: Vec<(LinkId, Vec<u8>)>,
}

impl Harness {
    fn input(&mut self, input: Input) {
        let timeout = matches!(input, Input::Timeout);
        self.peer.handle_input(self.now, input);
        self.drain();
        if timeout && !self.peer.is_done() {
            if let Some(t) = self.peer.poll_timeout() {
                assert!(
                    t > self.now,
                    "a timeout at {t:?} is due again at {:?}",
                    self.now
                );
            }
        }
    }

    fn link(&mut self, l: LinkInput) {
        self.input(Input::Link(l));
    }

    fn drain(&mut self) {
        while let Some(t) = self.peer.poll_transmit(self.now) {
            match t {
                Transmit::Send { link, msg } => self.sent(link, &msg),
                Transmit::Connect { dial, role, .. } => self.dials.push_back((dial, role)),
                Transmit::Close { link, .. } => {
                    assert!(self.open.remove(&link), "closed {link:?}, not open");
                    self.far.remove(&link);
                }
            }
        }
        for (link, reply) in std::mem::take(&mut self.replies) {
            self.deliver_raw(Some(link), reply);
        }
        while let Some(e) = self.peer.poll_event() {
            if let Event::Frame(f) = e {
                let canvas = self.peer.canvas().expect("a frame needs a canvas");
                assert_eq!(canvas.version(), Some(f.number));
                if !self.tainted {
                    let want = self.truth.get(f.number as usize).expect("a frame made");
                    assert_eq!(fnv1a(canvas.pixels()), *want, "frame {} differs", f.number);
                    assert!(self.last_frame.is_none_or(|l| f.number > l));
                }
                self.last_frame = Some(f.number);
            }
        }
    }

    /// Checks one write of the peer: handshake messages are answered,
    /// sealed records opened and their messages checked.
    fn sent(&mut self, link: LinkId, msg: &[u8]) {
        assert!(self.open.contains(&link), "sent on {link:?}, not open");
        // A write is one framed message, or the records of a sealed one.
        let first = messages(msg)
            .next()
            .expect("the peer frames what it writes");
        let (kind, _) = split(first).expect("the peer frames what it writes");
        match kind {
            Kind::Handshake => self.handshake(link, msg),
            Kind::Sealed => {
                let far = self.far.get_mut(&link).expect("sealed after a handshake");
                let mut plain = Vec::new();
                for r in messages(msg) {
                    if let Ok(Opened::Message(m)) = far.open(r) {
                        plain.push(m);
                    }
                }
                for m in plain {
                    self.sent_plain(link, &m);
                }
            }
            _ => self.sent_plain(link, msg),
        }
    }

    /// The peer's handshake: as acceptor of its dial, or the answer to a
    /// child's.
    fn handshake(&mut self, link: LinkId, msg: &[u8]) {
        if let Some(far) = self.far.get_mut(&link) {
            assert!(matches!(far.open(msg), Ok(Opened::Established)));
            return;
        }
        let nonce = *self
            .given
            .get(&link)
            .expect("a handshake after a challenge");
        let request = self
            .requests
            .get(&link)
            .expect("a handshake after a request");
        let role = match split(request).expect("a framed request").0 {
            Kind::Join => Role::Join,
            _ => Role::Attach,
        };
        let mut far =
            SecureLink::responder(&KEY, &nonce, role, request, [9; 32]).expect("a responder");
        let Ok(Opened::Reply(reply)) = far.open(msg) else {
            panic!("the peer's handshake was refused");
        };
        self.far.insert(link, far);
        self.replies.push((link, reply));
    }

    /// Checks one cleartext (or opened) message the peer wrote.
    fn sent_plain(&mut self, link: LinkId, msg: &[u8]) {
        let (kind, body) = split(msg).expect("the peer frames what it sends");
        if kind.is_screen() {
            ScreenMessage::parse(kind, body).expect("relayed chunks decode");
            return;
        }
        match Control::parse(kind, body).expect("control messages parse") {
            Some(Control::Challenge { nonce }) => {
                self.challenges.insert(link, nonce);
            }
            Some(Control::Join { proof, .. }) => {
                let nonce = self.given.get(&link).expect("join after a challenge");
                assert!(proof_matches(&KEY, nonce, Role::Join, &proof));
                self.requests.insert(link, msg.to_vec());
            }
            Some(Control::Attach { proof, .. }) => {
                let nonce = self.given.get(&link).expect("attach after a challenge");
                assert!(proof_matches(&KEY, nonce, Role::Attach, &proof));
                self.requests.insert(link, msg.to_vec());
            }
            _ => {}
        }
    }

    fn new_link(&mut self) -> LinkId {
        let l = LinkId(self.next_link);
        self.next_link += 1;
        self.open.insert(l);
        l
    }

    /// Hands `msg` in on `link`, sealed once the link's handshake is done.
    fn deliver(&mut self, link: Option<LinkId>, msg: Vec<u8>) {
        let far = link
            .and_then(|l| self.far.get_mut(&l))
            .filter(|f| f.is_open());
        let Some(far) = far else {
            return self.deliver_raw(link, msg);
        };
        let Ok(sealed) = far.seal(&msg) else {
            return;
        };
        for r in messages(&sealed) {
            self.deliver_raw(link, r.to_vec());
        }
    }

    /// Hands `msg` in on `link` as it is.
    fn deliver_raw(&mut self, link: Option<LinkId>, msg: Vec<u8>) {
        if let Some(link) = link.filter(|l| self.open.contains(l)) {
            self.link(LinkInput::Received {
                link,
                msg: msg.into(),
            });
        }
    }

    fn challenge(&mut self, link: Option<LinkId>, arg: u8) {
        let nonce = [arg; 32];
        if let Some(l) = link {
            self.given.insert(l, nonce);
        }
        self.deliver(link, Control::Challenge { nonce }.to_bytes());
    }

    fn place(&mut self, arg: u8) {
        let parent = PeerId(u32::from(arg & 3));
        let addr: SocketAddr = ([10, 0, 0, arg & 3], 7000).into();
        let msg = Control::Placed {
            peer: PeerId(9),
            slot: 9,
            depth: u32::from(arg >> 2 & 3),
            parent,
            parent_addr: addr,
        };
        self.deliver(self.control, msg.to_bytes());
    }

    /// Makes the next frame of the real stream (tiles `mask` picks change).
    fn next_frame(&mut self, mask: u8) {
        let n = self.truth.len() as u64;
        if n >= MAX_FRAMES {
            return;
        }
        let line = self.format.line_bytes();
        for (i, row) in self.picture.chunks_mut(line).enumerate() {
            if mask & (1 << (i / TILE % 8)) != 0 {
                row[(n as usize * 7) % line] ^= mask | 1;
            }
        }
        let e = self
            .enc
            .encode(&self.picture, n, n)
            .expect("numbers increase");
        self.truth.push(fnv1a(&self.picture));
        self.chunks = e.messages.into();
    }

    fn chunk(&mut self, mask: u8) {
        if self.chunks.is_empty() {
            self.next_frame(mask);
        }
        if let Some(m) = self.chunks.pop_front() {
            self.deliver(self.upstream, m);
        }
    }

    /// A child answers its challenge (with a join proof when `arg & 0x80`).
    fn attach_child(&mut self, arg: u8) {
        let Some(link) = self.pick(2 + (arg & 0x7c)) else {
            return;
        };
        let nonce = self.challenges.get(&link).copied().unwrap_or_default();
        let role = if arg & 0x80 == 0 {
            Role::Attach
        } else {
            Role::Join
        };
        let version = self.truth.len().checked_sub(usize::from(arg & 3) + 1);
        let msg = Control::Attach {
            proof: proof(&KEY, &nonce, role),
            peer: PeerId(20 + u32::from(arg & 3)),
            version: version.map(|v| v as u64),
        }
        .to_bytes();
        self.deliver_raw(Some(link), msg.clone());
        // The child's side of the handshake follows its request.
        let challenge = Control::Challenge { nonce }.to_bytes();
        let Ok((far, hello)) =
            SecureLink::initiator(&KEY, &nonce, Role::Attach, &challenge, &msg, [arg; 32])
        else {
            return;
        };
        self.far.insert(link, far);
        self.deliver_raw(Some(link), hello);
    }

    /// An arbitrary link: control, parent, or a child.
    fn pick(&self, arg: u8) -> Option<LinkId> {
        match arg % 4 {
            0 => self.control,
            1 => self.upstream,
            _ => self
                .children
                .get(usize::from(arg / 4) % self.children.len().max(1))
                .copied(),
        }
    }
}

/// Steps 0..=7: the happy path of a peer's life, in pieces.
fn protocol_step(h: &mut Harness, op: u8, arg: u8) {
    match op {
        0 | 1 => {
            let Some((dial, role)) = h.dials.pop_front() else {
                return;
            };
            if op == 1 {
                return h.link(LinkInput::ConnectFailed { dial });
            }
            let link = h.new_link();
            match role {
                Role::Join => h.control = Some(link),
                Role::Attach => h.upstream = Some(link),
            }
            h.link(LinkInput::Connected {
                dial,
                link,
                seed: [arg; 32],
            });
        }
        2 => h.challenge(h.control, arg),
        3 => h.challenge(h.upstream, arg),
        4 => h.place(arg),
        5 => {
            let format = if arg & 1 == 0 {
                h.format
            } else {
                screen_format(arg, 3, 5)
            };
            // Frames of another format may happen to fit; don't judge them.
            h.tainted |= format != h.format;
            h.deliver(h.upstream, Control::Welcome { format }.to_bytes());
        }
        6 => h.chunk(arg),
        _ => {
            h.chunk(arg);
            while !h.chunks.is_empty() {
                h.chunk(arg);
            }
        }
    }
}

/// Steps 8..=15: garbage, children, the clock, leaving, refusals.
fn other_step(h: &mut Harness, r: &mut Reader<'_>, op: u8, arg: u8) {
    match op {
        8 => {
            let (kind, len) = (r.u8(), r.u8());
            let body = r.bytes(usize::from(len));
            let mut msg = (1 + body.len() as u32).to_be_bytes().to_vec();
            msg.push(kind);
            msg.extend_from_slice(body);
            let link = h.pick(arg);
            h.tainted |= link.is_some() && link == h.upstream;
            h.deliver(link, msg);
        }
        9 => {
            let link = h.new_link();
            h.children.push(link);
            let from = ([10, 0, 1, arg], 40000).into();
            let nonce = [arg ^ 0x5a; 32];
            h.link(LinkInput::Accepted {
                link,
                from,
                nonce,
                seed: [arg ^ 0xa5; 32],
            });
        }
        10 => h.attach_child(arg),
        11 | 12 => {
            let Some(link) = h.pick(arg).filter(|l| h.open.contains(l)) else {
                return;
            };
            if op == 12 {
                h.open.remove(&link);
                return h.link(LinkInput::Closed { link });
            }
            h.link(LinkInput::Sent { link });
        }
        13 => {
            h.now = h.now + Nanos::from_millis(50 * u64::from(arg));
            h.input(Input::Timeout);
        }
        14 => h.input(Input::Leave),
        _ => {
            let link = if arg & 1 == 0 { h.control } else { h.upstream };
            let msg = Control::Refused {
                reason: "no".into(),
            };
            h.deliver(link, msg.to_bytes());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = screen_format(r.u8(), r.u8(), r.u8());
    let mut picture = Vec::new();
    screen_picture(&format, r.u8(), &mut picture);
    let limits = Limits {
        lag: 64 << 10,
        resume: 8 << 10,
    };
    let cfg = PeerConfig {
        key: KEY,
        source: ([10, 0, 0, 0], 7450).into(),
        relay_port: 7000,
        limits,
        give_up: Nanos::from_secs(30),
        retry_seed: 0,
    };
    let mut h = Harness {
        peer: Peer::new(Nanos(0), cfg),
        format,
        now: Nanos(0),
        next_link: 0,
        open: BTreeSet::new(),
        dials: VecDeque::new(),
        control: None,
        upstream: None,
        children: Vec::new(),
        challenges: BTreeMap::new(),
        given: BTreeMap::new(),
        enc: Encoder::new(format, 5).expect("format fits"),
        picture,
        truth: Vec::new(),
        chunks: VecDeque::new(),
        tainted: false,
        last_frame: None,
        far: BTreeMap::new(),
        requests: BTreeMap::new(),
        replies: Vec::new(),
    };
    h.drain();
    let base = CountingAlloc::live();
    let frame = format.frame_bytes();
    while r.remaining() > 0 {
        let (op, arg) = (r.u8(), r.u8());
        match op & 15 {
            op @ 0..=7 => protocol_step(&mut h, op, arg),
            op => other_step(&mut h, &mut r, op, arg),
        }
        // Canvas and its undo, encoder, per child a queue and a catch-up.
        let per_child = limits.lag + 2 * (frame * 11 / 10 + 4096);
        let bound = (16 + h.children.len()) * per_child + 16 * frame + (1 << 20);
        let live = CountingAlloc::live().saturating_sub(base);
        assert!(live <= bound, "{live} heap bytes held, bound {bound}");
    }
});
