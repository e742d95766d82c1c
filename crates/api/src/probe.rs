//! `nagare probe client --json`: the report the client prints.
//!
//! The measurements that travel on the probe's control connection (the
//! sender's and the receiver's reports) are nagare-proto's types,
//! re-exported here; this module adds what only the printed report holds.

use serde::{Deserialize, Serialize};

pub use nagare_proto::probe::{
    BurstGap, Direction, FrameStats, IntervalStats, LiveInterval, ReceiverReport, RttSummary,
    RunLength, SenderReport, Verdict,
};
pub use nagare_proto::stats::Quantiles;

/// Everything the client prints; `--json` serializes it, with the
/// receiver's metrics flattened to the top level.
///
/// With `--bidir` the top level describes the client's stream (client to
/// server) and `directions` holds both, each with its own verdict; the
/// top-level verdict passes when both do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// PASS/FAIL first.
    pub verdict: Verdict,
    /// nagare's version, with the git commit it was built from.
    pub version: String,
    /// The client's command line, program name first.
    pub command_line: Vec<String>,
    /// When the test started (connecting to the server), RFC 3339 UTC.
    pub start: String,
    /// When it ended (results in), RFC 3339 UTC.
    pub end: String,
    /// Stopped early by Ctrl-C or SIGTERM: `duration_s` is what ran, and
    /// the verdict is partial.
    pub interrupted: bool,
    /// Test length asked for, seconds.
    pub planned_duration_s: f64,
    /// Server address.
    pub server: String,
    /// Which way the stream went (with `--bidir`, the client's stream's).
    pub direction: Direction,
    /// Both ends sent at once (`--bidir`).
    #[serde(default)]
    pub bidir: bool,
    /// The rate the schedule sends, over every stream (Sperf's "set
    /// bandwidth").
    pub set_bandwidth_bps: f64,
    /// What the sender achieved.
    pub sender_achieved_bps: f64,
    /// UDP payload bytes per packet.
    pub packet_size: u32,
    /// How long the stream ran, seconds: `planned_duration_s`, or less
    /// when interrupted.
    pub duration_s: f64,
    /// Video frame rate, with `--fps`.
    pub fps: Option<f64>,
    /// Packets per (possibly virtual) frame.
    pub packets_per_frame: u64,
    /// Playout buffer for lateness, ms.
    pub playout_ms: f64,
    /// RTT with the path idle.
    pub rtt_idle: RttSummary,
    /// RTT during the test.
    pub rtt_loaded: RttSummary,
    /// The sender's own measurements (with `-P`, of every stream together).
    pub sender: SenderReport,
    /// Parallel streams (`-P`), each at `set_bandwidth_bps / streams`.
    pub parallel: u32,
    /// The receiver's measurements (with `-P`, of every stream together:
    /// see [`nagare_proto::probe::total`]).
    #[serde(flatten)]
    pub receiver: ReceiverReport,
    /// With `-P N` (N > 1): each stream's own reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamReport>,
    /// With `--bidir`: each direction, client to server first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directions: Vec<DirectionReport>,
}

/// One direction of a `--bidir` test, judged on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionReport {
    /// Which way.
    pub direction: Direction,
    /// This direction's verdict.
    pub verdict: Verdict,
    /// The rate its schedule sends, over every stream.
    pub set_bandwidth_bps: f64,
    /// What its sender achieved.
    pub sender_achieved_bps: f64,
    /// Its sender's measurements (with `-P`, every stream together).
    pub sender: SenderReport,
    /// Its receiver's measurements (with `-P`, every stream together).
    pub receiver: ReceiverReport,
    /// With `-P N` (N > 1): each stream's own reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamReport>,
}

/// One of several parallel streams (`-P`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    /// Its index, from 0.
    pub stream: u32,
    /// What its sender measured.
    pub sender: SenderReport,
    /// What its receiver measured.
    pub receiver: ReceiverReport,
}
