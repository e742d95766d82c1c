//! Many flows, one schedule: the send side of raw video as a state machine.
//!
//! Each flow is a [`Pacer`] (linear spreading or an ST 2110-21 sender
//! type's trains, bounded catch-up, underrun skips) placed on the sender's timeline, optionally staggered so
//! that the stripes of one frame interleave their trains instead of
//! colliding, with its own SSRC, sequence numbers and frame limit. The
//! sender keeps the flows' next release times in a binary heap, so a
//! pacing thread serving hundreds of flows pays O(log n) per train and
//! never scans them.
//!
//! A flow cannot send frame f before its driver has it: the sender asks
//! with [`Event::NeedFrame`] and the driver answers [`Input::Frame`] when
//! it has the frame. The request's deadline is the frame's first release,
//! and [`Sender::poll_timeout`] counts it: a request still open then is an
//! underrun, which the sender raises itself ([`Event::Underrun`]), giving
//! up that frame slot (counted) without ever shifting the schedule, and
//! asking for the next frame. A driver may give a slot up sooner with
//! [`Input::Underrun`] (the stripes of one frame give it up together), and
//! ends a flow whose input ended with [`Input::End`]. An epoch-aligned
//! driver lines its ring up with the requests by [`RingFrame`].
//!
//! A flow pauses with [`Input::Pause`] and goes on with [`Input::Resume`]
//! (RTSP PAUSE and PLAY). Raw video's RTP timestamps are its epoch frame
//! numbers, so unlike a TS flow's timeline a paused flow's grid does not
//! move: the frame in hand is let go ([`Event::Dropped`]), nothing leaves
//! and nothing is asked for or counted as an underrun while paused, and
//! the flow resumes with the first frame of its grid that starts at or
//! after the time the driver names, its timestamp that frame's and its
//! sequence numbers going on from the last packet sent, with no gap and
//! no repeat (an [`FlowSpec::epoch_locked`] flow's numbers follow the
//! frame, as ever).
//!
//! Packet contents stay out of the schedule: a flow made with
//! [`FlowSpec::new`] has no packetizer (the probe's test stream writes its
//! own headers), one made with [`FlowSpec::video`] writes RFC 4175 headers
//! through [`Sender::write_header`], and [`Sender::lay_out`] says where
//! each packet's headers, frame bytes and padding are, so that the driver
//! gathers them into one send without copying the frame.
//!
//! # Polling order
//!
//! As with quinn-proto's `Connection`, a driver, whenever it wakes:
//!
//! 1. drains [`Sender::poll_event`], noting every frame request and
//!    underrun, freeing every frame sent;
//! 2. answers the requests it can with [`Sender::handle_input`] (a frame
//!    that arrived by its deadline is used);
//! 3. calls [`Sender::poll_transmit`] with `now` (which raises the
//!    underruns of requests past their deadline) and sends the train it
//!    returns, reports when its send call returned with
//!    [`Input::Departed`] (a shaped flow's Cinst bucket counts the train
//!    from then), then goes back to 1;
//! 4. when it returns `None`, goes back to 1 if that raised events, and
//!    otherwise sleeps until [`Sender::poll_timeout`] (the next train or
//!    request deadline) or until its input has news.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;

use super::Error;
use super::format::FrameRate;
use super::pacer::{DEFAULT_CATCH_UP, DEFAULT_LATE_AFTER, Pacer};
use super::st2110_20::Packetizer;
use super::st2110_21::SenderSchedule;
use crate::slots::{SlotId, Slots};
use crate::stats::Distribution;
use crate::units::{ExtSeq, MediaTime, Nanos, Ssrc};

/// Names a flow of a [`Sender`]. Ids of removed flows are never reused
/// (the slot index is, under a new generation), so a stale id is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(SlotId);

impl FlowId {
    /// A small dense index (the slot the flow occupies), for drivers that
    /// keep per-flow state in a `Vec`. A removed flow's index is reused by
    /// a later flow.
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// Where a flow's trains sit relative to its frame grid.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stagger {
    Fixed(Nanos),
    /// Stripe `k` of `n`: `k/n` of one longest train later.
    Stripe(usize, usize),
}

/// Everything a flow needs to join a [`Sender`].
#[derive(Debug, Clone)]
pub struct FlowSpec {
    rate: FrameRate,
    packets_per_frame: usize,
    packetizer: Option<Packetizer>,
    ssrc: Ssrc,
    start: Nanos,
    first_frame: u64,
    stagger: Stagger,
    first_seq: ExtSeq,
    epoch_locked: bool,
    frame_limit: Option<u64>,
    burst: Nanos,
    train_cap: usize,
    catch_up: f64,
    late_after: Nanos,
    wake_slack: Nanos,
    slip: bool,
    shape: Option<SenderSchedule>,
}

/// Catch-up speed of a shaped flow: no fixed factor. Its pacer keeps a
/// copy of the receiver's Cinst bucket
/// ([`CinstGate`](super::st2110_21::CinstGate)) and a late train leaves as
/// soon as that bucket has room for it: after a stall the flow catches up
/// as fast as the sender type allows (a train up to CMAX at once, then the
/// drain rate, 1.1 × the mean packet rate), and never faster.
pub const SHAPED_CATCH_UP: f64 = f64::INFINITY;

impl FlowSpec {
    /// A flow of `packets_per_frame` packets per frame at `rate` whose
    /// packets the driver writes itself (no packetizer).
    pub fn new(rate: FrameRate, packets_per_frame: usize, ssrc: Ssrc) -> FlowSpec {
        FlowSpec {
            rate,
            packets_per_frame: packets_per_frame.max(1),
            packetizer: None,
            ssrc,
            start: Nanos::ZERO,
            first_frame: 0,
            stagger: Stagger::Fixed(Nanos::ZERO),
            first_seq: ExtSeq(0),
            epoch_locked: false,
            frame_limit: None,
            burst: Nanos::ZERO,
            train_cap: 1,
            catch_up: DEFAULT_CATCH_UP,
            late_after: DEFAULT_LATE_AFTER,
            wake_slack: Nanos::ZERO,
            slip: false,
            shape: None,
        }
    }

    /// Packets leave as `schedule` releases them (an ST 2110-21 sender
    /// type's trains from TRoffset on) instead of spread over the whole
    /// frame; its model's packet count must be the flow's. Trains are the
    /// schedule's (cut to the [`trains`](Self::trains) cap, whose burst
    /// window is then unused), and a late flow catches up at
    /// [`SHAPED_CATCH_UP`].
    pub fn shaped(mut self, schedule: SenderSchedule) -> FlowSpec {
        // RTP timestamps and releases on one grid: the model's.
        self.rate = schedule.model().rate();
        self.shape = Some(schedule);
        self.catch_up = SHAPED_CATCH_UP;
        self
    }

    /// A raw video flow: packets per frame and SSRC come from `packetizer`,
    /// which also writes the headers ([`Sender::write_header`]).
    pub fn video(rate: FrameRate, packetizer: Packetizer) -> FlowSpec {
        let mut spec = FlowSpec::new(rate, packetizer.packets_per_frame(), packetizer.ssrc());
        spec.packetizer = Some(packetizer);
        spec
    }

    /// The flow's first frame is epoch frame `first_frame` (which fixes its
    /// RTP timestamps), starting at `at` on the sender's timeline.
    pub fn start(mut self, at: Nanos, first_frame: u64) -> FlowSpec {
        self.start = at;
        self.first_frame = first_frame;
        self
    }

    /// The extended sequence number of the first packet (draw it at random
    /// per RFC 3550).
    pub fn first_seq(mut self, seq: ExtSeq) -> FlowSpec {
        self.first_seq = seq;
        self
    }

