//! What the screen codec refuses.

use thiserror::Error;

use crate::framing;

/// Why a screen message or frame was refused. On a receiving canvas any
/// of these means the sender is broken or hostile: the canvas has rolled
/// back to its last whole frame and the caller should drop the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The message is not well framed, or a field runs past its end.
    #[error(transparent)]
    Framing(#[from] framing::Error),
    /// Screen larger than the codec holds in memory.
    #[error("screen of {bytes} bytes exceeds the limit of {max} bytes")]
    ScreenTooLarge {
        /// Bytes one frame would need.
        bytes: usize,
        /// Largest accepted.
        max: usize,
    },
    /// A frame handed to the encoder of the wrong length.
    #[error("frame is {got} bytes, the screen format needs {expected}")]
    FrameSize {
        /// Bytes the format needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A frame number not above the last one encoded.
    #[error("frame {number} does not follow frame {previous}: numbers must increase")]
    NumberNotIncreasing {
        /// Number given.
        number: u64,
        /// Last number encoded.
        previous: u64,
    },
    /// A frame-start base flag other than 0 (key frame) or 1 (delta).
    #[error("frame base flag {0} (expected 0 or 1)")]
    BaseFlag(u8),
    /// A tile mode other than 0 (XOR) or 1 (replace).
    #[error("tile mode {0} (expected 0 or 1)")]
    TileMode(u8),
    /// Delta frame built on a version this canvas does not hold.
    #[error("delta frame expects base frame {expected:?}, canvas holds {held:?}")]
    BaseMismatch {
        /// Base the frame was built on.
        expected: Option<u64>,
        /// Version the canvas holds.
        held: Option<u64>,
    },
    /// A delta frame numbered at or below its own base.
    #[error("frame {number} is not after its base {base}")]
    NotAfterBase {
        /// Frame number.
        number: u64,
        /// Its base.
        base: u64,
    },
    /// A key frame that does not carry every tile.
    #[error("key frame announces {tiles} tiles, the screen has {grid}")]
    KeyFrameTiles {
        /// Tiles announced.
        tiles: u32,
        /// Tiles of the screen.
        grid: usize,
    },
    /// A frame announcing more tiles than the screen has.
    #[error("frame announces {tiles} tiles, the screen has {grid}")]
    TooManyTiles {
        /// Tiles announced.
        tiles: u32,
        /// Tiles of the screen.
        grid: usize,
    },
    /// Tiles with no frame open.
    #[error("tiles outside a frame")]
    TilesOutsideFrame,
    /// A tile index beyond the screen.
    #[error("tile {index} lies outside the screen's {count} tiles")]
    TileIndex {
        /// Index given.
        index: u32,
        /// Tiles of the screen.
        count: usize,
    },
    /// The same tile twice in one frame.
    #[error("tile {0} sent twice in one frame")]
    TileTwice(u32),
    /// More tiles than the frame start announced.
    #[error("more tiles than the {announced} the frame announced")]
    TilesBeyondAnnounced {
        /// Tiles announced.
        announced: u32,
    },
    /// An XOR tile in a key frame, which applies to any canvas.
    #[error("XOR tile {0} in a key frame")]
    XorInKeyFrame(u32),
    /// A tile whose LZ4 block does not decompress.
    #[error("tile {index}: LZ4 block does not decompress")]
    Lz4 {
        /// Tile index.
        index: u32,
    },
    /// A tile that decompresses to the wrong size.
    #[error("tile {index} decompresses to {got} bytes, the tile holds {expected}")]
    TileLength {
        /// Tile index.
        index: u32,
        /// Bytes of the tile.
        expected: usize,
        /// Bytes decompressed.
        got: usize,
    },
    /// A frame end with no frame open.
    #[error("frame end outside a frame")]
    EndOutsideFrame,
    /// A frame end whose number is not the open frame's.
    #[error("frame end {number} closes frame {open}")]
    EndMismatch {
        /// Number in the end.
        number: u64,
        /// Number of the open frame.
        open: u64,
    },
    /// A frame end before every announced tile came.
    #[error("frame ends after {seen} of {announced} announced tiles")]
    MissingTiles {
        /// Tiles received.
        seen: u32,
        /// Tiles announced.
        announced: u32,
    },
    /// Canvas has no complete frame to build a catch-up from.
    #[error("no complete frame yet")]
    NoFrame,
}
