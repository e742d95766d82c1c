//! Raw video: formats and frame rates, the test pattern, the pacer,
//! RFC 4175 / SMPTE ST 2110-20 packetizing and depacketizing, the
//! ST 2110-21 timing model (sender types, Cinst/VRX analysis), and the
//! sender and receiver state machines built from them.

pub mod assembler;
mod error;
pub mod format;
pub mod pacer;
pub mod pattern;
pub mod receiver;
pub mod selector;
pub mod sender;
pub mod st2022_7;
pub mod st2110_20;
pub mod st2110_21;
pub mod stripe;

pub use error::Error;
pub use format::{FrameRate, PixelFormat, VIDEO_CLOCK_RATE, VideoFormat};
pub use pacer::{Pacer, PacingStats};
pub use pattern::Pattern;
pub use receiver::Receiver;
pub use sender::Sender;
pub use st2110_20::{Depacketizer, Packetizer};
pub use st2110_21::SenderType;
pub use stripe::Stripes;
