//! The probe report as a human table, JSON and a per-packet CSV.

use std::fmt::{self, Write as _};
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use nagare_api::probe::{
    Direction, DirectionReport, LiveInterval, Quantiles, ReceiverReport, Report,
};
use nagare_proto::probe::Arrival;

fn mbps(bps: f64) -> f64 {
    bps / 1e6
}

fn pct(p: &Quantiles) -> String {
    format!(
        "{:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        p.p50, p.p95, p.p99, p.p999, p.max
    )
}

/// The live interval lines of a running test, on stdout, as iperf3
/// prints them: the receiver's count of each interval.
pub(super) struct LiveLines {
    on: bool,
    header: bool,
    /// Both directions run (`--bidir`): each line says which.
    bidir: bool,
}

impl LiveLines {
    /// Lines that print when `on` (not with --json, whose stdout is the
    /// report alone); with `bidir`, lines of both directions.
    pub(super) fn new(on: bool, bidir: bool) -> LiveLines {
        LiveLines {
            on,
            header: false,
            bidir,
        }
    }

    /// Prints one interval of every stream going `direction` (the header
    /// first).
    pub(super) fn lines(&mut self, direction: Direction, ivs: &[LiveInterval]) {
        if !self.on {
            return;
        }
        let mut out = std::io::stdout().lock();
        if !self.header {
            self.header = true;
            let _ = writeln!(out, "{}", live_header());
        }
        let way = self.bidir.then_some(direction);
        for l in live_lines(way, ivs) {
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
    }
}

/// The column names of [`live_line`].
pub(super) fn live_header() -> String {
    format!(
        "{:<6} {:>15} {:>12} {:>9} {:>7} {:>11}",
        "stream", "interval (s)", "Mbit/s", "received", "lost", "jitter ms"
    )
}

/// A short label of a direction for live lines and tables.
pub(super) fn way(d: Direction) -> &'static str {
    match d {
        Direction::ClientToServer => "c>s",
        Direction::ServerToClient => "s>c",
    }
}

/// One interval of every stream, a line each, and with several streams
/// a SUM line (mean jitter), as iperf3 prints them; with `direction`
/// (`--bidir`), the stream column says which way (`c>s 0`, `s>c SUM`).
pub(super) fn live_lines(direction: Option<Direction>, ivs: &[LiveInterval]) -> Vec<String> {
    let label = |name: &str| match direction {
        Some(d) => format!("{} {name}", way(d)),
        None => name.to_string(),
    };
    let mut lines: Vec<String> = ivs
        .iter()
        .map(|iv| live_line(&label(&iv.stream.to_string()), iv))
        .collect();
    if let (true, Some(first)) = (ivs.len() > 1, ivs.first()) {
        let n = ivs.len() as f64;
        let sum = LiveInterval {
            received: ivs.iter().map(|i| i.received).sum(),
            lost: ivs.iter().map(|i| i.lost).sum(),
            bytes: ivs.iter().map(|i| i.bytes).sum(),
            rate_bps: ivs.iter().map(|i| i.rate_bps).sum(),
            jitter_ms: ivs.iter().map(|i| i.jitter_ms).sum::<f64>() / n,
            ..*first
        };
        lines.push(live_line(&label("SUM"), &sum));
    }
    lines
}

/// One live interval, fixed columns.
fn live_line(stream: &str, iv: &LiveInterval) -> String {
    format!(
        "[{:>4}] {:>15} {:>12.3} {:>9} {:>7} {:>11.4}",
        stream,
        format!("{:.2}-{:.2}", iv.start_s, iv.end_s),
        mbps(iv.rate_bps),
        iv.received,
        iv.lost,
        iv.jitter_ms
    )
}

/// Prints the report as tables.
pub(super) fn print_human(r: &Report) {
    let o = human_text(r);
    // A closed pipe (| head) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(o.as_bytes());
}

/// The report as tables, as printed.
pub(super) fn human_text(r: &Report) -> String {
    let mut o = String::new();
    // Writing into a String cannot fail.
    let _ = human(&mut o, r);
    o
}

