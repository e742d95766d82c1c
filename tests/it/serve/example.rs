//! The serve example of the README's guide (docs/serve.md), run verbatim
//! in a network namespace of its own, where its fixed ports (8554, 8080)
//! are free whatever else runs on the machine: a player first, then the
//! push, which gets id 1, and `curl …/v1/streams/1` finds it.

use std::path::Path;
use std::process::Command;

use super::harness::Media;
use crate::common::{Netns, Running, Scratch, require, wait_bounded};

/// The commands of the first `sh` block of `doc`, continuation lines
/// joined, comments cut.
fn commands(doc: &str) -> Vec<String> {
    let block = doc
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("an sh block");
    let mut out = Vec::new();
    let mut line = String::new();
    for l in block.lines() {
        match l.strip_suffix('\\') {
            Some(head) => line.push_str(head),
            None => {
                line.push_str(l);
                // Only `#` after a space opens a comment (URLs have none).
                let cmd = line.split(" # ").next().unwrap().trim().to_string();
                out.push(cmd);
                line.clear();
            }
        }
    }
    out
}

/// `line` run by sh inside `ns`, in `dir`, with this nagare on PATH.
fn sh(ns: &Netns, dir: &Path, line: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_nagare")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &ns.0, "sh", "-c", line])
        .current_dir(dir)
        .env("PATH", path);
    c
}

/// Runs `line` to its end (bounded) and returns its stdout.
fn run(ns: &Netns, dir: &Path, line: &str) -> String {
    let mut child = sh(ns, dir, line)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    let status = wait_bounded(&mut child, 60, line);
    assert!(status.success(), "{line}: {status}");
    out
}

#[test]
fn the_serve_example_runs_verbatim() {
    if !require("ffmpeg") || !require("curl") {
        return;
    }
    let Some(ns) = Netns::new("example") else {
        return;
    };
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/serve.md"))
        .unwrap();
    let cmds = commands(&doc);
    let find = |start: &str| -> &str {
        cmds.iter()
            .find(|c| c.starts_with(start))
            .unwrap_or_else(|| panic!("no '{start}…' in docs/serve.md: {cmds:?}"))
    };
    let media = Media::new("example").with_ts();
    let cwd = Scratch::new("example-cwd");
    std::os::unix::fs::symlink(&media.dir.0, cwd.path("media")).unwrap();
    let serve_line = find("nagare serve --media ./media");
    assert_eq!(serve_line, "nagare serve --media ./media");
    // exec: the signal at the end reaches serve, not a shell.
    let mut serve = Running::spawn(sh(&ns, &cwd.0, &format!("exec {serve_line}")));
    serve.wait_for_all(&[
        "rtsp listening on 127.0.0.1:8554",
        "http listening on 127.0.0.1:8080",
    ]);
    // A player before the push: its session must not take id 1.
    run(
        &ns,
        &cwd.0,
        "ffmpeg -loglevel error -rtsp_transport tcp -i rtsp://127.0.0.1:8554/clip.ts \
         -frames:v 5 -f null -",
    );
    let paths: serde_json::Value = serde_json::from_str(&run(
        &ns,
        &cwd.0,
        find("curl -s localhost:8080/v3/paths/list"),
    ))
    .unwrap();
    assert!(paths.to_string().contains("clip.ts"), "{paths}");
    let made: serde_json::Value = serde_json::from_str(&run(
        &ns,
        &cwd.0,
        find("curl -s -XPOST localhost:8080/v1/streams"),
    ))
    .unwrap();
    assert_eq!(made["id"], 1, "{made}");
    let one: serde_json::Value = serde_json::from_str(&run(
        &ns,
        &cwd.0,
        find("curl -s localhost:8080/v1/streams/1"),
    ))
    .unwrap();
    assert_eq!(
        (&one["id"], &one["kind"], &one["source"]),
        (&1.into(), &"push".into(), &"clip.ts".into()),
        "{one}"
    );
    let metrics = run(&ns, &cwd.0, find("curl -s localhost:8080/metrics"));
    assert!(metrics.contains("nagare_stream_packets_total"), "{metrics}");
    crate::common::sigterm(&serve.child);
    let (status, _, err) = serve.finish();
    assert!(status.success(), "{err}");
}
