//! What `analyze`, `recv --analyze` and send's self-check print: a line
//! per second while it runs, then one screen: the verdict in plain words
//! and in the standard's terms, the frames that kept each type, the worst
//! frames that broke one, and the key figures (histograms with
//! `--verbose`). Every judgement here was made in proto; this only
//! lays it out.

use nagare_api::st2110::{AnalyzeReport, Bin, SecondLine, VrxSummary};
use nagare_proto::video::st2110_21::{RtpClock, VrxRange};

fn vrx(r: VrxRange) -> String {
    format!("{}..{}", r.min, r.peak)
}

/// The line of one second.
pub(crate) fn second(l: &SecondLine) -> String {
    format!(
        "analyze: {:>4} s  {:>3} frames  Cinst peak {:>3}  VRX gapped {:>9} linear {:>9}  FPT max {:>8.1} µs  lost {}  -> {}",
        l.second,
        l.frames,
        l.cinst_peak,
        vrx(l.vrx_gapped),
        vrx(l.vrx_linear),
        l.fpt_max_us,
        l.lost,
        l.compliance
    )
}

/// A histogram as rows of `lower  count  bar`, the bar scaled to the
/// fullest bin; rows of empty bins between full ones are kept, runs of
/// more than three collapsed.
fn histogram(title: &str, unit: &str, bins: &[Bin]) -> String {
    let mut out = format!("{title}\n");
    let top = bins.iter().map(|b| b[1]).max().unwrap_or(0).max(1);
    let mut empty_run = 0;
    for b in bins {
        if b[1] == 0 {
            empty_run += 1;
            if empty_run == 4 {
                out.push_str("      ...\n");
            }
            if empty_run >= 4 {
                continue;
            }
        } else {
            empty_run = 0;
        }
        let bar = "#".repeat(((b[1] * 40 + top - 1) / top) as usize);
        out.push_str(&format!("  {:>8}{unit} {:>10}  {bar}\n", b[0], b[1]));
    }
    out
}

fn vrx_line(name: &str, v: &VrxSummary) -> String {
    match v.range {
        Some(r) => format!(
            "VRX {name} {}..{} (p99 {:.0}, {} packets found it empty)",
            r.min, r.peak, v.quantiles.p99, v.underflows
        ),
        None => format!("VRX {name}: no frame judged"),
    }
}

/// Broken frames printed (`--json` keeps the worst thousand).
const BROKEN_SHOWN: usize = 10;

/// The summary after the run: one screen (the verdict in plain words and
/// the standard's, the frames per type, the worst broken frames, the key
/// figures); `verbose` adds the Cinst and FPT histograms.
pub(crate) fn summary(r: &AnalyzeReport, verbose: bool) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let ssrc = r
        .ssrc
        .map_or(String::new(), |s| format!(", SSRC {s:#010x}"));
    line(format!("analyze: {}{ssrc}", r.source));
    if let Some(m) = model_line(r) {
        line(m);
    }
    line(format!(
        "  {} frames judged ({} without a marker), {} packets, {} lost, {} sequence errors, {} arrivals out of order",
        r.frames, r.incomplete_frames, r.packets, r.lost, r.seq_errors, r.backwards
    ));
    if let Some(s) = &r.size_mismatch {
        line(format!(
            "  WARNING: {s}; the limits below assume the size given"
        ));
    }
    for l in verdict_lines(r) {
        line(l);
    }
    for l in broken_lines(r) {
        line(format!("  {l}"));
    }
    if r.frames > 0 {
        for l in figures(r) {
            line(format!("  {l}"));
        }
    }
    if r.not_rtp + r.not_video + r.foreign + r.other > 0 {
        line(format!(
            "  not analysed: {} not RTP, {} RTP but not RFC 4175 video, {} of another SSRC, {} other captured frames",
            r.not_rtp, r.not_video, r.foreign, r.other
        ));
    }
    if verbose {
        out.push_str(&histogram("Cinst over packets:", "", &r.cinst_histogram));
        out.push_str(&histogram("FPT over frames:", " µs", &r.fpt_histogram_us));
    }
    out.push_str(&verdict(r));
    out
}

/// The model and limits on one line.
fn model_line(r: &AnalyzeReport) -> Option<String> {
    let m = r.model.as_ref()?;
    let l = &m.limits;
    Some(format!(
        "  model: {} packets a frame at {} fps, {} lines; TRS {:.3} µs (linear {:.3}), TRoffset {:.1} µs; CMAX N {} NL {} W {}, VRX_FULL N {} W {}",
        m.packets,
        m.rate,
        m.lines,
        m.trs_ns / 1e3,
        m.trs_linear_ns / 1e3,
        m.tr_offset_ns / 1e3,
        l.cmax_n,
        l.cmax_nl,
        l.cmax_w,
        l.vrx_full_n,
        l.vrx_full_w
    ))
}

