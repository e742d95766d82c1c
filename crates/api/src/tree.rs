//! Reports of `nagare tree` (`--report FILE`): what the source sent and
//! what each peer received.

use nagare_proto::stats::Quantiles;
use serde::{Deserialize, Serialize};

/// A frame's number and the xxh3 hash of its pixels, so tests compare
/// what every peer decoded without storing every frame.
pub type Fingerprint = (u64, u64);

/// Most link errors a report lists (a hostile path could cause many).
pub const MAX_LINK_ERRORS: usize = 64;

/// What `nagare tree source` sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// Screen width in pixels.
    pub width: u32,
    /// Screen height in lines.
    pub height: u32,
    /// Pixel format name (rgb24, uyvy422, uyvp).
    pub pixel_format: String,
    /// Frames encoded and sent.
    pub frames: u64,
    /// Of those, key frames.
    pub key_frames: u64,
    /// Tiles encoded.
    pub tiles: u64,
    /// Bytes on the wire (one copy of the stream), headers included.
    pub bytes: u64,
    /// Bytes of the raw frames.
    pub raw_bytes: u64,
    /// From the first frame to the last, in seconds.
    pub seconds: f64,
    /// Frames per second achieved.
    pub fps: f64,
    /// Encoded stream rate, Mbit/s.
    pub mbit_per_s: f64,
    /// Mean time to capture a frame, ms.
    pub capture_ms_mean: f64,
    /// Mean time to encode a frame, ms.
    pub encode_ms_mean: f64,
    /// CPU time the process used, user plus system, seconds.
    pub cpu_seconds: f64,
    /// Times a child of the source lagged and its backlog was dropped.
    pub lag_drops: u64,
    /// Catch-up frames the source sent its children.
    pub refreshes: u64,
    /// Links dropped because their encryption failed or their data did
    /// not decode (a tampered, replayed or reordered record, a failed
    /// handshake), by error, at most [`MAX_LINK_ERRORS`].
    #[serde(default)]
    pub link_errors: Vec<String>,
    /// Every frame sent (with `--report`).
    pub fingerprints: Vec<Fingerprint>,
}

/// What one `nagare tree join` received.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// The peer's id.
    pub peer: u32,
    /// Its breadth-first slot at the end.
    pub slot: u32,
    /// Its depth (hops from the source) at the end.
    pub depth: u32,
    /// Whole frames decoded.
    pub frames: u64,
    /// First frame decoded.
    pub first: Option<u64>,
    /// Newest frame decoded.
    pub last: Option<u64>,
    /// Frame numbers skipped between frames this peer completed.
    pub lost: u64,
    /// Frames completed that were not newer than the last one (after
    /// re-attaching to a parent that was behind).
    pub repeated: u64,
    /// Times the peer got frames again after losing its parent.
    pub reattaches: u64,
    /// Parent lost → next whole frame, per re-attach, ms.
    pub recoveries_ms: Vec<f64>,
    /// Capture-to-decode latency of delta frames in µs (source and peer
    /// clocks must agree), by nagare's one percentile definition.
    pub latency_us: Quantiles,
    /// Bytes received from parents.
    pub bytes_received: u64,
    /// CPU time the process used, user plus system, seconds.
    pub cpu_seconds: f64,
    /// Times a child of this peer lagged and its backlog was dropped.
    pub lag_drops: u64,
    /// Catch-up frames this peer sent its children.
    pub refreshes: u64,
    /// Whether the stream's end arrived.
    pub ended: bool,
    /// Links dropped because their encryption failed or their data did
    /// not decode (a tampered, replayed or reordered record, a failed
    /// handshake), by error, at most [`MAX_LINK_ERRORS`].
    #[serde(default)]
    pub link_errors: Vec<String>,

    /// Every frame decoded (with `--report`).
    pub fingerprints: Vec<Fingerprint>,
}
