//! Whole frames from stripes: the receive side of [`super::stripe`].
//!
//! Each stripe arrives as its own RFC 4175 stream and goes through its own
//! [`super::Receiver`]; the [`Assembler`] takes the frames those receivers
//! hand out and puts the stripes of one RTP timestamp back into one frame.
//! Stripes are aligned by timestamp alone (senders on different hosts
//! share the epoch grid, so the same frame carries the same timestamp on
//! every stripe), never by arrival order.
//!
//! A frame is handed out once every stripe has either delivered it or
//! moved past it (a receiver hands out frames in order, so a stripe that
//! delivered a later frame will never deliver this one). At most `depth`
//! frames are held: when a stripe stalls, the oldest frame goes out with
//! that stripe marked missing rather than holding memory without bound.
//! Every frame handed out says which stripes were missing and which were
//! incomplete, and the counters say it per stripe.
//!
//! A receiver that starts while the stream flows joins each stripe at its
//! own moment (each is its own group, and a router forwards each once its
//! own join reaches it; 21 ms apart through pimd in the tests). So until
//! the first frame goes out, frames older than some stripe's first are
//! not handed out but dropped, and counted
//! ([`before_join`](Assembler::before_join)): they came before that
//! stripe joined, not missing from it. The stream starts at the first
//! frame every stripe delivered. After that, or once the depth forces a
//! frame out first (a stripe that never comes), a stripe without a frame
//! is missing from it.
//!
//! Where a stripe is one run of the frame's bytes (the `lines` rule,
//! [`Stripes::contiguous`]), nothing is copied: a stripe's receiver asks
//! [`Assembler::lend`] for its part of the whole frame of a timestamp as
//! that frame begins, writes the stripe there (the kernel lands packets
//! straight in it), and gives the part back with
//! [`Assembler::handle_lent`]; the parts join into the frame in place.
//! The same timestamp gets the same whole frame on every stripe, whichever
//! stripe asks first. A part that does not come back in time (its frame
//! forced out) makes its frame fall back to a copy, as without lending,
//! so every frame comes out the same either way.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Error;
use super::aligned::{AlignedBuf, Part};
use super::stripe::{MAX_STRIPES, Rule, Stripes};
use crate::units::MediaTime;

/// Most frames held at once.
const MAX_DEPTH: usize = 64;

/// Stripes as bits: bit `k` is stripe `k`.
pub type StripeSet = u64;

/// A reassembled frame.
#[derive(Debug)]
pub struct Assembled {
    /// RTP timestamp shared by its stripes.
    pub timestamp: MediaTime,
    /// The whole frame (stripes that did not arrive are zeros),
    /// page-aligned for O_DIRECT writes.
    pub data: AlignedBuf,
    /// Stripes that never delivered this frame.
    pub missing: StripeSet,
    /// Stripes that delivered it with bytes missing.
    pub incomplete: StripeSet,
}

impl Assembled {
    /// Every stripe arrived with every byte.
    pub fn complete(&self) -> bool {
        self.missing == 0 && self.incomplete == 0
    }

    /// The stripes that failed, in order.
    pub fn failed(&self) -> impl Iterator<Item = usize> + '_ {
        let bad = self.missing | self.incomplete;
        (0..MAX_STRIPES).filter(move |k| bad & (1 << k) != 0)
    }
}

/// Counters of one stripe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeCounters {
    /// Frames this stripe delivered with every byte.
    pub complete: u64,
    /// Frames it delivered with bytes missing.
    pub incomplete: u64,
    /// Frames it never delivered.
    pub missing: u64,
    /// Frames it delivered after the whole frame had gone out.
    pub late: u64,
}

/// The memory of a frame being filled.
#[derive(Debug)]
enum Canvas {
    /// One buffer; stripes are copied in.
    Whole(AlignedBuf),
    /// One buffer divided into the stripes' parts (`lines`): `None` where
    /// a part is lent to its stripe's receiver.
    Parts(Vec<Option<Part>>),
}

#[derive(Debug)]
struct Partial {
    timestamp: MediaTime,
    data: Canvas,
    /// 2SI: the stripes as they arrive, back to back, interleaved into
    /// `data` in one pass when the frame goes out (empty otherwise).
    staged: Vec<u8>,
    /// 2SI: the stripes' own buffers, held until the frame goes out
    /// ([`Assembler::handle_owned`]; empty otherwise).
    held: Vec<Option<Vec<u8>>>,
    arrived: StripeSet,
    incomplete: StripeSet,
}

