//! The source's machine: admits peers, places them in the balanced tree,
//! repairs the tree when a peer leaves or vanishes and tells exactly the
//! peers whose parent changed; encodes the captured screen and relays it
//! to the source's own (at most two) children.
//!
//! Sans-IO: the driver accepts connections and hands in what happens on
//! them as [`LinkInput`]s, hands in captured frames, writes what
//! [`Coordinator::poll_transmit`] yields and reports events to the user.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};

use super::Error;
use super::admission::{Admission, Refusal, Verdict};
use super::auth::{Role, SessionKey};
use super::fanout::Fanout;
use super::link::{Close, LinkId, LinkInput, Message, Transmit};
use super::relay::{Chunk, Limits};
use super::secure::Secure;
use super::topology::{Placement, Repair, Topology};
use super::wire::{Control, PeerId};
use crate::screen::{self, Encoder};
use crate::units::Nanos;
use crate::video::format::VideoFormat;

/// How long after a peer was told to re-attach (or reported its own
/// parent gone) its children's reports against it are taken as stale: it
/// is busy re-attaching, which is why it fell silent for them.
pub const SETTLING: Nanos = Nanos::from_secs(2);

/// How a source runs its tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// The session key peers must prove they hold.
    pub key: SessionKey,
    /// The screen's format.
    pub format: VideoFormat,
    /// A key frame at least every this many frames (0: only the first).
    pub key_interval: u64,
    /// Queue limits of each child.
    pub limits: Limits,
}

/// What the source's driver hands in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<'a> {
    /// Something happened on a connection.
    Link(LinkInput),
    /// A captured frame (packed, the configured format's size), captured
    /// at `captured_us` microseconds since the Unix epoch.
    Frame {
        /// The pixels.
        pixels: &'a [u8],
        /// Capture time on the source's clock.
        captured_us: u64,
    },
    /// The stream is over: children get the end, the tree is no longer
    /// repaired (peers leave on their own now).
    End,
    /// The time [`Coordinator::poll_timeout`] named has come.
    Timeout,
}

/// What the coordinator did, for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A peer joined; children reach it at `relay`.
    Joined {
        /// Its id.
        peer: PeerId,
        /// Its relay listener.
        relay: SocketAddr,
    },
    /// A peer was told where it sits (on joining, or after a repair).
    Placed(Placement),
    /// A peer attached to its parent and was welcomed.
    Ready {
        /// Which.
        peer: PeerId,
        /// Peers ready now.
        ready: usize,
    },
    /// A peer reported its parent gone.
    Orphaned {
        /// The reporter.
        child: PeerId,
        /// The parent it lost.
        parent: PeerId,
    },
    /// A peer's control link closed.
    Left {
        /// Which.
        peer: PeerId,
    },
    /// A peer was taken out of the tree.
    Removed {
        /// Which.
        peer: PeerId,
        /// Peers left.
        peers: usize,
        /// Depth of the tree now.
        depth: u32,
    },
    /// A child attached to the source itself.
    ChildAttached {
        /// Which.
        peer: PeerId,
    },
    /// A connection was turned away.
    Refused {
        /// Where it came from.
        from: SocketAddr,
        /// Why.
        why: Refusal,
    },
    /// An admitted link's encryption failed (a tampered, replayed or
    /// reordered record, or a failed handshake): it was dropped.
    LinkDropped {
        /// The peer on it, if it was a peer's control link.
        peer: Option<PeerId>,
        /// What failed.
        error: Error,
    },
}

/// What the source has sent, for its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Frames encoded.
    pub frames: u64,
    /// Of those, key frames.
    pub key_frames: u64,
    /// Tiles encoded.
    pub tiles: u64,
    /// Bytes of encoded frames, headers included.
    pub bytes: u64,
}

#[derive(Debug)]
struct Member {
    link: LinkId,
    relay: SocketAddr,
}

/// The source's machine; see the module docs.
#[derive(Debug)]
pub struct Coordinator {
    admission: Admission,
    topology: Topology,
    members: BTreeMap<PeerId, Member>,
    by_link: BTreeMap<LinkId, PeerId>,
    ready: BTreeSet<PeerId>,
    /// When each peer was last moved or reported its parent gone.
    settling: BTreeMap<PeerId, Nanos>,
    fanout: Fanout,
    encoder: Encoder,
    next_frame: u64,
    ending: bool,
    finished: bool,
    stats: SourceStats,
    /// Every transmit goes through the links' encryption.
    secure: Secure,
    events: VecDeque<Event>,
}

impl Coordinator {
    /// A source with no peers yet.
    pub fn new(cfg: CoordinatorConfig) -> Result<Self, screen::Error> {
        let mut fanout = Fanout::new(cfg.limits);
        fanout.set_format(cfg.format);
        Ok(Coordinator {
            admission: Admission::new(cfg.key, true),
            topology: Topology::new(),
            members: BTreeMap::new(),
            by_link: BTreeMap::new(),
            ready: BTreeSet::new(),
            settling: BTreeMap::new(),
            fanout,
            encoder: Encoder::new(cfg.format, cfg.key_interval)?,
            next_frame: 0,
            ending: false,
            finished: false,
            stats: SourceStats::default(),
            secure: Secure::new(),
            events: VecDeque::new(),
        })
    }