    /// Locks sequence numbers to the epoch frame grid: packet `i` of epoch
    /// frame `f` is numbered `seq + f·packets_per_frame + i`, whenever the
    /// flow started and whatever frames it skipped. Two senders of the same
    /// stream given the same SSRC and `seq` then send identical packets
    /// (SMPTE ST 2022-7 legs on different hosts, a stripe moved between
    /// nodes); a skipped frame leaves a gap a receiver counts as loss.
    pub fn epoch_locked(mut self, seq: ExtSeq) -> FlowSpec {
        self.first_seq = seq;
        self.epoch_locked = true;
        self
    }

    /// Trains carry the packets whose slots fall within `burst` of the
    /// first, at most `cap` (what one send call carries).
    pub fn trains(mut self, burst: Nanos, cap: usize) -> FlowSpec {
        self.burst = burst;
        self.train_cap = cap.max(1);
        self
    }

    /// Every packet leaves `offset` after its slot on the frame grid.
    pub fn stagger(mut self, offset: Nanos) -> FlowSpec {
        self.stagger = Stagger::Fixed(offset);
        self
    }

    /// Stripe `k` of `n` flows sharing one frame grid: offset by `k/n` of
    /// the longest train, so the stripes' trains take turns.
    pub fn stripe(mut self, k: usize, n: usize) -> FlowSpec {
        self.stagger = Stagger::Stripe(k, n.max(1));
        self
    }

    /// Stop after `frames` frames sent (underruns do not count).
    pub fn frame_limit(mut self, frames: Option<u64>) -> FlowSpec {
        self.frame_limit = frames;
        self
    }

    /// How much faster than nominal a late flow may catch up (see
    /// [`Pacer::set_catch_up`]).
    pub fn catch_up(mut self, factor: f64) -> FlowSpec {
        self.catch_up = factor;
        self
    }

    /// How late a wake-up may be without slowing the flow (see
    /// [`Pacer::set_wake_slack`]): for drivers that sleep to each train.
    pub fn wake_slack(mut self, slack: Nanos) -> FlowSpec {
        self.wake_slack = slack;
        self
    }

    /// Lets the flow pass a frame slot over when it can no longer begin
    /// the frame in its own epoch frame (see
    /// [`Pacer::slip`](crate::video::Pacer::slip), [`Event::Slipped`]).
    /// Off by default: only a driver that can send the frame in hand on
    /// the next slot (one stream whose content is not tied to its slots)
    /// turns it on. The stripes of one frame, or a cluster leg, would have
    /// to give the slot up and lose the frame, so they catch up instead.
    pub fn slip_late_frames(mut self, on: bool) -> FlowSpec {
        self.slip = on;
        self
    }

    /// Packets packed per frame.
    pub fn packets_per_frame(&self) -> usize {
        self.packets_per_frame
    }
}

/// The base of an [`FlowSpec::epoch_locked`] stream's sequence numbers,
/// fixed by its SSRC: senders that agree on the SSRC agree on every
/// number without talking, and streams of different SSRCs do not start
/// from the same numbers (a SplitMix64 finalizer of the SSRC, 32 bits as
/// RFC 4175's extended sequence number has).
pub fn locked_seq_base(ssrc: Ssrc) -> ExtSeq {
    ExtSeq(crate::splitmix::splitmix64(u64::from(ssrc.0)) & 0xffff_ffff)
}

/// What a driver tells the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The frame the flow asked for is in hand: its trains may leave.
    Frame {
        /// The flow.
        flow: FlowId,
    },
    /// Give up the slot of the frame asked for now, before its deadline
    /// (the sender does so itself at the deadline).
    Underrun {
        /// The flow.
        flow: FlowId,
    },
    /// The flow's last train left at `now` (its send call returned), so
    /// its Cinst bucket counts it from then rather than from its release.
    Departed {
        /// The flow.
        flow: FlowId,
    },
    /// The flow's input ended: it finishes instead of waiting for a frame
    /// (a flow that has its frame sends it first, and finishes at its
    /// next request).
    End {
        /// The flow.
        flow: FlowId,
    },
    /// Hold the flow (RTSP PAUSE): what is left of the frame in hand never
    /// leaves, and the open request is withdrawn, both told by
    /// [`Event::Dropped`]; nothing is asked for and no underrun is counted
    /// until [`Input::Resume`]. Pausing a paused or finished flow changes
    /// nothing.
    Pause {
        /// The flow.
        flow: FlowId,
    },
    /// Go on after a pause with the first frame of the flow's epoch grid
    /// that starts at or after `at` (the driver's `now` plus the lead it
    /// needs to fetch a frame); the flow asks for it at once. Resuming a
    /// flow that is not paused changes nothing.
    Resume {
        /// The flow.
        flow: FlowId,
        /// The earliest start of the first frame sent again.
        at: Nanos,
    },
}

/// What the sender tells its driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The flow needs epoch frame `frame`, whose first packet is due `at`;
    /// answer with [`Input::Frame`] by then, or the slot is given up.
    NeedFrame {
        /// The flow.
        flow: FlowId,
        /// Epoch frame number.
        frame: u64,
        /// Release time of its first packet.
        at: Nanos,
    },
    /// Nobody answered the request for `frame` by its deadline: the flow
    /// gave its slot up and asks for the next frame.
    Underrun {
        /// The flow.
        flow: FlowId,
        /// The epoch frame given up.
        frame: u64,
    },
    /// The flow (one that [`FlowSpec::slip_late_frames`]) fell so far
    /// behind that it could not begin epoch frame `first` inside that
    /// frame's own time, so it passed over `count` slots (see
    /// [`Pacer::slip`](crate::video::Pacer::slip)); it asks next for
    /// epoch frame `first + count`. A frame given for `first` and not
    /// begun is let go (its buffer is free for this flow); the driver
    /// gives the same frame again for the frame asked next, so no frame
    /// is lost.
    Slipped {
        /// The flow.
        flow: FlowId,
        /// The first epoch frame passed over.
        first: u64,
        /// How many.
        count: u64,
    },
    /// Every packet of `frame` has left: its buffer is free for this flow.
    FrameSent {
        /// The flow.
        flow: FlowId,
        /// Epoch frame number.
        frame: u64,
    },
    /// The flow paused: `frame` will not be sent, whether it was asked for
    /// and not yet given (the request is withdrawn) or given and not yet
    /// sent whole (its buffer is free for this flow).
    Dropped {
        /// The flow.
        flow: FlowId,
        /// Epoch frame number.
        frame: u64,
    },
    /// The flow reached its frame limit and will send nothing more.
    Finished {
        /// The flow.
        flow: FlowId,
    },
}

/// One train: packets `packets` of frame `frame` of one flow, to leave
/// back to back now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The flow.
    pub flow: FlowId,
    /// The slot of the train's first packet (the train leaves at or after).
    pub at: Nanos,
    /// Epoch frame number.
    pub frame: u64,
    /// Packet indices within the frame.
    pub packets: Range<usize>,
    /// RTP timestamp of the frame.
    pub timestamp: MediaTime,
    /// Extended sequence number of the first packet; the others follow.
    pub first_seq: ExtSeq,
}

impl Transmit {
    /// Packets in the train.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether the train is empty (never, for a train the sender made).
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }
}

/// Where one packet of a laid-out train is (see [`Sender::lay_out`]): its
/// headers, then frame bytes, then padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketLayout {
    /// Bytes of headers at the start of the packet's header slot.
    pub header: usize,
    /// The frame bytes it carries.
    pub data: Range<usize>,
    /// The RTP padding that ends it.
    pub padding: &'static [u8],
}

