//! Raw video: formats and frame rates, the test pattern, the pacer,
//! RFC 4175 / SMPTE ST 2110-20 packetizing and depacketizing, the
//! ST 2110-21 timing model (sender types, Cinst/VRX analysis), and the
//! sender and receiver state machines built from them, with the stripe
//! assembler and the frame book of a striped receive.

pub mod aligned;
pub mod assembler;
pub mod book;
pub mod coverage;
mod error;
pub mod format;
pub mod landing;
pub mod pacer;
pub mod pattern;
pub mod receiver;
mod rule;
pub mod selector;
pub mod sender;
pub mod st2022_7;
pub mod st2110_20;
pub mod st2110_21;
pub mod stripe;

pub use book::FrameBook;
pub use error::Error;
pub use format::{FrameRate, PixelFormat, VIDEO_CLOCK_RATE, VideoFormat};
pub use pacer::{Pacer, PacingStats};
pub use pattern::Pattern;
pub use receiver::Receiver;
pub use sender::Sender;
pub use st2110_20::{Depacketizer, Packetizer};
pub use st2110_21::SenderType;
pub use stripe::Stripes;

/// A zeroed buffer of `len` bytes whose every page is already written,
/// so the page faults (and the kernel zeroing each page) happen now,
/// not when the first frames of a stream arrive: an 8K stripe receiver
/// faulting in 400 MB of fresh buffers as the stream started took the
/// CPU and memory bandwidth its sender needed, 20-40 ms of lateness on
/// a 2-core machine.
pub fn prefaulted(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    fault_in(&mut buf);
    buf
}

/// Writes one byte of every page of a freshly zeroed `buf`, so the kernel
/// maps its pages now (`vec![0; n]` maps pages it zeroes on first touch).
fn fault_in(buf: &mut [u8]) {
    // black_box keeps the compiler from proving the zero stores redundant.
    std::hint::black_box(&mut *buf);
    for i in (0..buf.len()).step_by(4096) {
        buf[i] = 0;
    }
}
