//! The lines every pacing report prints about where its pacing threads ran
//! and what made packets late: run-queue wait, hypervisor steal or the
//! timer, each with the fix that applies (send, demo, serve, stripes).

use nagare_api::st2110::AnalyzeReport;
use nagare_api::video::PacingHost;
use nagare_proto::Nanos;
use nagare_proto::stats::stall::{Cause, Episode, StallSummary};

use crate::net::placement::list;

/// Worst episodes printed (the JSON report has up to ten).
const SHOWN: usize = 3;

/// Where the pacer ran: "pacing thread on CPU 1 (others on CPU 0),
/// SCHED_FIFO, memory locked, CPU held awake".
pub(crate) fn placement_line(h: &PacingHost) -> String {
    let cpus = if h.cpus.is_empty() {
        "on any CPU (not placed)".to_string()
    } else {
        format!("on CPU {}", list(&h.cpus))
    };
    let others = if h.helper_cpus.is_empty() {
        String::new()
    } else {
        format!(" (other threads on CPU {})", list(&h.helper_cpus))
    };
    let policy = if h.realtime {
        "SCHED_FIFO"
    } else {
        "normal priority"
    };
    let memory = if h.memory_locked {
        "memory locked"
    } else {
        "memory not locked"
    };
    let awake = if h.held_awake { ", CPU held awake" } else { "" };
    format!("pacing thread {cpus}{others}, {policy}, {memory}{awake}")
}

fn ms(n: Nanos) -> String {
    format!("{:.1} ms", n.as_millis_f64())
}

/// The attribution lines: totals by cause, the fixes, the worst episodes.
pub(crate) fn stall_lines(s: &StallSummary, cpus: &[usize]) -> Vec<String> {
    if s.episodes == 0 {
        return vec!["no packet was late by more than the tolerance".into()];
    }
    let cpu = if cpus.is_empty() {
        "its CPU".to_string()
    } else {
        format!("CPU {}", list(cpus))
    };
    let mut out = vec![format!(
        "{} late packets in {} episodes: waited {} behind other threads on {cpu}; \
         the hypervisor stole {}; woke {} late with its CPU free (timer)",
        s.late_packets,
        s.episodes,
        ms(s.run_queue),
        ms(s.steal),
        ms(s.timer)
    )];
    for (cause, took) in [
        (Cause::RunQueue, s.run_queue),
        (Cause::Steal, s.steal),
        (Cause::Timer, s.timer),
    ] {
        if took > Nanos::ZERO {
            out.push(format!("fix ({}): {}", cause_name(cause), fix(cause, &cpu)));
        }
    }
    out.extend(s.worst.iter().take(SHOWN).map(episode_line));
    out
}

fn cause_name(c: Cause) -> &'static str {
    match c {
        Cause::RunQueue => "run queue",
        Cause::Steal => "steal",
        Cause::Timer => "timer",
    }
}

fn fix(c: Cause, cpu: &str) -> String {
    match c {
        Cause::RunQueue => format!(
            "give the pacer {cpu} alone: move what else runs there (ps -eLo psr,comm), \
             isolate it (isolcpus, a cpuset), or pace real-time (root or CAP_SYS_NICE)"
        ),
        Cause::Steal => "the hypervisor held this vCPU: on a VM with free page reporting, \
             reused memory faults on the host (`nagare doctor` checks it, `--apply` turns it \
             off); otherwise ask for dedicated (pinned) vCPUs or a quieter host"
            .into(),
        Cause::Timer if on_virtual_machine() => {
            "the thread woke late with nothing in its way in this guest: on a virtual machine \
             that is mostly the host not running this vCPU for a while, too short for \
             /proc/stat's 10 ms steal ticks (it happens most while the other vCPUs are busy; \
             docs/pacing.md); ask for dedicated (pinned) vCPUs, or keep the other CPUs' load \
             low; `nagare doctor --timer-seconds 60` counts how often this host stops a busy \
             vCPU for longer than the type's slack"
                .into()
        }
        Cause::Timer => "the thread woke late with nothing in its way: see the host's \
             timer floor with `nagare doctor`; --pacing precise spins the last stretch"
            .into(),
    }
}

/// Whether this kernel runs under a hypervisor (the CPU's `hypervisor`
/// flag), where a late wake-up with nothing in the way is mostly time the
/// host did not run the vCPU.
fn on_virtual_machine() -> bool {
    static VM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VM.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
        })
    })
}

