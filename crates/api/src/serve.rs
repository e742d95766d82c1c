//! `nagare serve`: its HTTP API bodies, its config file and its final
//! report. The same structs are written by the server, read by the tests,
//! by `nagare loadtest` and by any client (docs/openapi.yaml describes
//! them on the wire).

use nagare_proto::video::stripe::Rule;
use serde::{Deserialize, Serialize};

/// How a push stream's datagrams are wrapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encapsulation {
    /// RTP (RFC 4175 for raw video, RFC 2250 MP2T for `.ts`).
    #[default]
    Rtp,
    /// Plain UDP: TS packets only, 7 per datagram (raw video is always RTP).
    Udp,
}

/// Pacing options of a push stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pacing {
    /// Longest train of raw video packets sent back to back, µs of schedule.
    #[serde(default = "Pacing::default_burst_us")]
    pub burst_us: u64,
    /// UDP payload bytes per raw video packet.
    #[serde(default = "Pacing::default_packet_size")]
    pub packet_size: usize,
}

impl Pacing {
    fn default_burst_us() -> u64 {
        100
    }
    fn default_packet_size() -> usize {
        1428
    }
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            burst_us: Pacing::default_burst_us(),
            packet_size: Pacing::default_packet_size(),
        }
    }
}

/// `POST /v1/streams`: send a catalog entry to one or more destinations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamRequest {
    /// A path of the catalog (`clip.ts`, `bars`, `pattern:bars`).
    pub source: String,
    /// `HOST:PORT` destinations; each must be the client's own address or
    /// inside the server's `--allow` list.
    pub destinations: Vec<String>,
    /// RTP or plain UDP.
    #[serde(default)]
    pub encapsulation: Encapsulation,
    /// Pacing of raw video.
    #[serde(default)]
    pub pacing: Pacing,
    /// Read-ahead priority, 0 (lowest) to 255: among reads due at the same
    /// time, higher priority goes first; a busy disk delays low priority.
    #[serde(default)]
    pub priority: u8,
    /// Start over at the end of the source.
    #[serde(default, rename = "loop")]
    pub looping: bool,
    /// Multicast interface address (a multicast destination needs one).
    #[serde(default)]
    pub interface: Option<String>,
    /// Send only this stripe of every frame (a `nagare cluster` leg).
    /// Raw video only. The leg is epoch-aligned: epoch frame `f` carries
    /// source frame `f mod frames` (the pattern draws `f`), so every node
    /// sending this stripe sends the same bytes for the same frame.
    #[serde(default)]
    pub stripe: Option<StripeSpec>,
    /// Fixed SSRC with sequence numbers locked to the epoch (as `send
    /// --ssrc`): two nodes sending the same stripe with the same SSRC send
    /// identical packets (ST 2022-7 legs). Implies epoch alignment.
    #[serde(default)]
    pub ssrc: Option<u32>,
    /// Free text shown in the stream table (the cluster names its legs).
    #[serde(default)]
    pub label: Option<String>,
    /// Multicast TTL (default 1: the local link only; a multicast router
    /// between the server and its receivers needs more).
    #[serde(default)]
    pub ttl: Option<u32>,
    /// First epoch frame to send (frames since the Unix epoch at the
    /// source's rate), so nodes started one after another begin on the
    /// same frame; default: the next frame boundary after a short lead.
    /// A frame already past is skipped to the next one due.
    #[serde(default)]
    pub epoch_frame: Option<u64>,
    /// Names this request so it can be sent again safely: while a stream
    /// made with this key is in the table, a second POST with the same key
    /// and the same request answers `200` with that stream instead of
    /// starting another (the same key with a different request is refused
    /// with `409`). A client that lost an answer (a timeout) retries with
    /// the key; `nagare cluster` keys each leg `LABEL@EPOCH_FRAME`. 1 to
    /// 200 printable ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// Which stripe of the frame a stream sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeSpec {
    /// How the frame is split: `lines`, `square` or `2si`.
    pub split: Rule,
    /// Stripes per frame.
    pub count: usize,
    /// This stripe, 0-based.
    pub index: usize,
}

/// Whether a stream is a push stream or an RTSP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKind {
    /// Created through the API or the config file.
    Push,
    /// An RTSP client's session.
    Rtsp,
}

/// Where a stream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamState {
    /// Set up, not sending yet (RTSP before PLAY).
    Ready,
    /// Sending.
    Playing,
    /// Paused by RTSP PAUSE.
    Paused,
    /// Reached the end of its source (without loop), or stopped.
    Finished,
    /// Stopped by the server: a TCP reader too slow to keep up, or an error.
    Failed,
}

