//! Stripe geometry: one frame divided into N sub-images, each sent as an
//! ordinary RFC 4175 stream of its own (seed 000's 8 nodes, each carrying
//! one part of every 8K frame).
//!
//! Three rules divide a frame:
//! - [`Rule::Lines`]: N horizontal bands, top to bottom. A band is one
//!   contiguous run of the frame, so it can be sent without copying.
//! - [`Rule::Square`]: four quadrants (top left, top right, bottom left,
//!   bottom right), the "square division" of quad-link 4K/8K.
//! - [`Rule::TwoSampleInterleave`]: the quad-link "2SI" rule of SMPTE
//!   ST 425-5, where each sub-image is a full-picture quarter-resolution
//!   view: sample pair `x >> 1` of line `y` goes to sub-image
//!   `s = 2·(y & 1) + ((x >> 1) & 1)` at `x' = 2·(x >> 2) + (x & 1)`,
//!   `y' = y >> 1`. Losing one sub-image costs resolution, not a region.
//!
//! For `Square` and `TwoSampleInterleave`, a count of `4·k` splits each of
//! the four sub-images once more into `k` horizontal bands, so eight
//! stripes of 8K are the four 2SI sub-images, each in two bands. Stripe
//! `4·…` numbering is sub-image major: stripe `s·k + band`.
//!
//! Samples move in pairs of pixels, so 4:2:2 pixel groups (two pixels
//! sharing chroma) are never torn apart.

use std::ops::Range;
use std::str::FromStr;

use super::Error;
use super::format::VideoFormat;
pub use super::rule::Rule;

impl FromStr for Rule {
    type Err = Error;

    fn from_str(s: &str) -> Result<Rule, Error> {
        Rule::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(s.trim()))
            .ok_or(Error::UnknownStripeRule)
    }
}

/// Most stripes one frame may be divided into.
pub const MAX_STRIPES: usize = 64;

/// A frame format divided into `count` stripes by a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripes {
    rule: Rule,
    count: usize,
    frame: VideoFormat,
    stripe: VideoFormat,
    /// Bands per sub-image (`count` for lines, `count / 4` otherwise).
    bands: usize,
    /// Bytes of two pixels: the unit that moves.
    pair: usize,
}

impl Stripes {
    /// Divides `frame` into `count` stripes by `rule`, or says why the
    /// size does not allow it.
    pub fn new(frame: VideoFormat, rule: Rule, count: usize) -> Result<Stripes, Error> {
        let (w, h) = (frame.width as usize, frame.height as usize);
        let bad = Error::StripeGeometry {
            rule,
            count: count as u32,
            width: frame.width,
            height: frame.height,
        };
        if count == 0 || count > MAX_STRIPES {
            return Err(Error::StripeCount(count as u32));
        }
        let (sub_w, sub_h, bands) = match rule {
            Rule::Lines => (w, h, count),
            Rule::Square | Rule::TwoSampleInterleave if count % 4 != 0 => return Err(bad),
            // Quadrant and 2SI sub-images are half as wide: whole pairs.
            Rule::Square | Rule::TwoSampleInterleave if w % 4 != 0 || h % 2 != 0 => {
                return Err(bad);
            }
            Rule::Square | Rule::TwoSampleInterleave => (w / 2, h / 2, count / 4),
        };
        if sub_h % bands != 0 {
            return Err(bad);
        }
        let stripe = VideoFormat::new(sub_w as u32, (sub_h / bands) as u32, frame.pixel_format)
            .map_err(|_| bad)?;
        let pf = frame.pixel_format;
        Ok(Stripes {
            rule,
            count,
            frame,
            stripe,
            bands,
            pair: 2 * pf.pgroup_bytes() / pf.pgroup_pixels(),
        })
    }

