//! Errors of the raw video subsystem: formats and frame rates typed by a
//! user, packet sizes, frames handed to the packetizer and RFC 4175
//! payloads from the network. `Copy` and allocation-free, so the receive
//! path can return them per packet.

use crate::rtp;

/// Everything the video subsystem can refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
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
    /// Output buffer too small for what is to be written.
    #[error("buffer too small: {needed} bytes needed")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
    },
    /// RFC 4175 payload shorter than its headers announce.
    #[error("RFC 4175 payload truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
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
    /// A flow id that the sender does not hold (removed, or never added).
    #[error("no such flow")]
    NoSuchFlow,
    /// A flow made without a packetizer: its driver writes its packets.
    #[error("this flow has no packetizer: its driver writes the packets")]
    NoPacketizer,
    /// The RTP layer refused.
    #[error(transparent)]
    Rtp(#[from] rtp::Error),
    /// A stripe rule name not known.
    #[error("unknown stripe rule (known: lines, square, 2si)")]
    UnknownStripeRule,
    /// A stripe count of zero or above the limit.
    #[error("{0} stripes is out of range 1..=64")]
    StripeCount(u32),
    /// A frame size the rule cannot divide into that many stripes.
    #[error(
        "{width}x{height} cannot be divided into {count} stripes by rule {rule}: lines needs the height divisible by the count; square and 2si need a count of 4·k, a width divisible by 4 (whole pixel pairs per half) and a height divisible by 2·k"
    )]
    StripeGeometry {
        /// The rule asked for.
        rule: super::rule::Rule,
        /// Stripes asked for.
        count: u32,
        /// Frame width.
        width: u32,
        /// Frame height.
        height: u32,
    },
    /// A stripe index beyond the count.
    #[error("no stripe {0} in this division")]
    NoSuchStripe(u32),
}
