//! `nagare loadtest` against `nagare serve`'s push API on loopback: raw
//! video streams are measured against their own schedule, and a ramp
//! that broke nothing says it found no limit.

use nagare_api::serve::{LoadReport, StreamInfo};

use std::time::Duration;

use super::harness::{Media, Serve, http_with_head, start_with_tiny, start_with_tiny_and};
use crate::common::{Scratch, nagare, wait_until};

/// Runs `nagare loadtest ARGS --json`, which must succeed; its report and
/// stderr.
fn loadtest(args: &[&str]) -> (LoadReport, String) {
    let out = nagare()
        .arg("loadtest")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let r = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (r, err)
}

#[test]
fn a_ramp_of_raw_video_reports_its_schedule_and_an_honest_ceiling() {
    let media = Media::new("serve-loadtest");
    let serve = start_with_tiny(&media);
    let dir = Scratch::new("loadtest-plot");
    let plot = dir.path("ramp.png");
    let (r, err) = loadtest(&[
        &format!("http://{}", serve.http),
        "--source",
        "tiny",
        "--ramp",
        "1:2:1",
        "--duration",
        "2",
        "--warmup",
        "1",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(!r.steps.is_empty(), "{err}");
    for s in &r.steps {
        assert_eq!(s.streams_received, s.streams, "{err}");
        assert!(s.frames > 0 && s.packets >= 4 * s.frames, "{s:?}");
    }
    // The ceiling is said as what the steps show: a ramp whose every
    // step stayed within 1 % found no limit, and its last count is a floor.
    let over = r.steps.iter().position(|s| s.frame_drop_ratio > 0.01);
    match over {
        None => {
            assert!(!r.limit_found);
            assert_eq!(r.ceiling, Some(2));
            assert_eq!(r.ceiling_text, "≥ 2 (no limit found within the ramp)");
            assert!(
                err.contains(
                    "loadtest: ceiling (frame drop <= 1%) ≥ 2 (no limit found within the ramp); "
                ),
                "{err}"
            );
        }
        Some(k) => {
            assert!(r.limit_found);
            assert_eq!(r.ceiling, k.checked_sub(1).map(|k| r.steps[k].streams));
        }
    }
    // The plot draws the 1 % ceiling and the 250 µs clean line (the
    // limits' orange) in its first two panels, and a third for CPU.
    let img = image::open(&plot).unwrap().to_rgb8();
    // Under a title block of one or two subtitle lines.
    let top = img.height() - 3 * 300;
    assert!(top == 80 || top == 106, "{}", img.height());
    let orange_in = |y0: u32| {
        (0..img.width())
            .flat_map(|x| (y0..y0 + 300).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == [255, 127, 14])
            .count()
    };
    assert!(orange_in(top) > 200, "no 1 % line");
    assert!(orange_in(top + 300) > 200, "no clean line");
    assert_eq!(orange_in(top + 600), 0);
}

/// RTSP clients (proto's client machine) keep their sessions alive past
/// the server's session timeout, and tear them down at the end of a step.
#[test]
fn rtsp_clients_keep_their_sessions_alive_and_tear_them_down() {
    let media = Media::new("serve-loadtest-rtsp");
    // Sessions without a keep-alive are reaped after 2 s; each step lasts
    // 1 + 4 s, so only a client that keeps alive stays for the window.
    let mut serve = start_with_tiny_and(&media, &["--session-timeout", "2"]);
    let (r, err) = loadtest(&[
        &serve.url("tiny"),
        "--ramp",
        "2:2:1",
        "--duration",
        "4",
        "--warmup",
        "1",
    ]);
    assert_eq!(r.steps.len(), 1, "{err}");
    assert_eq!(r.steps[0].streams_received, 2, "{:?}", r.steps[0]);
    // Serve logs a session's end after it answers TEARDOWN.
    let ended = |serve: &mut Serve| {
        serve.has_said(" ended: ");
        let lines: Vec<String> = serve
            .lines()
            .iter()
            .filter(|l| l.contains(" of 'tiny' for ") && l.contains(" ended: "))
            .cloned()
            .collect();
        (lines.len() == 2).then_some(lines)
    };
    let lines = wait_until(
        "both sessions' ends logged",
        Duration::from_secs(10),
        || ended(&mut serve),
    );
    assert!(
        lines.iter().all(|l| l.contains(" ended: TEARDOWN; sent ")),
        "a session was not torn down by its client: {lines:#?}"
    );
}

#[test]
fn a_push_ramp_waits_out_retry_after_and_ends_where_admission_refuses() {
    // With --max-load 0.05, a quarter of it (1.25 %) may go unmeasured:
    // a burst of tiny streams passes that, and serve answers 503 with
    // Retry-After, since the same request fits once they are measured.
    let media = Media::new("serve-loadtest-retry");
    let mut serve = start_with_tiny_and(&media, &["--max-load", "0.05"]);
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let body = format!(
        r#"{{"source": "tiny", "destinations": ["{}"], "loop": true}}"#,
        sink.local_addr().unwrap()
    );
    // Tiny streams pushed until serve refuses: they fill the unmeasured
    // share, so the next request is answered 503 until they are measured.
    let fill = |serve: &Serve| {
        let mut burst = Vec::new();
        let (status, head, text) = loop {
            let (status, head, text) =
                http_with_head(serve.http, "POST", "/v1/streams", Some(&body), None);
            if status != 201 {
                break (status, head, text);
            }
            let info: StreamInfo = serde_json::from_str(&text).unwrap();
            burst.push(info.id);
            assert!(burst.len() < 500, "never refused");
        };
        assert_eq!(status, 503, "{text}");
        assert!(text.contains("are not yet measured"), "{text}");
        assert!(head.lines().any(|l| l == "retry-after: 1"), "{head}");
        burst
    };
    let stop = |serve: &Serve, burst: &[u64]| {
        for id in burst {
            serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{id}"), None, 200);
        }
    };
    let burst = fill(&serve);
    stop(&serve, &burst);
    // loadtest starts streams through the API and as RTSP clients (whose
    // SETUP is answered 503 with Retry-After) while such a burst is still
    // unmeasured: it waits out Retry-After and asks again, so every stream
    // starts. (Started after the burst was measured, a fast host admitted
    // every RTSP client at once, and the test could not see a wait.)
    let n = 5.to_string();
    let api = format!("http://{}", serve.http);
    let rtsp = format!("{}?loop=1", serve.url("tiny"));
    for target in [&[api.as_str(), "--source", "tiny"][..], &[rtsp.as_str()]] {
        let waited = |serve: &Serve| {
            let lines = serve.lines().iter();
            lines.filter(|l| l.contains("are not yet measured")).count()
        };
        let before = waited(&serve);
        let burst = fill(&serve);
        // The burst's own refusal is logged first.
        wait_until(
            "serve logs the burst's refusal",
            Duration::from_secs(10),
            || {
                serve.has_said("");
                (waited(&serve) > before).then_some(())
            },
        );
        let before = waited(&serve);
        let mut args = target.to_vec();
        args.extend(["--streams", &n, "--duration", "1", "--warmup", "0.5"]);
        let (r, err) = loadtest(&args);
        stop(&serve, &burst);
        assert_eq!(r.refused, None, "{target:?}: {err}");
        assert_eq!(r.steps.len(), 1, "{target:?}: {err}");
        assert_eq!(r.steps[0].streams_received, 5, "{target:?}: {err}");
        wait_until(
            &format!("serve logs a refusal loadtest waited out ({target:?}; loadtest said: {err})"),
            Duration::from_secs(10),
            || {
                serve.has_said("");
                (waited(&serve) > before).then_some(())
            },
        );
    }

    // A limit that time does not lift ends the ramp: clip.yuv is 30.72
    // Mbit/s, so one fits in --max-rate 40M and the second is refused.
    let serve = Serve::start(&media, &["--max-rate", "40M"]);
    let ramp = |target: &[&str]| {
        let mut args = target.to_vec();
        args.extend(["--ramp", "1:3:1", "--duration", "1", "--warmup", "0.5"]);
        loadtest(&args)
    };
    let refused_second = |refused: Option<String>| {
        let refused = refused.unwrap_or_default();
        assert!(
            refused.starts_with("stream 2 of the 2-stream step: ")
                && refused.contains("--max-rate"),
            "{refused}"
        );
    };
    let api = format!("http://{}", serve.http);
    let (r, err) = ramp(&[&api, "--source", "clip.yuv"]);
    assert_eq!(r.steps.len(), 1, "{err}");
    assert_eq!(r.steps[0].streams_received, 1, "{err}");
    refused_second(r.refused);
    assert!(
        err.contains("loadtest: the server's admission refused stream 2 of the 2-stream step"),
        "{err}"
    );
    // Over RTSP the refusal is a 453 whose body is the same reason.
    let (r, err) = ramp(&[&format!("{}?loop=1", serve.url("clip.yuv"))]);
    assert_eq!(r.steps.len(), 1, "{err}");
    refused_second(r.refused);
}
