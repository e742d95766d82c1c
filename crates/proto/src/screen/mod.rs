//! Lossless screen codec (seed 004): the frame is cut into tiles, only
//! tiles that changed are sent, each XOR'd against its previous content
//! (so unchanged pixels become zero bytes) and LZ4-compressed.
//!
//! A frame travels as three kinds of tree messages, so relays can pass
//! it on chunk by chunk instead of waiting for the whole frame:
//! `FrameStart` (number, base, capture time, tile count), any number of
//! `Tiles` chunks, and `FrameEnd`.
//!
//! A frame has a *base*: `Some(b)` means its tiles apply to a canvas
//! holding frame `b` (delta frames have `b = number - 1`; a catch-up for
//! a lagging or re-attached peer has the peer's own version), `None` means
//! a key frame that replaces every tile and applies to anything. Tiles
//! come in two modes: `Xor` (against the tile's current content) and
//! `Replace` (content as is); catch-ups and key frames use `Replace`
//! because the sender does not hold the receiver's older content.
//!
//! Every [`Canvas`] remembers, per tile, the frame number that last
//! changed it, so any peer holding frame `r` can bring a peer holding
//! frame `v <= r` up to date with exactly the tiles changed after `v`.

use crate::Error;
use crate::tree::wire::{self as tree_wire, Kind};
use crate::video::format::VideoFormat;

/// Tile edge in pixels.
pub const TILE: usize = 64;

/// Largest frame the codec holds (8K RGB is about 100 MB). A peer
/// announcing more is refused before anything is allocated.
pub const MAX_SCREEN_BYTES: usize = 128 << 20;

/// Target size of one `Tiles` chunk; a chunk is closed once it passes
/// this, so hops forward data while the rest of the frame is in flight.
pub const CHUNK_BYTES: usize = 64 << 10;

