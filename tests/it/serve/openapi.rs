//! The HTTP API against its own description: schemathesis generates
//! requests from docs/openapi.yaml (examples, boundary values, random
//! bodies, and POST → GET → DELETE chains through the document's links)
//! and checks every answer: no 5xx, every status documented, every body
//! valid against its schema, refused requests refused with 4xx.

use std::process::Command;

use super::harness::{Media, Serve, http};
use crate::common::{require, wait_bounded};

/// A fixed seed: the same requests every run, so a failure replays.
const SEED: &str = "20261127";

#[test]
fn the_api_answers_as_docs_openapi_yaml_says() {
    if !require("schemathesis") {
        return;
    }
    let media = Media::new("serve-openapi");
    let token = "openapi-test-token";
    let serve = Serve::start(&media, &["--token", token]);
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml");
    let mut cmd = Command::new("schemathesis");
    cmd.args(["run", spec, "--url", &format!("http://{}", serve.http)])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--checks", "all"])
        // A request the schema allows may still name an interface or an
        // address that does not exist here; serve refuses those with 400
        // and the reason, which this check would count as a failure.
        .args(["--exclude-checks", "positive_data_acceptance"])
        .args(["--max-examples", "25", "--seed", SEED, "--workers", "1"])
        .arg("--generation-deterministic")
        .args(["--request-timeout", "10"])
        // Hypothesis keeps its example database in the working directory.
        .current_dir(media.path())
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("running schemathesis");
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = wait_bounded(&mut child, 300, "schemathesis");
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "schemathesis found failures:\n{out}\n{err}");
    // It reached the core: a POST made a stream, and the GET and DELETE
    // its links lead to were run on it.
    let covered = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("API Links:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u32>().ok());
    assert!(covered.is_some_and(|n| n >= 2), "no links followed:\n{out}");
    // And the server is still whole.
    let (status, text) = http(serve.http, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{text}");
}
