//! nagare send -> nagare recv over loopback and namespaces: recordings
//! are byte-identical to the input.

use nagare_api::video::{RecvReport, SendReport};

use crate::common::{Netns, Running, Scratch, assert_ok, nagare, noise, parse_report};

/// Runs `recv` (with `recv_args`, listening on `listen`) and `send` of
/// `input`, returning recv's (status, report, stderr) and send's report.
fn round_trip(
    input: &str,
    size: &str,
    pix: &str,
    listen: &str,
    send_extra: &[&str],
    recv_extra: &[&str],
    frames: u64,
) -> (std::process::ExitStatus, RecvReport, String, SendReport) {
    let mut recv = nagare();
    recv.args(["recv", "--listen", listen, "--size", size, "--pix-fmt", pix])
        .args(["--frames", &frames.to_string(), "--timeout", "5", "--json"])
        .args(recv_extra);
    let mut r = Running::spawn(recv);
    let addr = r.listening();
    let dest = if addr.ip().is_unspecified() {
        listen.to_string()
    } else {
        addr.to_string()
    };
    let send = nagare()
        .args([
            "send",
            input,
            "--to",
            &dest,
            "--size",
            size,
            "--pix-fmt",
            pix,
        ])
        .args(["--fps", "100", "--frames", &frames.to_string(), "--json"])
        .args(send_extra)
        .output()
        .unwrap();
    assert!(
        send.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&send.stderr)
    );
    let (status, out, err) = r.finish();
    (
        status,
        parse_report(&out),
        err,
        parse_report(&String::from_utf8_lossy(&send.stdout)),
    )
}

#[test]
fn unicast_file_is_recorded_byte_identical_and_round_trips() {
    let s = Scratch::new("unicast");
    let (w, h, frames) = (320usize, 180usize, 12u64);
    let input = noise(w * h * 3 * frames as usize, 1);
    std::fs::write(s.path("in.rgb"), &input).unwrap();
    let out = s.path("out.rgb");
    let (status, report, err, sent) = round_trip(
        s.path("in.rgb").to_str().unwrap(),
        "320x180",
        "rgb24",
        "127.0.0.1:0",
        &[],
        &["--output", out.to_str().unwrap()],
        frames,
    );
    assert!(status.success(), "{err}");
    assert_eq!(report.frames_complete, frames);
    assert_eq!(report.packets_lost, 0);
    assert_eq!(report.packets_received, sent.packets_sent);
    assert_eq!(sent.frames_sent, frames);
    assert_eq!(sent.packets_sent, frames * sent.packets_per_frame);
    assert_eq!(std::fs::read(&out).unwrap(), input);

    // The recording is valid input for send again: send -> recv -> send.
    let out2 = s.path("out2.rgb");
    let (status, _, err, _) = round_trip(
        out.to_str().unwrap(),
        "320x180",
        "rgb24",
        "127.0.0.1:0",
        &["--packet-size", "8960"],
        &["--output", out2.to_str().unwrap()],
        frames,
    );
    assert!(status.success(), "{err}");
    assert_eq!(std::fs::read(&out2).unwrap(), input);
}

#[test]
fn multicast_on_loopback_10_bit() {
    let s = Scratch::new("mcast");
    let (w, h, frames) = (256usize, 64usize, 10u64);
    let input = noise(w / 2 * 5 * h * frames as usize, 2);
    std::fs::write(s.path("in.uyvp"), &input).unwrap();
    let out = s.path("out.uyvp");
    // The group's port is chosen by the test, so pick a free one.
    let port = crate::common::free_udp_port();
    let group = format!("239.255.77.1:{port}");
    let (status, report, err, _) = round_trip(
        s.path("in.uyvp").to_str().unwrap(),
        "256x64",
        "uyvp",
        &group,
        &["--interface", "127.0.0.1", "--ttl", "0"],
        &["--interface", "lo", "--output", out.to_str().unwrap()],
        frames,
    );
    assert!(status.success(), "{err}");
    assert_eq!(report.frames_complete, frames);
    assert_eq!(std::fs::read(&out).unwrap(), input);
}