/// The reassembly machine (see the module docs).
#[derive(Debug)]
pub struct Assembler {
    stripes: Stripes,
    depth: usize,
    /// Frames being filled, oldest first (ordered by timestamp).
    partial: VecDeque<Partial>,
    /// Newest timestamp each stripe delivered.
    newest: Vec<Option<MediaTime>>,
    /// Newest timestamp handed out or dropped, to spot stripes arriving
    /// too late.
    last_out: Option<MediaTime>,
    /// Each stripe's first timestamp, to tell where it joined.
    first: Vec<Option<MediaTime>>,
    /// Whether a frame went out (the join is over).
    started: bool,
    /// Frames dropped as older than a stripe's join.
    before_join: u64,
    ready: VecDeque<Assembled>,
    spare: Vec<AlignedBuf>,
    /// Staging buffers for reuse.
    spare_staged: Vec<Vec<u8>>,
    /// Held stripe buffers of frames handed out, for their owners.
    spent: VecDeque<(usize, Vec<u8>)>,
    /// A stripe of zeros, made the first time a stripe goes missing.
    zeros: Vec<u8>,
    counters: Vec<StripeCounters>,
}

impl Assembler {
    /// Reassembles frames divided by `stripes`, holding at most `depth`
    /// frames (clamped to 1..=64) while stripes catch up.
    pub fn new(stripes: Stripes, depth: usize) -> Assembler {
        Assembler {
            stripes,
            depth: depth.clamp(1, MAX_DEPTH),
            partial: VecDeque::new(),
            newest: vec![None; stripes.count()],
            last_out: None,
            first: vec![None; stripes.count()],
            started: false,
            before_join: 0,
            ready: VecDeque::new(),
            spare: Vec::new(),
            spare_staged: Vec::new(),
            spent: VecDeque::new(),
            zeros: Vec::new(),
            counters: vec![StripeCounters::default(); stripes.count()],
        }
    }

    /// Stripe `k` delivered its part of the frame at `timestamp`
    /// (`complete` when every byte arrived).
    pub fn handle_input(
        &mut self,
        k: usize,
        timestamp: MediaTime,
        data: &[u8],
        complete: bool,
    ) -> Result<(), Error> {
        let Some(pos) = self.accept(k, timestamp, data.len())? else {
            return Ok(());
        };
        let n = self.stripes.stripe_format().frame_bytes();
        let two_si = self.stripes.rule() == Rule::TwoSampleInterleave;
        let p = &mut self.partial[pos];
        if two_si && p.staged.is_empty() {
            // 2SI stripes are staged and interleaved two at a time when
            // the frame goes out: merging one stripe into the frame reads
            // every line back to keep the other stripe's pairs.
            p.staged = self.spare_staged.pop().unwrap_or_default();
            p.staged.resize(n * self.stripes.count(), 0);
        }
        if let Canvas::Parts(parts) = &mut p.data
            && let Some(Some(part)) = parts.get_mut(k)
        {
            // A part is its stripe's run of the frame.
            part.copy_from_slice(data);
        } else if p.staged.is_empty() {
            let mut whole = self.whole(pos);
            let merged = self.stripes.merge(data, k, &mut whole);
            self.partial[pos].data = Canvas::Whole(whole);
            merged?;
        } else {
            p.staged[k * n..(k + 1) * n].copy_from_slice(data);
        }
        self.arrived(pos, k, timestamp, complete);
        Ok(())
    }

    /// Stripe `k`'s part of the whole frame at `timestamp`, for its
    /// receiver to write the stripe in (see the module docs); give it
    /// back with [`handle_lent`](Self::handle_lent). `None` when the rule's
    /// stripes are not runs of the frame, when the frame already went
    /// out, when holding one more frame would pass the depth, or when the
    /// part is not here (lent already, or the stripe arrived): the stripe
    /// then comes in its own memory and is copied, as always.
    pub fn lend(&mut self, k: usize, timestamp: MediaTime) -> Option<Part> {
        let n = self.stripes.stripe_format().frame_bytes();
        let runs = self.stripes.contiguous(0).is_some()
            && n * self.stripes.count() == self.stripes.frame_format().frame_bytes();
        if !runs || k >= self.stripes.count() || self.is_late(timestamp) {
            return None;
        }
        let known = self.partial.iter().any(|p| p.timestamp == timestamp);
        if !known && self.partial.len() >= self.depth {
            return None;
        }
        let pos = self.slot(timestamp);
        let p = &mut self.partial[pos];
        if p.arrived & (1 << k) != 0 {
            return None;
        }
        if let Canvas::Whole(buf) = &mut p.data {
            // Dividing moves no byte: stripes copied in stay where they are.
            let parts = std::mem::take(buf).split(n);
            p.data = Canvas::Parts(parts.into_iter().map(Some).collect());
        }
        match &mut p.data {
            Canvas::Parts(parts) => parts.get_mut(k)?.take(),
            Canvas::Whole(_) => None,
        }
    }

