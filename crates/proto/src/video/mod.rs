//! Raw video: formats and frame rates, the test pattern, the pacer, RFC
//! 4175 / SMPTE ST 2110-20 packetizing and depacketizing, and the sender
//! and receiver state machines built from them.

mod error;
pub mod format;
pub mod pacer;
pub mod pattern;
pub mod receiver;
pub mod sender;
pub mod st2110_20;

pub use error::Error;
pub use format::{FrameRate, PixelFormat, VIDEO_CLOCK_RATE, VideoFormat};
pub use pacer::{Pacer, PacingStats};
pub use pattern::Pattern;
pub use receiver::Receiver;
pub use sender::Sender;
pub use st2110_20::{Depacketizer, Packetizer};