#[test]
fn source_specific_multicast_ignores_other_sources() {
    // SSM join for source 127.0.0.1: the stream from 127.0.0.1 arrives.
    let s = Scratch::new("ssm");
    let out = s.path("out.raw");
    let port = crate::common::free_udp_port();
    let group = format!("232.1.2.3:{port}");
    let (status, report, err, _) = round_trip(
        "pattern:bars",
        "64x32",
        "uyvy422",
        &group,
        &["--interface", "127.0.0.1", "--ttl", "0"],
        &[
            "--interface",
            "127.0.0.1",
            "--source",
            "127.0.0.1",
            "--output",
            out.to_str().unwrap(),
        ],
        5,
    );
    assert!(status.success(), "{err}");
    assert_eq!(report.frames_complete, 5);
}

#[test]
fn ipv6_unicast_and_multicast_in_a_namespace() {
    let s = Scratch::new("v6");
    let input = noise(64 * 2 * 16 * 6, 3);
    std::fs::write(s.path("in.raw"), &input).unwrap();
    let out = s.path("out.raw");
    let (status, _, err, _) = round_trip(
        s.path("in.raw").to_str().unwrap(),
        "64x16",
        "uyvy422",
        "[::1]:0",
        &[],
        &["--output", out.to_str().unwrap()],
        6,
    );
    assert!(status.success(), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), input);

    let Some(ns) = Netns::new("v6mc") else { return };
    for source in [None, Some("fd00::1")] {
        let out = s.path("mc.raw");
        let mut recv = ns.nagare();
        recv.args(["recv", "--listen", "[ff15::77]:5004", "--interface", "v0"])
            .args(["--size", "64x16", "--pix-fmt", "uyvy422", "--frames", "6"])
            .args([
                "--timeout",
                "5",
                "--json",
                "--output",
                out.to_str().unwrap(),
            ]);
        if let Some(src) = source {
            recv.args(["--source", src]);
        }
        let mut r = Running::spawn(recv);
        r.listening();
        let send = ns
            .nagare()
            .args([
                "send",
                s.path("in.raw").to_str().unwrap(),
                "--to",
                "[ff15::77]:5004",
            ])
            .args([
                "--interface",
                "v0",
                "--size",
                "64x16",
                "--pix-fmt",
                "uyvy422",
            ])
            .args(["--fps", "100", "--frames", "6"])
            .output()
            .unwrap();
        assert_ok(&send);
        let (status, _, err) = r.finish();
        assert!(status.success(), "source {source:?}: {err}");
        assert_eq!(std::fs::read(&out).unwrap(), input);
    }
}

#[test]
fn directory_input_loops_in_name_order() {
    let s = Scratch::new("dir");
    let frame = 32 * 2 * 8;
    let dir = s.path("frames");
    std::fs::create_dir(&dir).unwrap();
    let frames: Vec<Vec<u8>> = (0..3).map(|i| noise(frame, 10 + i)).collect();
    // Written out of order: the sender sorts by name.
    for i in [2usize, 0, 1] {
        std::fs::write(dir.join(format!("f{i:03}.yuv")), &frames[i]).unwrap();
    }
    let out = s.path("out.yuv");
    let (status, _, err, _) = round_trip(
        dir.to_str().unwrap(),
        "32x8",
        "uyvy422",
        "127.0.0.1:0",
        &["--loop"],
        &["--output", out.to_str().unwrap()],
        7,
    );
    assert!(status.success(), "{err}");
    let want: Vec<u8> = (0..7).flat_map(|i| frames[i % 3].clone()).collect();
    assert_eq!(std::fs::read(&out).unwrap(), want);
}

