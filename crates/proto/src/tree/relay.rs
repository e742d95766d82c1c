//! What a relay sends one child: a bounded queue of screen messages and
//! the decisions that keep a slow child from holding anyone up (seed 004:
//! "no peer waits on a slow child").
//!
//! The relay offers every chunk of every frame to each child's
//! [`ChildQueue`]; the child's writer takes them off with
//! [`ChildQueue::pop`] at whatever pace its socket allows. A child whose
//! queue would pass [`Limits::lag`] is not given more: the queue is cut
//! back to what the child is sure to complete, and the child is marked
//! lagging from the last frame it will hold. Once its queue has drained
//! below [`Limits::resume`], at the next frame boundary it gets a
//! catch-up built from the relay's own [`Canvas`] — the tiles changed
//! since its version, or a key frame — and then frames again as they come.
//! So memory per child is bounded, a stalled child costs its siblings
//! nothing, and a resumed child decodes bit-exact frames again (it skips
//! the ones it fell behind on).
//!
//! No threads or clocks here: [`super::Fanout`] holds one queue per
//! child and hands the driver a child's next message once its last one
//! is written.

use std::collections::VecDeque;

use super::Error;
use crate::framing;
use crate::screen::{Canvas, ScreenMessage};

/// Queue sizes of one child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Queued bytes a live chunk may not push the queue past; a child
    /// that would is lagging. Must hold at least one whole frame, or a
    /// child never gets one.
    pub lag: usize,
    /// A lagging child is caught up only once its queue is below this, so
    /// the catch-up is not itself stuck behind a backlog.
    pub resume: usize,
}

impl Default for Limits {
    /// 8 MiB of backlog (over a second of a busy 1440x900 screen at
    /// 12 fps), resume below 1 MiB.
    fn default() -> Self {
        Limits {
            lag: 8 << 20,
            resume: 1 << 20,
        }
    }
}

/// Where a screen message sits in its frame: all a relay needs to route it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// Opens frame `number`, which applies to a canvas holding `base`
    /// (`None`: a key frame, applies to anything).
    Start {
        /// Frame number.
        number: u64,
        /// Frame the receiver must hold.
        base: Option<u64>,
    },
    /// Tiles of the open frame.
    Tiles,
    /// Closes frame `number`.
    End {
        /// Frame number.
        number: u64,
    },
}

impl Chunk {
    /// Classifies a framed screen message (header included).
    pub fn of(msg: &[u8]) -> Result<Chunk, Error> {
        let (kind, body) = framing::split(msg)?;
        match ScreenMessage::parse(kind, body)? {
            Some(m) => Ok(Chunk::from(&m)),
            None => Err(Error::NotScreen(kind)),
        }
    }
}

impl From<&ScreenMessage<'_>> for Chunk {
    fn from(m: &ScreenMessage<'_>) -> Chunk {
        match *m {
            ScreenMessage::FrameStart { number, base, .. } => Chunk::Start { number, base },
            ScreenMessage::Tiles(_) => Chunk::Tiles,
            ScreenMessage::FrameEnd { number } => Chunk::End { number },
        }
    }
}

/// What became of an offered chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Queued for the child.
    Queued,
    /// Not for this child (it is lagging, or the frame does not apply to
    /// what it will hold).
    Skipped,
    /// The queue would have passed its limit: the chunk and the child's
    /// unfinished backlog were thrown away; the child is now lagging.
    Dropped,
}

/// What the child's writer should do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<M> {
    /// Write this message.
    Send(M),
    /// Nothing queued: wait for an offer.
    Wait,
    /// Flush and close the link: the stream ended or the link failed.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Gets frames as they come; `in_frame` while one is open.
    Live { in_frame: bool },
    /// Gets nothing until caught up from `since`.
    Lagging { since: Option<u64> },
}

#[derive(Debug)]
struct Queued<M> {
    msg: M,
    /// The frame this message completes, if it is a frame end.
    ends: Option<u64>,
}

/// One child's queue and catch-up state.
#[derive(Debug)]
pub struct ChildQueue<M> {
    msgs: VecDeque<Queued<M>>,
    bytes: usize,
    limits: Limits,
    mode: Mode,
    /// Frame the child holds once everything queued has landed (an open
    /// frame at the tail is rolled back by the child's next frame start).
    queued_version: Option<u64>,
    /// Frame the child holds once everything the writer took has landed.
    handed_version: Option<u64>,
    /// Messages at the front that belong to a catch-up (and whatever was
    /// queued before it): a later overflow keeps them, so a catch-up
    /// larger than the limit still gets through.
    pinned: usize,
    /// Frame the pinned catch-up brings the child to.
    pinned_version: Option<u64>,
    closing: bool,
    dead: bool,
    drops: u64,
    refreshes: u64,
}

