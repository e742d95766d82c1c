//! The stateful RFC 4175 reassembler fed a sequence of packets.
//!
//! Input: a 12-byte header (small format, options, a period) and then
//! steps of `ctrl (1) | len (2) | packet`, see `nagare_fuzz::step`.
//! Invariants: no panic; every frame is `frame_bytes` long; a complete
//! frame had at least `frame_bytes` bytes written; frames come out
//! with strictly increasing indices and lost-frame runs fall between them;
//! the counters agree with what was handed out; and heap use stays within
//! a bound set by the format, not by the number of packets.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader, period_choice, small_format, step};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::video::st2110_20::{Depacketizer, DepacketizerStats, Output};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Default)]
struct Seen {
    last_index: Option<u64>,
    /// A lost run was reported and the next frame must come after it.
    lost_until: Option<u64>,
    complete: u64,
    incomplete: u64,
    lost: u64,
}

fn drain(d: &mut Depacketizer, seen: &mut Seen, recycle: bool) {
    let frame_bytes = d.format().frame_bytes();
    while let Some(out) = d.poll() {
        match out {
            Output::Frame(f) => {
                assert_eq!(f.data.len(), frame_bytes);
                if let Some(last) = seen.last_index {
                    assert!(f.index > last, "index {} after {last}", f.index);
                }
                if let Some(end) = seen.lost_until.take() {
                    assert!(f.index >= end, "frame {} inside a lost run", f.index);
                }
                assert!(f.packets >= 1);
                // Complete means every byte was written: enough bytes, and
                // not overlapping ones standing in for a lost packet.
                if f.complete {
                    assert!(f.bytes_received >= frame_bytes);
                }
                if f.complete {
                    seen.complete += 1;
                } else {
                    seen.incomplete += 1;
                }
                seen.last_index = Some(f.index);
                if recycle {
                    d.recycle(f.data);
                }
            }
            Output::Lost { first, count } => {
                assert!(count >= 1);
                if let Some(last) = seen.last_index {
                    assert!(first > last, "lost run at {first} after frame {last}");
                }
                let end = first.checked_add(count).expect("lost run overflows u64");
                seen.lost_until = Some(end);
                seen.lost += count;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = small_format(r.u8(), r.u8(), r.u8());
    let opts = r.u8();
    let period = period_choice(opts, r.u64());
    let in_flight = 2 + usize::from((opts >> 4) & 3);

    let frame_bytes = format.frame_bytes();
    let mut d = Depacketizer::new(format, period);
    d.set_zero_fill(opts & 8 != 0);
    d.set_in_flight(in_flight);
    let mut seen = Seen::default();
    let baseline = CountingAlloc::live();
    let mut largest_packet = 0usize;

    while r.remaining() > 0 {
        let ctrl = r.u8();
        let len = usize::from(r.u16());
        let pkt = r.bytes(len);
        largest_packet = largest_packet.max(pkt.len());
        if let Ok(p) = RtpPacket::new_checked(pkt) {
            let _ = d.push(&p);
        }
        if ctrl & step::FLUSH != 0 {
            d.flush();
        }
        drain(&mut d, &mut seen, ctrl & step::RECYCLE != 0);
        if ctrl & step::RECYCLE_JUNK != 0 {
            d.recycle(vec![
                0xa5;
                (frame_bytes + usize::from(ctrl >> 3))
                    .saturating_sub(16)
            ]);
        }
        // Frames in assembly and spare buffers are bounded by `in_flight`
        // each; the scratch list holds one entry per SRD of one packet.
        let bound = 2 * in_flight * frame_bytes + 8 * largest_packet + 4096;
        let live = CountingAlloc::live().saturating_sub(baseline);
        assert!(live <= bound, "{live} heap bytes held, bound {bound}");
    }
    d.flush();
    drain(&mut d, &mut seen, false);

    let s: DepacketizerStats = d.stats();
    assert_eq!(s.frames_complete, seen.complete);
    assert_eq!(s.frames_incomplete, seen.incomplete);
    assert_eq!(s.frames_lost, seen.lost);
    assert_eq!(d.last_index(), seen.last_index);
});
