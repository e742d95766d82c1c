//! The HTTP API: push streams created, listed, inspected and stopped;
//! the config file; and every refusal (admission, allow-list, token).

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use nagare_api::serve::{PathList, ServeReport, StreamInfo, StreamList, StreamState};

use super::harness::{FRAMES, Media, Reply, Rtsp, Serve, http, start_with_pattern};
use crate::common::{Running, nagare, wait_until};

/// Receives datagrams until `count` arrived or `quiet` passes without one
/// (bounded by 30 s in all); returns them.
fn receive(sock: &UdpSocket, count: usize, quiet: Duration) -> Vec<Vec<u8>> {
    sock.set_read_timeout(Some(quiet)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while got.len() < count && Instant::now() < deadline {
        match sock.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(_) => break,
        }
    }
    got
}

fn push_body(source: &str, dest: &str) -> String {
    format!(r#"{{"source": "{source}", "destinations": ["{dest}"], "priority": 7}}"#)
}

#[test]
fn push_streams_are_created_listed_inspected_and_stopped() {
    let media = Media::new("serve-api");
    let serve = Serve::start(&media, &[]);
    let paths: PathList = serve.api_json("GET", "/v3/paths/list", None, 200);
    let names: Vec<&str> = paths.items.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["bars", "clip.yuv"]);
    assert_eq!(paths.item_count, 2);

    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = rx.local_addr().unwrap().to_string();
    let made: StreamInfo = serve.api_json(
        "POST",
        "/v1/streams",
        Some(&push_body("clip.yuv", &dest)),
        201,
    );
    assert_eq!(
        (made.priority, made.destinations.clone()),
        (7, vec![dest.clone()])
    );
    let got = receive(&rx, usize::MAX, Duration::from_secs(3));
    // Every datagram is RTP payload type 96; the last of each frame has
    // the marker bit.
    assert!(got.iter().all(|d| d.len() > 12 && d[1] & 0x7f == 96));
    let frames = got.iter().filter(|d| d[1] & 0x80 != 0).count();
    assert_eq!(frames, FRAMES);
    let done = wait_until("the push stream to finish", Duration::from_secs(10), || {
        let s: StreamInfo = serve.api_json("GET", &format!("/v1/streams/{}", made.id), None, 200);
        (s.state == StreamState::Finished).then_some(s)
    });
    assert_eq!(done.counters.packets, got.len() as u64);
    assert_eq!(done.counters.underruns, 0);
    let bytes: usize = got.iter().map(Vec::len).sum();
    assert_eq!(done.counters.bytes, bytes as u64);

    let live: StreamInfo =
        serve.api_json("POST", "/v1/streams", Some(&push_body("bars", &dest)), 201);
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert_eq!(list.streams.len(), 2);
    assert_eq!(serve.metric("nagare_paths_readers"), 2.0);
    assert_eq!(receive(&rx, 20, Duration::from_secs(5)).len(), 20);
    let stopped: StreamInfo =
        serve.api_json("DELETE", &format!("/v1/streams/{}", live.id), None, 200);
    assert_eq!(stopped.state, StreamState::Finished);
    assert!(stopped.counters.packets >= 20);
    let (status, _) = serve.api("DELETE", &format!("/v1/streams/{}", live.id), None);
    assert_eq!(status, 404);
    assert!(serve.metric("nagare_stream_packets_total") >= done.counters.packets as f64);
    let (status, text) = serve.api("GET", "/healthz", None);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn config_streams_start_with_the_server_and_sigterm_prints_final_counters() {
    let media = Media::new("serve-config");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = media.dir.path("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[[media]]\nname = \"tiny\"\nsource = \"pattern:bars\"\nsize = \"64x36\"\n\
             pix_fmt = \"uyvy422\"\nfps = \"25\"\n\n[[streams]]\nsource = \"tiny\"\n\
             destinations = [\"{}\"]\n",
            rx.local_addr().unwrap()
        ),
    )
    .unwrap();
    let mut cmd = nagare();
    cmd.args(["serve", "--media", &media.path(), "--json"])
        .args(["--config", config.to_str().unwrap()])
        .args(["--rtsp", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
    let mut run = Running::spawn(cmd);
    run.wait_for("http listening on ");
    assert_eq!(receive(&rx, 10, Duration::from_secs(5)).len(), 10);
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(run.child.id() as i32, libc::SIGTERM);
    }
    let (status, out, err) = run.finish();
    assert!(status.success(), "{err}");
    let report: ServeReport = serde_json::from_str(&out).unwrap();
    assert_eq!(report.streams.len(), 1);
    assert_eq!(report.streams[0].source, "tiny");
    assert!(report.streams[0].counters.packets >= 10);
}

/// An RTSP SETUP of `clip.yuv`'s track over UDP on `c`.
fn setup_clip(c: &mut Rtsp, serve: &Serve) -> Reply {
    c.request(
        "SETUP",
        &format!("{}/trackID=0", serve.url("clip.yuv")),
        &[("Transport", "RTP/AVP;unicast;client_port=40000-40001")],
    )
}

#[test]
fn admission_refuses_what_max_rate_cannot_carry() {
    let media = Media::new("serve-admit");
    // clip.yuv is 30.72 Mbit/s: one fits in 40M, two do not.
    let serve = Serve::start(&media, &["--max-rate", "40M"]);
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = rx.local_addr().unwrap().to_string();
    let body =
        r#"{"source": "clip.yuv", "destinations": ["DEST"], "loop": true}"#.replace("DEST", &dest);
    let first: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&body), 201);
    let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("--max-rate"), "{text}");
    // RTSP SETUP is refused too, with 453.
    let mut c = Rtsp::connect(serve.rtsp);
    let r = setup_clip(&mut c, &serve);
    assert_eq!(r.status, 453, "{r:?}");
    let why = String::from_utf8_lossy(&r.body);
    assert!(
        why.contains("would exceed --max-rate 40.00 Mbit/s"),
        "{why}"
    );
    // Stopping the first frees its rate.
    serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{}", first.id), None, 200);
    let again: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&body), 201);
    assert_ne!(again.id, first.id);
}

