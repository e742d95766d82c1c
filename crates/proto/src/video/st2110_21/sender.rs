//! The send side of the model: when each packet of a frame leaves so that
//! a receiver judging by the same [`Model`] finds the declared sender type.

use super::Error;
use super::model::{ExactNanos, Grid, Model, ReadSchedule, SenderType};
use crate::units::{MediaTime, Nanos};

/// When the packets of a frame leave, for one sender type.
///
/// Packet j of frame N leaves in train ⌊j / train⌋, all of whose packets
/// leave together at the read time of the train's first packet less
/// `lead` read periods: `N · Tframe + TRoffset + (train · ⌊j / train⌋ −
/// lead) · TRS`, rounded down to the nanosecond. The constants come from
/// the same [`Model`] the [`Analyzer`](super::Analyzer) judges by:
///
/// - a train of k packets peaks at Cinst k − 1, so the longest train
///   allowed, [`max_train`](Self::max_train), is CMAX, one packet below
///   the limit to absorb release jitter (and at most VRX_FULL − 2);
/// - released `lead` reads ahead, the virtual receiver holds between
///   `lead` and `lead + train` packets: `lead` centres that window in
///   0..=VRX_FULL, but never exceeds 7/8 of TRoffset, so a frame's first
///   packet never leaves before an eighth of TRoffset into its frame and
///   is always counted in its own epoch frame;
/// - from there the lead grows through the frame ([`lead_at`]): packets
///   leave a little faster than the reads take them, three quarters of the
///   way from TRS to TDRAIN, so the virtual receiver fills towards
///   VRX_FULL and a host stall late in a frame finds more packets in hand
///   than the frame start allows, while the Cinst bucket, which drains
///   faster still, never fills.
///
/// [`lead_at`]: Self::lead_at
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderSchedule {
    model: Model,
    sender: SenderType,
    train: u64,
    /// The model's integer grid, made once: a release is computed for
    /// every train, and making the grid (two gcds of u128s) cost more
    /// than a pacing thread's sends at 2.5 Gbit/s.
    grid: Grid,
    /// The lead's upper bound in read periods (see [`max_lead`]).
    max_lead: u64,
    /// How fast the lead grows through a frame, in 1/[`RAMP_UNIT`]s of a
    /// read per read (see [`ramp`]).
    ramp: u64,
}

/// Packets a W sender with room to lead keeps free below VRX_FULL at its
/// highest level (`lead + train`): for rounding on the read grid and for
/// a receiver's clock a little ahead of the sender's. Nothing else can
/// raise the level: a sender never runs ahead of its schedule, and late
/// or delayed packets only lower it. It was a CMAX (16) before; in 8800-
/// byte packets, whose VRX_FULL_W is 120 at 1080p59.94, that was 430 µs
/// of lead, and the demo's failures were stalls of 2.7–2.8 ms against a
/// lead of 2.6 ms that broke by 1 to 19 packets (2026-11-28, AMD EPYC).
pub const LEAD_MARGIN: u64 = 2;

/// The most lead [`SenderSchedule::with_room_to_lead`] makes room for:
/// longer than most stalls of a shared 2-vCPU virtual machine (Intel Xeon
/// @ 2.50 GHz, Firecracker, 2026-11-27: the 5-second demo runs that broke
/// TROdefault's lead met stalls of 0.9 to 3.4 ms, 4.2 ms in all in one
/// run, and a few of 8 to 15 ms that nothing within VRX_FULL_W
/// survives), and a bound on the latency the offset adds.
pub const MAX_ROOM: Nanos = Nanos(4_000_000);

/// The unit of [`SenderSchedule`]'s lead growth: 1/1024 of a read per read.
const RAMP_UNIT: u64 = 1024;

impl SenderSchedule {
    /// The schedule of `sender` for `model`: single packets for N and NL,
    /// the longest train allowed for W.
    pub fn new(model: &Model, sender: SenderType) -> SenderSchedule {
        let grid = model.grid();
        let mut s = SenderSchedule {
            model: *model,
            sender,
            train: 1,
            grid,
            max_lead: max_lead(grid.tr_offset_in_reads(sender.read_schedule())),
            ramp: ramp(model, sender),
        };
        if sender == SenderType::W {
            s.train = s.max_train();
        }
        s
    }

