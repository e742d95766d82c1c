//! Whole frames of a striped stream booked into a recording: each frame's
//! index, the frames lost between them, repeat-last, a frame limit, and
//! how far apart a frame's stripes arrived.
//!
//! The single-stream [`super::Receiver`] numbers its frames and books lost
//! ones itself. A striped receive gets its whole frames from the
//! [`Assembler`](super::assembler::Assembler) instead, which knows RTP
//! timestamps only; [`FrameBook`] makes the same decisions for those:
//!
//! - **index**: frame periods since the first booked frame's timestamp
//!   (the shorter way round the 2^32 circle) when the rate is known, else
//!   the frame's place in order; never below the next index, so a
//!   timestamp going backwards is booked as the next frame;
//! - **lost**: the indices skipped between the newest booked frame and a
//!   new one, as one [`Event::Lost`] range;
//! - **repeat-last**: under [`Incomplete::RepeatLast`], the last complete
//!   frame is recorded again in place of each lost frame and of each
//!   incomplete one ([`Event::Repeat`]);
//! - **limit**: with a frame limit of `n`, frames `0..n` are booked
//!   (complete, incomplete or lost) and later ones handed straight back;
//! - **skew**: per whole frame, the span between its first and last
//!   stripe's hand-out, for frames that came out complete.
//!
//! Every input makes at most five events, so a huge timestamp jump is one
//! `Lost` range and one `Repeat`, never a queue of millions.
//!
//! # Polling order
//!
//! No transmits and no timer. For each stripe frame a stripe receiver
//! hands out, the driver feeds [`Input::Stripe`] with the time it was
//! handed out, then gives the stripe to the assembler; each frame the
//! assembler hands out goes in as [`Input::Whole`]; then every
//! [`FrameBook::poll_event`]: record a `Frame`'s data, record a
//! `Repeat`'s data `count` times, hand `Spent` buffers back to the
//! assembler. After the assembler's last frame, [`Input::End`].

use std::collections::VecDeque;

use super::aligned::AlignedBuf;
use super::assembler::{Assembled, StripeSet};
use super::format::FrameRate;
use super::receiver::{Incomplete, Record};
use crate::units::{MediaTime, Nanos};

/// Frames whose stripes' hand-out times are tracked at once. Entries leave
/// with their frame, and older ones when a newer frame comes out, so the
/// bound only matters for stripes whose frames never come out.
pub const MAX_ARRIVALS: usize = 256;

/// How a [`FrameBook`] is set up.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Stripes a frame is divided into (stripe numbers are `0..stripes`).
    pub stripes: usize,
    /// Frame rate, when known, to number frames by timestamp and so see
    /// lost ones; without it frames are numbered in order and none is lost.
    pub rate: Option<FrameRate>,
    /// What is recorded for an incomplete or lost frame.
    pub incomplete: Incomplete,
    /// Book frames `0..n` only (complete, incomplete or lost).
    pub frame_limit: Option<u64>,
}

/// What a [`FrameBook`] is told.
#[derive(Debug)]
pub enum Input {
    /// Stripe `stripe` handed out its part of the frame at `timestamp`
    /// (at the `now` given with it).
    Stripe {
        /// The stripe's number.
        stripe: usize,
        /// The frame's RTP timestamp.
        timestamp: MediaTime,
    },
    /// The assembler handed out a whole frame.
    Whole(Assembled),
    /// The streams ended: no more input.
    End,
}

/// What a [`FrameBook`] has to say, in recording order.
#[derive(Debug)]
pub enum Event {
    /// Frame `index` is booked.
    Frame {
        /// Its index in the recording.
        index: u64,
        /// Its RTP timestamp.
        timestamp: MediaTime,
        /// Every stripe arrived with every byte.
        complete: bool,
        /// Stripes that never delivered it.
        missing: StripeSet,
        /// Stripes that delivered it with bytes missing.
        incomplete: StripeSet,
        /// The frame to record, or `None` when the policy records
        /// something else or nothing (its buffer then comes as
        /// [`Event::Spent`]).
        data: Option<AlignedBuf>,
    },
    /// Frames `first..first + count` of which no stripe arrived.
    Lost {
        /// Index of the first.
        first: u64,
        /// How many.
        count: u64,
    },
    /// Record `data`, a copy of the last complete frame, `count` times in
    /// place of frames `first..first + count` (lost, or one incomplete).
    /// Not sent before a first complete frame: there is nothing to repeat.
    Repeat {
        /// Index of the first frame it stands for.
        first: u64,
        /// How many times to record it.
        count: u64,
        /// The last complete frame.
        data: AlignedBuf,
    },
    /// A whole-frame buffer not to be recorded: give it back to the
    /// assembler.
    Spent(AlignedBuf),
}

