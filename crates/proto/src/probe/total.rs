//! The total of a test's parallel streams (`-P`), as iperf3's SUM row:
//! counts and rates add up; ratios are recomputed from the sums; for
//! delays and jitter, where no exact merge exists without the samples,
//! the total is the worst stream's (percentiles, maxima) or the mean of
//! the streams' (jitter, drift), so a bad stream is never averaged away.

use std::collections::BTreeMap;

use crate::probe::report::{
    BurstGap, FrameStats, IntervalStats, ReceiverReport, RunLength, SenderReport,
};
use crate::stats::Quantiles;

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

fn worst(qs: impl Iterator<Item = Quantiles>) -> Quantiles {
    qs.fold(Quantiles::default(), |a, q| Quantiles {
        count: a.count + q.count,
        min: if a.count == 0 {
            q.min
        } else {
            a.min.min(q.min)
        },
        mean: a.mean.max(q.mean),
        p50: a.p50.max(q.p50),
        p95: a.p95.max(q.p95),
        p99: a.p99.max(q.p99),
        p999: a.p999.max(q.p999),
        max: a.max.max(q.max),
    })
}

/// The streams' senders as one.
pub fn sender_total(s: &[SenderReport]) -> SenderReport {
    SenderReport {
        sent: s.iter().map(|x| x.sent).sum(),
        bytes: s.iter().map(|x| x.bytes).sum(),
        send_errors: s.iter().map(|x| x.send_errors).sum(),
        achieved_bps: s.iter().map(|x| x.achieved_bps).sum(),
        pacing_error_ms: worst(s.iter().map(|x| x.pacing_error_ms)),
        max_packets_per_ms: s.iter().map(|x| x.max_packets_per_ms).sum(),
        scheduled_packets_per_ms: s.iter().map(|x| x.scheduled_packets_per_ms).sum(),
    }
}

/// The streams' receivers as one; one stream's report is its own total.
pub fn receiver_total(r: &[ReceiverReport]) -> ReceiverReport {
    if let [one] = r {
        return one.clone();
    }
    let sum = |f: fn(&ReceiverReport) -> u64| r.iter().map(f).sum::<u64>();
    let mut t = ReceiverReport {
        sent: sum(|x| x.sent),
        received: sum(|x| x.received),
        lost: sum(|x| x.lost),
        late: sum(|x| x.late),
        duplicates: sum(|x| x.duplicates),
        strangers: sum(|x| x.strangers),
        reordered: sum(|x| x.reordered),
        reorder_max_extent: r.iter().map(|x| x.reorder_max_extent).max().unwrap_or(0),
        order_errors: sum(|x| x.order_errors),
        loss_episodes: sum(|x| x.loss_episodes),
        loss_episode_max: r.iter().map(|x| x.loss_episode_max).max().unwrap_or(0),
        burst_losses: sum(|x| x.burst_losses),
        burst_threshold: r.first().map_or(0, |x| x.burst_threshold),
        jitter_rfc3550_ms: mean(r.iter().map(|x| x.jitter_rfc3550_ms)),
        jitter_sperf_ms: mean(r.iter().map(|x| x.jitter_sperf_ms)),
        clock_drift_ppm: mean(r.iter().map(|x| x.clock_drift_ppm)),
        ipdv_ms: worst(r.iter().map(|x| x.ipdv_ms)),
        pdv_ms: worst(r.iter().map(|x| x.pdv_ms)),
        receiver_drops: sum(|x| x.receiver_drops),
        effective_bandwidth_bps: r.iter().map(|x| x.effective_bandwidth_bps).sum(),
        received_bytes: sum(|x| x.received_bytes),
        receive_span_s: r.iter().map(|x| x.receive_span_s).fold(0.0, f64::max),
        ..ReceiverReport::default()
    };
    t.loss_rate = ratio(t.lost, t.sent);
    t.reordered_ratio = ratio(t.reordered, t.received);
    let in_episodes: f64 = r
        .iter()
        .map(|x| x.loss_episode_mean * x.loss_episodes as f64)
        .sum();
    t.loss_episode_mean = if t.loss_episodes == 0 {
        0.0
    } else {
        in_episodes / t.loss_episodes as f64
    };
    t.loss_episode_histogram = histogram(r);
    t.rfc3611 = burst_gap(r);
    t.frames = frames(r);
    t.intervals = intervals(r);
    t
}

fn histogram(r: &[ReceiverReport]) -> Vec<RunLength> {
    let mut h: BTreeMap<u64, u64> = BTreeMap::new();
    for run in r.iter().flat_map(|x| &x.loss_episode_histogram) {
        *h.entry(run.length).or_default() += run.count;
    }
    h.into_iter()
        .map(|(length, count)| RunLength { length, count })
        .collect()
}

