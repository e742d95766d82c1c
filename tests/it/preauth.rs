//! Limits before authentication: a trickling or silent connection never
//! makes the probe server busy, and hundreds of them cost a tree source
//! little memory while a legitimate peer still joins.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{Running, nagare, sigterm, spawn_first_line, wait_bounded};

const KEY: &str = "00112233445566778899aabbccddeeff";

/// A field of /proc/PID/status, in its unit (kB for VmRSS).
fn status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[test]
fn a_trickling_connection_does_not_make_the_probe_server_busy() {
    let mut cmd = nagare();
    cmd.args(["probe", "server", "--listen", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    let line = server.wait_for("port ");
    let port: u16 = line.rsplit("port ").next().unwrap().trim().parse().unwrap();
    let addr = format!("127.0.0.1:{port}");

    // Half a hello header, then silence; and a length prefix far beyond
    // any hello.
    let mut trickler = TcpStream::connect(&addr).unwrap();
    trickler.write_all(b"J\0\0").unwrap();
    let mut huge = TcpStream::connect(&addr).unwrap();
    huge.write_all(b"J\x00\x10\x00\x00").unwrap();

    let out = nagare()
        .args([
            "probe",
            "client",
            &addr,
            "--rate",
            "2M",
            "--packet-size",
            "200",
        ])
        .args(["--duration", "0.3", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("busy"),
        "the trickler made the server busy: {err}"
    );
    let report: nagare_api::probe::Report =
        crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        report.receiver.received + report.receiver.lost,
        report.receiver.sent
    );

    // The oversized prefix is closed at once, the trickler at the end of
    // the 5 s handshake deadline (however it trickles).
    let closed_within = |s: &mut TcpStream, limit: u64| {
        s.set_read_timeout(Some(Duration::from_secs(limit)))
            .unwrap();
        let t = Instant::now();
        let mut b = [0u8; 64];
        let n = s.read(&mut b).unwrap_or(0);
        (n, t.elapsed())
    };
    assert_eq!(closed_within(&mut huge, 5).0, 0);
    let (n, waited) = closed_within(&mut trickler, 10);
    assert_eq!(n, 0, "the trickler got an answer");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    sigterm(&server.child);
    let (status, _, err) = server.finish();
    assert!(status.success(), "{err}");
}

#[test]
fn three_hundred_trickling_connections_keep_a_tree_source_small() {
    let (mut source, line) = spawn_first_line(&[
        "tree",
        "source",
        "pattern:bars",
        "--listen",
        "127.0.0.1:0",
        "--key",
        KEY,
        "--size",
        "64x32",
        "--fps",
        "20",
    ]);
    let addr = line.strip_prefix("listening ").unwrap().trim().to_owned();
    let rss0 = status(source.id(), "VmRSS:");

    // Half of them announce a 1 MiB message (what used to be allocated
    // per connection), half send two bytes of a header and stall.
    let mut held = Vec::new();
    for k in 0..300 {
        let mut c = TcpStream::connect(&addr).unwrap();
        let start: &[u8] = if k % 2 == 0 {
            &[0, 0x10, 0, 0, 1]
        } else {
            &[0, 0]
        };
        let _ = c.write_all(start);
        held.push(c);
    }
    let mut join = nagare();
    join.args(["tree", "join", &addr, "--frames", "3"])
        .env("NAGARE_TREE_KEY", KEY);
    let peer = Running::spawn(join);
    let (status_peer, _, err) = peer.finish();
    assert!(status_peer.success(), "the legitimate peer: {err}");
    let rss = status(source.id(), "VmRSS:");
    let threads = status(source.id(), "Threads:");
    eprintln!(
        "tree source with 300 pre-auth connections: RSS {rss0} -> {rss} kB, {threads} threads"
    );
    assert!(rss < 64 * 1024, "RSS {rss} kB");
    // No thread per waiting connection: the source runs a fixed handful
    // (main, accept, preauth; the peer's two links' readers and writers
    // and whatever is still closing), not one or two per newcomer.
    assert!(
        threads < 20,
        "{threads} threads for 300 waiting connections"
    );
    drop(held);
    sigterm(&source);
    assert_eq!(wait_bounded(&mut source, 20, "tree source").code(), Some(0));
}

#[test]
fn impair_holding_a_2_s_delay_at_a_gigabit_stays_within_its_queue_cap() {
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cmd = nagare();
    cmd.args(["impair", "--listen", "127.0.0.1:0", "--to"])
        .arg(sink.local_addr().unwrap().to_string())
        .args(["--delay", "2s", "--queue-limit", "16", "--json"]);
    let mut relay = Running::spawn(cmd);
    let line = relay.wait_for("port ");
    let port: u16 = line.rsplit("port ").next().unwrap().trim().parse().unwrap();
    let pid = relay.child.id();
    let rss0 = status(pid, "VmHWM:");

    // 120,000 datagrams of 1,400 bytes (168 MB, over a second of a
    // gigabit), as fast as this host sends them: far more than 2 s of
    // delay may hold under the 16 MiB cap.
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.connect(("127.0.0.1", port)).unwrap();
    let datagram = vec![0x55u8; 1400];
    let t = Instant::now();
    let mut sent = 0u64;
    for _ in 0..120_000 {
        if client.send(&datagram).is_ok() {
            sent += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let peak = status(pid, "VmHWM:");
    sigterm(&relay.child);
    let (status_relay, stdout, err) = relay.finish();
    assert!(status_relay.success(), "{err}");
    let r: nagare_api::impair::Report = crate::common::parse_report(&stdout);
    eprintln!(
        "impair --delay 2s --queue-limit 16: {sent} datagrams offered at {:.2} Gbit/s; received {}, \
         overflow {}; peak RSS {rss0} -> {peak} kB",
        sent as f64 * 1400.0 * 8.0 / secs / 1e9,
        r.counters.received,
        r.counters.dropped_overflow
    );
    assert!(r.counters.dropped_overflow > 0, "{r:?}");
    assert_eq!(
        r.counters.received,
        r.counters.forwarded + r.counters.dropped_overflow
    );
    // What the cap holds is at most 16 MiB of datagrams (about 12,000).
    assert!(r.counters.received - r.counters.dropped_overflow <= 16 * 1024 * 1024 / 1400 + 1);
    assert!(peak < 64 * 1024, "peak RSS {peak} kB");
}
