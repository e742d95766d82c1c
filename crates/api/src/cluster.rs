//! `nagare cluster`: its config file (`cluster.toml`) and its reports.
//!
//! ```toml
//! name = "wall"              # labels the legs on every node (default "cluster")
//! failover = "hot"           # manual | cold | hot (default manual)
//! poll_ms = 200              # how often every node is polled
//! dead_after_ms = 1000       # a node silent this long has failed
//! timeout_ms = 2000          # a node's answer to a first try may take this long
//!
//! [stream]
//! source = "clip.yuv"        # the catalog path every node's `serve --media` sees
//! size = "7680x4320"         # of the whole frame
//! pix_fmt = "uyvp"
//! fps = "30"
//! split = "2si"              # lines | square | 2si
//! stripes = 8
//! packet_size = 1428         # UDP payload bytes (optional)
//! ssrc = 0x6e610000          # SSRC of stripe 0; stripe k sends ssrc + k (optional)
//!
//! [[destination]]            # one per stripe, in stripe order
//! to = "239.1.0.1:5000"      # unicast or multicast HOST:PORT
//! dup = "239.2.0.1:5000"     # optional second-leg address (ST 2022-7)
//! interface = "10.0.0.5"     # multicast needs the nodes' interface
//! ttl = 8                    # optional multicast TTL (default 1: link-local)
//!
//! [[node]]
//! name = "a"
//! url = "http://10.0.0.11:8080"
//! token = "secret-token"     # the node's serve --token (optional on loopback)
//! api = "nmos"               # drive it over NMOS IS-05 (default "streams": serve's API)
//! stripes = [0, 1]
//!
//! [[node]]
//! name = "spare"
//! url = "http://10.0.0.19:8080"
//! alternate = true           # steps in on failure or `move`;
//! stripes = []               # for an alternate: the stripes it stands by for (empty: any)
//!
//! [receiver]                 # optional: for `nagare recv --cluster`
//! interface = "10.0.1.7"     # its multicast interface when it has no --interface
//! ```

use serde::{Deserialize, Serialize};

use nagare_proto::video::stripe::Rule;

/// What to do when a node fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailoverMode {
    /// Report it; stripes move only by `nagare cluster move`.
    #[default]
    Manual,
    /// Start the failed node's stripes on an alternate (frames in the gap
    /// are lost).
    Cold,
    /// Alternates send a second, identical leg all along: a failure loses
    /// no frame.
    Hot,
}

/// The stream every node sends a part of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSection {
    /// The catalog path of the source on every node (a raw file under
    /// each node's `--media`, from shared storage, or `pattern:bars`).
    pub source: String,
    /// Whole frame size, `WIDTHxHEIGHT`.
    pub size: String,
    /// Pixel format (`uyvy422`, `uyvp`, `rgb24`).
    pub pix_fmt: String,
    /// Frame rate (`25`, `30000/1001`).
    pub fps: String,
    /// How frames are split: `lines`, `square` or `2si`.
    pub split: Rule,
    /// Stripes per frame.
    pub stripes: usize,
    /// UDP payload bytes per packet.
    #[serde(default)]
    pub packet_size: Option<usize>,
    /// SSRC of stripe 0 (stripe k: +k); sequence numbers derive from it
    /// and the epoch.
    #[serde(default)]
    pub ssrc: Option<u32>,
}

/// Where one stripe goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSection {
    /// `HOST:PORT`, unicast or a multicast group.
    pub to: String,
    /// Where a second leg of the stripe goes while two nodes send it (a
    /// move, a hot standby); without it both legs go to `to`, and the
    /// receiver drops the copies as duplicates.
    #[serde(default)]
    pub dup: Option<String>,
    /// The nodes' multicast interface (address or name).
    #[serde(default)]
    pub interface: Option<String>,
    /// Multicast TTL (default 1; routed multicast needs more).
    #[serde(default)]
    pub ttl: Option<u32>,
}

/// One serve node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// Its name in reports and for `move`.
    pub name: String,
    /// Its serve HTTP API, `http://HOST:PORT`.
    pub url: String,
    /// Its API token.
    #[serde(default)]
    pub token: Option<String>,
    /// Stripes it sends (an alternate: stands by for; empty means any).
    #[serde(default)]
    pub stripes: Vec<usize>,
    /// Only steps in on failure or `move`.
    #[serde(default)]
    pub alternate: bool,
    /// How its legs are started and stopped.
    #[serde(default)]
    pub api: NodeApi,
}

