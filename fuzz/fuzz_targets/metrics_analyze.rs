//! `probe::analyze` on arbitrary arrival records, as a receiver would
//! run it after a test whose datagrams anyone could have sent.
//!
//! Input: `rate (4) | duration (4) | packet size (2) | fps (1) |
//! playout (4) | burst threshold (2) | interval (2) | sent (2)`, each
//! mapped into the range `TestParams::validate` accepts, then records of
//! `seq (2 or 8) | send_ns (8) | recv_ns (8)`: a seq byte with its top bit
//! clear is a small sequence number, else 8 raw bytes follow.
//! `sent` is at most 4096 and at most what the schedule plans.
//! Invariants: no panic; counts agree with a set-based model (received,
//! duplicates, strangers, lost = sent - received); loss episodes add up to
//! the losses; intervals add up to the totals; RFC 3611 packets add up to
//! `sent`; ratios lie in [0, 1]; every float in the report is finite and
//! percentiles are ordered; the report fits one control frame and reads
//! back; heap use stays within a bound set by `sent`, the records and the
//! number of intervals.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader};
use nagare_proto::Nanos;
use nagare_proto::probe::{
    self, Arrival, ControlMessage, FRAME_HEADER_LEN, IntervalStats, MAX_FRAME_LEN, ReceiverReport,
    Schedule, TestParams, analyze,
};
use nagare_proto::stats::Quantiles;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Largest `sent` tried.
const MAX_SENT: u64 = 4096;

/// `raw` mapped into `min..=max`.
fn span(raw: u64, min: u64, max: u64) -> u64 {
    min + raw % (max - min + 1)
}

fn finite(what: &str, v: f64) {
    assert!(v.is_finite(), "{what} = {v}");
}

fn percentiles(what: &str, p: &Quantiles) {
    for v in [p.min, p.mean, p.p50, p.p95, p.p99, p.p999, p.max] {
        finite(what, v);
    }
    assert!(
        p.min <= p.p50
            && p.p50 <= p.p95
            && p.p95 <= p.p99
            && p.p99 <= p.p999
            && p.p999 <= p.max
            && p.min <= p.mean
            && p.mean <= p.max,
        "{what} out of order: {p:?}"
    );
}

fn check_floats(r: &ReceiverReport) {
    for (what, v) in [
        ("loss_rate", r.loss_rate),
        ("reordered_ratio", r.reordered_ratio),
        ("loss_episode_mean", r.loss_episode_mean),
        ("rfc3611.burst_density", r.rfc3611.burst_density),
        ("rfc3611.gap_density", r.rfc3611.gap_density),
        ("jitter_rfc3550_ms", r.jitter_rfc3550_ms),
        ("jitter_sperf_ms", r.jitter_sperf_ms),
        ("clock_drift_ppm", r.clock_drift_ppm),
        ("effective_bandwidth_bps", r.effective_bandwidth_bps),
        ("receive_span_s", r.receive_span_s),
    ] {
        finite(what, v);
    }
    for (what, v) in [
        ("loss_rate", r.loss_rate),
        ("reordered_ratio", r.reordered_ratio),
        ("burst_density", r.rfc3611.burst_density),
        ("gap_density", r.rfc3611.gap_density),
    ] {
        assert!((0.0..=1.0).contains(&v), "{what} = {v}");
    }
    assert!(r.jitter_rfc3550_ms >= 0.0 && r.jitter_sperf_ms >= 0.0);
    percentiles("ipdv", &r.ipdv_ms);
    assert!(r.ipdv_ms.p50 >= 0.0, "|IPDV| is negative: {:?}", r.ipdv_ms);
    percentiles("pdv", &r.pdv_ms);
    assert!(
        r.pdv_ms.p50 >= 0.0,
        "PDV below the minimum delay: {:?}",
        r.pdv_ms
    );
    for iv in &r.intervals {
        for v in [iv.start_s, iv.rate_bps, iv.jitter_ms, iv.pdv_max_ms] {
            finite("interval", v);
        }
    }
}

/// The test's parameters from the input's header, mapped into range.
fn params(r: &mut Reader<'_>) -> (TestParams, u16) {
    let (rate, duration, size) = (r.u32(), r.u32(), r.u16());
    let fps = r.u8();
    let (playout, burst, interval, sent) = (r.u32(), r.u16(), r.u16(), r.u16());
    let params = TestParams {
        rate_bps: span(
            u64::from(rate) * 100_000,
            probe::MIN_RATE_BPS,
            probe::MAX_RATE_BPS,
        ),
        duration_ms: span(
            u64::from(duration),
            probe::MIN_DURATION_MS,
            probe::MAX_DURATION_MS,
        ),
        packet_size: span(
            u64::from(size),
            probe::MIN_PACKET_SIZE,
            probe::MAX_PACKET_SIZE,
        ) as u32,
        fps: (fps != 0).then_some((u32::from(fps), 1 + u32::from(fps & 1) * 1000)),
        reverse: false,
        records: false,
        playout_us: span(u64::from(playout) * 4, 0, probe::MAX_PLAYOUT_US),
        burst_threshold: 1 + u32::from(burst),
        // The train window only shapes sending; analysis ignores it.
        burst_us: probe::DEFAULT_BURST_US,
        interval_ms: span(u64::from(interval), 10, probe::MAX_INTERVAL_MS),
        streams: 1,
        bidir: false,
    };
    (params, sent)
}

