//! SIGTERM (what `timeout`, systemd, `docker stop` and Kubernetes send)
//! stops every subcommand as cleanly as Ctrl-C: whole frames flushed, the
//! report printed, and the exit status is the run's own verdict, never 143.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use nagare_api::impair::Report as Relay;
use nagare_api::tree::{PeerReport, SourceReport};
use nagare_api::video::{EndedBy, RecvReport, SendReport};

use crate::common::{
    Running, Scratch, nagare, parse_report, sigterm, wait_bounded, wait_for_file_size, wait_until,
};

const KEY: &str = "00112233445566778899aabbccddeeff";

#[test]
fn sigterm_stops_send_then_recv_with_whole_frames_and_reports() {
    let s = Scratch::new("sigterm-send-recv");
    let out = s.path("rec.uyvy");
    let frame = 128 * 16 * 2u64;
    let fmt = [
        "--size",
        "128x16",
        "--pix-fmt",
        "uyvy422",
        "--fps",
        "50",
        "--json",
    ];
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0"])
        .args(fmt)
        .arg("-o")
        .arg(&out);
    let mut r = Running::spawn(recv);
    let addr = r.listening().to_string();
    let mut send = nagare();
    send.args(["send", "pattern:bars", "--to", &addr]).args(fmt);
    let send = Running::spawn(send);
    wait_for_file_size(&out, 3 * frame, Duration::from_secs(20));

    sigterm(&send.child);
    let (status, stdout, err) = send.finish();
    assert_eq!(status.code(), Some(0), "send: {err}");
    let sent: SendReport = parse_report(&stdout);
    assert!(sent.frames_sent >= 3, "{sent:?}");
    assert_eq!(sent.packets_sent, sent.frames_sent * sent.packets_per_frame);
    assert!(err.contains("SSRC"), "send names its SSRC: {err}");

    // Every frame sent is on disk, whole, before recv is stopped.
    wait_for_file_size(&out, sent.frames_sent * frame, Duration::from_secs(10));
    sigterm(&r.child);
    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    assert_eq!(status.code(), Some(0), "recv: {err}");
    assert_eq!(got.ended_by, EndedBy::Interrupted);
    assert_eq!(
        (
            got.frames_complete,
            got.frames_written,
            got.packets_received
        ),
        (sent.frames_sent, sent.frames_sent, sent.packets_sent)
    );
    assert_eq!(got.frames_incomplete.count + got.frames_lost.count, 0);
    let len = std::fs::metadata(&out).unwrap().len();
    assert_eq!(len, sent.frames_sent * frame);
}

#[test]
fn sigterm_stops_probe_server_and_impair_with_their_counters() {
    let mut cmd = nagare();
    cmd.args(["probe", "server", "--listen", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    server.wait_for("port ");
    sigterm(&server.child);
    let (status, _, err) = server.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("stopped by a signal after 0 tests"), "{err}");

    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cmd = nagare();
    cmd.args(["impair", "--listen", "127.0.0.1:0", "--to"])
        .arg(sink.local_addr().unwrap().to_string())
        .args(["--delay", "50ms", "--json"]);
    let mut relay = Running::spawn(cmd);
    let line = relay.wait_for("port ");
    let port: u16 = line.rsplit("port ").next().unwrap().trim().parse().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    for k in 0..5u8 {
        client.send_to(&[k; 40], ("127.0.0.1", port)).unwrap();
    }
    sigterm(&relay.child);
    let (status, stdout, err) = relay.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    let report: Relay = parse_report(&stdout);
    // The datagrams still in the socket or the delay queue count and go.
    assert_eq!(
        (report.counters.received, report.counters.forwarded),
        (5, 5)
    );
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..5 {
        assert_eq!(sink.recv(&mut buf).unwrap(), 40);
    }
}

/// Spawns `nagare` with `args`, reading its first stdout line.
fn spawn_first_line(args: &[&str], report: &Path) -> (Child, String) {
    let mut c = nagare()
        .args(args)
        .arg("--report")
        .arg(report)
        .env("NAGARE_TREE_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (c, line)
}

#[test]
fn sigterm_stops_tree_join_and_source_with_their_reports() {
    let s = Scratch::new("sigterm-tree");
    let (src_report, peer_report, out) = (s.path("src.json"), s.path("peer.json"), s.path("o"));
    let frame = 128 * 64 * 3u64;
    let (mut source, line) = spawn_first_line(
        &[
            "tree",
            "source",
            "pattern:bars",
            "--listen",
            "127.0.0.1:0",
            "--key",
            KEY,
            "--size",
            "128x64",
            "--fps",
            "30",
        ],
        &src_report,
    );
    let addr = line.strip_prefix("listening ").unwrap().trim().to_owned();
    let o = out.to_str().unwrap();
    let (mut peer, placed) = spawn_first_line(
        &["tree", "join", &addr, "--listen", "127.0.0.1:0", "-o", o],
        &peer_report,
    );
    assert!(placed.starts_with("placed peer"), "{placed}");
    wait_for_file_size(&out, 3 * frame, Duration::from_secs(20));

    sigterm(&peer);
    assert_eq!(wait_bounded(&mut peer, 20, "tree join").code(), Some(0));
    let r: PeerReport = parse_report(&std::fs::read_to_string(&peer_report).unwrap());
    assert!(r.frames >= 3, "{r:?}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), r.frames * frame);

    sigterm(&source);
    assert_eq!(wait_bounded(&mut source, 20, "tree source").code(), Some(0));
    let r: SourceReport = wait_until("the source report", Duration::from_secs(5), || {
        serde_json::from_str(&std::fs::read_to_string(&src_report).ok()?).ok()
    });
    assert!(r.frames >= 3, "{r:?}");
}
