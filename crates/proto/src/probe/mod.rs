//! The network probe (Sperf): its wire format and control messages, the
//! receiver-side analysis of a test, and the video-fit verdict.

pub mod analysis;
pub mod profile;
pub mod wire;

pub use wire::*;
