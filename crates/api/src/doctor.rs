//! `nagare doctor --json`: whether this host is set up for a planned
//! stream, check by check, with the command that fixes each shortfall.

use nagare_proto::{BitRate, ByteSize};
use serde::{Deserialize, Serialize};

/// What `nagare doctor --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The planned stream's rate.
    #[serde(rename = "rate_bps")]
    pub rate: BitRate,
    /// UDP payload per packet the checks assume.
    pub packet_size: ByteSize,
    /// Every check, in the order printed.
    pub checks: Vec<Check>,
    /// How many checks fell short; the exit status is 1 when any did.
    pub short: usize,
    /// Bytes one core copies per second (memcpy, the fastest of a few
    /// rounds of 256 MiB): what each copy of a stream costs
    /// (`bench/stripes.sh` sets it beside the receiver's CPU per Gbit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_bytes_per_second: Option<u64>,
}

impl Report {
    /// A report over `checks`, counting the short ones.
    pub fn new(rate: BitRate, packet_size: ByteSize, checks: Vec<Check>) -> Report {
        let short = checks.iter().filter(|c| !c.ok).count();
        Report {
            rate,
            packet_size,
            checks,
            short,
            copy_bytes_per_second: None,
        }
    }

    /// The first check of `kind`, if it ran.
    pub fn check(&self, kind: CheckKind) -> Option<&Check> {
        self.checks.iter().find(|c| c.kind == kind)
    }
}

/// What a check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// `net.core.rmem_max`: the largest receive buffer a socket may ask for.
    RmemMax,
    /// `net.core.wmem_max`: the largest send buffer.
    WmemMax,
    /// `net.core.netdev_max_backlog`: packets queued per CPU.
    NetdevBacklog,
    /// `net.ipv4.udp_mem`: UDP memory thresholds, in pages.
    UdpMem,
    /// The MTU of the interface the stream uses.
    Mtu,
    /// Whether that interface carries multicast.
    MulticastFlag,
    /// Whether a route leads to the multicast group.
    MulticastRoute,
    /// Whether the system clock is synchronized.
    Clock,
    /// How late a real-time thread wakes on one CPU (cyclictest-like).
    TimerFloor,
    /// How long the host stops a CPU kept busy, as a pacer keeps its own:
    /// the pacer's CPU alone, then every CPU at once.
    BusyStalls,
    /// The tightest ST 2110-21 sender type this host's timer floor and
    /// the pacer's busy-CPU stalls hold.
    SenderType,
    /// How fast one core copies memory (memcpy).
    CopyRate,
    /// Whether a VM hands freed memory back to its host (virtio-balloon
    /// free page reporting), so that reusing it stalls the vCPU.
    PageReporting,
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// What was checked.
    pub kind: CheckKind,
    /// The check as a person reads it (`net.core.rmem_max (largest
    /// receive buffer)`).
    pub name: String,
    /// What the host has.
    pub current: String,
    /// What the stream needs.
    pub needed: String,
    /// Whether it is enough.
    pub ok: bool,
    /// The command that fixes it, if any.
    pub fix: Option<String>,
}