    /// The schedule a software sender keeps to: trains of half the
    /// longest allowed (at least one packet). A train of k packets peaks
    /// at Cinst k − 1, so the other half is room for a late wake-up: a
    /// train late by up to about half a train's span still finds the
    /// bucket low enough, and for N and NL the lead of (VRX_FULL − train)
    /// / 2 reads keeps that lateness from emptying the virtual receiver.
    /// It also cuts the sends per frame by the train length, which is
    /// what a kernel that wakes a thread in about 10 µs can keep up with.
    pub fn with_jitter_margin(model: &Model, sender: SenderType) -> SenderSchedule {
        let s = SenderSchedule::new(model, sender);
        SenderSchedule {
            train: (s.max_train() / 2).max(1),
            ..s
        }
    }

    /// The schedule of a sender that only sleeps between trains (no
    /// spinning): for W, trains of three quarters of the longest allowed,
    /// so each wake-up carries more packets (the CPU per Gbit falls with
    /// the wake-ups) and a quarter of a train's span (about 90 µs at
    /// 3.2 Gbit/s) is left for a late wake-up, where a quiet machine's
    /// sleeps end tens of µs late. N and NL keep
    /// [`with_jitter_margin`](Self::with_jitter_margin)'s trains.
    pub fn for_sleeping_sender(model: &Model, sender: SenderType) -> SenderSchedule {
        let s = SenderSchedule::with_jitter_margin(model, sender);
        if sender != SenderType::W {
            return s;
        }
        SenderSchedule {
            train: (s.max_train() * 3 / 4).max(1),
            ..s
        }
    }

    /// The same schedule with room to lead: its model's TRoffset raised,
    /// when TROdefault is too short, to the least whole microsecond that
    /// lets a frame's first train leave [`roomy_lead`](Self::roomy_lead)
    /// reads ahead of its first read without leaving before its own epoch
    /// frame (see [`max_lead`]). The raised offset is what the sender
    /// declares (ST 2110-21 § 8.2, `TROFF=` in microseconds); a receiver
    /// that reads the SDP judges by it, and its only cost is that much
    /// more latency.
    ///
    /// Why: with TROdefault (637 µs at 1080p59.94) a frame's first train
    /// can lead by at most 7/8 of it, so a host that stalls the sender
    /// for half a millisecond early in a frame empties a W receiver's
    /// buffer, though VRX_FULL_W holds milliseconds of packets. A longer
    /// TRoffset moves the reads, not the sends, so the lead the type
    /// allows is usable from the first packet on.
    pub fn with_room_to_lead(self) -> Result<SenderSchedule, Error> {
        // N and NL keep TROdefault: VRX_FULL_N is a few packets, and
        // their centred lead already fits in it.
        if self.sender != SenderType::W {
            return Ok(self);
        }
        let wanted = self.roomy_lead();
        if wanted <= self.max_lead {
            return Ok(self);
        }
        // max_lead(r) = r − ⌈r / 8⌉ ≥ wanted for r = wanted + ⌈wanted / 7⌉ + 1.
        let reads = wanted + wanted.div_ceil(7) + 1;
        let trs = self.trs();
        let ns = (trs.num() * u128::from(reads)).div_ceil(trs.den().max(1));
        let micros = u64::try_from(ns.div_ceil(1000)).unwrap_or(u64::MAX / 1000);
        let model = self.model.with_tr_offset(Nanos(micros * 1000))?;
        Ok(SenderSchedule {
            train: self.train,
            ..SenderSchedule::new(&model, self.sender)
        })
    }

    /// The TRoffset the sender must declare (`TROFF=`): the model's, when
    /// it is not TROdefault.
    pub fn declared_tr_offset(&self) -> Option<Nanos> {
        self.model.signalled_tr_offset()
    }

    /// The same schedule with trains of `train` packets (1..=max_train).
    pub fn with_train(self, train: u64) -> Result<SenderSchedule, Error> {
        let max = self.max_train();
        if train == 0 || train > max {
            return Err(Error::Train { train, max });
        }
        Ok(SenderSchedule { train, ..self })
    }

    /// The model the schedule follows.
    pub const fn model(&self) -> &Model {
        &self.model
    }

    /// The sender type the schedule keeps to (and the SDP declares).
    pub const fn sender(&self) -> SenderType {
        self.sender
    }

    /// Gapped (N, W) or linear (NL).
    pub const fn read_schedule(&self) -> ReadSchedule {
        self.sender.read_schedule()
    }

    /// TRS of the read schedule: the mean spacing of packets.
    pub fn trs(&self) -> ExactNanos {
        self.model.trs(self.read_schedule())
    }

    /// TRoffset: from the frame's epoch start to its first read.
    pub fn tr_offset(&self) -> ExactNanos {
        self.model.tr_offset()
    }

