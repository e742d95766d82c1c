//! The receive side of the model: packet observations in, per-frame
//! reports and a running verdict out.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::model::{FrameOrigin, Grid, Limits, Model, ReadSchedule, SenderType};
use crate::stats::{Arrival, Distribution, SequenceTracker};
use crate::units::{ByteSize, ExtSeq, MediaTime, Nanos};

/// Frame reports kept for [`Analyzer::poll_event`]; past this the oldest
/// is dropped (and counted), so a caller that never polls cannot make the
/// analyser grow.
pub const MAX_QUEUED_REPORTS: usize = 256;

/// One packet as the receiver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// When it arrived, in nanoseconds since the ST 2110-10 epoch (PTP or
    /// TAI time): FPT, the RTP offset, latency and the virtual receiver's
    /// read times are measured against frame boundaries on that epoch.
    pub arrival: Nanos,
    /// Its RTP timestamp.
    pub rtp_timestamp: MediaTime,
    /// Its RTP marker bit (last packet of a frame).
    pub marker: bool,
    /// Its extended sequence number.
    pub seq: ExtSeq,
    /// Its length (counted into the byte totals only).
    pub len: ByteSize,
}

/// The lowest and highest VRX seen at packet arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VrxRange {
    /// Lowest; below zero means a read found the buffer empty.
    pub min: i64,
    /// Highest.
    pub peak: i64,
}

impl VrxRange {
    fn of(v: i64) -> VrxRange {
        VrxRange { min: v, peak: v }
    }

    fn include(&mut self, other: VrxRange) {
        self.min = self.min.min(other.min);
        self.peak = self.peak.max(other.peak);
    }
}

/// What a stream (or a frame) complies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compliance {
    /// Narrow gapped sender (type N).
    Narrow,
    /// Narrow linear sender (type NL).
    NarrowLinear,
    /// Wide sender (type W).
    Wide,
    /// None of them.
    NotCompliant,
}

impl Compliance {
    /// 0 for narrow, 1 for wide, 2 for not compliant.
    const fn rank(self) -> u8 {
        match self {
            Compliance::Narrow | Compliance::NarrowLinear => 0,
            Compliance::Wide => 1,
            Compliance::NotCompliant => 2,
        }
    }

    fn worse(self, other: Compliance) -> Compliance {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    /// Short name: `N`, `NL`, `W`, `not compliant`.
    pub const fn name(self) -> &'static str {
        match self {
            Compliance::Narrow => "N",
            Compliance::NarrowLinear => "NL",
            Compliance::Wide => "W",
            Compliance::NotCompliant => "not compliant",
        }
    }
}

impl fmt::Display for Compliance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A judgement with its evidence: the class, the read schedule the VRX
/// figures are measured against, the peaks and the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Verdict {
    /// The narrowest type the figures allow.
    pub compliance: Compliance,
    /// The virtual receiver the verdict holds for.
    pub schedule: ReadSchedule,
    /// Highest Cinst.
    pub cinst_peak: u64,
    /// VRX under `schedule`.
    pub vrx: VrxRange,
    /// The limits judged against.
    pub limits: Limits,
}

impl Verdict {
    /// Judges a Cinst peak and the VRX ranges of both virtual receivers:
    /// under each schedule the class is the worse of what Cinst and VRX
    /// allow (as LIST combines them); the better schedule wins, and on a
    /// tie the one that breaks fewer VRX limits (an underflow, a peak over
    /// VRX_FULL_W), then the one with less underflow, then the lower VRX
    /// peak. Why the count first: a stalled wide sender underflows both
    /// readings, and the linear one (which reads more slowly) also
    /// overflows; explained by it, the verdict named an overflow the
    /// sender never caused.
    pub fn judge(limits: Limits, cinst_peak: u64, gapped: VrxRange, linear: VrxRange) -> Verdict {
        let at = |schedule, vrx| {
            let compliance = classify(&limits, schedule, cinst_peak, vrx);
            Verdict {
                compliance,
                schedule,
                cinst_peak,
                vrx,
                limits,
            }
        };
        let (g, l) = (
            at(ReadSchedule::Gapped, gapped),
            at(ReadSchedule::Linear, linear),
        );
        let full_w = i64::try_from(limits.vrx_full_w).unwrap_or(i64::MAX);
        let key = |v: &Verdict| {
            let breaches = u8::from(v.vrx.min < 0) + u8::from(v.vrx.peak > full_w);
            (
                v.compliance.rank(),
                breaches,
                v.vrx.min.min(0).unsigned_abs(),
                v.vrx.peak,
            )
        };
        if key(&l) < key(&g) { l } else { g }
    }

    /// CMAX of the narrow type of this verdict's schedule, with its name.
    fn narrow_cmax(&self) -> (&'static str, u64) {
        match self.schedule {
            ReadSchedule::Gapped => ("CMAX_N", self.limits.cmax_n),
            ReadSchedule::Linear => ("CMAX_NL", self.limits.cmax_nl),
        }
    }

