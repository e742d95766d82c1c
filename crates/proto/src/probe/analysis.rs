//! Receiver-side analysis of a probe test: from the per-packet arrival
//! records (in arrival order) to every metric of the report.
//!
//! The analysis runs once, after the test, over records kept in memory
//! (bounded by [`crate::probe::MAX_PACKETS`]), so each metric can follow
//! its standard's definition exactly instead of a streaming approximation.
//! Duplicates are removed first; every metric below is over first copies.

use serde::{Deserialize, Serialize};

use crate::probe::{Percentiles, Schedule, TestParams};

/// One received test-stream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrival {
    /// Sequence number from the packet.
    pub seq: u64,
    /// Sender's send time from the packet, ns on the sender's clock.
    pub send_ns: u64,
    /// Receive time, ns on the receiver's clock.
    pub recv_ns: u64,
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
    pub ipdv_ms: Percentiles,
    /// PDV (RFC 5481): one-way delay minus the smallest one, ms.
    pub pdv_ms: Percentiles,
    /// Datagrams the receiving host's kernel dropped because the receiver
    /// did not read them in time (socket buffer overflow, SO_RXQ_OVFL):
    /// part of `lost`, but the receiving host's loss, not the path's.
    /// Filled in by the driver, which alone can read the counter.
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

/// Gmin of RFC 3611 (the value it recommends).
pub const GMIN: u64 = 16;

const MISSING: i64 = i64::MIN;

