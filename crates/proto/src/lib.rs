//! nagare-proto: the sans-IO core of nagare.
//!
//! No sockets, threads, files or clock reads live here: time is passed in
//! by the caller, bytes come in as slices and go out into buffers. That
//! keeps packetizers, pacers and statistics deterministic under test, in
//! the manner of quinn-proto and smoltcp.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod capture;
pub mod cluster;
pub mod framing;
pub mod lobby;
pub mod mpegts;
pub mod netem;
pub mod nmos;
pub mod probe;
pub mod rtcp;
pub mod rtp;
pub mod rtsp;
pub mod screen;
pub mod sdp;
pub mod serve;
mod slots;
mod splitmix;
pub mod stats;
pub mod tree;
pub mod units;
pub mod video;

pub use units::{BitRate, ByteSize, ByteSizeError, ExtSeq, MediaTime, Nanos, Ssrc};

pub use video::{FrameRate, PixelFormat, VideoFormat};