    fn fmt_cinst(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, narrow) = self.narrow_cmax();
        let (peak, wide) = (self.cinst_peak, self.limits.cmax_w);
        if peak <= narrow {
            write!(f, "Cinst peak {peak} within {name} {narrow}")
        } else if peak <= wide {
            write!(
                f,
                "Cinst peak {peak} > {name} {narrow}; within CMAX_W {wide}"
            )
        } else {
            write!(f, "Cinst peak {peak} > CMAX_W {wide} by {}", peak - wide)
        }
    }

    fn fmt_vrx(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let VrxRange { min, peak } = self.vrx;
        let narrow = i64::try_from(self.limits.vrx_full_n).unwrap_or(i64::MAX);
        let wide = i64::try_from(self.limits.vrx_full_w).unwrap_or(i64::MAX);
        if min < 0 {
            write!(f, "VRX min {min} < 0: buffer underflow")?;
            if peak <= narrow {
                return Ok(());
            }
            f.write_str("; ")?;
        } else if peak <= narrow {
            return write!(f, "VRX {min}..{peak} within VRX_FULL_N {narrow}");
        }
        if peak <= wide {
            write!(
                f,
                "VRX peak {peak} > VRX_FULL_N {narrow}; within VRX_FULL_W {wide}"
            )
        } else {
            let over = peak.saturating_sub(wide);
            write!(f, "VRX peak {peak} > VRX_FULL_W {wide} by {over}")
        }
    }
}

fn classify(limits: &Limits, schedule: ReadSchedule, cinst: u64, vrx: VrxRange) -> Compliance {
    let (narrow, cmax) = match schedule {
        ReadSchedule::Gapped => (Compliance::Narrow, limits.cmax_n),
        ReadSchedule::Linear => (Compliance::NarrowLinear, limits.cmax_nl),
    };
    let by_cinst = if cinst <= cmax {
        narrow
    } else if cinst <= limits.cmax_w {
        Compliance::Wide
    } else {
        Compliance::NotCompliant
    };
    let fits = |full: u64| vrx.peak <= i64::try_from(full).unwrap_or(i64::MAX);
    let by_vrx = if vrx.min < 0 {
        Compliance::NotCompliant
    } else if fits(limits.vrx_full_n) {
        narrow
    } else if fits(limits.vrx_full_w) {
        Compliance::Wide
    } else {
        Compliance::NotCompliant
    };
    by_cinst.worse(by_vrx)
}

impl fmt::Display for Verdict {
    /// `W (gapped): Cinst peak 14 > CMAX_N 6; within CMAX_W 16; VRX 3..9
    /// within VRX_FULL_N 9`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): ", self.compliance, self.schedule)?;
        self.fmt_cinst(f)?;
        f.write_str("; ")?;
        self.fmt_vrx(f)
    }
}

/// The analysis of one frame, yielded once it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameReport {
    /// Its place among the frames judged, from 0: the first frame after
    /// the first boundary is frame 0.
    #[serde(default)]
    pub index: u64,
    /// The frame's RTP timestamp.
    pub rtp_timestamp: MediaTime,
    /// N = ⌊TPA0 / Tframe⌋, the epoch frame its first packet arrived in.
    pub epoch_frame: u64,
    /// TPA0: arrival of its first packet.
    pub first_arrival: Nanos,
    /// Packets received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: ByteSize,
    /// Ended by a packet with the marker bit (not by a new timestamp or
    /// [`Analyzer::flush`]).
    pub complete: bool,
    /// Highest Cinst of its packets.
    pub cinst_peak: u64,
    /// VRX under the gapped read schedule.
    pub vrx_gapped: VrxRange,
    /// VRX under the linear read schedule.
    pub vrx_linear: VrxRange,
    /// FPT: TPA0 − N · Tframe (LIST's measured TRoffset).
    pub fpt: Nanos,
    /// TPR0 − TPA0 in nanoseconds: how long before its first read the
    /// first packet arrived (LIST's "delta to ideal TPR0"; negative when
    /// after it).
    pub to_tpr0: i64,
    /// RTP timestamp − ⌊N · Tframe · 90000⌋, in 90 kHz ticks.
    pub rtp_offset: i32,
    /// TPA0 − the instant the RTP timestamp stands for, in nanoseconds.
    pub latency: i64,
    /// RTP timestamp − the previous frame's, in ticks.
    pub rtp_delta: Option<i32>,
    /// Packets skipped by sequence number jumps into or inside it.
    pub lost: u64,
    /// Sequence numbers out of order: jumps, late packets, duplicates.
    pub seq_errors: u64,
    /// The frame on its own.
    pub verdict: Verdict,
}

impl FrameReport {
    /// Whether this frame on its own keeps to `sender`'s limits (the rule
    /// of [`Summary::complies_with`]).
    pub fn keeps(&self, limits: &Limits, sender: SenderType) -> bool {
        keeps(
            limits,
            sender,
            self.cinst_peak,
            self.vrx_gapped,
            self.vrx_linear,
        )
    }
}