    /// Stripe `k` delivered its part of the frame at `timestamp` in the
    /// `part` [`lend`](Self::lend) lent it: back in its place, nothing
    /// copied (copied only when the frame had to be rebuilt meanwhile,
    /// and dropped like any stripe arriving after its frame went out).
    pub fn handle_lent(
        &mut self,
        k: usize,
        timestamp: MediaTime,
        part: Part,
        complete: bool,
    ) -> Result<(), Error> {
        let Some(pos) = self.accept(k, timestamp, part.len())? else {
            return Ok(());
        };
        let p = &mut self.partial[pos];
        match &mut p.data {
            Canvas::Parts(parts) if parts[k].is_none() => parts[k] = Some(part),
            _ => {
                let mut whole = self.whole(pos);
                let merged = self.stripes.merge(&part, k, &mut whole);
                self.partial[pos].data = Canvas::Whole(whole);
                merged?;
            }
        }
        self.arrived(pos, k, timestamp, complete);
        Ok(())
    }

    /// Frame `pos`'s memory as one buffer, taken out (put it back): the
    /// parts joined where none is lent, which copies nothing; else a
    /// buffer with the parts at hand copied in, the lent ones to be
    /// copied when they come back.
    fn whole(&mut self, pos: usize) -> AlignedBuf {
        let canvas = std::mem::replace(
            &mut self.partial[pos].data,
            Canvas::Whole(AlignedBuf::default()),
        );
        let parts = match canvas {
            Canvas::Whole(buf) => return buf,
            Canvas::Parts(parts) => parts,
        };
        if parts.iter().all(Option::is_some) {
            return AlignedBuf::join(parts.into_iter().flatten().collect());
        }
        let mut buf = self.spare_frame();
        for (k, part) in parts.iter().enumerate() {
            if let (Some(part), Some(r)) = (part, self.stripes.contiguous(k)) {
                buf[r].copy_from_slice(part);
            }
        }
        buf
    }

    /// A whole-frame buffer: a spare one, or a new one.
    fn spare_frame(&mut self) -> AlignedBuf {
        let n = self.stripes.frame_format().frame_bytes();
        match self.spare.pop() {
            Some(b) if b.len() == n => b,
            _ => AlignedBuf::new(n),
        }
    }

    /// Whether a stripe of the frame at `timestamp` comes after that frame
    /// (or a newer one) went out.
    fn is_late(&self, timestamp: MediaTime) -> bool {
        self.last_out.is_some_and(|t| timestamp.ticks_since(t) <= 0)
    }

    /// [`handle_input`](Self::handle_input) taking the stripe's buffer: a
    /// 2SI stripe is held, not copied, until its frame goes out, then
    /// given back by [`poll_spent`](Self::poll_spent); any other buffer
    /// (a stripe of another rule, a late or repeated one) comes straight
    /// back here.
    pub fn handle_owned(
        &mut self,
        k: usize,
        timestamp: MediaTime,
        data: Vec<u8>,
        complete: bool,
    ) -> Result<Option<Vec<u8>>, Error> {
        if self.stripes.rule() != Rule::TwoSampleInterleave {
            self.handle_input(k, timestamp, &data, complete)?;
            return Ok(Some(data));
        }
        let Some(pos) = self.accept(k, timestamp, data.len())? else {
            return Ok(Some(data));
        };
        let count = self.stripes.count();
        let p = &mut self.partial[pos];
        if p.held.is_empty() {
            p.held.resize_with(count, || None);
        }
        let before = p.held[k].replace(data);
        self.arrived(pos, k, timestamp, complete);
        Ok(before)
    }

    /// A held stripe buffer whose frame went out, and its stripe.
    pub fn poll_spent(&mut self) -> Option<(usize, Vec<u8>)> {
        self.spent.pop_front()
    }

    /// Checks a stripe arrival and finds its frame (`None`: too late, and
    /// counted).
    fn accept(
        &mut self,
        k: usize,
        timestamp: MediaTime,
        len: usize,
    ) -> Result<Option<usize>, Error> {
        if k >= self.stripes.count() {
            return Err(Error::NoSuchStripe(k as u32));
        }
        if self.is_late(timestamp) {
            self.counters[k].late += 1;
            return Ok(None);
        }
        let n = self.stripes.stripe_format().frame_bytes();
        if len != n {
            return Err(Error::FrameSize {
                expected: n,
                got: len,
            });
        }
        Ok(Some(self.slot(timestamp)))
    }