/// How a tile's bytes relate to the receiver's current tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileMode {
    /// XOR with the current content.
    Xor = 0,
    /// Replace the current content.
    Replace = 1,
}

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

    /// The rows of tile `i` within `frame`, each as a byte range.
    fn rows_of(&self, i: usize) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (x, y, w, h) = self.rect(i);
        let line = self.line_bytes;
        (y..y + h).map(move |yy| yy * line + x..yy * line + x + w)
    }

    fn gather(&self, i: usize, frame: &[u8], out: &mut Vec<u8>) {
        out.clear();
        self.gather_append(i, frame, out);
    }

    fn gather_append(&self, i: usize, frame: &[u8], out: &mut Vec<u8>) {
        for r in self.rows_of(i) {
            out.extend_from_slice(&frame[r]);
        }
    }

    fn scatter(&self, i: usize, tile: &[u8], frame: &mut [u8]) {
        let mut at = 0;
        for r in self.rows_of(i) {
            let n = r.len();
            frame[r].copy_from_slice(&tile[at..at + n]);
            at += n;
        }
    }

    fn xor_into(&self, i: usize, tile: &[u8], frame: &mut [u8]) {
        let mut at = 0;
        for r in self.rows_of(i) {
            let n = r.len();
            for (d, s) in frame[r].iter_mut().zip(&tile[at..at + n]) {
                *d ^= s;
            }
            at += n;
        }
    }

    fn differs(&self, i: usize, a: &[u8], b: &[u8]) -> bool {
        self.rows_of(i).any(|r| a[r.clone()] != b[r])
    }
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
    /// Encoded tiles; parsed by [`Canvas::apply`] with [`TileIter`].
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
        let mut r = tree_wire::Reader::new(body);
        let msg = match kind {
            Kind::FrameStart => {
                let number = r.u64()?;
                let base = match r.u8()? {
                    0 => None,
                    1 => Some(r.u64()?),
                    _ => return Err(Error::Malformed("frame base flag")),
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

    /// The framed bytes of this message, ready for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        match *self {
            ScreenMessage::FrameStart {
                number,
                base,
                captured_us,
                tiles,
            } => {
                let mut w = tree_wire::Writer::new(Kind::FrameStart);
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
                let mut w = tree_wire::Writer::new(Kind::Tiles);
                w.bytes(body);
                w.finish()
            }
            ScreenMessage::FrameEnd { number } => {
                let mut w = tree_wire::Writer::new(Kind::FrameEnd);
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
pub struct TileIter<'a> {
    rest: &'a [u8],
}

impl<'a> TileIter<'a> {
    /// Iterates over the body of a `Tiles` message.
    pub fn new(body: &'a [u8]) -> Self {
        TileIter { rest: body }
    }
}

impl<'a> Iterator for TileIter<'a> {
    type Item = Result<EncodedTile<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let mut r = tree_wire::Reader::new(self.rest);
        let parsed = (|| {
            let index = r.u32()?;
            let mode = match r.u8()? {
                0 => TileMode::Xor,
                1 => TileMode::Replace,
                _ => return Err(Error::Malformed("tile mode")),
            };
            let len = r.u32()? as usize;
            let data = r.take(len)?;
            Ok(EncodedTile { index, mode, data })
        })();
        match parsed {
            Ok(t) => {
                self.rest = r.rest();
                Some(Ok(t))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// Builds `Tiles` chunks, closing one when it passes [`CHUNK_BYTES`].
struct ChunkBuilder {
    body: Vec<u8>,
    done: Vec<Vec<u8>>,
    tiles: u32,
    bytes: usize,
}

impl ChunkBuilder {
    fn new() -> Self {
        ChunkBuilder {
            body: Vec::new(),
            done: Vec::new(),
            tiles: 0,
            bytes: 0,
        }
    }

    fn push(&mut self, index: usize, mode: TileMode, data: &[u8]) {
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
    fn finish(mut self, number: u64, base: Option<u64>, captured_us: u64) -> EncodedFrame {
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
    grid: TileGrid,
    format: VideoFormat,
    pixels: Vec<u8>,
    tile_version: Vec<u64>,
    version: Option<u64>,
    captured_us: u64,
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
        let result = self.apply_inner(msg);
        if result.is_err() {
            self.abort();
        }
        result
    }

    fn apply_inner(&mut self, msg: &ScreenMessage<'_>) -> Result<Option<CompletedFrame>, Error> {
        match *msg {
            ScreenMessage::FrameStart {
                number,
                base,
                captured_us,
                tiles,
            } => {
                // A new start while a frame is open means the old one was
                // cut off: its tiles are half applied.
                self.abort();
                match base {
                    Some(b) if self.version != Some(b) => {
                        return Err(Error::BaseMismatch {
                            expected: Some(b),
                            held: self.version,
                        });
                    }
                    Some(b) if number <= b => return Err(Error::Malformed("frame not after base")),
                    None if tiles as usize != self.grid.count() => {
                        return Err(Error::Malformed("key frame must carry every tile"));
                    }
                    _ => {}
                }
                if tiles as usize > self.grid.count() {
                    return Err(Error::Malformed("more tiles than the grid has"));
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
                Ok(None)
            }
            ScreenMessage::Tiles(body) => {
                let Some(mut p) = self.pending else {
                    return Err(Error::Malformed("tiles outside a frame"));
                };
                for tile in TileIter::new(body) {
                    let t = tile?;
                    let i = t.index as usize;
                    if i >= self.grid.count() {
                        return Err(Error::Malformed("tile index outside the grid"));
                    }
                    if self.tile_seen[i] == self.generation {
                        return Err(Error::Malformed("tile sent twice in one frame"));
                    }
                    if p.seen >= p.tiles {
                        return Err(Error::Malformed("more tiles than announced"));
                    }
                    if p.base.is_none() && t.mode != TileMode::Replace {
                        return Err(Error::Malformed("XOR tile in a key frame"));
                    }
                    let len = self.grid.tile_len(i);
                    self.scratch.resize(len, 0);
                    let n = lz4_flex::block::decompress_into(t.data, &mut self.scratch)
                        .map_err(|_| Error::Malformed("LZ4 block"))?;
                    if n != len {
                        return Err(Error::Malformed("tile decompresses to the wrong size"));
                    }
                    self.grid.gather_append(i, &self.pixels, &mut self.undo);
                    self.undo_tiles.push((i, self.tile_version[i]));
                    match t.mode {
                        TileMode::Xor => self.grid.xor_into(i, &self.scratch, &mut self.pixels),
                        TileMode::Replace => self.grid.scatter(i, &self.scratch, &mut self.pixels),
                    }
                    self.tile_seen[i] = self.generation;
                    self.tile_version[i] = p.number;
                    p.seen += 1;
                }
                self.pending = Some(p);
                Ok(None)
            }
            ScreenMessage::FrameEnd { number } => {
                let Some(p) = self.pending else {
                    return Err(Error::Malformed("frame end outside a frame"));
                };
                if number != p.number || p.seen != p.tiles {
                    return Err(Error::Malformed("frame end does not match its start"));
                }
                self.pending = None;
                self.undo.clear();
                self.undo_tiles.clear();
                if p.base.is_none() {
                    // Tiles untouched since an older version would look
                    // newer than they are; a key frame resets them all.
                    self.tile_version.fill(p.number);
                }
                self.version = Some(p.number);
                self.captured_us = p.captured_us;
                Ok(Some(CompletedFrame {
                    number: p.number,
                    base: p.base,
                    captured_us: p.captured_us,
                    tiles: p.tiles,
                }))
            }
        }
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

fn compress(input: &[u8], out: &mut Vec<u8>) {
    out.resize(lz4_flex::block::get_maximum_output_size(input.len()), 0);
    // The output was sized by the library's own bound, so this cannot
    // fail; fall back to an empty block only to keep the type total.
    let n = lz4_flex::block::compress_into(input, out).unwrap_or(0);
    out.truncate(n);
}

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
        if self.canvas.version.is_some_and(|v| number <= v) {
            return Err(Error::Malformed("frame numbers must increase"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::format::PixelFormat;
    use crate::video::pattern::Pattern;
    use proptest::prelude::*;

    fn apply_all(
        canvas: &mut Canvas,
        frame: &EncodedFrame,
    ) -> Result<Option<CompletedFrame>, Error> {
        let mut done = None;
        for m in &frame.messages {
            let (kind, body) = tree_wire::split(m)?;
            let msg = ScreenMessage::parse(kind, body)?.expect("screen message");
            if let Some(c) = canvas.apply(&msg)? {
                done = Some(c);
            }
        }
        Ok(done)
    }

    fn rgb(w: u32, h: u32) -> VideoFormat {
        VideoFormat::new(w, h, PixelFormat::Rgb24).unwrap()
    }

    #[test]
    fn pattern_round_trips_and_sends_only_changed_tiles() {
        let f = rgb(320, 240);
        let p = Pattern::new(f);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        let mut buf = vec![0; f.frame_bytes()];
        for n in 0..5 {
            p.render(n, &mut buf);
            let e = enc.encode(&buf, n, 1000 + n).unwrap();
            assert_eq!(e.key, n == 0);
            let done = apply_all(&mut dec, &e).unwrap().unwrap();
            assert_eq!(done.number, n);
            assert_eq!(done.captured_us, 1000 + n);
            assert_eq!(dec.pixels(), &buf[..]);
        }
        // An unchanged frame costs no tiles.
        let e = enc.encode(&buf, 5, 0).unwrap();
        assert_eq!(e.tiles, 0);
        apply_all(&mut dec, &e).unwrap().unwrap();
        assert_eq!(dec.version(), Some(5));
    }

    #[test]
    fn periodic_key_frames() {
        let f = rgb(64, 64);
        let mut enc = Encoder::new(f, 3).unwrap();
        let buf = vec![7; f.frame_bytes()];
        let keys: Vec<bool> = (0..7)
            .map(|n| enc.encode(&buf, n, 0).unwrap().key)
            .collect();
        assert_eq!(keys, [true, false, false, true, false, false, true]);
    }

    #[test]
    fn delta_on_wrong_base_is_refused() {
        let f = rgb(128, 64);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        let a = vec![1; f.frame_bytes()];
        let mut b = a.clone();
        enc.encode(&a, 0, 0).unwrap();
        b[5] = 9;
        let e = enc.encode(&b, 1, 0).unwrap();
        assert!(matches!(
            apply_all(&mut dec, &e),
            Err(Error::BaseMismatch {
                expected: Some(0),
                held: None
            })
        ));
    }

    #[test]
    fn refresh_brings_a_lagging_canvas_up_to_date() {
        let f = rgb(320, 400);
        let p = Pattern::new(f);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut relay = Canvas::new(f).unwrap();
        let mut lagging = Canvas::new(f).unwrap();
        let mut buf = vec![0; f.frame_bytes()];
        p.render(0, &mut buf);
        for n in 0..6 {
            // One pixel a frame, each in its own tile row.
            if n > 0 {
                buf[n as usize * TILE * f.line_bytes()] ^= 0xff;
            }
            let e = enc.encode(&buf, n, n).unwrap();
            apply_all(&mut relay, &e).unwrap();
            if n < 2 {
                apply_all(&mut lagging, &e).unwrap();
            }
        }
        let r = relay.refresh(lagging.version()).unwrap();
        assert!(!r.key);
        assert_eq!(r.tiles, 4, "only the tiles changed in frames 2..=5");
        let done = apply_all(&mut lagging, &r).unwrap().unwrap();
        assert_eq!((done.number, done.base), (5, Some(1)));
        assert_eq!(lagging.pixels(), &buf[..]);
        // And it follows deltas from there.
        p.render(6, &mut buf);
        apply_all(&mut lagging, &enc.encode(&buf, 6, 6).unwrap()).unwrap();
        assert_eq!(lagging.pixels(), &buf[..]);
    }

    #[test]
    fn refresh_for_a_peer_ahead_is_a_key_frame() {
        let f = rgb(64, 64);
        let mut enc = Encoder::new(f, 0).unwrap();
        enc.encode(&vec![3; f.frame_bytes()], 4, 0).unwrap();
        let r = enc.canvas().refresh(Some(9)).unwrap();
        assert!(r.key);
        let mut c = Canvas::new(f).unwrap();
        apply_all(&mut c, &r).unwrap();
        assert_eq!(c.version(), Some(4));
    }

    #[test]
    fn cut_off_frame_rolls_back() {
        let f = rgb(256, 128);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        apply_all(
            &mut dec,
            &enc.encode(&vec![0; f.frame_bytes()], 0, 0).unwrap(),
        )
        .unwrap();
        let e = enc.encode(&vec![9; f.frame_bytes()], 1, 0).unwrap();
        for m in &e.messages[..2] {
            let (k, b) = tree_wire::split(m).unwrap();
            dec.apply(&ScreenMessage::parse(k, b).unwrap().unwrap())
                .unwrap();
        }
        assert_eq!(dec.version(), None, "no whole frame while one is open");
        dec.abort();
        assert_eq!(dec.version(), Some(0));
        assert_eq!(dec.pixels(), &vec![0; f.frame_bytes()][..], "rolled back");
        apply_all(&mut dec, &enc.canvas().refresh(Some(0)).unwrap()).unwrap();
        assert_eq!(dec.pixels(), enc.canvas().pixels());
    }

    #[test]
    fn screens_above_the_limit_are_refused_before_allocating() {
        let f = VideoFormat::new(16384, 16384, PixelFormat::Uyvp).unwrap();
        assert!(matches!(Canvas::new(f), Err(Error::ScreenTooLarge { .. })));
    }

    #[test]
    fn hostile_tiles_are_refused() {
        let f = rgb(64, 64);
        let mut c = Canvas::new(f).unwrap();
        let start = ScreenMessage::FrameStart {
            number: 1,
            base: None,
            captured_us: 0,
            tiles: 1,
        };
        c.apply(&start).unwrap();
        // Index out of range.
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&1u32.to_be_bytes());
        body.push(0);
        assert!(c.apply(&ScreenMessage::Tiles(&body)).is_err());
        // A block that claims a huge literal run.
        c.apply(&start).unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(&[0xf0, 0xff, 0xff]);
        assert!(c.apply(&ScreenMessage::Tiles(&body)).is_err());
        // Length beyond the chunk.
        c.apply(&start).unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(c.apply(&ScreenMessage::Tiles(&body)).is_err());
    }

    fn frames() -> impl Strategy<Value = (VideoFormat, Vec<Vec<u8>>)> {
        (
            1u32..150,
            1u32..150,
            prop::sample::select(PixelFormat::ALL.to_vec()),
        )
            .prop_flat_map(|(w, h, pf)| {
                let w = w.div_ceil(2) * 2;
                let f = VideoFormat::new(w, h, pf).unwrap();
                let n = f.frame_bytes();
                // Sparse edits on a base so deltas are partial, plus noise.
                (
                    Just(f),
                    prop::collection::vec(any::<u8>(), n),
                    prop::collection::vec(prop::collection::vec((0..n, any::<u8>()), 0..40), 1..6),
                )
                    .prop_map(|(f, base, edits)| {
                        let mut frames = vec![base];
                        for e in edits {
                            let mut next = frames.last().unwrap().clone();
                            for (at, v) in e {
                                next[at] = v;
                            }
                            frames.push(next);
                        }
                        (f, frames)
                    })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn round_trip_is_bit_exact((f, frames) in frames(), key_interval in 0u64..4) {
            let mut enc = Encoder::new(f, key_interval).unwrap();
            let mut dec = Canvas::new(f).unwrap();
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, n as u64).unwrap();
                apply_all(&mut dec, &e).unwrap().unwrap();
                prop_assert_eq!(dec.pixels(), &fr[..]);
            }
        }

        #[test]
        fn refresh_from_any_older_version_is_bit_exact((f, frames) in frames(), since in 0usize..6) {
            let mut enc = Encoder::new(f, 0).unwrap();
            let mut old = Canvas::new(f).unwrap();
            let since = since.min(frames.len() - 1);
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, 0).unwrap();
                if n <= since {
                    apply_all(&mut old, &e).unwrap();
                }
            }
            let r = enc.canvas().refresh(old.version()).unwrap();
            apply_all(&mut old, &r).unwrap();
            prop_assert_eq!(old.pixels(), &frames.last().unwrap()[..]);
        }

        #[test]
        fn frame_cut_anywhere_rolls_back_and_catches_up((f, frames) in frames(), cut in any::<prop::sample::Index>()) {
            let mut enc = Encoder::new(f, 0).unwrap();
            let mut dec = Canvas::new(f).unwrap();
            let last = frames.len() - 1;
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, 0).unwrap();
                if n < last {
                    apply_all(&mut dec, &e).unwrap();
                    continue;
                }
                let held = dec.pixels().to_vec();
                for m in &e.messages[..cut.index(e.messages.len())] {
                    let (k, b) = tree_wire::split(m).unwrap();
                    dec.apply(&ScreenMessage::parse(k, b).unwrap().unwrap()).unwrap();
                }
                dec.abort();
                prop_assert_eq!(dec.pixels(), &held[..]);
            }
            if dec.version() != enc.canvas().version() {
                let r = enc.canvas().refresh(dec.version()).unwrap();
                apply_all(&mut dec, &r).unwrap();
            }
            prop_assert_eq!(dec.pixels(), &frames[last][..]);
        }

        #[test]
        fn arbitrary_messages_never_panic(kind in 0u8..=255, body in prop::collection::vec(any::<u8>(), 0..300)) {
            let f = rgb(64, 64);
            let mut c = Canvas::new(f).unwrap();
            let start = ScreenMessage::FrameStart { number: 1, base: None, captured_us: 0, tiles: 1 };
            c.apply(&start).unwrap();
            if let Ok(k) = Kind::try_from(kind) {
                if let Ok(Some(m)) = ScreenMessage::parse(k, &body) {
                    let _ = c.apply(&m);
                }
            }
        }
    }
}