    /// CMAX of the sender type.
    pub fn cmax(&self) -> u64 {
        self.model.limits().cmax(self.sender)
    }

    /// VRX_FULL of the sender type.
    pub fn vrx_full(&self) -> u64 {
        self.model.limits().vrx_full(self.sender)
    }

    /// Packets released together.
    pub const fn train(&self) -> u64 {
        self.train
    }

    /// The longest train the sender type allows with a packet of margin:
    /// min(CMAX, VRX_FULL − 2), at least 1, and never more than a frame.
    pub fn max_train(&self) -> u64 {
        let frame = u64::from(self.model.packets());
        self.cmax()
            .min(self.vrx_full().saturating_sub(2))
            .min(frame)
            .max(1)
    }

    /// Read periods by which a frame's first train leaves ahead of its
    /// first read: centred in the virtual receiver, (VRX_FULL − train) /
    /// 2, for a sender at TROdefault; for one that declares its own
    /// TRoffset (room to lead), [`roomy_lead`](Self::roomy_lead). Never
    /// more than the offset allows ([`max_lead`]).
    pub fn lead(&self) -> u64 {
        let wanted = if self.declared_tr_offset().is_some() {
            self.roomy_lead()
        } else {
            self.vrx_full().saturating_sub(self.train) / 2
        };
        wanted.min(self.max_lead)
    }

    /// The lead a sender with room to lead keeps from a frame's first
    /// train on: as much as the virtual receiver holds with
    /// [`LEAD_MARGIN`] to spare, VRX_FULL − train − LEAD_MARGIN (the
    /// level [`lead_cap`](Self::lead_cap) lets the lead grow to later in
    /// a frame), so a stall of up to that many reads anywhere in a frame
    /// is held. Only lateness eats into it: a sender never runs ahead of
    /// its schedule, so the early side needs only the margin, and a
    /// receiver on the same PTP time reads where the model does. Capped at half a
    /// frame and at [`MAX_ROOM`]: a raster of few packets a frame has a
    /// VRX_FULL_W longer than the frame, a slow one a VRX_FULL_W of many
    /// milliseconds, and each read of lead is latency.
    pub fn roomy_lead(&self) -> u64 {
        let half_frame = u64::from(self.model.packets()) / 2;
        let trs = self.trs();
        let most = u64::try_from(u128::from(MAX_ROOM.0) * trs.den() / trs.num().max(1))
            .unwrap_or(u64::MAX);
        self.vrx_full()
            .saturating_sub(self.train)
            .saturating_sub(LEAD_MARGIN)
            .max(1)
            .min(half_frame)
            .min(most)
    }

    /// The most read periods a train may lead by: the virtual receiver then
    /// holds up to `lead + train` packets, [`LEAD_MARGIN`] below
    /// VRX_FULL for a sender with room to lead (its declared TRoffset),
    /// a CMAX below it for one at TROdefault (N and NL, whose VRX_FULL is
    /// a few packets, keep their centred lead). Never below
    /// [`lead`](Self::lead).
    pub fn lead_cap(&self) -> u64 {
        let spare = if self.declared_tr_offset().is_some() {
            LEAD_MARGIN
        } else {
            self.cmax()
        };
        let room = self
            .vrx_full()
            .saturating_sub(self.train)
            .saturating_sub(spare);
        room.max(self.lead())
    }

    /// Read periods by which the train holding packet `packet` leaves
    /// ahead of its first read: [`lead`](Self::lead) at the frame start,
    /// growing by the schedule's ramp each read up to
    /// [`lead_cap`](Self::lead_cap).
    pub fn lead_at(&self, packet: u32) -> u64 {
        self.lead_units(packet) / RAMP_UNIT
    }

    /// [`lead_at`](Self::lead_at) in 1/[`RAMP_UNIT`]s of a read, unrounded:
    /// a lead rounded to whole reads would move some trains a whole read
    /// closer to the last and let the Cinst bucket gain a packet.
    fn lead_units(&self, packet: u32) -> u64 {
        let first_of_train = u64::from(packet) / self.train * self.train;
        let grown = self.lead() * RAMP_UNIT + first_of_train * self.ramp;
        grown.min(self.lead_cap() * RAMP_UNIT)
    }

    /// How late a train may leave without emptying the virtual receiver,
    /// at worst: the frame start's lead, in time (`lead` read periods of
    /// TRS). Later in a frame the slack is larger
    /// ([`stall_slack_at`](Self::stall_slack_at)).
    pub fn stall_slack(&self) -> Nanos {
        self.reads_as_time(self.lead())
    }