/// A server that has read nothing yet judges its read-ahead thread by
/// this machine's copy rate, not by a guess of 1 GB/s: a 4K 48 fps
/// 10-bit pattern (995 MB/s to render and read) is admitted at once. At
/// 1 ms a MiB it would keep the thread 95% busy, over `--max-load` 0.9,
/// and since a refused stream is never read, nothing would ever have
/// measured better.
#[test]
fn a_fresh_server_admits_a_4k_stream_by_its_copy_rate() {
    let media = Media::new("serve-admit-4k");
    let serve = start_with_pattern(&media, ("uhd", "3840x2160", "uyvp", "48"), &[]);
    // Never read: the kernel drops what does not fit.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let body = format!(
        r#"{{"source": "uhd", "destinations": ["{}"], "pacing": {{"packet_size": 8800}}}}"#,
        sink.local_addr().unwrap()
    );
    let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
    assert_eq!(status, 201, "{text}");
    let made: StreamInfo = serde_json::from_str(&text).unwrap();
    serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{}", made.id), None, 200);
}

#[test]
fn an_rtsp_setup_over_max_rate_is_453_with_the_reason() {
    let media = Media::new("serve-admit-rtsp");
    // clip.yuv is 30.72 Mbit/s, more than the whole --max-rate.
    let serve = Serve::start(&media, &["--max-rate", "10M"]);
    let mut c = Rtsp::connect(serve.rtsp);
    let r = setup_clip(&mut c, &serve);
    assert_eq!(r.status, 453, "{r:?}");
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    // The reason names the stream's rate, what is in use and the limit.
    let why = String::from_utf8_lossy(&r.body);
    let want = "a stream of 30.72 Mbit/s on top of the 0.00 bit/s in use would exceed \
                --max-rate 10.00 Mbit/s\n";
    assert_eq!(why, want);
    // The connection goes on: nothing was set up.
    let r = c.request("OPTIONS", &serve.url("clip.yuv"), &[]);
    assert_eq!(r.status, 200, "{r:?}");
}

/// Pushes of `bars` posted one after another, bounded by this many and
/// by [`FLOOD_TIME`].
const FLOOD_MAX: usize = 2_000;
/// Longest the flood runs.
const FLOOD_TIME: Duration = Duration::from_secs(60);

