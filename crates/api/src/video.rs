//! Reports of `nagare send`, `nagare recv` and `nagare demo` (`--json`).
//! Field names are the ones the docs (docs/recv.md, docs/send.md) document; keep them.

use std::fmt;
use std::net::SocketAddr;

use nagare_proto::stats::Quantiles;
use nagare_proto::{BitRate, Ssrc};
use serde::{Deserialize, Serialize};

/// What a sender did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SendReport {
    /// Frames sent completely (by every stripe).
    pub frames_sent: u64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// From the first to the last packet, seconds.
    pub seconds: f64,
    /// UDP payload rate over that span (bytes over measured time).
    pub rate_bps: BitRate,
    /// Packets per frame (of one stripe).
    pub packets_per_frame: u64,
    /// Packets released more than 100 µs behind their slot.
    pub packets_late: u64,
    /// Lateness of train starts against their slots, microseconds.
    pub lateness_us: Quantiles,
    /// Frame slots skipped because the ring was empty.
    pub underruns: u64,
    /// Frame slots passed over because the sender fell further behind
    /// than its ST 2110-21 slack (a host stall): it went on with the next
    /// slot it could keep on time, with the same frame unless the frame
    /// belongs to its slot (stripes, cluster legs).
    #[serde(default)]
    pub slipped: u64,
    /// Datagrams the kernel refused (no receiver on a unicast port).
    pub refused: u64,
    /// The destination refused trains from the first few sent to the last
    /// few: nothing listened there at all. A receiver that started late,
    /// or one that quit before the end, leaves this false.
    #[serde(default)]
    pub nobody_listened: bool,
    /// CPU seconds of the sending thread (pacing, headers, send calls),
    /// without the reader's.
    #[serde(default)]
    pub send_cpu_seconds: f64,
    /// Whether UDP GSO trains were used.
    pub gso: bool,
    /// Epoch frame number of the first frame (its RTP timestamp is this
    /// times the frame period at 90 kHz).
    pub first_frame: u64,
    /// RTP SSRC of the stream (of the first stripe).
    pub ssrc: Ssrc,
    /// Streams the frame was split into.
    pub stripes: usize,
    /// Why sending stopped early, if it did.
    pub error: Option<String>,
    /// Every frame sent as (frame index from the first slot, which is the
    /// receiver's index, xxh3), in order (demo only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<(u64, u64)>,
    /// The ST 2110-21 analysis of the first stream as it left (each
    /// packet at its send call's return, judged by a perfect clock),
    /// against the declared sender type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st2110_21: Option<crate::st2110::AnalyzeReport>,
    /// Where the pacing thread ran and what made its packets late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_host: Option<PacingHost>,
    /// RTCP: sender reports and BYEs sent, receiver reports read
    /// (absent with `--no-rtcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<SendRtcp>,
}

/// The RTCP of a send, over all its streams.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SendRtcp {
    /// Where each stream's RTCP went (the RTP port + 1, or + the stripe
    /// count with stripes).
    pub to: Vec<SocketAddr>,
    /// Sender reports sent (not counting those in the BYEs).
    pub sender_reports: u64,
    /// BYEs sent (one per stream that ended).
    pub byes: u64,
    /// Reception report blocks about the streams that came back.
    pub receiver_reports: u64,
    /// Datagrams on the RTCP port that were not valid RTCP.
    pub malformed: u64,
    /// Packets lost, as the latest receiver reports say (summed over
    /// the streams that had one); absent before any came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_lost: Option<i64>,
    /// Interarrival jitter the latest receiver reports say, the largest
    /// over the streams, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_jitter_ms: Option<f64>,
}

/// The RTCP of a receive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvRtcp {
    /// The local RTCP port (the SDP's `a=rtcp`, else the RTP port + 1).
    pub port: u16,
    /// Where the sender's reports came from, and receiver reports went.
    pub sender: Option<SocketAddr>,
    /// Sender reports read (those in a closing BYE compound too).
    pub sender_reports: u64,
    /// BYEs read.
    pub byes: u64,
    /// Receiver reports sent.
    pub receiver_reports: u64,
    /// Datagrams on the RTCP port that were not valid RTCP.
    pub malformed: u64,
}

