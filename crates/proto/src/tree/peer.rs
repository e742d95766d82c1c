//! A peer's machine: join through the source, attach to the parent the
//! source names, decode the screen, relay every chunk to up to two
//! children as it arrives, and re-attach wherever the source says when
//! the parent vanishes.
//!
//! Sans-IO: the driver opens the connections [`Peer::poll_transmit`] asks
//! for, accepts children on its relay listener, hands in what happens on
//! every connection as [`LinkInput`]s and shows or records the frames
//! [`Event::Frame`] announces (the canvas holds each until the next
//! input).

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::Error;
use super::admission::{Admission, HANDSHAKE_TIMEOUT, Refusal, Verdict};
use super::auth::{Role, SessionKey, proof};
use super::fanout::Fanout;
use super::link::{Close, DialId, LinkId, LinkInput, Message, Transmit};
use super::relay::{Chunk, Limits};
use super::secure::Secure;
use super::topology::Placement;
use super::wire::{Control, PeerId};
use crate::framing::{self, Kind};
use crate::screen::{Canvas, CompletedFrame, ScreenMessage};
use crate::units::Nanos;
use crate::video::format::VideoFormat;

/// A parent that sends nothing for this long (plus [`SILENCE_PER_HOP`]
/// per hop from the source) is taken as gone; the source sends a frame
/// every period, even an empty one.
pub const SILENCE: Nanos = Nanos::from_secs(5);

/// Extra patience per hop from the source. When an inner peer hangs, its
/// whole subtree falls silent at once; the deeper a peer, the longer it
/// waits, so the hung peer's children report first and are re-attached
/// (and relay again) long before their own children would blame them.
pub const SILENCE_PER_HOP: Nanos = Nanos::from_secs(1);

/// Pause after a failed attach before asking the source again, so a
/// repair that is still settling is not hammered.
pub const RETRY: Nanos = Nanos::from_millis(50);

/// How a peer joins and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerConfig {
    /// The session key the source printed.
    pub key: SessionKey,
    /// The source's address.
    pub source: SocketAddr,
    /// TCP port of this peer's relay listener, for its children.
    pub relay_port: u16,
    /// Queue limits of each child.
    pub limits: Limits,
    /// Give up after this long without a whole frame.
    pub give_up: Nanos,
    /// Seed of the jitter between join attempts (the driver draws it
    /// from the OS): peers that started together retry apart.
    pub retry_seed: u64,
}

/// Join attempts at most when the source closes the connection before
/// placing this peer (it evicted the handshake under a burst).
pub const JOIN_ATTEMPTS: u32 = 6;

/// The wait before the second join attempt; it doubles each time, and a
/// jitter of up to half of it is added.
pub const JOIN_BACKOFF: Nanos = Nanos::from_millis(200);

/// What a peer's driver hands in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Something happened on a connection.
    Link(LinkInput),
    /// Leave the tree: children get the end of the stream.
    Leave,
    /// The time [`Peer::poll_timeout`] named has come.
    Timeout,
}

/// Why an attempt to attach to a parent failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachFailure {
    /// The connection could not be opened.
    Unreachable,
    /// The parent refused, with this reason.
    Refused(String),
    /// The parent did not answer in time.
    Timeout,
    /// The parent closed the connection during the handshake.
    Closed,
    /// The parent broke the protocol.
    Protocol(Error),
}

/// How a parent was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Its connection closed.
    Closed,
    /// It sent nothing for [`SILENCE`].
    Silent,
}

/// Why the peer gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The source could not be reached.
    SourceUnreachable,
    /// The source refused this peer, with this reason.
    Refused(String),
    /// The source closed the connection before placing this peer.
    SourceClosed,
    /// The source did not answer in time.
    Timeout,
    /// The source broke the protocol.
    Protocol(Error),
    /// No whole frame for this long.
    Silent {
        /// The parent at the time.
        parent: PeerId,
        /// How long.
        waited: Nanos,
    },
    /// The parent was lost after the source had closed this peer's
    /// control link (it stopped, or took this peer for dead).
    Abandoned {
        /// The parent lost.
        parent: PeerId,
    },
}

