//! `--plot` (and the plot of `--html`): received rate against the set
//! rate, loss and delay variation per reporting interval, in the shared
//! style of [`crate::plot`].
//!
//! Every series is a rate or a ratio, so a short last interval is not
//! dragged down by its length; one shorter than a quarter of the interval
//! holds too few packets to say anything and is left out (the x axis says
//! so).

use std::path::Path;

use anyhow::Result;
use nagare_api::probe::{Direction, IntervalStats, Report};

use crate::plot::{Figure, Panel, Series, write_png};

/// A partial interval shorter than this share of the interval is left out.
const MIN_SHARE: f64 = 0.25;

/// One way of the test: its name in the legend (empty for a one-way
/// test), its intervals and its set rate.
struct Way<'a> {
    name: &'static str,
    intervals: &'a [IntervalStats],
    set_bps: f64,
}

/// The ways `r` ran: both, client to server first, for `--bidir`.
fn ways(r: &Report) -> Vec<Way<'_>> {
    if r.bidir && !r.directions.is_empty() {
        return r
            .directions
            .iter()
            .map(|d| Way {
                name: way_name(d.direction),
                intervals: &d.receiver.intervals,
                set_bps: d.set_bandwidth_bps,
            })
            .collect();
    }
    vec![Way {
        name: "",
        intervals: &r.receiver.intervals,
        set_bps: r.set_bandwidth_bps,
    }]
}

fn way_name(d: Direction) -> &'static str {
    match d {
        Direction::ClientToServer => "client to server",
        Direction::ServerToClient => "server to client",
    }
}

/// `name` with the way, when the test ran both.
fn named(name: &str, way: &Way<'_>) -> String {
    if way.name.is_empty() {
        name.to_string()
    } else {
        format!("{name}, {}", way.name)
    }
}

/// The figure of `r`: each way's series in every panel.
pub(super) fn figure(r: &Report) -> Figure {
    let ways = ways(r);
    let all = ways.first().map_or(&[][..], |w| w.intervals);
    let nominal = all.first().map_or(1.0, |i| i.end_s - i.start_s).max(1e-9);
    let kept = |i: &&IntervalStats| (i.end_s - i.start_s) >= MIN_SHARE * nominal;
    // Each interval's value at its midpoint.
    let at = |way: &Way<'_>, f: &dyn Fn(&IntervalStats) -> f64| -> Vec<(f64, f64)> {
        way.intervals
            .iter()
            .filter(kept)
            .map(|i| ((i.start_s + i.end_s) / 2.0, f(i)))
            .collect()
    };
    let x1 = all
        .iter()
        .rfind(|i| kept(i))
        .map_or(r.duration_s, |i| i.end_s);
    let (mut rate, mut loss, mut delay) = (Vec::new(), Vec::new(), Vec::new());
    let n = ways.len();
    for (k, way) in ways.iter().enumerate() {
        rate.push(Series::solid(
            &named("received", way),
            k,
            at(way, &|i| i.rate_bps / 1e6),
        ));
        loss.push(Series::solid(
            &named("lost", way),
            n + k,
            at(way, &|i| {
                if i.sent == 0 {
                    0.0
                } else {
                    i.lost as f64 * 100.0 / i.sent as f64
                }
            }),
        ));
        delay.push(Series::solid(
            &named("PDV max", way),
            2 * n + k,
            at(way, &|i| i.pdv_max_ms),
        ));
        delay.push(Series::solid(
            &named("RFC 3550 jitter", way),
            3 * n + k,
            at(way, &|i| i.jitter_ms),
        ));
    }
    rate.extend(set_rates(&ways, x1));
    let x_label = x_label(all.len() - all.iter().filter(kept).count(), nominal);
    let panel = |y_label: &str, series| Panel {
        y_label: y_label.into(),
        series,
    };
    Figure {
        title: format!(
            "nagare probe: {} {}, {} UTC",
            direction(r),
            r.server,
            r.start.replace('T', " ").trim_end_matches('Z')
        ),
        subtitle: subtitle(r),
        x_label,
        panels: vec![
            panel("rate (Mbit/s)", rate),
            panel("loss (% of sent)", loss),
            panel("delay variation (ms)", delay),
        ],
    }
}

/// The set rate: one line when every way is set alike, else one a way.
fn set_rates(ways: &[Way<'_>], x1: f64) -> Vec<Series> {
    let first = ways.first().map_or(0.0, |w| w.set_bps);
    if ways.iter().all(|w| w.set_bps == first) {
        let name = if ways.len() > 1 {
            "set rate, each way"
        } else {
            "set rate"
        };
        return vec![Series::target(name, 0.0, x1, first / 1e6)];
    }
    ways.iter()
        .map(|w| Series::target(&named("set rate", w), 0.0, x1, w.set_bps / 1e6))
        .collect()
}

/// The time axis's name, with the partial intervals left out.
fn x_label(dropped: usize, nominal: f64) -> String {
    if dropped > 0 {
        format!(
            "time (s) by send schedule; {dropped} partial interval(s) under {:.0}% of {:.2} s not shown",
            MIN_SHARE * 100.0,
            nominal
        )
    } else {
        format!("time (s) by send schedule, {nominal:.2} s intervals")
    }
}

fn direction(r: &Report) -> &'static str {
    match (r.bidir, r.direction) {
        (true, _) => "both ways with",
        (false, Direction::ClientToServer) => "client to",
        (false, Direction::ServerToClient) => "from",
    }
}

fn word(v: &nagare_api::probe::Verdict) -> String {
    let word = if v.pass { "PASS" } else { "FAIL" };
    let partial = if v.partial { "PARTIAL " } else { "" };
    format!("{partial}{word}")
}

/// Rate, size, duration, streams, what each way received and the
/// verdict (wrapped by the plot when it is long).
fn subtitle(r: &Report) -> String {
    let v = &r.verdict;
    let streams = if r.parallel > 1 {
        format!(" in {} streams", r.parallel)
    } else {
        String::new()
    };
    let each = if r.bidir { " each way" } else { "" };
    let mut s = format!(
        "set {:.3} Mbit/s{each}{streams}, {} B packets, {:.2} s; ",
        r.set_bandwidth_bps / 1e6,
        r.packet_size,
        r.duration_s,
    );
    if r.bidir && !r.directions.is_empty() {
        for d in &r.directions {
            s.push_str(&format!(
                "{}: received {:.3} Mbit/s, loss {:.4}%, {}; ",
                way_name(d.direction),
                d.receiver.effective_bandwidth_bps / 1e6,
                d.receiver.loss_rate * 100.0,
                word(&d.verdict)
            ));
        }
    } else {
        s.push_str(&format!(
            "received {:.3} Mbit/s, loss {:.4}%; ",
            r.receiver.effective_bandwidth_bps / 1e6,
            r.receiver.loss_rate * 100.0,
        ));
    }
    s.push_str(&format!("{} (profile {})", word(v), v.profile));
    s
}

/// Draws the report's time series into the PNG file `path`.
pub(super) fn draw(path: &Path, r: &Report) -> Result<()> {
    write_png(path, &figure(r))
}
