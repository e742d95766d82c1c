//! The per-packet cost of the video state machines: `Sender` scheduling
//! eight striped flows (one train per call, headers written as the driver
//! does), `Receiver` taking a 1080p 10-bit frame packet by packet, and an
//! 8K stripe's frame read in GRO batches, copied or landed in place, and
//! an 8K `lines` stripe put into its whole frame, copied or lent.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::receiver::{Config, Datagram, Event, Incomplete, Receiver};
use nagare_proto::video::sender::{self, FlowSpec, Input};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::st2110_21::{Model, Scan, SenderSchedule, SenderType};
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{ExtSeq, FrameRate, MediaTime, Nanos, PixelFormat, Ssrc, VideoFormat};
use std::sync::{Arc, Mutex};

#[path = "support/gro.rs"]
mod gro;
use gro::{
    WholeFrame, batch_arrival, gro_batches, gro_config, into_frames, land_batches, renumber,
};

/// The next train, answering frame requests and moving `now` to each
/// deadline as a driver would.
fn next_train(s: &mut sender::Sender, now: &mut Nanos) -> sender::Transmit {
    loop {
        while let Some(e) = s.poll_event() {
            if let sender::Event::NeedFrame { flow, .. } = e {
                let _ = s.handle_input(*now, Input::Frame { flow });
            }
        }
        if let Some(t) = s.poll_transmit(*now) {
            return t;
        }
        *now = s.poll_timeout().unwrap_or(*now);
    }
}

fn sender_8_flows(c: &mut Criterion) {
    // Eight stripes of a 1080p frame, 1440-byte packets, 100 µs trains.
    let format = VideoFormat::new(1920, 1080 / 8, PixelFormat::Uyvp).unwrap();
    let rate = FrameRate::new(60000, 1001).unwrap();
    let mut s = sender::Sender::new();
    for k in 0..8 {
        let p = Packetizer::new(format, 1440, Ssrc(k as u32))
            .unwrap()
            .uniform();
        s.add_flow(
            FlowSpec::video(rate, p)
                .trains(Nanos::from_micros(100), 64)
                .stripe(k, 8),
        );
    }
    let mut headers = [0u8; 64 * 64];
    let mut now = Nanos::ZERO;
    let mut g = c.benchmark_group("sender");
    g.throughput(Throughput::Elements(1));
    g.bench_function("poll_transmit_8_flows", |b| {
        b.iter(|| {
            let t = next_train(&mut s, &mut now);
            for (k, h) in headers.chunks_exact_mut(64).take(t.len()).enumerate() {
                let _ = s.write_header(&t, k, h);
            }
            t.len()
        })
    });
    g.finish();
}

/// One shaped W flow of a 1080p 10-bit frame (the demo's stream): each
/// train's release comes from the ST 2110-21 schedule and passes the Cinst
/// gate, and the driver reports when it left. Guards the pacing thread's
/// per-train cost (a grid rebuilt per release once took a quarter of it).
fn sender_shaped_w(c: &mut Criterion) {
    let format = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
    let rate = FrameRate::new(60000, 1001).unwrap();
    let p = Packetizer::new(format, 1440, Ssrc(1)).unwrap().uniform();
    let packets = p.packets_per_frame();
    let model = Model::new(rate, 1080, Scan::Progressive, packets as u32).unwrap();
    let schedule = SenderSchedule::with_jitter_margin(&model, SenderType::W);
    let mut s = sender::Sender::new();
    let flow = s.add_flow(
        FlowSpec::video(rate, p)
            .shaped(schedule)
            .trains(Nanos::ZERO, 64),
    );
    let mut now = Nanos::ZERO;
    let mut g = c.benchmark_group("sender");
    g.throughput(Throughput::Elements(1));
    g.bench_function("poll_transmit_shaped_w_train", |b| {
        b.iter(|| {
            let t = next_train(&mut s, &mut now);
            let _ = s.handle_input(now, Input::Departed { flow });
            t.len()
        })
    });
    g.finish();
}