    /// How late the train holding packet `packet` may leave without
    /// emptying the virtual receiver.
    pub fn stall_slack_at(&self, packet: u32) -> Nanos {
        self.reads_as_time(self.lead_at(packet))
    }

    fn reads_as_time(&self, reads: u64) -> Nanos {
        let trs = self.trs();
        let ns = trs.num() * u128::from(reads) / trs.den().max(1);
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The tightest sender type whose software schedule
    /// ([`software`](Self::software)) has more slack
    /// than `wake_latency`, the host's worst usual wake-up delay, for
    /// `model`; `None` when even W has less.
    pub fn tightest_holdable(model: &Model, wake_latency: Nanos) -> Option<SenderType> {
        [SenderType::N, SenderType::NL, SenderType::W]
            .into_iter()
            .find(|&t| SenderSchedule::software(model, t).stall_slack() > wake_latency)
    }

    /// The schedule `nagare send` keeps by default: the jitter margin's
    /// trains ([`with_jitter_margin`](Self::with_jitter_margin)) with room
    /// to lead ([`with_room_to_lead`](Self::with_room_to_lead)), or
    /// without it where the model cannot take the longer offset.
    pub fn software(model: &Model, sender: SenderType) -> SenderSchedule {
        let s = SenderSchedule::with_jitter_margin(model, sender);
        s.with_room_to_lead().unwrap_or(s)
    }

    /// When packet `packet` (0-based) of epoch frame `frame` leaves.
    pub fn release(&self, frame: u64, packet: u32) -> Nanos {
        let first_of_train = u64::from(packet) / self.train * self.train;
        let slot = i128::from(first_of_train * RAMP_UNIT) - i128::from(self.lead_units(packet));
        self.grid()
            .read_time_frac(self.read_schedule(), frame, slot, RAMP_UNIT)
    }

    /// The RTP timestamp of epoch frame `frame` (ST 2110-10).
    pub fn rtp_timestamp(&self, frame: u64) -> MediaTime {
        MediaTime(self.model.rate().rtp_timestamp(frame))
    }

    /// The first epoch frame whose first packet leaves at or after `now`:
    /// the next frame a sender starting at `now` can send on time.
    pub fn next_frame(&self, now: Nanos) -> u64 {
        let n = self.model.epoch_frame(now);
        if self.release(n, 0) >= now {
            n
        } else {
            n.saturating_add(1)
        }
    }

    fn grid(&self) -> Grid {
        self.grid
    }
}

/// How fast a schedule's lead grows through a frame, in 1/[`RAMP_UNIT`]s
/// of a read per read: three quarters of the room between the read period
/// and the Cinst drain period (packets spaced `TRS × (1 − ramp)` apart stay
/// slower than the drain, so the bucket never fills), rounded down. At
/// 1080p59.94 gapped reads that is 40/1024: the lead grows by about 140
/// reads (600 µs) over a frame. A type whose VRX_FULL leaves no room
/// above its lead ([`SenderSchedule::lead_cap`]) never grows.
fn ramp(model: &Model, sender: SenderType) -> u64 {
    let trs = model.trs(sender.read_schedule()).as_f64();
    let drain = model.drain_period().as_f64();
    if !(trs > 0.0 && drain < trs) {
        return 0;
    }
    let room = 1.0 - drain / trs;
    (room * 0.75 * RAMP_UNIT as f64).floor() as u64
}

/// How far ahead of the reads a frame's first train may leave: 7/8 of
/// TRoffset (in read periods), so it leaves an eighth of TRoffset after
/// the frame's epoch start and is always counted in its own frame, while
/// the lead a stall can eat into is as long as the frame start allows
/// (about 560 µs at 1080p59.94, where half of TRoffset gave 318 µs).
fn max_lead(tr_offset_reads: u64) -> u64 {
    tr_offset_reads - tr_offset_reads.div_ceil(8)
}

/// The sender's own copy of a receiver's Cinst bucket (the network
/// compatibility model): it drains on the model's TDRAIN grid from the
/// first packet, exactly as [`Analyzer`](super::Analyzer) measures, and
/// says when a train may leave so that no packet of it finds more than
/// `limit` packets ahead of it.
///
/// A late sender catches up by releasing trains as soon as the bucket
/// lets it: as fast as the standard allows (trains up to CMAX, then the
/// drain rate, 1.1 × the mean packet rate), and never faster, so a stall
/// costs lateness but never a burst over CMAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CinstGate {
    grid: Grid,
    limit: u64,
    /// Drain grid origin: the first packet's release.
    origin: Option<Nanos>,
    /// Drains counted up to `last`.
    drained: u128,
    /// Cinst of the last packet released.
    level: u64,
    last: Nanos,
    /// The state before the last train and its length, to move that
    /// train to when it really left ([`departed`](Self::departed)).
    before: Option<(Option<Nanos>, u128, u64, Nanos, u64)>,
}

