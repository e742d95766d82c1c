//! Where `demo` and `send` put their threads by default, read back from
//! the kernel (`/proc/PID/task/*/status`, Cpus_allowed_list) while they
//! run: the pacing thread alone on the highest CPU the process may use,
//! every other thread off it (docs/pacing.md).

use std::process::Stdio;
use std::time::Duration;

use crate::common::{nagare, wait_until};

/// CPUs of this test process, ascending (what a child inherits).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    parse_list(field(&status, "Cpus_allowed_list:").unwrap())
}

fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// "0-2,5" as the kernel writes it.
fn parse_list(s: &str) -> Vec<usize> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![p.parse().unwrap()],
        })
        .collect()
}

/// Linux's SCHED_IDLE policy number.
const SCHED_IDLE: u32 = 5;

/// The scheduling policy of thread `tid` of `pid` (field 41 of its stat).
fn policy(pid: u32, tid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(41 - 3)?.parse().ok()
}

/// (tid, name, CPUs) of every thread of `pid`.
fn threads(pid: u32) -> Vec<(u32, String, Vec<usize>)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let tid: u32 = e.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
        let name = field(&status, "Name:")?.to_string();
        let cpus = parse_list(field(&status, "Cpus_allowed_list:")?);
        Some((tid, name, cpus))
    })
    .collect()
}

/// Waits until the main thread of `pid` (the pacer) sits on `highest` and
/// at least `min_threads` threads run, then checks every other thread is
/// off that CPU. Returns the thread names seen.
fn check_placed(pid: u32, highest: usize, min_threads: usize) -> Vec<String> {
    let seen = wait_until("the pacing thread placed", Duration::from_secs(20), || {
        let t = threads(pid);
        let pacer = t.iter().find(|(tid, _, _)| *tid == pid)?;
        (pacer.2 == [highest] && t.len() >= min_threads).then_some(t)
    });
    for (tid, name, cpus) in &seen {
        // The holder that keeps the pacer's CPU from halting shares it,
        // at SCHED_IDLE, so it never delays the pacer.
        if *name == format!("awake-{highest}") {
            assert_eq!(cpus, &[highest], "the holder sits on the pacer's CPU");
            assert_eq!(
                policy(pid, *tid),
                Some(SCHED_IDLE),
                "the holder runs SCHED_IDLE"
            );
            continue;
        }
        if *tid != pid {
            assert!(
                !cpus.contains(&highest),
                "thread {tid} ({name}) may run on the pacer's CPU {highest}: {cpus:?}"
            );
        }
    }
    seen.into_iter().map(|(_, n, _)| n).collect()
}

#[test]
fn demo_puts_its_pacer_alone_on_the_highest_cpu() {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: one CPU, nothing to place");
        return;
    }
    let highest = *cpus.last().unwrap();
    let child = nagare()
        .args([
            "demo", "--size", "640x360", "--fps", "25", "--frames", "100", "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The pacer, the receiver and the watcher at least.
    let names = check_placed(child.id(), highest, 3);
    assert!(names.iter().any(|n| n == "nagare-watch"), "{names:?}");
    let holder = format!("awake-{highest}");
    assert!(names.contains(&holder), "{names:?}");
    let out = child.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let host = &report["sent"]["pacing_host"];
    assert_eq!(host["cpus"], serde_json::json!([highest]), "{host}");
    assert_eq!(host["held_awake"], serde_json::json!(true), "{host}");
    assert!(
        !host["helper_cpus"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(highest)),
        "{host}"
    );
}

#[test]
fn send_keeps_its_reader_off_the_pacers_cpu_and_cpu_none_places_nothing() {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: one CPU, nothing to place");
        return;
    }
    let highest = *cpus.last().unwrap();
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().to_string();
    let base = [
        "send",
        "pattern:bars",
        "--to",
        &to,
        "--size",
        "640x360",
        "--pix-fmt",
        "uyvy422",
        "--fps",
        "25",
        "--frames",
        "75",
        "--json",
    ];
    // A read delay makes the pattern come through the reader thread.
    let mut child = nagare()
        .args(base)
        .args(["--read-delay-ms", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let names = check_placed(child.id(), highest, 3);
    assert!(names.iter().any(|n| n == "reader"), "{names:?}");
    assert!(child.wait().unwrap().success());

    let child = nagare()
        .args(base)
        .args(["--read-delay-ms", "1", "--cpu", "none"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let seen = wait_until("the reader thread", Duration::from_secs(20), || {
        let t = threads(pid);
        t.iter().any(|(_, n, _)| n == "reader").then_some(t)
    });
    for (tid, name, got) in seen {
        assert_eq!(
            got, cpus,
            "thread {tid} ({name}) was placed under --cpu none"
        );
    }
    let out = child.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["pacing_host"]["cpus"], serde_json::json!([]));
}
