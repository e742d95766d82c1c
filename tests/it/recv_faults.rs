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

/// The stream of `frames` with scripted faults: frame 1 loses packet 2
/// (incomplete), frame 3 every packet (lost), in frame 4 packet 1 arrives
/// after packet 2 (reordered) and packet 0 twice (duplicate); garbage, an
/// out-of-frame packet and another SSRC's packet are mixed in. Returns the
/// datagrams, the stream's packet count and how many were dropped.
fn faulty_script(frames: &[Vec<u8>]) -> (Vec<Vec<u8>>, u64, u64) {
    let all = stream(frames, 0x1234);
    let per_frame = all.iter().filter(|(f, _)| *f == 0).count();
    assert!(per_frame >= 4);
    let mut script: Vec<Vec<u8>> = Vec::new();
    let mut dropped = 0;
    for (k, (f, p)) in all.iter().enumerate() {
        match (*f, k % per_frame) {
            (1, 2) | (3, _) => dropped += 1,
            (4, 1) => {}
            (4, 2) => script.extend([p.clone(), all[k - 1].1.clone()]),
            (4, 0) => script.extend([p.clone(), p.clone()]),
            _ => script.push(p.clone()),
        }
    }
    script.insert(1, b"not rtp at all".to_vec());
    let mut outside = all[0].1.clone();
    outside[14 + 2..14 + 4].copy_from_slice(&500u16.to_be_bytes()); // line 500
    script.insert(2, outside);
    let foreign = stream(&frames[..1], 0x9999);
    script.insert(3, foreign[0].1.clone());
    (script, all.len() as u64, dropped)
}

/// What each `--incomplete` policy must have written, frame by frame.
fn check_recording(policy: &str, got: &[u8], frames: &[Vec<u8>]) {
    let frame_bytes = format().frame_bytes();
    let chunks: Vec<&[u8]> = got.chunks(frame_bytes).collect();
    let f = |k: usize| &frames[k][..];
    match policy {
        "drop" => assert_eq!(chunks, [f(0), f(2), f(4), f(5)]),
        "keep" => {
            assert_eq!(
                [chunks[0], chunks[2], chunks[3], chunks[4]],
                [f(0), f(2), f(4), f(5)]
            );
            // What arrived of frame 1 is there; the lost packet's bytes
            // are zeros.
            let hole = Packetizer::new(format(), 200, Ssrc(0))
                .unwrap()
                .data_range(2);
            for (i, b) in chunks[1].iter().enumerate() {
                let want = if hole.contains(&i) { 0 } else { frames[1][i] };
                assert_eq!(*b, want, "byte {i} of frame 1");
            }
        }
        _ => assert_eq!(chunks, [f(0), f(0), f(2), f(2), f(4), f(5)]),
    }
}

#[test]
fn exact_counters_for_scripted_faults_and_each_incomplete_policy() {
    let frame_bytes = format().frame_bytes();
    let frames: Vec<Vec<u8>> = (0..6).map(|i| noise(frame_bytes, 100 + i)).collect();
    let (script, total, dropped) = faulty_script(&frames);
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
        assert_eq!(r.packets_received, total - dropped);
        assert_eq!(r.frames_written, frames_written);
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len() as u64, frames_written * frame_bytes as u64);
        check_recording(policy, &got, &frames);
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