/// Input a [`FrameBook`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BookError {
    /// A stripe number outside the division.
    #[error(
        "stripe {stripe} is not one of the {count} stripes (0..{count}): feed the stripe numbers the assembler was made with"
    )]
    NoSuchStripe {
        /// The stripe fed.
        stripe: usize,
        /// Stripes the book was made for.
        count: usize,
    },
    /// Input after [`Input::End`].
    #[error("input after the end of the streams: a new stream needs a new FrameBook")]
    Ended,
}

/// Counters of a [`FrameBook`]; `frames_*` add up to the frames booked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames booked with every stripe complete.
    pub frames_complete: u64,
    /// Frames booked with a stripe missing or incomplete.
    pub frames_incomplete: u64,
    /// Frames booked as lost (within the limit).
    pub frames_lost: u64,
    /// Widest span between a complete frame's first and last stripe.
    pub skew_max: Nanos,
    /// Sum of those spans.
    pub skew_total: Nanos,
    /// Complete frames whose span was measured.
    pub skew_frames: u64,
}

impl Stats {
    /// Frames booked: complete, incomplete and lost.
    pub fn booked(&self) -> u64 {
        self.frames_complete + self.frames_incomplete + self.frames_lost
    }

    /// Mean span between a complete frame's first and last stripe (zero
    /// before any was measured).
    pub fn skew_mean(&self) -> Nanos {
        Nanos(self.skew_total.0.checked_div(self.skew_frames).unwrap_or(0))
    }
}

/// First and last stripe hand-out of one frame being assembled.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    timestamp: MediaTime,
    first: Nanos,
    last: Nanos,
}

/// Books whole frames (see the module docs).
#[derive(Debug)]
pub struct FrameBook {
    config: Config,
    /// The first booked frame's timestamp: index 0.
    first: Option<MediaTime>,
    /// The newest index booked.
    newest: Option<u64>,
    /// Per frame being assembled, bounded by [`MAX_ARRIVALS`].
    arrivals: Vec<Arrival>,
    /// Kept under repeat-last only.
    last_complete: Option<AlignedBuf>,
    ended: bool,
    events: VecDeque<Event>,
    stats: Stats,
}