/// Whether a Cinst peak and the VRX ranges of both virtual receivers keep
/// to `sender`'s limits under that type's read schedule (W under either):
/// what a receiver checks against the SDP's `TP=`.
pub(crate) fn keeps(
    limits: &Limits,
    sender: SenderType,
    cinst: u64,
    gapped: VrxRange,
    linear: VrxRange,
) -> bool {
    let within =
        |v: VrxRange, full: u64| v.min >= 0 && v.peak <= i64::try_from(full).unwrap_or(i64::MAX);
    let l = limits;
    match sender {
        SenderType::N => cinst <= l.cmax_n && within(gapped, l.vrx_full_n),
        SenderType::NL => cinst <= l.cmax_nl && within(linear, l.vrx_full_n),
        SenderType::W => {
            cinst <= l.cmax_w && (within(gapped, l.vrx_full_w) || within(linear, l.vrx_full_w))
        }
    }
}

/// Frames counted by the types they keep to: a frame that keeps N (or
/// NL) also counts for W when it fits W's limits, so the three do not add
/// up to the frames judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptCounts {
    /// Frames within the narrow gapped (N) limits.
    pub n: u64,
    /// Frames within the narrow linear (NL) limits.
    pub nl: u64,
    /// Frames within the wide (W) limits.
    pub w: u64,
}

impl KeptCounts {
    /// The count of `sender`.
    pub const fn of(&self, sender: SenderType) -> u64 {
        match sender {
            SenderType::N => self.n,
            SenderType::NL => self.nl,
            SenderType::W => self.w,
        }
    }

    fn add(&mut self, limits: &Limits, r: &FrameReport) {
        self.n += u64::from(r.keeps(limits, SenderType::N));
        self.nl += u64::from(r.keeps(limits, SenderType::NL));
        self.w += u64::from(r.keeps(limits, SenderType::W));
    }
}

/// Whether the RTP timestamps count from the ST 2110-10 epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtpClock {
    /// On the epoch: a frame's RTP time is within [`EPOCH_TOLERANCE`] of
    /// its arrival, so FPT and latency mean what ST 2110-21 says.
    OnEpoch,
    /// Not on the epoch (a sender that stamps from a random base or its
    /// own clock, as RFC 3550 allows and GStreamer and FFmpeg do): the
    /// mean distance of the RTP time from arrival, in seconds.
    OffEpoch {
        /// Mean arrival − RTP time over the frames, seconds.
        offset_s: f64,
    },
}

/// How far a frame's RTP time may lie from its arrival and still count as
/// on the epoch: a second, far beyond any network's latency and far
/// below the hours a random 32-bit timestamp base lands from it.
pub const EPOCH_TOLERANCE: Nanos = Nanos::from_secs(1);

/// Running extremes and mean of a signed quantity (no percentiles: those
/// are [`Distribution`]'s alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spread {
    count: u64,
    min: i64,
    max: i64,
    sum: i128,
}

impl Spread {
    /// Records one value.
    pub fn record(&mut self, v: i64) {
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        }
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum = self.sum.saturating_add(i128::from(v));
    }

    /// Values recorded.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    /// Arithmetic mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// VRX of one virtual receiver over the stream.
#[derive(Debug, Clone, Default)]
pub struct VrxStats {
    /// Lowest and highest, once a frame has begun.
    pub range: Option<VrxRange>,
    /// Every packet's VRX (underflows recorded as 0).
    pub values: Distribution,
    /// Packets at which VRX was below zero.
    pub underflows: u64,
}

impl VrxStats {
    fn record(&mut self, v: i64) {
        let r = VrxRange::of(v);
        self.range.get_or_insert(r).include(r);
        self.values.record_signed(v);
        self.underflows += u64::from(v < 0);
    }
}

/// Frames counted by their own verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComplianceCounts {
    /// Narrow gapped.
    pub n: u64,
    /// Narrow linear.
    pub nl: u64,
    /// Wide.
    pub w: u64,
    /// Not compliant.
    pub not_compliant: u64,
}

impl ComplianceCounts {
    fn add(&mut self, c: Compliance) {
        let slot = match c {
            Compliance::Narrow => &mut self.n,
            Compliance::NarrowLinear => &mut self.nl,
            Compliance::Wide => &mut self.w,
            Compliance::NotCompliant => &mut self.not_compliant,
        };
        *slot += 1;
    }
}