#[test]
fn a_flood_of_pushes_is_refused_before_any_admitted_stream_runs_late() {
    let media = Media::new("serve-flood");
    let serve = Serve::start(&media, &[]);
    // Never read: the kernel drops what does not fit.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let body = push_body("bars", &sink.local_addr().unwrap().to_string());
    // The requests come far faster than a one-second load window: only a
    // prediction from what each stream will send can refuse in time.
    let deadline = Instant::now() + FLOOD_TIME;
    let mut admitted = 0;
    let (status, text) = loop {
        let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
        if status != 201 {
            break (status, text);
        }
        admitted += 1;
        assert!(
            admitted < FLOOD_MAX && Instant::now() < deadline,
            "{admitted} streams of bars admitted, none refused"
        );
    };
    // Read at once: the schedule must not have broken before the refusal.
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    let late: Vec<_> = list
        .streams
        .iter()
        .filter(|s| s.counters.underruns > 0)
        .map(|s| (s.id, s.counters.underruns, s.counters.max_late_us))
        .collect();
    assert!(
        late.is_empty(),
        "refused after {admitted} ({text}), but {} admitted streams had underruns (id, \
         underruns, max late µs): {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );
    assert!(status == 503 || status == 429, "{status} {text}");
    assert!(
        text.contains("--max-load") || text.contains("--max-memory"),
        "after {admitted}: {text}"
    );
    assert_eq!(list.streams.len(), admitted);
    // 2 pacing threads at 90% and at least 1 µs a datagram hold at most
    // 900 streams of 2,000 datagrams a second.
    assert!((1..=900).contains(&admitted), "{admitted}");
    let predicted = serve.metric("nagare_pacer_predicted_load");
    assert!(predicted > 0.0, "{predicted}");
    // What was admitted holds its schedule while it runs: once every stream
    // has sent two seconds of its 2,000 datagrams a second (its first frame
    // long past), still no underrun. An underrun ends the wait at once.
    let list = wait_until(
        "every admitted stream to send two seconds of datagrams",
        Duration::from_secs(30),
        || {
            let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
            let c = list.streams.iter().map(|s| &s.counters);
            let settled =
                c.clone().all(|c| c.packets >= 4_000) || c.clone().any(|c| c.underruns > 0);
            settled.then_some(list)
        },
    );
    let underruns: u64 = list.streams.iter().map(|s| s.counters.underruns).sum();
    let late: u64 = list.streams.iter().map(|s| s.counters.late).sum();
    let max_late = list.streams.iter().map(|s| s.counters.max_late_us).max();
    assert_eq!(
        underruns, 0,
        "{admitted} admitted streams ran late ({late} datagrams late, at most {max_late:?} µs)"
    );
}

#[test]
fn ring_memory_is_a_budget() {
    let media = Media::new("serve-memory");
    // A bars ring is 4 frames of 320x180 UYVY, 450 KiB: two fit in 1 MiB.
    let serve = Serve::start(&media, &["--max-memory", "1M"]);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let body = push_body("bars", &sink.local_addr().unwrap().to_string());
    for _ in 0..2 {
        serve.api_json::<StreamInfo>("POST", "/v1/streams", Some(&body), 201);
    }
    let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("ring holds 450.0 KiB on top of the 900.0 KiB")
            && text.contains("--max-memory 1.0 MiB"),
        "{text}"
    );
    assert_eq!(serve.metric("nagare_admitted_ring_bytes"), 921_600.0);
}

#[test]
fn an_rtsp_restart_keeps_its_reservation_and_never_runs_without_one() {
    let media = Media::new("serve-replay");
    // clip.yuv is 30.72 Mbit/s: one stream fits in 40M, two do not.
    let serve = Serve::start(&media, &["--max-rate", "40M"]);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sink.local_addr().unwrap().port();
    let transport = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    let body = push_body("clip.yuv", &format!("127.0.0.1:{port}"));
    let mut c = Rtsp::connect(serve.rtsp);
    let url = serve.url("clip.yuv");
    let session = c.play(&url, &transport);
    let restart = [("Session", session.as_str()), ("Range", "npt=0-")];
    // The budget is the session's until its stream ends by itself (10
    // frames at 25 fps).
    let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
    assert_eq!(status, 503, "{text}");
    let ended = wait_until("the RTSP stream to finish", Duration::from_secs(10), || {
        let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
        (list.streams.len() == 1 && list.streams[0].state == StreamState::Finished)
            .then_some(list.streams[0].id)
    });
    // Its rate is free: a push takes it, and PLAY from the start again
    // is refused with 453 instead of running with no reservation.
    let pushed: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&body), 201);
    let again = c.request("PLAY", &url, &restart);
    assert_eq!(again.status, 453, "{again:?}");
    serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{}", pushed.id), None, 200);
    // With the budget back, a restart is admitted; a second restart
    // carries the running stream's reservation over, so nothing can take
    // the budget in between: the push is still refused.
    assert_eq!(c.request("PLAY", &url, &restart).status, 200);
    assert_eq!(c.request("PLAY", &url, &restart).status, 200);
    let (status, text) = serve.api("POST", "/v1/streams", Some(&body));
    assert_eq!(status, 503, "{text}");
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    let live: Vec<_> = list
        .streams
        .iter()
        .filter(|s| s.id != ended && s.state == StreamState::Playing)
        .collect();
    assert!(live.len() <= 1, "{list:?}");
    assert_eq!(serve.metric("nagare_admitted_rate_bps"), 30_720_000.0);
}

