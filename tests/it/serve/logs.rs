//! What serve logs: every RTSP session from open to teardown, every API
//! stream from creation (or refusal) to its stop, in human text or JSON,
//! under -q, -v and RUST_LOG; config errors before anything listens; and
//! push streams numbered from 1 whatever RTSP sessions came first.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use nagare_api::serve::{StreamInfo, StreamKind, StreamList};

use super::harness::{Media, Rtsp, Serve, http};
use crate::common::{Running, nagare, wait_for_tcp_port};

const TCP: &str = "RTP/AVP/TCP;unicast;interleaved=0-1";

/// A push of clip.yuv to a UDP port nobody reads.
fn push_body() -> String {
    let port = crate::common::free_udp_port();
    format!(r#"{{"source": "clip.yuv", "destinations": ["127.0.0.1:{port}"], "loop": true}}"#)
}

/// The line with `needle` serve has already said.
fn said(serve: &Serve, needle: &str) -> String {
    let line = serve.lines().iter().find(|l| l.contains(needle));
    line.unwrap_or_else(|| panic!("no '{needle}' in {:#?}", serve.lines()))
        .clone()
}

#[test]
fn an_rtsp_session_is_logged_from_open_to_teardown() {
    let media = Media::new("log-rtsp");
    let mut serve = Serve::start(&media, &[]);
    let url = serve.url("clip.yuv");
    let mut c = Rtsp::connect(serve.rtsp);
    let me = c.stream.local_addr().unwrap();
    let session = c.play(&url, TCP);
    let t = c.request("TEARDOWN", &url, &[("Session", &session)]);
    assert_eq!(t.status, 200, "{t:?}");
    let open = format!("rtsp connection from {me}");
    let describe = format!("rtsp DESCRIBE of 'clip.yuv' from {me}");
    let setup = format!(
        "rtsp session {session}: SETUP of 'clip.yuv' track 0 for {me}, RTP/TCP interleaved \
         channels 0-1"
    );
    let play = format!("rtsp session {session}: PLAY of 'clip.yuv' (from the start); stream ");
    let end = format!("rtsp session {session} of 'clip.yuv' for {me} ended: TEARDOWN; sent ");
    // The connection's task and the listener's log from one thread, but
    // a test must not lean on that: any order.
    serve.wait_for_all(&[&open, &describe, &setup, &play, &end]);
    let line = said(&serve, &end);
    // How many packets left between PLAY and TEARDOWN depends on the
    // machine: the line says a count, whatever it is.
    let count = line.split_once("; sent ").map(|(_, r)| r.split(' ').next());
    assert!(
        count.flatten().is_some_and(|n| n.parse::<u64>().is_ok()),
        "no packet count in {line:?}"
    );
    // Ids of RTSP sessions' streams are theirs, apart from push streams.
    let play_line = said(&serve, &play);
    let stream: u64 = play_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(stream > 1_000_000_000, "{play_line}");
}

#[test]
fn api_streams_are_logged_and_numbered_from_one() {
    let media = Media::new("log-api");
    let mut serve = Serve::start(&media, &[]);
    // Three players first: their sessions must not take push ids.
    let url = serve.url("clip.yuv");
    let mut players: Vec<Rtsp> = (0..3).map(|_| Rtsp::connect(serve.rtsp)).collect();
    for p in &mut players {
        p.play(&url, TCP);
    }
    let body = push_body();
    let made: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&body), 201);
    assert_eq!(
        made.id, 1,
        "the first push stream is 1 however many sessions came first"
    );
    let again: StreamInfo = serve.api_json("GET", "/v1/streams/1", None, 200);
    assert_eq!((again.id, again.kind), (1, StreamKind::Push));
    let second: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&push_body()), 201);
    assert_eq!(second.id, 2);
    // One listing shows both kinds, no id twice.
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    let mut ids: Vec<u64> = list.streams.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), 5, "{ids:?}");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "an id shows twice in {list:?}");
    let rtsp = list.streams.iter().filter(|s| s.kind == StreamKind::Rtsp);
    assert!(rtsp.clone().count() == 3 && rtsp.clone().all(|s| s.id > 1_000_000_000));
    let (status, text) = serve.api(
        "POST",
        "/v1/streams",
        Some(r#"{"source": "nope", "destinations": ["127.0.0.1:5000"]}"#),
    );
    assert_eq!(status, 404, "{text}");
    let (status, text) = serve.api("DELETE", "/v1/streams/1", None);
    assert_eq!(status, 200, "{text}");
    serve.wait_for_all(&[
        "stream 1 created: 'clip.yuv' to 127.0.0.1:",
        ", for 127.0.0.1",
        "stream 2 created: 'clip.yuv'",
        "refused a push stream of 'nope' from 127.0.0.1 (404): no media 'nope'",
        "stream 1 (Push) of 'clip.yuv' stopped: DELETE from 127.0.0.1; sent ",
    ]);
    drop(players);
    // At the end the streams still running say they stop with it.
    let (_, _, err) = serve.terminate();
    assert!(
        err.contains("stream 2 (Push) of 'clip.yuv' stopped: the server stops"),
        "{err}"
    );
}

