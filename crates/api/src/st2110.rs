//! The ST 2110-21 analysis of `nagare analyze` and `recv --analyze`
//! (`--json`): the model judged by, the verdict with its margin, a line
//! per second and the histograms of the run.

use nagare_proto::stats::Quantiles;
use nagare_proto::video::st2110_21::{
    Compliance, ComplianceCounts, KeptCounts, Limits, Measure, ReadSchedule, RtpClock, SenderType,
    VrxRange,
};
use serde::{Deserialize, Serialize};

/// The constants a stream is judged by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamModel {
    /// Npackets: packets of one frame (learned from the stream or given).
    pub packets: u32,
    /// Frame rate, as `60000/1001`.
    pub rate: String,
    /// Lines of the raster.
    pub lines: u32,
    /// TRS of the gapped read schedule, nanoseconds.
    pub trs_ns: f64,
    /// TRS of the linear read schedule, nanoseconds.
    pub trs_linear_ns: f64,
    /// TRoffset (TROdefault unless signalled), nanoseconds.
    pub tr_offset_ns: f64,
    /// The Cinst bucket's drain period, nanoseconds.
    pub drain_ns: f64,
    /// CMAX and VRX_FULL of each type.
    pub limits: Limits,
}

/// A judgement with its margin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictReport {
    /// The narrowest type the figures allow.
    pub compliance: Compliance,
    /// The virtual receiver the verdict holds for.
    pub schedule: ReadSchedule,
    /// Highest Cinst.
    pub cinst_peak: u64,
    /// VRX under that schedule.
    pub vrx: VrxRange,
    /// The sentence: `W (gapped): Cinst peak 14 > CMAX_N 6; within CMAX_W
    /// 16; ...`.
    pub text: String,
    /// The same in plain words, a sentence each: the class and the
    /// receiver it holds for, the bursts, the buffer.
    #[serde(default)]
    pub plain: Vec<String>,
}

/// One second of the run (by arrival of each frame's first packet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondLine {
    /// Seconds since the first frame's arrival.
    pub second: u64,
    /// Frames that began in it.
    pub frames: u64,
    /// Highest Cinst of those frames.
    pub cinst_peak: u64,
    /// VRX range of the gapped receiver.
    pub vrx_gapped: VrxRange,
    /// VRX range of the linear receiver.
    pub vrx_linear: VrxRange,
    /// Largest FPT, microseconds.
    pub fpt_max_us: f64,
    /// Packets lost in them.
    pub lost: u64,
    /// The verdict on those frames together.
    pub compliance: Compliance,
}

/// A histogram bin: `[lower bound, samples]`.
pub type Bin = [i64; 2];

/// The range and spread of one virtual receiver over the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct VrxSummary {
    /// Lowest and highest at any packet.
    pub range: Option<VrxRange>,
    /// Packets at which VRX was below zero.
    pub underflows: u64,
    /// Quantiles of VRX over packets (underflows as 0).
    pub quantiles: Quantiles,
}

/// Smallest, mean and largest of a per-frame quantity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Range {
    /// Smallest.
    pub min: Option<i64>,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: Option<i64>,
}