fn human(o: &mut String, r: &Report) -> fmt::Result {
    summary(o, r)?;
    stream(o, r)?;
    if r.directions.is_empty() {
        receiver(o, &r.receiver)?;
        delays(o, r)?;
        return intervals(o, &r.receiver);
    }
    side_by_side(o, &r.directions)?;
    rtt(o, r)?;
    for d in &r.directions {
        writeln!(o)?;
        write!(o, "{}", d.direction)?;
        intervals(o, &d.receiver)?;
    }
    Ok(())
}

/// One cell of the side-by-side table: a direction's number as text.
type Cell = fn(&DirectionReport) -> String;

/// p50/p99/max of a distribution.
fn q3(q: &Quantiles) -> String {
    format!("{:.3}/{:.3}/{:.3}", q.p50, q.p99, q.max)
}

/// `--bidir`: both directions' numbers in two columns.
fn side_by_side(o: &mut String, ds: &[DirectionReport]) -> fmt::Result {
    let cell = |f: Cell| -> String { ds.iter().map(|d| format!(" {:>22}", f(d))).collect() };
    let rows: [(&str, Cell); 14] = [
        ("", |d| d.direction.to_string()),
        ("verdict", |d| verdict_word(&d.verdict).to_string()),
        ("set Mbit/s", |d| {
            format!("{:.3}", mbps(d.set_bandwidth_bps))
        }),
        ("sent Mbit/s", |d| {
            format!("{:.3}", mbps(d.sender_achieved_bps))
        }),
        ("received Mbit/s", |d| {
            format!("{:.3}", mbps(d.receiver.effective_bandwidth_bps))
        }),
        ("sent", |d| d.receiver.sent.to_string()),
        ("received", |d| d.receiver.received.to_string()),
        ("lost", |d| d.receiver.lost.to_string()),
        ("loss (%)", |d| {
            format!("{:.4}", d.receiver.loss_rate * 100.0)
        }),
        ("rcv drops", |d| d.receiver.receiver_drops.to_string()),
        ("late / dup / reord", |d| {
            let x = &d.receiver;
            format!("{} / {} / {}", x.late, x.duplicates, x.reordered)
        }),
        ("jitter ms (RFC 3550)", |d| {
            format!("{:.4}", d.receiver.jitter_rfc3550_ms)
        }),
        ("PDV ms p50/p99/max", |d| q3(&d.receiver.pdv_ms)),
        ("|IPDV| ms p50/p99/max", |d| q3(&d.receiver.ipdv_ms)),
    ];
    writeln!(o)?;
    for (name, f) in rows {
        writeln!(o, "{name:<22}{}", cell(f))?;
    }
    for d in ds {
        for why in &d.verdict.reasons {
            writeln!(o, "  {}: {why}", way(d.direction))?;
        }
    }
    Ok(())
}

/// PASS, FAIL, with PARTIAL before when interrupted.
fn verdict_word(v: &nagare_api::probe::Verdict) -> &'static str {
    match (v.pass, v.partial) {
        (true, false) => "PASS",
        (false, false) => "FAIL",
        (true, true) => "PARTIAL PASS",
        (false, true) => "PARTIAL FAIL",
    }
}

/// The verdict and Sperf's one-line summary.
fn summary(o: &mut String, r: &Report) -> fmt::Result {
    let v = &r.verdict;
    let x = &r.receiver;
    let word = if v.pass { "PASS" } else { "FAIL" };
    let partial = if v.partial { "PARTIAL " } else { "" };
    writeln!(o)?;
    writeln!(o, "{partial}{word}  (profile {})", v.profile)?;
    for why in &v.reasons {
        writeln!(o, "  - {why}")?;
    }
    if let Some(st) = &v.st2110_21 {
        writeln!(o, "{st}")?;
    }
    writeln!(o)?;
    writeln!(
        o,
        "{:<6} {:>14} {:>14} {:>10} {:>12} {:>12} {:>12} {:>11}",
        "stream",
        "set (Mbit/s)",
        "eff. (Mbit/s)",
        "loss (%)",
        "rcv drops",
        "order errs",
        "burst losses",
        "jitter (ms)"
    )?;
    if r.directions.is_empty() {
        rows(o, None, r.set_bandwidth_bps, r.parallel, &r.streams, x)?;
    }
    for d in &r.directions {
        let way = Some(d.direction);
        rows(
            o,
            way,
            d.set_bandwidth_bps,
            r.parallel,
            &d.streams,
            &d.receiver,
        )?;
    }
    writeln!(o)
}

