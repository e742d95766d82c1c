//! Which stream recv records: a stray or spoofed datagram never captures
//! it, a restarted sender is a new take (with --follow-ssrc) or a clear
//! stop, and recv never exits 0 having thrown a stream away. Both sides
//! print the SSRC and the first sequence number.

use std::net::UdpSocket;

use nagare_api::video::{EndedBy, RecvReport, SendReport};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::{ExtSeq, FrameRate, MediaTime, PixelFormat, Ssrc, VideoFormat};

use crate::common::{Running, Scratch, nagare, noise, parse_report};

/// Packets of `frames` 64x8 UYVY frames of SSRC `ssrc`.
fn stream(frames: &[Vec<u8>], ssrc: u32, seq0: u64) -> Vec<Vec<u8>> {
    let format = VideoFormat::new(64, 8, PixelFormat::Uyvy422).unwrap();
    let p = Packetizer::new(format, 200, Ssrc(ssrc)).unwrap();
    let rate = FrameRate::new(50, 1).unwrap();
    let mut seq = ExtSeq(seq0);
    let mut out = Vec::new();
    for (f, frame) in frames.iter().enumerate() {
        let ts = MediaTime(rate.rtp_timestamp(100 + f as u64));
        let packets = p.frame_packets(frame, seq, ts).unwrap();
        seq = seq.add(packets.len() as u64);
        out.extend(packets);
    }
    out
}

fn recv(extra: &[&str]) -> Running {
    let mut cmd = nagare();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--size", "64x8"])
        .args(["--pix-fmt", "uyvy422", "--fps", "50", "--timeout", "2"])
        .arg("--json")
        .args(extra);
    Running::spawn(cmd)
}

#[test]
fn strays_and_spoofed_sources_are_counted_and_ignored() {
    let frames: Vec<Vec<u8>> = (0..3).map(|k| noise(64 * 8 * 2, k)).collect();
    let s = Scratch::new("stray");
    let out = s.path("rec.uyvy");
    let mut r = recv(&[
        "--frames",
        "3",
        "--source",
        "127.0.0.2",
        "-o",
        out.to_str().unwrap(),
    ]);
    let addr = r.listening();
    let spoofer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sender = UdpSocket::bind("127.0.0.2:0").unwrap();
    // A 20-byte RTP datagram of another SSRC, one valid packet of a third,
    // and a whole stream from outside the source filter come first.
    let mut tiny = vec![0x80, 96, 0, 1, 0, 0, 0, 9, 0, 0, 0x0b, 0xad];
    tiny.extend_from_slice(&[0; 8]);
    sender.send_to(&tiny, addr).unwrap();
    let stray = stream(&frames[..1], 0x5757, 40_000);
    sender.send_to(&stray[0], addr).unwrap();
    let spoofed = stream(&frames, 0xbad, 7);
    for p in &spoofed {
        spoofer.send_to(p, addr).unwrap();
    }
    let real = stream(&frames, 0x1234, 65_530);
    for p in &real {
        sender.send_to(p, addr).unwrap();
    }
    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(got.frames_complete, 3);
    assert_eq!(got.packets_received, real.len() as u64);
    assert_eq!(
        got.packets_foreign + got.packets_malformed,
        2 + spoofed.len() as u64
    );
    assert_eq!(got.takes.len(), 1);
    assert_eq!(
        (got.takes[0].ssrc, got.takes[0].first_seq),
        (0x1234, 65_530)
    );
    assert!(
        err.contains("stream SSRC 0x00001234 from 127.0.0.2:"),
        "{err}"
    );
    assert!(err.contains("first sequence number 65530"), "{err}");
    let want: Vec<u8> = frames.concat();
    assert!(std::fs::read(&out).unwrap() == want);
}

/// Sends `input` (5 frames of 64x8 UYVY) to `addr` with `nagare send`;
/// returns its report and the SSRC and first sequence number it printed.
fn send(input: &std::path::Path, addr: &str) -> (SendReport, String) {
    let out = nagare()
        .arg("send")
        .arg(input)
        .args(["--to", addr, "--size", "64x8", "--pix-fmt", "uyvy422"])
        .args(["--fps", "50", "--frames", "5", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("SSRC"))
        .unwrap_or_else(|| panic!("send named no SSRC: {err}"));
    let ids = line.rsplit(": ").next().unwrap().to_owned();
    (parse_report(&String::from_utf8_lossy(&out.stdout)), ids)
}

#[test]
fn a_restarted_sender_is_a_new_take_or_a_clear_stop() {
    let s = Scratch::new("restart");
    let (a, b) = (noise(5 * 1024, 1), noise(5 * 1024, 2));
    std::fs::write(s.path("a.uyvy"), &a).unwrap();
    std::fs::write(s.path("b.uyvy"), &b).unwrap();

    // Without --follow-ssrc: the first take is kept, then a clear stop.
    let mut r = recv(&["--frames", "10"]);
    let addr = r.listening().to_string();
    send(&s.path("a.uyvy"), &addr);
    let (_, second) = send(&s.path("b.uyvy"), &addr);
    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(got.ended_by, EndedBy::TakenOver);
    assert_eq!(got.frames_complete, 5);
    assert_eq!(got.rivals.len(), 1);
    assert!(got.rivals[0].took_over);
    let ssrc = second.split(',').next().unwrap().trim(); // "SSRC 0x..."
    assert!(
        err.contains(&format!("another stream ({ssrc} from 127.0.0.1:")),
        "{err}"
    );
    assert!(err.contains("pass --follow-ssrc"), "{err}");

    // With --follow-ssrc both takes are recorded, one after the other.
    let out = s.path("rec.uyvy");
    let mut r = recv(&[
        "--frames",
        "10",
        "--follow-ssrc",
        "-o",
        out.to_str().unwrap(),
    ]);
    let addr = r.listening().to_string();
    let (sent_a, ids_a) = send(&s.path("a.uyvy"), &addr);
    let (sent_b, ids_b) = send(&s.path("b.uyvy"), &addr);
    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    assert!(status.success(), "{err}");
    assert_eq!(got.takes.len(), 2, "{err}");
    assert_eq!((got.takes[0].first_frame, got.takes[1].first_frame), (0, 5));
    for (take, ids) in got.takes.iter().zip([&ids_a, &ids_b]) {
        let want = format!(
            "SSRC 0x{:08x}, first sequence number {}",
            take.ssrc, take.first_seq
        );
        assert_eq!(ids, &want);
    }
    assert!(err.contains("take 2: SSRC 0x"), "{err}");
    assert_eq!(got.frames_complete, 10);
    assert_eq!(
        got.packets_received,
        sent_a.packets_sent + sent_b.packets_sent
    );
    assert_eq!(got.packets_foreign, 0);
    let mut want = a;
    want.extend_from_slice(&b);
    assert!(std::fs::read(&out).unwrap() == want);
}