/// The records after the header.
fn arrivals(r: &mut Reader<'_>) -> Vec<Arrival> {
    let mut arrivals = Vec::new();
    while r.remaining() > 0 {
        let tag = r.u8();
        let seq = if tag & 0x80 == 0 {
            u64::from(tag)
        } else {
            r.u64()
        };
        arrivals.push(Arrival {
            seq,
            sent_at: Nanos(r.u64()),
            received_at: Nanos(r.u64()),
        });
    }
    arrivals
}

/// Counts against a set-based model; returns the distinct sequence
/// numbers received.
fn check_counts(rep: &ReceiverReport, arrivals: &[Arrival], packet_size: u32) -> HashSet<u64> {
    let sent = rep.sent;
    let mut seen = HashSet::new();
    let (mut strangers, mut duplicates) = (0, 0);
    for a in arrivals {
        if a.seq >= sent {
            strangers += 1;
        } else if !seen.insert(a.seq) {
            duplicates += 1;
        }
    }
    let received = seen.len() as u64;
    assert_eq!(
        (rep.received, rep.duplicates, rep.strangers),
        (received, duplicates, strangers)
    );
    assert_eq!(rep.lost, sent - received);
    assert!(rep.late <= rep.received);
    assert!(rep.reordered <= rep.received);
    assert!(rep.order_errors <= rep.received.saturating_sub(1));
    assert!(rep.reordered == 0 || rep.reorder_max_extent >= 1);
    assert_eq!(rep.received_bytes, received * u64::from(packet_size));
    assert_eq!(rep.pdv_ms.count, received);
    assert!(rep.ipdv_ms.count < received.max(1));
    seen
}

/// Loss episodes are the maximal runs of missing sequence numbers.
fn check_losses(rep: &ReceiverReport, seen: &HashSet<u64>) {
    let sent = rep.sent;
    let mut runs = std::collections::BTreeMap::<u64, u64>::new();
    let mut run = 0;
    for s in 0..=sent {
        if s < sent && !seen.contains(&s) {
            run += 1;
        } else if run > 0 {
            *runs.entry(run).or_default() += 1;
            run = 0;
        }
    }
    let hist: Vec<(u64, u64)> = rep
        .loss_episode_histogram
        .iter()
        .map(|r| (r.length, r.count))
        .collect();
    assert_eq!(hist, runs.into_iter().collect::<Vec<_>>());
    assert_eq!(rep.loss_episodes, hist.iter().map(|h| h.1).sum::<u64>());
    assert_eq!(rep.lost, hist.iter().map(|h| h.0 * h.1).sum::<u64>());
    assert_eq!(rep.loss_episode_max, hist.last().map_or(0, |h| h.0));
    assert!(rep.burst_losses <= rep.loss_episodes);
    assert_eq!(rep.rfc3611.burst_packets + rep.rfc3611.gap_packets, sent);
}

/// Intervals partition the packets; frames add up.
fn check_intervals_and_frames(rep: &ReceiverReport, schedule: &Schedule) {
    let sent = rep.sent;
    let sum = |f: fn(&IntervalStats) -> u64| rep.intervals.iter().map(f).sum::<u64>();
    assert_eq!(sum(|i| i.sent), sent);
    assert_eq!(sum(|i| i.received), rep.received);
    assert_eq!(sum(|i| i.lost), rep.lost);
    for iv in &rep.intervals {
        assert_eq!(iv.received + iv.lost, iv.sent);
    }
    assert!(sent == 0 || !rep.intervals.is_empty());
    match (schedule.video_frames, rep.frames) {
        (false, None) => {}
        (true, Some(f)) => {
            assert_eq!(f.frames, sent.div_ceil(schedule.packets_per_frame));
            assert_eq!(f.complete + f.incomplete + f.late, f.frames);
            assert!(f.longest_freeze_frames <= f.frames);
            assert!(f.freeze_events <= f.frames);
        }
        (video, frames) => panic!("video frames {video} but frame stats {frames:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let (params, sent) = params(&mut r);
    let Ok(schedule) = params.validate() else {
        return;
    };
    let sent = (u64::from(sent) % (MAX_SENT + 1)).min(schedule.total_packets);
    let arrivals = arrivals(&mut r);

    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let rep = analyze(&arrivals, sent, &params, &schedule);
    let used = CountingAlloc::peak() - base;

    assert_eq!(rep.sent, sent);
    let seen = check_counts(&rep, &arrivals, params.packet_size);
    check_losses(&rep, &seen);
    check_intervals_and_frames(&rep, &schedule);
    check_floats(&rep);

    // Linear in what it was given: two vectors per sent packet, a copy of
    // the first arrivals and the intervals; plus the PDV and IPDV
    // distributions, HDR histograms whose size grows with the logarithm
    // of the largest delay: 55296 counters (442 KB) up to 2^63 ns, in a
    // vector that may hold twice that, plus the copy while it grows
    // (found by this target: 2.2 MB for the two).
    let bound = 128 * (sent as usize + arrivals.len() + rep.intervals.len()) + (4 << 20);
    assert!(used <= bound, "{used} heap bytes, bound {bound}");

    // The server sends the report in one control frame.
    let frame = ControlMessage::Report {
        receiver: vec![rep],
        records: 0,
    }
    .to_frame();
    assert!(
        frame.len() - FRAME_HEADER_LEN <= MAX_FRAME_LEN,
        "report of {} bytes does not fit a control frame",
        frame.len()
    );
    ControlMessage::from_json(&frame[FRAME_HEADER_LEN..]).expect("the report reads back");
});
