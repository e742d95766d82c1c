//! The children of one relay (the source, or a peer): each child's
//! [`ChildQueue`] plus the link it is written to, one message at a time.
//!
//! The relay offers every chunk to every child; the driver writes a
//! child's messages in order and reports each write with
//! [`LinkInput::Sent`](super::LinkInput::Sent), and only then does the
//! child get its next message from its queue. So a child whose socket is
//! slow keeps its backlog here, where [`ChildQueue`] bounds it and later
//! catches the child up; its siblings are never held up.

use std::collections::BTreeMap;

use super::link::{Close, LinkId, Message, Transmit};
use super::relay::{ChildQueue, Chunk, Limits, Next, Offer};
use super::wire::{Control, PeerId};
use crate::screen::Canvas;
use crate::units::Nanos;
use crate::video::format::VideoFormat;

#[derive(Debug)]
struct Child {
    peer: PeerId,
    queue: ChildQueue<Message>,
    welcomed: bool,
    /// A message is with the driver and not yet reported sent.
    busy: bool,
}

/// The children of one relay and what each is sent next.
#[derive(Debug)]
pub struct Fanout {
    children: BTreeMap<LinkId, Child>,
    limits: Limits,
    /// The welcome every child gets first, once the format is known.
    welcome: Option<Message>,
    /// The end of the stream, once it has come.
    end: Option<Message>,
    lag_drops: u64,
    refreshes: u64,
}

impl Fanout {
    /// No children yet; each child's queue will hold at most `limits`.
    pub fn new(limits: Limits) -> Self {
        Fanout {
            children: BTreeMap::new(),
            limits,
            welcome: None,
            end: None,
            lag_drops: 0,
            refreshes: 0,
        }
    }

    /// The screen format is known: children are welcomed with it.
    pub fn set_format(&mut self, format: VideoFormat) {
        self.welcome = Some(Control::Welcome { format }.to_bytes().into());
    }

    /// Adds a child on `link` that holds frame `version`; it is welcomed
    /// once the format is known and caught up at the next frame boundary.
    /// A child re-attaching under the same id replaces its old link,
    /// which is returned for the caller to close.
    pub fn add(&mut self, link: LinkId, peer: PeerId, version: Option<u64>) -> Option<LinkId> {
        let old = self
            .children
            .iter()
            .find(|(_, c)| c.peer == peer)
            .map(|(&l, _)| l);
        if let Some(l) = old {
            self.children.remove(&l);
        }
        let mut queue = ChildQueue::new(version, self.limits);
        if let Some(end) = &self.end {
            queue.close(end.clone());
        }
        self.children.insert(
            link,
            Child {
                peer,
                queue,
                welcomed: false,
                busy: false,
            },
        );
        old
    }

    /// Forgets the child on `link` (its link failed); whether there was one.
    pub fn remove(&mut self, link: LinkId) -> bool {
        self.children.remove(&link).is_some()
    }

    /// Whether `link` is a child's.
    pub fn contains(&self, link: LinkId) -> bool {
        self.children.contains_key(&link)
    }

    /// The driver wrote the last message given for `link`.
    pub fn sent(&mut self, link: LinkId) {
        if let Some(c) = self.children.get_mut(&link) {
            c.busy = false;
        }
    }

    /// Called before a frame starts, while `canvas` holds the previous
    /// whole frame: lagging children whose queues drained are caught up.
    pub fn catch_up(&mut self, canvas: &Canvas) {
        for c in self.children.values_mut() {
            if c.queue.catch_up(canvas) {
                self.refreshes += 1;
            }
        }
    }

    /// Offers one chunk of the relayed stream to every child.
    pub fn offer(&mut self, chunk: Chunk, msg: &Message) {
        for c in self.children.values_mut() {
            if c.queue.offer(chunk, msg.clone()) == Offer::Dropped {
                self.lag_drops += 1;
            }
        }
    }

    /// Ends the stream: every child gets `end` after its queue and is
    /// then closed.
    pub fn close(&mut self, end: Message) {
        for c in self.children.values_mut() {
            c.queue.close(end.clone());
        }
        self.end = Some(end);
    }

    /// The next message or close for a child that is ready for one at
    /// `now` (a ready child's message is due at once).
    pub fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        let mut closed = None;
        let mut send = None;
        for (&link, c) in self.children.iter_mut().filter(|(_, c)| !c.busy) {
            if !c.welcomed {
                match &self.welcome {
                    Some(w) => {
                        c.welcomed = true;
                        send = Some((link, w.clone()));
                        break;
                    }
                    // Never welcomed and the stream is over: nothing to say.
                    None if self.end.is_some() => {
                        closed = Some(link);
                        break;
                    }
                    None => continue,
                }
            }
            match c.queue.pop() {
                Next::Send(msg) => {
                    send = Some((link, msg));
                    break;
                }
                Next::Close => {
                    closed = Some(link);
                    break;
                }
                Next::Wait => {}
            }
        }
        if let Some((link, msg)) = send {
            if let Some(c) = self.children.get_mut(&link) {
                c.busy = true;
            }
            return Some(Transmit::Send { link, msg });
        }
        let link = closed?;
        self.children.remove(&link);
        Some(Transmit::Close {
            link,
            how: Close::Flush,
        })
    }

    /// Children still linked.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether no child is linked (after [`Fanout::close`]: every child
    /// got the end and was closed).
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// The children, by link.
    pub fn children(&self) -> impl Iterator<Item = (LinkId, PeerId)> + '_ {
        self.children.iter().map(|(&l, c)| (l, c.peer))
    }

    /// Times a child's backlog was thrown away because it lagged.
    pub fn lag_drops(&self) -> u64 {
        self.lag_drops
    }

    /// Catch-up frames queued.
    pub fn refreshes(&self) -> u64 {
        self.refreshes
    }
}