/// What happened, for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The source placed this peer (`moved`: again, after a repair).
    Placed {
        /// Where.
        placement: Placement,
        /// Whether this is a move rather than the first placement.
        moved: bool,
    },
    /// Attached to the parent and welcomed: frames flow.
    Attached {
        /// The parent.
        parent: PeerId,
        /// The screen's format.
        format: VideoFormat,
    },
    /// Attaching to the parent failed; the source is asked again soon.
    AttachFailed {
        /// The parent.
        parent: PeerId,
        /// Where it was dialled.
        addr: SocketAddr,
        /// Why.
        why: AttachFailure,
    },
    /// The parent vanished; the source is asked where to attach.
    ParentLost {
        /// The parent.
        parent: PeerId,
        /// How.
        why: Loss,
    },
    /// The parent sent something that does not decode; re-attaching.
    BadData {
        /// The parent.
        parent: PeerId,
        /// What was wrong.
        error: Error,
    },
    /// The source closed this peer's control link (it stops, or took this
    /// peer for dead); the stream may still be on its way down the tree.
    SourceClosed,
    /// The source closed the connection before placing this peer (under
    /// a burst of joins it evicts handshakes); this peer joins again
    /// after `after`.
    JoinRetry {
        /// The attempt that comes next (2 for the first retry).
        attempt: u32,
        /// The wait before it.
        after: Nanos,
    },
    /// A child attached to this peer.
    ChildAttached {
        /// Which.
        peer: PeerId,
    },
    /// A child's link failed its encryption (a tampered, replayed or
    /// reordered record, or a failed handshake): it was dropped. (The
    /// parent's link failing is [`Event::BadData`].)
    LinkDropped {
        /// What failed.
        error: Error,
    },
    /// A connection to the relay listener was turned away.
    Refused {
        /// Where it came from.
        from: SocketAddr,
        /// Why.
        why: Refusal,
    },
    /// A whole frame is on the canvas.
    Frame(CompletedFrame),
    /// The stream ended.
    Ended,
    /// The peer gave up.
    Failed(Failure),
}

/// What a peer received, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    /// This peer's id.
    pub peer: PeerId,
    /// Its slot at the last placement.
    pub slot: u32,
    /// Its depth at the last placement.
    pub depth: u32,
    /// Whole frames decoded.
    pub frames: u64,
    /// The first frame decoded.
    pub first: Option<u64>,
    /// The newest frame decoded.
    pub last: Option<u64>,
    /// Frame numbers skipped between frames this peer completed.
    pub lost: u64,
    /// Frames completed that were not newer than the last one (after
    /// re-attaching to a parent that was behind).
    pub repeated: u64,
    /// Times the peer got frames again after losing its parent.
    pub reattaches: u64,
    /// Parent lost → next whole frame, per re-attach.
    pub recoveries: Vec<Nanos>,
    /// Bytes received from parents.
    pub bytes_received: u64,
}

/// The control link to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    /// Waiting to dial the source again, at `at`.
    Retrying {
        at: Nanos,
    },
    Dialing {
        dial: DialId,
        deadline: Nanos,
    },
    Challenged {
        link: LinkId,
        deadline: Nanos,
    },
    Placing {
        link: LinkId,
        deadline: Nanos,
    },
    Joined {
        link: LinkId,
    },
    Gone,
}

impl Join {
    fn link(self) -> Option<LinkId> {
        match self {
            Join::Challenged { link, .. } | Join::Placing { link, .. } | Join::Joined { link } => {
                Some(link)
            }
            Join::Retrying { .. } | Join::Dialing { .. } | Join::Gone => None,
        }
    }