/// Analyzes one test. `arrivals` in arrival order; `sent` packets were
/// sent with sequence numbers `0..sent`.
pub fn analyze(
    arrivals: &[Arrival],
    sent: u64,
    params: &TestParams,
    schedule: &Schedule,
) -> ReceiverReport {
    // `sent` comes from the other end of the control connection: a peer
    // that claims more than the schedule holds must not make us allocate
    // per claimed packet (u64::MAX would abort the process).
    let sent = sent.min(schedule.total_packets);
    let n = usize::try_from(sent).unwrap_or(usize::MAX);
    let pacer = schedule.pacer();
    let slot = |s: u64| pacer.slot(s).as_nanos() as i64;
    let size = u64::from(params.packet_size);
    let ppf = schedule.packets_per_frame.max(1);
    let interval_ns = (params.interval_ms.max(1) * 1_000_000) as i64;
    let mut r = ReceiverReport {
        sent,
        burst_threshold: u64::from(params.burst_threshold),
        ..ReceiverReport::default()
    };

    // Pass 1, arrival order: drop duplicates and strangers; one-way delay
    // per sequence number (on two clocks, so only its variation means
    // anything).
    let mut delay = vec![MISSING; n];
    let mut send = vec![0u64; n];
    let mut firsts: Vec<Arrival> = Vec::with_capacity(arrivals.len().min(n));
    for a in arrivals {
        let Some(d) = usize::try_from(a.seq).ok().and_then(|i| delay.get_mut(i)) else {
            r.strangers += 1;
            continue;
        };
        if *d != MISSING {
            r.duplicates += 1;
            continue;
        }
        *d = delay_ns(a);
        send[a.seq as usize] = a.send_ns;
        firsts.push(*a);
    }
    r.received = firsts.len() as u64;
    r.lost = sent - r.received;
    r.loss_rate = if sent > 0 {
        r.lost as f64 / sent as f64
    } else {
        0.0
    };
    r.received_bytes = r.received * size;
    let dmin = firsts.iter().map(delay_ns).min().unwrap_or(0);

    let buckets = if sent == 0 {
        0
    } else {
        (slot(sent - 1) / interval_ns) as usize + 1
    };
    r.intervals = (0..buckets)
        .map(|b| IntervalStats {
            start_s: (b as i64 * interval_ns) as f64 / 1e9,
            ..IntervalStats::default()
        })
        .collect();
    let bucket = |s: u64| ((slot(s) / interval_ns) as usize).min(buckets.saturating_sub(1));

    // Pass 2, arrival order of first copies: order, jitter, span.
    let mut prev: Option<(u64, i64)> = None;
    let mut jitter = 0.0f64;
    let mut next_exp = 0u64;
    // Arrival index of each new highest sequence number, ascending in both,
    // for RFC 4737's extent (distance back to the first later packet).
    let mut highs: Vec<(u64, usize)> = Vec::new();
    for (i, a) in firsts.iter().enumerate() {
        let d = delay_ns(a);
        if let Some((ps, pd)) = prev {
            if a.seq < ps {
                r.order_errors += 1;
            }
            jitter += (d.abs_diff(pd) as f64 - jitter) / 16.0;
        }
        prev = Some((a.seq, d));
        if a.seq < next_exp {
            r.reordered += 1;
            let j = highs.partition_point(|&(s, _)| s <= a.seq);
            if let Some(&(_, at)) = highs.get(j) {
                r.reorder_max_extent = r.reorder_max_extent.max((i - at) as u64);
            }
        } else {
            next_exp = a.seq + 1;
            highs.push((a.seq, i));
        }
        if let Some(iv) = r.intervals.get_mut(bucket(a.seq)) {
            iv.jitter_ms = jitter / 1e6;
        }
    }
    r.jitter_rfc3550_ms = jitter / 1e6;
    r.reordered_ratio = ratio(r.reordered, r.received);
    if let (Some(lo), Some(hi)) = (
        firsts.iter().map(|a| a.recv_ns).min(),
        firsts.iter().map(|a| a.recv_ns).max(),
    ) {
        let span = hi - lo;
        r.receive_span_s = span as f64 / 1e9;
        if span > 0 {
            r.effective_bandwidth_bps = r.received_bytes as f64 * 8.0 / r.receive_span_s;
        }
    }
    let (drift, mad) = sperf_jitter(&firsts);
    r.clock_drift_ppm = drift * 1e6;
    r.jitter_sperf_ms = mad / 1e6;

    // Pass 3, sequence order: loss runs, bursts, IPDV, PDV, lateness,
    // intervals and frames.
    let mut runs = std::collections::BTreeMap::<u64, u64>::new();
    let mut run = 0u64;
    let mut ipdv = Vec::new();
    let mut pdv = Vec::with_capacity(firsts.len());
    let mut bursts = BurstFinder::default();
    let mut frames = FrameStats::default();
    let mut frame_ok = true;
    let mut freeze = 0u64;
    let playout = params.playout_us as i64 * 1000;
    for s in 0..sent {
        let d = delay[s as usize];
        let b = bucket(s);
        r.intervals[b].sent += 1;
        if d == MISSING {
            run += 1;
            bursts.lost(s);
            r.intervals[b].lost += 1;
            frame_ok = false;
        } else {
            if run > 0 {
                *runs.entry(run).or_default() += 1;
                run = 0;
            }
            r.intervals[b].received += 1;
            let p = d.saturating_sub(dmin);
            pdv.push(p);
            r.intervals[b].pdv_max_ms = r.intervals[b].pdv_max_ms.max(p as f64 / 1e6);
            if s > 0 && delay[s as usize - 1] != MISSING {
                ipdv.push(i64::try_from(d.abs_diff(delay[s as usize - 1])).unwrap_or(i64::MAX));
            }
            // Arrival on the sender's clock had the path been at its best,
            // against the packet's slot: a receiver buffering `playout`
            // absorbs sender lateness and PDV up to that much.
            let arrival = (send[s as usize] as i64).saturating_add(p);
            if arrival.saturating_sub(slot(s)) > playout {
                r.late += 1;
                frame_ok = false;
            }
        }
        if schedule.video_frames && (s % ppf == ppf - 1 || s == sent - 1) {
            frames.frames += 1;
            let missing = (s - s % ppf..=s).any(|k| delay[k as usize] == MISSING);
            if missing {
                frames.incomplete += 1;
            }
            if frame_ok {
                frames.complete += 1;
                if freeze > 0 {
                    frames.freeze_events += 1;
                    frames.longest_freeze_frames = frames.longest_freeze_frames.max(freeze);
                    freeze = 0;
                }
            } else {
                freeze += 1;
            }
            frame_ok = true;
        }
    }
    if run > 0 {
        *runs.entry(run).or_default() += 1;
    }
    if freeze > 0 {
        frames.freeze_events += 1;
        frames.longest_freeze_frames = frames.longest_freeze_frames.max(freeze);
    }
    if schedule.video_frames {
        // A frame both late and incomplete is reported incomplete.
        frames.late = frames.frames - frames.complete - frames.incomplete;
        r.frames = Some(frames);
    }
    r.loss_episodes = runs.values().sum();
    r.loss_episode_max = runs.keys().next_back().copied().unwrap_or(0);
    r.loss_episode_mean = if r.loss_episodes > 0 {
        r.lost as f64 / r.loss_episodes as f64
    } else {
        0.0
    };
    r.burst_losses = runs
        .iter()
        .filter(|(len, _)| **len >= r.burst_threshold)
        .map(|(_, c)| c)
        .sum();
    r.loss_episode_histogram = runs
        .into_iter()
        .map(|(length, count)| RunLength { length, count })
        .collect();
    r.rfc3611 = bursts.finish(sent, r.lost);
    r.ipdv_ms = Percentiles::of_ns(&mut ipdv);
    r.pdv_ms = Percentiles::of_ns(&mut pdv);
    let last_len = if sent > 0 {
        (slot(sent - 1) % interval_ns) as f64 / 1e9
    } else {
        0.0
    };
    for (b, iv) in r.intervals.iter_mut().enumerate() {
        let secs = if b + 1 == buckets && last_len > 0.0 {
            // The last interval is partial; `sent` packets cover it.
            last_len * iv.sent as f64 / (iv.sent.max(2) - 1) as f64
        } else {
            interval_ns as f64 / 1e9
        };
        iv.rate_bps = (iv.received * size * 8) as f64 / secs;
    }
    r
}

