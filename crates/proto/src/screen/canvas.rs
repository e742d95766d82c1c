//! The receiving side: a picture that applies frames, rolls back a frame
//! cut off half way, and builds catch-ups for peers that hold older frames.

use super::message::{ChunkBuilder, EncodedFrame, EncodedTile, TileIter, TileMode, compress};
use super::{Error, ScreenMessage, TileGrid};
use crate::video::format::VideoFormat;

/// A frame completed on a canvas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedFrame {
    /// Frame number; the canvas now holds this frame.
    pub number: u64,
    /// Base it was built on (`None`: key frame).
    pub base: Option<u64>,
    /// Capture time at the source, microseconds since the Unix epoch.
    pub captured_us: u64,
    /// Tiles it changed.
    pub tiles: u32,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    number: u64,
    base: Option<u64>,
    captured_us: u64,
    tiles: u32,
    seen: u32,
}

/// The current picture of a peer plus, per tile, the frame that last
/// changed it: applies received frames and builds catch-ups for others.
#[derive(Debug, Clone)]
pub struct Canvas {
    pub(super) grid: TileGrid,
    format: VideoFormat,
    pub(super) pixels: Vec<u8>,
    pub(super) tile_version: Vec<u64>,
    pub(super) version: Option<u64>,
    pub(super) captured_us: u64,
    pending: Option<Pending>,
    /// Frame generation that last touched each tile, to refuse a tile
    /// sent twice in one frame.
    tile_seen: Vec<u32>,
    generation: u32,
    scratch: Vec<u8>,
    /// Content and version of the tiles the open frame has changed, so a
    /// frame cut off half way can be rolled back to the last whole one.
    undo: Vec<u8>,
    undo_tiles: Vec<(usize, u64)>,
}

impl Canvas {
    /// An empty (all-zero, version-less) canvas for `format`.
    pub fn new(format: VideoFormat) -> Result<Self, Error> {
        let grid = TileGrid::new(format)?;
        Ok(Canvas {
            grid,
            format,
            pixels: vec![0; grid.frame_bytes()],
            tile_version: vec![0; grid.count()],
            version: None,
            captured_us: 0,
            pending: None,
            tile_seen: vec![0; grid.count()],
            generation: 0,
            scratch: Vec::new(),
            undo: Vec::new(),
            undo_tiles: Vec::new(),
        })
    }

    /// The video format.
    pub fn format(&self) -> VideoFormat {
        self.format
    }

    /// The tile layout.
    pub fn grid(&self) -> &TileGrid {
        &self.grid
    }

    /// The frame held, if a complete one is (none while a frame is being
    /// applied or after an aborted one).
    pub fn version(&self) -> Option<u64> {
        if self.pending.is_some() {
            None
        } else {
            self.version
        }
    }

    /// Capture time of the frame held.
    pub fn captured_us(&self) -> u64 {
        self.captured_us
    }

    /// Whether a frame has started and not yet ended.
    pub fn in_frame(&self) -> bool {
        self.pending.is_some()
    }

    /// The pixels (valid as a frame only when [`Canvas::version`] is set).
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// Rolls back a frame cut off mid-way, so the canvas holds the last
    /// whole frame again and any peer can continue it from there.
    pub fn abort(&mut self) {
        if self.pending.take().is_none() {
            return;
        }
        let mut at = 0;
        for &(i, version) in &self.undo_tiles {
            let len = self.grid.tile_len(i);
            self.grid
                .scatter(i, &self.undo[at..at + len], &mut self.pixels);
            self.tile_version[i] = version;
            at += len;
        }
        self.undo.clear();
        self.undo_tiles.clear();
    }

    /// Applies one message. Returns the frame it completed, if any. On an
    /// error the open frame is rolled back and the canvas still holds its
    /// last whole frame; the caller should drop the sender.
    pub fn apply(&mut self, msg: &ScreenMessage<'_>) -> Result<Option<CompletedFrame>, Error> {
        let result = match *msg {
            ScreenMessage::FrameStart {
                number,
                base,
                captured_us,
                tiles,
            } => self.start(number, base, captured_us, tiles).map(|()| None),
            ScreenMessage::Tiles(body) => self.tiles(body).map(|()| None),
            ScreenMessage::FrameEnd { number } => self.end(number).map(Some),
        };
        if result.is_err() {
            self.abort();
        }
        result
    }