fn episode_line(e: &Episode) -> String {
    format!(
        "at {:.3} s: {} late, {} packets: run queue {}, steal {}, timer {} ({}, {} involuntary switches)",
        e.start.as_secs_f64(),
        ms(e.worst),
        e.late_packets,
        ms(e.run_queue),
        ms(e.steal),
        ms(e.timer),
        cause_name(e.main_cause()),
        e.involuntary
    )
}

/// Broken frames printed (the JSON report keeps up to 1000).
const BROKEN_SHOWN: usize = 10;

/// The frames that broke the declared type, worst first, each with the
/// late episode around it and that episode's main cause.
pub(crate) fn broken_lines(a: &AnalyzeReport, stalls: Option<&StallSummary>) -> Vec<String> {
    let Some(kind) = a.broken_type else {
        return Vec::new();
    };
    if a.broken_total == 0 {
        return Vec::new();
    }
    let mut out = vec![format!(
        "{} of {} frames broke {}; the worst:",
        a.broken_total,
        a.frames,
        kind.plain()
    )];
    for b in a.broken.iter().take(BROKEN_SHOWN) {
        let cause = stalls
            .and_then(|s| episode_near(s, b.at_s))
            .map_or(String::new(), |e| {
                format!(
                    "; during a {} stall ({} of it)",
                    ms(e.worst),
                    cause_name(e.main_cause())
                )
            });
        out.push(format!(
            "frame {} at {:.3} s (epoch frame {}): {}: {}{cause}",
            b.index, b.at_s, b.epoch_frame, b.standard, b.plain
        ));
    }
    out
}

/// The worst late episode from a frame before `at_s` to just after it.
fn episode_near(s: &StallSummary, at_s: f64) -> Option<&Episode> {
    s.worst.iter().find(|e| {
        let from = e.start.saturating_sub(e.worst).as_secs_f64() - 0.05;
        let to = e.end.as_secs_f64() + 0.01;
        (from..=to).contains(&at_s)
    })
}

/// Every line about the pacer, prefixed with `who` ("send", "demo").
pub(crate) fn print(who: &str, h: &PacingHost) {
    eprintln!("{who}: {}", placement_line(h));
    if let Some(s) = &h.stalls {
        for line in stall_lines(s, &h.cpus) {
            eprintln!("{who}: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_comes_with_its_fix_and_the_worst_episode() {
        let e = Episode {
            start: Nanos::from_millis(2345),
            end: Nanos::from_millis(2350),
            worst: Nanos::from_millis(8),
            late_packets: 40,
            run_queue: Nanos::ZERO,
            steal: Nanos::from_millis(7),
            timer: Nanos::from_millis(1),
            involuntary: 0,
        };
        let s = StallSummary {
            episodes: 1,
            late_packets: 40,
            lateness: e.worst,
            steal: e.steal,
            timer: e.timer,
            worst: vec![e],
            ..StallSummary::default()
        };
        let lines = stall_lines(&s, &[1]);
        assert_eq!(
            lines[0],
            "40 late packets in 1 episodes: waited 0.0 ms behind other threads on CPU 1; \
             the hypervisor stole 7.0 ms; woke 1.0 ms late with its CPU free (timer)"
        );
        assert!(
            lines[1].starts_with("fix (steal): the hypervisor"),
            "{lines:?}"
        );
        assert!(lines[2].starts_with("fix (timer):"), "{lines:?}");
        assert_eq!(
            lines.len(),
            4,
            "no run-queue fix when it took nothing: {lines:?}"
        );
        assert!(
            lines[3].starts_with("at 2.345 s: 8.0 ms late, 40 packets"),
            "{lines:?}"
        );
        assert!(
            lines[3].contains("(steal, 0 involuntary switches)"),
            "{lines:?}"
        );
    }

    #[test]
    fn placement_reads_plainly() {
        let h = PacingHost {
            cpus: vec![1],
            helper_cpus: vec![0],
            realtime: true,
            memory_locked: true,
            ..PacingHost::default()
        };
        assert_eq!(
            placement_line(&h),
            "pacing thread on CPU 1 (other threads on CPU 0), SCHED_FIFO, memory locked"
        );
        let held = PacingHost {
            held_awake: true,
            ..h
        };
        assert_eq!(
            placement_line(&held),
            "pacing thread on CPU 1 (other threads on CPU 0), SCHED_FIFO, memory locked, \
             CPU held awake"
        );
        assert_eq!(
            placement_line(&PacingHost::default()),
            "pacing thread on any CPU (not placed), normal priority, memory not locked"
        );
    }
}
