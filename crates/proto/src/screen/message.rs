//! The codec's three messages on the wire, the tiles inside a `Tiles`
//! chunk, and the builder that cuts an encoded frame into chunks.

use super::{CHUNK_BYTES, Error};
use crate::framing::{Kind, Reader, Writer};

/// How a tile's bytes relate to the receiver's current tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileMode {
    /// XOR with the current content.
    Xor = 0,
    /// Replace the current content.
    Replace = 1,
}

/// A message of the screen codec, borrowed from a received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenMessage<'a> {
    /// Opens frame `number`.
    FrameStart {
        /// Frame number (the source's capture count).
        number: u64,
        /// Frame the receiver must hold, `None` for a key frame.
        base: Option<u64>,
        /// Capture time, microseconds since the Unix epoch (source clock).
        captured_us: u64,
        /// Tiles that follow in `Tiles` chunks.
        tiles: u32,
    },
    /// Encoded tiles; parsed by [`super::Canvas::apply`] with [`TileIter`].
    Tiles(&'a [u8]),
    /// Closes frame `number`.
    FrameEnd {
        /// Frame number.
        number: u64,
    },
}

impl<'a> ScreenMessage<'a> {
    /// Parses the body of a message of `kind`, `None` if the kind is not
    /// the codec's.
    pub fn parse(kind: Kind, body: &'a [u8]) -> Result<Option<Self>, Error> {
        let mut r = Reader::new(body);
        let msg = match kind {
            Kind::FrameStart => {
                let number = r.u64()?;
                let base = match r.u8()? {
                    0 => None,
                    1 => Some(r.u64()?),
                    flag => return Err(Error::BaseFlag(flag)),
                };
                let captured_us = r.u64()?;
                let tiles = r.u32()?;
                r.end()?;
                ScreenMessage::FrameStart {
                    number,
                    base,
                    captured_us,
                    tiles,
                }
            }
            Kind::Tiles => ScreenMessage::Tiles(body),
            Kind::FrameEnd => {
                let number = r.u64()?;
                r.end()?;
                ScreenMessage::FrameEnd { number }
            }
            _ => return Ok(None),
        };
        Ok(Some(msg))
    }

    /// Parses a whole framed message (header included); `None` if it is
    /// not one of the codec's kinds.
    pub fn parse_framed(msg: &'a [u8]) -> Result<Option<Self>, Error> {
        let (kind, body) = crate::framing::split(msg)?;
        Self::parse(kind, body)
    }

    /// The framed bytes of this message, ready for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        match *self {
            ScreenMessage::FrameStart {
                number,
                base,
                captured_us,
                tiles,
            } => {
                let mut w = Writer::new(Kind::FrameStart);
                w.u64(number);
                match base {
                    None => w.u8(0),
                    Some(b) => {
                        w.u8(1);
                        w.u64(b);
                    }
                }
                w.u64(captured_us);
                w.u32(tiles);
                w.finish()
            }
            ScreenMessage::Tiles(body) => {
                let mut w = Writer::new(Kind::Tiles);
                w.bytes(body);
                w.finish()
            }
            ScreenMessage::FrameEnd { number } => {
                let mut w = Writer::new(Kind::FrameEnd);
                w.u64(number);
                w.finish()
            }
        }
    }
}

/// One tile in a `Tiles` chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedTile<'a> {
    /// Tile index in raster order.
    pub index: u32,
    /// How to apply it.
    pub mode: TileMode,
    /// LZ4 block of the tile's bytes (XOR'd or plain).
    pub data: &'a [u8],
}

/// Walks the tiles of a `Tiles` chunk; stops with an error at the first
/// malformed one.
#[derive(Debug)]
pub struct TileIter<'a> {
    rest: &'a [u8],
}

impl<'a> TileIter<'a> {
    /// Iterates over the body of a `Tiles` message.
    pub fn new(body: &'a [u8]) -> Self {
        TileIter { rest: body }
    }

    fn read(r: &mut Reader<'a>) -> Result<EncodedTile<'a>, Error> {
        let index = r.u32()?;
        let mode = match r.u8()? {
            0 => TileMode::Xor,
            1 => TileMode::Replace,
            m => return Err(Error::TileMode(m)),
        };
        let len = r.u32()? as usize;
        let data = r.take(len)?;
        Ok(EncodedTile { index, mode, data })
    }
}

impl<'a> Iterator for TileIter<'a> {
    type Item = Result<EncodedTile<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let mut r = Reader::new(self.rest);
        let parsed = Self::read(&mut r);
        // After an error nothing more is read: the chunk is broken.
        self.rest = if parsed.is_ok() { r.rest() } else { &[] };
        Some(parsed)
    }
}

/// One frame as framed wire messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame {
    /// `FrameStart`, `Tiles`..., `FrameEnd`, each framed for the wire.
    pub messages: Vec<Vec<u8>>,
    /// Tiles carried.
    pub tiles: usize,
    /// Bytes on the wire, headers included.
    pub bytes: usize,
    /// Whether this is a key frame.
    pub key: bool,
}

/// Builds `Tiles` chunks, closing one when it passes [`CHUNK_BYTES`].
pub(super) struct ChunkBuilder {
    body: Vec<u8>,
    done: Vec<Vec<u8>>,
    tiles: u32,
    bytes: usize,
}

impl ChunkBuilder {
    pub(super) fn new() -> Self {
        ChunkBuilder {
            body: Vec::new(),
            done: Vec::new(),
            tiles: 0,
            bytes: 0,
        }
    }

    pub(super) fn push(&mut self, index: usize, mode: TileMode, data: &[u8]) {
        // Indices are below TileGrid::count, which MAX_SCREEN_BYTES keeps
        // far below u32::MAX; so are compressed tile lengths.
        self.body.extend_from_slice(&(index as u32).to_be_bytes());
        self.body.push(mode as u8);
        self.body
            .extend_from_slice(&(data.len() as u32).to_be_bytes());
        self.body.extend_from_slice(data);
        self.tiles += 1;
        if self.body.len() >= CHUNK_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.body.is_empty() {
            let msg = ScreenMessage::Tiles(&self.body).to_bytes();
            self.bytes += msg.len();
            self.done.push(msg);
            self.body.clear();
        }
    }

    /// Wraps the chunks in `FrameStart` and `FrameEnd`.
    pub(super) fn finish(
        mut self,
        number: u64,
        base: Option<u64>,
        captured_us: u64,
    ) -> EncodedFrame {
        self.flush();
        let start = ScreenMessage::FrameStart {
            number,
            base,
            captured_us,
            tiles: self.tiles,
        }
        .to_bytes();
        let end = ScreenMessage::FrameEnd { number }.to_bytes();
        let bytes = self.bytes + start.len() + end.len();
        let mut messages = Vec::with_capacity(self.done.len() + 2);
        messages.push(start);
        messages.append(&mut self.done);
        messages.push(end);
        EncodedFrame {
            messages,
            tiles: self.tiles as usize,
            bytes,
            key: base.is_none(),
        }
    }
}

/// LZ4-compresses `input` into `out` (replacing its content).
pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) {
    out.resize(lz4_flex::block::get_maximum_output_size(input.len()), 0);
    // The output was sized by the library's own bound, so this cannot
    // fail; fall back to an empty block only to keep the type total.
    let n = lz4_flex::block::compress_into(input, out).unwrap_or(0);
    out.truncate(n);
}