fn receiver_1080p(c: &mut Criterion) {
    let format = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
    let rate = FrameRate::new(60000, 1001).unwrap();
    let data: Vec<u8> = (0..format.frame_bytes()).map(|i| (i * 7) as u8).collect();
    let mut g = c.benchmark_group("receiver");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    for size in [1440usize, 8800] {
        let p = Packetizer::new(format, size, Ssrc(1)).unwrap().uniform();
        let mut packets = p.frame_packets(&data, ExtSeq(0), MediaTime(0)).unwrap();
        let ppf = packets.len() as u64;
        let mut r = Receiver::new(Config {
            format,
            rate: Some(rate),
            incomplete: Incomplete::Drop,
            frame_limit: None,
        });
        let mut frame = 0u64;
        g.bench_with_input(
            BenchmarkId::new("handle_input_frame", size),
            &size,
            |b, _| {
                b.iter(|| {
                    // Next frame's numbers written in place: nothing allocated.
                    let ts = rate.rtp_timestamp(frame).to_be_bytes();
                    for (i, pk) in packets.iter_mut().enumerate() {
                        let seq = ExtSeq(frame * ppf + i as u64);
                        pk[2..4].copy_from_slice(&seq.wire().to_be_bytes());
                        pk[4..8].copy_from_slice(&ts);
                        pk[12..14].copy_from_slice(&((seq.wire32() >> 16) as u16).to_be_bytes());
                        let now = Nanos(frame * 16_683_350 + i as u64 * 1_000);
                        r.handle_input(
                            now,
                            Datagram {
                                bytes: pk,
                                from: None,
                            },
                        );
                    }
                    frame += 1;
                    while let Some(e) = r.poll_event() {
                        if let Event::Frame(f) = e {
                            r.recycle(f.data);
                        }
                    }
                })
            },
        );
    }
    g.finish();
}

/// An 8K 2SI stripe's frame (3840x1080 10-bit, 8800-byte packets) read
/// in GRO batches of 7, the kernel's copy included: `copy` reads each
/// batch into a receive buffer and the machine copies every packet into
/// its frame; `land` reads each batch straight into the frame
/// (`Receiver::land`), the headers into scratch.
fn receiver_landing(c: &mut Criterion) {
    let format = VideoFormat::new(3840, 1080, PixelFormat::Uyvp).unwrap();
    let (rate, config) = (FrameRate::new(30, 1).unwrap(), gro_config(format));
    let (mut batches, ppf) = gro_batches(format);
    let mut g = c.benchmark_group("receiver");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    g.sample_size(20);
    for mode in ["copy", "land"] {
        let mut r = Receiver::new(config);
        r.warm(usize::MAX);
        if mode == "land" {
            r.enable_landing();
        }
        let mut buf = vec![0u8; 65_536];
        let mut frame = 0u64;
        g.bench_function(BenchmarkId::new("stripe_8k_gro_frame", mode), |b| {
            b.iter(|| {
                renumber(&mut batches, frame, ppf, rate);
                if mode == "land" {
                    land_batches(&mut r, &batches, frame);
                } else {
                    for (k, batch) in batches.iter().enumerate() {
                        let at = batch_arrival(frame, k);
                        buf[..batch.bytes.len()].copy_from_slice(&batch.bytes);
                        for bytes in buf[..batch.bytes.len()].chunks(batch.segment) {
                            r.handle_input(at, Datagram { bytes, from: None });
                        }
                    }
                }
                frame += 1;
                while let Some(e) = r.poll_event() {
                    if let Event::Frame(f) = e {
                        r.recycle(f.data);
                    }
                }
            })
        });
    }
    g.finish();
}

/// An 8K `lines` stripe (7680x540 10-bit, one eighth of the frame,
/// 8800-byte packets) landed in GRO batches and put into its whole frame
/// by the assembler: `copy` lands it in the receiver's own buffer and the
/// assembler copies it into the frame (before); `lend` lands it straight
/// in the frame's memory, which the assembler takes back as it is.
/// (One stripe of one: the frame goes out as its stripe arrives.)
fn stripe_into_frame(c: &mut Criterion) {
    let format = VideoFormat::new(7680, 540, PixelFormat::Uyvp).unwrap();
    let (rate, config) = (FrameRate::new(30, 1).unwrap(), gro_config(format));
    let (mut batches, ppf) = gro_batches(format);
    let stripes = Stripes::new(format, Rule::Lines, 1).unwrap();
    let mut g = c.benchmark_group("assembler");
    g.throughput(Throughput::Bytes(format.frame_bytes() as u64));
    g.sample_size(20);
    for mode in ["copy", "lend"] {
        let a = Arc::new(Mutex::new(Assembler::new(stripes, 4)));
        a.lock().unwrap().warm(3);
        let mut r = Receiver::new(config);
        r.warm(usize::MAX);
        r.enable_landing();
        if mode == "lend" {
            r.set_lender(Box::new(WholeFrame(a.clone())));
        }
        let mut frame = 0u64;
        g.bench_function(BenchmarkId::new("stripe_8k_lines_into_frame", mode), |b| {
            b.iter(|| {
                renumber(&mut batches, frame, ppf, rate);
                land_batches(&mut r, &batches, frame);
                frame += 1;
                std::hint::black_box(into_frames(&mut r, &a));
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    sender_8_flows,
    sender_shaped_w,
    receiver_1080p,
    receiver_landing,
    stripe_into_frame
);
criterion_main!(benches);
