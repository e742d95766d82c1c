//! From measurements to reports: the receiver's analysis of a test (arrival
//! records in arrival order to every metric of [`ReceiverReport`]), the
//! sender's log of its own send times ([`SenderLog`]) and the RTT summary.
//!
//! The receiver's analysis runs once, after the test, over records kept in
//! memory (bounded by [`crate::probe::MAX_PACKETS`]), so each metric can
//! follow its standard's definition exactly instead of a streaming
//! approximation. Duplicates are removed first; every metric below is over
//! first copies. Percentiles come from [`Distribution`].

use std::collections::{BTreeMap, VecDeque};

use crate::probe::params::{Schedule, TestParams};
use crate::probe::report::{
    Arrival, BurstGap, FrameStats, IntervalStats, ReceiverReport, RttSummary, RunLength,
    SenderReport,
};
use crate::stats::Distribution;
use crate::units::Nanos;

/// Gmin of RFC 3611 (the value it recommends).
pub const GMIN: u64 = 16;

/// Nanoseconds per millisecond, the unit of the reports' delays.
const MS: f64 = 1e6;

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
    let mut r = ReceiverReport {
        sent,
        burst_threshold: u64::from(params.burst_threshold),
        ..ReceiverReport::default()
    };
    let firsts = Firsts::of(arrivals, sent, &mut r);
    let size = u64::from(params.packet_size);
    r.received = firsts.list.len() as u64;
    r.lost = sent - r.received;
    r.loss_rate = ratio(r.lost, sent);
    r.received_bytes = r.received * size;
    let grid = Grid::new(params, schedule, sent);
    r.intervals = grid.intervals();
    arrival_order(&firsts.list, &grid, &mut r);
    SeqPass::new(params, schedule, &firsts).run(&grid, &mut r);
    grid.rates(size, &mut r.intervals);
    r
}

/// Pass 1, arrival order: duplicates and strangers dropped, the one-way
/// delay (on two clocks, so only its variation means anything) and send
/// time of each sequence number, and the first copies in arrival order.
struct Firsts {
    delay: Vec<i64>,
    send: Vec<i64>,
    list: Vec<Arrival>,
    /// The smallest delay, for PDV.
    min_delay: i64,
}

impl Firsts {
    fn of(arrivals: &[Arrival], sent: u64, r: &mut ReceiverReport) -> Firsts {
        let n = usize::try_from(sent).unwrap_or(usize::MAX);
        let mut delay = vec![MISSING; n];
        let mut send = vec![0i64; n];
        let mut list: Vec<Arrival> = Vec::with_capacity(arrivals.len().min(n));
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
            send[a.seq as usize] = a.sent_at.as_nanos() as i64;
            list.push(*a);
        }
        let min_delay = list.iter().map(delay_ns).min().unwrap_or(0);
        Firsts {
            delay,
            send,
            list,
            min_delay,
        }
    }
}

/// The reporting intervals over the send schedule.
struct Grid {
    interval_ns: i64,
    buckets: usize,
    /// Slot of the last packet sent.
    last_slot: i64,
    schedule: Schedule,
}

impl Grid {
    fn new(params: &TestParams, schedule: &Schedule, sent: u64) -> Grid {
        let interval_ns = params.interval().as_nanos().max(1) as i64;
        let last_slot = if sent == 0 {
            0
        } else {
            schedule.slot(sent - 1).as_nanos() as i64
        };
        let buckets = if sent == 0 {
            0
        } else {
            (last_slot / interval_ns) as usize + 1
        };
        Grid {
            interval_ns,
            buckets,
            last_slot,
            schedule: *schedule,
        }
    }

    fn slot(&self, seq: u64) -> i64 {
        self.schedule.slot(seq).as_nanos() as i64
    }

    fn bucket(&self, seq: u64) -> usize {
        ((self.slot(seq) / self.interval_ns) as usize).min(self.buckets.saturating_sub(1))
    }

    fn intervals(&self) -> Vec<IntervalStats> {
        (0..self.buckets)
            .map(|b| IntervalStats {
                start_s: (b as i64 * self.interval_ns) as f64 / 1e9,
                ..IntervalStats::default()
            })
            .collect()
    }

    /// Each interval's received rate; the last one is partial, and its
    /// `sent` packets cover it.
    fn rates(&self, size: u64, intervals: &mut [IntervalStats]) {
        let last_len = (self.last_slot % self.interval_ns) as f64 / 1e9;
        for (b, iv) in intervals.iter_mut().enumerate() {
            let secs = if b + 1 == self.buckets && last_len > 0.0 {
                last_len * iv.sent as f64 / (iv.sent.max(2) - 1) as f64
            } else {
                self.interval_ns as f64 / 1e9
            };
            iv.rate_bps = (iv.received * size * 8) as f64 / secs;
            iv.end_s = if b + 1 == self.buckets && last_len > 0.0 {
                iv.start_s + last_len
            } else {
                iv.start_s + self.interval_ns as f64 / 1e9
            };
        }
    }
}