    /// The division whose every stripe has format `stripe`: what a
    /// receiver given one SDP per stripe rebuilds (the SDPs describe the
    /// stripes, never the whole frame).
    pub fn from_stripe(stripe: VideoFormat, rule: Rule, count: usize) -> Result<Stripes, Error> {
        if count == 0 || count > MAX_STRIPES {
            return Err(Error::StripeCount(count as u32));
        }
        let n = count as u32;
        let (w, h) = match rule {
            Rule::Lines => (Some(stripe.width), stripe.height.checked_mul(n)),
            Rule::Square | Rule::TwoSampleInterleave => (
                stripe.width.checked_mul(2),
                stripe.height.checked_mul(2 * n.div_ceil(4)),
            ),
        };
        let bad = Error::StripeGeometry {
            rule,
            count: n,
            width: stripe.width,
            height: stripe.height,
        };
        let (Some(w), Some(h)) = (w, h) else {
            return Err(bad);
        };
        let frame = VideoFormat::new(w, h, stripe.pixel_format).map_err(|_| bad)?;
        let s = Stripes::new(frame, rule, count)?;
        if s.stripe != stripe {
            return Err(bad);
        }
        Ok(s)
    }

    /// The rule.
    pub const fn rule(&self) -> Rule {
        self.rule
    }

    /// The number of stripes.
    pub const fn count(&self) -> usize {
        self.count
    }

    /// The whole frame's format.
    pub const fn frame_format(&self) -> VideoFormat {
        self.frame
    }

    /// Every stripe's format (all stripes are the same size).
    pub const fn stripe_format(&self) -> VideoFormat {
        self.stripe
    }

    /// Where stripe `k` lies in the frame when it is one contiguous run
    /// of bytes (every [`Rule::Lines`] stripe), so it can be sent from
    /// the frame without copying.
    pub fn contiguous(&self, k: usize) -> Option<Range<usize>> {
        (self.rule == Rule::Lines && k < self.count).then(|| {
            let n = self.stripe.frame_bytes();
            k * n..(k + 1) * n
        })
    }

    /// Copies stripe `k` of `frame` into `out` (a stripe-sized buffer).
    pub fn split(&self, frame: &[u8], k: usize, out: &mut [u8]) -> Result<(), Error> {
        self.check(frame, k, out)?;
        if self.rule == Rule::TwoSampleInterleave {
            let (fl, sl) = (self.frame.line_bytes(), self.stripe.line_bytes());
            // Each frame line is copied whole into a small buffer first:
            // a plain copy streams from memory at full speed, while the
            // strided gather straight from an 8K frame waits on every
            // cache miss (5x slower than a copy, measured).
            let mut buf = vec![0; fl];
            for (row, dst, first) in self.interleaved_rows(k) {
                let line = &mut buf[..fl - first];
                line.copy_from_slice(&frame[row + first..row + fl]);
                gather(self.pair, line, &mut out[dst..dst + sl]);
            }
            return Ok(());
        }
        self.for_each_run(k, |src, dst, len| {
            out[dst..dst + len].copy_from_slice(&frame[src..src + len]);
        });
        Ok(())
    }

    /// Copies stripe `k` from `stripe` into its place in `frame`.
    pub fn merge(&self, stripe: &[u8], k: usize, frame: &mut [u8]) -> Result<(), Error> {
        self.check(frame, k, stripe)?;
        if self.rule == Rule::TwoSampleInterleave {
            let (fl, sl) = (self.frame.line_bytes(), self.stripe.line_bytes());
            // As in `split`: the line goes through a small buffer, copied
            // in and out whole.
            let mut buf = vec![0; fl];
            for (row, dst, first) in self.interleaved_rows(k) {
                let line = &mut frame[row + first..row + fl];
                let local = &mut buf[..line.len()];
                local.copy_from_slice(line);
                scatter(self.pair, &stripe[dst..dst + sl], local);
                line.copy_from_slice(local);
            }
            return Ok(());
        }
        self.for_each_run(k, |src, dst, len| {
            frame[src..src + len].copy_from_slice(&stripe[dst..dst + len]);
        });
        Ok(())
    }