    /// Books stripe `k`'s arrival in frame `pos` and hands out what is
    /// settled.
    fn arrived(&mut self, pos: usize, k: usize, timestamp: MediaTime, complete: bool) {
        let p = &mut self.partial[pos];
        let bit = 1 << k;
        if p.arrived & bit == 0 {
            p.arrived |= bit;
            if complete {
                self.counters[k].complete += 1;
            } else {
                p.incomplete |= bit;
                self.counters[k].incomplete += 1;
            }
        }
        if self.newest[k].is_none_or(|n| timestamp.ticks_since(n) > 0) {
            self.newest[k] = Some(timestamp);
        }
        self.first[k].get_or_insert(timestamp);
        self.release();
    }

    /// The frame being filled for `timestamp`, made if new, in timestamp
    /// order.
    fn slot(&mut self, timestamp: MediaTime) -> usize {
        let after = |p: &Partial| timestamp.ticks_since(p.timestamp) < 0;
        if let Some(pos) = self.partial.iter().position(|p| p.timestamp == timestamp) {
            return pos;
        }
        let pos = self
            .partial
            .iter()
            .position(after)
            .unwrap_or(self.partial.len());
        // Every stripe that arrives overwrites its whole part of a recycled
        // buffer, so only stripes that never arrive are zeroed (when the
        // frame goes out): zeroing every frame first would be one more
        // pass over 83 MB per 8K frame.
        let data = Canvas::Whole(self.spare_frame());
        self.partial.insert(
            pos,
            Partial {
                timestamp,
                data,
                staged: Vec::new(),
                held: Vec::new(),
                arrived: 0,
                incomplete: 0,
            },
        );
        pos
    }

    /// Hands out, oldest first, every frame no stripe can still add to,
    /// and the oldest beyond the depth.
    fn release(&mut self) {
        while let Some(oldest) = self.partial.front() {
            let t = oldest.timestamp;
            if self.before_joined(t) {
                self.drop_oldest();
                continue;
            }
            let settled = (0..self.stripes.count()).all(|k| {
                oldest.arrived & (1 << k) != 0
                    || self.newest[k].is_some_and(|n| n.ticks_since(t) > 0)
            });
            if !settled && self.partial.len() <= self.depth {
                return;
            }
            self.hand_out_oldest();
        }
    }

    /// Whether the frame at `t` came before some stripe's join: no frame
    /// went out yet, every stripe delivered one (so each one's first is
    /// known), and some stripe's first is newer.
    fn before_joined(&self, t: MediaTime) -> bool {
        !self.started
            && self.first.iter().all(Option::is_some)
            && self.first.iter().flatten().any(|f| f.ticks_since(t) > 0)
    }

    /// Drops the oldest frame, which came before a stripe joined: its
    /// memory goes back for reuse (made whole as for handing out; a lent
    /// part, when it comes back late, is dropped as any late stripe), held
    /// 2SI buffers to their owners, and its stripes come off the counters.
    fn drop_oldest(&mut self) {
        if self.partial.is_empty() {
            return;
        }
        let data = self.whole(0);
        let Some(mut p) = self.partial.pop_front() else {
            return;
        };
        self.recycle(data);
        self.give_back_stripes(&mut p);
        for (k, c) in self.counters.iter_mut().enumerate() {
            if p.arrived & (1 << k) == 0 {
                continue;
            }
            if p.incomplete & (1 << k) != 0 {
                c.incomplete = c.incomplete.saturating_sub(1);
            } else {
                c.complete = c.complete.saturating_sub(1);
            }
        }
        self.last_out = Some(p.timestamp);
        self.before_join += 1;
    }

    /// A gone frame's 2SI buffers: its staging for reuse, the stripes'
    /// own held buffers to their owners ([`poll_spent`](Self::poll_spent)).
    fn give_back_stripes(&mut self, p: &mut Partial) {
        if !p.staged.is_empty() && self.spare_staged.len() < self.depth {
            self.spare_staged.push(std::mem::take(&mut p.staged));
        }
        let held = p.held.drain(..).enumerate();
        self.spent
            .extend(held.filter_map(|(k, b)| b.map(|b| (k, b))));
    }

    /// Hands out the oldest frame, its memory made whole first.
    fn hand_out_oldest(&mut self) {
        if self.partial.is_empty() {
            return;
        }
        let data = self.whole(0);
        if let Some(p) = self.partial.pop_front() {
            self.hand_out(p, data);
        }
    }