/// Everything seen so far. Memory is fixed: histograms are
/// [`Distribution`]s, signed quantities [`Spread`]s.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The limits judged against.
    pub limits: Limits,
    /// Frames reported.
    pub frames: u64,
    /// Of those, ended without a marker bit.
    pub incomplete_frames: u64,
    /// Packets observed (before the first frame boundary too).
    pub packets: u64,
    /// Bytes observed.
    pub bytes: ByteSize,
    /// Packets missing from the sequence (a late arrival takes its loss
    /// back, RFC 3550 A.3).
    pub lost: u64,
    /// Sequence numbers out of order.
    pub seq_errors: u64,
    /// Arrivals earlier than the one before, analysed as simultaneous.
    pub backwards: u64,
    /// Frame reports dropped because nobody polled them.
    pub reports_dropped: u64,
    /// Every packet's Cinst (LIST's Cinst histogram).
    pub cinst: Distribution,
    /// The gapped virtual receiver.
    pub vrx_gapped: VrxStats,
    /// The linear virtual receiver.
    pub vrx_linear: VrxStats,
    /// FPT per frame, in nanoseconds.
    pub fpt: Distribution,
    /// Latency per frame, in nanoseconds.
    pub latency: Spread,
    /// RTP offset per frame, in ticks.
    pub rtp_offset: Spread,
    /// Inter-frame RTP timestamp delta, in ticks.
    pub rtp_delta: Spread,
    /// Frames by their own verdict.
    pub frame_verdicts: ComplianceCounts,
    /// Frames by the types they keep to.
    pub kept: KeptCounts,
}

impl Summary {
    fn new(limits: Limits) -> Summary {
        Summary {
            limits,
            frames: 0,
            incomplete_frames: 0,
            packets: 0,
            bytes: ByteSize(0),
            lost: 0,
            seq_errors: 0,
            backwards: 0,
            reports_dropped: 0,
            cinst: Distribution::new(),
            vrx_gapped: VrxStats::default(),
            vrx_linear: VrxStats::default(),
            fpt: Distribution::new(),
            latency: Spread::default(),
            rtp_offset: Spread::default(),
            rtp_delta: Spread::default(),
            frame_verdicts: ComplianceCounts::default(),
            kept: KeptCounts::default(),
        }
    }

    /// Whether the stream's RTP timestamps count from the epoch, judged by
    /// the mean latency once a frame was judged.
    pub fn rtp_clock(&self) -> Option<RtpClock> {
        if self.latency.count() == 0 {
            return None;
        }
        let mean = self.latency.mean();
        let tolerance = EPOCH_TOLERANCE.0 as f64;
        Some(if mean.abs() <= tolerance {
            RtpClock::OnEpoch
        } else {
            RtpClock::OffEpoch {
                offset_s: mean / 1e9,
            }
        })
    }

    /// Each frame's lag behind the sender's own frame grid, in
    /// nanoseconds: its latency less the smallest latency of the run, so
    /// the earliest frame (relative to its RTP time) lags 0. It needs no
    /// epoch: a sender off the epoch is measured against its own
    /// timestamps. `(min, mean, max)`, min always 0.
    pub fn grid_lag(&self) -> Option<(i64, f64, i64)> {
        let (min, max) = (self.latency.min()?, self.latency.max()?);
        let mean = self.latency.mean() - min as f64;
        Some((0, mean, max.saturating_sub(min)))
    }

    /// The stream's verdict from its Cinst peak and VRX ranges, once a
    /// frame has begun.
    pub fn verdict(&self) -> Option<Verdict> {
        let gapped = self.vrx_gapped.range?;
        let linear = self.vrx_linear.range?;
        Some(Verdict::judge(
            self.limits,
            self.cinst.max(),
            gapped,
            linear,
        ))
    }

    /// Whether the stream so far keeps to `sender`'s limits under that
    /// type's read schedule (W under either), once a frame has begun: what
    /// a receiver checks against the SDP's `TP=`.
    pub fn complies_with(&self, sender: SenderType) -> Option<bool> {
        let (gapped, linear) = (self.vrx_gapped.range?, self.vrx_linear.range?);
        Some(keeps(
            &self.limits,
            sender,
            self.cinst.max(),
            gapped,
            linear,
        ))
    }

    fn vrx_mut(&mut self, schedule: ReadSchedule) -> &mut VrxStats {
        match schedule {
            ReadSchedule::Gapped => &mut self.vrx_gapped,
            ReadSchedule::Linear => &mut self.vrx_linear,
        }
    }

    fn add_frame(&mut self, r: &FrameReport) {
        self.frames += 1;
        self.incomplete_frames += u64::from(!r.complete);
        self.fpt.record(r.fpt.0);
        self.latency.record(r.latency);
        self.rtp_offset.record(i64::from(r.rtp_offset));
        if let Some(d) = r.rtp_delta {
            self.rtp_delta.record(i64::from(d));
        }
        self.frame_verdicts.add(r.verdict.compliance);
        self.kept.add(&self.limits, r);
    }
}

/// The Cinst bucket: filled by arrivals, drained on a fixed grid from the
/// stream's first packet, never below empty.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    origin: Option<Nanos>,
    drained: u128,
    level: u64,
}

impl Bucket {
    /// The Cinst of a packet arriving at `t` (not before the last one).
    fn arrive(&mut self, grid: &Grid, t: Nanos) -> u64 {
        let Some(origin) = self.origin else {
            self.origin = Some(t);
            return 0;
        };
        let drained = grid.drains(t.saturating_sub(origin));
        let since_last = drained.saturating_sub(self.drained);
        self.drained = drained;
        // The previous packet joins the bucket; the drains since take
        // packets out, never more than there are.
        let since_last = u64::try_from(since_last).unwrap_or(u64::MAX);
        self.level = self.level.saturating_add(1).saturating_sub(since_last);
        self.level
    }
}