    fn start(
        &mut self,
        number: u64,
        base: Option<u64>,
        captured_us: u64,
        tiles: u32,
    ) -> Result<(), Error> {
        // A new start while a frame is open means the old one was cut
        // off: its tiles are half applied.
        self.abort();
        let grid = self.grid.count();
        match base {
            Some(b) if self.version != Some(b) => {
                return Err(Error::BaseMismatch {
                    expected: Some(b),
                    held: self.version,
                });
            }
            Some(b) if number <= b => return Err(Error::NotAfterBase { number, base: b }),
            None if tiles as usize != grid => return Err(Error::KeyFrameTiles { tiles, grid }),
            _ => {}
        }
        if tiles as usize > grid {
            return Err(Error::TooManyTiles { tiles, grid });
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.tile_seen.fill(0);
            self.generation = 1;
        }
        self.pending = Some(Pending {
            number,
            base,
            captured_us,
            tiles,
            seen: 0,
        });
        Ok(())
    }

    fn tiles(&mut self, body: &[u8]) -> Result<(), Error> {
        let Some(mut p) = self.pending else {
            return Err(Error::TilesOutsideFrame);
        };
        for tile in TileIter::new(body) {
            if p.seen >= p.tiles {
                return Err(Error::TilesBeyondAnnounced { announced: p.tiles });
            }
            self.tile(&tile?, &p)?;
            p.seen += 1;
            self.pending = Some(p);
        }
        Ok(())
    }

    /// Checks and applies one tile of the open frame `p`.
    fn tile(&mut self, t: &EncodedTile<'_>, p: &Pending) -> Result<(), Error> {
        let i = t.index as usize;
        if i >= self.grid.count() {
            return Err(Error::TileIndex {
                index: t.index,
                count: self.grid.count(),
            });
        }
        if self.tile_seen[i] == self.generation {
            return Err(Error::TileTwice(t.index));
        }
        if p.base.is_none() && t.mode != TileMode::Replace {
            return Err(Error::XorInKeyFrame(t.index));
        }
        let len = self.grid.tile_len(i);
        self.scratch.resize(len, 0);
        let n = lz4_flex::block::decompress_into(t.data, &mut self.scratch)
            .map_err(|_| Error::Lz4 { index: t.index })?;
        if n != len {
            return Err(Error::TileLength {
                index: t.index,
                expected: len,
                got: n,
            });
        }
        self.grid.gather_append(i, &self.pixels, &mut self.undo);
        self.undo_tiles.push((i, self.tile_version[i]));
        match t.mode {
            TileMode::Xor => self.grid.xor_into(i, &self.scratch, &mut self.pixels),
            TileMode::Replace => self.grid.scatter(i, &self.scratch, &mut self.pixels),
        }
        self.tile_seen[i] = self.generation;
        self.tile_version[i] = p.number;
        Ok(())
    }

    fn end(&mut self, number: u64) -> Result<CompletedFrame, Error> {
        let Some(p) = self.pending else {
            return Err(Error::EndOutsideFrame);
        };
        if number != p.number {
            return Err(Error::EndMismatch {
                number,
                open: p.number,
            });
        }
        if p.seen != p.tiles {
            return Err(Error::MissingTiles {
                seen: p.seen,
                announced: p.tiles,
            });
        }
        self.pending = None;
        self.undo.clear();
        self.undo_tiles.clear();
        if p.base.is_none() {
            // Tiles untouched since an older version would look newer
            // than they are; a key frame resets them all.
            self.tile_version.fill(p.number);
        }
        self.version = Some(p.number);
        self.captured_us = p.captured_us;
        Ok(CompletedFrame {
            number: p.number,
            base: p.base,
            captured_us: p.captured_us,
            tiles: p.tiles,
        })
    }

    /// A frame that brings a peer holding `since` to this canvas's frame:
    /// every tile changed after `since` as `Replace`, or a key frame when
    /// `since` is `None` or not older than what this canvas holds.
    pub fn refresh(&self, since: Option<u64>) -> Result<EncodedFrame, Error> {
        let version = self.version().ok_or(Error::NoFrame)?;
        let base = since.filter(|&s| s < version);
        let mut chunks = ChunkBuilder::new();
        let mut tile = Vec::new();
        let mut packed = Vec::new();
        for i in 0..self.grid.count() {
            if base.is_some_and(|b| self.tile_version[i] <= b) {
                continue;
            }
            self.grid.gather(i, &self.pixels, &mut tile);
            compress(&tile, &mut packed);
            chunks.push(i, TileMode::Replace, &packed);
        }
        Ok(chunks.finish(version, base, self.captured_us))
    }
}
