//! Safe defaults: multicast is never sent out of the default route by
//! accident, `tree source` listens on loopback unless told otherwise, and
//! daemons say what they bind to.

use nagare_api::video::SendReport;

use crate::common::{
    Running, free_udp_port, nagare, parse_report, sigterm, spawn_first_line, wait_bounded,
};

const KEY: &str = "00112233445566778899aabbccddeeff";

fn send(to: &str, extra: &[&str]) -> std::process::Output {
    nagare()
        .args(["send", "pattern:bars", "--to", to, "--size", "64x8"])
        .args(["--pix-fmt", "uyvy422", "--fps", "100", "--frames", "2"])
        .arg("--json")
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn multicast_send_needs_an_interface_or_ttl_0() {
    let group = format!("239.255.12.4:{}", free_udp_port());
    let out = send(&group, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sending to multicast group 239.255.12.4 needs --interface NAME|ADDRESS")
            && err.contains("default route")
            && err.contains("--ttl 0 to keep the stream on this host"),
        "{err}"
    );
    // --ttl 0 keeps it on this host: allowed.
    let out = send(&group, &["--ttl", "0"]);
    assert!(out.status.success(), "{out:?}");
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(sent.frames_sent, 2);
}

#[test]
fn tree_listens_on_loopback_by_default_and_says_where() {
    let (mut source, line) = spawn_first_line(&[
        "tree",
        "source",
        "pattern:bars",
        "--key",
        KEY,
        "--size",
        "64x32",
        "--fps",
        "10",
    ]);
    if !line.starts_with("listening") {
        let _ = source.kill();
        panic!("source said {line:?} (is port 7450 taken?)");
    }
    assert_eq!(line.trim(), "listening 127.0.0.1:7450");

    let mut join = nagare();
    join.args(["tree", "join", "127.0.0.1:7450", "--frames", "2"])
        .env("NAGARE_TREE_KEY", KEY);
    let mut peer = Running::spawn(join);
    let said = peer.wait_for("relay listener for children on ");
    assert!(
        said.contains("relay listener for children on 127.0.0.1:"),
        "{said}"
    );
    let (status, _, err) = peer.finish();
    assert!(status.success(), "{err}");
    sigterm(&source);
    assert_eq!(wait_bounded(&mut source, 20, "tree source").code(), Some(0));
}

#[test]
fn join_takes_a_lag_limit_and_refuses_a_useless_one() {
    let out = nagare()
        .args([
            "tree",
            "join",
            "127.0.0.1:9",
            "--key",
            KEY,
            "--lag-limit",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--lag-limit 10 KiB cannot hold a frame of screen updates; give at least 64"),
        "{err}"
    );
}