    /// Copies every stripe (`stripes`: all of them back to back, in
    /// stripe order) into `frame`, writing each frame byte once. For 2SI
    /// the two stripes that share a frame line are interleaved into it in
    /// one pass, where [`merge`](Self::merge) of one stripe must read the
    /// line back to keep the other's pairs (twice the memory traffic).
    pub fn merge_all(&self, stripes: &[u8], frame: &mut [u8]) -> Result<(), Error> {
        let n = self.stripe.frame_bytes();
        if stripes.len() != n * self.count {
            return Err(Error::FrameSize {
                expected: n * self.count,
                got: stripes.len(),
            });
        }
        let parts: Vec<&[u8]> = stripes.chunks_exact(n).collect();
        self.merge_parts(&parts, frame)
    }

    /// [`merge_all`](Self::merge_all) from separate buffers: `parts[k]`
    /// is stripe `k`.
    pub fn merge_parts(&self, parts: &[&[u8]], frame: &mut [u8]) -> Result<(), Error> {
        let n = self.stripe.frame_bytes();
        if parts.len() != self.count {
            return Err(Error::StripeCount(parts.len() as u32));
        }
        if frame.len() != self.frame.frame_bytes() {
            return Err(Error::FrameSize {
                expected: self.frame.frame_bytes(),
                got: frame.len(),
            });
        }
        if let Some(bad) = parts.iter().find(|p| p.len() != n) {
            return Err(Error::FrameSize {
                expected: n,
                got: bad.len(),
            });
        }
        if self.rule != Rule::TwoSampleInterleave {
            for (k, stripe) in parts.iter().enumerate() {
                self.merge(stripe, k, frame)?;
            }
            return Ok(());
        }
        let (fl, sl) = (self.frame.line_bytes(), self.stripe.line_bytes());
        let lines = self.stripe.height as usize;
        for (y, row) in frame.chunks_exact_mut(fl).enumerate() {
            // Frame line y = 2 (band × lines + y_stripe) + sub / 2: the
            // line of sub-images 2(y mod 2) and 2(y mod 2) + 1.
            let (half, t) = (y % 2, y / 2);
            let (band, y_stripe) = (t / lines, t % lines);
            let first = 2 * half * self.bands + band;
            let line = |k: usize| &parts[k][y_stripe * sl..(y_stripe + 1) * sl];
            interleave(self.pair, line(first), line(first + self.bands), row);
        }
        Ok(())
    }

    fn check(&self, frame: &[u8], k: usize, stripe: &[u8]) -> Result<(), Error> {
        if k >= self.count {
            return Err(Error::NoSuchStripe(k as u32));
        }
        let sizes = [
            (frame.len(), self.frame.frame_bytes()),
            (stripe.len(), self.stripe.frame_bytes()),
        ];
        for (got, expected) in sizes {
            if got != expected {
                return Err(Error::FrameSize { expected, got });
            }
        }
        Ok(())
    }

    /// For each line of 2SI stripe `k`: where its frame line starts, where
    /// the stripe line starts, and the offset of its first pixel pair in
    /// the frame line (every other pair from there is the stripe's).
    fn interleaved_rows(&self, k: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let frame_line = self.frame.line_bytes();
        let stripe_line = self.stripe.line_bytes();
        let lines = self.stripe.height as usize;
        let (sub, band) = (k / self.bands, k % self.bands);
        (0..lines).map(move |y_stripe| {
            let y = 2 * (band * lines + y_stripe) + sub / 2;
            (
                y * frame_line,
                y_stripe * stripe_line,
                (sub % 2) * self.pair,
            )
        })
    }

