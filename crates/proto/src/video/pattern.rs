//! A synthetic test pattern: colour bars that scroll one step per frame,
//! with the frame number drawn large in the top-left corner, so every
//! frame differs and a viewer can read which frame it is.
//!
//! Rendering is one row copy per line plus a small box of digits, so it
//! keeps up with 8K at video rates.

use crate::video::format::{PixelFormat, VideoFormat};

/// 75% bars in RGB: white, yellow, cyan, green, magenta, red, blue, black.
const BARS: [[u8; 3]; 8] = [
    [191, 191, 191],
    [191, 191, 0],
    [0, 191, 191],
    [0, 191, 0],
    [191, 0, 191],
    [191, 0, 0],
    [0, 0, 191],
    [0, 0, 0],
];

/// 5x7 digits, one byte a row, high five bits used.
const FONT: [[u8; 7]; 10] = [
    [0x70, 0x88, 0x98, 0xa8, 0xc8, 0x88, 0x70],
    [0x20, 0x60, 0x20, 0x20, 0x20, 0x20, 0x70],
    [0x70, 0x88, 0x08, 0x10, 0x20, 0x40, 0xf8],
    [0xf8, 0x10, 0x20, 0x10, 0x08, 0x88, 0x70],
    [0x10, 0x30, 0x50, 0x90, 0xf8, 0x10, 0x10],
    [0xf8, 0x80, 0xf0, 0x08, 0x08, 0x88, 0x70],
    [0x30, 0x40, 0x80, 0xf0, 0x88, 0x88, 0x70],
    [0xf8, 0x08, 0x10, 0x20, 0x40, 0x40, 0x40],
    [0x70, 0x88, 0x88, 0x70, 0x88, 0x88, 0x70],
    [0x70, 0x88, 0x88, 0x78, 0x08, 0x10, 0x60],
];

/// Renders frames of the scrolling-bars pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    format: VideoFormat,
    /// Two widths of bars, so any scroll offset is one contiguous copy.
    row: Vec<u8>,
    step_pgroups: usize,
}

/// One pixel group's bytes for a solid colour (at most 5 bytes).
fn pgroup(pf: PixelFormat, rgb: [u8; 3]) -> ([u8; 5], usize) {
    let [r, g, b] = rgb.map(|c| f64::from(c) / 255.0);
    // BT.709, narrow range.
    let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    let cb = (b - y) / 1.8556;
    let cr = (r - y) / 1.5748;
    let q8 = |v: f64, scale: f64, off: f64| (off + scale * v).round().clamp(0.0, 255.0) as u16;
    let (y8, cb8, cr8) = (
        q8(y, 219.0, 16.0),
        q8(cb, 224.0, 128.0),
        q8(cr, 224.0, 128.0),
    );
    let mut out = [0u8; 5];
    match pf {
        PixelFormat::Uyvy422 => {
            out[..4].copy_from_slice(&[cb8 as u8, y8 as u8, cr8 as u8, y8 as u8]);
            (out, 4)
        }
        PixelFormat::Uyvp => {
            let (y10, cb10, cr10) = (y8 << 2, cb8 << 2, cr8 << 2);
            let bits: u64 = (u64::from(cb10) << 30)
                | (u64::from(y10) << 20)
                | (u64::from(cr10) << 10)
                | u64::from(y10);
            out.copy_from_slice(&bits.to_be_bytes()[3..8]);
            (out, 5)
        }
        PixelFormat::Rgb24 => {
            out[..3].copy_from_slice(&rgb);
            (out, 3)
        }
    }
}

impl Pattern {
    /// Prepares the pattern for `format`.
    pub fn new(format: VideoFormat) -> Self {
        let pf = format.pixel_format;
        let groups = format.width as usize / pf.pgroup_pixels();
        let mut row = Vec::with_capacity(2 * format.line_bytes());
        for g in 0..2 * groups {
            let bar = (g % groups) * 8 / groups;
            let (bytes, n) = pgroup(pf, BARS[bar]);
            row.extend_from_slice(&bytes[..n]);
        }
        Pattern {
            format,
            row,
            step_pgroups: (groups / 240).max(1),
        }
    }

    /// Draws frame `number` into `out` (which must be `frame_bytes` long;
    /// a shorter buffer is filled as far as it goes).
    pub fn render(&self, number: u64, out: &mut [u8]) {
        let pf = self.format.pixel_format;
        let line = self.format.line_bytes();
        let groups = self.format.width as usize / pf.pgroup_pixels();
        let shift = (number as usize % groups.max(1)) * self.step_pgroups % groups.max(1);
        let src = &self.row[shift * pf.pgroup_bytes()..][..line];
        for row in out.chunks_exact_mut(line) {
            row.copy_from_slice(src);
        }
        self.draw_number(number, out);
    }

    fn draw_number(&self, number: u64, out: &mut [u8]) {
        let (w, h) = (self.format.width as usize, self.format.height as usize);
        let scale = (h / 12 / 7).max(1);
        let digits = number.to_string();
        let (cell_w, cell_h) = (6 * scale, 9 * scale);
        let box_w = (digits.len() * cell_w + 2 * scale).min(w);
        let box_h = cell_h.min(h);
        self.fill(out, 0, 0, box_w, box_h, [0, 0, 0]);
        for (k, d) in digits.bytes().enumerate() {
            let glyph = &FONT[usize::from(d - b'0')];
            for (gy, bits) in glyph.iter().enumerate() {
                for gx in 0..5 {
                    if bits & (0x80 >> gx) != 0 {
                        let x = scale + k * cell_w + gx * scale;
                        let y = scale + gy * scale;
                        self.fill(out, x, y, scale, scale, [235, 235, 235]);
                    }
                }
            }
        }
    }

    /// Fills a rectangle, widened to whole pixel groups and clipped.
    fn fill(&self, out: &mut [u8], x: usize, y: usize, w: usize, h: usize, rgb: [u8; 3]) {
        let pf = self.format.pixel_format;
        let (pp, pb) = (pf.pgroup_pixels(), pf.pgroup_bytes());
        let (fw, fh) = (self.format.width as usize, self.format.height as usize);
        let (bytes, n) = pgroup(pf, rgb);
        let line = self.format.line_bytes();
        let g0 = x / pp;
        let g1 = (x + w).min(fw).div_ceil(pp);
        for yy in y..(y + h).min(fh) {
            for g in g0..g1 {
                let at = yy * line + g * pb;
                if let Some(dst) = out.get_mut(at..at + n) {
                    dst.copy_from_slice(&bytes[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_differ_and_repeat_deterministically() {
        for pf in PixelFormat::ALL {
            let f = VideoFormat::new(320, 180, pf).unwrap();
            let p = Pattern::new(f);
            let mut a = vec![0u8; f.frame_bytes()];
            let mut b = vec![0u8; f.frame_bytes()];
            p.render(1, &mut a);
            p.render(2, &mut b);
            assert_ne!(a, b);
            let mut c = vec![0u8; f.frame_bytes()];
            p.render(1, &mut c);
            assert_eq!(a, c);
        }
    }

    #[test]
    fn tiny_frames_do_not_panic() {
        let f = VideoFormat::new(2, 1, PixelFormat::Uyvp).unwrap();
        let p = Pattern::new(f);
        let mut a = vec![0u8; f.frame_bytes()];
        p.render(123_456, &mut a);
    }

    #[test]
    fn uyvy_black_is_narrow_range() {
        let (b, n) = pgroup(PixelFormat::Uyvy422, [0, 0, 0]);
        assert_eq!(&b[..n], &[128, 16, 128, 16]);
    }
}
