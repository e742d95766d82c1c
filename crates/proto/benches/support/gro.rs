//! One frame read in GRO batches and, for `lines` stripes, put into its
//! whole frame: shared by `benches/video_machines.rs` (criterion timings)
//! and `examples/lines_frame.rs` (callgrind instruction counts), so both
//! measure the same work.

use std::sync::{Arc, Mutex};

use nagare_proto::video::aligned::Part;
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::landing::Landed;
use nagare_proto::video::receiver::{Config, Event, Incomplete, Receiver};
use nagare_proto::video::st2110_20::{Lender, Packetizer};
use nagare_proto::{ExtSeq, FrameRate, MediaTime, Nanos, Ssrc, VideoFormat};

/// One GRO batch: packets of one frame back to back, as a read brings
/// them (7 of 8800 bytes, the last maybe shorter).
pub struct Batch {
    pub bytes: Vec<u8>,
    pub segment: usize,
}

/// Writes frame `frame`'s sequence numbers and timestamp into every
/// packet of `batches` (the driver's packets are new every frame).
pub fn renumber(batches: &mut [Batch], frame: u64, ppf: u64, rate: FrameRate) {
    let ts = rate.rtp_timestamp(frame).to_be_bytes();
    let mut i = 0u64;
    for b in batches {
        for pk in b.bytes.chunks_mut(b.segment) {
            let seq = ExtSeq(frame * ppf + i);
            pk[2..4].copy_from_slice(&seq.wire().to_be_bytes());
            pk[4..8].copy_from_slice(&ts);
            pk[12..14].copy_from_slice(&((seq.wire32() >> 16) as u16).to_be_bytes());
            i += 1;
        }
    }
}

/// One frame of `format` (8800-byte packets), as GRO batches of 7, and
/// its packets per frame.
pub fn gro_batches(format: VideoFormat) -> (Vec<Batch>, u64) {
    let data: Vec<u8> = (0..format.frame_bytes()).map(|i| (i * 7) as u8).collect();
    let p = Packetizer::new(format, 8800, Ssrc(1)).unwrap().uniform();
    let packets = p.frame_packets(&data, ExtSeq(0), MediaTime(0)).unwrap();
    let batches = packets
        .chunks(7)
        .map(|b| Batch {
            bytes: b.concat(),
            segment: b[0].len(),
        })
        .collect();
    (batches, packets.len() as u64)
}

/// The receiver of the GRO runs: `format` at 30 fps, incomplete frames kept.
pub fn gro_config(format: VideoFormat) -> Config {
    Config {
        format,
        rate: Some(FrameRate::new(30, 1).unwrap()),
        incomplete: Incomplete::Keep,
        frame_limit: None,
    }
}

/// When batch `k` of frame `frame` arrives (30 fps, 20 µs apart).
pub fn batch_arrival(frame: u64, k: usize) -> Nanos {
    Nanos(frame * 33_366_667 + k as u64 * 20_000)
}

/// Lends the receiver of stripe 0 its part of the assembler's frame.
pub struct WholeFrame(pub Arc<Mutex<Assembler>>);

impl Lender for WholeFrame {
    fn lend(&mut self, timestamp: MediaTime) -> Option<Part> {
        self.0.lock().ok()?.lend(0, timestamp)
    }
}

/// Reads `batches` into `r` as the kernel would (planned reads).
pub fn land_batches(r: &mut Receiver, batches: &[Batch], frame: u64) {
    for (k, batch) in batches.iter().enumerate() {
        let at = batch_arrival(frame, k);
        let _ = r.land(|slices| {
            let mut done = 0;
            for s in slices.iter_mut() {
                let n = s.len().min(batch.bytes.len() - done);
                s[..n].copy_from_slice(&batch.bytes[done..done + n]);
                done += n;
            }
            Ok::<_, ()>(Some(Landed {
                len: done,
                segment: batch.segment,
                at,
                from: None,
            }))
        });
    }
}

/// Puts `r`'s frames of stripe 0 into `a`'s whole frames (a lent one back
/// in place, any other copied and its buffer recycled), then takes the
/// whole frames out: how many were whole, and the sum of one byte of
/// each (so none of the work can be left out).
pub fn into_frames(r: &mut Receiver, a: &Mutex<Assembler>) -> (usize, u64) {
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
    let (mut whole, mut sum) = (0, 0u64);
    while let Some(f) = a.poll_event() {
        whole += usize::from(f.complete());
        sum = sum.wrapping_add(u64::from(f.data[f.data.len() / 2]));
        a.recycle(f.data);
    }
    (whole, sum)
}