    /// Calls `copy(frame_offset, stripe_offset, len)` for every run of
    /// bytes stripe `k` shares with the frame, in stripe order.
    fn for_each_run(&self, k: usize, mut copy: impl FnMut(usize, usize, usize)) {
        let frame_line = self.frame.line_bytes();
        let stripe_line = self.stripe.line_bytes();
        let lines = self.stripe.height as usize;
        let (sub, band) = (k / self.bands, k % self.bands);
        for y_stripe in 0..lines {
            // Line of the sub-image, then of the frame.
            let y_sub = band * lines + y_stripe;
            let dst = y_stripe * stripe_line;
            match self.rule {
                Rule::Lines => copy(y_sub * frame_line, dst, stripe_line),
                Rule::Square => {
                    let y = (sub / 2) * (self.frame.height as usize / 2) + y_sub;
                    let x = (sub % 2) * stripe_line;
                    copy(y * frame_line + x, dst, stripe_line);
                }
                // The pair-by-pair definition; split and merge take the
                // row path (`interleaved_rows`), checked against this.
                Rule::TwoSampleInterleave => {
                    let y = 2 * y_sub + sub / 2;
                    let first = (sub % 2) * self.pair;
                    let row = y * frame_line;
                    // Every other pair of the line, starting at pair sub % 2.
                    for (i, off) in (first..frame_line).step_by(2 * self.pair).enumerate() {
                        copy(row + off, dst + i * self.pair, self.pair);
                    }
                }
            }
        }
    }
}

/// Copies every other `pair`-byte pair of `line` (from its first) into
/// `out`. Pair sizes of the known formats get a loop of fixed-size copies
/// (8K 2SI moves 16 million pairs a frame; a `memcpy` call each would not
/// keep up), and pairs of 4 and 5 bytes (uyvy422, uyvp) go two at a time
/// through one 16-byte load and store.
fn gather(pair: usize, line: &[u8], out: &mut [u8]) {
    fn fixed<const P: usize>(line: &[u8], out: &mut [u8]) {
        for (o, c) in out.chunks_exact_mut(P).zip(line.chunks(2 * P)) {
            o.copy_from_slice(&c[..P]);
        }
    }
    match pair {
        4 => wide_gather::<4>(line, out),
        5 => wide_gather::<5>(line, out),
        6 => fixed::<6>(line, out),
        _ => {
            for (o, c) in out.chunks_exact_mut(pair).zip(line.chunks(2 * pair)) {
                o.copy_from_slice(&c[..pair]);
            }
        }
    }
}

/// How many leading pairs of pairs a 16-byte window covers in a line of
/// `line` bytes and a stripe line of `stripe` bytes (pair pair `j` reads
/// line bytes `4Pj..4Pj+16` and writes stripe bytes `2Pj..2Pj+16`).
fn wide_pairs<const P: usize>(line: usize, stripe: usize) -> usize {
    let fits = |len: usize, step: usize| len.checked_sub(16).map_or(0, |l| l / step + 1);
    fits(line, 4 * P).min(fits(stripe, 2 * P))
}

/// [`gather`] for pairs of `P` ≤ 5 bytes: pairs `2j` and `2j+1` of the
/// stripe sit at bytes `0..P` and `2P..3P` of one 16-byte window of the
/// line; they are joined in a register and stored as 16 bytes, whose tail
/// the next store overwrites (the last pairs go one by one, so nothing is
/// written past them).
fn wide_gather<const P: usize>(line: &[u8], out: &mut [u8]) {
    let mask = (1u128 << (8 * P)) - 1;
    // The window of the last wide pair pair reaches past its two pairs,
    // never past `out`, and the tail loop below overwrites it.
    let wide = wide_pairs::<P>(line.len(), out.len());
    for j in 0..wide {
        let x = u128::from_le_bytes(window(line, 4 * P * j));
        let v = (x & mask) | (((x >> (16 * P)) & mask) << (8 * P));
        out[2 * P * j..2 * P * j + 16].copy_from_slice(&v.to_le_bytes());
    }
    let (out, line) = (
        &mut out[2 * P * wide..],
        &line[(4 * P * wide).min(line.len())..],
    );
    for (o, c) in out.chunks_exact_mut(P).zip(line.chunks(2 * P)) {
        o.copy_from_slice(&c[..P]);
    }
}

/// The 16 bytes of `b` from `at` (the caller checked they are there).
fn window(b: &[u8], at: usize) -> [u8; 16] {
    let mut w = [0u8; 16];
    w.copy_from_slice(&b[at..at + 16]);
    w
}