/// A TCP port free a moment ago, for a server that says nothing of the
/// one it takes (`-q`).
fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to 10 s) until the API at `addr` listens, then that it
/// answers /healthz.
fn wait_for_api(addr: SocketAddr) {
    wait_for_tcp_port(addr.port(), Duration::from_secs(10));
    let (status, text) = http(addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn quiet_keeps_warnings_and_the_report_only() {
    let media = Media::new("log-quiet");
    // A raw file whose sidecar has a typo: a warning even under -q.
    std::fs::write(media.dir.path("typo.yuv"), [0u8; 16]).unwrap();
    std::fs::write(
        media.dir.path("typo.toml"),
        "size = \"320x240\"\npix_fmt = \"uyvy4222\"\nfps = \"25\"\n",
    )
    .unwrap();
    let http_addr: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let mut cmd = nagare();
    // -q after the subcommand: a global flag works anywhere.
    cmd.args(["serve", "--media", &media.path(), "--rtsp", "127.0.0.1:0"])
        .args(["--http", &http_addr.to_string(), "-q"]);
    let mut run = Running::spawn(cmd);
    run.wait_for("warning: skipping 'typo.yuv'");
    wait_for_api(http_addr);
    crate::common::sigterm(&run.child);
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");
    assert!(!err.contains("listening on"), "-q let info through: {err}");
    // The final report is serve's output, not a log.
    assert!(err.contains("serve: stopped after"), "{err}");
}

#[test]
fn rust_log_overrides_the_flags_and_verbose_adds_time_and_fields() {
    let media = Media::new("log-env");
    // RUST_LOG=debug beats -q: the debug line of a closed connection.
    let mut serve = Serve::start_with(&media, &["-q"], |c| {
        c.env("RUST_LOG", "debug");
    });
    let c = Rtsp::connect(serve.rtsp);
    let me = c.stream.local_addr().unwrap();
    drop(c);
    serve.wait_for_log(&format!(
        "nagare serve: debug: rtsp connection from {me} closed"
    ));
    drop(serve);
    // -v: a time and the level first, the fields last.
    let serve = Serve::start(&media, &["-v"]);
    let line = said(&serve, "rtsp listening on");
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(humantime::parse_rfc3339(time).is_ok(), "{line}");
    assert!(
        rest.trim_start().starts_with("INFO nagare serve: "),
        "{line}"
    );
    assert!(
        line.ends_with(&format!("{{addr={}}}", serve.rtsp)),
        "{line}"
    );
}

#[test]
fn a_bad_rust_log_is_an_error_that_names_it() {
    let mut cmd = nagare();
    cmd.args(["serve", "--media", "/nonexistent"])
        .env("RUST_LOG", "serve=loud");
    let (status, _, err) = Running::spawn(cmd).finish();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("RUST_LOG='serve=loud' does not parse"),
        "{err}"
    );
}

#[test]
fn json_lines_parse_with_their_fields() {
    let media = Media::new("log-json");
    let mut cmd = nagare();
    // The global flag before the subcommand.
    cmd.args(["--log-format", "json", "serve", "--media", &media.path()])
        .args(["--rtsp", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
    let mut run = Running::spawn(cmd);
    let json = |line: &str| -> serde_json::Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let http_line = json(&run.wait_for("http listening on"));
    assert_eq!(http_line["level"], "INFO", "{http_line}");
    assert!(http_line["timestamp"].is_string(), "{http_line}");
    let http_addr: SocketAddr = http_line["addr"].as_str().unwrap().parse().unwrap();
    let (status, text) = http(http_addr, "POST", "/v1/streams", Some(&push_body()), None);
    assert_eq!(status, 201, "{text}");
    let created = json(&run.wait_for("stream 1 created"));
    assert_eq!(created["stream"], 1, "{created}");
    assert_eq!(created["source"], "clip.yuv", "{created}");
    assert_eq!(created["client"], "127.0.0.1", "{created}");
    assert!(
        created["destinations"]
            .as_str()
            .is_some_and(|d| d.starts_with("127.0.0.1:")),
        "{created}"
    );
    crate::common::sigterm(&run.child);
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");
    // Every log line is one JSON object (the final report is not a log).
    for line in err.lines().filter(|l| !l.starts_with("serve: ")) {
        json(line);
    }
}

#[test]
fn config_errors_come_before_anything_listens() {
    let media = Media::new("log-config");
    let config = media.dir.path("bad.toml");
    std::fs::write(
        &config,
        "[[streams]]\nsource = \"nope\"\ndestinations = [\"127.0.0.1:5000\"]\n",
    )
    .unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--config", config.to_str().unwrap()],
            "--config stream 1 ('nope')",
        ),
        (&["--max-load", "2"], "--max-load 2 is out of range"),
        (&["--media", "/nonexistent/media"], "cannot list --media"),
    ];
    for (extra, want) in cases {
        let mut cmd = nagare();
        cmd.args(["serve", "--rtsp", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
        if !extra.contains(&"--media") {
            cmd.args(["--media", &media.path()]);
        }
        cmd.args(extra);
        let (status, _, err) = Running::spawn(cmd).finish();
        assert_eq!(status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(
            !err.contains("listening"),
            "{extra:?} listened first: {err}"
        );
    }
}
