//! Crash-safe recordings: recv writes each frame the moment it is
//! complete, so SIGKILL leaves whole frames and at most one partial tail;
//! `send` and `recv --append` cut that tail. Zero-length datagrams count
//! as malformed.

use std::net::UdpSocket;
use std::time::Duration;

use nagare_api::video::{RecvReport, SendReport};

use crate::common::{Running, Scratch, nagare, noise, parse_report, sigterm, wait_for_file_size};

const SIZE: &str = "320x18";
const FRAME: usize = 320 * 18 * 2;
const FMT: [&str; 6] = ["--size", SIZE, "--pix-fmt", "uyvy422", "--fps", "100"];

#[test]
fn sigkill_leaves_whole_frames_and_append_and_send_cut_the_tail() {
    let s = Scratch::new("crash");
    let input = noise(FRAME * 4, 5);
    std::fs::write(s.path("in.uyvy"), &input).unwrap();
    let rec = s.path("rec.uyvy");

    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0"])
        .args(FMT)
        .arg("-o")
        .arg(&rec);
    let mut r = Running::spawn(recv);
    let addr = r.listening().to_string();
    let mut send = nagare();
    send.arg("send")
        .arg(s.path("in.uyvy"))
        .args(["--to", &addr, "--loop"])
        .args(FMT);
    let send = Running::spawn(send);
    // Frames reach the file one by one, not in multi-frame batches.
    wait_for_file_size(&rec, 3 * FRAME as u64, Duration::from_secs(20));
    r.child.kill().unwrap();
    let _ = r.finish();
    sigterm(&send.child);
    let _ = send.finish();

    let mut on_disk = std::fs::read(&rec).unwrap();
    let whole = on_disk.len() / FRAME;
    assert!(whole >= 3, "{} bytes", on_disk.len());
    for k in 0..whole {
        let want = &input[(k % 4) * FRAME..(k % 4 + 1) * FRAME];
        assert!(&on_disk[k * FRAME..(k + 1) * FRAME] == want, "frame {k}");
    }
    // At most one partial tail; make sure there is one, so the cuts below
    // are always exercised.
    if on_disk.len() % FRAME == 0 {
        on_disk.extend_from_slice(&input[..FRAME / 2]);
        std::fs::write(&rec, &on_disk).unwrap();
    }
    let tail = on_disk.len() % FRAME;

    // An earlier recording, also cut short, is appended to.
    let base = s.path("base.uyvy");
    std::fs::write(&base, &input[..FRAME + 100]).unwrap();
    let n = whole.to_string();
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0"])
        .args(FMT)
        .args(["--frames", &n, "--timeout", "5", "--json", "--append", "-o"])
        .arg(&base);
    let mut r = Running::spawn(recv);
    let addr = r.listening().to_string();
    r.wait_for(
        "ended in a partial frame of 100 bytes (a recording cut short); cut it, appending after its 1 whole frames",
    );
    let out = nagare()
        .arg("send")
        .arg(&rec)
        .args(["--to", &addr, "--json"])
        .args(FMT)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let note = format!(
        "{whole} whole frames of {FRAME} bytes (320x18 uyvy422) and a partial frame of {tail} bytes"
    );
    assert!(err.contains(&note), "expected {note:?} in {err}");
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(sent.frames_sent, whole as u64);
    let (status, stdout, err) = r.finish();
    assert!(status.success(), "{err}");
    let got: RecvReport = parse_report(&stdout);
    assert_eq!(got.frames_written, whole as u64);
    let appended = std::fs::read(&base).unwrap();
    assert_eq!(appended.len(), (1 + whole) * FRAME);
    assert!(appended[..FRAME] == input[..FRAME]);
    assert!(appended[FRAME..] == on_disk[..whole * FRAME]);
}

#[test]
fn zero_length_datagrams_count_as_malformed() {
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0"])
        .args(FMT)
        .args(["--timeout", "0.5", "--json"]);
    let mut r = Running::spawn(recv);
    let addr = r.listening();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..3 {
        sock.send_to(&[], addr).unwrap();
    }
    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    assert_eq!(got.packets_malformed, 3, "{err}");
    assert_eq!((got.packets_received, got.frames_written), (0, 0));
    assert_eq!(status.code(), Some(1));
}