/// The frame being received.
#[derive(Debug, Clone, Copy)]
struct OpenFrame {
    rtp: MediaTime,
    origin: FrameOrigin,
    epoch_frame: u64,
    first_arrival: Nanos,
    packets: u64,
    bytes: u64,
    cinst_peak: u64,
    vrx: [VrxRange; 2],
    lost: u64,
    seq_errors: u64,
}

/// The ST 2110-21 analyser of one stream: a machine fed packet
/// observations in arrival order.
///
/// Cinst runs from the first packet. Frames start at the first frame
/// boundary seen (after a marker bit, or at a change of RTP timestamp) so
/// a capture that begins mid-frame does not judge a partial frame; a
/// frame ends at its marker, at the next timestamp, or at
/// [`flush`](Self::flush). Arrivals that go backwards count as
/// simultaneous with the latest; nothing the input holds makes it panic
/// or grow.
#[derive(Debug, Clone)]
pub struct Analyzer {
    model: Model,
    grid: Grid,
    bucket: Bucket,
    sequence: SequenceTracker,
    latest: Option<Nanos>,
    previous_rtp: Option<MediaTime>,
    previous_frame_rtp: Option<MediaTime>,
    synced: bool,
    frame: Option<OpenFrame>,
    reports: VecDeque<FrameReport>,
    summary: Summary,
}

impl Analyzer {
    /// An analyser judging by `model`.
    pub fn new(model: Model) -> Analyzer {
        Analyzer {
            model,
            grid: model.grid(),
            bucket: Bucket::default(),
            sequence: SequenceTracker::new(),
            latest: None,
            previous_rtp: None,
            previous_frame_rtp: None,
            synced: false,
            frame: None,
            reports: VecDeque::new(),
            summary: Summary::new(model.limits()),
        }
    }

    /// The model judged by.
    pub const fn model(&self) -> &Model {
        &self.model
    }

    /// Everything so far.
    pub const fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The next finished frame's report.
    pub fn poll_event(&mut self) -> Option<FrameReport> {
        self.reports.pop_front()
    }

    /// Ends the frame in progress, if any (end of capture).
    pub fn flush(&mut self) {
        self.close_frame(false);
    }

    /// Analyses one packet.
    pub fn handle_input(&mut self, packet: Observation) {
        let t = match self.latest {
            Some(latest) if packet.arrival < latest => {
                self.summary.backwards += 1;
                latest
            }
            _ => packet.arrival,
        };
        self.latest = Some(t);
        let s = &mut self.summary;
        s.packets += 1;
        s.bytes = ByteSize(s.bytes.0.saturating_add(packet.len.0));
        let cinst = self.bucket.arrive(&self.grid, t);
        self.summary.cinst.record(cinst);

        let new_timestamp = self.previous_rtp.is_some_and(|r| r != packet.rtp_timestamp);
        if new_timestamp {
            self.close_frame(false);
            self.synced = true;
        }
        self.previous_rtp = Some(packet.rtp_timestamp);
        if self.frame.is_none() && self.synced {
            self.open_frame(t, packet.rtp_timestamp);
        }
        self.add_packet(t, cinst, packet);
        if packet.marker {
            self.close_frame(true);
            self.synced = true;
        }
    }

    fn open_frame(&mut self, t: Nanos, rtp: MediaTime) {
        let epoch_frame = self.grid.epoch_frame(t);
        self.frame = Some(OpenFrame {
            rtp,
            origin: self.grid.origin(epoch_frame),
            epoch_frame,
            first_arrival: t,
            packets: 0,
            bytes: 0,
            cinst_peak: 0,
            vrx: [VrxRange::of(0); 2],
            lost: 0,
            seq_errors: 0,
        });
    }

    /// Sequence, Cinst and VRX bookkeeping of one packet.
    fn add_packet(&mut self, t: Nanos, cinst: u64, packet: Observation) {
        let (lost, error) = match self.sequence.record(packet.seq.0) {
            Arrival::InOrder => (0, false),
            Arrival::Ahead { missing } => (missing, true),
            Arrival::Reordered | Arrival::Duplicate | Arrival::TooOld => (0, true),
        };
        self.summary.seq_errors += u64::from(error);
        self.summary.lost = self.sequence.lost();
        let Some(f) = self.frame.as_mut() else {
            return;
        };
        f.lost = f.lost.saturating_add(lost);
        f.seq_errors += u64::from(error);
        f.packets += 1;
        f.bytes = f.bytes.saturating_add(packet.len.0);
        f.cinst_peak = f.cinst_peak.max(cinst);
        let since_tpr0 = self.grid.after_tpr0(f.origin, t);
        for schedule in ReadSchedule::ALL {
            let reads = self.grid.reads_by(schedule, since_tpr0);
            let vrx = i128::from(f.packets) - i128::from(reads);
            let vrx = vrx.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let range = &mut f.vrx[schedule.index()];
            if f.packets == 1 {
                *range = VrxRange::of(vrx);
            } else {
                range.include(VrxRange::of(vrx));
            }
            self.summary.vrx_mut(schedule).record(vrx);
        }
    }