#[test]
fn destinations_outside_the_allow_list_are_refused() {
    let media = Media::new("serve-allow");
    let serve = Serve::start(&media, &[]);
    // The client is 127.0.0.1: 127.0.0.2 is someone else.
    let (status, text) = serve.api(
        "POST",
        "/v1/streams",
        Some(&push_body("bars", "127.0.0.2:5000")),
    );
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("--allow"), "{text}");
    let mut c = Rtsp::connect(serve.rtsp);
    let url = serve.url("bars");
    let r = c.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[(
            "Transport",
            "RTP/AVP;unicast;destination=127.0.0.2;client_port=40000-40001",
        )],
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        serve
            .api("GET", "/v1/streams", None)
            .1
            .matches("\"id\"")
            .count(),
        0
    );
    drop(serve);

    // With --allow, the same requests pass.
    let serve = Serve::start(&media, &["--allow", "127.0.0.0/8"]);
    let made: StreamInfo = serve.api_json(
        "POST",
        "/v1/streams",
        Some(&push_body("bars", "127.0.0.2:5000")),
        201,
    );
    serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{}", made.id), None, 200);
    let mut c = Rtsp::connect(serve.rtsp);
    let r = c.request(
        "SETUP",
        &format!("{}/trackID=0", serve.url("bars")),
        &[(
            "Transport",
            "RTP/AVP;unicast;destination=127.0.0.2;client_port=40000-40001",
        )],
    );
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn the_api_wants_the_token_when_one_is_set() {
    let media = Media::new("serve-token");
    let serve = Serve::start(&media, &["--token", "correct-horse-battery"]);
    for token in [None, Some("wrong-token-here")] {
        let (status, text) = http(serve.http, "GET", "/v1/streams", None, token);
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("token"), "{text}");
        let (status, _) = http(
            serve.http,
            "POST",
            "/v1/streams",
            Some(&push_body("bars", "127.0.0.1:5000")),
            token,
        );
        assert_eq!(status, 401);
    }
    // /healthz answers without it; the rest with it.
    assert_eq!(http(serve.http, "GET", "/healthz", None, None).0, 200);
    assert_eq!(serve.api("GET", "/v1/streams", None).0, 200);
    assert_eq!(serve.metric("nagare_api_refused_total"), 4.0);
}

#[test]
fn a_non_loopback_api_without_a_token_does_not_start() {
    let media = Media::new("serve-notoken");
    let out = nagare()
        .args(["serve", "--media", &media.path()])
        .args(["--rtsp", "127.0.0.1:0", "--http", "0.0.0.0:0"])
        .env_remove("NAGARE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--token"), "{err}");
    // MediaMTX's ':PORT' is every interface, under the same rule.
    let out = nagare()
        .args(["serve", "--media", &media.path()])
        .args(["--rtsp", "127.0.0.1:0", "--http", ":0"])
        .env_remove("NAGARE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--token"), "{err}");
}

/// The whole answer (head and body) to a bodiless request.
fn raw_answer(to: std::net::SocketAddr, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.to_ascii_lowercase()
}

#[test]
fn the_api_lists_itself_and_answers_mediamtx_path_queries() {
    let media = Media::new("serve-index");
    let serve = Serve::start(&media, &[]);
    let (status, text) = serve.api("GET", "/", None);
    assert_eq!(status, 200, "{text}");
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    let paths: Vec<&str> = index["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for want in [
        "/v1/streams",
        "/v3/paths/get/{name}",
        "/metrics",
        "/healthz",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    let one: nagare_api::serve::PathItem = serve.api_json("GET", "/v3/paths/get/bars", None, 200);
    assert_eq!((one.name.as_str(), one.readers.len()), ("bars", 0));
    let (status, text) = serve.api("GET", "/v3/paths/get/nope", None);
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("no path 'nope'"), "{text}");
    // A method a route does not take is 405 with the ones it does.
    for (method, path, allow) in [
        ("DELETE", "/v1/streams", "allow: get, post"),
        ("PUT", "/v1/streams/1", "allow: get, delete"),
        ("POST", "/metrics", "allow: get"),
        ("POST", "/healthz", "allow: get"),
    ] {
        let answer = raw_answer(serve.http, method, path);
        assert!(
            answer.starts_with("http/1.1 405") && answer.contains(allow),
            "{method} {path}: {answer}"
        );
    }
}