fn burst_gap(r: &[ReceiverReport]) -> BurstGap {
    let g = |f: fn(&BurstGap) -> u64| r.iter().map(|x| f(&x.rfc3611)).sum::<u64>();
    let (bp, gp) = (g(|b| b.burst_packets), g(|b| b.gap_packets));
    // Densities weighted by the packets they are over.
    let lost_in = |d: fn(&BurstGap) -> f64, n: fn(&BurstGap) -> u64| {
        r.iter()
            .map(|x| d(&x.rfc3611) * n(&x.rfc3611) as f64)
            .sum::<f64>()
    };
    BurstGap {
        gmin: r.first().map_or(0, |x| x.rfc3611.gmin),
        bursts: g(|b| b.bursts),
        burst_density: if bp == 0 {
            0.0
        } else {
            lost_in(|b| b.burst_density, |b| b.burst_packets) / bp as f64
        },
        gap_density: if gp == 0 {
            0.0
        } else {
            lost_in(|b| b.gap_density, |b| b.gap_packets) / gp as f64
        },
        burst_packets: bp,
        gap_packets: gp,
    }
}

fn frames(r: &[ReceiverReport]) -> Option<FrameStats> {
    let all: Vec<&FrameStats> = r.iter().filter_map(|x| x.frames.as_ref()).collect();
    if all.is_empty() {
        return None;
    }
    let sum = |f: fn(&FrameStats) -> u64| all.iter().map(|x| f(x)).sum::<u64>();
    Some(FrameStats {
        frames: sum(|f| f.frames),
        complete: sum(|f| f.complete),
        incomplete: sum(|f| f.incomplete),
        late: sum(|f| f.late),
        freeze_events: sum(|f| f.freeze_events),
        longest_freeze_frames: all
            .iter()
            .map(|f| f.longest_freeze_frames)
            .max()
            .unwrap_or(0),
    })
}

/// Interval by interval (the streams share the schedule's grid).
fn intervals(r: &[ReceiverReport]) -> Vec<IntervalStats> {
    let n = r.iter().map(|x| x.intervals.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let ivs: Vec<&IntervalStats> = r.iter().filter_map(|x| x.intervals.get(i)).collect();
            let first = ivs.first().map_or(IntervalStats::default(), |x| **x);
            IntervalStats {
                start_s: first.start_s,
                end_s: ivs.iter().map(|x| x.end_s).fold(0.0, f64::max),
                sent: ivs.iter().map(|x| x.sent).sum(),
                received: ivs.iter().map(|x| x.received).sum(),
                lost: ivs.iter().map(|x| x.lost).sum(),
                rate_bps: ivs.iter().map(|x| x.rate_bps).sum(),
                jitter_ms: mean(ivs.iter().map(|x| x.jitter_ms)),
                pdv_max_ms: ivs.iter().map(|x| x.pdv_max_ms).fold(0.0, f64::max),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(sent: u64, lost: u64, bps: f64, p99: f64) -> ReceiverReport {
        ReceiverReport {
            sent,
            received: sent - lost,
            lost,
            loss_rate: ratio(lost, sent),
            loss_episodes: u64::from(lost > 0),
            loss_episode_mean: lost as f64,
            loss_episode_max: lost,
            effective_bandwidth_bps: bps,
            pdv_ms: Quantiles {
                count: sent - lost,
                p99,
                ..Quantiles::default()
            },
            intervals: vec![IntervalStats {
                sent,
                received: sent - lost,
                rate_bps: bps,
                ..IntervalStats::default()
            }],
            ..ReceiverReport::default()
        }
    }

    #[test]
    fn counts_add_ratios_recompute_and_delays_take_the_worst() {
        let t = receiver_total(&[stream(1000, 0, 1e6, 0.2), stream(1000, 10, 2e6, 0.9)]);
        assert_eq!((t.sent, t.received, t.lost), (2000, 1990, 10));
        assert_eq!(t.loss_rate, 0.005);
        assert_eq!((t.loss_episodes, t.loss_episode_max), (1, 10));
        assert_eq!(t.loss_episode_mean, 10.0);
        assert_eq!(t.effective_bandwidth_bps, 3e6);
        assert_eq!((t.pdv_ms.p99, t.pdv_ms.count), (0.9, 1990));
        assert_eq!(t.intervals.len(), 1);
        assert_eq!((t.intervals[0].sent, t.intervals[0].rate_bps), (2000, 3e6));
        let one = stream(5, 1, 1.0, 1.0);
        assert_eq!(receiver_total(std::slice::from_ref(&one)), one);
    }

    #[test]
    fn senders_add_up() {
        let s = SenderReport {
            sent: 10,
            bytes: 1000,
            achieved_bps: 8000.0,
            ..SenderReport::default()
        };
        let t = sender_total(&[s.clone(), s]);
        assert_eq!((t.sent, t.bytes, t.achieved_bps), (20, 2000, 16000.0));
    }
}
