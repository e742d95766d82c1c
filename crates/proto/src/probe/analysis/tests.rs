use super::*;
use crate::probe::params::DEFAULT_BURST_US;

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
        burst_us: DEFAULT_BURST_US,
        interval_ms: 100,
        streams: 1,
        bidir: false,
    }
}

/// Arrivals of `seqs` in the given order, sent on schedule (1000 pps)
/// with a constant delay of 1 ms and 10 us between arrivals.
fn arrivals(seqs: &[u64]) -> Vec<Arrival> {
    seqs.iter()
        .enumerate()
        .map(|(i, &s)| Arrival {
            seq: s,
            sent_at: Nanos(s * 1_000_000),
            received_at: Nanos((s * 1_000_000).max(i as u64 * 1_000_000) + 1_000_000),
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
                sent_at: Nanos(send),
                received_at: Nanos(send + 1_000_000 + wobble + send / 10_000),
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
            sent_at: Nanos(send),
            received_at: Nanos(send + 1_000_000 + extra),
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
        sent_at: Nanos(u64::MAX),
        received_at: Nanos(0),
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
        sent_at: Nanos(1 << 63),
        received_at: Nanos(0),
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
            sent_at: Nanos(1 << 63),
            received_at: Nanos(1_000_000),
        },
        Arrival {
            seq: 1,
            sent_at: Nanos(0),
            received_at: Nanos(i64::MAX as u64),
        },
        Arrival {
            seq: 2,
            sent_at: Nanos(u64::MAX),
            received_at: Nanos(1 << 63),
        },
        Arrival {
            seq: 3,
            sent_at: Nanos(3_000_000),
            received_at: Nanos(4_000_000),
        },
    ];
    let r = analyze(&a, 4, &p, &s);
    assert_eq!((r.received, r.lost), (4, 0));
    assert!(r.jitter_rfc3550_ms.is_finite() && r.jitter_rfc3550_ms > 0.0);
    assert!(r.ipdv_ms.max > 0.0 && r.pdv_ms.max > 0.0);
    assert!(r.late <= r.received);
}

#[test]
fn sender_log_measures_bursts_and_lateness() {
    let p = params(None);
    let mut l = SenderLog::new(&p.validate().unwrap());
    // 10 packets 100 us apart, 1 us late; then 5 in one instant, 0.5 ms
    // late; then one 50 us early (early in its train counts as 0).
    for i in 0..10 {
        l.record(Nanos(i * 100_000), Nanos(i * 100_000 + 1000), 100);
    }
    for _ in 0..5 {
        l.record(Nanos(1_000_000), Nanos(1_500_000), 100);
    }
    l.record(Nanos(1_550_000), Nanos(1_500_000), 100);
    l.error();
    let r = l.finish();
    assert_eq!((r.sent, r.send_errors, r.bytes), (16, 1, 1600));
    // Within 1 ms of 1.5 ms: the five sent from 0.501 ms on, then six.
    assert_eq!(r.max_packets_per_ms, 11);
    assert_eq!(r.pacing_error_ms.max, 0.5);
    assert_eq!(r.pacing_error_ms.min, 0.0);
    assert_eq!(r.pacing_error_ms.p50, 0.001);
    assert_eq!(r.pacing_error_ms.count, 16);
    // 1000 packets/s scheduled: 1 per ms.
    assert_eq!(r.scheduled_packets_per_ms, 1.0);
    // 15 × 100 bytes after the first over 1.499 ms.
    let want = 15.0 * 100.0 * 8.0 / 1.499e-3;
    assert!((r.achieved_bps - want).abs() < 1e-3, "{}", r.achieved_bps);
}

#[test]
fn rtt_summary_counts_lost_requests() {
    let d: Distribution = [3_000_000u64, 1_000_000, 2_000_000].into_iter().collect();
    let s = RttSummary::of(&d, 5);
    assert_eq!((s.samples, s.lost), (3, 2));
    // Extremes exact, percentiles within the Distribution's 0.1%.
    assert_eq!((s.min_ms, s.p99_ms, s.max_ms), (1.0, 3.0, 3.0));
    assert!((s.median_ms - 2.0).abs() <= 0.002, "{}", s.median_ms);
    assert_eq!(RttSummary::of(&Distribution::new(), 2).lost, 2);
}
