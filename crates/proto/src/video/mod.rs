//! Raw video: formats and frame rates, the test pattern, the pacer, and
//! RFC 4175 / SMPTE ST 2110-20 packetizing and depacketizing.

pub mod format;
pub mod pacer;
pub mod pattern;
pub mod st2110_20;

pub use format::{FrameRate, PixelFormat, VIDEO_CLOCK_RATE, VideoFormat};
pub use pacer::{Pacer, PacingStats};
pub use pattern::Pattern;
pub use st2110_20::{Depacketizer, Packetizer};
