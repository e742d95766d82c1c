//! The receiver's running count while a test streams: one
//! [`LiveInterval`] per stream and reporting interval of receive time,
//! for the lines both ends print as the test runs (iperf3's interval
//! lines). The final report's intervals come from
//! [`crate::probe::analysis`] instead, by send schedule and with every
//! metric; these are what was known then.

use crate::probe::report::{Arrival, LiveInterval};
use crate::units::Nanos;

/// One stream's counts in the current interval.
#[derive(Debug, Clone, Copy, Default)]
struct Lane {
    received: u64,
    bytes: u64,
    /// One past the highest sequence number seen, now and at the last tick.
    expected: u64,
    expected_before: u64,
    last_arrival: Nanos,
    /// RFC 3550 running jitter, ns, and the previous one-way delay.
    jitter: f64,
    prev_delay: Option<i64>,
}

/// Counts arrivals per stream and interval of receive time, every stream
/// on one grid that starts at the first arrival.
#[derive(Debug, Clone, Default)]
pub struct LiveMeter {
    interval: Nanos,
    /// First arrival: the intervals' origin.
    origin: Option<Nanos>,
    /// Start and end of the current interval.
    start: Nanos,
    next: Nanos,
    lanes: Vec<Lane>,
}

impl LiveMeter {
    /// A meter of `streams` streams reporting every `interval` (at least
    /// 1 ms).
    pub fn new(interval: Nanos, streams: usize) -> LiveMeter {
        LiveMeter {
            interval: interval.max(Nanos::from_millis(1)),
            lanes: vec![Lane::default(); streams.max(1)],
            ..LiveMeter::default()
        }
    }

    /// One packet of stream `stream` with `bytes` payload bytes, received
    /// at `a.received_at` (a stream out of range is ignored).
    pub fn arrival(&mut self, stream: usize, a: &Arrival, bytes: u64) {
        let now = a.received_at;
        let Some(l) = self.lanes.get_mut(stream) else {
            return;
        };
        if self.origin.is_none() {
            self.origin = Some(now);
            self.start = now;
            self.next = now + self.interval;
        }
        l.received += 1;
        l.bytes += bytes;
        l.expected = l.expected.max(a.seq.saturating_add(1));
        l.last_arrival = l.last_arrival.max(now);
        let delay = a.received_at.as_nanos() as i64 - a.sent_at.as_nanos() as i64;
        if let Some(p) = l.prev_delay {
            l.jitter += (delay.abs_diff(p) as f64 - l.jitter) / 16.0;
        }
        l.prev_delay = Some(delay);
    }

    /// When the current interval ends, once the first packet arrived.
    pub fn due(&self) -> Option<Nanos> {
        self.origin.map(|_| self.next)
    }

    /// Every stream's interval that ended at or before `now`, if one did
    /// (call again for the next: a late call catches up one at a time).
    pub fn tick(&mut self, now: Nanos) -> Option<Vec<LiveInterval>> {
        if self.origin.is_none() || now < self.next {
            return None;
        }
        let end = self.next;
        let ivs = self.close(end);
        self.next = end + self.interval;
        Some(ivs)
    }

    /// The last, partial interval of every stream, ending at the last
    /// arrival; `sent[i]` packets of stream `i` were sent in all, so
    /// losses at the tail, which no later packet revealed, count in it.
    /// `None` before any packet arrived, or when nothing happened since
    /// the last tick.
    pub fn finish(&mut self, sent: &[u64]) -> Option<Vec<LiveInterval>> {
        self.origin?;
        for (l, &n) in self.lanes.iter_mut().zip(sent) {
            l.expected = l.expected.max(n);
        }
        let quiet = self
            .lanes
            .iter()
            .all(|l| l.received == 0 && l.expected == l.expected_before);
        if quiet {
            return None;
        }
        let last = self.lanes.iter().map(|l| l.last_arrival).max();
        let end = last.unwrap_or(self.start).max(self.start);
        let ivs = self.close(end);
        self.origin = None;
        Some(ivs)
    }

    fn close(&mut self, end: Nanos) -> Vec<LiveInterval> {
        let origin = self.origin.unwrap_or(self.start);
        let secs = (end - self.start).as_secs_f64();
        let (start_s, end_s) = (
            (self.start - origin).as_secs_f64(),
            (end - origin).as_secs_f64(),
        );
        self.start = end;
        let mut ivs = Vec::with_capacity(self.lanes.len());
        for (i, l) in self.lanes.iter_mut().enumerate() {
            ivs.push(LiveInterval {
                stream: i as u32,
                start_s,
                end_s,
                received: l.received,
                lost: (l.expected - l.expected_before).saturating_sub(l.received),
                bytes: l.bytes,
                rate_bps: if secs > 0.0 {
                    l.bytes as f64 * 8.0 / secs
                } else {
                    0.0
                },
                jitter_ms: l.jitter / 1e6,
            });
            l.received = 0;
            l.bytes = 0;
            l.expected_before = l.expected;
        }
        ivs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64, ms: u64) -> Arrival {
        Arrival {
            seq,
            sent_at: Nanos::from_millis(ms),
            received_at: Nanos::from_millis(1000 + ms),
        }
    }

    #[test]
    fn intervals_count_received_lost_and_rate() {
        let mut m = LiveMeter::new(Nanos::from_millis(100), 1);
        assert_eq!(m.due(), None);
        // 0..10 in the first 100 ms, with 3 and 4 lost.
        for s in (0..10).filter(|s| ![3, 4].contains(s)) {
            m.arrival(0, &at(s, s * 10), 100);
        }
        assert_eq!(m.tick(Nanos::from_millis(1050)), None);
        let iv = m.tick(Nanos::from_millis(1100)).unwrap()[0];
        assert_eq!((iv.received, iv.lost, iv.bytes), (8, 2, 800));
        assert_eq!((iv.start_s, iv.end_s), (0.0, 0.1));
        assert!((iv.rate_bps - 64_000.0).abs() < 1e-6, "{iv:?}");
        // A partial last interval: 10 and 11, 20 ms apart; 13 were sent,
        // the last one lost.
        m.arrival(0, &at(10, 100), 100);
        m.arrival(0, &at(11, 120), 100);
        let last = m.finish(&[13]).unwrap()[0];
        assert_eq!((last.received, last.lost), (2, 1));
        assert!((last.end_s - 0.12).abs() < 1e-9, "{last:?}");
        assert_eq!(m.finish(&[13]), None);
    }

    #[test]
    fn streams_share_one_grid_and_an_empty_interval_reports_zero() {
        let mut m = LiveMeter::new(Nanos::from_millis(100), 2);
        m.arrival(0, &at(0, 0), 100);
        m.arrival(1, &at(0, 50), 300);
        m.arrival(7, &at(0, 50), 300); // no such stream
        let ivs = m.tick(Nanos::from_millis(1100)).unwrap();
        assert_eq!(ivs.len(), 2);
        assert_eq!((ivs[0].stream, ivs[0].bytes), (0, 100));
        assert_eq!((ivs[1].stream, ivs[1].bytes), (1, 300));
        assert_eq!(ivs[0].end_s, ivs[1].end_s);
        let quiet = m.tick(Nanos::from_millis(1250)).unwrap();
        assert_eq!((quiet[0].received, quiet[1].rate_bps), (0, 0.0));
        assert_eq!(m.due(), Some(Nanos::from_millis(1300)));
    }
}
