//! The one percentile definition of nagare: sender lateness, probe delay
//! variation and RTT, tree latency and serve's per-flow jitter are all
//! summarised here, so a p99 means the same thing in every report.
//!
//! **Definition (nearest rank):** the q-quantile of n samples is the
//! smallest recorded value v such that at least ⌈q·n⌉ samples are ≤ v
//! (the first sample for q = 0), resolved to the histogram's precision
//! (3 significant decimal digits by default, i.e. within 0.1%) and never
//! above the largest sample. The minimum and maximum are exact.
//!
//! Samples go into an HDR histogram (the `hdrhistogram` crate) instead
//! of a sorted vector, so memory stays bounded however long a stream
//! runs: it grows with the logarithm of the largest value, about 80 KiB
//! at 3 digits for values up to a millisecond in nanoseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A distribution of non-negative integer samples (nanoseconds, counts).
#[derive(Debug, Clone)]
pub struct Distribution {
    hist: Histogram<u64>,
    sum: u128,
    // Exact extremes: the histogram only knows them to its precision.
    min: u64,
    max: u64,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution::new()
    }
}

impl Distribution {
    /// An empty distribution resolved to 3 significant digits.
    pub fn new() -> Distribution {
        Distribution::with_precision(3)
    }

    /// An empty distribution resolved to `digits` significant digits
    /// (clamped to 1..=5); fewer digits use less memory per distribution.
    pub fn with_precision(digits: u8) -> Distribution {
        let mut hist = Histogram::new(digits.clamp(1, 5))
            .unwrap_or_else(|_| unreachable!("1..=5 significant digits is a valid precision"));
        hist.auto(true);
        Distribution {
            hist,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one sample.
    pub fn record(&mut self, value: u64) {
        // With auto-resize on, recording only fails for values too large
        // to track at all; those count as the largest trackable value.
        if self.hist.record(value).is_err() {
            self.hist.saturating_record(value);
        }
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Records a signed sample, clamping negatives to zero (an early
    /// packet is zero late).
    pub fn record_signed(&mut self, value: i64) {
        self.record(u64::try_from(value).unwrap_or(0));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Distribution) {
        // Both auto-resize, so adding cannot run out of range.
        let _ = self.hist.add(&other.hist);
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The q-quantile by the definition in the module docs; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        if q <= 0.0 {
            return self.min();
        }
        self.hist.value_at_quantile(q.min(1.0)).min(self.max())
    }

    /// The smallest sample (exact); 0 when empty.
    pub fn min(&self) -> u64 {
        if self.is_empty() { 0 } else { self.min }
    }

    /// The largest sample (exact); 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The arithmetic mean (exact); 0 when empty.
    pub fn mean(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            n => self.sum as f64 / n as f64,
        }
    }

    /// A histogram of at most `max_bins` equal bins: `(lower bound,
    /// samples)` from the bin holding the minimum to the one holding the
    /// maximum, each `width` wide (widened as needed to fit `max_bins`),
    /// to the histogram's precision. Empty bins inside the range are
    /// listed; empty when nothing was recorded.
    pub fn bins(&self, width: u64, max_bins: usize) -> Vec<(u64, u64)> {
        if self.is_empty() || max_bins == 0 {
            return Vec::new();
        }
        let (lo, hi) = (self.min(), self.max());
        let span = hi - lo;
        let needed = span / width.max(1) + 1;
        let width = if needed > max_bins as u64 {
            span / max_bins as u64 + 1
        } else {
            width.max(1)
        };
        let first = lo / width * width;
        let count = ((hi - first) / width + 1) as usize;
        let mut out: Vec<(u64, u64)> = (0..count as u64).map(|k| (first + k * width, 0)).collect();
        for v in self.hist.iter_recorded() {
            let value = self
                .hist
                .highest_equivalent(v.value_iterated_to())
                .min(hi)
                .max(lo);
            let k = ((value - first) / width) as usize;
            if let Some(bin) = out.get_mut(k.min(count - 1)) {
                bin.1 += v.count_at_value();
            }
        }
        out
    }

    /// The summary every report prints, with values divided by `scale`
    /// (1e6 turns nanoseconds into milliseconds, 1e3 into microseconds).
    pub fn summary(&self, scale: f64) -> Quantiles {
        let at = |q: f64| self.quantile(q) as f64 / scale;
        Quantiles {
            count: self.count(),
            min: self.min() as f64 / scale,
            mean: self.mean() / scale,
            p50: at(0.5),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: self.max() as f64 / scale,
        }
    }
}

impl FromIterator<u64> for Distribution {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Distribution {
        let mut d = Distribution::new();
        iter.into_iter().for_each(|v| d.record(v));
        d
    }
}

/// A distribution's summary in a report's unit (see [`Distribution::summary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Samples summarised.
    pub count: u64,
    /// Smallest.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_count_every_sample_once() {
        let d: Distribution = [0, 1, 1, 5, 14, 14, 14].into_iter().collect();
        assert_eq!(d.bins(1, 100).len(), 15);
        assert_eq!(d.bins(1, 100)[14], (14, 3));
        assert_eq!(d.bins(5, 100), [(0, 3), (5, 1), (10, 3)]);
        // Too many bins for the cap: wider ones.
        let b = d.bins(1, 4);
        assert!(b.len() <= 4, "{b:?}");
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 7);
        let wide: Distribution = (0..100_000u64).map(|v| v * 997).collect();
        let b = wide.bins(1000, 50);
        assert!(b.len() <= 50);
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 100_000);
        assert!(Distribution::new().bins(1, 10).is_empty());
    }

    #[test]
    fn nearest_rank_on_small_sets() {
        // 1..=100: the p99 is the 99th value, the p50 the 50th.
        let d: Distribution = (1..=100).collect();
        assert_eq!(d.quantile(0.5), 50);
        assert_eq!(d.quantile(0.99), 99);
        assert_eq!(d.quantile(0.999), 100);
        assert_eq!(d.quantile(0.0), 1);
        assert_eq!(d.quantile(1.0), 100);
        assert_eq!(d.mean(), 50.5);
        // Three samples: p50 is the 2nd (⌈1.5⌉), p99 the 3rd.
        let d: Distribution = [10, 30, 20].into_iter().collect();
        assert_eq!(d.quantile(0.5), 20);
        assert_eq!(d.quantile(0.99), 30);
    }

    #[test]
    fn large_values_within_precision_and_never_above_max() {
        let d: Distribution = (1..=10_000u64).map(|v| v * 1_000).collect();
        let p99 = d.quantile(0.99);
        assert!((9_900_000..=9_910_000).contains(&p99), "{p99}");
        assert_eq!(d.max(), 10_000_000);
        assert!(d.quantile(1.0) <= d.max());
        let one: Distribution = [123_456_789].into_iter().collect();
        assert_eq!(one.quantile(0.99), 123_456_789);
    }

    #[test]
    fn empty_and_hostile_inputs() {
        let mut d = Distribution::new();
        assert_eq!(d.summary(1e6), Quantiles::default());
        d.record(u64::MAX);
        d.record_signed(-5);
        assert_eq!(d.count(), 2);
        assert_eq!(d.min(), 0);
        assert!(d.quantile(f64::NAN) <= d.max());
    }

    #[test]
    fn merge_adds_samples() {
        let mut a: Distribution = (1..=50).collect();
        let b: Distribution = (51..=100).collect();
        a.merge(&b);
        assert_eq!(a.count(), 100);
        assert_eq!(a.quantile(0.5), 50);
    }
}