#[test]
fn bad_api_requests_get_4xx_with_a_reason() {
    let media = Media::new("serve-badapi");
    let serve = Serve::start(&media, &[]);
    for (method, path, body, want) in [
        ("POST", "/v1/streams", Some("{not json"), 400),
        ("POST", "/v1/streams", Some(r#"{"source": "bars"}"#), 400),
        (
            "POST",
            "/v1/streams",
            Some(&push_body("nope.ts", "127.0.0.1:5000")[..]),
            404,
        ),
        (
            "POST",
            "/v1/streams",
            Some(&push_body("bars", "localhost:5000")[..]),
            400,
        ),
        (
            "POST",
            "/v1/streams",
            Some(&push_body("bars", "127.0.0.1:0")[..]),
            400,
        ),
        ("GET", "/v1/streams/abc", None, 404),
        ("GET", "/v1/streams/99", None, 404),
        ("PUT", "/v1/streams", None, 405),
        ("GET", "/nope", None, 404),
    ] {
        let (status, text) = serve.api(method, path, body);
        assert_eq!(status, want, "{method} {path} {body:?}: {text}");
        let e: nagare_api::serve::ApiError = serde_json::from_str(&text).unwrap();
        assert!(!e.error.is_empty());
    }
}

/// A POST whose answer was lost can be sent again: the same key and the
/// same request give the stream the first made (200, same id); the same
/// key with another request is refused (409); once the stream is gone
/// the key makes a new one. A stream that fails says why.
#[test]
fn an_idempotency_key_replays_its_request_and_refuses_another() {
    let media = Media::new("serve-key");
    let serve = Serve::start(&media, &[]);
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = rx.local_addr().unwrap().to_string();
    let keyed = |priority: u8, key: &str| {
        format!(
            r#"{{"source": "bars", "destinations": ["{dest}"], "priority": {priority},
                "idempotency_key": "{key}"}}"#
        )
    };
    // Eight POSTs of one key at once (the API answers on a pool of
    // threads): one makes the stream, the others get it back.
    let racing = "wall/race@1";
    let (body, to, token) = (keyed(3, racing), serve.http, serve.token.clone());
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| http(to, "POST", "/v1/streams", Some(&body), token.as_deref())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made_once = answers.iter().filter(|(st, _)| *st == 201).count();
    assert_eq!(made_once, 1, "{answers:?}");
    let ids: std::collections::BTreeSet<u64> = answers
        .iter()
        .map(|(_, text)| serde_json::from_str::<StreamInfo>(text).unwrap().id)
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let raced = *ids.first().unwrap();
    let _: StreamInfo = serve.api_json("DELETE", &format!("/v1/streams/{raced}"), None, 200);
    let key = "wall/stripe 0@1234";
    let made: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&keyed(7, key)), 201);
    assert_eq!(made.idempotency_key.as_deref(), Some(key));
    let again: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&keyed(7, key)), 200);
    assert_eq!(again.id, made.id);
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert_eq!(list.streams.len(), 1, "{list:#?}");
    let (status, text) = serve.api("POST", "/v1/streams", Some(&keyed(8, key)));
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains(&format!(
            "idempotency_key 'wall/stripe 0@1234' already names stream {}, made by a \
             different request",
            made.id
        )),
        "{text}"
    );
    let (status, text) = serve.api("POST", "/v1/streams", Some(&keyed(7, "")));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("idempotency_key of 0 bytes"), "{text}");
    let _: StreamInfo = serve.api_json("DELETE", &format!("/v1/streams/{}", made.id), None, 200);
    let anew: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&keyed(7, key)), 201);
    assert_ne!(anew.id, made.id);

    // A raw stream whose file vanished after the catalog was read is
    // refused with 500 and why (naming the catalog entry, never the
    // server's path), never 201, and leaves no stream; so is one cut short.
    let clip = media.dir.path("clip.yuv");
    let whole = std::fs::metadata(&clip).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&clip)
        .unwrap()
        .set_len(whole - 1)
        .unwrap();
    let (status, text) = serve.api("POST", "/v1/streams", Some(&push_body("clip.yuv", &dest)));
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains(&format!(
            "the stream cannot start: 'clip.yuv' holds {} bytes where serve listed {whole}",
            whole - 1
        )),
        "{text}"
    );
    std::fs::remove_file(&clip).unwrap();
    let before: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    let (status, text) = serve.api("POST", "/v1/streams", Some(&push_body("clip.yuv", &dest)));
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains("the stream cannot start: opening 'clip.yuv': No such file"),
        "{text}"
    );
    assert!(!text.contains(&media.path()), "{text}");
    let after: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert_eq!(after.streams.len(), before.streams.len(), "{after:?}");
}