/// Live counters of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCounters {
    /// Datagrams sent (to every destination).
    pub packets: u64,
    /// UDP payload bytes sent (interleaved: RTP bytes).
    pub bytes: u64,
    /// Datagrams that left more than 100 µs after their slot.
    pub late: u64,
    /// Largest lateness seen, µs.
    pub max_late_us: u64,
    /// Frame slots (raw) or chunks (TS) the reader had not filled in time.
    pub underruns: u64,
    /// Chunks waiting in the read-ahead ring now.
    pub ring_fill: u64,
    /// Capacity of the ring.
    pub ring_capacity: u64,
    /// Datagrams the kernel refused (no listener: ICMP port unreachable,
    /// or a full send buffer).
    pub send_errors: u64,
    /// Interleaved packets dropped because the TCP reader's write queue was
    /// full (the reader is then disconnected).
    pub queue_drops: u64,
    /// Times the source started over (`loop`).
    pub loops: u64,
}

/// One stream of the table (`GET /v1/streams/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// The id to inspect or stop it with.
    pub id: u64,
    /// Push stream or RTSP session.
    pub kind: StreamKind,
    /// The catalog path it plays.
    pub source: String,
    /// Where it sends (`HOST:PORT`, or `tcp:CLIENT/channel N`).
    pub destinations: Vec<String>,
    /// Life cycle.
    pub state: StreamState,
    /// Read-ahead priority.
    pub priority: u8,
    /// Nominal rate, bits per second.
    pub rate_bps: u64,
    /// Loops at the end of its source.
    #[serde(rename = "loop")]
    pub looping: bool,
    /// Counters so far.
    pub counters: StreamCounters,
    /// The stripe it sends, if only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe: Option<StripeSpec>,
    /// Its fixed SSRC (epoch-locked numbering), if asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssrc: Option<u32>,
    /// The request's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The request's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Why it failed (state `failed`), in the server's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its readers said of it in their RTCP receiver reports (RTSP
    /// sessions whose client sends them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<ReaderReport>,
}

/// A reader's latest RTCP receiver report on a stream (RFC 3550 §6.4.2),
/// and how many came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderReport {
    /// Where it reads (as `destinations` names it).
    pub reader: String,
    /// The reader's own SSRC.
    pub ssrc: u32,
    /// Report blocks about the stream taken so far.
    pub reports: u64,
    /// RTCP datagrams from it refused as malformed.
    pub malformed: u64,
    /// Share of packets lost between its last two reports, in 256ths.
    pub fraction_lost: u8,
    /// Packets lost since it began to receive (negative with duplicates).
    pub cumulative_lost: i32,
    /// Highest extended sequence number it received.
    pub highest_seq: u32,
    /// Interarrival jitter, in 90 kHz RTP timestamp units.
    pub jitter: u32,
    /// The same, in microseconds.
    pub jitter_us: u64,
}

/// `GET /v1/streams`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamList {
    /// Every stream, by id.
    pub streams: Vec<StreamInfo>,
}

/// The refusal body of every 4xx/5xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// What was wrong and what to do.
    pub error: String,
}

/// A reader of a path, in MediaMTX's `/v3/paths/list` style.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathReader {
    /// `rtspSession` or `pushStream`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The stream id, as a string.
    pub id: String,
}

/// Where a path's media comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathSource {
    /// `rawFile`, `mpegtsFile` or `pattern`.
    #[serde(rename = "type")]
    pub kind: String,
    /// File name or pattern name.
    pub id: String,
}

/// One path of the catalog (`items` of `/v3/paths/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathItem {
    /// The path: `rtsp://HOST:PORT/{name}`.
    pub name: String,
    /// Its source.
    pub source: PathSource,
    /// Always true: files and patterns are ready from the start.
    pub ready: bool,
    /// Codec names of its tracks (`raw`, `MP2T`).
    pub tracks: Vec<String>,
    /// Nominal rate, bits per second.
    pub rate_bps: u64,
    /// Bytes sent of this path by every stream.
    pub bytes_sent: u64,
    /// Who reads it now.
    pub readers: Vec<PathReader>,
}

/// `GET /v3/paths/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathList {
    /// Items in this answer.
    pub item_count: usize,
    /// Always 1: the list is not paged.
    pub page_count: usize,
    /// The paths, by name.
    pub items: Vec<PathItem>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// Streams in the table.
    pub streams: usize,
    /// RTSP sessions open.
    pub rtsp_sessions: u64,
    /// Busiest pacing thread over the last second, 0 to 1.
    pub pacer_load: f64,
    /// The server's clock when it answered, ns since the Unix epoch: a
    /// client estimates the offset as this minus the midpoint of its
    /// request and the answer.
    #[serde(default)]
    pub time_ns: u64,
}

