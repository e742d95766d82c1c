//! One 8K `lines` stripe (7680x540 10-bit, 8800-byte packets, GRO
//! batches of 7) landed by a `Receiver` and put into its whole frame by
//! an `Assembler`, `FRAMES` times: `copy` (the stripe in the receiver's
//! own buffer, copied into the frame) or `lend` (written in the frame).
//! For instruction counts, which stay repeatable on a busy machine:
//!
//! ```text
//! cargo build --release -p nagare-proto --example lines_frame
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/lines_frame lend 1   # and lend 3
//! ```
//!
//! (3 frames less 1 frame, halved: one frame's instructions, set-up
//! excluded.)

use std::sync::{Arc, Mutex};

use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::receiver::Receiver;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{FrameRate, PixelFormat, VideoFormat};

#[path = "../benches/support/gro.rs"]
mod gro;
use gro::{WholeFrame, gro_batches, gro_config, into_frames, land_batches, renumber};

fn main() {
    let mut args = std::env::args().skip(1);
    let lend = args.next().as_deref() == Some("lend");
    let frames: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let format = VideoFormat::new(7680, 540, PixelFormat::Uyvp).unwrap();
    let rate = FrameRate::new(30, 1).unwrap();
    let a = Arc::new(Mutex::new(Assembler::new(
        Stripes::new(format, Rule::Lines, 1).unwrap(),
        4,
    )));
    a.lock().unwrap().warm(3);
    let mut r = Receiver::new(gro_config(format));
    r.warm(usize::MAX);
    r.enable_landing();
    if lend {
        r.set_lender(Box::new(WholeFrame(a.clone())));
    }
    let (mut batches, ppf) = gro_batches(format);
    let (mut whole, mut sum) = (0, 0u64);
    for frame in 0..frames {
        renumber(&mut batches, frame, ppf, rate);
        land_batches(&mut r, &batches, frame);
        let (w, s) = into_frames(&mut r, &a);
        whole += w;
        sum = sum.wrapping_add(s);
    }
    let s = r.landing_stats();
    println!(
        "{} frames whole of {frames}; packets in place {}, copied {}; check {sum}",
        whole, s.in_place, s.copied
    );
}
