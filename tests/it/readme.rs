//! The README works as written: every `nagare` command in its shell blocks
//! names a real subcommand and only flags that subcommand has, the FFmpeg
//! receive flags it recommends exist, and the points a new user tripped
//! over are there (checked list). The pipes it shows run in `pipes.rs`.

use std::collections::HashMap;
use std::process::Command;

use crate::common::{have, nagare};

const README: &str = include_str!("../../README.md");

/// The shell blocks' lines, continuations joined.
fn shell_lines() -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut cur = String::new();
    for line in README.lines() {
        let t = line.trim_end();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let t = t.split(" # ").next().unwrap_or("").trim_end();
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// Each `nagare ...` command in the README, as words.
fn nagare_commands() -> Vec<Vec<String>> {
    shell_lines()
        .iter()
        .flat_map(|l| l.split(['|', ';', '&']).map(str::trim).collect::<Vec<_>>())
        .map(|seg| seg.trim_start_matches("do ").trim())
        .filter(|seg| seg.starts_with("nagare "))
        .map(|seg| seg.split_whitespace().map(String::from).collect())
        .collect()
}

fn help(path: &[&str]) -> String {
    let out = nagare().args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "nagare {path:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_nagare_command_uses_real_subcommands_and_flags() {
    let cmds = nagare_commands();
    assert!(cmds.len() >= 20, "found only {} commands", cmds.len());
    let mut helps: HashMap<Vec<String>, String> = HashMap::new();
    for words in &cmds {
        // probe and tree have a role: `probe client`, `tree join`.
        let depth = if ["probe", "tree"].contains(&words[1].as_str()) {
            3
        } else {
            2
        };
        let path: Vec<String> = words[1..depth.min(words.len())].to_vec();
        let text = helps
            .entry(path.clone())
            .or_insert_with(|| help(&path.iter().map(String::as_str).collect::<Vec<_>>()));
        for w in &words[depth.min(words.len())..] {
            let flag = w.split('=').next().unwrap_or(w);
            let known = if flag.starts_with("--") {
                text.contains(&format!("{flag} "))
                    || text.contains(&format!("{flag}\n"))
                    || text.contains(&format!("{flag},"))
            } else if flag.len() == 2 && flag.starts_with('-') && flag != "-" {
                text.contains(&format!("{flag}, "))
            } else {
                true
            };
            assert!(
                known,
                "README: `{}` uses {flag}, which nagare {path:?} lacks",
                words.join(" ")
            );
        }
    }
}

#[test]
fn ffmpeg_receive_flags_are_given_and_exist() {
    assert!(README.contains("-buffer_size 268435456"));
    assert!(README.contains("-reorder_queue_size 0"));
    if !have("ffmpeg") {
        return;
    }
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-h", "demuxer=sdp"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["-buffer_size", "-reorder_queue_size"] {
        assert!(text.contains(flag), "ffmpeg's sdp demuxer lacks {flag}");
    }
}

#[test]
fn checked_list_of_what_new_users_missed() {
    // Capture advice and pipes.
    assert!(README.contains("--no-gso"));
    assert!(README.contains("super-datagram"));
    assert!(README.contains("nagare send - "));
    assert!(README.contains("-o - \\"));
    // One packet size story.
    assert!(README.contains("### Packet size"));
    assert!(README.contains("**1440 bytes of UDP payload**"));
    // Papers by title, not by a seed number nobody can look up.
    assert!(
        !README.contains("seed 00"),
        "a 'seed 00x' reference is left"
    );
    let refs = README
        .split("## References")
        .nth(1)
        .expect("a References section");
    for n in 1..=5 {
        assert!(refs.contains(&format!("\n{n}. ")), "reference {n} missing");
    }
    for cited in ["[1]", "[3]", "[4]", "[5]"] {
        assert!(README.contains(cited), "{cited} is never cited");
    }
    // The probe's iperf3-style flags and outputs.
    for w in [
        "-P 4",
        "--html",
        "exit status 130",
        "nagare completions bash",
        "nagare man",
    ] {
        assert!(README.contains(w), "README lacks {w}");
    }
}