impl FrameBook {
    /// A book for `config`.
    pub fn new(config: Config) -> FrameBook {
        FrameBook {
            config,
            first: None,
            newest: None,
            arrivals: Vec::new(),
            last_complete: None,
            ended: false,
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Takes one input at `now`. Refused: a stripe number outside the
    /// division, and anything after [`Input::End`] (a whole frame refused
    /// is dropped with its buffer).
    pub fn handle_input(&mut self, now: Nanos, input: Input) -> Result<(), BookError> {
        if self.ended {
            return Err(BookError::Ended);
        }
        match input {
            Input::Stripe { stripe, timestamp } => self.stripe(now, stripe, timestamp)?,
            Input::Whole(f) => self.whole(f),
            Input::End => {
                // Frames still being assembled never come out now, and
                // nothing more will be repeated.
                self.ended = true;
                self.arrivals = Vec::new();
                self.last_complete = None;
            }
        }
        Ok(())
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether every frame of the limit is booked.
    pub fn is_done(&self) -> bool {
        self.config
            .frame_limit
            .is_some_and(|n| self.stats.booked() >= n)
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Notes a stripe's hand-out time for its frame's skew.
    fn stripe(&mut self, at: Nanos, stripe: usize, timestamp: MediaTime) -> Result<(), BookError> {
        let count = self.config.stripes;
        if stripe >= count {
            return Err(BookError::NoSuchStripe { stripe, count });
        }
        let room = self.arrivals.len() < MAX_ARRIVALS;
        match self.arrivals.iter_mut().find(|a| a.timestamp == timestamp) {
            Some(a) => {
                a.first = a.first.min(at);
                a.last = a.last.max(at);
            }
            None if room => self.arrivals.push(Arrival {
                timestamp,
                first: at,
                last: at,
            }),
            // A frame past the bound goes without a skew figure.
            None => {}
        }
        Ok(())
    }

    /// One whole frame: its skew, then its booking.
    fn whole(&mut self, f: Assembled) {
        self.skew(&f);
        if self.is_done() {
            self.events.push_back(Event::Spent(f.data));
            return;
        }
        self.book(f);
    }

    /// The frame's stripe span into the counters, and the arrival table
    /// rid of it and of every older frame.
    fn skew(&mut self, f: &Assembled) {
        if let Some(pos) = self
            .arrivals
            .iter()
            .position(|a| a.timestamp == f.timestamp)
        {
            let a = self.arrivals.swap_remove(pos);
            // Only whole frames: an incomplete one goes out when evicted
            // or flushed at the end, long after its stripes came.
            if f.complete() {
                let span = a.last - a.first;
                let s = &mut self.stats;
                s.skew_max = s.skew_max.max(span);
                s.skew_total = s.skew_total.saturating_add(span);
                s.skew_frames += 1;
            }
        }
        // Stripes of older frames arriving now are late: forget them.
        self.arrivals
            .retain(|a| a.timestamp.ticks_since(f.timestamp) > 0);
    }

    /// The frame's index: frame periods since the first frame when the
    /// rate is known, else its place in order; never below the next.
    fn index(&mut self, t: MediaTime) -> u64 {
        let first = *self.first.get_or_insert(t);
        let next = self.next();
        match self.config.rate {
            Some(r) => {
                // A timestamp behind the first (or 2^31 ticks on) counts
                // as the next frame: `max(0)`, then `max(next)`.
                let ticks = f64::from(t.ticks_since(first).max(0));
                ((ticks / r.period_ticks()).round() as u64).max(next)
            }
            None => next,
        }
    }

    /// The index after the newest booked.
    fn next(&self) -> u64 {
        self.newest.map_or(0, |n| n + 1)
    }

    /// Books the frames lost before `f`, then `f`, within the limit.
    fn book(&mut self, f: Assembled) {
        let index = self.index(f.timestamp);
        let next = self.next();
        let limit = self.config.frame_limit.unwrap_or(u64::MAX);
        let lost = (index - next).min(limit.saturating_sub(self.stats.booked()));
        if lost > 0 {
            self.stats.frames_lost += lost;
            self.events.push_back(Event::Lost {
                first: next,
                count: lost,
            });
            if self.config.incomplete.record_lost() == Record::LastComplete {
                self.repeat(next, lost);
            }
        }
        self.newest = Some(index);
        if self.is_done() {
            self.events.push_back(Event::Spent(f.data));
            return;
        }
        let complete = f.complete();
        if complete {
            self.stats.frames_complete += 1;
        } else {
            self.stats.frames_incomplete += 1;
        }
        self.record(index, f, complete);
    }

    /// What the policy records for booked frame `index`.
    fn record(&mut self, index: u64, f: Assembled, complete: bool) {
        let policy = self.config.incomplete;
        if complete && policy == Incomplete::RepeatLast {
            match &mut self.last_complete {
                Some(last) if last.len() == f.data.len() => last.copy_from_slice(&f.data),
                _ => self.last_complete = Some(f.data.clone()),
            }
        }
        let record = policy.record(complete);
        let (data, spent) = match record {
            Record::Frame => (Some(f.data), None),
            Record::LastComplete | Record::Nothing => (None, Some(f.data)),
        };
        self.events.push_back(Event::Frame {
            index,
            timestamp: f.timestamp,
            complete,
            missing: f.missing,
            incomplete: f.incomplete,
            data,
        });
        if let Some(buf) = spent {
            self.events.push_back(Event::Spent(buf));
        }
        if record == Record::LastComplete {
            self.repeat(index, 1);
        }
    }

    /// The last complete frame in place of frames `first..first + count`.
    fn repeat(&mut self, first: u64, count: u64) {
        if let Some(last) = &self.last_complete {
            self.events.push_back(Event::Repeat {
                first,
                count,
                data: last.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 50 fps: 1800 ticks a frame.
    const PERIOD: u32 = 1800;

    fn book(incomplete: Incomplete, limit: Option<u64>) -> FrameBook {
        FrameBook::new(Config {
            stripes: 4,
            rate: Some(FrameRate::new(50, 1).unwrap()),
            incomplete,
            frame_limit: limit,
        })
    }

    /// A whole frame at `ts` whose bytes are all `tag`, stripe 1 missing
    /// unless `complete`.
    fn whole(ts: u32, tag: u8, complete: bool) -> Input {
        Input::Whole(Assembled {
            timestamp: MediaTime(ts),
            data: AlignedBuf::copy_of(&[tag; 16]),
            missing: if complete { 0 } else { 1 << 1 },
            incomplete: 0,
        })
    }

    /// Events as short words: `f3` frame 3 recorded (`#tag`), `f3-` booked
    /// but not recorded, `f3!` incomplete, `lost1+2`, `rep1+2#tag`, `spent`.
    fn words(b: &mut FrameBook) -> Vec<String> {
        std::iter::from_fn(|| b.poll_event())
            .map(|e| match e {
                Event::Frame {
                    index,
                    complete,
                    data,
                    ..
                } => format!(
                    "f{index}{}{}",
                    if complete { "" } else { "!" },
                    data.map_or("-".into(), |d| format!("#{}", d[0]))
                ),
                Event::Lost { first, count } => format!("lost{first}+{count}"),
                Event::Repeat { first, count, data } => format!("rep{first}+{count}#{}", data[0]),
                Event::Spent(_) => "spent".into(),
            })
            .collect()
    }

    fn feed(b: &mut FrameBook, inputs: Vec<Input>) -> Vec<String> {
        for i in inputs {
            b.handle_input(Nanos::ZERO, i).unwrap();
        }
        words(b)
    }

    #[test]
    fn frames_are_numbered_from_the_first_timestamp() {
        let mut b = book(Incomplete::Drop, None);
        let t0 = 90_000;
        let ev = feed(
            &mut b,
            vec![
                whole(t0, 0, true),
                whole(t0 + PERIOD, 1, true),
                // A frame 0.4 periods late in its stamp still rounds home.
                whole(t0 + 2 * PERIOD + 700, 2, true),
            ],
        );
        assert_eq!(ev, ["f0#0", "f1#1", "f2#2"]);
        assert_eq!(b.stats().frames_complete, 3);
    }

    #[test]
    fn skipped_frames_are_lost_and_repeated_only_under_repeat_last() {
        let inputs = || {
            vec![
                whole(0, 10, true),
                whole(3 * PERIOD, 13, true),
                whole(4 * PERIOD, 14, false),
            ]
        };
        let mut b = book(Incomplete::Drop, None);
        assert_eq!(
            feed(&mut b, inputs()),
            ["f0#10", "lost1+2", "f3#13", "f4!-", "spent"]
        );
        let mut b = book(Incomplete::Keep, None);
        assert_eq!(
            feed(&mut b, inputs()),
            ["f0#10", "lost1+2", "f3#13", "f4!#14"]
        );
        let mut b = book(Incomplete::RepeatLast, None);
        assert_eq!(
            feed(&mut b, inputs()),
            [
                "f0#10",
                "lost1+2",
                "rep1+2#10",
                "f3#13",
                "f4!-",
                "spent",
                "rep4+1#13"
            ]
        );
        let s = b.stats();
        assert_eq!(
            (s.frames_complete, s.frames_incomplete, s.frames_lost),
            (2, 1, 2)
        );
        assert_eq!(s.booked(), 5);
    }

    #[test]
    fn nothing_is_repeated_before_a_complete_frame() {
        let mut b = book(Incomplete::RepeatLast, None);
        let ev = feed(&mut b, vec![whole(0, 1, false), whole(2 * PERIOD, 2, true)]);
        assert_eq!(ev, ["f0!-", "spent", "lost1+1", "f2#2"]);
    }

    #[test]
    fn without_a_rate_frames_are_numbered_in_order() {
        let mut b = FrameBook::new(Config {
            rate: None,
            ..book(Incomplete::RepeatLast, None).config
        });
        let ev = feed(&mut b, vec![whole(0, 0, true), whole(50 * PERIOD, 1, true)]);
        assert_eq!(ev, ["f0#0", "f1#1"]);
    }

    #[test]
    fn a_timestamp_going_backwards_is_the_next_frame() {
        let mut b = book(Incomplete::Drop, None);
        let t0 = 10 * PERIOD;
        let ev = feed(
            &mut b,
            vec![
                whole(t0, 0, true),
                whole(t0 + PERIOD, 1, true),
                whole(t0 - 5 * PERIOD, 2, true),
            ],
        );
        assert_eq!(ev, ["f0#0", "f1#1", "f2#2"]);
        assert_eq!(b.stats().frames_lost, 0);
    }

    #[test]
    fn the_limit_caps_lost_frames_and_hands_later_ones_back() {
        let mut b = book(Incomplete::RepeatLast, Some(4));
        let ev = feed(
            &mut b,
            vec![
                whole(0, 0, true),
                whole(9 * PERIOD, 9, true),
                whole(10 * PERIOD, 10, true),
            ],
        );
        // Frames 1..4 are lost and fill the limit: frame 9 is not booked.
        assert_eq!(ev, ["f0#0", "lost1+3", "rep1+3#0", "spent", "spent"]);
        assert!(b.is_done());
        assert_eq!(b.stats().booked(), 4);
    }

    #[test]
    fn skew_is_the_span_of_a_complete_frames_stripes() {
        let mut b = book(Incomplete::Keep, None);
        let stripe = |b: &mut FrameBook, k, ts, us| {
            let i = Input::Stripe {
                stripe: k,
                timestamp: MediaTime(ts),
            };
            b.handle_input(Nanos::from_micros(us), i).unwrap();
        };
        for (k, us) in [(2, 130), (0, 100), (1, 400), (3, 250)] {
            stripe(&mut b, k, 0, us);
        }
        stripe(&mut b, 0, PERIOD, 20_000);
        stripe(&mut b, 1, PERIOD, 20_100);
        b.handle_input(Nanos::ZERO, whole(0, 0, true)).unwrap();
        // Incomplete: no skew figure.
        b.handle_input(Nanos::ZERO, whole(PERIOD, 1, false))
            .unwrap();
        let s = b.stats();
        assert_eq!((s.skew_max, s.skew_frames), (Nanos::from_micros(300), 1));
        assert_eq!(s.skew_mean(), Nanos::from_micros(300));
        assert!(b.arrivals.is_empty());
    }

    #[test]
    fn the_arrival_table_is_bounded() {
        let mut b = book(Incomplete::Drop, None);
        for n in 0..1000u32 {
            let i = Input::Stripe {
                stripe: 0,
                timestamp: MediaTime(n * PERIOD),
            };
            b.handle_input(Nanos::ZERO, i).unwrap();
        }
        assert_eq!(b.arrivals.len(), MAX_ARRIVALS);
    }

    #[test]
    fn bad_input_is_refused_with_what_to_do() {
        let mut b = book(Incomplete::Drop, None);
        let bad = Input::Stripe {
            stripe: 4,
            timestamp: MediaTime(0),
        };
        let e = b.handle_input(Nanos::ZERO, bad).unwrap_err();
        assert_eq!(
            e,
            BookError::NoSuchStripe {
                stripe: 4,
                count: 4
            }
        );
        assert!(
            e.to_string()
                .contains("stripe 4 is not one of the 4 stripes")
        );
        b.handle_input(Nanos::ZERO, Input::End).unwrap();
        let e = b.handle_input(Nanos::ZERO, whole(0, 0, true)).unwrap_err();
        assert_eq!(e, BookError::Ended);
        assert!(e.to_string().contains("new FrameBook"));
        assert!(b.poll_event().is_none());
    }

    fn any_input() -> impl Strategy<Value = (u8, u32, u8, bool)> {
        (0u8..3, any::<u32>(), 0u8..6, any::<bool>())
    }

    proptest! {
        /// Any timestamps (backwards, wrapping, huge jumps), any stripe
        /// numbers: no panic, at most five events an input, indices in
        /// order, the limit kept, the table bounded.
        #[test]
        fn any_input_is_booked_in_order_and_bounded(
            inputs in prop::collection::vec(any_input(), 0..300),
            policy in 0usize..3,
            limit in prop::option::of(0u64..50),
            rated in any::<bool>(),
        ) {
            let incomplete = [Incomplete::Drop, Incomplete::Keep, Incomplete::RepeatLast][policy];
            let mut b = FrameBook::new(Config {
                stripes: 4,
                rate: rated.then(|| FrameRate::new(60000, 1001).unwrap()),
                incomplete,
                frame_limit: limit,
            });
            let mut next = 0u64;
            for (at, (kind, ts, stripe, complete)) in inputs.into_iter().enumerate() {
                let input = match kind {
                    0 => Input::Stripe { stripe: usize::from(stripe), timestamp: MediaTime(ts) },
                    _ => whole(ts, 0, complete),
                };
                let refused = b.handle_input(Nanos(at as u64), input).is_err();
                prop_assert_eq!(refused, kind == 0 && stripe >= 4);
                let mut made = 0;
                while let Some(e) = b.poll_event() {
                    made += 1;
                    match e {
                        Event::Lost { first, count } => {
                            prop_assert!(first == next && count > 0);
                            next += count;
                        }
                        Event::Frame { index, .. } => {
                            prop_assert_eq!(index, next);
                            next += 1;
                        }
                        _ => {}
                    }
                }
                prop_assert!(made <= 5);
                prop_assert!(b.arrivals.len() <= MAX_ARRIVALS);
                prop_assert_eq!(b.stats().booked(), next);
                prop_assert!(limit.is_none_or(|n| next <= n));
            }
        }
    }
}
