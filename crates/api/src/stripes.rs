//! Report of `nagare recv --stripes N` (and of any `recv` with a second
//! ST 2022-7 leg): whole frames reassembled from stripe streams, what each
//! stripe and each leg delivered, and for every frame that did not arrive
//! whole, which stripes failed it.

use std::net::SocketAddr;

use nagare_proto::BitRate;
use nagare_proto::video::assembler::StripeCounters;
use serde::{Deserialize, Serialize};

use crate::video::{EndedBy, FrameList, RecvRtcp};

/// A frame that went out with stripes missing or incomplete.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameFailure {
    /// Frame index (0 for the first frame assembled, counting frame
    /// periods when the rate is known).
    pub index: u64,
    /// Its RTP timestamp.
    pub timestamp: u32,
    /// Stripes that never delivered it.
    pub missing: Vec<usize>,
    /// Stripes that delivered it with bytes missing.
    pub incomplete: Vec<usize>,
}

/// Counters of one leg of an ST 2022-7 pair.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegReport {
    /// Where this leg was received.
    pub listen: Option<SocketAddr>,
    /// Packets that came on this leg (copies included).
    pub received: u64,
    /// Packets of its span this leg never delivered.
    pub lost: u64,
    /// Copies of packets the other leg had delivered first (dropped).
    pub duplicates: u64,
    /// Packets only this leg delivered: losses of the other leg made good.
    pub recovered: u64,
    /// Packets that came too late to use.
    pub late: u64,
    /// Its RTCP with `--rtcp`: the leg sender's reports read on the
    /// leg's own RTCP port, and the receiver reports sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<RecvRtcp>,
}

/// What one stripe's stream delivered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StripeReport {
    /// Stripe index.
    pub stripe: usize,
    /// Frames of the stripe, as the assembler counted them.
    pub frames: StripeCounters,
    /// Distinct packets of the stripe's stream (after merging legs).
    pub packets_received: u64,
    /// Packets missing from its sequence range (after merging legs).
    pub packets_lost: u64,
    /// Packets not valid RTP / RFC 4175 for the stripe's format.
    pub packets_malformed: u64,
    /// Packets of another SSRC (dropped).
    pub packets_foreign: u64,
    /// Bytes of its distinct packets.
    pub bytes: u64,
    /// Datagrams the kernel dropped on its sockets.
    pub kernel_drops: u64,
    /// Packets the kernel wrote straight into their frame (the rest were
    /// copied there from a receive buffer).
    #[serde(default)]
    pub packets_in_place: u64,
    /// RTP timestamp of the first and last frame it delivered.
    pub first_timestamp: Option<u32>,
    /// See `first_timestamp`.
    pub last_timestamp: Option<u32>,
    /// Where the stream came from (first leg).
    pub sender: Option<SocketAddr>,
    /// Its legs when it had two (ST 2022-7), in leg order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub legs: Vec<LegReport>,
    /// Packets that neither leg delivered (with two legs).
    pub unrecovered: u64,
    /// Its RTCP with `--rtcp`: the sender's reports read on the stripe's
    /// RTCP port, and the receiver reports sent back (with two legs: its
    /// first leg's; each leg's is in `legs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<RecvRtcp>,
}

/// What `nagare recv --stripes N` saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StripesReport {
    /// Stripe rule: `lines`, `square` or `2si`.
    pub split: String,
    /// Number of stripes.
    pub stripes: usize,
    /// Receive threads used.
    pub threads: usize,
    /// Whole frames with every stripe complete.
    pub frames_complete: u64,
    /// Frames with a stripe missing or incomplete, by index.
    pub frames_incomplete: FrameList,
    /// Frames of which no stripe arrived, by index (rate known only).
    pub frames_lost: FrameList,
    /// Frames dropped at the start because they came before a stripe
    /// joined (a receiver started on a flowing stream joins each stripe
    /// at its own moment): the stream starts at the first frame every
    /// stripe delivered.
    #[serde(default)]
    pub frames_before_join: u64,
    /// For each incomplete frame (the first 1000), which stripes failed.
    pub failures: Vec<FrameFailure>,
    /// Frames written to the output.
    pub frames_written: u64,
    /// Seconds reassembly waited for the writer's queue: where this
    /// grows, the output (a disk) is slower than the stream, and stripes
    /// back up into the socket buffers.
    #[serde(default)]
    pub writer_wait_seconds: f64,
    /// Bytes of every stripe's distinct packets.
    pub bytes: u64,
    /// From the first to the last packet of any stripe, seconds.
    pub seconds: f64,
    /// Received rate (bytes over measured first-to-last time).
    pub rate_bps: BitRate,
    /// Worst spread of one whole frame's stripes: from the first stripe
    /// of the frame handed out to the last, microseconds (frames with
    /// bytes missing are left out: their stripes leave when evicted).
    pub skew_us_max: f64,
    /// Mean of that spread over frames, microseconds.
    pub skew_us_mean: f64,
    /// Per stripe, in stripe order.
    pub per_stripe: Vec<StripeReport>,
    /// Every expected frame arrived whole.
    pub all_complete: bool,
    /// Why the receiver stopped.
    pub ended_by: EndedBy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_keeps_its_field_names() {
        let r = StripesReport {
            split: "2si".into(),
            stripes: 8,
            failures: vec![FrameFailure {
                index: 3,
                timestamp: 9000,
                missing: vec![6],
                incomplete: vec![2],
            }],
            per_stripe: vec![StripeReport {
                stripe: 6,
                ..StripeReport::default()
            }],
            ..StripesReport::default()
        };
        let text = serde_json::to_string(&r).unwrap();
        for key in [
            r#""split":"2si""#,
            r#""failures":[{"index":3,"timestamp":9000,"missing":[6],"incomplete":[2]}]"#,
            r#""frames":{"complete":0,"incomplete":0,"missing":0,"late":0}"#,
            r#""skew_us_max":0.0"#,
            r#""ended_by":"interrupted""#,
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
        // A stripe on one leg has no leg list.
        assert!(!text.contains("\"legs\""), "{text}");
        assert_eq!(serde_json::from_str::<StripesReport>(&text).unwrap(), r);
    }
}
