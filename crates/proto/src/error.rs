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
    /// RTP version other than 2.
    #[error("RTP version {0}, expected 2")]
    RtpVersion(u8),
    /// RTP padding count larger than the payload.
    #[error("RTP padding of {0} bytes does not fit the packet")]
    BadPadding(usize),
    /// Output buffer too small.
    #[error("buffer too small: {needed} bytes needed")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
    },
    /// Pixel format name not known.
    #[error("unknown pixel format (known: uyvy422, uyvp, rgb24)")]
    UnknownPixelFormat,
    /// Size text not `WxH`.
    #[error("size must look like 1920x1080")]
    BadSize,
    /// Zero or huge dimensions.
    #[error("frame size {width}x{height} is out of range (1..=16384 each way)")]
    BadDimensions {
        /// Width asked for.
        width: u32,
        /// Height asked for.
        height: u32,
    },
    /// Width not a whole number of pixel groups.
    #[error(
        "width {width} is not a multiple of {multiple}, which this pixel format needs (4:2:2 shares chroma between pixel pairs)"
    )]
    WidthNotMultiple {
        /// Width asked for.
        width: u32,
        /// Pixels per pixel group.
        multiple: u32,
    },
    /// Frame rate that does not parse or is out of range.
    #[error("frame rate must be like 30, 60000/1001 or 29.97 (above 0, at most 1000)")]
    BadFrameRate,
    /// Packet size outside what one pixel group plus headers needs and the
    /// jumbo limit.
    #[error("packet size {size} is out of range: {min}..={max} bytes of UDP payload")]
    BadPacketSize {
        /// Size asked for.
        size: usize,
        /// Smallest that carries headers and one pixel group.
        min: usize,
        /// Jumbo-frame limit.
        max: usize,
    },
    /// Packet index beyond the frame's plan.
    #[error("no packet {0} in this frame")]
    NoSuchPacket(usize),
    /// Frame buffer of the wrong length.
    #[error("frame is {got} bytes, format needs {expected}")]
    FrameSize {
        /// Bytes the format needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Field bit set: interlaced video is not supported.
    #[error("interlaced field bit set; only progressive video is supported")]
    Interlaced,
    /// Segment length or offset not on a pixel-group boundary.
    #[error("segment not aligned to the pixel group")]
    Misaligned,
    /// Segment outside the frame.
    #[error("segment at line {line}, offset {offset} lies outside the frame")]
    OutsideFrame {
        /// Line number in the packet.
        line: usize,
        /// Pixel offset in the packet.
        offset: usize,
    },
    /// Packet for a frame already handed out.
    #[error("packet arrived after its frame was handed out")]
    LatePacket,
    /// SDP text that nagare cannot use.
    #[error("SDP: {0}")]
    Sdp(&'static str),
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
}