/// Pass 2, arrival order of first copies: order errors, RFC 4737
/// reordering, RFC 3550 jitter, the receive span and Sperf's jitter.
fn arrival_order(firsts: &[Arrival], grid: &Grid, r: &mut ReceiverReport) {
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
        if let Some(iv) = r.intervals.get_mut(grid.bucket(a.seq)) {
            iv.jitter_ms = jitter / MS;
        }
    }
    r.jitter_rfc3550_ms = jitter / MS;
    r.reordered_ratio = ratio(r.reordered, r.received);
    let received = firsts.iter().map(|a| a.received_at);
    if let (Some(lo), Some(hi)) = (received.clone().min(), received.max()) {
        let span = hi - lo;
        r.receive_span_s = span.as_secs_f64();
        if span > Nanos::ZERO {
            r.effective_bandwidth_bps = r.received_bytes as f64 * 8.0 / r.receive_span_s;
        }
    }
    let (drift, mad) = sperf_jitter(firsts);
    r.clock_drift_ppm = drift * 1e6;
    r.jitter_sperf_ms = mad / MS;
}

/// Pass 3, sequence order: loss runs, bursts, IPDV, PDV, lateness,
/// intervals and frames.
struct SeqPass<'a> {
    firsts: &'a Firsts,
    schedule: &'a Schedule,
    playout: i64,
    runs: BTreeMap<u64, u64>,
    run: u64,
    ipdv: Distribution,
    pdv: Distribution,
    bursts: BurstFinder,
    frames: Frames,
}

impl<'a> SeqPass<'a> {
    fn new(params: &TestParams, schedule: &'a Schedule, firsts: &'a Firsts) -> SeqPass<'a> {
        SeqPass {
            firsts,
            schedule,
            playout: params.playout().as_nanos() as i64,
            runs: BTreeMap::new(),
            run: 0,
            ipdv: Distribution::new(),
            pdv: Distribution::new(),
            bursts: BurstFinder::default(),
            frames: Frames::new(),
        }
    }

    fn run(mut self, grid: &Grid, r: &mut ReceiverReport) {
        let firsts: &Firsts = self.firsts;
        let delay = &firsts.delay;
        for s in 0..r.sent {
            let iv = &mut r.intervals[grid.bucket(s)];
            iv.sent += 1;
            let d = delay[s as usize];
            let on_time = if d == MISSING {
                self.run += 1;
                self.bursts.lost(s);
                iv.lost += 1;
                false
            } else {
                iv.received += 1;
                self.end_run();
                self.received(s, d, grid, iv)
            };
            if !on_time {
                r.late += u64::from(d != MISSING);
            }
            if self.schedule.video_frames {
                self.frames.packet(s, on_time, self.schedule, r.sent, delay);
            }
        }
        self.end_run();
        self.finish(r);
    }

    fn end_run(&mut self) {
        if self.run > 0 {
            *self.runs.entry(self.run).or_default() += 1;
            self.run = 0;
        }
    }

    /// PDV and IPDV of received packet `s` with delay `d`; whether it
    /// came in time for its slot plus the playout delay.
    fn received(&mut self, s: u64, d: i64, grid: &Grid, iv: &mut IntervalStats) -> bool {
        let delay = &self.firsts.delay;
        let p = d.saturating_sub(self.firsts.min_delay);
        self.pdv.record_signed(p);
        iv.pdv_max_ms = iv.pdv_max_ms.max(p as f64 / MS);
        if s > 0 && delay[s as usize - 1] != MISSING {
            self.ipdv.record(d.abs_diff(delay[s as usize - 1]));
        }
        // Arrival on the sender's clock had the path been at its best,
        // against the packet's slot: a receiver buffering `playout`
        // absorbs sender lateness and PDV up to that much.
        let arrival = self.firsts.send[s as usize].saturating_add(p);
        arrival.saturating_sub(grid.slot(s)) <= self.playout
    }

    fn finish(self, r: &mut ReceiverReport) {
        if self.schedule.video_frames {
            r.frames = Some(self.frames.finish());
        }
        r.loss_episodes = self.runs.values().sum();
        r.loss_episode_max = self.runs.keys().next_back().copied().unwrap_or(0);
        r.loss_episode_mean = ratio(r.lost, r.loss_episodes);
        r.burst_losses = self
            .runs
            .iter()
            .filter(|(len, _)| **len >= r.burst_threshold)
            .map(|(_, c)| c)
            .sum();
        r.loss_episode_histogram = self
            .runs
            .into_iter()
            .map(|(length, count)| RunLength { length, count })
            .collect();
        r.rfc3611 = self.bursts.finish(r.sent, r.lost);
        r.ipdv_ms = self.ipdv.summary(MS);
        r.pdv_ms = self.pdv.summary(MS);
    }
}

