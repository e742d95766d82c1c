//! nagare doctor reads the real host and reports consistently.

use nagare_api::doctor::{CheckKind, Report};
use nagare_proto::{BitRate, ByteSize};

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
            "--timer-seconds",
            "0.5",
            "--json",
        ])
        .output()
        .unwrap();
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.rate, BitRate(3_200_000_000));
    // One default packet size everywhere: send's 1440.
    assert_eq!(report.packet_size, ByteSize(1440));
    let kinds: Vec<CheckKind> = report.checks.iter().map(|c| c.kind).collect();
    // The timer floor: one check per CPU this process may use; the
    // pacer's CPU kept busy alone, then every CPU at once (with more than
    // one); then the tightest sender type both hold.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut want = vec![
        CheckKind::RmemMax,
        CheckKind::WmemMax,
        CheckKind::NetdevBacklog,
        CheckKind::UdpMem,
        CheckKind::Mtu,
        CheckKind::Clock,
    ];
    // A VM with free page reporting (virtio-balloon) is told about it.
    if std::path::Path::new("/sys/module/page_reporting/parameters/page_reporting_order").exists() {
        want.push(CheckKind::PageReporting);
    }
    // One core's memcpy rate, always measured.
    want.push(CheckKind::CopyRate);
    want.extend(std::iter::repeat_n(CheckKind::TimerFloor, cpus));
    want.push(CheckKind::BusyStalls);
    if cpus > 1 {
        want.push(CheckKind::BusyStalls);
    }
    want.push(CheckKind::SenderType);
    assert_eq!(kinds, want);
    let floor = report.check(CheckKind::TimerFloor).unwrap();
    assert!(floor.current.starts_with("p99 "), "{}", floor.current);
    assert!(
        floor.needed.contains("for 1920x1080 uyvp at 60000/1001")
            && floor.needed.ends_with("1440-byte packets"),
        "{}",
        floor.needed
    );
    // The pacer's CPU alone: the one a sender takes, the highest.
    let alone = report.check(CheckKind::BusyStalls).unwrap();
    let pacer = cpus.saturating_sub(1);
    assert!(
        alone
            .name
            .starts_with(&format!("CPU {pacer} kept busy alone")),
        "{}",
        alone.name
    );
    assert!(
        alone.current.contains(" host stalls over 1 ms"),
        "{}",
        alone.current
    );
    // A host whose every CPU wakes within W's slack, and whose pacer CPU
    // met no longer stall, holds some type, and the reverse.
    let held = report.check(CheckKind::SenderType).unwrap();
    let all_wake_for_w = report
        .checks
        .iter()
        .filter(|c| c.kind == CheckKind::TimerFloor)
        .all(|c| c.ok);
    assert_eq!(held.ok, all_wake_for_w && alone.ok, "{held:?} {alone:?}");
    assert_eq!(
        held.current.starts_with("none"),
        !held.ok,
        "{}",
        held.current
    );
    // The copy rate: in GB/s per core, plausible for any machine (a
    // presence check, not a timing target), and the same in the JSON.
    let copy = report.check(CheckKind::CopyRate).unwrap();
    let gbs: f64 = copy
        .current
        .strip_suffix(" GB/s per core")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", copy.current));
    assert!((0.05..1000.0).contains(&gbs), "{}", copy.current);
    let bps = report.copy_bytes_per_second.unwrap() as f64;
    assert!(
        (bps / 1e9 - gbs).abs() < 0.051,
        "{bps} against {}",
        copy.current
    );
    assert!(
        copy.name
            .starts_with("memory copy on one core (memcpy, 256 MiB"),
        "{}",
        copy.name
    );
    // 3.2 Gbit/s is 0.4 GB/s: a core copying more holds one copy of it.
    assert!(copy.needed.contains("CPU-s per Gbit"), "{}", copy.needed);
    assert_eq!(copy.ok, copy.fix.is_none());
    if gbs > 0.5 {
        assert!(copy.ok, "{copy:?}");
    }
    // the route to 127.0.0.1 leaves by loopback
    let mtu = report.check(CheckKind::Mtu).unwrap();
    assert!(mtu.name.starts_with("MTU of lo "), "{}", mtu.name);
    assert_eq!(mtu.needed, ">= 1468");
    // the host's real value is reported and compared with 100 ms of stream
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap();
    let c = report.check(CheckKind::RmemMax).unwrap();
    assert_eq!(c.current, rmem.trim());
    assert_eq!(c.ok, rmem.trim().parse::<u64>().unwrap() >= 40_000_000);
    assert_eq!(c.fix.is_none(), c.ok);
    let short = report.checks.iter().filter(|c| !c.ok).count();
    assert_eq!(report.short, short);
    assert_eq!(out.status.success(), short == 0);
}

#[test]
fn doctor_checks_a_multicast_group_on_a_named_interface() {
    let out = nagare()
        .args(["doctor", "--rate", "1G", "--packet-size", "1400"])
        .args(["--to", "239.1.2.3:5004", "--interface", "lo", "--json"])
        .args(["--timer-seconds", "0"])
        .output()
        .unwrap();
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    let mtu = report.check(CheckKind::Mtu).unwrap();
    assert_eq!(mtu.needed, ">= 1428");
    // loopback carries multicast locally, flag or not
    let flag = report.check(CheckKind::MulticastFlag).unwrap();
    assert_eq!(flag.name, "lo can carry multicast group 239.1.2.3");
    assert!(flag.ok);
    // a named interface needs no route lookup
    assert!(report.check(CheckKind::MulticastRoute).is_none());
}

#[test]
fn doctor_needs_a_stream() {
    let out = nagare().args(["doctor"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate 3.2G, or --sdp FILE"));
}

#[test]
fn doctor_refuses_bad_flags_with_the_value_and_the_fix() {
    for (flag, value, needle) in [
        (
            "--rate",
            "fast",
            "rate \"fast\": not a number; write it like 6M",
        ),
        (
            "--packet-size",
            "70000",
            "packet size 70000 is out of range 1 to 65507",
        ),
        (
            "--to",
            "nowhere",
            "address 'nowhere' does not parse: expected HOST:PORT",
        ),
        (
            "--interface",
            "nosuch0",
            "no interface named 'nosuch0' (known: ",
        ),
    ] {
        let mut args = vec!["doctor", flag, value];
        if flag != "--rate" {
            args.extend(["--rate", "1G"]);
        }
        let out = nagare().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")),
            "{err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
