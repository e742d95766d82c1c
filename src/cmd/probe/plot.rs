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
use nagare_api::probe::{IntervalStats, Report};

use crate::plot::{Figure, Panel, Series, write_png};

/// A partial interval shorter than this share of the interval is left out.
const MIN_SHARE: f64 = 0.25;

/// The figure of `r`.
pub(super) fn figure(r: &Report) -> Figure {
    let all = &r.receiver.intervals;
    let nominal = all.first().map_or(1.0, |i| i.end_s - i.start_s).max(1e-9);
    let shown: Vec<&IntervalStats> = all
        .iter()
        .filter(|i| (i.end_s - i.start_s) >= MIN_SHARE * nominal)
        .collect();
    // Each interval's value at its midpoint.
    let at = |f: &dyn Fn(&IntervalStats) -> f64| -> Vec<(f64, f64)> {
        shown
            .iter()
            .map(|i| ((i.start_s + i.end_s) / 2.0, f(i)))
            .collect()
    };
    let x1 = shown.last().map_or(r.duration_s, |i| i.end_s);
    let rate = Panel {
        y_label: "rate (Mbit/s)".into(),
        series: vec![
            Series::solid("received", 0, at(&|i| i.rate_bps / 1e6)),
            Series::target("set rate", 0.0, x1, r.set_bandwidth_bps / 1e6),
        ],
    };
    let loss = Panel {
        y_label: "loss (% of sent)".into(),
        series: vec![Series::solid(
            "lost",
            1,
            at(&|i| {
                if i.sent == 0 {
                    0.0
                } else {
                    i.lost as f64 * 100.0 / i.sent as f64
                }
            }),
        )],
    };
    let delay = Panel {
        y_label: "delay variation (ms)".into(),
        series: vec![
            Series::solid("PDV max", 2, at(&|i| i.pdv_max_ms)),
            Series::solid("RFC 3550 jitter", 3, at(&|i| i.jitter_ms)),
        ],
    };
    let dropped = all.len() - shown.len();
    let x_label = if dropped > 0 {
        format!(
            "time (s) by send schedule; {dropped} partial interval(s) under {:.0}% of {:.2} s not shown",
            MIN_SHARE * 100.0,
            nominal
        )
    } else {
        format!("time (s) by send schedule, {nominal:.2} s intervals")
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
        panels: vec![rate, loss, delay],
    }
}

fn direction(r: &Report) -> &'static str {
    match r.direction {
        nagare_api::probe::Direction::ClientToServer => "client to",
        nagare_api::probe::Direction::ServerToClient => "from",
    }
}

/// Rate, size, duration, streams and the verdict.
fn subtitle(r: &Report) -> String {
    let v = &r.verdict;
    let word = if v.pass { "PASS" } else { "FAIL" };
    let partial = if v.partial { "PARTIAL " } else { "" };
    let streams = if r.parallel > 1 {
        format!(" in {} streams", r.parallel)
    } else {
        String::new()
    };
    format!(
        "set {:.3} Mbit/s{streams}, {} B packets, {:.2} s; received {:.3} Mbit/s, loss {:.4}%; \
         {partial}{word} (profile {})",
        r.set_bandwidth_bps / 1e6,
        r.packet_size,
        r.duration_s,
        r.receiver.effective_bandwidth_bps / 1e6,
        r.receiver.loss_rate * 100.0,
        v.profile
    )
}

/// Draws the report's time series into the PNG file `path`.
pub(super) fn draw(path: &Path, r: &Report) -> Result<()> {
    write_png(path, &figure(r))
}