    fn deadline(self) -> Option<Nanos> {
        match self {
            Join::Retrying { at: deadline }
            | Join::Dialing { deadline, .. }
            | Join::Challenged { deadline, .. }
            | Join::Placing { deadline, .. } => Some(deadline),
            Join::Joined { .. } | Join::Gone => None,
        }
    }
}

/// The link to the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// Waiting for a placement.
    Idle,
    Dialing {
        dial: DialId,
        addr: SocketAddr,
        deadline: Nanos,
    },
    Challenged {
        link: LinkId,
        addr: SocketAddr,
        deadline: Nanos,
    },
    Welcoming {
        link: LinkId,
        addr: SocketAddr,
        deadline: Nanos,
    },
    Attached {
        link: LinkId,
        addr: SocketAddr,
        heard: Nanos,
    },
    /// Attaching failed: ask the source again at `at`.
    Retry { at: Nanos },
    /// The link to `addr` just closed (a moment's state, so nothing
    /// closes it again).
    Lost { addr: SocketAddr },
}

impl Upstream {
    fn link(self) -> Option<LinkId> {
        match self {
            Upstream::Challenged { link, .. }
            | Upstream::Welcoming { link, .. }
            | Upstream::Attached { link, .. } => Some(link),
            _ => None,
        }
    }

    fn addr(self) -> Option<SocketAddr> {
        match self {
            Upstream::Dialing { addr, .. }
            | Upstream::Challenged { addr, .. }
            | Upstream::Welcoming { addr, .. }
            | Upstream::Attached { addr, .. }
            | Upstream::Lost { addr } => Some(addr),
            Upstream::Idle | Upstream::Retry { .. } => None,
        }
    }

    /// When to act if nothing comes: `silence` is how long an attached
    /// parent may say nothing.
    fn deadline(self, silence: Nanos) -> Option<Nanos> {
        match self {
            Upstream::Dialing { deadline, .. }
            | Upstream::Challenged { deadline, .. }
            | Upstream::Welcoming { deadline, .. } => Some(deadline),
            Upstream::Attached { heard, .. } => Some(heard + silence),
            Upstream::Retry { at } => Some(at),
            Upstream::Idle | Upstream::Lost { .. } => None,
        }
    }
}

/// A peer's machine; see the module docs.
#[derive(Debug)]
pub struct Peer {
    cfg: PeerConfig,
    admission: Admission,
    fanout: Fanout,
    join: Join,
    upstream: Upstream,
    parent: PeerId,
    canvas: Option<Canvas>,
    next_dial: u64,
    lost_at: Option<Nanos>,
    last_progress: Nanos,
    /// No more stream: it ended, the peer left or gave up.
    stopping: bool,
    ended: bool,
    failed: bool,
    source_gone: bool,
    /// Join attempts that the source closed before placing this peer.
    join_attempts: u32,
    stats: PeerStats,
    /// Every transmit goes through the links' encryption.
    secure: Secure,
    events: VecDeque<Event>,
}

impl Peer {
    /// A peer that starts by asking for a connection to the source.
    pub fn new(now: Nanos, cfg: PeerConfig) -> Self {
        let mut peer = Peer {
            cfg,
            admission: Admission::new(cfg.key, false),
            fanout: Fanout::new(cfg.limits),
            join: Join::Gone,
            upstream: Upstream::Idle,
            parent: PeerId::SOURCE,
            canvas: None,
            next_dial: 0,
            lost_at: None,
            last_progress: now,
            stopping: false,
            ended: false,
            failed: false,
            source_gone: false,
            join_attempts: 0,
            stats: PeerStats {
                peer: PeerId::SOURCE,
                slot: 0,
                depth: 0,
                frames: 0,
                first: None,
                last: None,
                lost: 0,
                repeated: 0,
                reattaches: 0,
                recoveries: Vec::new(),
                bytes_received: 0,
            },
            secure: Secure::new(),
            events: VecDeque::new(),
        };
        let dial = peer.dial(cfg.source, Role::Join);
        peer.join = Join::Dialing {
            dial,
            deadline: now + HANDSHAKE_TIMEOUT,
        };
        peer
    }

