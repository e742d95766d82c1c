//! Every user mistake gets a clear message naming the value, exit status
//! 2, and never a panic.

use crate::common::{Netns, Scratch, nagare};

/// Runs nagare with `args`, expects failure with `needle` in stderr.
fn fails_with(args: &[&str], needle: &str) {
    let out = nagare().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
}

fn send(input: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["send", input, "--to", "127.0.0.1:5004"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut rest: Vec<&str> = vec![
        "--size",
        "64x16",
        "--pix-fmt",
        "uyvy422",
        "--fps",
        "30",
        "--frames",
        "1",
    ];
    // later flags override earlier ones in these tests
    for pair in extra.chunks(2) {
        if let Some(i) = rest.iter().position(|a| *a == pair[0]) {
            rest[i + 1] = pair[1];
        } else {
            rest.extend_from_slice(pair);
        }
    }
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

fn fails(args: Vec<String>, needle: &str) {
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    fails_with(&refs, needle);
}

#[test]
fn missing_input() {
    fails(
        send("/nonexistent/clip.yuv", &[]),
        "cannot read input '/nonexistent/clip.yuv'",
    );
}

#[test]
fn file_size_not_a_multiple_of_the_frame() {
    let s = Scratch::new("bad-size");
    let p = s.path("clip.yuv");
    // Less than a frame is refused; a partial tail after whole frames
    // (a recording cut short) is sent without it (see crash.rs).
    std::fs::write(&p, vec![0u8; 100]).unwrap();
    fails(
        send(p.to_str().unwrap(), &[]),
        "100 bytes, less than one 64x16 uyvy422 frame of 2048 bytes",
    );
}

#[test]
fn odd_width_for_422() {
    fails(
        send("pattern:bars", &["--size", "65x16"]),
        "width 65 is not a multiple of 2",
    );
}

#[test]
fn unknown_pixel_format_lists_known_ones() {
    fails(
        send("pattern:bars", &["--pix-fmt", "yuv420p"]),
        "unknown pixel format 'yuv420p': known formats are uyvy422",
    );
}

#[test]
fn packet_size_out_of_range() {
    fails(
        send("pattern:bars", &["--packet-size", "20"]),
        "--packet-size 20",
    );
    fails(
        send("pattern:bars", &["--packet-size", "9000"]),
        "out of range",
    );
}

#[test]
fn addresses_that_do_not_parse() {
    let mut a = send("pattern:bars", &[]);
    a[3] = "not-an-address".into();
    fails(a, "destination 'not-an-address' does not parse");
    fails_with(
        &[
            "recv",
            "--listen",
            "300.1.1.1:5",
            "--size",
            "8x8",
            "--pix-fmt",
            "rgb24",
        ],
        "listen address '300.1.1.1:5' does not parse",
    );
}

#[test]
fn bad_frame_rate() {
    fails(
        send("pattern:bars", &["--fps", "fast"]),
        "frame rate 'fast' does not parse",
    );
}

#[test]
fn port_in_use() {
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    fails_with(
        &[
            "recv",
            "--listen",
            &addr,
            "--size",
            "8x8",
            "--pix-fmt",
            "rgb24",
            "--timeout",
            "1",
        ],
        "is in use",
    );
}

#[test]
fn unknown_interface() {
    fails(
        send("pattern:bars", &["--interface", "nosuch0"]),
        "no interface named 'nosuch0'",
    );
}

#[test]
fn failed_multicast_join_names_group_and_interface() {
    // A namespace with no routes: joining without an interface has no
    // device to join on.
    let Some(ns) = Netns::new("join") else { return };
    let out = ns
        .nagare()
        .args(["recv", "--listen", "239.9.9.9:5004", "--size", "8x8"])
        .args(["--pix-fmt", "rgb24", "--timeout", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("joining multicast group 239.9.9.9") && err.contains("interface"),
        "{err}"
    );
}

#[test]
fn bad_sdp_files() {
    let s = Scratch::new("sdp");
    let p = s.path("x.sdp");
    std::fs::write(
        &p,
        "v=0\r\nm=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 H264/90000\r\n",
    )
    .unwrap();
    fails_with(
        &["recv", "--sdp", p.to_str().unwrap()],
        "only uncompressed RFC 4175 video",
    );
    fails_with(
        &["recv", "--sdp", "/nonexistent.sdp"],
        "cannot read SDP file '/nonexistent.sdp'",
    );
}

#[test]
fn frames_beyond_the_input_need_loop() {
    let s = Scratch::new("short");
    let p = s.path("clip.yuv");
    std::fs::write(&p, vec![0u8; 2048 * 2]).unwrap();
    fails(send(p.to_str().unwrap(), &["--frames", "5"]), "add --loop");
}

#[test]
fn recv_needs_a_format() {
    fails_with(
        &["recv", "--listen", "127.0.0.1:0"],
        "--listen needs --size and --pix-fmt",
    );
}

#[test]
fn cluster_takes_config_before_or_after_the_verb() {
    // After the verb, as people type it: parsed, so the file is what fails.
    fails_with(
        &["cluster", "status", "--config", "/nonexistent/c.toml"],
        "cannot read --config '/nonexistent/c.toml'",
    );
    fails_with(
        &["cluster", "--config", "/nonexistent/c.toml", "status"],
        "cannot read --config '/nonexistent/c.toml'",
    );
    fails_with(&["cluster", "status"], "needs --config FILE");
}
