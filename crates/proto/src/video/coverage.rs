//! Which bytes of a frame buffer packets have written, so a recycled
//! buffer needs zeroing only where packets never came, and only when
//! its frame goes out incomplete: zeroing every frame before use was a
//! full extra pass over it (8% of an 8K stripe receiver's CPU).
//!
//! Packets of a frame arrive almost in order, so the written bytes are a
//! handful of spans and each packet extends the last one. The span list
//! is bounded: past [`MAX_SPANS`] the two spans with the smallest gap
//! between them are joined and that gap is zeroed at once (it holds no
//! packet yet, and a packet that lands there later overwrites the zeros).

use std::ops::Range;

/// Most disjoint spans kept per frame.
pub const MAX_SPANS: usize = 256;

/// Written spans of one frame buffer, sorted, disjoint and not touching.
#[derive(Debug, Default, Clone)]
pub struct Coverage {
    spans: Vec<Range<usize>>,
}

impl Coverage {
    /// No byte written yet.
    pub fn new() -> Coverage {
        Coverage::default()
    }

    /// Forgets every span (the buffer starts a new frame).
    pub fn clear(&mut self) {
        self.spans.clear();
    }

    /// Bytes `r` of `buf` were written. A gap joined to stay within
    /// [`MAX_SPANS`] is zeroed in `buf`.
    pub fn add(&mut self, r: Range<usize>, buf: &mut [u8]) {
        if r.is_empty() {
            return;
        }
        if let Some(last) = self.spans.last_mut()
            && last.start <= r.start
        {
            if r.start <= last.end {
                last.end = last.end.max(r.end);
                return;
            }
            if self.spans.len() < MAX_SPANS {
                self.spans.push(r);
                return;
            }
        }
        self.insert(r);
        if self.spans.len() > MAX_SPANS {
            self.join_closest(buf);
        }
    }

    /// Inserts `r` in order and merges it with every span it touches.
    fn insert(&mut self, r: Range<usize>) {
        let first = self.spans.partition_point(|s| s.end < r.start);
        let last = self.spans.partition_point(|s| s.start <= r.end);
        if first == last {
            self.spans.insert(first, r);
            return;
        }
        let start = r.start.min(self.spans[first].start);
        let end = r.end.max(self.spans[last - 1].end);
        self.spans.drain(first + 1..last);
        self.spans[first] = start..end;
    }

    fn join_closest(&mut self, buf: &mut [u8]) {
        let Some(i) =
            (0..self.spans.len() - 1).min_by_key(|&i| self.spans[i + 1].start - self.spans[i].end)
        else {
            return;
        };
        let gap = self.spans[i].end..self.spans[i + 1].start;
        if let Some(bytes) = buf.get_mut(gap) {
            bytes.fill(0);
        }
        self.spans[i].end = self.spans[i + 1].end;
        self.spans.remove(i + 1);
    }

    /// Whether no byte of `r` is written yet.
    pub fn is_clear(&self, r: Range<usize>) -> bool {
        let first = self.spans.partition_point(|s| s.end <= r.start);
        self.spans.get(first).is_none_or(|s| s.start >= r.end)
    }

    /// Whether bytes `0..len` are all written.
    pub fn covers(&self, len: usize) -> bool {
        len == 0 || matches!(self.spans.as_slice(), [s] if s.start == 0 && s.end >= len)
    }

    /// Zeroes every byte of `buf` no span covers.
    pub fn zero_holes(&self, buf: &mut [u8]) {
        let mut at = 0;
        for s in &self.spans {
            if let Some(hole) = buf.get_mut(at..s.start.min(buf.len())) {
                hole.fill(0);
            }
            at = at.max(s.end);
        }
        if let Some(tail) = buf.get_mut(at.min(buf.len())..) {
            tail.fill(0);
        }
    }

    /// The written spans, in order.
    pub fn spans(&self) -> &[Range<usize>] {
        &self.spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn in_order_packets_make_one_span_and_cover_the_frame() {
        let mut buf = vec![7u8; 100];
        let mut c = Coverage::new();
        for k in 0..10 {
            c.add(k * 10..(k + 1) * 10, &mut buf);
        }
        assert_eq!(c.spans(), std::slice::from_ref(&(0..100)));
        assert!(c.covers(100));
        c.zero_holes(&mut buf);
        assert_eq!(buf, vec![7u8; 100]);
    }

    #[test]
    fn only_the_holes_are_zeroed() {
        let mut buf = vec![7u8; 50];
        let mut c = Coverage::new();
        c.add(30..40, &mut buf);
        c.add(10..20, &mut buf);
        c.add(20..25, &mut buf);
        assert_eq!(c.spans(), &[10..25, 30..40]);
        assert!(!c.covers(50));
        c.zero_holes(&mut buf);
        let want: Vec<u8> = (0..50)
            .map(|i| {
                if (10..25).contains(&i) || (30..40).contains(&i) {
                    7
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(buf, want);
    }

    #[test]
    fn overlapping_packets_do_not_count_as_a_whole_frame() {
        // Bytes add up to the frame's size, but 40..50 never came.
        let mut buf = vec![1u8; 50];
        let mut c = Coverage::new();
        c.add(0..30, &mut buf);
        c.add(10..40, &mut buf);
        assert!(!c.covers(50));
        assert_eq!(c.spans(), std::slice::from_ref(&(0..40)));
    }

    #[test]
    fn past_the_span_limit_the_smallest_gap_is_joined_and_zeroed() {
        let len = 4 * (MAX_SPANS + 1);
        let mut buf = vec![9u8; len];
        let mut c = Coverage::new();
        // Spans 2 bytes apart, from the end backwards, so no packet
        // extends the last span; the 1-byte gap at 3 is the smallest.
        c.add(0..3, &mut buf);
        for k in (1..=MAX_SPANS).rev() {
            c.add(4 * k..4 * k + 2, &mut buf);
        }
        assert_eq!(c.spans().len(), MAX_SPANS);
        assert_eq!(c.spans()[0], 0..6);
        assert_eq!(&buf[0..6], &[9, 9, 9, 0, 9, 9]);
    }

    proptest! {
        /// Whatever order and overlap packets come in, the spans are the
        /// bytes written (plus zeroed joined gaps), and zero_holes leaves
        /// written bytes alone and zeroes every other byte.
        #[test]
        fn spans_match_the_written_bytes(
            writes in proptest::collection::vec((0usize..2000, 1usize..64), 0..600),
        ) {
            let len = 2048;
            let mut buf = vec![0xAAu8; len];
            let mut written = vec![false; len];
            let mut c = Coverage::new();
            for (start, n) in writes {
                let r = start..(start + n).min(len);
                for b in &mut buf[r.clone()] {
                    *b = 0x55;
                }
                for w in &mut written[r.clone()] {
                    *w = true;
                }
                c.add(r, &mut buf);
            }
            prop_assert!(c.spans().len() <= MAX_SPANS);
            prop_assert!(c.spans().windows(2).all(|w| w[0].end < w[1].start));
            let mut out = buf.clone();
            c.zero_holes(&mut out);
            for i in 0..len {
                let spanned = c.spans().iter().any(|s| s.contains(&i));
                if written[i] {
                    prop_assert!(spanned);
                    prop_assert_eq!(out[i], 0x55);
                } else if spanned {
                    // A joined gap: zeroed when it was joined.
                    prop_assert_eq!(out[i], 0);
                } else {
                    prop_assert_eq!(out[i], 0);
                }
            }
            if written.iter().all(|w| *w) {
                prop_assert!(c.covers(len));
            }
        }
    }
}
