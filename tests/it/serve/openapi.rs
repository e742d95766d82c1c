//! The HTTP API against its own description: schemathesis generates
//! requests from docs/openapi.yaml (examples, boundary values, random
//! bodies, and POST → GET → DELETE chains through the document's links)
//! and checks every answer: no 5xx, every status documented, every body
//! valid against its schema, refused requests refused with 4xx. Once with
//! a token, once on loopback without one (the document's loopback rule).

use std::process::Command;

use super::harness::{Media, Serve, http};
use crate::common::{require, wait_bounded};

/// A fixed seed: the same requests every run, so a failure replays.
const SEED: &str = "20261127";

/// schemathesis against `serve`, sending `token` if given; returns its
/// exit status and report.
fn schemathesis(serve: &Serve, dir: &str, token: Option<&str>) -> (bool, String) {
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml");
    let mut cmd = Command::new("schemathesis");
    cmd.args(["run", spec, "--url", &format!("http://{}", serve.http)])
        .args(["--checks", "all"])
        .args(["--max-examples", "20", "--seed", SEED, "--workers", "1"])
        .arg("--generation-deterministic")
        .args(["--request-timeout", "10"])
        // Hypothesis keeps its example database in the working directory.
        .current_dir(dir)
        .env("NO_COLOR", "1");
    // A request the schema allows may still name an interface or an
    // address that does not exist here; serve refuses those with 400 and
    // the reason, which positive_data_acceptance would count as a failure.
    // Without a token on loopback, serve asks for none, so ignored_auth
    // (calls without credentials must get 401) does not apply.
    let skip = match token {
        Some(t) => {
            cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
            "positive_data_acceptance"
        }
        None => "positive_data_acceptance,ignored_auth",
    };
    cmd.args(["--exclude-checks", skip]);
    cmd.stdout(std::process::Stdio::piped())
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
    (status.success(), format!("{out}\n{err}"))
}

#[test]
fn the_api_answers_as_docs_openapi_yaml_says_with_and_without_a_token() {
    if !require("schemathesis") {
        return;
    }
    let media = Media::new("serve-openapi");
    let token = "openapi-test-token";
    for t in [Some(token), None] {
        let extra: &[&str] = match t {
            Some(t) => &["--token", t],
            None => &[],
        };
        let serve = Serve::start(&media, extra);
        let (ok, report) = schemathesis(&serve, &media.path(), t);
        assert!(ok, "schemathesis (token {t:?}) found failures:\n{report}");
        // It reached the core: a POST made a stream, and the GET and
        // DELETE its links lead to were run on it.
        let covered = report
            .lines()
            .find_map(|l| l.trim().strip_prefix("API Links:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u32>().ok());
        assert!(
            covered.is_some_and(|n| n >= 2),
            "no links followed:\n{report}"
        );
        // And the server is still whole.
        let (status, text) = http(serve.http, "GET", "/healthz", None, None);
        assert_eq!(status, 200, "{text}");
    }
}