/// The verdict in plain words, then in the standard's terms, then the
/// frames that kept each type.
pub(crate) fn verdict_lines(r: &AnalyzeReport) -> Vec<String> {
    let Some(v) = &r.verdict else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut plain = v.plain.iter();
    if let Some(head) = plain.next() {
        out.push(format!("  verdict: {head}"));
    }
    out.extend(plain.map(|p| format!("    {p}")));
    out.push(format!("    in the standard's terms: {}", v.text));
    let k = &r.frames_kept;
    out.push(format!(
        "  frames that kept each type: N {} of {f}, NL {} of {f}, W {} of {f}",
        k.n,
        k.nl,
        k.w,
        f = r.frames
    ));
    out
}

/// The frames that broke the explained type, worst first, at most ten.
pub(crate) fn broken_lines(r: &AnalyzeReport) -> Vec<String> {
    let Some(t) = r.broken_type else {
        return Vec::new();
    };
    if r.broken_total == 0 {
        return vec![format!("no frame broke {}", t.plain())];
    }
    let shown = r.broken.len().min(BROKEN_SHOWN);
    let more = if r.broken_total as usize > shown {
        format!(
            " (the worst {shown}; --json lists up to {})",
            AnalyzeReport::MAX_BROKEN
        )
    } else {
        String::new()
    };
    let mut out = vec![format!(
        "{} of {} frames broke {}, worst first{more}:",
        r.broken_total,
        r.frames,
        t.plain()
    )];
    for b in &r.broken[..shown] {
        out.push(format!(
            "  frame {} at {:.3} s (epoch frame {}): {}: {}",
            b.index, b.at_s, b.epoch_frame, b.standard, b.plain
        ));
    }
    out
}

/// Cinst, VRX and the frame timing: on the epoch, or on the sender's own
/// grid when its RTP timestamps are not on it.
fn figures(r: &AnalyzeReport) -> Vec<String> {
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut out = vec![format!(
        "Cinst p50 {:.0} p99 {:.0} max {:.0}; {}; {}",
        r.cinst.p50,
        r.cinst.p99,
        r.cinst.max,
        vrx_line("gapped", &r.vrx_gapped),
        vrx_line("linear", &r.vrx_linear)
    )];
    let step = format!(
        "frame to frame {}..{} RTP ticks",
        opt(r.rtp_delta_ticks.min),
        opt(r.rtp_delta_ticks.max)
    );
    match r.rtp_clock {
        Some(RtpClock::OffEpoch { offset_s }) => {
            out.push(format!(
                "the RTP timestamps are not on the ST 2110-10 epoch (a frame's RTP time lies {:.1} s from its arrival): the sender does not stamp PTP/TAI time, so FPT, latency and VRX on the epoch grid mean little",
                offset_s.abs()
            ));
            if let Some(g) = &r.grid_lag_us {
                out.push(format!(
                    "on the sender's own grid (its RTP timestamps): frames start 0..{} µs late (mean {:.1}); {step}",
                    opt(g.max),
                    g.mean
                ));
            }
        }
        _ => out.push(format!(
            "FPT {:.1}..{:.1} µs (p50 {:.1}; TRoffset {:.1}); RTP offset {}..{} ticks; latency {}..{} µs (mean {:.1}); {step}",
            r.fpt_us.min,
            r.fpt_us.max,
            r.fpt_us.p50,
            r.model.as_ref().map_or(0.0, |m| m.tr_offset_ns / 1e3),
            opt(r.rtp_offset_ticks.min),
            opt(r.rtp_offset_ticks.max),
            opt(r.latency_us.min),
            opt(r.latency_us.max),
            r.latency_us.mean,
        )),
    }
    out
}

/// The verdict lines.
fn verdict(r: &AnalyzeReport) -> String {
    let mut out = match (&r.verdict, &r.error) {
        (Some(v), _) => format!("analyze: verdict: {}\n", v.compliance.plain()),
        (None, Some(e)) => format!("analyze: no verdict: {e}\n"),
        (None, None) => "analyze: no verdict: no whole frame was seen\n".to_string(),
    };
    if let (Some(t), Some(met)) = (r.declared, r.declared_met) {
        let says = if met { "keeps to" } else { "does NOT keep to" };
        out.push_str(&format!(
            "analyze: the stream {says} the type its SDP declares ({}, {})\n",
            t.plain(),
            t.sdp_value()
        ));
    }
    out
}