/// A laid-out train as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainLayout {
    /// Bytes of all its packets.
    pub bytes: usize,
    /// The GSO segment size, when every packet but the last fills one.
    pub segment: Option<usize>,
}

/// Where the next frame of an epoch-aligned driver's ring, whose epoch
/// frame is `number`, stands against a request for epoch frame `wanted`:
/// the one rule that keeps a ring and the epoch schedule aligned after
/// underruns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingFrame {
    /// Its slot was given up: drop it (give its buffer back) and look at
    /// the next one.
    Behind,
    /// It answers the request.
    Due,
    /// It comes before its slot: keep it for its own request; this one
    /// goes unanswered.
    Ahead,
}

impl RingFrame {
    /// Places ring frame `number` against a request for `wanted`.
    pub fn of(number: u64, wanted: u64) -> RingFrame {
        match number.cmp(&wanted) {
            std::cmp::Ordering::Less => RingFrame::Behind,
            std::cmp::Ordering::Equal => RingFrame::Due,
            std::cmp::Ordering::Greater => RingFrame::Ahead,
        }
    }
}

/// Counters of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Packets released.
    pub packets: u64,
    /// Packets released more than 100 µs behind their slot.
    pub late: u64,
    /// Largest lateness of any packet.
    pub max_late: Nanos,
    /// Frame slots given up for want of a frame.
    pub underruns: u64,
    /// Frame slots passed over after falling more than a frame behind.
    pub slipped: u64,
    /// Frames sent completely.
    pub frames_sent: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Asked for its next frame, not answered yet.
    Waiting,
    /// Has its frame; exactly one heap entry names it.
    Ready,
    /// Reached its frame limit.
    Finished,
}

#[derive(Debug)]
struct Flow {
    pacer: Pacer,
    packetizer: Option<Packetizer>,
    rate: FrameRate,
    /// Timeline point of the pacer's time zero (start plus stagger).
    origin: Nanos,
    ssrc: Ssrc,
    seq: ExtSeq,
    /// Numbers follow the epoch frame (see [`FlowSpec::epoch_locked`]),
    /// counted from this base.
    locked_base: Option<ExtSeq>,
    packets_per_frame: u64,
    frame_limit: Option<u64>,
    frames_sent: u64,
    burst: Nanos,
    max_train: usize,
    state: State,
    /// Held by [`Input::Pause`]: waiting with no request open.
    paused: bool,
    /// May pass slots over ([`FlowSpec::slip_late_frames`]).
    slip: bool,
}

impl Flow {
    fn new(spec: FlowSpec) -> Flow {
        let mut burst = spec.burst;
        let mut pacer = match spec.shape {
            Some(schedule) => {
                // One send call carries a whole train, or the train is cut.
                let cap = u64::try_from(spec.train_cap).unwrap_or(u64::MAX);
                let schedule = schedule
                    .with_train(schedule.train().min(cap))
                    .unwrap_or(schedule);
                burst = Nanos::ZERO;
                Pacer::shaped(schedule, spec.first_frame)
            }
            None => Pacer::new(spec.rate, spec.packets_per_frame, spec.first_frame),
        };
        pacer.set_catch_up(spec.catch_up);
        pacer.set_late_after(spec.late_after);
        pacer.set_wake_slack(spec.wake_slack);
        let max_train = pacer.max_train(burst, spec.train_cap);
        let stagger = match spec.stagger {
            Stagger::Fixed(d) => d,
            Stagger::Stripe(k, n) => {
                // k/n of the span of one longest train.
                let span = pacer.slot(max_train as u64).as_nanos();
                Nanos(span.saturating_mul(k as u64) / n as u64)
            }
        };
        Flow {
            pacer,
            packetizer: spec.packetizer,
            rate: spec.rate,
            origin: spec.start + stagger,
            ssrc: spec.ssrc,
            seq: spec.first_seq,
            locked_base: spec.epoch_locked.then_some(spec.first_seq),
            packets_per_frame: spec.packets_per_frame as u64,
            frame_limit: spec.frame_limit,
            frames_sent: 0,
            burst,
            max_train,
            state: State::Waiting,
            paused: false,
            slip: spec.slip,
        }
    }

    /// Timeline time of the next release.
    fn next_release(&self) -> Nanos {
        self.origin + self.pacer.next_release()
    }

    fn need_frame(&self, flow: FlowId) -> Event {
        Event::NeedFrame {
            flow,
            frame: self.pacer.frame(),
            at: self.origin + self.pacer.slot(self.pacer.next_packet()),
        }
    }

    /// Passes slots over at `local` if the flow may and must
    /// ([`Pacer::slip`]); the event that says so.
    fn slip(&mut self, id: FlowId, local: Nanos) -> Option<Event> {
        if !self.slip {
            return None;
        }
        let frames = self.pacer.slip(local)?;
        Some(Event::Slipped {
            flow: id,
            first: frames.start,
            count: frames.end - frames.start,
        })
    }

    fn limit_reached(&self) -> bool {
        self.frame_limit.is_some_and(|n| self.frames_sent >= n)
    }

    fn stats(&self) -> FlowStats {
        let p = self.pacer.stats();
        FlowStats {
            packets: p.packets,
            late: p.late,
            max_late: p.max_late,
            underruns: p.skipped_frames,
            slipped: p.slipped_frames,
            frames_sent: self.frames_sent,
        }
    }
}

/// The send schedule of any number of flows (see the module docs).
#[derive(Debug, Default)]
pub struct Sender {
    flows: Slots<Flow>,
    /// Next release of every ready flow.
    heap: BinaryHeap<Reverse<(Nanos, FlowId)>>,
    /// Deadline of every open frame request: (time, flow, frame).
    deadlines: BinaryHeap<Reverse<(Nanos, FlowId, u64)>>,
    events: VecDeque<Event>,
    lateness: Distribution,
    active: usize,
}

impl Sender {
    /// A sender with no flows.
    pub fn new() -> Sender {
        Sender::default()
    }

    /// Adds a flow; it asks for its first frame at once.
    pub fn add_flow(&mut self, spec: FlowSpec) -> FlowId {
        let mut flow = Flow::new(spec);
        let finished = flow.limit_reached();
        if finished {
            flow.state = State::Finished;
        }
        let id = FlowId(self.flows.insert(flow));
        if finished {
            self.events.push_back(Event::Finished { flow: id });
        } else {
            self.active += 1;
        }
        if !finished {
            self.ask(id);
        }
        id
    }

    /// Removes a flow, returning its final counters. Its pending trains
    /// vanish; events already queued for it stay queued.
    pub fn remove_flow(&mut self, id: FlowId) -> Option<FlowStats> {
        // A new generation makes the flow's heap entries stale.
        let flow = self.flows.remove(id.0)?;
        if flow.state != State::Finished {
            self.active -= 1;
        }
        Some(flow.stats())
    }

    fn flow(&self, id: FlowId) -> Option<&Flow> {
        self.flows.get(id.0)
    }

    fn flow_mut(&mut self, id: FlowId) -> Option<&mut Flow> {
        self.flows.get_mut(id.0)
    }

