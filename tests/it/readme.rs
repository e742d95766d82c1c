//! The docs work as written: every `nagare` command in the shell blocks of
//! README.md and of every `docs/*.md` names a real subcommand and only
//! flags that subcommand has, every relative link between them leads to a
//! file, the FFmpeg receive flags they recommend exist, and the points a
//! new user tripped over are there (checked list). The pipes they show run
//! in `pipes.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{have, nagare};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file in docs/, with their text: read at
/// run time, so a new guide is checked without touching this test.
fn docs() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    paths.extend(guides);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// All the docs as one text, for the checks that care what is said, not
/// on which page.
fn all_text() -> String {
    docs()
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The shell blocks' lines, continuations joined.
fn shell_lines(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut cur = String::new();
    for line in doc.lines() {
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

/// Each `nagare ...` command in one doc, as words.
fn nagare_commands(doc: &str) -> Vec<Vec<String>> {
    shell_lines(doc)
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
    let mut helps: HashMap<Vec<String>, String> = HashMap::new();
    let mut total = 0;
    for (path, text) in docs() {
        let cmds = nagare_commands(&text);
        total += cmds.len();
        check_commands(&path, &cmds, &mut helps);
    }
    assert!(total >= 40, "found only {total} commands in all the docs");
    let readme = nagare_commands(&std::fs::read_to_string(root().join("README.md")).unwrap());
    assert!(
        readme.len() >= 10,
        "the README tour shows only {} commands",
        readme.len()
    );
}

/// Every word of every command against `nagare ... --help`.
fn check_commands(doc: &Path, cmds: &[Vec<String>], helps: &mut HashMap<Vec<String>, String>) {
    for words in cmds {
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
                "{}: `{}` uses {flag}, which nagare {path:?} lacks",
                doc.display(),
                words.join(" ")
            );
        }
    }
}

#[test]
fn ffmpeg_receive_flags_are_given_and_exist() {
    let docs = all_text();
    assert!(docs.contains("-buffer_size 268435456"));
    assert!(docs.contains("-reorder_queue_size 0"));
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
    let docs = all_text();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    // Capture advice and pipes.
    assert!(docs.contains("--no-gso"));
    assert!(docs.contains("super-datagram"));
    assert!(docs.contains("nagare send - "));
    assert!(docs.contains("-o - \\"));
    // One packet size story.
    assert!(docs.contains("### Packet size"));
    assert!(docs.contains("**1440 bytes of UDP payload**"));
    // Papers by title, not by a seed number nobody can look up.
    assert!(
        !docs.contains("seed 00"),
        "a 'seed 00x' reference is left in the docs"
    );
    let refs = readme
        .split("## References")
        .nth(1)
        .expect("a References section");
    for n in 1..=5 {
        assert!(refs.contains(&format!("\n{n}. ")), "reference {n} missing");
    }
    for cited in ["[1]", "[3]", "[4]", "[5]"] {
        assert!(docs.contains(cited), "{cited} is never cited");
    }
    // The probe's iperf3-style flags and outputs.
    for w in [
        "-P 4",
        "--html",
        "exit status 130",
        "nagare completions bash",
        "nagare man",
    ] {
        assert!(docs.contains(w), "the docs lack {w}");
    }
}

#[test]
fn every_relative_link_leads_to_a_file() {
    for (path, text) in docs() {
        let dir = path.parent().unwrap();
        for target in text.split("](").skip(1).filter_map(|t| t.split(')').next()) {
            let file = target.split('#').next().unwrap_or("");
            if file.is_empty() || file.contains("://") {
                continue;
            }
            assert!(
                dir.join(file).exists(),
                "{}: the link to {target} leads nowhere",
                path.display()
            );
        }
    }
}
