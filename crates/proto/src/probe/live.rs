//! The receiver's running count while a test streams: one
//! [`LiveInterval`] per reporting interval of receive time, for the lines
//! both ends print as the test runs (iperf3's interval lines). The final
//! report's intervals come from [`crate::probe::analysis`] instead, by
//! send schedule and with every metric; these are what was known then.

use crate::probe::report::{Arrival, LiveInterval};
use crate::units::Nanos;

/// Counts arrivals per interval of receive time, from the first arrival.
#[derive(Debug, Clone, Default)]
pub struct LiveMeter {
    interval: Nanos,
    /// First arrival: the intervals' origin.
    origin: Option<Nanos>,
    /// End of the current interval.
    next: Nanos,
    /// Start of the current interval.
    start: Nanos,
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

impl LiveMeter {
    /// A meter reporting every `interval` (at least 1 ms).
    pub fn new(interval: Nanos) -> LiveMeter {
        LiveMeter {
            interval: interval.max(Nanos::from_millis(1)),
            ..LiveMeter::default()
        }
    }

    /// One received packet of `bytes` payload bytes, at `a.received_at`.
    pub fn arrival(&mut self, a: &Arrival, bytes: u64) {
        let now = a.received_at;
        if self.origin.is_none() {
            self.origin = Some(now);
            self.start = now;
            self.next = now + self.interval;
        }
        self.received += 1;
        self.bytes += bytes;
        self.expected = self.expected.max(a.seq.saturating_add(1));
        self.last_arrival = self.last_arrival.max(now);
        let delay = a.received_at.as_nanos() as i64 - a.sent_at.as_nanos() as i64;
        if let Some(p) = self.prev_delay {
            self.jitter += (delay.abs_diff(p) as f64 - self.jitter) / 16.0;
        }
        self.prev_delay = Some(delay);
    }

    /// When the current interval ends, once the first packet arrived.
    pub fn due(&self) -> Option<Nanos> {
        self.origin.map(|_| self.next)
    }

    /// The interval that ended at or before `now`, if one did (call
    /// again for the next: a late call catches up one at a time).
    pub fn tick(&mut self, now: Nanos) -> Option<LiveInterval> {
        if self.origin.is_none() || now < self.next {
            return None;
        }
        let end = self.next;
        let iv = self.close(end);
        self.next = end + self.interval;
        Some(iv)
    }

    /// The last, partial interval, ending at the last arrival, when it
    /// holds any packet or loss; `sent` packets were sent in all, so losses
    /// at the tail, which no later packet revealed, count in it.
    pub fn finish(&mut self, sent: u64) -> Option<LiveInterval> {
        self.expected = self.expected.max(sent);
        if self.origin.is_none() || (self.received == 0 && self.expected == self.expected_before) {
            return None;
        }
        let end = self.last_arrival.max(self.start);
        let iv = self.close(end);
        self.origin = None;
        Some(iv)
    }

    fn close(&mut self, end: Nanos) -> LiveInterval {
        let origin = self.origin.unwrap_or(self.start);
        let secs = (end - self.start).as_secs_f64();
        let expected = self.expected - self.expected_before;
        let iv = LiveInterval {
            stream: 0,
            start_s: (self.start - origin).as_secs_f64(),
            end_s: (end - origin).as_secs_f64(),
            received: self.received,
            lost: expected.saturating_sub(self.received),
            bytes: self.bytes,
            rate_bps: if secs > 0.0 {
                self.bytes as f64 * 8.0 / secs
            } else {
                0.0
            },
            jitter_ms: self.jitter / 1e6,
        };
        self.start = end;
        self.received = 0;
        self.bytes = 0;
        self.expected_before = self.expected;
        iv
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
        let mut m = LiveMeter::new(Nanos::from_millis(100));
        assert_eq!(m.due(), None);
        // 0..10 in the first 100 ms, with 3 and 4 lost.
        for s in (0..10).filter(|s| ![3, 4].contains(s)) {
            m.arrival(&at(s, s * 10), 100);
        }
        assert_eq!(m.tick(Nanos::from_millis(1050)), None);
        let iv = m.tick(Nanos::from_millis(1100)).unwrap();
        assert_eq!((iv.received, iv.lost, iv.bytes), (8, 2, 800));
        assert_eq!((iv.start_s, iv.end_s), (0.0, 0.1));
        assert!((iv.rate_bps - 64_000.0).abs() < 1e-6, "{iv:?}");
        // A partial last interval: 10 and 11, 20 ms apart.
        m.arrival(&at(10, 100), 100);
        m.arrival(&at(11, 120), 100);
        // 13 were sent: the last one lost.
        let last = m.finish(13).unwrap();
        assert_eq!((last.received, last.lost), (2, 1));
        assert!((last.end_s - 0.12).abs() < 1e-9, "{last:?}");
        assert_eq!(m.finish(13), None);
    }

    #[test]
    fn an_empty_interval_reports_zero() {
        let mut m = LiveMeter::new(Nanos::from_millis(100));
        m.arrival(&at(0, 0), 100);
        assert!(m.tick(Nanos::from_millis(1100)).is_some());
        let quiet = m.tick(Nanos::from_millis(1250)).unwrap();
        assert_eq!((quiet.received, quiet.rate_bps), (0, 0.0));
        assert_eq!(m.due(), Some(Nanos::from_millis(1300)));
    }
}