    fn close_frame(&mut self, complete: bool) {
        let Some(f) = self.frame.take() else {
            return;
        };
        let grid = &self.grid;
        let nominal = MediaTime(self.model.rate().rtp_timestamp(f.epoch_frame));
        let rtp_offset = f.rtp.ticks_since(nominal);
        let [vrx_gapped, vrx_linear] = f.vrx;
        let report = FrameReport {
            index: self.summary.frames,
            rtp_timestamp: f.rtp,
            epoch_frame: f.epoch_frame,
            first_arrival: f.first_arrival,
            packets: f.packets,
            bytes: ByteSize(f.bytes),
            complete,
            cinst_peak: f.cinst_peak,
            vrx_gapped,
            vrx_linear,
            fpt: grid.since_frame(f.origin, f.first_arrival),
            to_tpr0: grid.units_to_nanos(-grid.after_tpr0(f.origin, f.first_arrival)),
            rtp_offset,
            latency: grid.latency(f.origin, f.first_arrival, rtp_offset),
            rtp_delta: self.previous_frame_rtp.map(|p| f.rtp.ticks_since(p)),
            lost: f.lost,
            seq_errors: f.seq_errors,
            verdict: Verdict::judge(self.summary.limits, f.cinst_peak, vrx_gapped, vrx_linear),
        };
        self.previous_frame_rtp = Some(f.rtp);
        self.summary.add_frame(&report);
        if self.reports.len() == MAX_QUEUED_REPORTS {
            self.reports.pop_front();
            self.summary.reports_dropped += 1;
        }
        self.reports.push_back(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::FrameRate;
    use crate::video::st2110_21::{MAX_PACKETS, MAX_RATE_TERM, Scan};

    /// 1080p50 with 960 packets and TRoffset 1 ms: gapped TRS is 20 µs,
    /// linear 20 833.3 ns, the Cinst drain 18 939.4 ns; frame 10 starts at
    /// 200 ms and is read from 201 ms.
    fn round_model() -> Model {
        let rate = FrameRate::new(50, 1).unwrap();
        Model::new(rate, 1080, Scan::Progressive, 960)
            .and_then(|m| m.with_tr_offset(Nanos::from_millis(1)))
            .unwrap()
    }

    fn packet(at: u64, rtp: u32, seq: u64, marker: bool) -> Observation {
        Observation {
            arrival: Nanos(at),
            rtp_timestamp: MediaTime(rtp),
            marker,
            seq: ExtSeq(seq),
            len: ByteSize(1220),
        }
    }

    /// The last packet of frame 9, then frame 10 at `start + j · 20 µs`.
    fn frame_10(a: &mut Analyzer, start: u64, skip: Option<u64>) {
        a.handle_input(packet(199_900_000, 16_200, 99, true));
        for j in (0..960).filter(|j| Some(*j) != skip) {
            a.handle_input(packet(start + j * 20_000, 18_000, 100 + j, j == 959));
        }
    }

    #[test]
    fn cinst_counts_the_earlier_packets_still_in_the_bucket() {
        let mut a = Analyzer::new(round_model());
        let g = a.grid;
        let mut b = Bucket::default();
        // A burst of five finds 0..4 before it.
        let burst: Vec<u64> = (0..5).map(|_| b.arrive(&g, Nanos(1_000))).collect();
        assert_eq!(burst, [0, 1, 2, 3, 4]);
        // Five drains take 94 696.97 ns: one nanosecond short leaves one.
        let mut early = b;
        assert_eq!(early.arrive(&g, Nanos(1_000 + 94_696)), 1);
        assert_eq!(b.arrive(&g, Nanos(1_000 + 94_697)), 0);
        // The analyser records the same through handle_input.
        for _ in 0..5 {
            a.handle_input(packet(1_000, 0, 0, false));
        }
        assert_eq!(a.summary().cinst.max(), 4);
        assert_eq!(a.summary().cinst.count(), 5);
    }

    #[test]
    fn an_on_time_gapped_frame_is_narrow() {
        let mut a = Analyzer::new(round_model());
        frame_10(&mut a, 201_000_000, None);
        let r = a.poll_event().expect("frame 10 reported");
        assert!(
            a.poll_event().is_none(),
            "the partial frame 9 is not judged"
        );
        assert_eq!((r.epoch_frame, r.packets, r.complete), (10, 960, true));
        assert_eq!(r.bytes, ByteSize(960 * 1220));
        assert_eq!((r.fpt, r.to_tpr0), (Nanos::from_millis(1), 0));
        assert_eq!((r.rtp_offset, r.latency, r.rtp_delta), (0, 1_000_000, None));
        assert_eq!((r.cinst_peak, r.lost, r.seq_errors), (0, 0, 0));
        // Gapped reads keep pace; linear ones fall behind by 4 %:
        // 959 − ⌊0.96 · 959⌋ = 39.
        assert_eq!(r.vrx_gapped, VrxRange { min: 0, peak: 0 });
        assert_eq!(r.vrx_linear, VrxRange { min: 0, peak: 39 });
        assert_eq!(r.verdict.compliance, Compliance::Narrow);
        assert_eq!(
            r.verdict.to_string(),
            "N (gapped): Cinst peak 0 within CMAX_N 4; VRX 0..0 within VRX_FULL_N 8"
        );
        let s = a.summary();
        assert_eq!((s.frames, s.packets, s.frame_verdicts.n), (1, 961, 1));
        assert_eq!(s.complies_with(SenderType::N), Some(true));
        assert_eq!(s.complies_with(SenderType::W), Some(true));
        // The linear receiver runs 39 packets behind the gapped sender.
        assert_eq!(s.complies_with(SenderType::NL), Some(false));
        assert_eq!(s.verdict(), Some(r.verdict));
        assert_eq!(s.fpt.max(), 1_000_000);
    }

    #[test]
    fn late_packets_underflow() {
        // 30 µs late is a read and a half: every read finds one missing.
        let mut a = Analyzer::new(round_model());
        frame_10(&mut a, 201_030_000, None);
        let r = a.poll_event().unwrap();
        assert_eq!(r.vrx_gapped, VrxRange { min: -1, peak: -1 });
        assert_eq!(r.to_tpr0, -30_000);
        assert_eq!(
            r.verdict.to_string(),
            "not compliant (gapped): Cinst peak 0 within CMAX_N 4; VRX min -1 < 0: buffer underflow"
        );
        assert_eq!(a.summary().vrx_gapped.underflows, 960);
    }

    #[test]
    fn the_rtp_timestamp_sets_offset_and_latency() {
        let mut a = Analyzer::new(round_model());
        a.handle_input(packet(199_900_000, 16_200, 1, true));
        // Stamped 1 ms (90 ticks) after the frame's epoch start and
        // arriving 1.5 ms after it: offset 90, latency 0.5 ms.
        a.handle_input(packet(201_500_000, 18_090, 2, true));
        let r = a.poll_event().unwrap();
        assert_eq!((r.rtp_offset, r.latency), (90, 500_000));
        // A timestamp behind the epoch frame reads as negative offset.
        a.handle_input(packet(221_500_000, 19_700, 3, true));
        let r = a.poll_event().unwrap();
        assert_eq!(
            (r.epoch_frame, r.rtp_offset, r.rtp_delta),
            (11, -100, Some(1610))
        );
        assert_eq!(r.latency, 1_500_000 + 1_111_111);
    }

    #[test]
    fn losses_and_order_errors_land_in_their_frame() {
        let mut a = Analyzer::new(round_model());
        frame_10(&mut a, 201_000_000, Some(500));
        let r = a.poll_event().unwrap();
        assert_eq!((r.packets, r.lost, r.seq_errors), (959, 1, 1));
        // A duplicate and a late packet are order errors, not losses.
        a.handle_input(packet(221_000_000, 19_800, 1060, false));
        a.handle_input(packet(221_000_001, 19_800, 1060, false));
        a.handle_input(packet(221_000_002, 19_800, 600, true));
        let r = a.poll_event().unwrap();
        assert_eq!((r.lost, r.seq_errors), (0, 2));
        // The late packet takes its loss back in the stream's count.
        assert_eq!((a.summary().lost, a.summary().seq_errors), (0, 3));
    }

    #[test]
    fn frames_end_at_markers_timestamps_or_flush() {
        let mut a = Analyzer::new(round_model());
        // No boundary yet: nothing is judged, Cinst still counts.
        a.handle_input(packet(1_000_000, 0, 0, false));
        a.handle_input(packet(1_010_000, 0, 1, false));
        // A new timestamp is a boundary even without a marker.
        a.handle_input(packet(21_000_000, 1800, 2, false));
        a.handle_input(packet(21_010_000, 1800, 3, false));
        assert!(a.poll_event().is_none());
        // The marker went missing: the next timestamp ends the frame.
        a.handle_input(packet(41_000_000, 3600, 5, false));
        let r = a.poll_event().unwrap();
        assert_eq!(
            (r.rtp_timestamp, r.packets, r.complete),
            (MediaTime(1800), 2, false)
        );
        a.flush();
        let r = a.poll_event().unwrap();
        assert_eq!(
            (r.rtp_timestamp, r.packets, r.lost),
            (MediaTime(3600), 1, 1)
        );
        a.flush();
        assert!(a.poll_event().is_none());
        let s = a.summary();
        assert_eq!((s.frames, s.incomplete_frames, s.packets), (2, 2, 5));
        assert_eq!(s.cinst.count(), 5);
    }

    #[test]
    fn verdicts_name_the_margin() {
        let limits = Limits {
            cmax_n: 4,
            cmax_nl: 4,
            cmax_w: 16,
            vrx_full_n: 8,
            vrx_full_w: 720,
        };
        let ok = VrxRange { min: 2, peak: 6 };
        let v = Verdict::judge(limits, 14, ok, VrxRange { min: -3, peak: 2 });
        assert_eq!(
            v.to_string(),
            "W (gapped): Cinst peak 14 > CMAX_N 4; within CMAX_W 16; VRX 2..6 within VRX_FULL_N 8"
        );
        let v = Verdict::judge(
            limits,
            3,
            VrxRange { min: -1, peak: 2 },
            VrxRange { min: 0, peak: 100 },
        );
        assert_eq!(
            (v.compliance, v.schedule),
            (Compliance::Wide, ReadSchedule::Linear)
        );
        assert_eq!(
            v.to_string(),
            "W (linear): Cinst peak 3 within CMAX_NL 4; VRX peak 100 > VRX_FULL_N 8; within VRX_FULL_W 720"
        );
        let v = Verdict::judge(
            limits,
            40,
            VrxRange { min: -2, peak: 900 },
            VrxRange { min: -5, peak: 800 },
        );
        assert_eq!(
            v.to_string(),
            "not compliant (gapped): Cinst peak 40 > CMAX_W 16 by 24; VRX min -2 < 0: buffer underflow; VRX peak 900 > VRX_FULL_W 720 by 180"
        );
        // A stalled sender underflows both readings; the linear one
        // underflows less but also overflows: the gapped one, which breaks
        // one limit, explains the frame.
        let v = Verdict::judge(
            limits,
            14,
            VrxRange {
                min: -30,
                peak: 700,
            },
            VrxRange {
                min: -20,
                peak: 831,
            },
        );
        assert_eq!(
            v.to_string(),
            "not compliant (gapped): Cinst peak 14 > CMAX_N 4; within CMAX_W 16; VRX min -30 < 0: buffer underflow; VRX peak 700 > VRX_FULL_N 8; within VRX_FULL_W 720"
        );
        // A tie goes to the schedule with less underflow, then the lower peak.
        let v = Verdict::judge(limits, 0, ok, ok);
        assert_eq!(
            (v.compliance, v.schedule),
            (Compliance::Narrow, ReadSchedule::Gapped)
        );
        let v = Verdict::judge(
            limits,
            0,
            VrxRange { min: 0, peak: 30 },
            VrxRange { min: 0, peak: 20 },
        );
        assert_eq!(
            (v.compliance, v.schedule),
            (Compliance::Wide, ReadSchedule::Linear)
        );
    }

    #[test]
    fn extreme_sequence_numbers_do_not_overflow() {
        let mut a = Analyzer::new(round_model());
        a.handle_input(packet(1_000, 0, 0, true));
        a.handle_input(packet(2_000, 0, u64::MAX, true));
        a.handle_input(packet(3_000, 0, 5, true));
        assert_eq!(a.summary().lost, u64::MAX - 2);
        assert_eq!(a.poll_event().map(|r| r.lost), Some(u64::MAX - 1));
    }

    #[test]
    fn arrivals_going_backwards_count_as_simultaneous() {
        let mut a = Analyzer::new(round_model());
        a.handle_input(packet(5_000_000, 0, 0, true));
        a.handle_input(packet(6_000_000, 1800, 1, false));
        a.handle_input(packet(1_000, 1800, 2, true));
        let r = a.poll_event().unwrap();
        assert_eq!(r.cinst_peak, 1);
        assert_eq!(a.summary().backwards, 1);
    }

    /// xorshift64: deterministic junk.
    fn junk(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn hostile_streams_stay_bounded() {
        // The largest terms the model takes, and the fastest rate.
        let huge = FrameRate::new(MAX_RATE_TERM, MAX_RATE_TERM - 1).unwrap();
        let fast = FrameRate::new(1000, 1).unwrap();
        let models = [
            round_model(),
            Model::new(huge, 1, Scan::Interlaced, MAX_PACKETS).unwrap(),
            Model::new(fast, 4320, Scan::Progressive, MAX_PACKETS).unwrap(),
        ];
        for model in models {
            let mut a = Analyzer::new(model);
            let mut x = 0x9e37_79b9_7f4a_7c15;
            for i in 0..20_000u64 {
                let r = junk(&mut x);
                let arrival = match r % 5 {
                    0 => u64::MAX - (r >> 40),
                    1 => r >> 20,
                    _ => i * 1_000 + (r % 7),
                };
                a.handle_input(Observation {
                    arrival: Nanos(arrival),
                    rtp_timestamp: MediaTime((r >> 3) as u32 % 4),
                    marker: r & 8 != 0,
                    seq: ExtSeq(if r & 16 != 0 { r } else { i }),
                    len: ByteSize(r),
                });
            }
            a.flush();
            let s = a.summary();
            assert_eq!(s.packets, 20_000);
            assert!(s.frames > MAX_QUEUED_REPORTS as u64);
            assert_eq!(s.reports_dropped, s.frames - MAX_QUEUED_REPORTS as u64);
            assert!(s.verdict().is_some());
            let mut n = 0;
            while a.poll_event().is_some() {
                n += 1;
            }
            assert_eq!(n, MAX_QUEUED_REPORTS);
        }
    }
}