    /// Handles one input. Fails only for a frame of the wrong size.
    pub fn handle_input(&mut self, now: Nanos, input: Input<'_>) -> Result<(), screen::Error> {
        match input {
            Input::Link(l) => self.link(now, l),
            Input::Frame {
                pixels,
                captured_us,
            } => self.frame(pixels, captured_us)?,
            Input::End => {
                self.ending = true;
                self.fanout.close(Control::End.to_bytes().into());
            }
            Input::Timeout => {}
        }
        for (link, from) in self.admission.expire(now) {
            self.refuse(link, from, Refusal::Timeout);
        }
        for link in self.secure.expire(now) {
            self.drop_link(now, link, Error::HandshakeTimeout);
        }
        self.check_finished();
        Ok(())
    }

    /// The next thing to write, connect or close.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        loop {
            if let Some(t) = self.secure.poll_transmit(now) {
                return Some(t);
            }
            let t = self.fanout.poll_transmit(now)?;
            self.secure.push(t);
            self.check_finished();
        }
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to hand in [`Input::Timeout`].
    pub fn poll_timeout(&self) -> Option<Nanos> {
        [self.admission.poll_timeout(), self.secure.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Peers attached to their parents and welcomed.
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// The tree.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// What has been sent.
    pub fn stats(&self) -> SourceStats {
        self.stats
    }

    /// The source's own children and their queues.
    pub fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    /// After [`Input::End`]: every child has its end and every peer's
    /// control link is closed; the driver can stop once it wrote what
    /// was polled.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn link(&mut self, now: Nanos, input: LinkInput) {
        let input = match self.secure.input(input) {
            Ok(Some(input)) => input,
            Ok(None) => return,
            Err((link, error)) => return self.drop_link(now, link, error),
        };
        match input {
            LinkInput::Accepted {
                link, from, nonce, ..
            } => {
                let (challenge, evicted) = self.admission.accept(now, link, from, nonce);
                for (old, from) in evicted {
                    self.refuse(old, from, Refusal::Busy);
                }
                self.send(link, challenge);
            }
            LinkInput::Received { link, msg } => self.received(now, link, &msg),
            LinkInput::Sent { link } => self.fanout.sent(link),
            LinkInput::Closed { link } => self.closed(now, link),
            // The source never dials.
            LinkInput::Connected { link, .. } => self.close(link, Close::Abort),
            LinkInput::ConnectFailed { .. } => {}
        }
    }

    /// A link's encryption failed: named, aborted, and handled as closed.
    fn drop_link(&mut self, now: Nanos, link: LinkId, error: Error) {
        let peer = self.by_link.get(&link).copied();
        self.events.push_back(Event::LinkDropped { peer, error });
        self.close(link, Close::Abort);
        self.closed(now, link);
    }

    fn received(&mut self, now: Nanos, link: LinkId, msg: &[u8]) {
        if self.admission.contains(link) {
            self.admitted(now, link, msg);
            return;
        }
        let Some(&peer) = self.by_link.get(&link) else {
            // Children send nothing after attaching; ignore them.
            return;
        };
        match Control::parse_framed(msg) {
            // Once the stream is over peers leave on their own; repairing
            // the tree then would only pull them away from its end.
            Ok(Control::Orphaned { .. }) if self.ending => {}
            Ok(Control::Orphaned { parent }) => {
                self.events.push_back(Event::Orphaned {
                    child: peer,
                    parent,
                });
                let repair = if self.is_settling(parent, now) {
                    // Stale: the child just hears its placement again.
                    Repair {
                        removed: None,
                        moves: self.topology.placement(peer).into_iter().collect(),
                    }
                } else {
                    self.topology.orphaned(peer, parent)
                };
                self.settling.insert(peer, now);
                self.repair(now, repair);
            }
            Ok(Control::Ready) => {
                if self.topology.contains(peer) && self.ready.insert(peer) {
                    let ready = self.ready.len();
                    self.events.push_back(Event::Ready { peer, ready });
                }
            }
            Ok(_) => {}
            // A peer that speaks garbage is as good as gone.
            Err(_) => {
                self.close(link, Close::Abort);
                self.closed(now, link);
            }
        }
    }

    fn admitted(&mut self, now: Nanos, link: LinkId, msg: &[u8]) {
        let Some((from, nonce, verdict)) = self.admission.receive(link, msg) else {
            return;
        };
        let role = match verdict {
            Verdict::Join { .. } => Role::Join,
            Verdict::Attach { .. } => Role::Attach,
            Verdict::Refused(why) => return self.refuse(link, from, why),
        };
        // Everything after the request is encrypted.
        let key = *self.admission.key();
        if let Err(error) = self.secure.respond(now, link, &key, &nonce, role, msg) {
            self.events
                .push_back(Event::LinkDropped { peer: None, error });
            return self.close(link, Close::Abort);
        }
        match verdict {
            Verdict::Join { relay } => self.join(link, relay),
            Verdict::Attach { peer, version } => {
                if let Some(old) = self.fanout.add(link, peer, version) {
                    self.close(old, Close::Abort);
                }
                self.events.push_back(Event::ChildAttached { peer });
            }
            Verdict::Refused(why) => self.refuse(link, from, why),
        }
    }

    fn join(&mut self, link: LinkId, relay: SocketAddr) {
        let Some(p) = self.topology.join() else {
            return self.refuse(link, relay, Refusal::TreeFull);
        };
        self.members.insert(p.peer, Member { link, relay });
        self.by_link.insert(link, p.peer);
        self.events.push_back(Event::Joined {
            peer: p.peer,
            relay,
        });
        self.place(p);
    }

    fn closed(&mut self, now: Nanos, link: LinkId) {
        if self.admission.remove(link) || self.fanout.remove(link) {
            return;
        }
        let Some(peer) = self.by_link.remove(&link) else {
            return;
        };
        // The link is closed already: the repair must not close it again.
        self.members.remove(&peer);
        if self.ending {
            return;
        }
        self.events.push_back(Event::Left { peer });
        let repair = self.topology.leave(peer);
        self.repair(now, repair);
    }

    fn is_settling(&self, peer: PeerId, now: Nanos) -> bool {
        self.settling
            .get(&peer)
            .is_some_and(|&t| now < t + SETTLING)
    }

    fn repair(&mut self, now: Nanos, repair: Repair) {
        if let Some(gone) = repair.removed {
            self.ready.remove(&gone);
            self.settling.remove(&gone);
            if let Some(m) = self.members.remove(&gone) {
                // Whether it left or was found dead, it is out of the
                // tree; closing its control link tells it so if it runs.
                self.by_link.remove(&m.link);
                self.close(m.link, Close::Abort);
            }
            self.events.push_back(Event::Removed {
                peer: gone,
                peers: self.topology.len(),
                depth: self.topology.depth(),
            });
        }
        for p in repair.moves {
            self.settling.insert(p.peer, now);
            self.place(p);
        }
        debug_assert!(self.topology.check().is_ok());
    }

    fn place(&mut self, p: Placement) {
        let parent_addr = match self.members.get(&p.parent) {
            Some(m) => m.relay,
            // The source: peers use the address they joined on.
            None => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        };
        if let Some(m) = self.members.get(&p.peer) {
            let msg = Control::Placed {
                peer: p.peer,
                // Slots are below MAX_PEERS, far below u32::MAX.
                slot: p.slot as u32,
                depth: p.depth,
                parent: p.parent,
                parent_addr,
            };
            self.send(m.link, msg.to_bytes().into());
        }
        self.events.push_back(Event::Placed(p));
    }

    fn frame(&mut self, pixels: &[u8], captured_us: u64) -> Result<(), screen::Error> {
        if self.ending {
            return Ok(());
        }
        self.fanout.catch_up(self.encoder.canvas());
        let n = self.next_frame;
        let encoded = self.encoder.encode(pixels, n, captured_us)?;
        self.next_frame += 1;
        let base = if encoded.key { None } else { n.checked_sub(1) };
        let last = encoded.messages.len() - 1;
        for (i, m) in encoded.messages.into_iter().enumerate() {
            let chunk = match i {
                0 => Chunk::Start { number: n, base },
                _ if i == last => Chunk::End { number: n },
                _ => Chunk::Tiles,
            };
            self.fanout.offer(chunk, &Message::from(m));
        }
        let s = &mut self.stats;
        s.frames += 1;
        s.key_frames += u64::from(encoded.key);
        s.tiles += encoded.tiles as u64;
        s.bytes += encoded.bytes as u64;
        Ok(())
    }

    /// Once the stream has ended and every child got it, the peers'
    /// control links close too (after anything still queued for them).
    fn check_finished(&mut self) {
        if !self.ending || self.finished || !self.fanout.is_empty() {
            return;
        }
        self.finished = true;
        let links: Vec<LinkId> = self.members.values().map(|m| m.link).collect();
        for link in links {
            self.close(link, Close::Flush);
        }
        self.members.clear();
        self.by_link.clear();
    }

    fn refuse(&mut self, link: LinkId, from: SocketAddr, why: Refusal) {
        if let Some(reason) = self.admission.reason(why) {
            let msg = Control::Refused {
                reason: reason.to_owned(),
            };
            self.send(link, msg.to_bytes().into());
        }
        self.close(link, Close::Flush);
        self.events.push_back(Event::Refused { from, why });
    }

    fn send(&mut self, link: LinkId, msg: Message) {
        self.secure.push(Transmit::Send { link, msg });
    }

    fn close(&mut self, link: LinkId, how: Close) {
        self.secure.push(Transmit::Close { link, how });
    }
}