    fn hand_out(&mut self, mut p: Partial, mut data: AlignedBuf) {
        let all = match self.stripes.count() {
            n if n >= 64 => u64::MAX,
            n => (1 << n) - 1,
        };
        let missing = all & !p.arrived;
        let n = self.stripes.stripe_format().frame_bytes();
        if missing != 0 && self.zeros.is_empty() {
            self.zeros = vec![0; n];
        }
        if !p.staged.is_empty() || !p.held.is_empty() {
            let parts: Vec<&[u8]> = (0..self.stripes.count())
                .map(|k| match p.held.get(k).and_then(Option::as_deref) {
                    Some(held) => held,
                    None if missing & (1 << k) != 0 => &self.zeros[..],
                    None => &p.staged[k * n..(k + 1) * n],
                })
                .collect();
            // Sizes match: all were made from `stripes`.
            let _ = self.stripes.merge_parts(&parts, &mut data);
            self.give_back_stripes(&mut p);
        } else {
            let absent = (0..self.stripes.count()).filter(|k| missing & (1 << k) != 0);
            for k in absent {
                let _ = self.stripes.merge(&self.zeros, k, &mut data);
            }
        }
        for (k, c) in self.counters.iter_mut().enumerate() {
            if missing & (1 << k) != 0 {
                c.missing += 1;
            }
        }
        self.last_out = Some(p.timestamp);
        self.started = true;
        self.ready.push_back(Assembled {
            timestamp: p.timestamp,
            data,
            missing,
            incomplete: p.incomplete,
        });
    }

    /// The next whole frame, oldest first.
    pub fn poll_event(&mut self) -> Option<Assembled> {
        self.ready.pop_front()
    }

    /// The streams ended: every frame still held goes out as it is.
    pub fn finish(&mut self) {
        while !self.partial.is_empty() {
            self.hand_out_oldest();
        }
    }

    /// Makes up to `frames` whole-frame buffers now, every page touched
    /// (at most the depth), so the first frames reuse them instead of
    /// faulting 83 MB of fresh memory in apiece while stripes arrive.
    pub fn warm(&mut self, frames: usize) {
        let n = self.stripes.frame_format().frame_bytes();
        while self.spare.len() < frames.min(self.depth) {
            self.spare.push(AlignedBuf::prefaulted(n));
        }
    }

    /// Takes a frame buffer back for reuse.
    pub fn recycle(&mut self, buf: AlignedBuf) {
        // Frames handed out come back from the recorder in bursts; keeping
        // them all (never more than were made) spares a fresh 83 MB
        // allocation, page faults and all, per 8K frame.
        if self.spare.len() < MAX_DEPTH {
            self.spare.push(buf);
        }
    }

    /// Per-stripe counters, in stripe order.
    pub fn counters(&self) -> &[StripeCounters] {
        &self.counters
    }

    /// Frames held, waiting for stripes.
    pub fn held(&self) -> usize {
        self.partial.len()
    }

