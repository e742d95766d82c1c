//! RTSP credentials: FFmpeg plays with `rtsp://USER:TOKEN@…` (Digest),
//! a wrong password gets 401, and serve will not listen for RTSP off
//! loopback without a token. Loopback tests stand in for a network
//! address through `--rtsp-auth`, which asks for credentials on loopback
//! too and goes through the same check.

use std::net::TcpListener;
use std::process::{Command, Stdio};

use super::harness::{Media, Rtsp, Serve, ffmpeg_pull};
use crate::common::{Scratch, nagare, require, wait_bounded};

const TOKEN: &str = "s3cret-token-1";

/// `rtsp://user:PASSWORD@ADDR/clip.yuv?loop=1`.
fn url_with(serve: &Serve, password: &str) -> String {
    format!("rtsp://user:{password}@{}/clip.yuv?loop=1", serve.rtsp)
}

#[test]
fn ffmpeg_plays_with_the_token_as_password_and_not_without() {
    if !require("ffmpeg") {
        return;
    }
    let media = Media::new("serve-auth-ff");
    let serve = Serve::start(&media, &["--rtsp-auth", "--token", TOKEN]);
    let s = Scratch::new("serve-auth-ff-out");
    let out = s.path("tcp.yuv");
    ffmpeg_pull(&url_with(&serve, TOKEN), "tcp", &out);
    assert!(
        std::fs::read(&out).unwrap() == media.clip,
        "frames behind Digest differ from the file"
    );
    // A wrong password: FFmpeg answers the challenge, is refused, stops.
    let wrong = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-rtsp_transport", "tcp"])
        .args(["-i", &url_with(&serve, "s3cret-token-2")])
        .args(["-frames:v", "1", "-f", "null", "-"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = wait_output(wrong, 60);
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("401 Unauthorized"), "{text}");
}

/// Waits (bounded) for a child with piped stderr.
fn wait_output(mut child: std::process::Child, secs: u64) -> std::process::Output {
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let status = wait_bounded(&mut child, secs, "the child");
    std::process::Output {
        status,
        stdout: Vec::new(),
        stderr: reader.join().unwrap(),
    }
}

#[test]
fn wrong_or_missing_credentials_get_401_with_challenges() {
    let media = Media::new("serve-auth-401");
    let serve = Serve::start(&media, &["--rtsp-auth", "--token", TOKEN]);
    let url = serve.url("clip.yuv");
    let mut c = Rtsp::connect(serve.rtsp);
    // OPTIONS tells nothing and stays open.
    assert_eq!(c.request("OPTIONS", &url, &[]).status, 200);
    let r = c.request("DESCRIBE", &url, &[]);
    assert_eq!(r.status, 401, "{r:?}");
    let challenges: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("WWW-Authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(challenges.len(), 3, "{r:?}");
    assert!(
        challenges[0].contains("algorithm=SHA-256"),
        "{challenges:?}"
    );
    assert!(challenges[1].contains("algorithm=MD5"), "{challenges:?}");
    assert_eq!(challenges[2], "Basic realm=\"nagare\"");
    // Basic: "user:s3cret-token-2" is refused, "user:s3cret-token-1"
    // admitted, on the same connection.
    let r = c.request(
        "DESCRIBE",
        &url,
        &[("Authorization", "Basic dXNlcjpzM2NyZXQtdG9rZW4tMg==")],
    );
    assert_eq!(r.status, 401, "{r:?}");
    let r = c.request(
        "DESCRIBE",
        &url,
        &[("Authorization", "Basic dXNlcjpzM2NyZXQtdG9rZW4tMQ==")],
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("raw/90000"));
    assert_eq!(serve.metric("nagare_rtsp_refused_total"), 2.0);
    // Without --rtsp-auth, loopback stays open.
    let open = Serve::start(&media, &["--token", TOKEN]);
    let mut c = Rtsp::connect(open.rtsp);
    assert_eq!(
        c.request("DESCRIBE", &open.url("clip.yuv"), &[]).status,
        200
    );
}

/// Runs `nagare serve ARGS` (which must not start) and returns its
/// stderr.
fn refused_start(args: &[&str]) -> String {
    let media = Media::new("serve-auth-start");
    let child = nagare()
        .args(["serve", "--media", &media.path()])
        .args(args)
        .env_remove("NAGARE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, 30);
    assert!(!out.status.success(), "serve started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn rtsp_off_loopback_without_a_token_never_listens() {
    // The API's port is taken: had serve bound anything before checking,
    // it would fail on that port instead (and would have listened on
    // 0.0.0.0 for a moment first).
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let http = taken.local_addr().unwrap().to_string();
    let err = refused_start(&["--rtsp", "0.0.0.0:0", "--http", &http]);
    assert!(
        err.contains("RTSP is not bound to loopback") && err.contains("--token"),
        "{err}"
    );
    assert!(!err.contains("cannot listen"), "{err}");
    let err = refused_start(&["--rtsp-auth", "--rtsp", "127.0.0.1:0", "--http", &http]);
    assert!(
        err.contains("--rtsp-auth") && err.contains("--token"),
        "{err}"
    );
    assert!(!err.contains("cannot listen"), "{err}");
}
