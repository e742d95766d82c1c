//! Real peers on the other end: GStreamer (rtpvrawpay / rtpvrawdepay) and
//! FFmpeg (RTP muxer / SDP demuxer), byte-identical both ways.

use std::process::{Command, Stdio};
use std::time::Duration;

use nagare_api::video::RecvReport;

use crate::common::{
    Running, Scratch, assert_ok, free_udp_port, nagare, noise, parse_report, require, wait_bounded,
    wait_for_file_size, wait_for_udp_port,
};

const W: usize = 320;
const H: usize = 240;
const FRAMES: usize = 15;

/// GStreamer caps for nagare's stream.
fn caps(sampling: &str, depth: u32) -> String {
    format!(
        "application/x-rtp,media=video,clock-rate=90000,encoding-name=RAW,sampling={sampling},\
         depth=(string){depth},width=(string){W},height=(string){H},payload=96"
    )
}

/// Stops a gst-launch -e pipeline with SIGINT so it writes EOS and flushes.
fn interrupt(child: &mut std::process::Child) {
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    wait_bounded(child, 10, "gst-launch after SIGINT");
}

#[test]
fn gstreamer_receives_nagare_byte_identical() {
    if !require("gst-launch-1.0") {
        return;
    }
    for (pix, sampling, depth, bytes_per_line) in [
        ("uyvy422", "YCbCr-4:2:2", 8, W * 2),
        ("uyvp", "YCbCr-4:2:2", 10, W * 5 / 2),
        ("rgb24", "RGB", 8, W * 3),
    ] {
        let s = Scratch::new("gst-rx");
        let input = noise(bytes_per_line * H * FRAMES, 21);
        std::fs::write(s.path("in.raw"), &input).unwrap();
        let out = s.path("out.raw");
        let port = free_udp_port();
        let mut gst = Command::new("gst-launch-1.0")
            .args([
                "-e",
                "-q",
                "udpsrc",
                &format!("port={port}"),
                "address=127.0.0.1",
            ])
            .args([
                "buffer-size=33554432",
                &format!("caps={}", caps(sampling, depth)),
            ])
            .args(["!", "rtpvrawdepay", "!", "filesink"])
            .arg(format!("location={}", out.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_udp_port(port, Duration::from_secs(10));
        let send = nagare()
            .args(["send", s.path("in.raw").to_str().unwrap()])
            .args([
                "--to",
                &format!("127.0.0.1:{port}"),
                "--size",
                &format!("{W}x{H}"),
            ])
            .args([
                "--pix-fmt",
                pix,
                "--fps",
                "30",
                "--frames",
                &FRAMES.to_string(),
            ])
            .output()
            .unwrap();
        assert_ok(&send);
        wait_for_file_size(&out, input.len() as u64, Duration::from_secs(10));
        interrupt(&mut gst);
        let got = std::fs::read(&out).unwrap();
        assert_eq!(
            got.len(),
            input.len(),
            "{pix}: GStreamer wrote {} bytes",
            got.len()
        );
        assert!(
            got == input,
            "{pix}: GStreamer's frames differ from nagare's input"
        );
    }
}

#[test]
fn nagare_receives_gstreamer_byte_identical() {
    if !require("gst-launch-1.0") {
        return;
    }
    for (pix, gst_format, bytes_per_line) in
        [("uyvy422", "uyvy", W * 2), ("uyvp", "uyvp", W * 5 / 2)]
    {
        let s = Scratch::new("gst-tx");
        let input = noise(bytes_per_line * H * FRAMES, 22);
        std::fs::write(s.path("in.raw"), &input).unwrap();
        let out = s.path("out.raw");
        let mut recv = nagare();
        recv.args([
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--size",
            &format!("{W}x{H}"),
        ])
        .args([
            "--pix-fmt",
            pix,
            "--frames",
            &FRAMES.to_string(),
            "--timeout",
            "5",
        ])
        .args(["--json", "--output", out.to_str().unwrap()]);
        let mut r = Running::spawn(recv);
        let port = r.listening().port();
        let gst = Command::new("gst-launch-1.0")
            .args(["-q", "filesrc"])
            .arg(format!("location={}", s.path("in.raw").display()))
            .args([
                "!",
                "rawvideoparse",
                &format!("width={W}"),
                &format!("height={H}"),
            ])
            .args([&format!("format={gst_format}"), "framerate=30/1"])
            .args([
                "!",
                "rtpvrawpay",
                "!",
                "udpsink",
                "host=127.0.0.1",
                &format!("port={port}"),
            ])
            .output()
            .unwrap();
        assert_ok(&gst);
        let (status, out_json, err) = r.finish();
        assert!(status.success(), "{pix}: {err}\n{out_json}");
        let report: RecvReport = parse_report(&out_json);
        assert_eq!(report.frames_complete, FRAMES as u64, "{pix}");
        assert!(
            std::fs::read(&out).unwrap() == input,
            "{pix}: recording differs"
        );
    }
}

#[test]
fn nagare_receives_ffmpeg_byte_identical_with_its_sdp() {
    if !require("ffmpeg") {
        return;
    }
    let s = Scratch::new("ff-tx");
    let input = noise(W * 2 * H * FRAMES, 23);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let port = free_udp_port();
    // FFmpeg writes its SDP when it starts sending; make it first with a
    // one-frame run to a port nobody reads.
    let sdp = s.path("ff.sdp");
    let ff = |frames: usize, to: u16| {
        Command::new("ffmpeg")
            .args([
                "-loglevel",
                "error",
                "-re",
                "-f",
                "rawvideo",
                "-pix_fmt",
                "uyvy422",
            ])
            .args(["-s", &format!("{W}x{H}"), "-r", "30", "-i"])
            .arg(s.path("in.yuv"))
            .args([
                "-frames:v",
                &frames.to_string(),
                "-c:v",
                "rawvideo",
                "-f",
                "rtp",
            ])
            .args([
                "-sdp_file",
                sdp.to_str().unwrap(),
                &format!("rtp://127.0.0.1:{to}"),
            ])
            .output()
            .unwrap()
    };
    assert!(ff(1, port).status.success());
    let out = s.path("out.yuv");
    let mut recv = nagare();
    recv.args([
        "recv",
        "--sdp",
        sdp.to_str().unwrap(),
        "--frames",
        &FRAMES.to_string(),
    ])
    .args([
        "--timeout",
        "5",
        "--json",
        "--output",
        out.to_str().unwrap(),
    ]);
    let mut r = Running::spawn(recv);
    r.listening();
    let sent = ff(FRAMES, port);
    assert_ok(&sent);
    let (status, report, err) = r.finish();
    assert!(status.success(), "{err}\n{report}");
    let report: RecvReport = parse_report(&report);
    assert_eq!(report.frames_complete, FRAMES as u64);
    assert!(
        std::fs::read(&out).unwrap() == input,
        "recording differs from FFmpeg's input"
    );
}

#[test]
fn ffmpeg_receives_nagare_through_nagares_sdp() {
    if !require("ffmpeg") {
        return;
    }
    let s = Scratch::new("ff-rx");
    let input = noise(W * 2 * H * FRAMES, 24);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let port = free_udp_port();
    let sdp = s.path("nagare.sdp");
    let send = |frames: usize| {
        nagare()
            .args(["send", s.path("in.yuv").to_str().unwrap()])
            .args([
                "--to",
                &format!("127.0.0.1:{port}"),
                "--size",
                &format!("{W}x{H}"),
            ])
            .args([
                "--pix-fmt",
                "uyvy422",
                "--fps",
                "30",
                "--frames",
                &frames.to_string(),
            ])
            .args(["--sdp", sdp.to_str().unwrap()])
            .output()
            .unwrap()
    };
    // First write the SDP (--frames 0 sends nothing), then start FFmpeg on
    // it, then send for real.
    assert!(send(0).status.success());
    let out = s.path("out.yuv");
    let ff = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-protocol_whitelist", "file,udp,rtp"])
        // docs/recv.md's receive flags: a big socket buffer, no reorder queue.
        .args(["-buffer_size", "268435456", "-reorder_queue_size", "0"])
        .args([
            "-i",
            sdp.to_str().unwrap(),
            "-frames:v",
            &FRAMES.to_string(),
        ])
        .args([
            "-c:v", "rawvideo", "-pix_fmt", "uyvy422", "-f", "rawvideo", "-y",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // FFmpeg binds the SDP's port once it has read the SDP.
    wait_for_udp_port(port, Duration::from_secs(20));
    let sent = send(FRAMES);
    assert_ok(&sent);
    let mut ff = ff;
    wait_bounded(&mut ff, 20, "ffmpeg");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), input.len());
    assert!(
        got == input,
        "FFmpeg's decoded frames differ from nagare's input"
    );
}

/// Two adjacent free UDP ports on 127.0.0.1, RTP and RTCP.
fn free_udp_pair() -> u16 {
    for _ in 0..50 {
        let port = free_udp_port();
        let pair = (
            std::net::UdpSocket::bind(("127.0.0.1", port)),
            std::net::UdpSocket::bind(("127.0.0.1", port.wrapping_add(1))),
        );
        if let (Ok(_), Ok(_)) = pair {
            return port;
        }
    }
    panic!("no two adjacent free UDP ports");
}

/// GStreamer's RTP jitter buffer synchronises on `send`'s sender
/// reports: rtpbin tags a buffer with its sender's NTP time
/// (GstReferenceTimestampMeta) only once an SR has tied the stream's RTP
/// clock to NTP time, so with RTCP the frames carry it and with
/// `--no-rtcp` none does (the same pipeline, the same frames).
#[test]
fn gstreamers_jitter_buffer_syncs_on_sends_sender_reports() {
    if !require("gst-launch-1.0") {
        return;
    }
    let frames = 60; // 2 s at 30 fps: sender reports at once and about every second
    for (extra, synced) in [(None, true), (Some("--no-rtcp"), false)] {
        let s = Scratch::new("gst-sr");
        let log = s.path("gst.log");
        let port = free_udp_pair();
        let mut gst = Command::new("gst-launch-1.0")
            .args([
                "-e",
                "-v",
                "rtpbin",
                "name=b",
                "add-reference-timestamp-meta=true",
            ])
            .args(["udpsrc", &format!("port={port}"), "address=127.0.0.1"])
            .arg(format!("caps={}", caps("YCbCr-4:2:2", 8)))
            .args(["!", "b.recv_rtp_sink_0", "b.", "!", "rtpvrawdepay"])
            .args(["!", "identity", "silent=false", "!", "fakesink"])
            .args(["udpsrc", &format!("port={}", port + 1), "address=127.0.0.1"])
            .args(["!", "b.recv_rtcp_sink_0"])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_udp_port(port + 1, Duration::from_secs(10));
        let send = nagare()
            .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
            .args(["--size", &format!("{W}x{H}"), "--pix-fmt", "uyvy422"])
            .args(["--fps", "30", "--frames", &frames.to_string()])
            .args(extra)
            .output()
            .unwrap();
        assert_ok(&send);
        let chains = |text: &str| text.lines().filter(|l| l.contains("chain")).count();
        crate::common::wait_until("frames through GStreamer", Duration::from_secs(10), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            (chains(&text) >= frames).then_some(())
        });
        interrupt(&mut gst);
        let text = std::fs::read_to_string(&log).unwrap();
        let tagged = text
            .lines()
            .filter(|l| l.contains("chain") && l.contains("GstReferenceTimestampMeta"))
            .count();
        assert_eq!(
            chains(&text),
            frames,
            "frames through GStreamer ({extra:?})"
        );
        if synced {
            // Every frame after the first report (it follows the first
            // train within 100 ms, so at most a few frames go untagged).
            assert!(tagged >= frames - 5, "{tagged} of {frames} frames tagged");
        } else {
            assert_eq!(tagged, 0, "no SR, yet frames tagged with NTP time");
        }
    }
}
