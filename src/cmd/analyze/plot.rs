//! `analyze --plot FILE.png`: the picture EBU LIST shows of a stream —
//! Cinst and VRX of every frame against every type's limits over time,
//! and the distribution of FPT against TRoffset — drawn through the
//! shared renderer of [`crate::plot`] (its font and text layout).

use std::path::Path;

use anyhow::{Context, Result};
use nagare_api::st2110::AnalyzeReport;
use nagare_proto::video::st2110_21::{ReadSchedule, RtpClock};
use plotters::prelude::*;

use crate::analysis::collect::FramePoint;
use crate::plot::{Area, DrawResult, FAMILY, PALETTE, SET_COLOR, trim};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 1080;
/// Height of the title block.
const TITLE: u32 = 80;
/// A limit drawn past this many times the data's top squashes the data
/// flat; it is named in the legend instead.
const SQUASH: f64 = 3.0;

/// Draws the three panels into `path`.
pub(crate) fn draw(path: &Path, report: &AnalyzeReport, points: &[FramePoint]) -> Result<()> {
    let png = crate::plot::render(WIDTH, HEIGHT, |root| panels(root, report, points))?;
    std::fs::write(path, png).with_context(|| format!("writing the plot {}", path.display()))
}

fn panels(root: &Area<'_>, r: &AnalyzeReport, points: &[FramePoint]) -> DrawResult<()> {
    let (head, body) = root.split_vertically(TITLE);
    let (title, subtitle) = titles(r);
    head.draw(&Text::new(
        title,
        (20, 12),
        (FAMILY, 24).into_font().color(&BLACK),
    ))?;
    head.draw(&Text::new(
        subtitle,
        (20, 46),
        (FAMILY, 18).into_font().color(&RGBColor(60, 60, 60)),
    ))?;
    let areas = body.split_evenly((3, 1));
    let end = points.last().map_or(1.0, |p| p.t.max(1e-3));
    cinst(&areas[0], r, points, end)?;
    vrx(&areas[1], r, points, end)?;
    fpt(&areas[2], r)
}

/// What was analysed and the verdict; the frames that kept each type.
fn titles(r: &AnalyzeReport) -> (String, String) {
    let title = match &r.verdict {
        Some(v) => format!("nagare analyze: {}: {}", r.source, v.compliance.plain()),
        None => format!("nagare analyze: {}: no verdict", r.source),
    };
    let k = &r.frames_kept;
    let mut sub = format!(
        "{} frames; kept N {}, NL {}, W {}",
        r.frames, k.n, k.nl, k.w
    );
    if let (Some(t), Some(met)) = (r.declared, r.declared_met) {
        let says = if met { "kept" } else { "NOT kept" };
        sub.push_str(&format!("; declared {}: {says}", t.name()));
    }
    if let Some(v) = &r.verdict {
        sub.push_str(&format!("; judged by the {} read schedule", v.schedule));
    }
    (title, sub)
}

type Chart<'a, 'b> = ChartContext<
    'a,
    crate::plot::Glyphs<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One panel in the shared style: axes over `x` and `y` with ticks and
/// their descriptions.
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    (x_desc, y_desc): (&str, &str),
) -> DrawResult<Chart<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .margin_left(20)
        .margin_right(30)
        .margin_top(10)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .y_labels(6)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .axis_desc_style((FAMILY, 16).into_font())
        .label_style((FAMILY, 14).into_font())
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .x_label_formatter(&|x| trim(*x))
        .y_label_formatter(&|y| trim(*y))
        .draw()?;
    Ok(chart)
}

/// The panel's legend, upper right.
fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> DrawResult<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 15).into_font())
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()
}

