//! The smaller inconsistencies a new user met (issue 13), each asserting
//! the fixed behaviour: one default packet size, doctor's loopback
//! multicast line, each interface named once, recv --sdp with --size,
//! the format-mismatch hint, impair's counters on stderr, and refused
//! datagrams counted as not sent.

use std::io::Read;
use std::process::Stdio;

use nagare_api::probe::Report as ProbeReport;
use nagare_api::video::{RecvReport, SendReport};

use crate::common::{Running, Scratch, nagare, wait_bounded};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn one_default_packet_size_for_send_probe_and_doctor() {
    // doctor plans with send's default.
    let out = nagare().args(["doctor", "--rate", "1G"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("with 1440-byte packets"), "{text}");
    // probe, without a profile or -l.
    let mut cmd = nagare();
    cmd.args(["probe", "server", "--listen", "127.0.0.1:0", "--tests", "1"]);
    let mut s = Running::spawn(cmd);
    let line = s.wait_for("port ");
    let port = line.rsplit("port ").next().unwrap().trim();
    let out = nagare()
        .args([
            "probe",
            "client",
            &format!("127.0.0.1:{port}"),
            "-J",
            "-t",
            "0.2",
        ])
        .output()
        .unwrap();
    let v: ProbeReport =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(v.packet_size, 1440);
    // send: 64x48 uyvy422 is 6144 bytes a frame; 1440-byte packets
    // carry whole lines of 128 bytes, 11 per packet after the headers.
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "64x48",
        ])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "30",
            "--frames",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let r: SendReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.packets_per_frame >= 5, "{r:?}");
    let _ = wait_bounded(&mut s.child, 30, "the probe server");
}

#[test]
fn doctor_says_loopback_carries_multicast_without_the_flag() {
    // IFF_MULTICAST is 0x1000; Linux's lo does not set it.
    let flags = std::fs::read_to_string("/sys/class/net/lo/flags").unwrap();
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
    let out = nagare()
        .args([
            "doctor",
            "--rate",
            "1G",
            "--to",
            "239.1.2.3:5004",
            "--interface",
            "lo",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("lo can carry multicast"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("[ ok ]"), "{line}");
    if flags & 0x1000 == 0 {
        assert!(
            line.contains("no MULTICAST flag; loopback delivers multicast"),
            "{line}"
        );
    } else {
        assert!(line.contains("MULTICAST flag set"), "{line}");
    }
}

#[test]
fn an_unknown_interface_lists_each_known_one_once() {
    let out = nagare()
        .args(["doctor", "--rate", "1G", "--interface", "eth9"])
        .output()
        .unwrap();
    let err = stderr(&out);
    let known = err
        .split("(known: ")
        .nth(1)
        .and_then(|k| k.split(')').next())
        .unwrap_or_else(|| panic!("{err}"));
    let names: Vec<&str> = known.split(", ").collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "{known}");
    assert!(names.contains(&"lo"), "{known}");
}

#[test]
fn recv_with_an_sdp_checks_size_and_pix_fmt_against_it() {
    let dir = Scratch::new("sdp-size");
    let sdp = dir.path("s.sdp");
    std::fs::write(
        &sdp,
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=video 5004 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\n\
         a=fmtp:96 sampling=YCbCr-4:2:2; width=64; height=48; depth=8; exactframerate=30; \
         colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPN\r\n",
    )
    .unwrap();
    let path = sdp.to_str().unwrap();
    let out = nagare()
        .args(["recv", "--sdp", path, "--size", "128x96", "--timeout", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--size 128x96 disagrees with the SDP")
            && stderr(&out).contains("64x48"),
        "{}",
        stderr(&out)
    );
    let out = nagare()
        .args([
            "recv",
            "--sdp",
            path,
            "--pix-fmt",
            "rgb24",
            "--timeout",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("--pix-fmt rgb24 disagrees"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_format_mismatch_gets_a_hint() {
    let mut cmd = nagare();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--size", "32x24"])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--frames",
            "5",
            "--timeout",
            "2",
            "--json",
        ]);
    let mut r = Running::spawn(cmd);
    let port = r.listening().port();
    let sent = nagare()
        .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
        .args([
            "--size",
            "64x48",
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "30",
            "--frames",
            "5",
        ])
        .output()
        .unwrap();
    assert!(sent.status.success(), "{}", stderr(&sent));
    let (_, out, err) = r.finish();
    let report: RecvReport = serde_json::from_str(&out).unwrap();
    assert!(report.packets_malformed > 0, "{report:?}");
    assert!(
        err.contains("hint:") && err.contains("did not fit a 32x24 uyvy422 frame"),
        "{err}"
    );
}

#[test]
fn impair_prints_its_counters_on_stderr() {
    let mut cmd = nagare();
    cmd.args(["impair", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:9"]);
    let mut r = Running::spawn(cmd);
    r.wait_for("port ");
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(r.child.id() as libc::pid_t, libc::SIGINT);
    }
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    assert_eq!(out, "", "stdout is for --json only");
    assert!(err.contains("received 0 (0 stream), forwarded 0"), "{err}");
}

#[test]
fn refused_datagrams_are_counted_not_sent() {
    // Nothing listens on this port: the kernel refuses every other train.
    let port = crate::common::free_udp_port();
    let mut send = nagare()
        .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
        .args(["--size", "64x48", "--pix-fmt", "uyvy422", "--fps", "30"])
        .args(["--frames", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    send.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    send.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    wait_bounded(&mut send, 30, "nagare send");
    let r: SendReport = serde_json::from_str(&out).unwrap();
    assert!(r.refused > 0, "{r:?}");
    assert_eq!(
        r.packets_sent + r.refused,
        30 * r.packets_per_frame,
        "every packet is either sent or refused: {r:?}"
    );
    assert!(err.contains("refused packets"), "{err}");
}
