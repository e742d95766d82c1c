//! `analyze --plot FILE.png`: the picture EBU LIST shows of a stream —
//! Cinst and VRX of every frame against their limits over time, and the
//! distribution of FPT — drawn with plotters' bitmap backend and a
//! bundled font.

use std::path::Path;
use std::sync::Once;

use anyhow::{Result, anyhow};
use nagare_api::st2110::AnalyzeReport;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::analysis::collect::FramePoint;

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 1000;
/// DejaVu Sans Mono (Bitstream Vera licence, assets/fonts/DejaVu-LICENSE.txt).
const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSansMono.ttf");

fn font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| anyhow!("the bundled font does not load"));
    });
    result
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("{e:?}")
}

/// Draws the three panels into `path`.
pub(crate) fn draw(path: &Path, report: &AnalyzeReport, points: &[FramePoint]) -> Result<()> {
    font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let title = match &report.verdict {
        Some(v) => format!(
            "{}: {} ({} receiver)",
            report.source, v.compliance, v.schedule
        ),
        None => format!("{}: no verdict", report.source),
    };
    let root = root.titled(&title, ("sans-serif", 16)).map_err(err)?;
    let panels = root.split_evenly((3, 1));
    let end = points.last().map_or(1.0, |p| p.t.max(1e-3));
    cinst(&panels[0], report, points, end)?;
    vrx(&panels[1], report, points, end)?;
    fpt(&panels[2], report)?;
    root.present().map_err(err)?;
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One panel in the common style: caption, axes over `x` and `y` with
/// ticks, and the mesh labelled with `units` (x, y).
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    units: (&str, &str),
) -> Result<Chart<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(units.0)
        .y_desc(units.1)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// The panel's legend box.
fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// A limit line across the time axis, labelled.
fn limit(
    chart: &mut Chart<'_, '_>,
    end: f64,
    value: f64,
    name: &str,
    color: RGBColor,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(
            [(0.0, value), (end, value)],
            color.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!("{name} {value}"))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    Ok(())
}

fn cinst(area: &Area<'_>, r: &AnalyzeReport, points: &[FramePoint], end: f64) -> Result<()> {
    let limits = r.model.as_ref().map(|m| m.limits);
    let top = points.iter().map(|p| p.cinst_peak).max().unwrap_or(0);
    let top = top.max(limits.map_or(0, |l| l.cmax_w)) as f64 * 1.15 + 1.0;
    let mut chart = panel(
        area,
        "Cinst peak per frame",
        0.0..end,
        0.0..top,
        ("seconds", "packets"),
    )?;
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t, p.cinst_peak as f64)),
            BLUE.stroke_width(1),
        ))
        .map_err(err)?
        .label("Cinst peak")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    if let Some(l) = limits {
        limit(&mut chart, end, l.cmax_n as f64, "CMAX_N", GREEN)?;
        limit(&mut chart, end, l.cmax_nl as f64, "CMAX_NL", CYAN)?;
        limit(&mut chart, end, l.cmax_w as f64, "CMAX_W", RED)?;
    }
    legend(&mut chart)?;
    Ok(())
}

fn vrx(area: &Area<'_>, r: &AnalyzeReport, points: &[FramePoint], end: f64) -> Result<()> {
    let limits = r.model.as_ref().map(|m| m.limits);
    let schedule_linear = r
        .verdict
        .as_ref()
        .is_some_and(|v| v.schedule == nagare_proto::video::st2110_21::ReadSchedule::Linear);
    let pick = |p: &FramePoint| {
        if schedule_linear {
            p.vrx_linear
        } else {
            p.vrx_gapped
        }
    };
    let hi = points.iter().map(|p| pick(p).peak).max().unwrap_or(0);
    let lo = points.iter().map(|p| pick(p).min).min().unwrap_or(0).min(0);
    // The wide limit only when the stream comes near it.
    let full_n = limits.map_or(0, |l| l.vrx_full_n) as i64;
    let top = hi.max(full_n) as f64 * 1.15 + 1.0;
    let name = if schedule_linear { "linear" } else { "gapped" };
    let mut chart = panel(
        area,
        &format!("VRX per frame ({name} receiver)"),
        0.0..end,
        (lo as f64 - 1.0)..top,
        ("seconds", "packets"),
    )?;
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t, pick(p).peak as f64)),
            BLUE.stroke_width(1),
        ))
        .map_err(err)?
        .label("VRX peak")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t, pick(p).min as f64)),
            MAGENTA.stroke_width(1),
        ))
        .map_err(err)?
        .label("VRX min")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MAGENTA));
    limit(&mut chart, end, 0.0, "empty", BLACK)?;
    if let Some(l) = limits {
        limit(&mut chart, end, l.vrx_full_n as f64, "VRX_FULL_N", GREEN)?;
        if top > l.vrx_full_w as f64 * 0.5 {
            limit(&mut chart, end, l.vrx_full_w as f64, "VRX_FULL_W", RED)?;
        }
    }
    legend(&mut chart)?;
    Ok(())
}

fn fpt(area: &Area<'_>, r: &AnalyzeReport) -> Result<()> {
    let bins = &r.fpt_histogram_us[..];
    let width = match bins {
        [a, b, ..] => (b[0] - a[0]).max(1),
        _ => 10,
    } as f64;
    let x0 = bins.first().map_or(0, |b| b[0]) as f64;
    let x1 = bins.last().map_or(1, |b| b[0]) as f64 + width;
    let top = bins.iter().map(|b| b[1]).max().unwrap_or(1) as f64 * 1.15 + 1.0;
    let mut chart = panel(
        area,
        "FPT (first packet time after the frame's epoch start)",
        x0..x1,
        0.0..top,
        ("µs", "frames"),
    )?;
    chart
        .draw_series(bins.iter().map(|b| {
            let x = b[0] as f64;
            Rectangle::new([(x, 0.0), (x + width * 0.9, b[1] as f64)], BLUE.filled())
        }))
        .map_err(err)?;
    if let Some(m) = &r.model {
        let tro = m.tr_offset_ns / 1e3;
        if (x0..=x1).contains(&tro) {
            chart
                .draw_series(LineSeries::new(
                    [(tro, 0.0), (tro, top)],
                    RED.stroke_width(1),
                ))
                .map_err(err)?
                .label(format!("TRoffset {tro:.1} µs"))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
            legend(&mut chart)?;
        }
    }
    Ok(())
}
