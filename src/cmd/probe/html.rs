//! `--html FILE`: one self-contained page to send a colleague: the
//! verdict and its reasons, the key numbers, the plot inline (a base64
//! PNG, so the page needs no other file) and the whole text report.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine as _;
use nagare_api::probe::{Direction, ReceiverReport, Report, Verdict};

use super::output::human_text;
use super::plot::figure;

/// `text` safe inside HTML elements and attribute values.
fn esc(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The page of `r`, with `png` as its plot.
pub(super) fn page(r: &Report, png: &[u8]) -> String {
    let v = &r.verdict;
    let word = match (v.pass, v.partial) {
        (true, false) => "PASS",
        (false, false) => "FAIL",
        (true, true) => "PARTIAL PASS",
        (false, true) => "PARTIAL FAIL",
    };
    let color = if v.pass && !v.partial {
        "#1a7f37"
    } else if v.pass {
        "#9a6700"
    } else {
        "#cf222e"
    };
    let mut reasons = String::new();
    for why in &v.reasons {
        let _ = writeln!(reasons, "<li>{}</li>", esc(why));
    }
    let table = numbers(r);
    let img = base64::engine::general_purpose::STANDARD.encode(png);
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>nagare probe {word}: {server}, {start}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #1f2328; max-width: 1250px; }}
.verdict {{ font-size: 2.2em; font-weight: bold; color: {color}; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ text-align: left; padding: 0.2em 1em 0.2em 0; }}
th {{ color: #57606a; font-weight: normal; }}
img {{ max-width: 100%; border: 1px solid #d0d7de; }}
pre {{ background: #f6f8fa; padding: 1em; overflow-x: auto; font-size: 0.85em; }}
</style>
</head>
<body>
<h1>nagare probe: can this path carry the stream?</h1>
<p class="verdict" id="verdict">{word}</p>
<p>Profile <b>{profile}</b>.</p>
<ul id="reasons">
{reasons}</ul>
<table>
{table}</table>
<h2>Over time</h2>
<img id="plot" alt="received rate against the set rate, loss and delay variation per interval{ways}" src="data:image/png;base64,{img}">
<h2>Full report</h2>
<pre>{text}</pre>
<p><small>Command: <code>{cmd}</code></small></p>
</body>
</html>
"#,
        server = esc(&r.server),
        start = esc(&r.start),
        ways = if r.bidir { ", each way" } else { "" },
        profile = esc(&v.profile),
        text = esc(&human_text(r)),
        cmd = esc(&r.command_line.join(" ")),
    )
}

/// One way's column of the numbers table.
struct Column<'a> {
    name: &'static str,
    verdict: &'a Verdict,
    set_bps: f64,
    receiver: &'a ReceiverReport,
}

/// The rows each way has, and each way's cell of them.
const PER_WAY: [&str; 5] = ["verdict", "set rate", "received", "loss", "PDV p99.9"];

impl Column<'_> {
    fn cells(&self) -> [String; 5] {
        let x = self.receiver;
        [
            if self.verdict.pass { "PASS" } else { "FAIL" }.into(),
            format!("{:.3} Mbit/s", self.set_bps / 1e6),
            format!("{:.3} Mbit/s", x.effective_bandwidth_bps / 1e6),
            format!("{} of {} ({:.4}%)", x.lost, x.sent, x.loss_rate * 100.0),
            format!("{:.3} ms", x.pdv_ms.p999),
        ]
    }
}

/// The columns of `r`: one, or with `--bidir` one per way.
fn columns(r: &Report) -> Vec<Column<'_>> {
    if !r.bidir || r.directions.is_empty() {
        return vec![Column {
            name: "",
            verdict: &r.verdict,
            set_bps: r.set_bandwidth_bps,
            receiver: &r.receiver,
        }];
    }
    r.directions
        .iter()
        .map(|d| Column {
            name: match d.direction {
                Direction::ClientToServer => "client to server",
                Direction::ServerToClient => "server to client",
            },
            verdict: &d.verdict,
            set_bps: d.set_bandwidth_bps,
            receiver: &d.receiver,
        })
        .collect()
}

/// The key numbers as table rows; with `--bidir`, a column per way.
fn numbers(r: &Report) -> String {
    let columns = columns(r);
    let cells: Vec<[String; 5]> = columns.iter().map(Column::cells).collect();
    let both = columns.len() > 1;
    let mut table = String::new();
    if both {
        let _ = write!(table, "<tr><th></th>");
        for c in &columns {
            let _ = write!(table, "<th>{}</th>", esc(c.name));
        }
        let _ = writeln!(table, "</tr>");
    }
    // One way's verdict is the page's headline; both ways get a row.
    for (k, row) in PER_WAY.iter().enumerate().skip(usize::from(!both)) {
        let _ = write!(table, "<tr><th>{}</th>", esc(row));
        for c in &cells {
            let _ = write!(table, "<td>{}</td>", esc(&c[k]));
        }
        let _ = writeln!(table, "</tr>");
    }
    let common = [
        ("server", r.server.clone()),
        ("started", r.start.clone()),
        ("packet size", format!("{} B", r.packet_size)),
        ("duration", format!("{:.2} s", r.duration_s)),
        ("streams", r.parallel.to_string()),
        ("RTT idle median", format!("{:.3} ms", r.rtt_idle.median_ms)),
        ("nagare", r.version.clone()),
    ];
    let span = columns.len();
    for (k, val) in common {
        let _ = writeln!(
            table,
            "<tr><th>{}</th><td colspan=\"{span}\">{}</td></tr>",
            esc(k),
            esc(&val)
        );
    }
    table
}

/// Writes the page of `r` to `path`.
pub(super) fn write(path: &Path, r: &Report) -> Result<()> {
    let png = crate::plot::png(&figure(r))?;
    std::fs::write(path, page(r, &png))
        .with_context(|| format!("writing the --html page {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