/// The summary rows of one direction: each stream's, then their sum;
/// `direction` labels them with `--bidir`.
fn rows(
    o: &mut String,
    direction: Option<Direction>,
    set_bps: f64,
    parallel: u32,
    streams: &[nagare_api::probe::StreamReport],
    total: &ReceiverReport,
) -> fmt::Result {
    let label = |name: &str| match direction {
        Some(d) => format!("{} {name}", way(d)),
        None => name.to_string(),
    };
    let per_stream = set_bps / f64::from(parallel.max(1));
    for s in streams {
        row(o, &label(&s.stream.to_string()), per_stream, &s.receiver)?;
    }
    let name = if streams.is_empty() { "0" } else { "SUM" };
    row(o, &label(name), set_bps, total)
}

/// One row of the summary table.
fn row(o: &mut String, label: &str, set_bps: f64, x: &ReceiverReport) -> fmt::Result {
    writeln!(
        o,
        "{:<6} {:>14.3} {:>14.3} {:>10.4} {:>12} {:>12} {:>12} {:>11.4}",
        label,
        mbps(set_bps),
        mbps(x.effective_bandwidth_bps),
        x.loss_rate * 100.0,
        x.receiver_drops,
        x.order_errors,
        x.burst_losses,
        x.jitter_sperf_ms
    )
}

/// The stream's shape and the sender's own measurements.
fn stream(o: &mut String, r: &Report) -> fmt::Result {
    writeln!(
        o,
        "test        {} to {}, nagare {}",
        r.start, r.end, r.version
    )?;
    writeln!(
        o,
        "stream      {} -> {}, {} B packets, {:.2} s{}{}",
        if r.bidir {
            "both ways at once".to_string()
        } else {
            r.direction.to_string()
        },
        r.server,
        r.packet_size,
        r.duration_s,
        r.fps
            .map(|f| format!(", {f:.3} fps x {} packets", r.packets_per_frame))
            .unwrap_or_default(),
        if r.interrupted {
            format!(" (interrupted; {:.2} s planned)", r.planned_duration_s)
        } else {
            String::new()
        }
    )?;
    if r.directions.is_empty() {
        return sender(o, "sender     ", &r.sender, r.sender_achieved_bps);
    }
    for d in &r.directions {
        let label = format!("sender {} ", way(d.direction));
        sender(o, &label, &d.sender, d.sender_achieved_bps)?;
    }
    Ok(())
}

/// The sender's own measurements, after an 11-character label.
fn sender(
    o: &mut String,
    label: &str,
    s: &nagare_api::probe::SenderReport,
    achieved_bps: f64,
) -> fmt::Result {
    writeln!(
        o,
        "{label} {} packets, achieved {:.3} Mbit/s, {} send errors",
        s.sent,
        mbps(achieved_bps),
        s.send_errors
    )?;
    writeln!(
        o,
        "            pacing error ms p50/p99/max {:.3}/{:.3}/{:.3}; most packets in 1 ms {} (schedule {:.1})",
        s.pacing_error_ms.p50,
        s.pacing_error_ms.p99,
        s.pacing_error_ms.max,
        s.max_packets_per_ms,
        s.scheduled_packets_per_ms
    )
}

