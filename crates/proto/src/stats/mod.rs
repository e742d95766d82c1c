//! Receive-side statistics: sequence extension, loss / reorder / duplicate
//! classification, RFC 3550 interarrival jitter, a flow's deviation from
//! its own schedule ([`flow`]), a load test's ceilings ([`ceiling`]), and
//! the one percentile definition every report uses ([`Distribution`]).

pub mod ceiling;
pub mod flow;
mod quantile;
pub mod stall;

pub use flow::FlowMeter;
pub use quantile::{Distribution, Quantiles};
use serde::Serialize;

/// Extends 16-bit RTP sequence numbers (and RFC 4175's 32-bit ESN|seq when
/// the sender fills the ESN) to a monotonic 64-bit counter.
///
/// GStreamer and FFmpeg write ESN 0, so the 16-bit RFC 3550 rule is the
/// default; once a non-zero ESN shows up, the 32-bit value is used, offset
/// so the counter stays continuous. That survives gaps of more than 32768
/// packets (a 0.1 s outage at 24 Gbit/s) which the 16-bit rule cannot.
#[derive(Debug, Clone, Default)]
pub struct SeqExtender {
    highest: Option<u64>,
    esn_offset: Option<u64>,
}

// Start well above zero so reordered packets before the first never
// underflow.
const EXT_ORIGIN: u64 = 1 << 40;

fn closest(reference: u64, value: u64, bits: u32) -> u64 {
    let m = 1u64 << bits;
    let cand = (reference & !(m - 1)) | value;
    if cand > reference && cand - reference > m / 2 && cand >= m {
        cand - m
    } else if cand < reference && reference - cand > m / 2 {
        cand + m
    } else {
        cand
    }
}

impl SeqExtender {
    /// Extends one packet's sequence number; `esn` is the RFC 4175 high
    /// half when the payload carries one.
    pub fn extend(&mut self, seq: u16, esn: Option<u16>) -> u64 {
        let ext = match self.highest {
            None => EXT_ORIGIN + u64::from(seq),
            Some(h) => closest(h, u64::from(seq), 16),
        };
        let ext = match (esn, self.esn_offset) {
            (Some(e), None) if e != 0 => {
                let raw = (u64::from(e) << 16) | u64::from(seq);
                self.esn_offset = Some(ext.wrapping_sub(raw));
                ext
            }
            (Some(e), Some(off)) => {
                let raw = (u64::from(e) << 16) | u64::from(seq);
                let reference = self.highest.unwrap_or(ext).wrapping_sub(off);
                closest(reference, raw, 32).wrapping_add(off)
            }
            _ => ext,
        };
        if self.highest.is_none_or(|h| ext > h) {
            self.highest = Some(ext);
        }
        ext
    }
}

/// How one packet's sequence number relates to what came before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next expected packet, or the first.
    InOrder,
    /// Ahead of the expected one: `missing` packets skipped (maybe late).
    Ahead {
        /// Packets skipped over.
        missing: u64,
    },
    /// Behind the highest seen and not seen before: a reordered packet
    /// that had been counted lost.
    Reordered,
    /// Seen before.
    Duplicate,
    /// Too far behind to tell duplicate from reordered.
    TooOld,
}

/// Window of recent sequence numbers remembered for duplicate detection.
pub const DUPLICATE_WINDOW: u64 = 1 << 16;

/// Classifies extended sequence numbers and keeps loss counters.
///
/// Loss is `expected - received`, with `expected` the span from the first
/// to the highest sequence number, so a reordered packet first counts as
/// lost and is taken back when it arrives (RFC 3550 A.3), and duplicates
/// never hide a loss.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    first: Option<u64>,
    highest: u64,
    seen: Vec<u64>,
    counters: SequenceCounters,
}

/// Counters of a [`SequenceTracker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SequenceCounters {
    /// Distinct packets received.
    pub received: u64,
    /// Packets arriving with a lower sequence number than the highest.
    pub reordered: u64,
    /// Copies of packets already received.
    pub duplicates: u64,
    /// Packets too far behind to classify (dropped).
    pub too_old: u64,
}

