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

use nagare_proto::video::aligned::Part;
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::landing::Landed;
use nagare_proto::video::receiver::{Config, Event, Incomplete, Receiver};
use nagare_proto::video::st2110_20::{Lender, Packetizer};
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{ExtSeq, FrameRate, MediaTime, Nanos, PixelFormat, Ssrc, VideoFormat};

struct WholeFrame(Arc<Mutex<Assembler>>);

impl Lender for WholeFrame {
    fn lend(&mut self, timestamp: MediaTime) -> Option<Part> {
        self.0.lock().ok()?.lend(0, timestamp)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let lend = args.next().as_deref() == Some("lend");
    let frames: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let format = VideoFormat::new(7680, 540, PixelFormat::Uyvp).unwrap();
    let rate = FrameRate::new(30, 1).unwrap();
    let data: Vec<u8> = (0..format.frame_bytes()).map(|i| (i * 7) as u8).collect();
    let p = Packetizer::new(format, 8800, Ssrc(1)).unwrap().uniform();
    let a = Arc::new(Mutex::new(Assembler::new(
        Stripes::new(format, Rule::Lines, 1).unwrap(),
        4,
    )));
    a.lock().unwrap().warm(3);
    let mut r = Receiver::new(Config {
        format,
        rate: Some(rate),
        incomplete: Incomplete::Keep,
        frame_limit: None,
    });
    r.warm(usize::MAX);
    r.enable_landing();
    if lend {
        r.set_lender(Box::new(WholeFrame(a.clone())));
    }
    let ppf = p.packets_per_frame() as u64;
    let packets = p.frame_packets(&data, ExtSeq(0), MediaTime(0)).unwrap();
    let mut batches: Vec<(Vec<u8>, usize)> = packets
        .chunks(7)
        .map(|b| (b.concat(), b[0].len()))
        .collect();
    let (mut whole, mut sum) = (0, 0u64);
    for frame in 0..frames {
        renumber(&mut batches, frame, ppf, rate);
        for (k, (bytes, segment)) in batches.iter().enumerate() {
            let at = Nanos(frame * 33_366_667 + k as u64 * 20_000);
            let _ = r.land(|slices| {
                let mut done = 0;
                for s in slices.iter_mut() {
                    let n = s.len().min(bytes.len() - done);
                    s[..n].copy_from_slice(&bytes[done..done + n]);
                    done += n;
                }
                Ok::<_, ()>(Some(Landed {
                    len: done,
                    segment: *segment,
                    at,
                    from: None,
                }))
            });
        }
        let mut a = a.lock().unwrap();
        while let Some(e) = r.poll_event() {
            if let Event::Frame(f) = e {
                match f.lent {
                    Some(part) => a.handle_lent(0, f.timestamp, part, f.complete).unwrap(),
                    None => {
                        a.handle_input(0, f.timestamp, &f.data, f.complete).unwrap();
                        r.recycle(f.data);
                    }
                }
            }
        }
        while let Some(f) = a.poll_event() {
            whole += usize::from(f.complete());
            sum = sum.wrapping_add(u64::from(f.data[f.data.len() / 2]));
            a.recycle(f.data);
        }
    }
    let s = r.landing_stats();
    println!(
        "{} frames whole of {frames}; packets in place {}, copied {}; check {sum}",
        whole, s.in_place, s.copied
    );
}

/// Frame `frame`'s sequence numbers and timestamp in every packet.
fn renumber(batches: &mut [(Vec<u8>, usize)], frame: u64, ppf: u64, rate: FrameRate) {
    let ts = rate.rtp_timestamp(frame).to_be_bytes();
    let mut i = 0u64;
    for (bytes, segment) in batches {
        for pk in bytes.chunks_mut(*segment) {
            let seq = ExtSeq(frame * ppf + i);
            pk[2..4].copy_from_slice(&seq.wire().to_be_bytes());
            pk[4..8].copy_from_slice(&ts);
            pk[12..14].copy_from_slice(&((seq.wire32() >> 16) as u16).to_be_bytes());
            i += 1;
        }
    }
}