    /// Answers a [`Event::NeedFrame`]. An answer for a flow that is not
    /// waiting is ignored.
    pub fn handle_input(&mut self, now: Nanos, input: Input) -> Result<(), Error> {
        match input {
            Input::Frame { flow: id } => {
                let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
                if flow.state == State::Waiting && !flow.paused {
                    flow.state = State::Ready;
                    let at = flow.next_release();
                    self.heap.push(Reverse((at, id)));
                }
            }
            Input::Departed { flow: id } => {
                let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
                let local = now.saturating_sub(flow.origin);
                flow.pacer.departed(local);
            }
            Input::Underrun { flow: id } => {
                let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
                if flow.state == State::Waiting && !flow.paused {
                    flow.pacer.skip_frame();
                    self.ask(id);
                }
            }
            Input::End { flow: id } => {
                let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
                if flow.state == State::Waiting {
                    flow.state = State::Finished;
                    self.active -= 1;
                    self.events.push_back(Event::Finished { flow: id });
                } else if flow.state == State::Ready {
                    flow.frame_limit = Some(flow.frames_sent + 1);
                }
            }
            Input::Pause { flow: id } => self.pause(id)?,
            Input::Resume { flow: id, at } => self.resume(id, at)?,
        }
        Ok(())
    }

    /// Holds a flow: lets its frame go and withdraws its request.
    fn pause(&mut self, id: FlowId) -> Result<(), Error> {
        let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
        if flow.paused || flow.state == State::Finished {
            return Ok(());
        }
        flow.paused = true;
        flow.state = State::Waiting;
        let frame = flow.pacer.frame();
        // Its train and deadline entries go now, not lazily: after the
        // resume they would name the flow again (O(flows), and pauses are
        // rare).
        self.heap.retain(|Reverse((_, f))| *f != id);
        self.deadlines.retain(|Reverse((_, f, _))| *f != id);
        self.events.push_back(Event::Dropped { flow: id, frame });
        Ok(())
    }

    /// Puts a paused flow back on its grid at the first frame starting at
    /// or after `at`, never before the frame after one it began to send.
    fn resume(&mut self, id: FlowId, at: Nanos) -> Result<(), Error> {
        let flow = self.flow_mut(id).ok_or(Error::NoSuchFlow)?;
        if !flow.paused {
            return Ok(());
        }
        flow.paused = false;
        let begun = u64::from(flow.pacer.index_in_frame() != 0);
        let earliest = flow.pacer.frame() + begun;
        let on_grid = flow.pacer.frame_at_or_after(at.saturating_sub(flow.origin));
        flow.pacer.jump_to(earliest.max(on_grid));
        self.ask(id);
        Ok(())
    }

    /// Asks for the flow's next frame, with its deadline.
    fn ask(&mut self, id: FlowId) {
        let Some(flow) = self.flow_mut(id) else {
            return;
        };
        let ev = flow.need_frame(id);
        let frame = flow.pacer.frame();
        if let Event::NeedFrame { at, .. } = ev {
            self.deadlines.push(Reverse((at, id, frame)));
        }
        self.events.push_back(ev);
    }

    /// Drops deadlines of requests answered (or flows removed), then
    /// names the earliest open one.
    fn peek_deadline(&mut self) -> Option<(Nanos, FlowId)> {
        while let Some(&Reverse((at, id, frame))) = self.deadlines.peek() {
            let open = self.flow(id).is_some_and(|f| {
                f.state == State::Waiting && !f.paused && f.pacer.frame() == frame
            });
            if open {
                return Some((at, id));
            }
            self.deadlines.pop();
        }
        None
    }

    /// Gives up the slots whose requests are still open at `now`.
    fn expire(&mut self, now: Nanos) {
        while let Some((at, id)) = self.peek_deadline() {
            if at > now {
                return;
            }
            self.deadlines.pop();
            let Some(flow) = self.flow_mut(id) else {
                continue;
            };
            let frame = flow.pacer.frame();
            flow.pacer.skip_frame();
            self.events.push_back(Event::Underrun { flow: id, frame });
            self.ask(id);
        }
    }

