//! `--plot`: rate, loss and delay over time as a PNG.
//!
//! Drawn by hand into an indexed-colour canvas and written as a PNG with
//! stored (uncompressed) deflate blocks: three line charts do not justify
//! a plotting stack with font and image dependencies. Labels use a 3×5
//! pixel font, doubled.

use std::path::Path;

use anyhow::{Context, Result};

use nagare_api::probe::{IntervalStats, Report};

const W: usize = 900;
const PANEL_H: usize = 180;
const H: usize = PANEL_H * 3 + 40;
const LEFT: usize = 70;
const RIGHT: usize = 20;

// Palette: white, black, grey, blue, red, green.
const PALETTE: [[u8; 3]; 6] = [
    [255, 255, 255],
    [0, 0, 0],
    [200, 200, 200],
    [30, 90, 200],
    [210, 40, 40],
    [20, 150, 60],
];
const BLACK: u8 = 1;
const GREY: u8 = 2;
const BLUE: u8 = 3;
const RED: u8 = 4;
const GREEN: u8 = 5;

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: u8) {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            self.px[y as usize * W + x as usize] = c;
        }
    }

    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: u8) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).max(1);
        for i in 0..=steps {
            let x = x0 + (x1 - x0) * i / steps;
            let y = y0 + (y1 - y0) * i / steps;
            self.set(x, y, c);
            self.set(x, y + 1, c);
        }
    }

    fn text(&mut self, x: i64, y: i64, s: &str, c: u8) {
        for (i, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for row in 0..5 {
                for col in 0..3 {
                    if g >> (14 - (row * 3 + col)) & 1 == 1 {
                        for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                            self.set(x + i as i64 * 8 + col * 2 + dx, y + row * 2 + dy, c);
                        }
                    }
                }
            }
        }
    }
}

