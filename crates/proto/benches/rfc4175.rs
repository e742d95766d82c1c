//! Packetize and depacketize throughput per core, in frame bytes per
//! second, for a 1080p 10-bit frame at the two packet sizes that matter
//! (1500-byte MTU and 9000-byte jumbo).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::video::st2110_20::{Depacketizer, Output, Packetizer};
use nagare_proto::{ExtSeq, MediaTime, PixelFormat, Ssrc, VideoFormat};

fn frame(format: &VideoFormat) -> Vec<u8> {
    (0..format.frame_bytes()).map(|i| (i * 7) as u8).collect()
}

fn packetize(c: &mut Criterion) {
    let format = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
    let data = frame(&format);
    let mut g = c.benchmark_group("packetize");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    for size in [1440usize, 8800] {
        let p = Packetizer::new(format, size, Ssrc(1)).unwrap().uniform();
        let mut buf = vec![0u8; size];
        g.bench_with_input(BenchmarkId::new("copy", size), &size, |b, _| {
            b.iter(|| {
                let mut total = 0;
                for i in 0..p.packets_per_frame() {
                    total += p
                        .write_packet(i, &data, ExtSeq(i as u64), MediaTime(0), &mut buf)
                        .unwrap();
                }
                total
            })
        });
        // What the sender does: headers only, frame data gathered by iovec.
        g.bench_with_input(BenchmarkId::new("headers", size), &size, |b, _| {
            b.iter(|| {
                let mut total = 0;
                for i in 0..p.packets_per_frame() {
                    total += p
                        .write_header(i, ExtSeq(i as u64), MediaTime(0), &mut buf)
                        .unwrap();
                }
                total
            })
        });
    }
    g.finish();
}

fn depacketize(c: &mut Criterion) {
    let format = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
    let data = frame(&format);
    let mut g = c.benchmark_group("depacketize");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    for size in [1440usize, 8800] {
        let p = Packetizer::new(format, size, Ssrc(1)).unwrap().uniform();
        let mut packets = p.frame_packets(&data, ExtSeq(0), MediaTime(0)).unwrap();
        let mut d = Depacketizer::new(format, Some(1500.0));
        let mut ts = 0u32;
        g.bench_with_input(BenchmarkId::new("frame", size), &size, |b, _| {
            b.iter(|| {
                ts = ts.wrapping_add(1500);
                // New timestamp each round, written in place: no allocation.
                for pk in packets.iter_mut() {
                    pk[4..8].copy_from_slice(&ts.to_be_bytes());
                    let v = RtpPacket::new_checked(&pk[..]).unwrap();
                    d.push(&v).unwrap();
                }
                while let Some(o) = d.poll() {
                    if let Output::Frame(f) = o {
                        d.recycle(f.data);
                    }
                }
            })
        });
    }
    g.finish();
}

/// What `recv` does: incomplete frames get their holes zeroed. A whole
/// frame costs only the span bookkeeping (it used to cost a memset of
/// the frame before use); a frame missing one packet, one hole's zeroing.
fn depacketize_zero_fill(c: &mut Criterion) {
    let format = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
    let data = frame(&format);
    let mut g = c.benchmark_group("depacketize_zero_fill");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    let p = Packetizer::new(format, 8800, Ssrc(1)).unwrap().uniform();
    let mut packets = p.frame_packets(&data, ExtSeq(0), MediaTime(0)).unwrap();
    for skip in [None, Some(packets.len() / 2)] {
        let mut d = Depacketizer::new(format, Some(1500.0));
        d.set_zero_fill(true);
        let mut ts = 0u32;
        let name = if skip.is_some() {
            "one_packet_lost"
        } else {
            "whole"
        };
        g.bench_function(name, |b| {
            b.iter(|| {
                ts = ts.wrapping_add(1500);
                for (i, pk) in packets.iter_mut().enumerate() {
                    if Some(i) == skip {
                        continue;
                    }
                    pk[4..8].copy_from_slice(&ts.to_be_bytes());
                    let v = RtpPacket::new_checked(&pk[..]).unwrap();
                    d.push(&v).unwrap();
                }
                d.flush();
                while let Some(o) = d.poll() {
                    if let Output::Frame(f) = o {
                        d.recycle(f.data);
                    }
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, packetize, depacketize, depacketize_zero_fill);
criterion_main!(benches);
