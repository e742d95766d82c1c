//! 2SI split and merge of an 8K 10-bit frame into 8 stripes: the gather
//! `nagare send --split 2si` does for a file source (the reader thread,
//! every frame) and for pattern:bars (once per cycle frame), and the
//! scatter `nagare recv --stripes 8 --split 2si` does for every stripe
//! of every frame (one stripe at a time, or all at once as the
//! assembler does).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{MediaTime, PixelFormat, VideoFormat};

fn two_sample_interleave(c: &mut Criterion) {
    let mut g = c.benchmark_group("stripe_2si");
    g.sample_size(10);
    for (pf, name) in [(PixelFormat::Uyvp, "uyvp"), (PixelFormat::Uyvy422, "uyvy")] {
        let format = VideoFormat::new(7680, 4320, pf).unwrap();
        let s = Stripes::new(format, Rule::TwoSampleInterleave, 8).unwrap();
        let frame: Vec<u8> = (0..format.frame_bytes()).map(|i| (i * 7) as u8).collect();
        let n = s.stripe_format().frame_bytes();
        let mut stripes = vec![0u8; 8 * n];
        // Filled here too, so any bench runs alone (`-- merge`).
        for (k, out) in stripes.chunks_exact_mut(n).enumerate() {
            s.split(&frame, k, out).unwrap();
        }
        g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
        g.bench_function(format!("split_8k_{name}"), |b| {
            b.iter(|| {
                for (k, out) in stripes.chunks_exact_mut(n).enumerate() {
                    s.split(&frame, k, out).unwrap();
                }
            })
        });
        let mut back = vec![0u8; format.frame_bytes()];
        s.merge_all(&stripes, &mut back).unwrap();
        assert!(back == frame, "2SI split then merge_all is the frame");
        // The floor: one plain copy of the frame's bytes.
        g.bench_function(format!("memcpy_8k_{name}"), |b| {
            b.iter(|| back.copy_from_slice(&frame))
        });
        g.bench_function(format!("merge_8k_{name}"), |b| {
            b.iter(|| {
                for (k, part) in stripes.chunks_exact(n).enumerate() {
                    s.merge(part, k, &mut back).unwrap();
                }
            })
        });
        // What the assembler does with a whole frame's stripes.
        g.bench_function(format!("merge_all_8k_{name}"), |b| {
            b.iter(|| s.merge_all(&stripes, &mut back).unwrap())
        });
        // The assembler's whole path: 8 stripes in, one frame out, its
        // buffer recycled as the recorder hands it back.
        let mut a = Assembler::new(s, 4);
        let mut ts = 0u32;
        g.bench_function(format!("assemble_8k_{name}"), |b| {
            b.iter(|| {
                ts = ts.wrapping_add(3000);
                for (k, part) in stripes.chunks_exact(n).enumerate() {
                    a.handle_input(k, MediaTime(ts), part, true).unwrap();
                }
                let f = a.poll_event().unwrap();
                a.recycle(f.data);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, two_sample_interleave);
criterion_main!(benches);
