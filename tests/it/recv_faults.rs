//! nagare recv against a scripted stream: the test packetizes frames with
//! nagare-proto itself, then drops, reorders, duplicates and corrupts
//! chosen packets, and checks that recv's counters are exactly right.

use std::net::UdpSocket;
use std::time::Duration;

use nagare_api::video::RecvReport;
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::{ExtSeq, FrameRate, MediaTime, PixelFormat, Ssrc, VideoFormat};

use crate::common::{Running, Scratch, nagare, noise, parse_report};

const W: u32 = 64;
const H: u32 = 8;

fn format() -> VideoFormat {
    VideoFormat::new(W, H, PixelFormat::Uyvy422).unwrap()
}

/// Packets of `frames` frames: (frame index, packet bytes).
fn stream(frames: &[Vec<u8>], ssrc: u32) -> Vec<(usize, Vec<u8>)> {
    let p = Packetizer::new(format(), 200, Ssrc(ssrc)).unwrap();
    let rate = FrameRate::new(50, 1).unwrap();
    let mut seq = ExtSeq(0xfff0); // crosses the 16-bit wrap mid-stream
    let mut out = Vec::new();
    for (f, frame) in frames.iter().enumerate() {
        let ts = MediaTime(rate.rtp_timestamp(1000 + f as u64));
        let packets = p.frame_packets(frame, seq, ts).unwrap();
        seq = seq.add(packets.len() as u64);
        out.extend(packets.into_iter().map(|pk| (f, pk)));
    }
    out
}

fn run(
    packets: &[Vec<u8>],
    frames: u64,
    extra: &[&str],
) -> (std::process::ExitStatus, RecvReport, String) {
    let mut cmd = nagare();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--size", "64x8"])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "50",
            "--frames",
            &frames.to_string(),
        ])
        .args(["--timeout", "1", "--json"])
        .args(extra);
    let mut r = Running::spawn(cmd);
    let addr = r.listening();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (k, p) in packets.iter().enumerate() {
        sock.send_to(p, addr).unwrap();
        if k % 16 == 0 {
            // Stay far below any socket buffer limit.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let (status, out, err) = r.finish();
    (status, parse_report(&out), err)
}

#[test]
fn exact_counters_for_scripted_faults_and_each_incomplete_policy() {
    let frame_bytes = format().frame_bytes();
    let frames: Vec<Vec<u8>> = (0..6).map(|i| noise(frame_bytes, 100 + i)).collect();
    let all = stream(&frames, 0x1234);
    let per_frame = all.iter().filter(|(f, _)| *f == 0).count();
    assert!(per_frame >= 4);
    let mut script: Vec<Vec<u8>> = Vec::new();
    let mut dropped = 0;
    for (k, (f, p)) in all.iter().enumerate() {
        let i = k % per_frame;
        match (*f, i) {
            // frame 1: one packet lost -> incomplete
            (1, 2) => dropped += 1,
            // frame 3: every packet lost -> a lost frame
            (3, _) => dropped += 1,
            // frame 4: packet 1 arrives after packet 2 (reordered), and
            // packet 0 twice (duplicate)
            (4, 1) => {}
            (4, 2) => {
                script.push(p.clone());
                script.push(all[k - 1].1.clone());
            }
            (4, 0) => {
                script.push(p.clone());
                script.push(p.clone());
            }
            _ => script.push(p.clone()),
        }
    }
    // Hostile and foreign packets mixed in.
    script.insert(1, b"not rtp at all".to_vec());
    let mut outside = all[0].1.clone();
    outside[14 + 2..14 + 4].copy_from_slice(&500u16.to_be_bytes()); // line 500
    script.insert(2, outside);
    let foreign = stream(&frames[..1], 0x9999);
    script.insert(3, foreign[0].1.clone());

    for (policy, frames_written) in [("drop", 4u64), ("keep", 5), ("repeat-last", 6)] {
        let s = Scratch::new("faults");
        let out = s.path("out.yuv");
        let (status, r, err) = run(
            &script,
            6,
            &["--incomplete", policy, "--output", out.to_str().unwrap()],
        );
        assert!(!status.success(), "losses must fail the run: {err}");
        assert_eq!(r.frames_complete, 4, "{r:?}");
        assert_eq!(r.frames_incomplete.ranges, [[1, 1]]);
        assert_eq!(r.frames_lost.ranges, [[3, 3]]);
        assert_eq!(r.packets_lost, dropped, "{r:?}");
        assert_eq!(r.packets_reordered, 1);
        assert_eq!(r.packets_duplicate, 1);
        assert_eq!(r.packets_malformed, 2);
        assert_eq!(r.packets_foreign, 1);
        assert_eq!(r.packets_received, all.len() as u64 - dropped);
        assert_eq!(r.frames_written, frames_written);
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len() as u64, frames_written * frame_bytes as u64);
        let chunks: Vec<&[u8]> = got.chunks(frame_bytes).collect();
        match policy {
            "drop" => {
                assert_eq!(chunks, [&frames[0][..], &frames[2], &frames[4], &frames[5]]);
            }
            "keep" => {
                assert_eq!(chunks[0], &frames[0][..]);
                assert_ne!(chunks[1], &frames[1][..]);
                // what did arrive of frame 1 is there; the hole is zeros
                let same = chunks[1]
                    .iter()
                    .zip(&frames[1])
                    .filter(|(a, b)| a == b)
                    .count();
                let zeros = chunks[1].iter().filter(|b| **b == 0).count();
                assert!(
                    same > frame_bytes / 2 && zeros >= 100,
                    "same {same} zeros {zeros}"
                );
                assert_eq!(&chunks[2..], [&frames[2][..], &frames[4], &frames[5]]);
            }
            _ => {
                let want = [
                    &frames[0][..],
                    &frames[0],
                    &frames[2],
                    &frames[2],
                    &frames[4],
                    &frames[5],
                ];
                assert_eq!(chunks, want);
            }
        }
    }
}

#[test]
fn clean_scripted_stream_exits_zero() {
    let frame_bytes = format().frame_bytes();
    let frames: Vec<Vec<u8>> = (0..3).map(|i| noise(frame_bytes, 7 + i)).collect();
    let packets: Vec<Vec<u8>> = stream(&frames, 5).into_iter().map(|(_, p)| p).collect();
    let (status, r, err) = run(&packets, 3, &[]);
    assert!(status.success(), "{err}");
    assert_eq!(r.frames_complete, 3);
    assert_eq!(r.packets_lost, 0);
    assert_eq!(r.packets_received, packets.len() as u64);
    assert!(r.all_complete);
}

#[test]
fn garbage_only_never_crashes_or_hangs() {
    let mut junk: Vec<Vec<u8>> = (0..500u64)
        .map(|i| noise(1 + (i as usize * 37) % 1500, i))
        .collect();
    // valid RTP headers with absurd RFC 4175 payloads
    for i in 0..200u64 {
        let mut p = vec![0x80, 96, 0, i as u8, 0, 0, 0, 1, 0, 0, 0, 9];
        p.extend(noise(40, 1000 + i));
        junk.push(p);
    }
    let total = junk.len() as u64;
    let (status, r, err) = run(&junk, 1, &[]);
    assert!(!status.success());
    assert_eq!(r.frames_complete, 0, "{err}");
    // Every datagram is accounted for, almost all as malformed.
    assert_eq!(
        r.packets_malformed + r.packets_foreign + r.packets_received,
        total,
        "{r:?}"
    );
    assert!(r.packets_malformed >= total - 5, "{r:?}");
}