/// A media entry declared in the config file (beside what `--media`
/// finds): a pattern or a file elsewhere, under a path name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaEntry {
    /// The path it is served under.
    pub name: String,
    /// `pattern:bars`, or a file (raw video needs size, pix_fmt and fps;
    /// `.ts` needs nothing).
    pub source: String,
    /// Raw video frame size, `WIDTHxHEIGHT`.
    #[serde(default)]
    pub size: Option<String>,
    /// Raw video pixel format (`uyvy422`, `uyvp`, `rgb24`).
    #[serde(default)]
    pub pix_fmt: Option<String>,
    /// Raw video frame rate (`25`, `30000/1001`).
    #[serde(default)]
    pub fps: Option<String>,
    /// Multicast group `ADDR:PORT` RTSP clients may SETUP multicast on.
    #[serde(default)]
    pub multicast: Option<String>,
}

/// The file `nagare serve --config FILE` reads (TOML).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Extra media paths.
    #[serde(default)]
    pub media: Vec<MediaEntry>,
    /// Push streams started with the server. Their destinations must lie
    /// in `--allow` (or be loopback).
    #[serde(default)]
    pub streams: Vec<StreamRequest>,
}

/// Printed on stdout (with `--json`) when the server stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeReport {
    /// Every stream that ran, with its final counters.
    pub streams: Vec<StreamInfo>,
    /// RTSP connections accepted.
    pub rtsp_connections: u64,
    /// RTSP requests refused with 4xx/5xx.
    pub rtsp_refused: u64,
    /// RTSP connections closed to make room under a connection cap.
    #[serde(default)]
    pub rtsp_evicted: u64,
    /// TCP readers dropped for a full write queue.
    pub slow_readers_dropped: u64,
    /// API requests refused (auth, allow-list, admission, bad body).
    pub api_refused: u64,
    /// Seconds the server ran.
    pub seconds: f64,
    /// CPU seconds the process used.
    pub cpu_seconds: f64,
}

/// One stream count of `nagare loadtest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadStep {
    /// Concurrent streams.
    pub streams: usize,
    /// Streams that delivered anything in the window.
    pub streams_received: usize,
    /// Seconds measured (after a warm-up).
    pub seconds: f64,
    /// Datagrams received in the window, all streams.
    pub packets: u64,
    /// Datagrams missing (sequence gaps), all streams.
    pub lost: u64,
    /// `lost / (packets + lost)`.
    pub loss_ratio: f64,
    /// Frames (RTP timestamps) with at least one datagram missing.
    pub frames_dropped: u64,
    /// Frames seen or missed.
    pub frames: u64,
    /// `frames_dropped / frames`.
    pub frame_drop_ratio: f64,
    /// Streams with any loss.
    pub streams_with_loss: usize,
    /// Packet arrival against the stream's own schedule,
    /// |(R_i − R_i−1) − (S_i − S_i−1)| of consecutive packets with S_i a
    /// packet's place on the schedule (its RTP time, plus j · TRS for the
    /// j-th packet of a raw video frame: nagare-proto's
    /// `stats::FlowMeter`): p99 of each stream, then the worst stream, µs.
    /// (Not RFC 3550's jitter, whose S is the RTP time alone: on raw
    /// video it read the frame period.)
    pub jitter_p99_us_worst: f64,
    /// The median stream's p99, µs.
    pub jitter_p99_us_median: f64,
    /// Receive rate, bits per second (bytes over first-to-last time).
    pub rate_bps: f64,
    /// Server CPU over the window, in cores (1.0 = one core busy).
    pub server_cpu_cores: Option<f64>,
    /// Server CPU per stream, percent of one core.
    pub cpu_per_stream_pct: Option<f64>,
    /// Datagrams the receiving socket's kernel buffer dropped.
    pub receiver_kernel_drops: u64,
}

/// What `nagare loadtest --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The URL tested.
    pub url: String,
    /// Each stream count, in order.
    pub steps: Vec<LoadStep>,
    /// Highest count whose frame drop stayed at or below 1 % (with
    /// `limit_found` false, the last count tested: a floor).
    pub ceiling: Option<usize>,
    /// Highest count with no loss and worst jitter p99 ≤ 250 µs.
    pub clean_ceiling: Option<usize>,
    /// What ran out at the first step past the ceiling, if one did.
    pub saturated: Option<String>,
    /// Whether a step passed 1 % frame drop; when none did, `ceiling` is
    /// the last count tested, a floor rather than a limit.
    #[serde(default)]
    pub limit_found: bool,
    /// The ceiling in words: `50`, or `≥ 50 (no limit found within the
    /// ramp)`.
    #[serde(default)]
    pub ceiling_text: String,
    /// The clean ceiling in words, the same way.
    #[serde(default)]
    pub clean_ceiling_text: String,
    /// Why the server's admission refused a stream, ending the ramp
    /// there: the server's own limit (`--max-rate`, `--max-load`, the
    /// memory budget) came before any measured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}
