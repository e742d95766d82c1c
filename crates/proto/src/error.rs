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
    /// Message (tree message, probe control frame) longer than the
    /// protocol allows: a hostile or confused peer.
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
    /// Datagram that is not a nagare probe packet (wrong magic or kind).
    #[error("not a nagare probe packet")]
    NotProbe,
    /// Probe packet or control message of another protocol version.
    #[error("probe protocol version {got}, this build speaks {want}")]
    ProbeVersion {
        /// Version in the input.
        got: u32,
        /// Version this build speaks.
        want: u32,
    },
    /// Control frame of an unknown type byte.
    #[error("control frame of unknown type 0x{0:02x}")]
    ControlType(u8),
    /// Control message whose JSON does not parse as a message.
    #[error("malformed control message (JSON error at line {line}, column {column})")]
    ControlMalformed {
        /// Line of the JSON error.
        line: usize,
        /// Column of the JSON error.
        column: usize,
    },
    /// A probe test parameter outside its range.
    #[error("{what} = {value} is out of range {min}..={max}")]
    TestParam {
        /// Which parameter.
        what: &'static str,
        /// Value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// The RTP layer refused.
    #[error(transparent)]
    Rtp(#[from] crate::rtp::Error),
    /// The raw video layer refused (formats, frame rates, packets).
    #[error(transparent)]
    Video(#[from] crate::video::Error),
}