/// How `nagare cluster` starts and stops a node's legs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeApi {
    /// serve's own API: a leg is a stream made with `POST /v1/streams`.
    #[default]
    Streams,
    /// NMOS IS-05: a leg is the node's sender of that stripe (offered by
    /// the path's `[stripes]` sidecar table), activated at the TAI
    /// instant of the leg's epoch frame.
    Nmos,
}

/// Where `nagare recv --cluster` receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSection {
    /// The receiver's multicast interface (address or name), taken when
    /// `recv` has no `--interface`. Not a destination's `interface`: that
    /// one is the nodes' (behind a router, on another subnet).
    #[serde(default)]
    pub interface: Option<String>,
}

/// The whole `cluster.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Labels this cluster's legs on the nodes, so `status`, `move` and
    /// `stop` find them from another process.
    #[serde(default = "ClusterConfig::default_name")]
    pub name: String,
    /// Failure rule of `start`.
    #[serde(default)]
    pub failover: FailoverMode,
    /// Poll interval, ms.
    #[serde(default = "ClusterConfig::default_poll_ms")]
    pub poll_ms: u64,
    /// Silence after which a node has failed, ms.
    #[serde(default = "ClusterConfig::default_dead_after_ms")]
    pub dead_after_ms: u64,
    /// How long a node may take to answer a request, ms; a request it
    /// did not answer is followed up with twice the time, and so on.
    #[serde(default = "ClusterConfig::default_timeout_ms")]
    pub timeout_ms: u64,
    /// The stream.
    pub stream: StreamSection,
    /// One per stripe.
    #[serde(rename = "destination")]
    pub destinations: Vec<DestinationSection>,
    /// The nodes.
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSection>,
    /// The receiver's side (optional).
    #[serde(default)]
    pub receiver: ReceiverSection,
}

impl ClusterConfig {
    fn default_name() -> String {
        "cluster".into()
    }
    fn default_poll_ms() -> u64 {
        200
    }
    fn default_dead_after_ms() -> u64 {
        1000
    }
    fn default_timeout_ms() -> u64 {
        2000
    }
}

/// One leg as `status` saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegStatus {
    /// The stripe.
    pub stripe: usize,
    /// The node's stream id.
    pub id: u64,
    /// Where it sends.
    pub destination: String,
    /// Packets sent.
    pub packets: u64,
    /// Rate measured between two polls, bits per second.
    pub rate_bps: u64,
    /// Frame slots given up with an empty ring.
    pub underruns: u64,
    /// Late packets.
    pub late: u64,
    /// Chunks in its read-ahead ring.
    pub ring_fill: u64,
    /// Why it failed, in the node's words (absent while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One node as `status` saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Whether it answered.
    pub ok: bool,
    /// What went wrong, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its clock minus ours, ns (midpoint estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ns: Option<i64>,
    /// The offset exceeds a frame period.
    pub clock_warning: bool,
    /// This cluster's legs on it.
    pub legs: Vec<LegStatus>,
    /// Sum of its legs' rates, bits per second.
    pub rate_bps: u64,
}

/// `nagare cluster status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub name: String,
    /// Per node, in config order.
    pub nodes: Vec<NodeReport>,
    /// Per stripe: the nodes sending it.
    pub senders: Vec<Vec<String>>,
}

/// A leg a node confirmed halted and removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltedLeg {
    /// The node's name.
    pub node: String,
    /// The stripe.
    pub stripe: usize,
    /// The node's stream id.
    pub id: u64,
    /// Its state when it was removed (`playing`, `failed`, ...).
    pub state: String,
}

/// Stripes a node did not confirm halted: it may still send them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotHalted {
    /// The node's name.
    pub node: String,
    /// The stripes it may still send.
    pub stripes: Vec<usize>,
    /// Its last answer, or why there was none.
    pub reason: String,
}

/// What `start`, `move` and `stop` did, printed at the end (`--json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterLog {
    /// Every controller event, in words, in order.
    pub events: Vec<String>,
    /// Nodes that failed, by name.
    pub failed: Vec<String>,
    /// Legs halted and removed, in order.
    #[serde(default)]
    pub halted: Vec<HaltedLeg>,
    /// Nodes that did not confirm a halt: legs possibly left running.
    #[serde(default)]
    pub not_halted: Vec<NotHalted>,
    /// Per stripe: the nodes sending it at the end.
    pub senders: Vec<Vec<String>>,
    /// The epoch frame the start asked every node to begin with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_frame: Option<u64>,
}
