//! What a test measured, as it travels on the control connection: the
//! sender's and the receiver's reports (JSON), and the per-packet arrival
//! records (binary). [`crate::probe::analysis`] fills them in.
//!
//! Field names are the wire format and the client's `--json` output: they
//! stay as they are. Percentile summaries are [`Quantiles`], the crate's
//! one percentile definition (nearest rank, within 0.1%).

use serde::{Deserialize, Serialize};

use crate::stats::Quantiles;
use crate::units::Nanos;

/// One received test-stream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Sequence number from the packet.
    pub seq: u64,
    /// Send time from the packet, on the sender's clock.
    pub sent_at: Nanos,
    /// Receive time, on the receiver's clock.
    pub received_at: Nanos,
}

/// Loss episodes of one length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLength {
    /// Consecutive packets lost.
    pub length: u64,
    /// Episodes of that length.
    pub count: u64,
}

/// RFC 3611 burst/gap summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstGap {
    /// Received packets that separate bursts (RFC 3611 Gmin).
    pub gmin: u64,
    /// Bursts found.
    pub bursts: u64,
    /// Fraction of packets within bursts that were lost.
    pub burst_density: f64,
    /// Fraction of packets within gaps that were lost.
    pub gap_density: f64,
    /// Packets (sent) within bursts.
    pub burst_packets: u64,
    /// Packets (sent) within gaps.
    pub gap_packets: u64,
}

/// Video frame delivery (with `--fps`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameStats {
    /// Frames sent.
    pub frames: u64,
    /// Frames with every packet in time.
    pub complete: u64,
    /// Frames missing at least one packet.
    pub incomplete: u64,
    /// Frames complete, but some packet later than its slot + playout.
    pub late: u64,
    /// Runs of consecutive frames that could not be shown on time.
    pub freeze_events: u64,
    /// Longest such run, frames.
    pub longest_freeze_frames: u64,
}

/// One reporting interval, by send schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalStats {
    /// Start of the interval, seconds after the first scheduled packet.
    pub start_s: f64,
    /// End of the interval: the next one's start, or for the last, partial
    /// one, the slot of the last packet sent.
    #[serde(default)]
    pub end_s: f64,
    /// Packets scheduled in the interval.
    pub sent: u64,
    /// Of those, received.
    pub received: u64,
    /// Of those, lost.
    pub lost: u64,
    /// Received payload bits per second.
    pub rate_bps: f64,
    /// RFC 3550 jitter after the last packet of the interval, ms.
    pub jitter_ms: f64,
    /// Largest PDV in the interval, ms.
    pub pdv_max_ms: f64,
}

/// One reporting interval as the test ran, by receive time: what the
/// receiver had counted then (the live lines; the final report's
/// [`IntervalStats`] are by send schedule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveInterval {
    /// Which stream (0 for the first, or only, one).
    pub stream: u32,
    /// Start, seconds after the first packet arrived.
    pub start_s: f64,
    /// End, seconds after the first packet arrived.
    pub end_s: f64,
    /// Packets received in it.
    pub received: u64,
    /// Sequence numbers passed over in it (reordered packets may still
    /// come; the final report is exact).
    pub lost: u64,
    /// Payload bytes received in it.
    pub bytes: u64,
    /// `bytes` over the interval's length, bits per second.
    pub rate_bps: f64,
    /// RFC 3550 jitter at its end, ms.
    pub jitter_ms: f64,
}

/// Everything the receiver measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiverReport {
    /// Packets the sender sent.
    pub sent: u64,
    /// Distinct packets received.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// `lost / sent`.
    pub loss_rate: f64,
    /// Received, but later than their scheduled slot + playout delay.
    pub late: u64,
    /// Extra copies of packets already received.
    pub duplicates: u64,
    /// Datagrams that were not part of this test (other session, garbage,
    /// sequence numbers the sender never sent).
    pub strangers: u64,
    /// RFC 4737 reordered packets (lower than the next expected number).
    pub reordered: u64,
    /// `reordered / received`.
    pub reordered_ratio: f64,
    /// Largest RFC 4737 reordering extent, packets.
    pub reorder_max_extent: u64,
    /// Sperf's order errors: packets lower than the one received just before.
    pub order_errors: u64,
    /// Maximal runs of consecutive losses (RFC 6534 loss episodes).
    pub loss_episodes: u64,
    /// Mean episode length, packets.
    pub loss_episode_mean: f64,
    /// Longest episode, packets.
    pub loss_episode_max: u64,
    /// Episodes by length.
    pub loss_episode_histogram: Vec<RunLength>,
    /// Sperf's burst losses: episodes of at least `burst_threshold` packets.
    pub burst_losses: u64,
    /// Threshold used for `burst_losses`.
    pub burst_threshold: u64,
    /// RFC 3611 burst/gap densities.
    pub rfc3611: BurstGap,
    /// RFC 3550 interarrival jitter over every packet, ms (as iperf3).
    pub jitter_rfc3550_ms: f64,
    /// Sperf's jitter: mean absolute deviation of recv−send from its
    /// drift-corrected mean, ms.
    pub jitter_sperf_ms: f64,
    /// Clock drift removed for Sperf's jitter, parts per million.
    pub clock_drift_ppm: f64,
    /// |IPDV| (RFC 3393) between consecutive sequence numbers, ms.
    pub ipdv_ms: Quantiles,
    /// PDV (RFC 5481): one-way delay minus the smallest one, ms.
    pub pdv_ms: Quantiles,
    /// Datagrams the receiving host's kernel dropped because the receiver
    /// did not read them in time (socket buffer overflow, SO_RXQ_OVFL):
    /// part of `lost`, but the receiving host's loss, not the path's.
    /// The driver, which alone can read the counter, passes it in.
    #[serde(default)]
    pub receiver_drops: u64,
    /// Received payload bits over the receive span.
    pub effective_bandwidth_bps: f64,
    /// Distinct payload bytes received.
    pub received_bytes: u64,
    /// First to last receive time, seconds.
    pub receive_span_s: f64,
    /// Frame delivery, with `--fps`.
    pub frames: Option<FrameStats>,
    /// Per-interval series.
    pub intervals: Vec<IntervalStats>,
}

/// What the sender measured about itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderReport {
    /// Packets sent.
    pub sent: u64,
    /// UDP payload bytes sent.
    pub bytes: u64,
    /// Packets the socket refused (counted, not retried).
    pub send_errors: u64,
    /// Bits per second over the sending span (first to last packet).
    pub achieved_bps: f64,
    /// How late each packet left against its scheduled slot, ms; packets
    /// that leave early in their train count as zero.
    pub pacing_error_ms: Quantiles,
    /// Most packets sent within any 1 ms window.
    pub max_packets_per_ms: u64,
    /// Packets the schedule would put in 1 ms (for comparison).
    pub scheduled_packets_per_ms: f64,
}

/// Round-trip times of one phase, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RttSummary {
    /// Echo replies received.
    pub samples: u64,
    /// Echo requests that got no reply.
    pub lost: u64,
    /// Smallest.
    pub min_ms: f64,
    /// Median.
    pub median_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}