    /// Handles one input.
    pub fn handle_input(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Link(l) => self.link(now, l),
            Input::Leave => self.stop(),
            Input::Timeout => {}
        }
        self.timers(now);
        self.check_done();
    }

    /// The next thing to write, connect or close.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        loop {
            if let Some(t) = self.secure.poll_transmit(now) {
                return Some(t);
            }
            let t = self.fanout.poll_transmit(now)?;
            self.secure.push(t);
            self.check_done();
        }
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to hand in [`Input::Timeout`].
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let give_up = (!self.stopping).then(|| self.last_progress + self.cfg.give_up);
        [
            self.admission.poll_timeout(),
            self.secure.poll_timeout(),
            self.join.deadline().filter(|_| !self.stopping),
            self.upstream.deadline(self.silence()),
            give_up,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The screen as decoded so far (`None` before the first welcome).
    pub fn canvas(&self) -> Option<&Canvas> {
        self.canvas.as_ref()
    }

    /// What was received.
    pub fn stats(&self) -> &PeerStats {
        &self.stats
    }

    /// This peer's children and their queues.
    pub fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    /// The parent this peer attaches (or attached) to.
    pub fn parent(&self) -> PeerId {
        self.parent
    }

    /// Whether the stream ended (the parent relayed its end).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether the peer is through: the stream ended, it left or gave up,
    /// and every child got the end. The driver stops once it wrote what
    /// was polled.
    pub fn is_done(&self) -> bool {
        self.stopping && self.fanout.is_empty()
    }

    fn link(&mut self, now: Nanos, input: LinkInput) {
        let input = match self.secure.input(input) {
            Ok(Some(input)) => input,
            Ok(None) => return,
            Err((link, error)) => return self.link_failed(now, link, error),
        };
        match input {
            LinkInput::Accepted {
                link, from, nonce, ..
            } => {
                if self.stopping {
                    self.refuse(link, from, Refusal::Busy);
                    return;
                }
                let (challenge, evicted) = self.admission.accept(now, link, from, nonce);
                for (old, from) in evicted {
                    self.refuse(old, from, Refusal::Busy);
                }
                self.send(link, challenge);
            }
            LinkInput::Connected { dial, link, .. } => self.connected(now, dial, link),
            LinkInput::ConnectFailed { dial } => match (self.join, self.upstream) {
                (Join::Dialing { dial: d, .. }, _) if d == dial => {
                    self.fail(Failure::SourceUnreachable);
                }
                (_, Upstream::Dialing { dial: d, .. }) if d == dial => {
                    self.attach_failed(now, AttachFailure::Unreachable);
                }
                _ => {}
            },
            LinkInput::Received { link, msg } => self.received(now, link, msg),
            LinkInput::Sent { link } => self.fanout.sent(link),
            LinkInput::Closed { link } => self.closed(now, link),
        }
    }

    fn connected(&mut self, now: Nanos, dial: DialId, link: LinkId) {
        let deadline = now + HANDSHAKE_TIMEOUT;
        match (self.join, self.upstream) {
            (Join::Dialing { dial: d, .. }, _) if d == dial => {
                self.join = Join::Challenged { link, deadline };
            }
            (_, Upstream::Dialing { dial: d, addr, .. }) if d == dial => {
                self.upstream = Upstream::Challenged {
                    link,
                    addr,
                    deadline,
                };
            }
            // An attempt given up on in the meantime.
            _ => self.close(link, Close::Abort),
        }
    }

    fn received(&mut self, now: Nanos, link: LinkId, msg: Message) {
        if self.join.link() == Some(link) {
            self.control(now, &msg);
        } else if self.upstream.link() == Some(link) {
            self.parent_message(now, msg);
        } else if self.admission.contains(link) {
            self.admitted(now, link, &msg);
        }
        // Children send nothing after attaching; ignore them.
    }

    fn closed(&mut self, now: Nanos, link: LinkId) {
        if self.join.link() == Some(link) {
            if let Join::Joined { .. } = self.join {
                self.join = Join::Gone;
                self.source_gone = true;
                self.events.push_back(Event::SourceClosed);
            } else {
                self.join = Join::Gone;
                self.retry_join(now);
            }
        } else if self.upstream.link() == Some(link) {
            let attached = matches!(self.upstream, Upstream::Attached { .. });
            if let Some(addr) = self.upstream.addr() {
                self.upstream = Upstream::Lost { addr };
            }
            if attached {
                self.parent_lost(now, Loss::Closed);
            } else {
                self.attach_failed(now, AttachFailure::Closed);
            }
        } else if !self.admission.remove(link) {
            self.fanout.remove(link);
        }
    }

    /// A link's encryption failed: it is dropped, and handled as closed
    /// (the parent's is bad data: re-attach; the source's breaks the
    /// protocol unless placed already).
    fn link_failed(&mut self, now: Nanos, link: LinkId, error: Error) {
        if self.upstream.link() == Some(link) {
            // Dropping the upstream closes the link.
            let parent = self.parent;
            return match self.upstream {
                Upstream::Attached { addr, .. } => {
                    self.events.push_back(Event::BadData { parent, error });
                    // Frames stop until the new link is up: a recovery.
                    self.lost_at.get_or_insert(now);
                    self.drop_upstream();
                    self.attach(now, addr)
                }
                _ => self.attach_failed(now, AttachFailure::Protocol(error)),
            };
        }
        self.close(link, Close::Abort);
        match self.join {
            Join::Challenged { link: l, .. } | Join::Placing { link: l, .. } if l == link => {
                self.join = Join::Gone;
                return self.fail(Failure::Protocol(error));
            }
            _ => {}
        }
        if self.join.link() != Some(link) {
            self.events.push_back(Event::LinkDropped { error });
        }
        self.closed(now, link);
    }

    /// A message on the control link to the source.
    fn control(&mut self, now: Nanos, msg: &[u8]) {
        let parsed = Control::parse_framed(msg);
        match (self.join, parsed) {
            (Join::Joined { .. }, Ok(placed @ Control::Placed { .. })) => {
                self.placed(now, placed, true);
            }
            // Nothing else is meant for a placed peer.
            (Join::Joined { .. }, _) => {}
            (_, Ok(Control::Refused { reason })) => self.fail(Failure::Refused(reason)),
            (Join::Challenged { link, .. }, Ok(Control::Challenge { nonce })) => {
                let join = Control::Join {
                    proof: proof(&self.cfg.key, &nonce, Role::Join),
                    relay_port: self.cfg.relay_port,
                };
                let join: Message = join.to_bytes().into();
                self.send(link, join.clone());
                let key = self.cfg.key;
                if let Err(e) = self.secure.initiate(link, &key, Role::Join, msg, &join) {
                    return self.fail(Failure::Protocol(e));
                }
                self.join = Join::Placing {
                    link,
                    deadline: now + HANDSHAKE_TIMEOUT,
                };
            }
            (Join::Placing { link, .. }, Ok(placed @ Control::Placed { .. })) => {
                self.join = Join::Joined { link };
                self.placed(now, placed, false);
            }
            (_, Ok(other)) => self.fail(Failure::Protocol(Error::Unexpected(other.kind()))),
            (_, Err(e)) => self.fail(Failure::Protocol(e)),
        }
    }

    /// The source placed this peer: attach to the parent it names unless
    /// already attached or attaching there.
    fn placed(&mut self, now: Nanos, msg: Control, moved: bool) {
        let Control::Placed {
            peer,
            slot,
            depth,
            parent,
            parent_addr,
        } = msg
        else {
            return;
        };
        self.stats.peer = peer;
        self.stats.slot = slot;
        self.stats.depth = depth;
        let placement = Placement {
            peer,
            slot: slot as usize,
            depth,
            parent,
        };
        self.events.push_back(Event::Placed { placement, moved });
        let busy = !matches!(
            self.upstream,
            Upstream::Idle | Upstream::Retry { .. } | Upstream::Lost { .. }
        );
        if self.stopping || (parent == self.parent && busy) {
            // A repeated placement (e.g. the answer to an orphan report
            // that a sibling's report already settled).
            return;
        }
        let addr = if parent == PeerId::SOURCE {
            self.cfg.source
        } else {
            parent_addr
        };
        if self.canvas.is_some() {
            // A move (the parent failed and a sibling's report got here
            // first, or this peer fills a hole): time it as a recovery.
            self.lost_at.get_or_insert(now);
        }
        self.drop_upstream();
        self.parent = parent;
        self.attach(now, addr);
    }

    /// How long the parent may say nothing at this peer's depth.
    fn silence(&self) -> Nanos {
        SILENCE
            + Nanos(
                SILENCE_PER_HOP
                    .0
                    .saturating_mul(u64::from(self.stats.depth)),
            )
    }

    fn attach(&mut self, now: Nanos, addr: SocketAddr) {
        let dial = self.dial(addr, Role::Attach);
        self.upstream = Upstream::Dialing {
            dial,
            addr,
            deadline: now + HANDSHAKE_TIMEOUT,
        };
    }

    /// A message from the parent (or the parent being attached to).
    fn parent_message(&mut self, now: Nanos, msg: Message) {
        match self.upstream {
            Upstream::Challenged { link, addr, .. } => match Control::parse_framed(&msg) {
                Ok(Control::Challenge { nonce }) => {
                    let attach = Control::Attach {
                        proof: proof(&self.cfg.key, &nonce, Role::Attach),
                        peer: self.stats.peer,
                        version: self.canvas.as_ref().and_then(Canvas::version),
                    };
                    let attach: Message = attach.to_bytes().into();
                    self.send(link, attach.clone());
                    let key = self.cfg.key;
                    if let Err(e) = self
                        .secure
                        .initiate(link, &key, Role::Attach, &msg, &attach)
                    {
                        return self.attach_failed(now, AttachFailure::Protocol(e));
                    }
                    self.upstream = Upstream::Welcoming {
                        link,
                        addr,
                        deadline: now + HANDSHAKE_TIMEOUT,
                    };
                }
                other => self.attach_refused(now, other),
            },
            Upstream::Welcoming { link, addr, .. } => match Control::parse_framed(&msg) {
                Ok(Control::Welcome { format }) => match self.set_format(format) {
                    Ok(()) => {
                        self.upstream = Upstream::Attached {
                            link,
                            addr,
                            heard: now,
                        };
                        self.send_control(Control::Ready);
                        let parent = self.parent;
                        self.events.push_back(Event::Attached { parent, format });
                    }
                    Err(e) => self.attach_failed(now, AttachFailure::Protocol(e)),
                },
                other => self.attach_refused(now, other),
            },
            Upstream::Attached { link, addr, .. } => {
                self.upstream = Upstream::Attached {
                    link,
                    addr,
                    heard: now,
                };
                self.stats.bytes_received += msg.len() as u64;
                if let Err(error) = self.stream(now, &msg) {
                    let parent = self.parent;
                    self.events.push_back(Event::BadData { parent, error });
                    self.drop_upstream();
                    self.attach(now, addr);
                }
            }
            _ => {}
        }
    }

    fn attach_refused(&mut self, now: Nanos, answer: Result<Control, Error>) {
        let why = match answer {
            Ok(Control::Refused { reason }) => AttachFailure::Refused(reason),
            Ok(other) => AttachFailure::Protocol(Error::Unexpected(other.kind())),
            Err(e) => AttachFailure::Protocol(e),
        };
        self.attach_failed(now, why);
    }

    fn set_format(&mut self, format: VideoFormat) -> Result<(), Error> {
        match &self.canvas {
            Some(c) if c.format() != format => Err(Error::FormatChanged {
                held: c.format(),
                offered: format,
            }),
            Some(_) => Ok(()),
            None => {
                self.canvas = Some(Canvas::new(format)?);
                self.fanout.set_format(format);
                Ok(())
            }
        }
    }

    /// One message of the stream: decode it, then relay it (so nothing
    /// that does not decode goes on down the tree).
    fn stream(&mut self, now: Nanos, msg: &Message) -> Result<(), Error> {
        let (kind, body) = framing::split(msg)?;
        if kind == Kind::End {
            self.ended = true;
            self.events.push_back(Event::Ended);
            self.stop();
            return Ok(());
        }
        let screen = ScreenMessage::parse(kind, body)?.ok_or(Error::Unexpected(kind))?;
        let canvas = self.canvas.as_mut().ok_or(Error::Unexpected(kind))?;
        if let ScreenMessage::FrameStart { .. } = screen {
            // A start cuts off any open frame; children are caught up
            // from the last whole one.
            canvas.abort();
            self.fanout.catch_up(canvas);
        }
        let done = canvas.apply(&screen)?;
        self.fanout.offer(Chunk::from(&screen), msg);
        if let Some(frame) = done {
            self.completed(now, frame);
        }
        Ok(())
    }

    fn completed(&mut self, now: Nanos, frame: CompletedFrame) {
        let s = &mut self.stats;
        match s.last {
            Some(last) if frame.number <= last => s.repeated += 1,
            Some(last) => {
                s.lost += frame.number - last - 1;
                s.last = Some(frame.number);
            }
            None => {
                s.first = Some(frame.number);
                s.last = Some(frame.number);
            }
        }
        s.frames += 1;
        self.last_progress = now;
        if let Some(t) = self.lost_at.take() {
            s.reattaches += 1;
            s.recoveries.push(now - t);
        }
        self.events.push_back(Event::Frame(frame));
    }

    fn attach_failed(&mut self, now: Nanos, why: AttachFailure) {
        let addr = self.upstream.addr().unwrap_or(self.cfg.source);
        let parent = self.parent;
        self.events
            .push_back(Event::AttachFailed { parent, addr, why });
        self.lost_at.get_or_insert(now);
        self.drop_upstream();
        self.upstream = Upstream::Retry { at: now + RETRY };
    }

    fn parent_lost(&mut self, now: Nanos, why: Loss) {
        let parent = self.parent;
        if self.stopping {
            return;
        }
        if self.source_gone {
            return self.fail(Failure::Abandoned { parent });
        }
        self.events.push_back(Event::ParentLost { parent, why });
        self.drop_upstream();
        self.lost_at.get_or_insert(now);
        self.send_control(Control::Orphaned { parent });
    }

    fn drop_upstream(&mut self) {
        if let Some(link) = self.upstream.link() {
            self.close(link, Close::Abort);
        }
        self.upstream = Upstream::Idle;
        if let Some(c) = &mut self.canvas {
            c.abort();
        }
    }

    fn timers(&mut self, now: Nanos) {
        for (link, from) in self.admission.expire(now) {
            self.refuse(link, from, Refusal::Timeout);
        }
        // Only children's links wait on this side's handshake deadline.
        for link in self.secure.expire(now) {
            self.link_failed(now, link, Error::HandshakeTimeout);
        }
        if !self.stopping && self.join.deadline().is_some_and(|d| d <= now) {
            if let Join::Retrying { .. } = self.join {
                let dial = self.dial(self.cfg.source, Role::Join);
                self.join = Join::Dialing {
                    dial,
                    deadline: now + HANDSHAKE_TIMEOUT,
                };
            } else {
                self.fail(Failure::Timeout);
            }
        }
        if self
            .upstream
            .deadline(self.silence())
            .is_some_and(|d| d <= now)
        {
            match self.upstream {
                Upstream::Attached { .. } => self.parent_lost(now, Loss::Silent),
                Upstream::Retry { .. } => {
                    self.upstream = Upstream::Idle;
                    let parent = self.parent;
                    self.send_control(Control::Orphaned { parent });
                }
                _ => self.attach_failed(now, AttachFailure::Timeout),
            }
        }
        let give_up = self.cfg.give_up;
        if !self.stopping && self.last_progress + give_up <= now {
            let parent = self.parent;
            self.fail(Failure::Silent {
                parent,
                waited: give_up,
            });
        }
    }

    fn admitted(&mut self, now: Nanos, link: LinkId, msg: &[u8]) {
        let Some((from, nonce, verdict)) = self.admission.receive(link, msg) else {
            return;
        };
        match verdict {
            Verdict::Attach { peer, version } => {
                // Everything after the request is encrypted.
                let key = self.cfg.key;
                if let Err(error) = self
                    .secure
                    .respond(now, link, &key, &nonce, Role::Attach, msg)
                {
                    self.events.push_back(Event::LinkDropped { error });
                    return self.close(link, Close::Abort);
                }
                if let Some(old) = self.fanout.add(link, peer, version) {
                    self.close(old, Close::Abort);
                }
                self.events.push_back(Event::ChildAttached { peer });
            }
            Verdict::Join { .. } => self.refuse(link, from, Refusal::Unexpected(Kind::Join)),
            Verdict::Refused(why) => self.refuse(link, from, why),
        }
    }

    fn fail(&mut self, failure: Failure) {
        if self.failed {
            return;
        }
        self.failed = true;
        self.events.push_back(Event::Failed(failure));
        self.stop();
    }

    /// No more stream: children get the end after their queues, the
    /// parent is let go; the control link closes once the children are
    /// through (see [`Peer::check_done`]).
    fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.fanout.close(Control::End.to_bytes().into());
        self.drop_upstream();
        // A placed peer's control link stays until the children are
        // through (see `check_done`); a join still under way is over.
        match self.join {
            Join::Joined { .. } => {}
            other => {
                if let Some(link) = other.link() {
                    self.close(link, Close::Flush);
                }
                self.join = Join::Gone;
            }
        }
    }

    fn check_done(&mut self) {
        if self.is_done() {
            if let Some(link) = self.join.link() {
                self.close(link, Close::Flush);
            }
            self.join = Join::Gone;
        }
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

    /// The source closed the join before placing this peer: wait a
    /// doubling, jittered backoff and join again, or fail after
    /// [`JOIN_ATTEMPTS`].
    fn retry_join(&mut self, now: Nanos) {
        self.join_attempts += 1;
        if self.stopping || self.join_attempts >= JOIN_ATTEMPTS {
            self.fail(Failure::SourceClosed);
            return;
        }
        let base = JOIN_BACKOFF.0 << (self.join_attempts - 1).min(8);
        let jitter =
            crate::splitmix::splitmix64(self.cfg.retry_seed ^ u64::from(self.join_attempts))
                % (base / 2).max(1);
        let after = Nanos(base + jitter);
        self.join = Join::Retrying { at: now + after };
        self.last_progress = now + after;
        self.events.push_back(Event::JoinRetry {
            attempt: self.join_attempts + 1,
            after,
        });
    }

    fn dial(&mut self, addr: SocketAddr, role: Role) -> DialId {
        let dial = DialId(self.next_dial);
        self.next_dial += 1;
        self.secure.push(Transmit::Connect { dial, addr, role });
        dial
    }

    fn send_control(&mut self, msg: Control) {
        if let Join::Joined { link } = self.join {
            self.send(link, msg.to_bytes().into());
        }
    }

    fn send(&mut self, link: LinkId, msg: Message) {
        self.secure.push(Transmit::Send { link, msg });
    }

    fn close(&mut self, link: LinkId, how: Close) {
        self.secure.push(Transmit::Close { link, how });
    }
}
