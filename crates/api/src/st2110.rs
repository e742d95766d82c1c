//! The ST 2110-21 analysis of `nagare analyze` and `recv --analyze`
//! (`--json`): the model judged by, the verdict with its margin, a line
//! per second and the histograms of the run.

use nagare_proto::stats::Quantiles;
use nagare_proto::video::st2110_21::{
    Compliance, ComplianceCounts, Limits, ReadSchedule, SenderType, VrxRange,
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
    /// RTP timestamp difference of consecutive frames, ticks.
    pub rtp_delta_ticks: Range,
    /// One line per second (the first 3600 kept).
    pub seconds: Vec<SecondLine>,
    /// Frames that broke the declared sender type (W when none is
    /// declared), worst first (at most [`AnalyzeReport::MAX_BROKEN`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<BrokenFrame>,
    /// All frames that broke it, kept or not.
    #[serde(default)]
    pub broken_total: u64,
    /// Why no analysis was possible, if so.
    pub error: Option<String>,
}

impl AnalyzeReport {
    /// Lines per second kept.
    pub const MAX_SECONDS: usize = 3600;
    /// Broken frames kept in detail.
    pub const MAX_BROKEN: usize = 1000;
}

/// One frame that broke the sender type it was judged against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrokenFrame {
    /// Epoch frame number.
    pub epoch_frame: u64,
    /// When its first packet arrived: seconds on the sender's timeline for
    /// `send`'s self-check, else since the first judged frame.
    pub at_s: f64,
    /// What broke: "Cinst" (a burst) or "VRX" (the virtual receiver
    /// buffer ran dry, or overflowed).
    pub measure: String,
    /// Its value in the frame, in packets.
    pub value: i64,
    /// The limit it crossed, in packets.
    pub limit: i64,
    /// By how many packets.
    pub margin: i64,
    /// The same in plain words.
    pub plain: String,
}