/// Where a pacing thread ran, and what made it late (times in the
/// stall summary are nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PacingHost {
    /// CPUs the pacing thread was placed on (empty: not placed).
    pub cpus: Vec<usize>,
    /// CPUs the process's other threads were kept on (empty: anywhere).
    pub helper_cpus: Vec<usize>,
    /// Whether the pacing thread ran SCHED_FIFO.
    pub realtime: bool,
    /// Why it did not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_note: Option<String>,
    /// Whether the process's memory was locked against paging.
    pub memory_locked: bool,
    /// Whether the pacer's CPU was kept from halting while the pacer
    /// slept (a SCHED_IDLE holder thread; see docs/pacing.md).
    #[serde(default)]
    pub held_awake: bool,
    /// Late episodes and their causes (absent where /proc lacks the
    /// counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<nagare_proto::stats::stall::StallSummary>,
}

/// Runs of frame indices, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameList {
    /// `[first, last]` inclusive ranges, oldest first (at most
    /// [`FrameList::MAX_RANGES`] kept).
    pub ranges: Vec<[u64; 2]>,
    /// Total frames in the list.
    pub count: u64,
}

impl FrameList {
    /// Ranges kept: a long, lossy run must not grow a report without bound.
    pub const MAX_RANGES: usize = 1000;

    /// Adds frames `first..first + count` (after every frame already in).
    pub fn add(&mut self, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.count += count;
        let last = first + count - 1;
        if let Some(r) = self.ranges.last_mut()
            && r[1] + 1 == first
        {
            r[1] = last;
        } else if self.ranges.len() < Self::MAX_RANGES {
            self.ranges.push([first, last]);
        }
    }
}

impl fmt::Display for FrameList {
    /// `1,4-6,9` (the first 12 ranges, then `,...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().take(12).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r[0] == r[1] {
                write!(f, "{}", r[0])?;
            } else {
                write!(f, "{}-{}", r[0], r[1])?;
            }
        }
        if self.ranges.len() > 12 {
            f.write_str(",...")?;
        }
        Ok(())
    }
}

/// Why a receiver stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndedBy {
    /// Ctrl-C or SIGTERM.
    #[default]
    #[serde(rename = "interrupted")]
    Interrupted,
    /// Every frame of `--frames` accounted for.
    #[serde(rename = "frame count reached")]
    FrameCount,
    /// `--timeout` passed without a packet.
    #[serde(rename = "timeout")]
    Timeout,
    /// Writing the recording failed (see `output_error`).
    #[serde(rename = "output error")]
    OutputError,
    /// Another sender took the stream over and `--follow-ssrc` was not
    /// given (see `rivals`).
    #[serde(rename = "taken over")]
    TakenOver,
}

impl fmt::Display for EndedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndedBy::Interrupted => "interrupted",
            EndedBy::FrameCount => "frame count reached",
            EndedBy::Timeout => "timeout",
            EndedBy::OutputError => "output error",
            EndedBy::TakenOver => "another sender taking over",
        })
    }
}

/// One stream a receiver recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Take {
    /// Its RTP SSRC.
    pub ssrc: u32,
    /// Its first RTP sequence number.
    pub first_seq: u16,
    /// Where it came from.
    pub sender: Option<SocketAddr>,
    /// Recording index of its first frame.
    pub first_frame: u64,
}

/// Another stream on a receiver's port, counted as foreign.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rival {
    /// Its RTP SSRC.
    pub ssrc: u32,
    /// Where it came from.
    pub sender: Option<SocketAddr>,
    /// It took over after the recorded stream went silent (a restarted
    /// sender), rather than sending alongside it.
    pub took_over: bool,
}