    /// Drops heap entries of removed flows, then names the earliest.
    fn peek_live(&mut self) -> Option<(Nanos, FlowId)> {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if self.flow(id).is_some_and(|f| f.state == State::Ready) {
                return Some((at, id));
            }
            self.heap.pop();
        }
        None
    }

    /// The next train due at `now`, earliest release first. Gives up
    /// first the frame slots whose requests are past their deadline.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.expire(now);
        let (id, local) = loop {
            let (at, id) = self.peek_live()?;
            if at > now {
                return None;
            }
            self.heap.pop();
            let flow = self.flow_mut(id)?;
            let local = now.saturating_sub(flow.origin);
            if !self.slip_in_hand(id, local) {
                break (id, local);
            }
        };
        let flow = self.flow_mut(id)?;
        let n = flow.pacer.due(local, flow.max_train, flow.burst).max(1);
        let frame = flow.pacer.frame();
        let first = flow.pacer.index_in_frame();
        let lateness = flow.pacer.lateness(local);
        if let Some(base) = flow.locked_base {
            let index = frame.wrapping_mul(flow.packets_per_frame);
            flow.seq = base.add(index.wrapping_add(first as u64));
        }
        let t = Transmit {
            flow: id,
            at: flow.origin + flow.pacer.slot(flow.pacer.next_packet()),
            frame,
            packets: first..first + n,
            timestamp: MediaTime(flow.rate.rtp_timestamp(frame)),
            first_seq: flow.seq,
        };
        flow.pacer.sent(local, n);
        flow.seq = flow.seq.add(n as u64);
        self.lateness.record(lateness.as_nanos());
        self.after_train(id, frame, local);
        Some(t)
    }

    /// A ready flow about to begin a frame it can no longer begin in its
    /// own epoch frame lets it go and asks for the frame of the slot it
    /// slipped to (see [`Event::Slipped`]). Returns whether it did.
    fn slip_in_hand(&mut self, id: FlowId, local: Nanos) -> bool {
        let Some(flow) = self.flow_mut(id) else {
            return false;
        };
        let Some(slipped) = flow.slip(id, local) else {
            return false;
        };
        flow.state = State::Waiting;
        self.events.push_back(slipped);
        self.ask(id);
        true
    }

    /// Queues the flow's next train, or its frame-level events when the
    /// train ended a frame (`local`: now on the flow's schedule time).
    fn after_train(&mut self, id: FlowId, frame: u64, local: Nanos) {
        let Some(flow) = self.flow_mut(id) else {
            return;
        };
        if flow.pacer.index_in_frame() != 0 {
            let at = flow.next_release();
            self.heap.push(Reverse((at, id)));
            return;
        }
        flow.frames_sent += 1;
        let finished = flow.limit_reached();
        let slipped = if finished { None } else { flow.slip(id, local) };
        if finished {
            flow.state = State::Finished;
            self.active -= 1;
        } else {
            flow.state = State::Waiting;
        }
        self.events.push_back(Event::FrameSent { flow: id, frame });
        self.events.extend(slipped);
        if finished {
            self.events.push_back(Event::Finished { flow: id });
        } else {
            self.ask(id);
        }
    }

    /// The next event, in the order they happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the next train or frame request deadline is due (`None` once
    /// every flow has finished).
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        let train = self.peek_live().map(|(at, _)| at);
        let deadline = self.peek_deadline().map(|(at, _)| at);
        train.into_iter().chain(deadline).min()
    }

    /// Writes the RFC 4175 headers of packet `k` of train `t` into `buf`
    /// and returns their length: the driver sends them followed by the
    /// frame's bytes in [`Packetizer::data_range`] and the
    /// [`Packetizer::padding`] of packet `t.packets.start + k`.
    pub fn write_header(&self, t: &Transmit, k: usize, buf: &mut [u8]) -> Result<usize, Error> {
        let flow = self.flow(t.flow).ok_or(Error::NoSuchFlow)?;
        let p = flow.packetizer.as_ref().ok_or(Error::NoPacketizer)?;
        if k >= t.len() {
            return Err(Error::NoSuchPacket(t.packets.start + k));
        }
        p.write_header(
            t.packets.start + k,
            t.first_seq.add(k as u64),
            t.timestamp,
            buf,
        )
    }

    /// Room for one packet's headers in a train's header buffer: the
    /// longest header of the flow's packets (size the buffer
    /// `header_stride × max_train`).
    pub fn header_stride(&self, id: FlowId) -> Option<usize> {
        let p = self.flow(id)?.packetizer.as_ref()?;
        (0..p.packets_per_frame()).map(|i| p.header_len(i)).max()
    }

    /// Lays out train `t` for a gathering send: writes each packet's
    /// headers into its slot of `headers` (`stride` bytes apart, see
    /// [`Sender::header_stride`]) and puts in `out` where each packet's
    /// parts are. The train may leave as one GSO send of
    /// [`TrainLayout::segment`]-byte segments when every packet but the
    /// last is a full packet.
    pub fn lay_out(
        &self,
        t: &Transmit,
        headers: &mut [u8],
        stride: usize,
        out: &mut Vec<PacketLayout>,
    ) -> Result<TrainLayout, Error> {
        let flow = self.flow(t.flow).ok_or(Error::NoSuchFlow)?;
        let p = flow.packetizer.as_ref().ok_or(Error::NoPacketizer)?;
        out.clear();
        let size = p.packet_size();
        let (mut bytes, mut uniform) = (0usize, true);
        for (j, slot) in headers
            .chunks_exact_mut(stride.max(1))
            .take(t.len())
            .enumerate()
        {
            let i = t.packets.start + j;
            let header = self.write_header(t, j, slot)?;
            let data = p.data_range(i);
            let padding = p.padding(i);
            let len = header + data.len() + padding.len();
            bytes += len;
            uniform &= j + 1 == t.len() || len == size;
            out.push(PacketLayout {
                header,
                data,
                padding,
            });
        }
        if out.len() < t.len() {
            return Err(Error::NoSuchPacket(t.packets.start + out.len()));
        }
        let segment = (t.len() > 1 && uniform).then_some(size);
        Ok(TrainLayout { bytes, segment })
    }

    /// The flow's packetizer, if it was made with [`FlowSpec::video`].
    pub fn packetizer(&self, id: FlowId) -> Option<&Packetizer> {
        self.flow(id)?.packetizer.as_ref()
    }

    /// The longest train the flow sends (size batch buffers by it).
    pub fn max_train(&self, id: FlowId) -> Option<usize> {
        Some(self.flow(id)?.max_train)
    }

    /// The flow's SSRC.
    pub fn ssrc(&self, id: FlowId) -> Option<Ssrc> {
        Some(self.flow(id)?.ssrc)
    }

    /// The flow's counters.
    pub fn flow_stats(&self, id: FlowId) -> Option<FlowStats> {
        Some(self.flow(id)?.stats())
    }

    /// Lateness of every train's start against its slot, over all flows.
    pub fn lateness(&self) -> &Distribution {
        &self.lateness
    }

    /// Flows that have not reached their frame limit.
    pub fn active_flows(&self) -> usize {
        self.active
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::format::{PixelFormat, VideoFormat};

    fn rate(n: u32, d: u32) -> FrameRate {
        FrameRate::new(n, d).unwrap()
    }

    /// Answers every frame request at once; returns the events seen.
    fn feed_all(s: &mut Sender, now: Nanos) -> Vec<Event> {
        let mut seen = Vec::new();
        while let Some(e) = s.poll_event() {
            if let Event::NeedFrame { flow, .. } = e {
                s.handle_input(now, Input::Frame { flow }).unwrap();
            }
            seen.push(e);
        }
        seen
    }

    /// Runs on virtual time, jumping to each deadline, until `trains`
    /// trains left or nothing is left to send; frames are always ready.
    /// Returns the trains with their release times, and every event.
    fn run(s: &mut Sender, trains: usize) -> (Vec<(Nanos, Transmit)>, Vec<Event>) {
        let (mut out, mut events) = (Vec::new(), Vec::new());
        let mut now = Nanos::ZERO;
        while out.len() < trains {
            events.extend(feed_all(s, now));
            match s.poll_transmit(now) {
                Some(t) => out.push((now, t)),
                None => match s.poll_timeout() {
                    Some(at) => now = now.max(at),
                    None => break,
                },
            }
        }
        events.extend(feed_all(s, now));
        (out, events)
    }

    /// Runs on virtual time up to `until`, answering every request but
    /// one for frame `unanswered`; collects trains and events.
    fn step_until(
        s: &mut Sender,
        now: &mut Nanos,
        until: Nanos,
        unanswered: Option<u64>,
        out: &mut (Vec<(Nanos, Transmit)>, Vec<Event>),
    ) {
        loop {
            while let Some(e) = s.poll_event() {
                if let Event::NeedFrame { flow, frame, .. } = e
                    && Some(frame) != unanswered
                {
                    s.handle_input(*now, Input::Frame { flow }).unwrap();
                }
                out.1.push(e);
            }
            if let Some(t) = s.poll_transmit(*now) {
                out.0.push((*now, t));
                continue;
            }
            match s.poll_timeout() {
                Some(at) if at <= until => *now = (*now).max(at),
                _ => {
                    *now = until;
                    // Whatever falls due at `until` itself.
                    if s.poll_transmit(until).is_none() && s.poll_event().is_none() {
                        return;
                    }
                    panic!("something happened at {until:?}");
                }
            }
        }
    }

    #[test]
    fn a_pause_keeps_numbers_contiguous_and_resumes_on_the_grid() {
        // 50 fps, 4 packets a frame: one packet every 5 ms, frame 10 at 0.
        let r = rate(50, 1);
        let ms = Nanos::from_millis;
        let mut s = Sender::new();
        let id = s.add_flow(
            FlowSpec::new(r, 4, Ssrc(1))
                .start(Nanos::ZERO, 10)
                .first_seq(ExtSeq(100)),
        );
        let mut now = Nanos::ZERO;
        let mut out = (Vec::new(), Vec::new());
        // Frames 10 and 11 whole, and two packets of frame 12 (40, 45 ms).
        step_until(&mut s, &mut now, ms(47), None, &mut out);
        assert_eq!(out.0.len(), 10);
        s.handle_input(now, Input::Pause { flow: id }).unwrap();
        s.handle_input(now, Input::Pause { flow: id }).unwrap();
        assert_eq!(
            s.poll_event(),
            Some(Event::Dropped {
                flow: id,
                frame: 12
            })
        );
        assert_eq!(s.poll_event(), None);
        // Paused: no train, no request, no deadline; an answer is ignored.
        assert_eq!(s.poll_timeout(), None);
        s.handle_input(now, Input::Frame { flow: id }).unwrap();
        assert_eq!(s.poll_transmit(ms(100)), None);
        assert_eq!(s.poll_event(), None);
        // Resumed at 100 ms with a 13 ms lead: frame 16 (at 120 ms) is the
        // first to start at or after 113 ms. Resuming twice changes nothing.
        now = ms(100);
        let at = ms(113);
        s.handle_input(now, Input::Resume { flow: id, at }).unwrap();
        let at = ms(200);
        s.handle_input(now, Input::Resume { flow: id, at }).unwrap();
        let need = |frame, at| Event::NeedFrame {
            flow: id,
            frame,
            at,
        };
        assert_eq!(s.poll_event(), Some(need(16, ms(120))));
        assert_eq!(s.poll_event(), None);
        s.handle_input(now, Input::Frame { flow: id }).unwrap();
        // Frame 16 whole; frame 17 is asked for (due at 140 ms) and not
        // given; paused at 137 ms, it is no underrun at 140 ms or later.
        step_until(&mut s, &mut now, ms(137), Some(17), &mut out);
        s.handle_input(now, Input::Pause { flow: id }).unwrap();
        step_until(&mut s, &mut now, ms(300), None, &mut out);
        // Resumed on a frame boundary (300 ms is frame 25's start).
        s.handle_input(now, Input::Resume { flow: id, at: now })
            .unwrap();
        step_until(&mut s, &mut now, ms(316), None, &mut out);

        let (trains, events) = out;
        let times: Vec<u64> = trains
            .iter()
            .map(|(t, _)| t.as_nanos() / 1_000_000)
            .collect();
        let want = [
            0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 120, 125, 130, 135, 300, 305, 310, 315,
        ];
        assert_eq!(times, want);
        for (k, (now, t)) in trains.iter().enumerate() {
            // Sequence numbers: no gap and no repeat across both pauses.
            assert_eq!(t.first_seq, ExtSeq(100 + k as u64));
            assert_eq!(t.at, *now);
            // Each packet on its frame's grid slot, with that frame's
            // timestamp.
            let slot = ms(20 * (t.frame - 10)) + ms(5 * t.packets.start as u64);
            assert_eq!(t.at, slot, "{t:?}");
            assert_eq!(t.timestamp, MediaTime(r.rtp_timestamp(t.frame)));
        }
        let frames: Vec<u64> = trains.iter().map(|(_, t)| t.frame).collect();
        assert_eq!(frames[8..12], [12, 12, 16, 16]);
        assert_eq!(frames[14..], [25, 25, 25, 25]);
        let dropped: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::Dropped { .. } | Event::Underrun { .. }))
            .collect();
        let want = [Event::Dropped {
            flow: id,
            frame: 17,
        }];
        assert_eq!(dropped, want.iter().collect::<Vec<_>>());
        assert!(events.contains(&need(25, ms(300))));
        let st = s.flow_stats(id).unwrap();
        assert_eq!(
            (st.packets, st.underruns, st.frames_sent, st.late),
            (18, 0, 4, 0)
        );
        assert_eq!(s.active_flows(), 1);
    }

    #[test]
    fn each_train_leaves_on_its_slot_with_its_numbers() {
        // 50 fps, 4 packets: one every 5 ms; trains of one.
        let mut s = Sender::new();
        let spec = FlowSpec::new(rate(50, 1), 4, Ssrc(9))
            .start(Nanos::from_millis(3), 100)
            .first_seq(ExtSeq(0xffff_fffe));
        let id = s.add_flow(spec);
        let (trains, _) = run(&mut s, 10);
        for (k, (now, t)) in trains.iter().enumerate() {
            let want = Nanos::from_millis(3 + 5 * k as u64);
            assert_eq!((*now, t.at), (want, want));
            assert_eq!(t.frame, 100 + k as u64 / 4);
            assert_eq!(t.packets, k % 4..k % 4 + 1);
            assert_eq!(t.timestamp, MediaTime(rate(50, 1).rtp_timestamp(t.frame)));
            assert_eq!(t.first_seq, ExtSeq(0xffff_fffe + k as u64));
        }
        let st = s.flow_stats(id).unwrap();
        assert_eq!((st.packets, st.late, st.frames_sent), (10, 0, 2));
        assert_eq!(s.lateness().max(), 0);
    }

    #[test]
    fn epoch_locked_numbers_follow_the_frame_whenever_a_flow_starts() {
        // Two flows of one stream, the second joining 3 frames later and
        // skipping one: every packet they share carries the same number.
        let spec = |first: u64| {
            FlowSpec::new(rate(50, 1), 4, Ssrc(9))
                .start(Nanos::ZERO, first)
                .epoch_locked(ExtSeq(0xffff_fff0))
        };
        let mut a = Sender::new();
        a.add_flow(spec(10));
        let (ta, _) = run(&mut a, 24);
        let mut b = Sender::new();
        let id = b.add_flow(spec(13));
        b.poll_event();
        b.handle_input(Nanos::ZERO, Input::Underrun { flow: id })
            .unwrap();
        let (tb, _) = run(&mut b, 8);
        assert_eq!(tb[0].1.frame, 14);
        for (_, t) in &tb {
            let same = ta
                .iter()
                .find(|(_, u)| u.frame == t.frame && u.packets == t.packets);
            assert_eq!(same.map(|(_, u)| u.first_seq), Some(t.first_seq));
            let want = 0xffff_fff0 + 4 * t.frame + t.packets.start as u64;
            assert_eq!(t.first_seq, ExtSeq(want));
        }
    }

    #[test]
    fn no_drift_over_a_million_packets() {
        // 59.94 fps and 4319 packets a frame: the period is not a whole
        // number of nanoseconds, where accumulated sums drift.
        let r = rate(60000, 1001);
        let ppf = 4319u64;
        let first = 123_456_789u64;
        let mut s = Sender::new();
        s.add_flow(FlowSpec::new(r, ppf as usize, Ssrc(1)).start(Nanos(7), first));
        let n = 1_000_000u64;
        let mut now = Nanos::ZERO;
        let mut sent = 0u64;
        let last = loop {
            feed_all(&mut s, now);
            match s.poll_transmit(now) {
                Some(t) if sent == n => break t,
                Some(t) => {
                    assert_eq!(t.at, now);
                    sent += 1;
                }
                None => now = s.poll_timeout().unwrap(),
            }
        };
        // Packet n is packet n % ppf of frame n / ppf, exactly on the grid.
        let f = first + n / ppf;
        let k = n % ppf;
        let abs = (u128::from(f) * u128::from(ppf) + u128::from(k)) * 1001 * 1_000_000_000
            / (60000 * u128::from(ppf));
        let want = Nanos(7 + (abs - r.frame_start_ns(first)) as u64);
        assert_eq!((now, last.at), (want, want));
        assert_eq!(last.frame, f);
        assert_eq!(last.packets.start, k as usize);
    }

    #[test]
    fn a_late_frame_is_caught_up_at_a_bounded_rate() {
        // 10 fps, 100 packets: one per ms; catch-up 2x: 0.5 ms apart.
        let mut s = Sender::new();
        let id = s.add_flow(
            FlowSpec::new(rate(10, 1), 100, Ssrc(1))
                .catch_up(2.0)
                .trains(Nanos::ZERO, 64),
        );
        assert!(matches!(s.poll_event(), Some(Event::NeedFrame { .. })));
        // The frame arrives 10 ms late: ten packets are overdue.
        let mut now = Nanos::from_millis(10);
        s.handle_input(now, Input::Frame { flow: id }).unwrap();
        let mut starts = Vec::new();
        while starts.len() < 22 {
            match s.poll_transmit(now) {
                Some(t) => starts.push((now, t.len())),
                None => now = s.poll_timeout().unwrap(),
            }
        }
        // No burst: however far behind the flow is, packets leave at most
        // twice as fast as nominal, and it is back on its slots (one per
        // ms) from packet 20 on.
        for w in starts.windows(2) {
            assert!(w[1].0 - w[0].0 >= Nanos::from_micros(500), "{starts:?}");
        }
        assert_eq!(starts[19].0, Nanos::from_micros(19_500));
        assert_eq!(
            (starts[20].0, starts[21].0),
            (Nanos::from_millis(20), Nanos::from_millis(21))
        );
        assert!(s.flow_stats(id).unwrap().late > 0);
        assert!(s.lateness().max() >= 9_000_000);
    }

    #[test]
    fn staggered_stripes_take_turns() {
        // 8 stripes, trains of up to 4 packets: the flows alternate, each
        // k/8 of a train after the first, and never two trains at once.
        let r = rate(50, 1);
        let mut s = Sender::new();
        let burst = Nanos::from_micros(7_500); // 4 slots of 2.5 ms
        let ids: Vec<FlowId> = (0..8)
            .map(|k| {
                s.add_flow(
                    FlowSpec::new(r, 8, Ssrc(k))
                        .trains(burst, 64)
                        .stripe(k as usize, 8),
                )
            })
            .collect();
        assert_eq!(s.max_train(ids[0]), Some(4));
        let (trains, _) = run(&mut s, 32);
        let order: Vec<usize> = trains.iter().map(|(_, t)| t.flow.index()).collect();
        assert_eq!(order, (0..32).map(|k| k % 8).collect::<Vec<_>>());
        for (k, (now, t)) in trains.iter().enumerate() {
            let stripe = (k % 8) as u64;
            let train = (k / 8) as u64;
            // Train j starts at 10 ms × j; stripe k is k/8 of 10 ms later.
            assert_eq!(
                *now,
                Nanos::from_millis(10 * train) + Nanos(10_000_000 * stripe / 8)
            );
            assert_eq!(t.len(), 4);
        }
    }

    #[test]
    fn flows_join_and_leave_at_runtime() {
        let mut s = Sender::new();
        let a = s.add_flow(FlowSpec::new(rate(50, 1), 4, Ssrc(1)));
        let (first, _) = run(&mut s, 3);
        assert!(first.iter().all(|(_, t)| t.flow == a));
        // A second flow of another rate and packet count joins at 12 ms.
        let b = s.add_flow(FlowSpec::new(rate(25, 1), 2, Ssrc(2)).start(Nanos::from_millis(12), 0));
        let mut now = first[2].0;
        let mut seen = Vec::new();
        while seen.len() < 6 {
            feed_all(&mut s, now);
            match s.poll_transmit(now) {
                Some(t) => seen.push((now, t.flow)),
                None => now = s.poll_timeout().unwrap(),
            }
        }
        let at = |ms: u64| Nanos::from_millis(ms);
        assert_eq!(
            seen,
            [
                (at(12), b),
                (at(15), a),
                (at(20), a),
                (at(25), a),
                (at(30), a),
                (at(32), b)
            ]
        );
        // Removing a drops its queued train; b goes on alone; a's slot is
        // reused by c under a new id, and a's old id is refused.
        assert_eq!(s.remove_flow(a).unwrap().packets, 7);
        assert!(s.remove_flow(a).is_none());
        let c = s.add_flow(FlowSpec::new(rate(50, 1), 4, Ssrc(3)).start(at(1000), 0));
        assert_eq!(c.index(), a.index());
        assert_ne!(c, a);
        assert_eq!(
            s.handle_input(now, Input::Frame { flow: a }),
            Err(Error::NoSuchFlow)
        );
        feed_all(&mut s, now);
        assert_eq!(s.poll_transmit(at(51)), None);
        let t = s.poll_transmit(at(52)).unwrap();
        assert_eq!(t.flow, b);
        assert_eq!(s.poll_timeout(), Some(at(72)));
        assert_eq!(s.active_flows(), 2);
    }

    #[test]
    fn an_underrun_gives_up_exactly_one_frame_slot() {
        let r = rate(50, 1);
        let mut s = Sender::new();
        let id = s.add_flow(FlowSpec::new(r, 4, Ssrc(1)).start(Nanos::ZERO, 10));
        let need = |s: &mut Sender| loop {
            match s.poll_event() {
                Some(Event::NeedFrame { frame, at, .. }) => return (frame, at),
                Some(_) => {}
                None => panic!("no frame request"),
            }
        };
        assert_eq!(need(&mut s), (10, Nanos::ZERO));
        s.handle_input(Nanos::ZERO, Input::Underrun { flow: id })
            .unwrap();
        // The next request is the next frame on the same grid.
        assert_eq!(need(&mut s), (11, Nanos::from_millis(20)));
        s.handle_input(Nanos::from_millis(20), Input::Frame { flow: id })
            .unwrap();
        assert_eq!(s.poll_transmit(Nanos::from_millis(19)), None);
        let t = s.poll_transmit(Nanos::from_millis(20)).unwrap();
        assert_eq!(
            (t.frame, t.at, t.timestamp),
            (11, Nanos::from_millis(20), MediaTime(r.rtp_timestamp(11)))
        );
        // Sequence numbers do not skip: nothing was sent for frame 10.
        assert_eq!(t.first_seq, ExtSeq(0));
        let st = s.flow_stats(id).unwrap();
        assert_eq!((st.underruns, st.frames_sent, st.late), (1, 0, 0));
    }

    #[test]
    fn a_frame_in_hand_begun_past_its_epoch_frame_is_let_go_for_the_next_slot() {
        use crate::video::st2110_21::{Model, Scan, SenderType};
        let r = rate(50, 1);
        let model = Model::new(r, 1080, Scan::Progressive, 1000).unwrap();
        let shape = SenderSchedule::with_jitter_margin(&model, SenderType::W);
        let mut s = Sender::new();
        let spec = FlowSpec::new(r, 1000, Ssrc(1))
            .shaped(shape)
            .slip_late_frames(true);
        let id = s.add_flow(spec.clone().start(Nanos::ZERO, 10).frame_limit(Some(2)));
        let Some(Event::NeedFrame { frame: 10, at, .. }) = s.poll_event() else {
            panic!("no request for frame 10");
        };
        s.handle_input(Nanos::ZERO, Input::Frame { flow: id })
            .unwrap();
        // Within its own epoch frame (20 ms), even past the slack, the
        // frame still begins, late: the sender catches up.
        let slack = shape.stall_slack();
        let mut probe = Sender::new();
        let p = probe.add_flow(spec.start(Nanos::ZERO, 10));
        probe
            .handle_input(Nanos::ZERO, Input::Frame { flow: p })
            .unwrap();
        let within = Nanos::from_millis(20) - Nanos(1);
        assert_eq!(probe.poll_transmit(within).map(|t| t.frame), Some(10));
        // Past it (a 25 ms stall: into frame 11's 20 ms, past its first
        // slot but within its slack) the frame in hand is let go, slot 10
        // passed over, and frame 11 asked for; nothing leaves yet.
        let late = Nanos::from_millis(20) + at + slack - Nanos(1);
        assert_eq!(s.poll_transmit(late), None);
        let slipped = Event::Slipped {
            flow: id,
            first: 10,
            count: 1,
        };
        assert_eq!(s.poll_event(), Some(slipped));
        let Some(Event::NeedFrame { frame: 11, .. }) = s.poll_event() else {
            panic!("no request for frame 11");
        };
        s.handle_input(late, Input::Frame { flow: id }).unwrap();
        let t = s.poll_transmit(late).unwrap();
        assert_eq!((t.frame, t.packets.start), (11, 0));
        let stats = s.flow_stats(id).unwrap();
        assert_eq!(
            (stats.slipped, stats.underruns, stats.frames_sent),
            (1, 0, 0)
        );
        // The passed-over slot counts neither as sent nor toward the limit.
        let mut now = late;
        let (mut sent, mut done) = (Vec::new(), false);
        while !done {
            while let Some(e) = s.poll_event() {
                match e {
                    Event::NeedFrame { .. } => {
                        s.handle_input(now, Input::Frame { flow: id }).unwrap()
                    }
                    Event::FrameSent { frame, .. } => sent.push(frame),
                    Event::Finished { .. } => done = true,
                    e => panic!("{e:?}"),
                }
            }
            match s.poll_transmit(now) {
                Some(_) => s.handle_input(now, Input::Departed { flow: id }).unwrap(),
                None => now = s.poll_timeout().unwrap_or(now),
            }
        }
        assert_eq!(sent, vec![11, 12]);
    }

    #[test]
    fn an_unanswered_request_is_an_underrun_at_its_deadline() {
        let r = rate(50, 1);
        let mut s = Sender::new();
        let id = s.add_flow(
            FlowSpec::new(r, 4, Ssrc(1))
                .start(Nanos::from_millis(3), 10)
                .first_seq(ExtSeq(100)),
        );
        let asked = Event::NeedFrame {
            flow: id,
            frame: 10,
            at: Nanos::from_millis(3),
        };
        assert_eq!(s.poll_event(), Some(asked));
        // The request's deadline is the next thing to wake for.
        assert_eq!(s.poll_timeout(), Some(Nanos::from_millis(3)));
        assert_eq!(s.poll_transmit(Nanos(2_999_999)), None);
        assert_eq!(s.poll_event(), None);
        // At the deadline the sender gives the slot up itself, once, and
        // asks for the next frame on the same grid.
        assert_eq!(s.poll_transmit(Nanos::from_millis(3)), None);
        assert_eq!(
            s.poll_event(),
            Some(Event::Underrun {
                flow: id,
                frame: 10
            })
        );
        let next = Event::NeedFrame {
            flow: id,
            frame: 11,
            at: Nanos::from_millis(23),
        };
        assert_eq!(s.poll_event(), Some(next));
        assert_eq!(s.poll_event(), None);
        assert_eq!(s.poll_timeout(), Some(Nanos::from_millis(23)));
        assert_eq!(s.flow_stats(id).unwrap().underruns, 1);
        // Answered before its deadline, frame 11 leaves on its slot with
        // the numbers frame 10 did not use.
        s.handle_input(Nanos::from_millis(10), Input::Frame { flow: id })
            .unwrap();
        assert_eq!(s.poll_timeout(), Some(Nanos::from_millis(23)));
        let t = s.poll_transmit(Nanos::from_millis(23)).unwrap();
        assert_eq!((t.frame, t.first_seq), (11, ExtSeq(100)));
        assert_eq!(s.poll_event(), None);
        assert_eq!(s.flow_stats(id).unwrap().underruns, 1);
    }

    #[test]
    fn ring_frames_behind_the_epoch_are_skipped() {
        // An epoch-aligned flow whose ring holds frames 10 to 14 answers
        // on virtual time; the ring is late by one frame at the start, so
        // frame 10's slot is given up and ring frame 10 is dropped.
        let mut s = Sender::new();
        let id = s.add_flow(FlowSpec::new(rate(50, 1), 1, Ssrc(1)).start(Nanos::ZERO, 10));
        let mut ring: VecDeque<u64> = VecDeque::new();
        let (mut sent, mut dropped, mut underruns) = (Vec::new(), Vec::new(), Vec::new());
        let mut wanted = None;
        let mut now = Nanos::ZERO;
        while sent.len() < 4 {
            if now >= Nanos::from_millis(5) && ring.is_empty() && sent.is_empty() {
                ring.extend(10..15);
            }
            while let Some(e) = s.poll_event() {
                match e {
                    Event::NeedFrame { frame, .. } => wanted = Some(frame),
                    Event::Underrun { frame, .. } => underruns.push(frame),
                    _ => {}
                }
            }
            while let (Some(want), Some(&number)) = (wanted, ring.front()) {
                match RingFrame::of(number, want) {
                    RingFrame::Behind => dropped.extend(ring.pop_front()),
                    RingFrame::Due => {
                        ring.pop_front();
                        wanted = None;
                        s.handle_input(now, Input::Frame { flow: id }).unwrap();
                    }
                    RingFrame::Ahead => break,
                }
            }
            match s.poll_transmit(now) {
                Some(t) => sent.push((now, t.frame)),
                None => now = s.poll_timeout().unwrap(),
            }
        }
        let ms = Nanos::from_millis;
        assert_eq!(underruns, [10]);
        assert_eq!(dropped, [10]);
        assert_eq!(
            sent,
            [(ms(20), 11), (ms(40), 12), (ms(60), 13), (ms(80), 14)]
        );
        assert_eq!(RingFrame::of(15, 14), RingFrame::Ahead);
    }

    #[test]
    fn an_ended_input_finishes_a_waiting_flow() {
        let mut s = Sender::new();
        let id = s.add_flow(FlowSpec::new(rate(50, 1), 2, Ssrc(1)));
        feed_all(&mut s, Nanos::ZERO);
        s.poll_transmit(Nanos::ZERO).unwrap();
        s.poll_transmit(Nanos::from_millis(10)).unwrap();
        assert_eq!(
            s.poll_event(),
            Some(Event::FrameSent { flow: id, frame: 0 })
        );
        assert!(matches!(s.poll_event(), Some(Event::NeedFrame { .. })));
        s.handle_input(Nanos::from_millis(10), Input::End { flow: id })
            .unwrap();
        assert_eq!(s.poll_event(), Some(Event::Finished { flow: id }));
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(s.active_flows(), 0);
        assert_eq!(s.flow_stats(id).unwrap().underruns, 0);
    }

    #[test]
    fn a_frame_limit_finishes_the_flow() {
        let mut s = Sender::new();
        let id = s.add_flow(FlowSpec::new(rate(50, 1), 2, Ssrc(1)).frame_limit(Some(2)));
        let (trains, events) = run(&mut s, 100);
        assert_eq!(trains.len(), 4);
        assert_eq!(
            events[events.len() - 2..],
            [
                Event::FrameSent { flow: id, frame: 1 },
                Event::Finished { flow: id }
            ]
        );
        assert_eq!(s.active_flows(), 0);
        assert_eq!(s.poll_timeout(), None);
        let none = s.add_flow(FlowSpec::new(rate(50, 1), 2, Ssrc(1)).frame_limit(Some(0)));
        assert_eq!(s.poll_event(), Some(Event::Finished { flow: none }));
    }

    #[test]
    fn video_flows_write_rfc4175_headers_for_their_trains() {
        use crate::rtp::RtpPacket;
        let format = VideoFormat::new(32, 4, PixelFormat::Rgb24).unwrap();
        let p = Packetizer::new(format, 100, Ssrc(0xabc)).unwrap().uniform();
        let ppf = p.packets_per_frame();
        let r = rate(30, 1);
        let mut s = Sender::new();
        let id = s.add_flow(
            FlowSpec::video(r, p)
                .first_seq(ExtSeq(0x1_fffe))
                .trains(Nanos::from_secs(1), 64),
        );
        feed_all(&mut s, Nanos::ZERO);
        let t = s.poll_transmit(Nanos::ZERO).unwrap();
        assert_eq!(t.packets, 0..ppf);
        let mut buf = [0u8; 100];
        for k in 0..t.len() {
            let n = s.write_header(&t, k, &mut buf).unwrap();
            // Header, frame bytes and padding make the datagram.
            let p = s.packetizer(id).unwrap();
            let mut datagram = buf[..n].to_vec();
            datagram.resize(n + p.data_range(k).len(), 0);
            datagram.extend_from_slice(p.padding(k));
            assert_eq!(datagram.len(), p.packet_len(k));
            let pk = RtpPacket::new_checked(&datagram[..]).unwrap();
            assert_eq!(pk.ssrc(), 0xabc);
            assert_eq!(pk.marker(), k + 1 == ppf);
            let seq = 0x1_fffe + k as u32;
            assert_eq!(pk.sequence_number(), seq as u16);
            assert_eq!(buf[12..14], ((seq >> 16) as u16).to_be_bytes());
        }
        assert_eq!(
            s.write_header(&t, ppf, &mut buf),
            Err(Error::NoSuchPacket(ppf))
        );
    }
}