impl<M: AsRef<[u8]> + From<Vec<u8>>> ChildQueue<M> {
    /// A queue for a child that holds frame `version`; it is caught up at
    /// the next frame boundary (or by the next key frame).
    pub fn new(version: Option<u64>, limits: Limits) -> Self {
        ChildQueue {
            msgs: VecDeque::new(),
            bytes: 0,
            limits,
            mode: Mode::Lagging { since: version },
            queued_version: version,
            handed_version: version,
            pinned: 0,
            pinned_version: None,
            closing: false,
            dead: false,
            drops: 0,
            refreshes: 0,
        }
    }

    /// Bytes queued and not yet taken by the writer.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `Some(since)` while the child waits for a catch-up from `since`.
    pub fn lagging_since(&self) -> Option<Option<u64>> {
        match self.mode {
            Mode::Lagging { since } => Some(since),
            Mode::Live { .. } => None,
        }
    }

    /// Times the child's backlog was thrown away.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Catch-up frames queued for the child.
    pub fn refreshes(&self) -> u64 {
        self.refreshes
    }

    /// Whether the link has failed (nothing more goes to this child).
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    fn push(&mut self, msg: M, ends: Option<u64>) {
        self.bytes += msg.as_ref().len();
        self.msgs.push_back(Queued { msg, ends });
    }

    /// Queues a live chunk unless it would pass the limit; then cuts the
    /// queue back to its pinned prefix and marks the child lagging.
    fn push_live(&mut self, msg: M, ends: Option<u64>) -> Offer {
        if self.bytes + msg.as_ref().len() > self.limits.lag {
            while self.msgs.len() > self.pinned {
                if let Some(q) = self.msgs.pop_back() {
                    self.bytes -= q.msg.as_ref().len();
                }
            }
            let since = if self.pinned > 0 {
                self.pinned_version
            } else {
                self.handed_version
            };
            self.mode = Mode::Lagging { since };
            self.queued_version = since;
            self.drops += 1;
            return Offer::Dropped;
        }
        self.push(msg, ends);
        Offer::Queued
    }

    /// Offers the next chunk of the relayed stream.
    pub fn offer(&mut self, chunk: Chunk, msg: M) -> Offer {
        if self.dead || self.closing {
            return Offer::Skipped;
        }
        match (chunk, self.mode) {
            (Chunk::Start { base, .. }, mode) => {
                if let Mode::Lagging { .. } = mode {
                    // A key frame applies to anything: no need to wait
                    // for a catch-up (this is how a tree starts).
                    if base.is_some() || self.bytes > self.limits.resume {
                        return Offer::Skipped;
                    }
                }
                if base.is_some() && base != self.queued_version {
                    // The relay moved on without this child (it was
                    // caught up itself, or skipped frames).
                    self.mode = Mode::Lagging {
                        since: self.queued_version,
                    };
                    return Offer::Skipped;
                }
                self.mode = Mode::Live { in_frame: true };
                self.push_live(msg, None)
            }
            (Chunk::Tiles, Mode::Live { in_frame: true }) => self.push_live(msg, None),
            (Chunk::End { number }, Mode::Live { in_frame: true }) => {
                let offer = self.push_live(msg, Some(number));
                if offer == Offer::Queued {
                    self.mode = Mode::Live { in_frame: false };
                    self.queued_version = Some(number);
                }
                offer
            }
            _ => Offer::Skipped,
        }
    }

    /// Called at a frame boundary, while `canvas` holds the relay's last
    /// whole frame: a lagging child whose queue has drained gets the
    /// tiles changed since its version (or a key frame) and is live
    /// again. Returns whether a catch-up frame was queued.
    pub fn catch_up(&mut self, canvas: &Canvas) -> bool {
        let Mode::Lagging { since } = self.mode else {
            return false;
        };
        if self.dead || self.closing || self.bytes > self.limits.resume {
            return false;
        }
        let Some(held) = canvas.version() else {
            return false;
        };
        let mut refreshed = false;
        if since != Some(held) {
            // The canvas holds a whole frame, which is all refresh needs.
            let Ok(frame) = canvas.refresh(since) else {
                return false;
            };
            let last = frame.messages.len().saturating_sub(1);
            for (i, m) in frame.messages.into_iter().enumerate() {
                self.push(M::from(m), (i == last).then_some(held));
            }
            self.pinned = self.msgs.len();
            self.pinned_version = Some(held);
            self.refreshes += 1;
            refreshed = true;
        }
        self.mode = Mode::Live { in_frame: false };
        self.queued_version = Some(held);
        refreshed
    }