impl Default for SequenceTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        SequenceTracker {
            first: None,
            highest: 0,
            seen: vec![0; (DUPLICATE_WINDOW / 64) as usize],
            counters: SequenceCounters::default(),
        }
    }

    fn bit(&mut self, ext: u64) -> (&mut u64, u64) {
        let i = ext % DUPLICATE_WINDOW;
        (&mut self.seen[(i / 64) as usize], 1u64 << (i % 64))
    }

    /// Clears window bits `lo..hi` (within one pass of the window).
    fn clear_bits(&mut self, lo: u64, hi: u64) {
        let mut i = lo;
        while i < hi {
            let (word, bit) = ((i / 64) as usize, i % 64);
            let n = (64 - bit).min(hi - i);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            self.seen[word] &= !mask;
            i += n;
        }
    }

    /// Records one arrival.
    pub fn record(&mut self, ext: u64) -> Arrival {
        let Some(_) = self.first else {
            self.first = Some(ext);
            self.highest = ext;
            let (w, m) = self.bit(ext);
            *w |= m;
            self.counters.received += 1;
            return Arrival::InOrder;
        };
        if ext > self.highest {
            let skipped = ext - self.highest - 1;
            if skipped + 1 >= DUPLICATE_WINDOW {
                self.seen.fill(0);
            } else {
                // Word at a time: a hostile jump of 65535 must not cost
                // 65535 bit operations per packet.
                let lo = (self.highest + 1) % DUPLICATE_WINDOW;
                let hi = ext % DUPLICATE_WINDOW;
                if lo <= hi {
                    self.clear_bits(lo, hi);
                } else {
                    self.clear_bits(lo, DUPLICATE_WINDOW);
                    self.clear_bits(0, hi);
                }
            }
            self.highest = ext;
            let (w, m) = self.bit(ext);
            *w |= m;
            self.counters.received += 1;
            return if skipped == 0 {
                Arrival::InOrder
            } else {
                Arrival::Ahead { missing: skipped }
            };
        }
        if self.highest - ext >= DUPLICATE_WINDOW || self.first.is_some_and(|f| ext < f) {
            self.counters.too_old += 1;
            return Arrival::TooOld;
        }
        let (w, m) = self.bit(ext);
        if *w & m != 0 {
            self.counters.duplicates += 1;
            return Arrival::Duplicate;
        }
        *w |= m;
        self.counters.received += 1;
        self.counters.reordered += 1;
        Arrival::Reordered
    }

    /// Packets expected from the first to the highest sequence number.
    pub fn expected(&self) -> u64 {
        self.first
            .map_or(0, |f| (self.highest - f).saturating_add(1))
    }

    /// The highest sequence number received, once any was.
    pub fn highest(&self) -> Option<u64> {
        self.first.map(|_| self.highest)
    }

    /// Packets missing from that span.
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.counters.received)
    }

    /// Counters so far.
    pub fn counters(&self) -> SequenceCounters {
        self.counters
    }
}

/// RFC 3550 interarrival jitter in RTP clock units.
///
/// All packets of a video frame share one timestamp but leave over the
/// frame period, so only the first packet of each timestamp is sampled;
/// otherwise the pacing itself would read as jitter.
#[derive(Debug, Clone, Default)]
pub struct Jitter {
    last: Option<(u32, i64)>,
    jitter: f64,
}

impl Jitter {
    /// Samples a packet: `arrival` in RTP clock units on the receiver's
    /// clock, `timestamp` from the packet.
    pub fn record(&mut self, arrival: i64, timestamp: u32) {
        let transit = arrival.wrapping_sub(i64::from(timestamp));
        match self.last {
            Some((ts, _)) if ts == timestamp => return,
            Some((_, prev)) => {
                // Transit is modulo 2^32 on the RTP side: wrap the difference.
                let d = (transit.wrapping_sub(prev) as i32).unsigned_abs() as f64;
                self.jitter += (d - self.jitter) / 16.0;
            }
            None => {}
        }
        self.last = Some((timestamp, transit));
    }

