//! `nagare completions`, `nagare man` and `--version`.

use std::process::{Command, Stdio};

use crate::common::{have, nagare};

fn stdout(args: &[&str]) -> String {
    let out = nagare().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_know_every_subcommand_and_bash_parses_them() {
    let bash = stdout(&["completions", "bash"]);
    for word in ["probe", "recv", "send", "--parallel", "--html"] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    // The script is valid bash.
    let mut check = Command::new("bash")
        .args(["-n", "/dev/stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        check
            .stdin
            .take()
            .unwrap()
            .write_all(bash.as_bytes())
            .unwrap();
    }
    assert!(
        check.wait().unwrap().success(),
        "bash -n rejects the script"
    );
    assert!(stdout(&["completions", "zsh"]).contains("#compdef nagare"));
    assert!(stdout(&["completions", "fish"]).contains("complete -c nagare"));
    let bad = nagare().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn man_pages_for_nagare_and_each_subcommand() {
    let top = stdout(&["man"]);
    assert!(top.contains(".TH nagare 1"), "{top}");
    assert!(top.contains("probe"));
    let probe = stdout(&["man", "probe"]);
    assert!(probe.contains(".TH nagare\\-probe 1") || probe.contains(".TH nagare-probe 1"));
    assert!(probe.contains("client"), "{probe}");
    let out = nagare().args(["man", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there are: send"));
}

#[test]
fn version_names_the_git_commit_when_built_in_git() {
    let v = stdout(&["--version"]);
    assert!(
        v.starts_with(&format!("nagare {}", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let in_git = have("git")
        && Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
    if in_git {
        let hash = v.split("(git ").nth(1).unwrap_or_else(|| panic!("{v}"));
        let hash = hash.trim().trim_end_matches(')');
        assert_eq!(hash.len(), 12, "{v}");
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{v}");
    }
}
