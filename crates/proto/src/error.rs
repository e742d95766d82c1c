//! Typed errors of the sans-IO core. `Copy` and allocation-free so they can
//! be returned on the per-packet path; the binary adds context.

use thiserror::Error;

/// Everything nagare-proto can refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// Input shorter than a header requires.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// Output buffer too small.
    #[error("buffer too small: {needed} bytes needed")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
    },
    /// Frame buffer of the wrong length.
    #[error("frame is {got} bytes, format needs {expected}")]
    FrameSize {
        /// Bytes the format needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Tree or screen message that does not follow the protocol.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    /// Tree message longer than the protocol allows: a hostile or
    /// confused peer.
    #[error("message of {len} bytes exceeds the limit of {max}")]
    MessageTooLarge {
        /// Length announced.
        len: usize,
        /// Largest accepted.
        max: usize,
    },
    /// Screen larger than the codec holds in memory.
    #[error("screen of {bytes} bytes exceeds the limit of {max} bytes")]
    ScreenTooLarge {
        /// Bytes one frame would need.
        bytes: usize,
        /// Largest accepted.
        max: usize,
    },
    /// Delta frame built on a version this canvas does not hold.
    #[error("delta frame expects base frame {expected:?}, canvas holds {held:?}")]
    BaseMismatch {
        /// Base the frame was built on.
        expected: Option<u64>,
        /// Version the canvas holds.
        held: Option<u64>,
    },
    /// Canvas has no complete frame to build a refresh from.
    #[error("no complete frame yet")]
    NoFrame,
    /// The raw video layer refused (a tree message's frame format).
    #[error(transparent)]
    Video(#[from] crate::video::Error),
}
