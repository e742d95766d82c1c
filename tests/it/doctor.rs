//! nagare doctor reads the real host and reports consistently.

use crate::common::nagare;

#[test]
fn doctor_reports_each_check_and_exit_status_matches() {
    let out = nagare()
        .args([
            "doctor",
            "--rate",
            "3.2G",
            "--to",
            "127.0.0.1:5004",
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for want in [
        "net.core.rmem_max",
        "net.core.wmem_max",
        "netdev_max_backlog",
        "udp_mem",
        "MTU of lo",
        "clock",
    ] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "{want} missing from {names:?}"
        );
    }
    // the host's real value is reported and compared with 100 ms of stream
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap();
    let c = &checks[0];
    assert_eq!(c["current"], rmem.trim());
    assert_eq!(c["ok"], rmem.trim().parse::<u64>().unwrap() >= 40_000_000);
    let short = checks.iter().filter(|c| c["ok"] == false).count();
    assert_eq!(v["short"], short);
    assert_eq!(out.status.success(), short == 0);
}

#[test]
fn doctor_needs_a_stream() {
    let out = nagare().args(["doctor"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate 3.2G, or --sdp FILE"));
}