impl CinstGate {
    /// A gate keeping every packet's Cinst at or below `limit` for `model`.
    pub fn new(model: &Model, limit: u64) -> CinstGate {
        CinstGate {
            grid: model.grid(),
            limit,
            origin: None,
            drained: 0,
            level: 0,
            last: Nanos::ZERO,
            before: None,
        }
    }

    /// The gate of `schedule`: one packet below its type's CMAX, room for
    /// the release jitter of a software sender.
    pub fn for_schedule(schedule: &SenderSchedule) -> CinstGate {
        CinstGate::new(schedule.model(), schedule.cmax().saturating_sub(1).max(1))
    }

    /// Drains since the last release, were the next packet to arrive at
    /// `at` (not before the last release).
    fn drains_by(&self, origin: Nanos, at: Nanos) -> u128 {
        self.grid
            .drains(at.saturating_sub(origin))
            .saturating_sub(self.drained)
    }

    /// The earliest time a train of `n` packets may leave (`Nanos::ZERO`
    /// when the bucket never held a packet).
    pub fn earliest(&self, n: u64) -> Nanos {
        let Some(origin) = self.origin else {
            return Nanos::ZERO;
        };
        // The train's first packet finds (level + 1 − drains) packets, its
        // last n − 1 more: drains must reach level + n − limit.
        let need = (self.level + n).saturating_sub(self.limit);
        if need == 0 {
            return self.last;
        }
        let at = origin + self.grid.drain_time(self.drained + u128::from(need));
        at.max(self.last)
    }

    /// Records a train of `n` packets released at `now`; returns the Cinst
    /// of its last packet.
    pub fn sent(&mut self, now: Nanos, n: u64) -> u64 {
        if n == 0 {
            return self.level;
        }
        let now = now.max(self.last);
        self.before = Some((self.origin, self.drained, self.level, self.last, n));
        let first = match self.origin {
            None => {
                self.origin = Some(now);
                0
            }
            Some(origin) => {
                let since = u64::try_from(self.drains_by(origin, now)).unwrap_or(u64::MAX);
                self.drained = self.grid.drains(now.saturating_sub(origin));
                (self.level + 1).saturating_sub(since)
            }
        };
        self.level = first + n - 1;
        self.last = now;
        self.level
    }