    /// Current jitter in clock units.
    pub fn value(&self) -> f64 {
        self.jitter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_wrap() {
        let mut x = SeqExtender::default();
        let a = x.extend(65534, Some(0));
        let b = x.extend(65535, Some(0));
        let c = x.extend(0, Some(0));
        let d = x.extend(65535, Some(0)); // reordered across the wrap
        assert_eq!(b, a + 1);
        assert_eq!(c, a + 2);
        assert_eq!(d, b);
    }

    #[test]
    fn esn_survives_a_long_gap() {
        let mut x = SeqExtender::default();
        let a = x.extend(10, Some(5));
        // 200000 packets later: the 16-bit rule alone would be fooled.
        let later = 5u32 * 65536 + 10 + 200_000;
        let b = x.extend(later as u16, Some((later >> 16) as u16));
        assert_eq!(b - a, 200_000);
        let c = x.extend((later - 3) as u16, Some(((later - 3) >> 16) as u16));
        assert_eq!(b - c, 3);
    }

    #[test]
    fn esn_switch_on_is_continuous() {
        let mut x = SeqExtender::default();
        let a = x.extend(65535, Some(0));
        let b = x.extend(0, Some(1));
        let c = x.extend(1, Some(1));
        assert_eq!((b - a, c - a), (1, 2));
    }

    #[test]
    fn loss_reorder_duplicate_counts() {
        let mut t = SequenceTracker::new();
        let seq = [1u64, 2, 4, 5, 3, 5, 8, 9, 9, 10];
        let kinds: Vec<Arrival> = seq.iter().map(|s| t.record(100 + s)).collect();
        assert_eq!(kinds[2], Arrival::Ahead { missing: 1 });
        assert_eq!(kinds[4], Arrival::Reordered);
        assert_eq!(kinds[5], Arrival::Duplicate);
        let c = t.counters();
        assert_eq!(c.received, 8);
        assert_eq!(c.duplicates, 2);
        assert_eq!(c.reordered, 1);
        assert_eq!(t.expected(), 10);
        assert_eq!(t.lost(), 2); // 6 and 7
    }

    #[test]
    fn jumps_clear_exactly_the_skipped_bits() {
        // Compare against a set model across jumps that wrap the window.
        let mut t = SequenceTracker::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        let mut cur = 1000u64;
        t.record(cur);
        seen.insert(cur);
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Dense runs (so old bits are set), jumps short of the whole
            // window (so clearing wraps around it), and late packets.
            let step = match x % 64 {
                0 => 30_000 + x % 35_000,
                1 => 70_000,
                _ => 1 + x % 3,
            };
            let back = x % 5 == 0;
            let ext = if back {
                cur.saturating_sub(1 + (x >> 8) % 100).max(1000)
            } else {
                cur + step
            };
            cur = cur.max(ext);
            let want_dup = seen.contains(&ext) && cur - ext < DUPLICATE_WINDOW;
            let got = t.record(ext);
            if cur - ext < DUPLICATE_WINDOW {
                assert_eq!(got == Arrival::Duplicate, want_dup, "ext {ext} cur {cur}");
            }
            seen.insert(ext);
        }
    }

    #[test]
    fn a_jump_that_wraps_the_window_clears_both_ends() {
        let w = DUPLICATE_WINDOW;
        let mut t = SequenceTracker::new();
        // Every slot but the last 50 seen once.
        for s in 5 * w..6 * w - 50 {
            t.record(s);
        }
        // Jump: the skipped range runs from slot w-50 round to slot 30000.
        assert_eq!(t.record(6 * w + 30_000), Arrival::Ahead { missing: 30_050 });
        // Late packets from both ends of the skipped range are new, not
        // copies of what sat in those slots a window ago.
        assert_eq!(t.record(6 * w + 29_990), Arrival::Reordered);
        assert_eq!(t.record(6 * w - 20), Arrival::Reordered);
        assert_eq!(t.record(6 * w - 20), Arrival::Duplicate);
    }

    #[test]
    fn far_jump_clears_window() {
        let mut t = SequenceTracker::new();
        t.record(1);
        t.record(1 + 3 * DUPLICATE_WINDOW);
        assert_eq!(t.record(1 + 3 * DUPLICATE_WINDOW - 5), Arrival::Reordered);
        assert_eq!(t.record(2), Arrival::TooOld);
    }

    #[test]
    fn jitter_of_constant_transit_is_zero_and_grows_with_variation() {
        let mut j = Jitter::default();
        for f in 0..100u32 {
            j.record(i64::from(f) * 3000 + 500, f * 3000);
            j.record(i64::from(f) * 3000 + 900, f * 3000); // same frame: ignored
        }
        assert_eq!(j.value(), 0.0);
        let mut j = Jitter::default();
        for f in 0..1000u32 {
            let wobble = if f % 2 == 0 { 0 } else { 160 };
            j.record(i64::from(f) * 3000 + wobble, f * 3000);
        }
        assert!((j.value() - 160.0).abs() < 1.0, "{}", j.value());
    }
}