/// A 2SI frame line from its two stripes' lines: pairs of `a` and `b`
/// alternate, `a`'s first.
fn interleave(pair: usize, a: &[u8], b: &[u8], row: &mut [u8]) {
    match pair {
        4 => wide_interleave::<4>(a, b, row),
        5 => wide_interleave::<5>(a, b, row),
        _ => interleave_pairs(pair, a, b, row),
    }
}

fn interleave_pairs(pair: usize, a: &[u8], b: &[u8], row: &mut [u8]) {
    let pairs = a.chunks_exact(pair).zip(b.chunks_exact(pair));
    for (out, (x, y)) in row.chunks_exact_mut(2 * pair).zip(pairs) {
        out[..pair].copy_from_slice(x);
        out[pair..].copy_from_slice(y);
    }
}

/// [`interleave`] for pairs of `P` ≤ 5 bytes: two pairs of each stripe
/// per step, joined in one register into the line's next `4P` bytes.
fn wide_interleave<const P: usize>(a: &[u8], b: &[u8], row: &mut [u8]) {
    let mask = (1u128 << (8 * P)) - 1;
    let wide = wide_pairs::<P>(row.len(), a.len().min(b.len()));
    for j in 0..wide {
        let (x, y) = (
            u128::from_le_bytes(window(a, 2 * P * j)),
            u128::from_le_bytes(window(b, 2 * P * j)),
        );
        let (a1, b1) = ((x >> (8 * P)) & mask, (y >> (8 * P)) & mask);
        let joined = (x & mask) | ((y & mask) << (8 * P)) | (a1 << (16 * P)) | (b1 << (24 * P));
        let out = &mut row[4 * P * j..4 * P * (j + 1)];
        out[..16].copy_from_slice(&joined.to_le_bytes());
        // Five-byte pairs make 20 bytes: the last four are b1's top.
        let top = (b1 >> (128 - 24 * P)).to_le_bytes();
        out[16..].copy_from_slice(&top[..4 * P - 16]);
    }
    let done = 2 * P * wide;
    interleave_pairs(P, &a[done..], &b[done..], &mut row[2 * done..]);
}

/// The inverse of [`gather`]: `input`'s pairs into every other pair of
/// `line`.
fn scatter(pair: usize, input: &[u8], line: &mut [u8]) {
    fn fixed<const P: usize>(input: &[u8], line: &mut [u8]) {
        for (i, c) in input.chunks_exact(P).zip(line.chunks_mut(2 * P)) {
            c[..P].copy_from_slice(i);
        }
    }
    match pair {
        4 => wide_scatter::<4>(input, line),
        5 => wide_scatter::<5>(input, line),
        6 => fixed::<6>(input, line),
        _ => {
            for (i, c) in input.chunks_exact(pair).zip(line.chunks_mut(2 * pair)) {
                c[..pair].copy_from_slice(i);
            }
        }
    }
}