    /// Frames dropped because they came before a stripe joined (see the
    /// module docs).
    pub fn before_join(&self) -> u64 {
        self.before_join
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::stripe::Rule;
    use crate::video::{PixelFormat, VideoFormat};

    fn setup() -> (Stripes, Vec<u8>) {
        let f = VideoFormat::new(8, 8, PixelFormat::Uyvy422).unwrap();
        let s = Stripes::new(f, Rule::TwoSampleInterleave, 8).unwrap();
        let frame = (0..f.frame_bytes()).map(|i| i as u8).collect();
        (s, frame)
    }

    fn part(s: &Stripes, frame: &[u8], k: usize) -> Vec<u8> {
        let mut out = vec![0; s.stripe_format().frame_bytes()];
        s.split(frame, k, &mut out).unwrap();
        out
    }

    #[test]
    fn stripes_in_any_order_make_the_frame() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 4);
        for k in [5, 0, 7, 2, 1, 6, 3, 4] {
            assert!(a.poll_event().is_none());
            a.handle_input(k, MediaTime(3000), &part(&s, &frame, k), true)
                .unwrap();
        }
        let f = a.poll_event().unwrap();
        assert!(f.complete());
        assert_eq!(&f.data[..], &frame[..]);
        assert_eq!(f.timestamp, MediaTime(3000));
    }

    #[test]
    fn a_stripe_that_moved_on_is_reported_missing() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 4);
        // Frame 0, whole: every stripe joined.
        for k in 0..8 {
            a.handle_input(k, MediaTime(u32::MAX - 2999), &part(&s, &frame, k), true)
                .unwrap();
        }
        assert!(a.poll_event().unwrap().complete());
        // Frame 1: stripe 6 never comes; stripe 2 is incomplete.
        for k in 0..8 {
            if k != 6 {
                a.handle_input(k, MediaTime(u32::MAX - 1499), &part(&s, &frame, k), k != 2)
                    .unwrap();
            }
        }
        assert!(a.poll_event().is_none());
        // Frame 2 (across the timestamp wrap): stripe 6 delivers it, so
        // it has moved past frame 1.
        a.handle_input(6, MediaTime(1), &part(&s, &frame, 6), true)
            .unwrap();
        let f = a.poll_event().unwrap();
        assert_eq!((f.missing, f.incomplete), (1 << 6, 1 << 2));
        assert_eq!(f.failed().collect::<Vec<_>>(), [2, 6]);
        assert_eq!(a.counters()[6].missing, 1);
        assert_eq!(a.counters()[2].incomplete, 1);
        assert_eq!(a.before_join(), 0);
        // Stripe 6's copy of frame 1 arriving now is late.
        a.handle_input(6, MediaTime(u32::MAX - 1499), &part(&s, &frame, 6), true)
            .unwrap();
        assert_eq!(a.counters()[6].late, 1);
        a.finish();
        let g = a.poll_event().unwrap();
        assert_eq!(g.missing, 0xff & !(1 << 6));
    }

    #[test]
    fn the_stream_starts_at_the_first_frame_every_stripe_delivered() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 4);
        let mut given = 0;
        // Stripe 5 joins two frames after the others (the receiver joined
        // a flowing stream, and its group reached it last).
        for n in 0..3u32 {
            for k in 0..8 {
                if k == 5 && n < 2 {
                    continue;
                }
                let back = a
                    .handle_owned(k, MediaTime(n * 1500), part(&s, &frame, k), true)
                    .unwrap();
                assert!(back.is_none());
                given += 1;
            }
        }
        // Frames 0 and 1 came before stripe 5 joined: dropped, not
        // handed out with it missing. Frame 2 is the stream's first.
        let f = a.poll_event().unwrap();
        assert_eq!(f.timestamp, MediaTime(3000));
        assert!(f.complete());
        assert_eq!(&f.data[..], &frame[..]);
        assert!(a.poll_event().is_none());
        assert_eq!(a.before_join(), 2);
        // The counters count the stream's frames only, and every held
        // buffer went back to its owner.
        assert!(
            a.counters()
                .iter()
                .all(|c| c.complete == 1 && c.missing == 0)
        );
        let mut spent = 0;
        while a.poll_spent().is_some() {
            spent += 1;
        }
        assert_eq!(spent, given);
        // After the start, a stripe that skips a frame is missing from it.
        for k in 0..8 {
            if k != 5 {
                a.handle_input(k, MediaTime(4500), &part(&s, &frame, k), true)
                    .unwrap();
            }
        }
        a.handle_input(5, MediaTime(6000), &part(&s, &frame, 5), true)
            .unwrap();
        assert_eq!(a.poll_event().unwrap().missing, 1 << 5);
        assert_eq!(a.before_join(), 2);
    }

    #[test]
    fn a_stripe_that_never_came_is_missing_and_its_late_join_drops_nothing() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 2);
        // Stripe 3 is silent until the depth forces frames out.
        for n in 0..4u32 {
            for k in (0..8).filter(|&k| k != 3) {
                a.handle_input(k, MediaTime(n * 1500), &part(&s, &frame, k), true)
                    .unwrap();
            }
        }
        a.handle_input(3, MediaTime(4 * 1500), &part(&s, &frame, 3), true)
            .unwrap();
        a.finish();
        let mut missing = 0;
        while let Some(f) = a.poll_event() {
            missing += u32::from(f.missing == 1 << 3);
        }
        assert_eq!(missing, 4);
        assert_eq!(a.before_join(), 0);
    }

    #[test]
    fn a_stalled_stripe_cannot_hold_more_than_depth_frames() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 3);
        for n in 0..10u32 {
            for k in 0..7 {
                a.handle_input(k, MediaTime(n * 1500), &part(&s, &frame, k), true)
                    .unwrap();
            }
            assert!(a.held() <= 3);
        }
        let mut out = 0;
        while let Some(f) = a.poll_event() {
            assert_eq!(f.missing, 1 << 7);
            out += 1;
        }
        assert_eq!(out, 7);
        assert!(a.handle_input(8, MediaTime(0), &[], true).is_err());
    }

    /// `frame` with stripe 0 zeros: what a frame missing it holds.
    fn without_stripe_0(s: &Stripes, frame: &[u8]) -> Vec<u8> {
        let mut want = frame.to_vec();
        s.merge(&vec![0; s.stripe_format().frame_bytes()], 0, &mut want)
            .unwrap();
        want
    }

    #[test]
    fn a_missing_stripe_is_zeros_even_in_a_recycled_buffer() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 4);
        a.recycle(AlignedBuf::copy_of(&vec![0xee; frame.len()]));
        for k in 1..8 {
            a.handle_input(k, MediaTime(0), &part(&s, &frame, k), true)
                .unwrap();
        }
        a.finish();
        let f = a.poll_event().unwrap();
        assert_eq!(f.missing, 1);
        assert_eq!(&f.data[..], &without_stripe_0(&s, &frame)[..]);
    }

    #[test]
    fn owned_stripes_are_held_then_given_back() {
        let (s, frame) = setup();
        let mut a = Assembler::new(s, 4);
        a.recycle(AlignedBuf::copy_of(&vec![0xee; frame.len()]));
        for k in [3, 1, 7, 2, 4, 6, 5] {
            let back = a
                .handle_owned(k, MediaTime(0), part(&s, &frame, k), true)
                .unwrap();
            assert!(back.is_none(), "stripe {k} is held, not copied");
        }
        assert!(a.poll_spent().is_none());
        a.finish();
        let f = a.poll_event().unwrap();
        assert_eq!(f.missing, 1);
        assert_eq!(&f.data[..], &without_stripe_0(&s, &frame)[..]);
        let mut spent: Vec<usize> = std::iter::from_fn(|| a.poll_spent().map(|(k, _)| k)).collect();
        spent.sort_unstable();
        assert_eq!(spent, [1, 2, 3, 4, 5, 6, 7]);
        // A late stripe's buffer comes straight back.
        let late = a
            .handle_owned(0, MediaTime(0), part(&s, &frame, 0), true)
            .unwrap();
        assert!(late.is_some());
    }

    /// Eight `lines` stripes of a 16x16 frame: two lines each.
    fn lines() -> (Stripes, Vec<u8>) {
        let f = VideoFormat::new(16, 16, PixelFormat::Uyvy422).unwrap();
        let s = Stripes::new(f, Rule::Lines, 8).unwrap();
        let frame = (0..f.frame_bytes()).map(|i| (i * 7 + 3) as u8).collect();
        (s, frame)
    }

    #[test]
    fn lent_stripes_land_in_the_frame_and_a_lost_one_is_zeros() {
        let (s, frame) = lines();
        let n = s.stripe_format().frame_bytes();
        let mut a = Assembler::new(s, 4);
        let recycled = AlignedBuf::copy_of(&vec![0xee; frame.len()]);
        let at = recycled.as_ptr().addr();
        a.recycle(recycled);
        // Stripe 3 never comes; the others write their stripe in the part
        // lent to them, in any order, and give it back.
        let mut lent: Vec<(usize, Part)> = [6, 0, 7, 2, 1, 5, 4]
            .into_iter()
            .map(|k| (k, a.lend(k, MediaTime(0)).unwrap()))
            .collect();
        assert!(a.lend(6, MediaTime(0)).is_none(), "a part is lent once");
        for (k, part) in &mut lent {
            assert_eq!(
                part.as_ptr().addr(),
                at + *k * n,
                "stripe {k}: its run of the frame"
            );
            part.copy_from_slice(&frame[*k * n..(*k + 1) * n]);
        }
        for (k, part) in lent {
            assert!(a.poll_event().is_none());
            a.handle_lent(k, MediaTime(0), part, k != 5).unwrap();
        }
        a.finish();
        let f = a.poll_event().unwrap();
        assert_eq!(
            f.data.as_ptr().addr(),
            at,
            "the frame is the memory lent: nothing copied"
        );
        assert_eq!((f.missing, f.incomplete), (1 << 3, 1 << 5));
        let mut want = frame.clone();
        want[3 * n..4 * n].fill(0);
        assert_eq!(&f.data[..], &want[..]);
        // Too late for a frame that went out: nothing lent.
        assert!(a.lend(3, MediaTime(0)).is_none());
        // 2SI stripes are not runs of the frame: never lent.
        let (two_si, _) = setup();
        assert!(Assembler::new(two_si, 4).lend(0, MediaTime(0)).is_none());
    }

    #[test]
    fn a_part_not_back_when_its_frame_must_go_is_copied_later_as_a_late_stripe() {
        let (s, frame) = lines();
        let n = s.stripe_format().frame_bytes();
        let mut a = Assembler::new(s, 1);
        let mut slow = a.lend(2, MediaTime(0)).unwrap();
        for k in (0..8).filter(|&k| k != 2) {
            a.handle_input(k, MediaTime(0), &frame[k * n..(k + 1) * n], true)
                .unwrap();
        }
        // The next frame forces frame 0 out (depth 1) while stripe 2
        // still holds its part: the frame is rebuilt, stripe 2 zeros.
        a.handle_input(0, MediaTime(3000), &frame[..n], true)
            .unwrap();
        let f = a.poll_event().unwrap();
        assert_eq!(f.missing, 1 << 2);
        let mut want = frame.clone();
        want[2 * n..3 * n].fill(0);
        assert_eq!(&f.data[..], &want[..]);
        slow.copy_from_slice(&frame[2 * n..3 * n]);
        a.handle_lent(2, MediaTime(0), slow, true).unwrap();
        assert_eq!(a.counters()[2].late, 1);
    }

    /// A stripe's receiver in a test: lends from the shared assembler.
    struct TestLender(std::sync::Arc<std::sync::Mutex<Assembler>>, usize);

    impl crate::video::st2110_20::Lender for TestLender {
        fn lend(&mut self, timestamp: MediaTime) -> Option<Part> {
            self.0.lock().unwrap().lend(self.1, timestamp)
        }
    }

    /// Three frames of 32x32 in eight `lines` stripes (256 bytes, four
    /// packets each) as eight streams through eight receivers, stripe 1
    /// losing frame 1 whole and stripe 6 one packet of frame 2, into an
    /// assembler: lending or copying.
    fn stripes_through_receivers(lend: bool) -> Vec<(u32, u64, u64, Vec<u8>)> {
        use crate::units::{ExtSeq, Ssrc};
        use crate::video::FrameRate;
        use crate::video::receiver::{Config, Datagram, Event, Incomplete, Receiver};
        use crate::video::st2110_20::Packetizer;
        use std::sync::{Arc, Mutex};
        let format = VideoFormat::new(32, 32, PixelFormat::Uyvy422).unwrap();
        let s = Stripes::new(format, Rule::Lines, 8).unwrap();
        let rate = FrameRate::new(30, 1).unwrap();
        let a = Arc::new(Mutex::new(Assembler::new(s, 4)));
        a.lock().unwrap().warm(2);
        let frames: Vec<Vec<u8>> = (0..3u8)
            .map(|f| {
                (0..format.frame_bytes())
                    .map(|i| (i * 7 + 3) as u8 ^ f.wrapping_mul(11))
                    .collect()
            })
            .collect();
        let mut receivers: Vec<Receiver> = (0..8)
            .map(|k| {
                let mut r = Receiver::new(Config {
                    format: s.stripe_format(),
                    rate: Some(rate),
                    incomplete: Incomplete::Keep,
                    frame_limit: None,
                });
                if lend {
                    r.set_lender(Box::new(TestLender(a.clone(), k)));
                }
                r
            })
            .collect();
        let n = s.stripe_format().frame_bytes();
        for (f, frame) in frames.iter().enumerate() {
            for (k, r) in receivers.iter_mut().enumerate() {
                if (k, f) == (1, 1) {
                    continue;
                }
                let p = Packetizer::new(s.stripe_format(), 100, Ssrc(k as u32)).unwrap();
                let ts = MediaTime(rate.rtp_timestamp(f as u64));
                let seq = ExtSeq((f * p.packets_per_frame()) as u64);
                let packets = p
                    .frame_packets(&frame[k * n..(k + 1) * n], seq, ts)
                    .unwrap();
                assert!(packets.len() > 2, "a stripe frame is several packets");
                for (i, pk) in packets.iter().enumerate() {
                    if (k, f, i) != (6, 2, 1) {
                        let d = Datagram {
                            bytes: pk,
                            from: None,
                        };
                        r.handle_input(crate::units::Nanos::from_micros(f as u64 * 100), d);
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (k, r) in receivers.iter_mut().enumerate() {
            r.finish();
            while let Some(e) = r.poll_event() {
                let Event::Frame(f) = e else { continue };
                let mut a = a.lock().unwrap();
                match f.lent {
                    Some(part) => a.handle_lent(k, f.timestamp, part, f.complete).unwrap(),
                    None => a.handle_input(k, f.timestamp, &f.data, f.complete).unwrap(),
                }
                assert_eq!(f.data.is_empty(), lend, "stripe {k}");
            }
        }
        let mut a = a.lock().unwrap();
        a.finish();
        while let Some(f) = a.poll_event() {
            out.push((f.timestamp.0, f.missing, f.incomplete, f.data.to_vec()));
        }
        out
    }

    #[test]
    fn receivers_writing_in_lent_parts_make_the_frames_copying_makes() {
        let copied = stripes_through_receivers(false);
        let lent = stripes_through_receivers(true);
        assert_eq!(copied.len(), 3);
        let flags: Vec<(u64, u64)> = copied.iter().map(|f| (f.1, f.2)).collect();
        assert_eq!(flags, [(0, 0), (1 << 1, 0), (0, 1 << 6)]);
        assert!(copied == lent, "lending changed a frame's bytes");
    }
}
