//! The tile layout of a screen, in bytes of the packed frame.

use super::{Error, MAX_SCREEN_BYTES, TILE};
use crate::video::format::VideoFormat;

/// The tile layout of one video format, in bytes of the packed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileGrid {
    line_bytes: usize,
    height: usize,
    tile_w_bytes: usize,
    cols: usize,
    rows: usize,
}

impl TileGrid {
    /// Lays tiles over `format`, refusing frames above [`MAX_SCREEN_BYTES`].
    pub fn new(format: VideoFormat) -> Result<Self, Error> {
        let bytes = format.frame_bytes();
        if bytes > MAX_SCREEN_BYTES {
            return Err(Error::ScreenTooLarge {
                bytes,
                max: MAX_SCREEN_BYTES,
            });
        }
        let pf = format.pixel_format;
        let line_bytes = format.line_bytes();
        let tile_w_bytes = TILE / pf.pgroup_pixels() * pf.pgroup_bytes();
        Ok(TileGrid {
            line_bytes,
            height: format.height as usize,
            tile_w_bytes,
            cols: line_bytes.div_ceil(tile_w_bytes),
            rows: (format.height as usize).div_ceil(TILE),
        })
    }

    /// Number of tiles.
    pub fn count(&self) -> usize {
        self.cols * self.rows
    }

    /// Bytes in one frame.
    pub fn frame_bytes(&self) -> usize {
        self.line_bytes * self.height
    }

    /// Byte column, line, width in bytes and height in lines of tile `i`.
    fn rect(&self, i: usize) -> (usize, usize, usize, usize) {
        let (r, c) = (i / self.cols, i % self.cols);
        let x = c * self.tile_w_bytes;
        let y = r * TILE;
        (
            x,
            y,
            self.tile_w_bytes.min(self.line_bytes - x),
            TILE.min(self.height - y),
        )
    }

    /// Bytes of tile `i` laid out contiguously.
    pub fn tile_len(&self, i: usize) -> usize {
        let (_, _, w, h) = self.rect(i);
        w * h
    }

    /// The rows of tile `i` within a frame, each as a byte range.
    fn rows_of(&self, i: usize) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (x, y, w, h) = self.rect(i);
        let line = self.line_bytes;
        (y..y + h).map(move |yy| yy * line + x..yy * line + x + w)
    }

    /// Copies tile `i` of `frame` into `out`, replacing its content.
    pub(super) fn gather(&self, i: usize, frame: &[u8], out: &mut Vec<u8>) {
        out.clear();
        self.gather_append(i, frame, out);
    }

    /// Appends tile `i` of `frame` to `out`.
    pub(super) fn gather_append(&self, i: usize, frame: &[u8], out: &mut Vec<u8>) {
        for r in self.rows_of(i) {
            out.extend_from_slice(&frame[r]);
        }
    }

    /// Writes the contiguous `tile` into tile `i` of `frame`.
    pub(super) fn scatter(&self, i: usize, tile: &[u8], frame: &mut [u8]) {
        let mut at = 0;
        for r in self.rows_of(i) {
            let n = r.len();
            frame[r].copy_from_slice(&tile[at..at + n]);
            at += n;
        }
    }

    /// XORs the contiguous `tile` into tile `i` of `frame`.
    pub(super) fn xor_into(&self, i: usize, tile: &[u8], frame: &mut [u8]) {
        let mut at = 0;
        for r in self.rows_of(i) {
            let n = r.len();
            for (d, s) in frame[r].iter_mut().zip(&tile[at..at + n]) {
                *d ^= s;
            }
            at += n;
        }
    }

    /// Whether tile `i` differs between frames `a` and `b`.
    pub(super) fn differs(&self, i: usize, a: &[u8], b: &[u8]) -> bool {
        self.rows_of(i).any(|r| a[r.clone()] != b[r])
    }
}
