//! impair's scripts against a real `nagare send`: `--drop-nth` counts
//! from the stream's first packet, whatever sequence number the sender
//! starts at, so the example in docs/impair.md works as written.

use std::collections::BTreeSet;

use nagare_api::impair::Report as Relay;
use nagare_api::video::{RecvReport, SendReport};

use crate::common::{Running, nagare, parse_report, sigterm};

#[test]
fn drop_nth_counts_from_the_first_packet_of_a_nagare_send_stream() {
    let fmt = ["--size", "320x36", "--pix-fmt", "uyvy422", "--fps", "50"];
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0"])
        .args(fmt)
        .args(["--frames", "10", "--timeout", "3", "--json"]);
    let mut r = Running::spawn(recv);
    let recv_addr = r.listening().to_string();
    let mut relay = nagare();
    relay
        .args(["impair", "--listen", "127.0.0.1:0", "--to", &recv_addr])
        .args(["--drop-nth", "5,10-14", "--reorder-nth", "20"])
        .args(["--duplicate-nth", "30", "--json"]);
    let mut relay = Running::spawn(relay);
    let line = relay.wait_for("port ");
    let port = line.rsplit("port ").next().unwrap().trim();
    let out = nagare()
        .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
        .args(fmt)
        .args(["--frames", "10", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("first sequence number"), "{err}");
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));

    let (status, stdout, err) = r.finish();
    let got: RecvReport = parse_report(&stdout);
    sigterm(&relay.child);
    let (_, relay_out, _) = relay.finish();
    let counts: Relay = parse_report(&relay_out);
    assert_eq!(counts.counters.dropped_scripted, 6);
    assert_eq!(
        (counts.counters.reordered, counts.counters.duplicated),
        (1, 1)
    );

    assert_eq!(status.code(), Some(1), "frames are incomplete: {err}");
    assert_eq!(got.packets_received, sent.packets_sent - 6);
    assert_eq!(
        (
            got.packets_lost,
            got.packets_reordered,
            got.packets_duplicate
        ),
        (6, 1, 1)
    );
    let ppf = sent.packets_per_frame;
    let hit: BTreeSet<u64> = [5u64, 10, 11, 12, 13, 14].iter().map(|i| i / ppf).collect();
    assert_eq!(got.frames_incomplete.count, hit.len() as u64);
    assert_eq!(got.frames_complete, 10 - hit.len() as u64);
}