#[test]
fn slow_storage_is_reported_as_underruns_not_hidden() {
    // Reads take 3x the frame period: the ring empties and the sender gives
    // up frame slots (keeping its schedule); the receiver sees the gaps.
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0", "--size", "64x16"])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "50",
            "--timeout",
            "1.5",
            "--json",
        ]);
    let mut r = Running::spawn(recv);
    let addr = r.listening().to_string();
    let send = nagare()
        .args(["send", "pattern:bars", "--to", &addr, "--size", "64x16"])
        .args(["--pix-fmt", "uyvy422", "--fps", "50", "--frames", "8"])
        .args(["--buffer-frames", "2", "--read-delay-ms", "60", "--json"])
        .output()
        .unwrap();
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&send.stdout));
    assert_eq!(sent.frames_sent, 8);
    assert!(sent.underruns >= 5, "underruns: {sent:?}");
    let (status, out, err) = r.finish();
    let report: RecvReport = parse_report(&out);
    assert!(!status.success(), "gaps must fail the receive: {err}");
    assert_eq!(report.frames_complete, 8);
    // Every skipped slot after the first frame shows as a lost frame.
    assert_eq!(report.frames_lost.count, sent.underruns);
    assert_eq!(report.packets_lost, 0);
}

#[test]
fn fast_enough_storage_never_underruns() {
    let (status, report, err, sent) = round_trip(
        "pattern:bars",
        "64x16",
        "uyvy422",
        "127.0.0.1:0",
        // 320 ms of frames in hand against a 2 ms read: slack for the
        // 115 ms whole-process stalls seen on a loaded 2-core machine, yet
        // the 40 frames outnumber the ring, so the reader must keep pace
        // to pass.
        &["--buffer-frames", "32", "--read-delay-ms", "2"],
        &[],
        40,
    );
    assert!(status.success(), "{err}\nsender: {sent:?}");
    assert_eq!(sent.underruns, 0);
    assert_eq!(report.frames_complete, 40);
}

/// The first of `n` consecutive UDP ports that were free a moment ago.
fn consecutive_free_ports(n: u16) -> u16 {
    loop {
        let p = crate::common::free_udp_port();
        if p < 60000 && (1..n).all(|k| std::net::UdpSocket::bind(("127.0.0.1", p + k)).is_ok()) {
            return p;
        }
    }
}

/// One SDP per stripe, each on its own port and of its own height.
fn check_stripe_sdps(s: &Scratch, base: u16, stripes: usize, h: usize) {
    // one SDP per stripe, each on its own port
    for k in 0..stripes {
        let sdp = std::fs::read_to_string(s.path(&format!("stream-{k}.sdp"))).unwrap();
        assert!(
            sdp.contains(&format!("m=video {} RTP/AVP 96", base + k as u16)),
            "{sdp}"
        );
        assert!(sdp.contains(&format!("height={}", h / stripes)));
    }
}