/// What a receiver saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecvReport {
    /// Frames with every byte.
    pub frames_complete: u64,
    /// Frames with bytes missing, by index.
    pub frames_incomplete: FrameList,
    /// Frames of which nothing arrived, by index.
    pub frames_lost: FrameList,
    /// Frames written to the output.
    pub frames_written: u64,
    /// Distinct packets received.
    pub packets_received: u64,
    /// Packets missing from the sequence range.
    pub packets_lost: u64,
    /// Packets that arrived out of order.
    pub packets_reordered: u64,
    /// Duplicate packets (dropped).
    pub packets_duplicate: u64,
    /// Packets that were not valid RTP / RFC 4175 for this format.
    pub packets_malformed: u64,
    /// Packets for frames already finished.
    pub packets_late: u64,
    /// Packets from another SSRC than the stream's (dropped).
    pub packets_foreign: u64,
    /// Datagrams the kernel dropped for lack of socket buffer.
    pub kernel_drops: u64,
    /// Bytes of the stream's distinct packets.
    pub bytes: u64,
    /// From first to last packet, seconds.
    pub seconds: f64,
    /// Received rate (bytes over measured time).
    pub rate_bps: BitRate,
    /// RFC 3550 interarrival jitter, milliseconds.
    pub jitter_ms: f64,
    /// Whether every expected frame arrived complete.
    pub all_complete: bool,
    /// Why the receiver stopped.
    pub ended_by: EndedBy,
    /// Address the stream came from.
    pub sender: Option<SocketAddr>,
    /// Whether the kernel coalesced datagrams (UDP GRO).
    pub gro: bool,
    /// The streams recorded, in order: one, plus one per takeover
    /// followed with `--follow-ssrc`.
    #[serde(default)]
    pub takes: Vec<Take>,
    /// Other streams on the port that were not recorded.
    #[serde(default)]
    pub rivals: Vec<Rival>,
    /// Why writing the recording stopped: the OS error, the path and the
    /// frames written (the file is left holding whole frames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
    /// xxh3 of each complete frame by index (demo only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<(u64, u64)>,
    /// The ST 2110-21 analysis (`recv --analyze`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<crate::st2110::AnalyzeReport>,
    /// RTCP: the sender's reports read, receiver reports sent (absent
    /// where the RTCP port could not be bound, or for multicast).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<RecvRtcp>,
}

/// What `nagare demo` proved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DemoReport {
    /// Frames the demo sends.
    pub frames: u64,
    /// Frames received byte-identical (by xxh3).
    pub identical: u64,
    /// Indices of frames received but different from what was sent.
    pub differing: Vec<u64>,
    /// Every frame sent arrived complete and identical.
    pub pass: bool,
    /// The sender's report.
    pub sent: SendReport,
    /// The receiver's report.
    pub received: RecvReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lists_merge_runs_and_print_short() {
        let mut l = FrameList::default();
        l.add(1, 1);
        l.add(2, 2);
        l.add(7, 0);
        l.add(9, 1);
        assert_eq!(l.ranges, [[1, 3], [9, 9]]);
        assert_eq!(l.count, 4);
        assert_eq!(l.to_string(), "1-3,9");
    }

    #[test]
    fn reports_keep_their_json_field_names() {
        let r = RecvReport {
            ended_by: EndedBy::FrameCount,
            sender: Some("127.0.0.1:5004".parse().unwrap()),
            ..RecvReport::default()
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains(r#""ended_by":"frame count reached""#),
            "{text}"
        );
        assert!(text.contains(r#""sender":"127.0.0.1:5004""#), "{text}");
        assert!(
            text.contains(r#""frames_lost":{"ranges":[],"count":0}"#),
            "{text}"
        );
        assert!(!text.contains("checksums"));
        assert_eq!(serde_json::from_str::<RecvReport>(&text).unwrap(), r);
        let s = SendReport::default();
        let text = serde_json::to_string(&s).unwrap();
        for key in [
            "\"lateness_us\":{",
            "\"p99\":",
            "\"rate_bps\":0",
            "\"ssrc\":0",
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
        assert_eq!(serde_json::from_str::<SendReport>(&text).unwrap(), s);
    }
}