/// 3×5 glyphs, rows top to bottom, 3 bits each.
fn glyph(c: char) -> u16 {
    match c.to_ascii_uppercase() {
        '0' => 0b111_101_101_101_111,
        '1' => 0b010_110_010_010_111,
        '2' => 0b111_001_111_100_111,
        '3' => 0b111_001_111_001_111,
        '4' => 0b101_101_111_001_001,
        '5' => 0b111_100_111_001_111,
        '6' => 0b111_100_111_101_111,
        '7' => 0b111_001_010_010_010,
        '8' => 0b111_101_111_101_111,
        '9' => 0b111_101_111_001_111,
        '.' => 0b000_000_000_000_010,
        '-' => 0b000_000_111_000_000,
        '/' => 0b001_001_010_100_100,
        '(' => 0b010_100_100_100_010,
        ')' => 0b010_001_001_001_010,
        ':' => 0b000_010_000_010_000,
        'A' => 0b010_101_111_101_101,
        'B' => 0b110_101_110_101_110,
        'C' => 0b111_100_100_100_111,
        'D' => 0b110_101_101_101_110,
        'E' => 0b111_100_110_100_111,
        'F' => 0b111_100_110_100_100,
        'G' => 0b111_100_101_101_111,
        'H' => 0b101_101_111_101_101,
        'I' => 0b111_010_010_010_111,
        'J' => 0b001_001_001_101_111,
        'K' => 0b101_101_110_101_101,
        'L' => 0b100_100_100_100_111,
        'M' => 0b101_111_111_101_101,
        'N' => 0b110_101_101_101_101,
        'O' => 0b111_101_101_101_111,
        'P' => 0b111_101_111_100_100,
        'Q' => 0b111_101_101_111_001,
        'R' => 0b110_101_110_101_101,
        'S' => 0b111_100_111_001_111,
        'T' => 0b111_010_010_010_010,
        'U' => 0b101_101_101_101_111,
        'V' => 0b101_101_101_101_010,
        'W' => 0b101_101_111_111_101,
        'X' => 0b101_101_010_101_101,
        'Y' => 0b101_101_010_010_010,
        'Z' => 0b111_001_010_100_111,
        _ => 0,
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// One panel: `series` of (x seconds, y, colour) lines over `t_max`.
fn panel(c: &mut Canvas, top: usize, title: &str, t_max: f64, series: &[(&[(f64, f64)], u8)]) {
    let (x0, x1) = (LEFT as i64, (W - RIGHT) as i64);
    let (y0, y1) = ((top + 20) as i64, (top + PANEL_H - 10) as i64);
    let y_max = series
        .iter()
        .flat_map(|(s, _)| s.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    for k in 0..=4 {
        let y = y1 - (y1 - y0) * k / 4;
        c.line((x0, y), (x1, y), GREY);
        c.text(4, y - 5, &fmt_num(y_max * k as f64 / 4.0), BLACK);
    }
    c.line((x0, y0), (x0, y1), BLACK);
    c.line((x0, y1), (x1, y1), BLACK);
    c.text(x0 + 4, top as i64 + 4, title, BLACK);
    let px = |(t, v): (f64, f64)| {
        (
            x0 + ((t / t_max.max(1e-9)) * (x1 - x0) as f64) as i64,
            y1 - ((v / y_max) * (y1 - y0) as f64) as i64,
        )
    };
    for (s, colour) in series {
        for w in s.windows(2) {
            c.line(px(w[0]), px(w[1]), *colour);
        }
        if let [one] = s {
            c.line(px(*one), px(*one), *colour);
        }
    }
}

/// Draws the report's interval series into `path`.
pub fn draw(path: &Path, r: &Report) -> Result<()> {
    let iv = &r.receiver.intervals;
    let step = iv
        .get(1)
        .map_or(1.0, |b| b.start_s - iv[0].start_s)
        .max(1e-9);
    let t_max = iv.last().map_or(1.0, |l| l.start_s + step);
    // Each interval's value drawn at its middle.
    let pts = |f: &dyn Fn(&IntervalStats) -> f64| -> Vec<(f64, f64)> {
        iv.iter().map(|i| (i.start_s + step / 2.0, f(i))).collect()
    };
    let rate = pts(&|i| i.rate_bps / 1e6);
    let set = vec![
        (0.0, r.set_bandwidth_bps / 1e6),
        (t_max, r.set_bandwidth_bps / 1e6),
    ];
    let lost = pts(&|i| i.lost as f64);
    let pdv = pts(&|i| i.pdv_max_ms);
    let jitter = pts(&|i| i.jitter_ms);
    let mut c = Canvas { px: vec![0; W * H] };
    panel(
        &mut c,
        0,
        "RATE MBIT/S (BLUE) VS SET (GREY)",
        t_max,
        &[(&set, GREY), (&rate, BLUE)],
    );
    panel(
        &mut c,
        PANEL_H,
        "LOST PACKETS PER INTERVAL",
        t_max,
        &[(&lost, RED)],
    );
    panel(
        &mut c,
        2 * PANEL_H,
        "PDV MAX MS (GREEN), RFC3550 JITTER MS (BLUE)",
        t_max,
        &[(&pdv, GREEN), (&jitter, BLUE)],
    );
    let axis = format!("TIME 0 - {} S", fmt_num(t_max));
    c.text(LEFT as i64, (3 * PANEL_H + 12) as i64, &axis, BLACK);
    let verdict = if r.verdict.pass { "PASS" } else { "FAIL" };
    c.text(
        (W - 200) as i64,
        (3 * PANEL_H + 12) as i64,
        verdict,
        if r.verdict.pass { GREEN } else { RED },
    );
    std::fs::write(path, png(&c.px))
        .with_context(|| format!("writing the --plot file {}", path.display()))
}

/// Up to three panels of y against x, one series each, sharing an x axis
/// from 0 to the largest x (`nagare loadtest --plot` draws frame drop and
/// CPU against stream count with it).
pub fn xy_chart(path: &Path, x_label: &str, panels: &[(&str, &[(f64, f64)])]) -> Result<()> {
    let x_max = panels
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let mut c = Canvas { px: vec![0; W * H] };
    for (k, ((title, series), colour)) in panels.iter().zip([RED, BLUE, GREEN]).enumerate() {
        panel(
            &mut c,
            k * PANEL_H,
            &title.to_uppercase(),
            x_max,
            &[(series, colour)],
        );
    }
    let axis = format!("{} 0 - {}", x_label.to_uppercase(), fmt_num(x_max));
    c.text(LEFT as i64, (3 * PANEL_H + 12) as i64, &axis, BLACK);
    std::fs::write(path, png(&c.px))
        .with_context(|| format!("writing the --plot file {}", path.display()))
}

/// An indexed-colour PNG of the canvas.
fn png(px: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity((W + 1) * H);
    for row in px.chunks(W) {
        raw.push(0); // filter: none
        raw.extend_from_slice(row);
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&(W as u32).to_be_bytes());
    ihdr.extend_from_slice(&(H as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]); // 8-bit palette
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"PLTE", &PALETTE.concat());
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(65_535).peekable();
    while let Some(b) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        out.extend_from_slice(&(b.len() as u16).to_le_bytes());
        out.extend_from_slice(&(!(b.len() as u16)).to_le_bytes());
        out.extend_from_slice(b);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in data {
        crc ^= u32::from(x);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_and_adler_match_known_values() {
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        let z = zlib_stored(b"Wikipedia");
        assert_eq!(&z[z.len() - 4..], &0x11e6_0398u32.to_be_bytes());
    }
}