#[test]
fn stripes_are_separate_streams_that_rebuild_the_frame() {
    // Like seed 000: each stripe of every frame is its own RTP stream on
    // its own port; any receiver can take one, and the stripes rebuild it.
    let s = Scratch::new("stripes");
    let (w, h, frames, stripes) = (64usize, 16usize, 5usize, 4usize);
    let frame = w * 3 * h;
    let input = noise(frame * frames, 31);
    std::fs::write(s.path("in.rgb"), &input).unwrap();
    let base = consecutive_free_ports(stripes as u16);
    let mut recvs: Vec<Running> = (0..stripes)
        .map(|k| {
            let mut c = nagare();
            let listen = format!("127.0.0.1:{}", base + k as u16);
            let size = format!("{w}x{}", h / stripes);
            c.args([
                "recv",
                "--listen",
                &listen,
                "--size",
                &size,
                "--pix-fmt",
                "rgb24",
            ])
            .args(["--frames", &frames.to_string(), "--timeout", "5"])
            .args(["--output", s.path(&format!("s{k}.rgb")).to_str().unwrap()]);
            let mut r = Running::spawn(c);
            r.listening();
            r
        })
        .collect();
    let send = nagare()
        .args([
            "send",
            s.path("in.rgb").to_str().unwrap(),
            "--to",
            &format!("127.0.0.1:{base}"),
        ])
        .args([
            "--size",
            &format!("{w}x{h}"),
            "--pix-fmt",
            "rgb24",
            "--fps",
            "100",
        ])
        .args(["--stripes", &stripes.to_string(), "--json"])
        .args(["--sdp", s.path("stream.sdp").to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&send);
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&send.stdout));
    assert_eq!(sent.stripes, stripes);
    assert_eq!(sent.frames_sent, frames as u64);
    assert_eq!(
        sent.packets_sent,
        (frames * stripes) as u64 * sent.packets_per_frame
    );
    let parts: Vec<Vec<u8>> = recvs
        .drain(..)
        .enumerate()
        .map(|(k, r)| {
            let (status, _, err) = r.finish();
            assert!(status.success(), "stripe {k}: {err}");
            std::fs::read(s.path(&format!("s{k}.rgb"))).unwrap()
        })
        .collect();
    let part = frame / stripes;
    let rebuilt: Vec<u8> = (0..frames)
        .flat_map(|f| {
            parts
                .iter()
                .flat_map(move |p| p[f * part..(f + 1) * part].to_vec())
        })
        .collect();
    assert!(rebuilt == input, "stripes do not rebuild the input");
    check_stripe_sdps(&s, base, stripes, h);
}

#[test]
fn direct_io_input_is_sent_byte_identical() {
    // 64x32 uyvy422 is 4096 bytes a frame: O_DIRECT reads whole frames.
    let s = Scratch::new("direct");
    let input = noise(4096 * 6, 41);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let out = s.path("out.yuv");
    let (status, _, err, _) = round_trip(
        s.path("in.yuv").to_str().unwrap(),
        "64x32",
        "uyvy422",
        "127.0.0.1:0",
        &["--direct"],
        &["--output", out.to_str().unwrap()],
        6,
    );
    assert!(status.success(), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), input);

    // A frame size O_DIRECT cannot read in whole blocks is refused up front.
    std::fs::write(s.path("odd.yuv"), vec![0u8; 64 * 2 * 30 * 2]).unwrap();
    let o = nagare()
        .args([
            "send",
            s.path("odd.yuv").to_str().unwrap(),
            "--to",
            "127.0.0.1:9",
        ])
        .args([
            "--size",
            "64x30",
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "30",
            "--direct",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(
            "--direct reads whole frames at 4096-byte boundaries, but a frame is 3840 bytes"
        ),
        "{err}"
    );
}