    /// The writer's next step; a message it gets counts as handed to the
    /// child.
    pub fn pop(&mut self) -> Next<M> {
        if self.dead {
            return Next::Close;
        }
        match self.msgs.pop_front() {
            Some(q) => {
                self.bytes -= q.msg.as_ref().len();
                self.pinned = self.pinned.saturating_sub(1);
                if q.ends.is_some() {
                    self.handed_version = q.ends;
                }
                Next::Send(q.msg)
            }
            None if self.closing => Next::Close,
            None => Next::Wait,
        }
    }

    /// Queues the end of the stream (past any limit: it is tiny and
    /// last); the writer closes once it is out.
    pub fn close(&mut self, end: M) {
        if !self.dead && !self.closing {
            self.push(end, None);
            self.closing = true;
        }
    }

    /// The link failed: forget the queue; the writer closes.
    pub fn fail(&mut self) {
        self.dead = true;
        self.msgs.clear();
        self.bytes = 0;
        self.pinned = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::screen::Encoder;
    use crate::video::format::{PixelFormat, VideoFormat};
    use proptest::prelude::*;

    /// 256x128 RGB: 4x2 tiles of 12 KiB each.
    fn format() -> VideoFormat {
        VideoFormat::new(256, 128, PixelFormat::Rgb24).unwrap()
    }

    const LIMITS: Limits = Limits {
        lag: 256 << 10,
        resume: 32 << 10,
    };

    /// Frames whose changed tiles are noise (incompressible), so the
    /// stream is heavy enough for a stalled child to overflow.
    fn frames(seed: u64, count: usize) -> Vec<Vec<u8>> {
        let f = format();
        let line = f.line_bytes();
        let mut x = seed | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = vec![vec![0u8; f.frame_bytes()]];
        for _ in 1..count {
            let mut next = out.last().unwrap().clone();
            let changed = rnd();
            // Tile i of the 4x2 grid covers 64 rows of 192 bytes.
            for i in 0..8 {
                if changed & (1 << i) != 0 {
                    let (col, row) = (i % 4, i / 4);
                    for y in row * 64..row * 64 + 64 {
                        let at = y * line + col * 192;
                        next[at..at + 192].iter_mut().for_each(|b| *b = rnd() as u8);
                    }
                }
            }
            out.push(next);
        }
        out
    }

    /// A child at the end of a link: takes up to `budget` bytes a tick off
    /// its queue (a message that starts within the budget is read whole,
    /// the overdraft is paid next tick) and decodes them.
    struct SimChild {
        queue: ChildQueue<Vec<u8>>,
        canvas: Canvas,
        credit: i64,
        completed: Vec<u64>,
        max_bytes: usize,
    }

    impl SimChild {
        fn new() -> Self {
            SimChild {
                queue: ChildQueue::new(None, LIMITS),
                canvas: Canvas::new(format()).unwrap(),
                credit: 0,
                completed: Vec::new(),
                max_bytes: 0,
            }
        }

        fn offer(&mut self, msg: &[u8]) {
            let chunk = Chunk::of(msg).unwrap();
            self.queue.offer(chunk, msg.to_vec());
            self.max_bytes = self.max_bytes.max(self.queue.bytes());
        }

        fn read(&mut self, budget: Option<i64>, truth: &[Vec<u8>]) {
            self.credit = match budget {
                None => i64::MAX,
                Some(b) => (self.credit + b).min(b),
            };
            while self.credit > 0 {
                let Next::Send(m) = self.queue.pop() else {
                    break;
                };
                self.credit -= m.len() as i64;
                let (k, b) = framing::split(&m).unwrap();
                let sm = ScreenMessage::parse(k, b).unwrap().unwrap();
                // The relay must never send what the child cannot apply.
                if let Some(done) = self.canvas.apply(&sm).unwrap() {
                    assert_eq!(
                        self.canvas.pixels(),
                        &truth[done.number as usize][..],
                        "frame {} is not bit-exact",
                        done.number
                    );
                    self.completed.push(done.number);
                }
            }
            if budget.is_none() {
                self.credit = 0;
            }
        }
    }

    /// Runs a relay with two children over `truth`, one tick per frame;
    /// the slow child reads `slow(tick)` bytes per tick (`None`: all).
    /// `via_peer`: the relay is itself a peer decoding its parent's stream
    /// (else it is the source with its encoder's canvas).
    fn run(
        truth: &[Vec<u8>],
        key_interval: u64,
        via_peer: bool,
        slow: impl Fn(usize) -> Option<i64>,
    ) -> (SimChild, SimChild) {
        let f = format();
        let mut enc = Encoder::new(f, key_interval).unwrap();
        let mut relay = Canvas::new(f).unwrap();
        let (mut fast, mut lazy) = (SimChild::new(), SimChild::new());
        for (n, frame) in truth.iter().enumerate() {
            // At the frame boundary the relay's canvas holds frame n - 1:
            // the source's encoder before encoding, a peer's own canvas
            // before applying the next start.
            let held = if via_peer { &relay } else { enc.canvas() };
            fast.queue.catch_up(held);
            lazy.queue.catch_up(held);
            let encoded = enc.encode(frame, n as u64, 0).unwrap();
            for m in &encoded.messages {
                fast.offer(m);
                lazy.offer(m);
                let (k, b) = framing::split(m).unwrap();
                relay
                    .apply(&ScreenMessage::parse(k, b).unwrap().unwrap())
                    .unwrap();
            }
            fast.read(None, truth);
            lazy.read(slow(n), truth);
        }
        (fast, lazy)
    }

    /// The most a child's queue may hold: the lag limit, or a catch-up
    /// (at most a key frame: every tile, LZ4's worst case, headers) on
    /// top of a drained queue.
    fn bound() -> usize {
        let key = format().frame_bytes() * 101 / 100 + 16 * 64 + 256;
        LIMITS.lag.max(LIMITS.resume + key)
    }

    #[test]
    fn stalled_child_is_bounded_and_resumes_bit_exact() {
        let truth = frames(7, 60);
        // Reads nothing for frames 5..30, then everything.
        let (fast, lazy) = run(&truth, 0, false, |t| (5..30).contains(&t).then_some(0));
        assert_eq!(fast.completed, (0..60).collect::<Vec<u64>>());
        assert_eq!(fast.queue.drops(), 0);
        assert!(lazy.queue.drops() >= 1, "the stall never overflowed");
        assert!(lazy.queue.refreshes() >= 1);
        assert!(lazy.max_bytes <= bound(), "{}", lazy.max_bytes);
        assert_eq!(lazy.completed.last(), Some(&59), "{:?}", lazy.completed);
        assert!(lazy.completed.len() < 60);
    }

    #[test]
    fn catch_up_larger_than_the_limit_still_lands() {
        let truth = frames(3, 40);
        let small = Limits {
            lag: 40 << 10,
            resume: 8 << 10,
        };
        let f = format();
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut q = ChildQueue::<Vec<u8>>::new(None, small);
        let mut child = Canvas::new(f).unwrap();
        for (n, frame) in truth.iter().enumerate().take(10) {
            let e = enc.encode(frame, n as u64, 0).unwrap();
            for m in &e.messages {
                q.offer(Chunk::of(m).unwrap(), m.clone());
            }
        }
        // Noisy deltas overflowed the small limit; the catch-up (every
        // tile, about 96 KiB) is larger than the limit and lands anyway.
        assert!(q.drops() >= 1);
        assert!(q.catch_up(enc.canvas()));
        while let Next::Send(m) = q.pop() {
            let (k, b) = framing::split(&m).unwrap();
            child
                .apply(&ScreenMessage::parse(k, b).unwrap().unwrap())
                .unwrap();
        }
        assert_eq!(child.version(), Some(9));
        assert_eq!(child.pixels(), &truth[9][..]);
    }

    #[test]
    fn close_and_fail() {
        let mut q = ChildQueue::<Vec<u8>>::new(None, LIMITS);
        q.close(vec![1, 2, 3]);
        assert_eq!(q.offer(Chunk::Tiles, vec![0; 9]), Offer::Skipped);
        assert_eq!(q.pop(), Next::Send(vec![1, 2, 3]));
        assert_eq!(q.pop(), Next::Close);
        let mut q = ChildQueue::<Vec<u8>>::new(None, LIMITS);
        assert_eq!(q.pop(), Next::Wait);
        q.fail();
        assert_eq!(q.pop(), Next::Close);
        assert!(q.is_dead());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any read schedule: the queue stays bounded, the fast sibling
        /// gets every frame, and every frame the slow child completes is
        /// bit-exact; once it reads freely again it reaches the end.
        #[test]
        fn any_read_schedule(
            seed in any::<u64>(),
            key_interval in 0u64..8,
            via_peer in any::<bool>(),
            schedule in prop::collection::vec(prop::option::of(0i64..200_000), 30),
        ) {
            let truth = frames(seed, 36);
            let (fast, lazy) = run(&truth, key_interval, via_peer, |t| {
                schedule.get(t).copied().unwrap_or(None)
            });
            prop_assert_eq!(&fast.completed, &(0..36).collect::<Vec<u64>>());
            prop_assert!(lazy.max_bytes <= bound());
            prop_assert!(lazy.completed.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(lazy.completed.last(), Some(&35));
        }
    }
}
