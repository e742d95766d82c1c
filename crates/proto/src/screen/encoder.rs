//! The sending side: encodes captured frames against the previous one.

use super::message::{ChunkBuilder, EncodedFrame, TileMode, compress};
use super::{Canvas, Error};
use crate::video::format::VideoFormat;

/// Encodes captured frames against the previous one: the source side.
#[derive(Debug, Clone)]
pub struct Encoder {
    canvas: Canvas,
    key_interval: u64,
    last_key: Option<u64>,
    tile: Vec<u8>,
    delta: Vec<u8>,
    packed: Vec<u8>,
}

impl Encoder {
    /// An encoder for `format` that sends a key frame at least every
    /// `key_interval` frames (0: only the first).
    pub fn new(format: VideoFormat, key_interval: u64) -> Result<Self, Error> {
        Ok(Encoder {
            canvas: Canvas::new(format)?,
            key_interval,
            last_key: None,
            tile: Vec::new(),
            delta: Vec::new(),
            packed: Vec::new(),
        })
    }

    /// The last frame encoded, as receivers hold it.
    pub fn canvas(&self) -> &Canvas {
        &self.canvas
    }

    /// Encodes `frame` (packed, `format.frame_bytes()` long) as frame
    /// `number`, which must be above the previous one.
    pub fn encode(
        &mut self,
        frame: &[u8],
        number: u64,
        captured_us: u64,
    ) -> Result<EncodedFrame, Error> {
        let grid = self.canvas.grid;
        if frame.len() != grid.frame_bytes() {
            return Err(Error::FrameSize {
                expected: grid.frame_bytes(),
                got: frame.len(),
            });
        }
        if let Some(previous) = self.canvas.version.filter(|&v| number <= v) {
            return Err(Error::NumberNotIncreasing { number, previous });
        }
        let key = match (self.canvas.version, self.last_key) {
            (None, _) | (_, None) => true,
            (Some(_), Some(k)) => self.key_interval > 0 && number - k >= self.key_interval,
        };
        let mut chunks = ChunkBuilder::new();
        for i in 0..grid.count() {
            if !key && !grid.differs(i, frame, &self.canvas.pixels) {
                continue;
            }
            grid.gather(i, frame, &mut self.tile);
            let mode = if key {
                compress(&self.tile, &mut self.packed);
                TileMode::Replace
            } else {
                grid.gather(i, &self.canvas.pixels, &mut self.delta);
                for (d, s) in self.delta.iter_mut().zip(&self.tile) {
                    *d ^= s;
                }
                compress(&self.delta, &mut self.packed);
                TileMode::Xor
            };
            chunks.push(i, mode, &self.packed);
            grid.scatter(i, &self.tile, &mut self.canvas.pixels);
            self.canvas.tile_version[i] = number;
        }
        let base = if key { None } else { self.canvas.version };
        if key {
            self.last_key = Some(number);
            self.canvas.tile_version.fill(number);
        }
        self.canvas.version = Some(number);
        self.canvas.captured_us = captured_us;
        Ok(chunks.finish(number, base, captured_us))
    }
}