#[test]
fn a_file_name_cannot_inject_sdp_lines() {
    // The SDP's s= line names the input; a newline in a file name must
    // not start an SDP line of its own.
    let s = Scratch::new("sdp-name");
    let input = s.path("clip\r\nc=IN IP4 203.0.113.9\r\nm=video 9 RTP\na=mid:x\n.yuv");
    std::fs::write(&input, vec![0u8; 32 * 2 * 8]).unwrap();
    let sdp = s.path("out.sdp");
    let send = nagare()
        .arg("send")
        .arg(&input)
        .args([
            "--to",
            "127.0.0.1:9",
            "--size",
            "32x8",
            "--pix-fmt",
            "uyvy422",
        ])
        .args([
            "--fps",
            "100",
            "--frames",
            "1",
            "--sdp",
            sdp.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_ok(&send);
    let text = std::fs::read_to_string(&sdp).unwrap();
    let lines = |p: &str| text.lines().filter(|l| l.starts_with(p)).count();
    assert_eq!(
        (lines("s="), lines("c="), lines("m="), lines("a=mid")),
        (1, 1, 1, 0),
        "{text}"
    );
    assert!(text.contains("c=IN IP4 127.0.0.1\r\n"), "{text}");
    let name = text.lines().find(|l| l.starts_with("s=")).unwrap();
    assert!(
        name.contains("clip  c=IN IP4 203.0.113.9  m=video 9"),
        "{name}"
    );
}

/// A UDP port on loopback with nothing bound to it (bound, then closed).
fn nobody_listens() -> String {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

#[test]
fn a_send_nobody_hears_fails_and_frames_0_only_writes_the_sdp() {
    let s = Scratch::new("send-nobody");
    let to = nobody_listens();
    let args = ["--size", "64x16", "--pix-fmt", "uyvy422", "--fps", "50"];
    let out = nagare()
        .args(["send", "pattern:bars", "--to", &to])
        .args(args)
        .args(["--frames", "20", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("packets were refused"), "{err}");
    assert!(err.contains("send --frames 0"), "{err}");
    let r: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    // A train goes, its ICMP port unreachable refuses the next one, and so
    // on from the start to the end; what never left is not judged.
    assert!(r.refused > 0 && r.nobody_listened, "{r:?}");
    assert_eq!(r.refused + r.packets_sent, 20 * r.packets_per_frame);
    assert!(r.st2110_21.is_none());
    // --frames 0: the SDP is written, nothing is sent, and that is success.
    let sdp = s.path("only.sdp");
    let out = nagare()
        .args(["send", "pattern:bars", "--to", &to])
        .args(args)
        .args(["--frames", "0", "--json", "--sdp", sdp.to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&out);
    let r: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((r.packets_sent, r.refused), (0, 0));
    let text = std::fs::read_to_string(&sdp).unwrap();
    assert!(text.contains("c=IN IP4 127.0.0.1"), "{text}");
}

/// RTCP between nagare's own ends: send's sender reports reach recv on
/// the RTP port + 1, and recv's receiver reports come back to send with
/// the loss it saw (none, on loopback). Without RTCP, recv hears none;
/// without `--rtcp`, recv binds no RTCP port.
#[test]
fn send_and_recv_exchange_sender_and_receiver_reports() {
    let frames = 150; // 1.5 s at 100 fps: room for a report or two each way
    let (status, report, err, sent) = round_trip(
        "pattern:bars",
        "64x36",
        "uyvy422",
        "127.0.0.1:0",
        &[],
        &["--rtcp"],
        frames,
    );
    assert!(status.success(), "{err}");
    let got = report.rtcp.expect("recv's RTCP");
    let rtcp = sent.rtcp.expect("send's RTCP");
    // recv read the sender's reports, as many as were sent at most (the
    // BYE's may come after it stopped at its frame count).
    assert!(got.sender_reports >= 1, "{got:?}\n{err}");
    assert!(
        got.sender_reports <= rtcp.sender_reports + rtcp.byes,
        "{got:?} {rtcp:?}"
    );
    assert!(got.sender.is_some() && got.receiver_reports >= 1, "{got:?}");
    assert_eq!(got.malformed, 0);
    // send counted recv's receiver reports, and they say nothing was lost.
    assert!(rtcp.receiver_reports >= 1, "{rtcp:?}");
    assert!(
        rtcp.receiver_reports <= got.receiver_reports,
        "{rtcp:?} {got:?}"
    );
    assert_eq!(rtcp.reported_lost, Some(0), "{rtcp:?}");
    assert!(rtcp.reported_jitter_ms.is_some(), "{rtcp:?}");
    assert_eq!(rtcp.byes, 1, "one stream, one BYE");
    assert_eq!(rtcp.malformed, 0);
    assert_eq!(rtcp.to.len(), 1);
    assert_eq!(report.packets_lost, 0);

    let (status, report, err, sent) = round_trip(
        "pattern:bars",
        "64x36",
        "uyvy422",
        "127.0.0.1:0",
        &["--no-rtcp"],
        &["--rtcp"],
        20,
    );
    assert!(status.success(), "{err}");
    assert!(sent.rtcp.is_none());
    let got = report.rtcp.expect("recv's RTCP port");
    assert_eq!(
        (got.sender_reports, got.receiver_reports),
        (0, 0),
        "{got:?}"
    );
}