/// One-way delay of `a`, ns. Send and receive times are on two clocks,
/// so only its variation means anything; the send time comes from the
/// datagram, so a hostile one wraps instead of overflowing, and the
/// differences taken from delays saturate. Never [`MISSING`], which marks
/// a packet not received.
fn delay_ns(a: &Arrival) -> i64 {
    (a.recv_ns as i64)
        .wrapping_sub(a.send_ns as i64)
        .max(MISSING + 1)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Least-squares line of delay against send time (the clock drift), and
/// the mean absolute residual: Sperf's jitter with its drift correction.
fn sperf_jitter(firsts: &[Arrival]) -> (f64, f64) {
    if firsts.len() < 2 {
        return (0.0, 0.0);
    }
    let n = firsts.len() as f64;
    // Centre on the first packet so f64 keeps nanosecond precision.
    let x0 = firsts[0].send_ns as f64;
    let y0 = firsts[0].recv_ns as f64 - x0;
    let xy = |a: &Arrival| {
        let x = a.send_ns as f64 - x0;
        (x, a.recv_ns as f64 - a.send_ns as f64 - y0)
    };
    let (mut sx, mut sy) = (0.0, 0.0);
    for a in firsts {
        let (x, y) = xy(a);
        sx += x;
        sy += y;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for a in firsts {
        let (x, y) = xy(a);
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let mad = firsts
        .iter()
        .map(|a| {
            let (x, y) = xy(a);
            (y - my - slope * (x - mx)).abs()
        })
        .sum::<f64>()
        / n;
    (slope, mad)
}

/// RFC 3611 burst finder. A burst runs from a loss to a loss with fewer
/// than Gmin packets received between any two of its losses; as in RFC
/// 3611's reference algorithm, a lone loss with Gmin received on either
/// side belongs to the gap, so a burst holds at least two losses.
#[derive(Debug, Default)]
struct BurstFinder {
    open: Option<(u64, u64, u64)>, // first, last, losses
    bursts: u64,
    burst_packets: u64,
    burst_lost: u64,
}

impl BurstFinder {
    fn lost(&mut self, s: u64) {
        match &mut self.open {
            Some((_, last, losses)) if s - *last - 1 < GMIN => {
                *last = s;
                *losses += 1;
            }
            _ => {
                self.close();
                self.open = Some((s, s, 1));
            }
        }
    }

    fn close(&mut self) {
        if let Some((first, last, losses)) = self.open.take()
            && losses >= 2
        {
            self.bursts += 1;
            self.burst_packets += last - first + 1;
            self.burst_lost += losses;
        }
    }

    fn finish(mut self, sent: u64, lost: u64) -> BurstGap {
        self.close();
        let gap_packets = sent - self.burst_packets;
        BurstGap {
            gmin: GMIN,
            bursts: self.bursts,
            burst_density: ratio(self.burst_lost, self.burst_packets),
            gap_density: ratio(lost - self.burst_lost, gap_packets),
            burst_packets: self.burst_packets,
            gap_packets,
        }
    }
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

impl RttSummary {
    /// Summarizes round-trip times in ns; `requests` echo requests were sent.
    pub fn of_ns(rtts: &mut [i64], requests: u64) -> RttSummary {
        let p = Percentiles::of_ns(rtts);
        RttSummary {
            samples: rtts.len() as u64,
            lost: requests.saturating_sub(rtts.len() as u64),
            min_ms: rtts.first().map_or(0.0, |v| *v as f64 / 1e6),
            median_ms: p.p50,
            p99_ms: p.p99,
            max_ms: p.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(fps: Option<(u32, u32)>) -> TestParams {
        TestParams {
            rate_bps: 8_000_000,
            duration_ms: 1000,
            packet_size: 1000,
            fps,
            reverse: false,
            records: false,
            playout_us: 20_000,
            burst_threshold: 5,
            burst_us: crate::probe::DEFAULT_BURST_US,
            interval_ms: 100,
        }
    }

    /// Arrivals of `seqs` in the given order, sent on schedule (1000 pps)
    /// with a constant delay of 1 ms and 10 us between arrivals.
    fn arrivals(seqs: &[u64]) -> Vec<Arrival> {
        seqs.iter()
            .enumerate()
            .map(|(i, &s)| Arrival {
                seq: s,
                send_ns: s * 1_000_000,
                recv_ns: (s * 1_000_000).max(i as u64 * 1_000_000) + 1_000_000,
            })
            .collect()
    }

    #[test]
    fn sperf_figure_2_and_3() {
        // Sperf fig. 2: 6 and 9..=14 lost out of 0..20.
        let p = params(None);
        let s = p.validate().unwrap();
        let seqs: Vec<u64> = (0..20)
            .filter(|s| *s != 6 && !(9..=14).contains(s))
            .collect();
        let r = analyze(&arrivals(&seqs), 20, &p, &s);
        assert_eq!((r.received, r.lost), (13, 7));
        assert_eq!(r.loss_episodes, 2);
        assert_eq!(r.burst_losses, 1);
        assert_eq!(r.loss_episode_max, 6);
        assert_eq!(
            r.loss_episode_histogram,
            vec![
                RunLength {
                    length: 1,
                    count: 1
                },
                RunLength {
                    length: 6,
                    count: 1
                }
            ]
        );
        // Sperf fig. 3: 7 then 4, 8 then 5 → two order errors.
        let seqs = [0u64, 1, 2, 3, 6, 7, 4, 8, 5, 9];
        let r = analyze(&arrivals(&seqs), 10, &p, &s);
        assert_eq!(r.order_errors, 2);
        assert_eq!(r.reordered, 2);
        assert_eq!(r.lost, 0);
        // 4 arrives 2 after 6 (first later packet); 5 arrives 4 after 6.
        assert_eq!(r.reorder_max_extent, 4);
    }

    #[test]
    fn duplicates_are_removed_first_and_strangers_kept_out() {
        let p = params(None);
        let s = p.validate().unwrap();
        let r = analyze(&arrivals(&[0, 1, 1, 2, 2, 2, 3, 99]), 4, &p, &s);
        assert_eq!(
            (r.received, r.lost, r.duplicates, r.strangers),
            (4, 0, 3, 1)
        );
        assert_eq!((r.reordered, r.order_errors), (0, 0));
    }

    #[test]
    fn sperf_order_errors_differ_from_rfc4737() {
        // One packet held back past three others: one order error for
        // Sperf, one reordered packet of extent 3 for RFC 4737.
        // Two late packets in a row: 2 reordered, Sperf counts only the first.
        let p = params(None);
        let s = p.validate().unwrap();
        let r = analyze(&arrivals(&[0, 3, 4, 5, 1, 2, 6]), 7, &p, &s);
        assert_eq!(r.reordered, 2);
        assert_eq!(r.order_errors, 1);
        assert_eq!(r.reorder_max_extent, 4);
    }

    #[test]
    fn rfc3611_bursts_and_gaps() {
        let p = params(None);
        let s = p.validate().unwrap();
        // 1000 packets; lone losses at 100 and 500 (gap); a burst 300..=310
        // losing 300, 302, 305, 310.
        let lost = [100u64, 300, 302, 305, 310, 500];
        let seqs: Vec<u64> = (0..1000).filter(|s| !lost.contains(s)).collect();
        let r = analyze(&arrivals(&seqs), 1000, &p, &s);
        assert_eq!(r.rfc3611.bursts, 1);
        assert_eq!(r.rfc3611.burst_packets, 11);
        assert!((r.rfc3611.burst_density - 4.0 / 11.0).abs() < 1e-12);
        assert!((r.rfc3611.gap_density - 2.0 / 989.0).abs() < 1e-12);
        assert_eq!(r.loss_episodes, 6);
        assert_eq!(r.burst_losses, 0);
    }

    #[test]
    fn jitter_pdv_and_drift() {
        let p = params(None);
        let s = p.validate().unwrap();
        // Delay alternates 1 ms / 1.2 ms on top of a 100 ppm drift.
        let a: Vec<Arrival> = (0..1000u64)
            .map(|k| {
                let send = k * 1_000_000;
                let wobble = if k % 2 == 1 { 200_000 } else { 0 };
                Arrival {
                    seq: k,
                    send_ns: send,
                    recv_ns: send + 1_000_000 + wobble + send / 10_000,
                }
            })
            .collect();
        let r = analyze(&a, 1000, &p, &s);
        // RFC 3550 converges to |D| = 0.2 ms (plus the 100 ns drift step).
        assert!(
            (r.jitter_rfc3550_ms - 0.2).abs() < 0.001,
            "{}",
            r.jitter_rfc3550_ms
        );
        // Sperf removes the drift: residuals ±0.1 ms.
        assert!(
            (r.jitter_sperf_ms - 0.1).abs() < 0.001,
            "{}",
            r.jitter_sperf_ms
        );
        assert!(
            (r.clock_drift_ppm - 100.0).abs() < 1.0,
            "{}",
            r.clock_drift_ppm
        );
        assert!((r.ipdv_ms.p50 - 0.2).abs() < 0.001);
        // PDV spans the wobble plus 999 × 100 ns of drift.
        assert!((r.pdv_ms.max - 0.2999).abs() < 0.001, "{}", r.pdv_ms.max);
        assert_eq!(r.late, 0);
        assert_eq!(r.intervals.len(), 10);
        assert_eq!(r.intervals[3].sent, 100);
        assert!((r.intervals[3].rate_bps - 8_000_000.0).abs() < 1.0);
        // 1000 packets × 8000 bits over 0.999 s + 0.2 ms wobble span.
        assert!((r.effective_bandwidth_bps / 8.0e6 - 1.0).abs() < 0.002);
    }

    #[test]
    fn frames_late_incomplete_and_freezes() {
        // 10 fps, 8 Mbit/s, 1000-byte packets: 100 packets per frame.
        let p = TestParams {
            playout_us: 50_000,
            ..params(Some((10, 1)))
        };
        let s = p.validate().unwrap();
        assert_eq!(s.packets_per_frame, 100);
        let mut a = Vec::new();
        for k in 0..s.total_packets {
            let f = k / 100;
            if f == 2 && k % 100 == 50 {
                continue; // frame 2 incomplete
            }
            let send = k * 1_000_000;
            // frames 5 and 6: last packet 80 ms late (beyond 50 ms playout)
            let extra = if (f == 5 || f == 6) && k % 100 == 99 {
                80_000_000
            } else {
                0
            };
            a.push(Arrival {
                seq: k,
                send_ns: send,
                recv_ns: send + 1_000_000 + extra,
            });
        }
        let r = analyze(&a, s.total_packets, &p, &s);
        let f = r.frames.unwrap();
        assert_eq!(f.frames, 10);
        assert_eq!(f.incomplete, 1);
        assert_eq!(f.late, 2);
        assert_eq!(f.complete, 7);
        assert_eq!(f.freeze_events, 2);
        assert_eq!(f.longest_freeze_frames, 2);
        assert_eq!(r.late, 2);
    }

    #[test]
    fn empty_and_hostile_input_never_panics() {
        let p = params(None);
        let s = p.validate().unwrap();
        let r = analyze(&[], 0, &p, &s);
        assert_eq!(r.received, 0);
        let r = analyze(&[], 5, &p, &s);
        assert_eq!((r.lost, r.loss_episodes, r.loss_episode_max), (5, 1, 5));
        let weird = [Arrival {
            seq: u64::MAX,
            send_ns: u64::MAX,
            recv_ns: 0,
        }];
        let r = analyze(&weird, 3, &p, &s);
        assert_eq!(r.strangers, 1);
    }

    #[test]
    fn a_delay_of_i64_min_is_not_taken_for_a_missing_packet() {
        // Found by the metrics_analyze fuzz target: recv - send wrapped to
        // the MISSING marker, so the packet and its duplicate were both
        // counted received, yet lost in pass 3 (and the burst finder's
        // counts underflowed).
        let p = params(None);
        let s = p.validate().unwrap();
        let odd = Arrival {
            seq: 1,
            send_ns: 1 << 63,
            recv_ns: 0,
        };
        let r = analyze(&[odd, odd], 3, &p, &s);
        assert_eq!((r.received, r.duplicates, r.lost), (1, 1, 2));
        assert_eq!(r.loss_episodes, 2);
    }

    #[test]
    fn a_claimed_sent_count_beyond_the_schedule_is_clamped() {
        // Found by fuzzing review: the server took `sent` from the client's
        // Done message unchecked and allocated 16 bytes per claimed packet.
        let p = params(None);
        let s = p.validate().unwrap();
        let r = analyze(&[], u64::MAX, &p, &s);
        assert_eq!(r.sent, s.total_packets);
        assert_eq!(r.lost, s.total_packets);
    }

    #[test]
    fn hostile_send_times_do_not_overflow_delays() {
        // Send times from datagrams a stranger wrote: delays at both ends
        // of i64, next to each other in arrival and in sequence order.
        let p = params(Some((10, 1)));
        let s = p.validate().unwrap();
        let a = [
            Arrival {
                seq: 0,
                send_ns: 1 << 63,
                recv_ns: 1_000_000,
            },
            Arrival {
                seq: 1,
                send_ns: 0,
                recv_ns: i64::MAX as u64,
            },
            Arrival {
                seq: 2,
                send_ns: u64::MAX,
                recv_ns: 1 << 63,
            },
            Arrival {
                seq: 3,
                send_ns: 3_000_000,
                recv_ns: 4_000_000,
            },
        ];
        let r = analyze(&a, 4, &p, &s);
        assert_eq!((r.received, r.lost), (4, 0));
        assert!(r.jitter_rfc3550_ms.is_finite() && r.jitter_rfc3550_ms > 0.0);
        assert!(r.ipdv_ms.max > 0.0 && r.pdv_ms.max > 0.0);
        assert!(r.late <= r.received);
    }
}
