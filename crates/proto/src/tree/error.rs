//! What the tree protocol refuses.

use thiserror::Error;

use crate::framing::{self, Kind};
use crate::screen;
use crate::video::format::{PixelFormat, VideoFormat};

/// Why a tree message was refused or a link dropped. `Copy`, so machines
/// can put it in events and counters without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The message is not well framed, or a field runs past its end.
    #[error(transparent)]
    Framing(#[from] framing::Error),
    /// A frame message the screen codec refused.
    #[error(transparent)]
    Screen(#[from] screen::Error),
    /// An address family byte other than 4 or 6.
    #[error("address family {0} (expected 4 or 6)")]
    AddressFamily(u8),
    /// An attach's version flag other than 0 (none) or 1 (a version).
    #[error("version flag {0} (expected 0 or 1)")]
    VersionFlag(u8),
    /// A welcome's pixel format code that names no format.
    #[error("pixel format code {0} (expected 0, 1 or 2)")]
    PixelFormatCode(u8),
    /// A welcome's format that is not a valid video format.
    #[error("screen format {width}x{height} {pixel_format} is not valid")]
    Format {
        /// Width offered.
        width: u32,
        /// Height offered.
        height: u32,
        /// Pixel format offered.
        pixel_format: PixelFormat,
    },
    /// A refusal reason that is not UTF-8.
    #[error("refusal reason is not UTF-8")]
    ReasonNotUtf8,
    /// A control message where a frame message belongs (a relay only
    /// routes frame chunks).
    #[error("{0:?} is not a screen message")]
    NotScreen(Kind),
    /// A message of a kind that has no place at this point of the
    /// protocol.
    #[error("unexpected {0:?} message")]
    Unexpected(Kind),
    /// A new parent streams a screen of another format than the one this
    /// peer holds.
    #[error(
        "the parent streams {}x{} {}, this peer holds {}x{} {}",
        offered.width, offered.height, offered.pixel_format,
        held.width, held.height, held.pixel_format
    )]
    FormatChanged {
        /// Format this peer holds.
        held: VideoFormat,
        /// Format the parent offered.
        offered: VideoFormat,
    },
    /// The Noise handshake failed: the other side derived another key
    /// (another session key or challenge), or the cleartext challenge and
    /// request were tampered with on the way.
    #[error("the encrypted link's handshake failed (another key, or a tampered handshake)")]
    Handshake,
    /// An admitted newcomer did not finish the encrypted link's
    /// handshake in time.
    #[error("the encrypted link's handshake did not finish within 5 s")]
    HandshakeTimeout,
    /// An encrypted record failed authentication: it was altered,
    /// replayed, reordered or a record went missing.
    #[error("an encrypted record failed authentication (tampered, replayed or reordered)")]
    Tampered,
    /// A cleartext message where only encrypted records belong.
    #[error("an unencrypted {0:?} message on an encrypted link")]
    Unencrypted(Kind),
    /// A record's flag byte other than 0 (more) or 1 (last).
    #[error("encrypted record flag {0} (expected 0 or 1)")]
    RecordFlag(u8),
    /// The records of one message add up to more than the framing allows.
    #[error("an encrypted message grows past {} bytes", framing::MAX_MESSAGE)]
    SealedTooLarge,
    /// The link's channel already failed, or was never set up.
    #[error("the encrypted link is broken")]
    Broken,
}
