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

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Error;
use super::aligned::AlignedBuf;
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

#[derive(Debug)]
struct Partial {
    timestamp: MediaTime,
    data: AlignedBuf,
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
    /// Newest timestamp handed out, to spot stripes arriving too late.
    last_out: Option<MediaTime>,
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
        if p.staged.is_empty() {
            self.stripes.merge(data, k, &mut p.data)?;
        } else {
            p.staged[k * n..(k + 1) * n].copy_from_slice(data);
        }
        self.arrived(pos, k, timestamp, complete);
        Ok(())
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
        if self.last_out.is_some_and(|t| timestamp.ticks_since(t) <= 0) {
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
        let n = self.stripes.frame_format().frame_bytes();
        let data = match self.spare.pop() {
            Some(b) if b.len() == n => b,
            _ => AlignedBuf::new(n),
        };
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
            let settled = (0..self.stripes.count()).all(|k| {
                oldest.arrived & (1 << k) != 0
                    || self.newest[k].is_some_and(|n| n.ticks_since(t) > 0)
            });
            if !settled && self.partial.len() <= self.depth {
                return;
            }
            if let Some(p) = self.partial.pop_front() {
                self.hand_out(p);
            }
        }
    }

    fn hand_out(&mut self, mut p: Partial) {
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
            let _ = self.stripes.merge_parts(&parts, &mut p.data);
            if !p.staged.is_empty() && self.spare_staged.len() < self.depth {
                self.spare_staged.push(std::mem::take(&mut p.staged));
            }
            let held = p.held.drain(..).enumerate();
            self.spent
                .extend(held.filter_map(|(k, b)| b.map(|b| (k, b))));
        } else {
            let absent = (0..self.stripes.count()).filter(|k| missing & (1 << k) != 0);
            for k in absent {
                let _ = self.stripes.merge(&self.zeros, k, &mut p.data);
            }
        }
        for (k, c) in self.counters.iter_mut().enumerate() {
            if missing & (1 << k) != 0 {
                c.missing += 1;
            }
        }
        self.last_out = Some(p.timestamp);
        self.ready.push_back(Assembled {
            timestamp: p.timestamp,
            data: p.data,
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
        while let Some(p) = self.partial.pop_front() {
            self.hand_out(p);
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
        // Stripe 6's copy of frame 1 arriving now is late.
        a.handle_input(6, MediaTime(u32::MAX - 1499), &part(&s, &frame, 6), true)
            .unwrap();
        assert_eq!(a.counters()[6].late, 1);
        a.finish();
        let g = a.poll_event().unwrap();
        assert_eq!(g.missing, 0xff & !(1 << 6));
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
}