/// A solid series of one value per frame.
fn series(
    chart: &mut Chart<'_, '_>,
    name: &str,
    color: RGBColor,
    points: impl Iterator<Item = (f64, f64)>,
) -> DrawResult<()> {
    let style = color.stroke_width(2);
    chart
        .draw_series(LineSeries::new(points, style))?
        .label(name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
    Ok(())
}

/// A dashed limit across `x0..x1` at `y`, named with its value; beyond
/// the panel's top it is named in the legend only, as off the scale.
fn limit(
    chart: &mut Chart<'_, '_>,
    (x0, x1): (f64, f64),
    y: f64,
    name: &str,
    color: RGBColor,
) -> DrawResult<()> {
    let style = color.stroke_width(2);
    let top = chart.y_range().end;
    let (points, label) = if y <= top {
        (vec![(x0, y), (x1, y)], format!("{name} {y}"))
    } else {
        (vec![], format!("{name} {y} (above this scale)"))
    };
    chart
        .draw_series(DashedLineSeries::new(points, 10, 6, style))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
    Ok(())
}

fn cinst(area: &Area<'_>, r: &AnalyzeReport, points: &[FramePoint], end: f64) -> DrawResult<()> {
    let limits = r.model.as_ref().map(|m| m.limits);
    let top = points.iter().map(|p| p.cinst_peak).max().unwrap_or(0);
    let top = top.max(limits.map_or(0, |l| l.cmax_w)) as f64 * 1.35 + 1.0;
    let x_desc = "seconds since the first frame";
    let mut chart = panel(area, 0.0..end, 0.0..top, (x_desc, "Cinst peak (packets)"))?;
    let at = points.iter().map(|p| (p.t, p.cinst_peak as f64));
    series(&mut chart, "Cinst peak per frame", PALETTE[0], at)?;
    if let Some(l) = limits {
        limit(
            &mut chart,
            (0.0, end),
            l.cmax_n as f64,
            "CMAX_N",
            PALETTE[2],
        )?;
        limit(
            &mut chart,
            (0.0, end),
            l.cmax_nl as f64,
            "CMAX_NL",
            PALETTE[3],
        )?;
        limit(
            &mut chart,
            (0.0, end),
            l.cmax_w as f64,
            "CMAX_W",
            PALETTE[1],
        )?;
    }
    legend(&mut chart)
}

fn vrx(area: &Area<'_>, r: &AnalyzeReport, points: &[FramePoint], end: f64) -> DrawResult<()> {
    let limits = r.model.as_ref().map(|m| m.limits);
    let linear = r
        .verdict
        .as_ref()
        .is_some_and(|v| v.schedule == ReadSchedule::Linear);
    let pick = |p: &FramePoint| if linear { p.vrx_linear } else { p.vrx_gapped };
    let hi = points.iter().map(|p| pick(p).peak).max().unwrap_or(0) as f64;
    let lo = points.iter().map(|p| pick(p).min).min().unwrap_or(0).min(0) as f64;
    let full_n = limits.map_or(0, |l| l.vrx_full_n) as f64;
    let full_w = limits.map_or(0, |l| l.vrx_full_w) as f64;
    let mut top = hi.max(full_n);
    // VRX_FULL_W on the scale when that does not squash the data flat.
    if full_w <= top * SQUASH {
        top = top.max(full_w);
    }
    let top = top * 1.35 + 1.0;
    let name = if linear { "linear" } else { "gapped" };
    let desc = format!("VRX, {name} receiver (packets)");
    let x_desc = "seconds since the first frame";
    let mut chart = panel(area, 0.0..end, (lo - 1.0)..top, (x_desc, &desc))?;
    series(
        &mut chart,
        "VRX peak per frame",
        PALETTE[0],
        points.iter().map(|p| (p.t, pick(p).peak as f64)),
    )?;
    series(
        &mut chart,
        "VRX min per frame",
        PALETTE[3],
        points.iter().map(|p| (p.t, pick(p).min as f64)),
    )?;
    limit(&mut chart, (0.0, end), 0.0, "empty", BLACK)?;
    if limits.is_some() {
        limit(&mut chart, (0.0, end), full_n, "VRX_FULL_N", PALETTE[2])?;
        limit(&mut chart, (0.0, end), full_w, "VRX_FULL_W", PALETTE[1])?;
    }
    legend(&mut chart)
}

fn fpt(area: &Area<'_>, r: &AnalyzeReport) -> DrawResult<()> {
    let bins = &r.fpt_histogram_us[..];
    let width = match bins {
        [a, b, ..] => (b[0] - a[0]).max(1),
        _ => 10,
    } as f64;
    let tro = r.model.as_ref().map(|m| m.tr_offset_ns / 1e3);
    let mut x0 = bins.first().map_or(0, |b| b[0]) as f64;
    let mut x1 = bins.last().map_or(1, |b| b[0]) as f64 + width;
    // TRoffset is the reference FPT is read against: always in view.
    if let Some(t) = tro {
        let (lo, hi) = (x0.min(t), x1.max(t));
        let pad = (hi - lo).max(width) * 0.05;
        x0 = (lo - pad).max(0.0);
        x1 = hi + pad;
    }
    let top = bins.iter().map(|b| b[1]).max().unwrap_or(1) as f64 * 1.35 + 1.0;
    let off = matches!(r.rtp_clock, Some(RtpClock::OffEpoch { .. }));
    let desc = if off {
        "FPT after the frame's epoch start (µs); RTP time is off the epoch: read it as a phase"
    } else {
        "FPT: first packet after the frame's epoch start (µs)"
    };
    let mut chart = panel(area, x0..x1, 0.0..top, (desc, "frames"))?;
    let fill = PALETTE[0].filled();
    chart
        .draw_series(bins.iter().map(|b| {
            let x = b[0] as f64;
            Rectangle::new([(x, 0.0), (x + width * 0.9, b[1] as f64)], fill)
        }))?
        .label("frames per FPT bin")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 24, y + 5)], fill));
    if let Some(t) = tro {
        let style = SET_COLOR.stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new([(t, 0.0), (t, top)], 10, 6, style))?
            .label(format!("TRoffset {t:.1} µs"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
    }
    legend(&mut chart)
}