/// Counts: received, lost, loss episodes, order, jitter.
fn receiver(o: &mut String, x: &ReceiverReport) -> fmt::Result {
    writeln!(
        o,
        "receiver    {} received, {} lost ({:.4}%; {} dropped by the receiving host, not the path), {} late, {} duplicates, {} strangers",
        x.received,
        x.lost,
        x.loss_rate * 100.0,
        x.receiver_drops,
        x.late,
        x.duplicates,
        x.strangers
    )?;
    writeln!(
        o,
        "loss        {} episodes, mean {:.2}, longest {}; {} burst losses (>= {}); RFC 3611 burst density {:.3}, gap density {:.6}",
        x.loss_episodes,
        x.loss_episode_mean,
        x.loss_episode_max,
        x.burst_losses,
        x.burst_threshold,
        x.rfc3611.burst_density,
        x.rfc3611.gap_density
    )?;
    writeln!(
        o,
        "order       {} reordered (RFC 4737, ratio {:.6}, max extent {}), {} Sperf order errors",
        x.reordered, x.reordered_ratio, x.reorder_max_extent, x.order_errors
    )?;
    writeln!(
        o,
        "jitter      RFC 3550 {:.4} ms, Sperf {:.4} ms (drift {:.2} ppm removed)",
        x.jitter_rfc3550_ms, x.jitter_sperf_ms, x.clock_drift_ppm
    )
}

/// PDV, IPDV and RTT distributions, and frame delivery.
fn delays(o: &mut String, r: &Report) -> fmt::Result {
    let x = &r.receiver;
    writeln!(
        o,
        "{:<11} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "(ms)", "p50", "p95", "p99", "p99.9", "max"
    )?;
    writeln!(o, "{:<11} {}", "PDV", pct(&x.pdv_ms))?;
    writeln!(o, "{:<11} {}", "|IPDV|", pct(&x.ipdv_ms))?;
    rtt(o, r)?;
    if let Some(f) = &x.frames {
        writeln!(
            o,
            "frames      {} sent, {} complete, {} incomplete, {} late; {} freezes (longest {} frames)",
            f.frames, f.complete, f.incomplete, f.late, f.freeze_events, f.longest_freeze_frames
        )?;
    }
    Ok(())
}

/// Round-trip times, idle and loaded.
fn rtt(o: &mut String, r: &Report) -> fmt::Result {
    for (name, s) in [("RTT idle", &r.rtt_idle), ("RTT loaded", &r.rtt_loaded)] {
        writeln!(
            o,
            "{name:<11} min {:.3} median {:.3} p99 {:.3} max {:.3} ms ({} samples, {} lost)",
            s.min_ms, s.median_ms, s.p99_ms, s.max_ms, s.samples, s.lost
        )?;
    }
    Ok(())
}

/// The time series, one line per reporting interval.
fn intervals(o: &mut String, x: &ReceiverReport) -> fmt::Result {
    if x.intervals.is_empty() {
        return Ok(());
    }
    writeln!(o)?;
    writeln!(
        o,
        "{:>15} {:>12} {:>9} {:>7} {:>11} {:>11}",
        "sent in (s)", "Mbit/s", "received", "lost", "jitter ms", "PDV max ms"
    )?;
    for iv in &x.intervals {
        writeln!(
            o,
            "{:>15} {:>12.3} {:>9} {:>7} {:>11.4} {:>11.3}",
            format!("{:.2}-{:.2}", iv.start_s, iv.end_s),
            mbps(iv.rate_bps),
            iv.received,
            iv.lost,
            iv.jitter_ms,
            iv.pdv_max_ms
        )?;
    }
    Ok(())
}

/// Writes one line per received packet, in arrival order.
pub(super) fn write_csv(path: &Path, records: &[Arrival]) -> Result<()> {
    let f = std::fs::File::create(path)
        .with_context(|| format!("creating the --log file {}", path.display()))?;
    let mut w = BufWriter::new(f);
    let io = |e| anyhow::Error::new(e).context(format!("writing {}", path.display()));
    writeln!(w, "seq,send_ns,recv_ns").map_err(io)?;
    for r in records {
        writeln!(
            w,
            "{},{},{}",
            r.seq,
            r.sent_at.as_nanos(),
            r.received_at.as_nanos()
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}
