//! What `analyze` prints: a line per second while it runs, then the
//! model, the verdict with its margin and the histograms.

use nagare_api::st2110::{AnalyzeReport, Bin, SecondLine, VrxSummary};
use nagare_proto::video::st2110_21::VrxRange;

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
            "  VRX {name}: {}..{} (p50 {:.0}, p99 {:.0}), {} packets found it empty",
            r.min, r.peak, v.quantiles.p50, v.quantiles.p99, v.underflows
        ),
        None => format!("  VRX {name}: no frame judged"),
    }
}

/// The summary after the run.
pub(crate) fn summary(r: &AnalyzeReport) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("analyze: {}", r.source));
    if let Some(m) = &r.model {
        let l = &m.limits;
        line(format!(
            "  model: {} packets a frame at {} fps, {} lines; TRS {:.3} µs (linear {:.3}), TRoffset {:.1} µs, drain {:.3} µs",
            m.packets,
            m.rate,
            m.lines,
            m.trs_ns / 1e3,
            m.trs_linear_ns / 1e3,
            m.tr_offset_ns / 1e3,
            m.drain_ns / 1e3
        ));
        line(format!(
            "  limits: CMAX N {} NL {} W {}; VRX_FULL N {} W {}",
            l.cmax_n, l.cmax_nl, l.cmax_w, l.vrx_full_n, l.vrx_full_w
        ));
    }
    line(format!(
        "  {} frames judged ({} without a marker), {} packets, {} lost, {} sequence errors, {} arrivals out of order",
        r.frames, r.incomplete_frames, r.packets, r.lost, r.seq_errors, r.backwards
    ));
    let v = &r.frame_verdicts;
    line(format!(
        "  frames by verdict: N {}  NL {}  W {}  not compliant {}",
        v.n, v.nl, v.w, v.not_compliant
    ));
    line(format!(
        "  Cinst p50 {:.0} p99 {:.0} p99.9 {:.0} max {:.0}",
        r.cinst.p50, r.cinst.p99, r.cinst.p999, r.cinst.max
    ));
    line(vrx_line("gapped", &r.vrx_gapped));
    line(vrx_line("linear", &r.vrx_linear));
    line(format!(
        "  FPT (TRoffset measured) min {:.1} p50 {:.1} max {:.1} µs",
        r.fpt_us.min, r.fpt_us.p50, r.fpt_us.max
    ));
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    line(format!(
        "  RTP offset {}..{} ticks; latency {}..{} µs (mean {:.1}); inter-frame RTP delta {}..{} ticks",
        opt(r.rtp_offset_ticks.min),
        opt(r.rtp_offset_ticks.max),
        opt(r.latency_us.min),
        opt(r.latency_us.max),
        r.latency_us.mean,
        opt(r.rtp_delta_ticks.min),
        opt(r.rtp_delta_ticks.max)
    ));
    if r.not_rtp + r.foreign + r.other > 0 {
        line(format!(
            "  not analysed: {} not RTP, {} of another SSRC, {} other captured frames",
            r.not_rtp, r.foreign, r.other
        ));
    }
    out.push_str(&histogram("Cinst over packets:", "", &r.cinst_histogram));
    out.push_str(&histogram("FPT over frames:", " µs", &r.fpt_histogram_us));
    out.push_str(&verdict(r));
    out
}

/// The verdict lines.
fn verdict(r: &AnalyzeReport) -> String {
    let mut out = match (&r.verdict, &r.error) {
        (Some(v), _) => format!("analyze: verdict {}\n", v.text),
        (None, Some(e)) => format!("analyze: no verdict: {e}\n"),
        (None, None) => "analyze: no verdict: no whole frame was seen\n".to_string(),
    };
    if let (Some(t), Some(met)) = (r.declared, r.declared_met) {
        let says = if met { "keeps to" } else { "does NOT keep to" };
        out.push_str(&format!(
            "analyze: the stream {says} the type its SDP declares ({})\n",
            t.sdp_value()
        ));
    }
    out
}
