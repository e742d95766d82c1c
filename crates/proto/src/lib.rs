//! nagare-proto: the sans-IO core of nagare.
//!
//! No sockets, threads, files or clock reads live here: time is passed in
//! by the caller, bytes come in as slices and go out into buffers. That
//! keeps packetizers, pacers and statistics deterministic under test, in
//! the manner of quinn-proto and smoltcp.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod format;
pub mod metrics;
pub mod netem;
pub mod pacer;
pub mod pattern;
pub mod probe;
pub mod profile;
pub mod relay;
pub mod rfc4175;
pub mod rtp;
pub mod screen;
pub mod sdp;
pub mod stats;
pub mod tree;
pub mod tree_wire;

pub use error::Error;
pub use format::{FrameRate, PixelFormat, VideoFormat};