/// Frame delivery, packet by packet in sequence order.
#[derive(Debug)]
struct Frames {
    stats: FrameStats,
    /// Every packet of the current frame so far came in time.
    on_time: bool,
    /// Frames in a row that could not be shown on time.
    freeze: u64,
}

impl Frames {
    fn new() -> Frames {
        Frames {
            stats: FrameStats::default(),
            on_time: true,
            freeze: 0,
        }
    }

    fn packet(&mut self, s: u64, on_time: bool, schedule: &Schedule, sent: u64, delay: &[i64]) {
        self.on_time &= on_time;
        let ppf = schedule.packets_per_frame.max(1);
        if !(schedule.ends_frame(s) || s == sent - 1) {
            return;
        }
        let f = &mut self.stats;
        f.frames += 1;
        if (s - s % ppf..=s).any(|k| delay[k as usize] == MISSING) {
            f.incomplete += 1;
        }
        if self.on_time {
            f.complete += 1;
            if self.freeze > 0 {
                f.freeze_events += 1;
                f.longest_freeze_frames = f.longest_freeze_frames.max(self.freeze);
                self.freeze = 0;
            }
        } else {
            self.freeze += 1;
        }
        self.on_time = true;
    }

    fn finish(mut self) -> FrameStats {
        let f = &mut self.stats;
        if self.freeze > 0 {
            f.freeze_events += 1;
            f.longest_freeze_frames = f.longest_freeze_frames.max(self.freeze);
        }
        // A frame both late and incomplete is reported incomplete.
        f.late = f.frames - f.complete - f.incomplete;
        self.stats
    }
}

/// One-way delay of `a`, ns. Send and receive times are on two clocks,
/// so only its variation means anything; the send time comes from the
/// datagram, so a hostile one wraps instead of overflowing, and the
/// differences taken from delays saturate. Never [`MISSING`], which marks
/// a packet not received.
fn delay_ns(a: &Arrival) -> i64 {
    (a.received_at.as_nanos() as i64)
        .wrapping_sub(a.sent_at.as_nanos() as i64)
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
    let x0 = firsts[0].sent_at.as_nanos() as f64;
    let y0 = firsts[0].received_at.as_nanos() as f64 - x0;
    let xy = |a: &Arrival| {
        let (send, recv) = (a.sent_at.as_nanos() as f64, a.received_at.as_nanos() as f64);
        (send - x0, recv - send - y0)
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

impl RttSummary {
    /// Summarizes round-trip times; `requests` echo requests were sent.
    pub fn of(rtts: &Distribution, requests: u64) -> RttSummary {
        let q = rtts.summary(MS);
        RttSummary {
            samples: q.count,
            lost: requests.saturating_sub(q.count),
            min_ms: q.min,
            median_ms: q.p50,
            p99_ms: q.p99,
            max_ms: q.max,
        }
    }
}

/// Folds the sender's own send times into a [`SenderReport`].
#[derive(Debug, Clone)]
pub struct SenderLog {
    lateness: Distribution,
    window: VecDeque<Nanos>,
    max_in_window: u64,
    first: Option<Nanos>,
    last: Nanos,
    scheduled_pps: f64,
    report: SenderReport,
}

impl SenderLog {
    /// A log of the stream `schedule` plans.
    pub fn new(schedule: &Schedule) -> SenderLog {
        SenderLog {
            lateness: Distribution::new(),
            window: VecDeque::new(),
            max_in_window: 0,
            first: None,
            last: Nanos::ZERO,
            scheduled_pps: schedule.packets_per_second(),
            report: SenderReport::default(),
        }
    }

    /// Records one packet of `bytes` sent at `sent` for slot `slot`.
    pub fn record(&mut self, slot: Nanos, sent: Nanos, bytes: u64) {
        self.lateness.record((sent - slot).as_nanos());
        self.window.push_back(sent);
        while self
            .window
            .front()
            .is_some_and(|&t| t + Nanos::from_millis(1) <= sent)
        {
            self.window.pop_front();
        }
        self.max_in_window = self.max_in_window.max(self.window.len() as u64);
        self.first.get_or_insert(sent);
        self.last = sent;
        self.report.sent += 1;
        self.report.bytes += bytes;
    }

    /// Counts a packet the socket refused.
    pub fn error(&mut self) {
        self.report.send_errors += 1;
    }

    /// The report.
    pub fn finish(self) -> SenderReport {
        let mut r = self.report;
        let span = self.last - self.first.unwrap_or(self.last);
        if span > Nanos::ZERO && r.sent > 1 {
            // n packets cover n-1 intervals: count the bytes after the first.
            let per = r.bytes as f64 / r.sent as f64;
            r.achieved_bps = (r.bytes as f64 - per) * 8.0 / span.as_secs_f64();
        }
        r.pacing_error_ms = self.lateness.summary(MS);
        r.max_packets_per_ms = self.max_in_window;
        r.scheduled_packets_per_ms = self.scheduled_pps / 1000.0;
        r
    }
}

#[cfg(test)]
mod tests;