/// [`scatter`] for pairs of `P` ≤ 5 bytes: two pairs of the stripe go
/// into one 16-byte window of the line by read, mask and write, so the
/// other stripe's bytes in the window stay as they were.
fn wide_scatter<const P: usize>(input: &[u8], line: &mut [u8]) {
    let mask = (1u128 << (8 * P)) - 1;
    let ours = mask | (mask << (16 * P));
    let wide = wide_pairs::<P>(line.len(), input.len());
    for j in 0..wide {
        let s = u128::from_le_bytes(window(input, 2 * P * j));
        let x = u128::from_le_bytes(window(line, 4 * P * j));
        let v = (x & !ours) | (s & mask) | (((s >> (8 * P)) & mask) << (16 * P));
        line[4 * P * j..4 * P * j + 16].copy_from_slice(&v.to_le_bytes());
    }
    let rest = (4 * P * wide).min(line.len());
    let (input, line) = (&input[2 * P * wide..], &mut line[rest..]);
    for (i, c) in input.chunks_exact(P).zip(line.chunks_mut(2 * P)) {
        c[..P].copy_from_slice(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::PixelFormat;
    use proptest::prelude::*;

    fn fmt(w: u32, h: u32, pf: PixelFormat) -> VideoFormat {
        VideoFormat::new(w, h, pf).unwrap()
    }

    /// A frame whose every byte says where it came from.
    fn numbered(f: VideoFormat) -> Vec<u8> {
        (0..f.frame_bytes())
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
            .collect()
    }

    #[test]
    fn two_sample_interleave_follows_the_formula() {
        // rgb24: a pixel is 3 bytes, so a pair is 6; 8x4 pixels.
        let f = fmt(8, 4, PixelFormat::Rgb24);
        let s = Stripes::new(f, Rule::TwoSampleInterleave, 4).unwrap();
        assert_eq!(s.stripe_format(), fmt(4, 2, PixelFormat::Rgb24));
        let frame: Vec<u8> = (0..f.frame_bytes()).map(|i| (i / 3) as u8).collect();
        // Pixel (x, y) holds the value y*8 + x in all three bytes.
        for sub in 0..4 {
            let mut out = vec![0; s.stripe_format().frame_bytes()];
            s.split(&frame, sub, &mut out).unwrap();
            for (yp, row) in out.chunks(12).enumerate() {
                for (xp, px) in row.chunks(3).enumerate() {
                    // Invert s = 2(y&1) + ((x>>1)&1), x' = 2(x>>2) + (x&1), y' = y>>1.
                    let y = 2 * yp + sub / 2;
                    let x = 4 * (xp / 2) + 2 * (sub % 2) + (xp % 2);
                    assert_eq!(px, [(y * 8 + x) as u8; 3], "sub {sub} ({xp},{yp})");
                }
            }
        }
    }

    #[test]
    fn the_row_path_of_2si_matches_the_pair_by_pair_definition() {
        // Widths from one 16-byte window of pairs to many, with tails.
        for (pf, w) in PixelFormat::ALL
            .into_iter()
            .flat_map(|pf| (1..=40).map(move |q| (pf, 4 * q)))
        {
            let f = fmt(w, 8, pf);
            let Ok(s) = Stripes::new(f, Rule::TwoSampleInterleave, 8) else {
                continue;
            };
            let frame = numbered(f);
            let (mut merged, mut all) = (vec![0; frame.len()], Vec::new());
            for k in 0..8 {
                let mut fast = vec![0; s.stripe_format().frame_bytes()];
                s.split(&frame, k, &mut fast).unwrap();
                let mut slow = vec![0; fast.len()];
                s.for_each_run(k, |src, dst, len| {
                    slow[dst..dst + len].copy_from_slice(&frame[src..src + len]);
                });
                assert_eq!(fast, slow, "{pf:?} width {w} stripe {k}");
                s.merge(&fast, k, &mut merged).unwrap();
                all.extend_from_slice(&fast);
            }
            assert_eq!(merged, frame, "{pf:?} width {w}");
            let mut whole = vec![0; frame.len()];
            s.merge_all(&all, &mut whole).unwrap();
            assert_eq!(whole, frame, "{pf:?} width {w}: merge_all");
        }
    }

    #[test]
    fn square_takes_quadrants_and_lines_take_bands() {
        let f = fmt(8, 4, PixelFormat::Uyvy422);
        let frame = numbered(f);
        let q = Stripes::new(f, Rule::Square, 4).unwrap();
        let mut out = vec![0; q.stripe_format().frame_bytes()];
        q.split(&frame, 3, &mut out).unwrap();
        // Bottom right: lines 2 and 3, bytes 8..16 of each 16-byte line.
        assert_eq!(&out[..8], &frame[2 * 16 + 8..3 * 16]);
        assert_eq!(&out[8..], &frame[3 * 16 + 8..4 * 16]);
        let l = Stripes::new(f, Rule::Lines, 2).unwrap();
        assert_eq!(l.contiguous(1), Some(32..64));
        assert_eq!(q.contiguous(1), None);
    }

    #[test]
    fn eight_stripes_of_8k_are_2si_in_two_bands() {
        let f = fmt(7680, 4320, PixelFormat::Uyvp);
        let s = Stripes::new(f, Rule::TwoSampleInterleave, 8).unwrap();
        assert_eq!(s.stripe_format(), fmt(3840, 1080, PixelFormat::Uyvp));
        assert_eq!(s.stripe_format().frame_bytes() * 8, f.frame_bytes());
        assert_eq!(
            Stripes::from_stripe(s.stripe_format(), Rule::TwoSampleInterleave, 8),
            Ok(s)
        );
        let band = fmt(7680, 540, PixelFormat::Uyvp);
        let l = Stripes::from_stripe(band, Rule::Lines, 8).unwrap();
        assert_eq!(l.frame_format(), f);
        // 6 is no multiple of 4: no 2SI division has 6 stripes.
        assert!(Stripes::from_stripe(band, Rule::Square, 6).is_err());
    }

    #[test]
    fn impossible_geometries_are_refused_with_the_reason() {
        let f = fmt(8, 6, PixelFormat::Uyvy422);
        assert_eq!(
            Stripes::new(f, Rule::TwoSampleInterleave, 6),
            Err(Error::StripeGeometry {
                rule: Rule::TwoSampleInterleave,
                count: 6,
                width: 8,
                height: 6
            })
        );
        assert!(Stripes::new(f, Rule::Lines, 4).is_err());
        assert!(Stripes::new(f, Rule::Lines, 0).is_err());
        assert!(Stripes::new(f, Rule::Square, 8).is_err()); // 3 lines in 2 bands
        // Quadrants of 4:2:2 must be whole pixel pairs: 6/2 = 3 is not.
        assert!(Stripes::new(fmt(6, 4, PixelFormat::Uyvy422), Rule::Square, 4).is_err());
        let s = Stripes::new(f, Rule::Lines, 3).unwrap();
        let frame = numbered(f);
        assert_eq!(
            s.split(&frame, 3, &mut [0; 32]),
            Err(Error::NoSuchStripe(3))
        );
        assert!(matches!(
            s.split(&frame[1..], 0, &mut [0; 32]),
            Err(Error::FrameSize { .. })
        ));
        assert_eq!("2SI".parse(), Ok(Rule::TwoSampleInterleave));
        assert_eq!("zigzag".parse::<Rule>(), Err(Error::UnknownStripeRule));
    }

    fn geometry() -> impl Strategy<Value = (VideoFormat, Rule, usize)> {
        (
            prop::sample::select(PixelFormat::ALL.to_vec()),
            prop::sample::select(Rule::ALL.to_vec()),
            1usize..=8,
            1u32..=12,
            1u32..=12,
        )
            .prop_filter_map("a legal geometry", |(pf, rule, k, wq, hq)| {
                let count = if rule == Rule::Lines { k } else { 4 * k };
                let f = VideoFormat::new(4 * wq, 2 * hq * k as u32, pf).ok()?;
                Stripes::new(f, rule, count).ok()?;
                Some((f, rule, count))
            })
    }

    proptest! {
        #[test]
        fn split_then_merge_is_the_original((f, rule, count) in geometry()) {
            let s = Stripes::new(f, rule, count).unwrap();
            prop_assert_eq!(Stripes::from_stripe(s.stripe_format(), rule, count), Ok(s));
            let frame = numbered(f);
            let mut back = vec![0u8; f.frame_bytes()];
            let mut stripe = vec![0u8; s.stripe_format().frame_bytes()];
            for k in 0..count {
                s.split(&frame, k, &mut stripe).unwrap();
                if let Some(r) = s.contiguous(k) {
                    prop_assert_eq!(&stripe[..], &frame[r]);
                }
                s.merge(&stripe, k, &mut back).unwrap();
            }
            prop_assert_eq!(back, frame);
        }
    }
}