    /// The last train really left at `at` (when its send call returned),
    /// later than it was released: the bucket counts it from then, as a
    /// receiver stamping it on arrival would. A send call that took long
    /// followed by a quick one then cannot squeeze two trains closer than
    /// the bucket allows.
    pub fn departed(&mut self, at: Nanos) {
        let Some((origin, drained, level, last, n)) = self.before else {
            return;
        };
        if at <= self.last {
            return;
        }
        (self.origin, self.drained, self.level, self.last) = (origin, drained, level, last);
        self.sent(at, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::FrameRate;
    use crate::video::st2110_21::Scan;

    fn p5994() -> Model {
        let rate = FrameRate::new(60000, 1001).unwrap();
        Model::new(rate, 1080, Scan::Progressive, 4320).unwrap()
    }

    #[test]
    fn sdp_names_round_trip() {
        for t in SenderType::ALL {
            assert_eq!(SenderType::from_sdp(t.sdp_value()), Some(t));
        }
        assert_eq!(SenderType::from_sdp("2110TPX"), None);
        assert_eq!(SenderType::NL.to_string(), "NL");
    }

    #[test]
    fn parameters_per_type_at_1080p5994() {
        let m = p5994();
        let n = SenderSchedule::new(&m, SenderType::N);
        assert_eq!(n.read_schedule(), ReadSchedule::Gapped);
        assert_eq!((n.train(), n.max_train(), n.lead()), (1, 6, 4));
        assert_eq!(n.trs(), m.trs(ReadSchedule::Gapped));
        let nl = SenderSchedule::new(&m, SenderType::NL);
        assert_eq!(nl.read_schedule(), ReadSchedule::Linear);
        assert_eq!((nl.train(), nl.max_train(), nl.lead()), (1, 5, 4));
        let w = SenderSchedule::new(&m, SenderType::W);
        // TRoffset is 172 gapped reads: the lead stops at 7/8 of it, 150.
        assert_eq!((w.train(), w.max_train(), w.lead()), (16, 16, 150));
        assert_eq!(w.cmax(), 16);
        assert_eq!(w.vrx_full(), 863);
    }

    #[test]
    fn software_senders_keep_half_the_longest_train() {
        let m = p5994();
        let n = SenderSchedule::with_jitter_margin(&m, SenderType::N);
        // CMAX_N 6, VRX_FULL_N 9: trains of 3, three reads ahead.
        assert_eq!((n.train(), n.lead()), (3, 3));
        let nl = SenderSchedule::with_jitter_margin(&m, SenderType::NL);
        assert_eq!((nl.train(), nl.lead()), (2, 3));
        let w = SenderSchedule::with_jitter_margin(&m, SenderType::W);
        assert_eq!((w.train(), w.lead()), (8, 150));
        let sleeping = SenderSchedule::for_sleeping_sender(&m, SenderType::W);
        assert_eq!((sleeping.max_train(), sleeping.train()), (16, 12));
        let n = SenderSchedule::for_sleeping_sender(&m, SenderType::N);
        assert_eq!(n.train(), 3);
        let tiny = Model::new(FrameRate::new(25, 1).unwrap(), 48, Scan::Progressive, 3).unwrap();
        let n = SenderSchedule::with_jitter_margin(&tiny, SenderType::N);
        assert_eq!((n.max_train(), n.train()), (3, 1));
        let one = Model::new(FrameRate::new(25, 1).unwrap(), 48, Scan::Progressive, 1).unwrap();
        let w = SenderSchedule::new(&one, SenderType::W);
        assert_eq!((w.max_train(), w.train()), (1, 1));
    }

    #[test]
    fn the_tightest_type_a_host_holds_follows_each_types_slack() {
        let m = p5994();
        let slack = |t| SenderSchedule::software(&m, t).stall_slack();
        // N: 3 reads ahead, 11 µs; NL: 3 linear reads, 11.6 µs; W: 853
        // reads (VRX_FULL_W 863 − train 8 − LEAD_MARGIN 2) from its
        // declared TRoffset, 3.16 ms (150, 557 µs, from TROdefault).
        assert_eq!(slack(SenderType::N), Nanos(11_122));
        assert_eq!(slack(SenderType::W), Nanos(3_162_418));
        let plain = SenderSchedule::with_jitter_margin(&m, SenderType::W);
        assert_eq!(plain.stall_slack(), Nanos(556_111));
        let holds = |us| SenderSchedule::tightest_holdable(&m, Nanos::from_micros(us));
        assert_eq!(holds(5), Some(SenderType::N));
        assert_eq!(holds(11), Some(SenderType::N));
        assert_eq!(holds(12), Some(SenderType::W));
        assert_eq!(holds(3_162), Some(SenderType::W));
        assert_eq!(holds(3_163), None);
    }

    #[test]
    fn releases_follow_the_read_schedule() {
        let n = SenderSchedule::new(&p5994(), SenderType::N);
        // Frame 3: TPR0 = 50 687 674.07 ns; four reads (14 829.6 ns) ahead.
        assert_eq!(n.release(3, 4), Nanos(50_687_674));
        assert_eq!(n.release(3, 0), Nanos(50_672_844));
        assert_eq!(n.release(3, 31), Nanos(50_687_674 + 100_100));
        assert_eq!(n.rtp_timestamp(3), MediaTime(4504));
        let w = n.with_train(6).unwrap();
        assert_eq!(w.release(3, 6), w.release(3, 11));
        assert!(w.release(3, 12) > w.release(3, 11));
        assert_eq!(n.with_train(7), Err(Error::Train { train: 7, max: 6 }));
        assert_eq!(n.with_train(0), Err(Error::Train { train: 0, max: 6 }));
    }

    #[test]
    fn next_frame_is_the_first_still_on_time() {
        let n = SenderSchedule::new(&p5994(), SenderType::N);
        let first = n.release(10, 0);
        assert_eq!(n.next_frame(first), 10);
        assert_eq!(n.next_frame(first + Nanos(1)), 11);
        assert_eq!(n.next_frame(Nanos::ZERO), 0);
        let last = n.model().epoch_frame(Nanos::MAX);
        assert!(n.next_frame(Nanos::MAX) >= last);
    }
}