/// What `nagare analyze` found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnalyzeReport {
    /// What was analysed: `pcap FILE` or `udp HOST:PORT`.
    pub source: String,
    /// The stream's SSRC, once a packet was seen.
    pub ssrc: Option<u32>,
    /// The model judged by, once Npackets is known.
    pub model: Option<StreamModel>,
    /// The sender type the SDP declares (`TP=`).
    pub declared: Option<SenderType>,
    /// Whether the stream complies with the declared type.
    pub declared_met: Option<bool>,
    /// The stream's verdict.
    pub verdict: Option<VerdictReport>,
    /// Frames judged.
    pub frames: u64,
    /// Of those, ended without a marker bit.
    pub incomplete_frames: u64,
    /// Packets analysed.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Packets missing from the sequence.
    pub lost: u64,
    /// Sequence numbers out of order (jumps, late packets, duplicates).
    pub seq_errors: u64,
    /// Arrivals earlier than the one before (analysed as simultaneous).
    pub backwards: u64,
    /// Datagrams of the stream's address that were not RTP.
    pub not_rtp: u64,
    /// Datagrams of another SSRC.
    pub foreign: u64,
    /// Captured frames that were not UDP to the stream's port (pcap).
    pub other: u64,
    /// Frames by their own verdict.
    pub frame_verdicts: ComplianceCounts,
    /// Frames by the types they keep to (a narrow frame that fits W counts
    /// for W too).
    #[serde(default)]
    pub frames_kept: KeptCounts,
    /// Cinst over packets.
    pub cinst: Quantiles,
    /// Cinst histogram, one bin per value.
    pub cinst_histogram: Vec<Bin>,
    /// The gapped virtual receiver.
    pub vrx_gapped: VrxSummary,
    /// The linear virtual receiver.
    pub vrx_linear: VrxSummary,
    /// FPT (first packet time from the frame's epoch start) over frames,
    /// microseconds.
    pub fpt_us: Quantiles,
    /// FPT histogram, microseconds.
    pub fpt_histogram_us: Vec<Bin>,
    /// `rtp_ts − ⌊N · Tframe · 90000⌋` over frames, 90 kHz ticks.
    pub rtp_offset_ticks: Range,
    /// Arrival of each frame's first packet less its RTP time, µs.
    pub latency_us: Range,
    /// Whether the RTP timestamps count from the ST 2110-10 epoch; when
    /// they do not, FPT and latency on the epoch mean nothing and
    /// `grid_lag_us` is the measure.
    #[serde(default)]
    pub rtp_clock: Option<RtpClock>,
    /// Each frame's lag behind the sender's own frame grid (its RTP
    /// timestamps), µs: latency less the run's smallest; min is 0.
    #[serde(default)]
    pub grid_lag_us: Option<Range>,
    /// RTP timestamp difference of consecutive frames, ticks.
    pub rtp_delta_ticks: Range,
    /// One line per second (the first 3600 kept).
    pub seconds: Vec<SecondLine>,
    /// The type `broken` lists the frames of: the declared one, else the
    /// next type the stream missed (N or NL for a W stream, W for one
    /// not compliant); none for a narrow stream with nothing declared.
    #[serde(default)]
    pub broken_type: Option<SenderType>,
    /// Frames that broke `broken_type`, worst first (the
    /// [`AnalyzeReport::MAX_BROKEN`] worst).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<BrokenFrame>,
    /// All frames that broke it, kept or not.
    #[serde(default)]
    pub broken_total: u64,
    /// Datagrams of the stream's address that were RTP but not RFC 4175
    /// video.
    #[serde(default)]
    pub not_video: u64,
    /// The raster the packets' sample row headers describe.
    #[serde(default)]
    pub raster: Option<RasterReport>,
    /// How the packets disagree with the size given (`--size` or the
    /// SDP), in words, if they do.
    #[serde(default)]
    pub size_mismatch: Option<String>,
    /// Why no analysis was possible, if so.
    pub error: Option<String>,
}

impl AnalyzeReport {
    /// Lines per second kept.
    pub const MAX_SECONDS: usize = 3600;
    /// Broken frames kept in detail.
    pub const MAX_BROKEN: usize = nagare_proto::video::st2110_21::MAX_BREACHES;
}

/// The raster a stream's packets describe (RFC 4175 sample row headers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RasterReport {
    /// Highest line number + 1.
    pub lines: Option<u32>,
    /// Highest pixel offset of a segment's first pixel.
    pub max_offset: u32,
    /// The widest line in pixels, when the pixel format is known.
    pub width: Option<u32>,
}

/// One frame that broke the sender type it was judged against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrokenFrame {
    /// Its place among the frames judged, from 0.
    #[serde(default)]
    pub index: u64,
    /// Epoch frame number.
    pub epoch_frame: u64,
    /// When its first packet arrived: seconds on the sender's timeline for
    /// `send`'s self-check, else since the first judged frame.
    pub at_s: f64,
    /// What broke: "Cinst" (a burst) or "VRX" (the virtual receiver
    /// buffer ran dry, or overflowed).
    pub measure: String,
    /// The same as a kind: `cinst`, `vrx_empty`, `vrx_full`.
    #[serde(default)]
    pub kind: Option<Measure>,
    /// The limit's name: `CMAX_NL`, `VRX_FULL_N`, `0`.
    #[serde(default)]
    pub limit_name: String,
    /// Its value in the frame, in packets.
    pub value: i64,
    /// The limit it crossed, in packets.
    pub limit: i64,
    /// By how many packets.
    pub margin: i64,
    /// The same in plain words.
    pub plain: String,
    /// In the standard's terms: `Cinst 11 > CMAX_NL 4 by 7`.
    #[serde(default)]
    pub standard: String,
}
