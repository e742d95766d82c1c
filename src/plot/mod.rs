//! The look of every report plot (probe, loadtest and analyze): a
//! two-line title, stacked panels over one x axis, labelled axes with
//! ticks, a legend per panel, and targets and limits as dashed lines of
//! their own colour. Drawn with plotters' bitmap backend wrapped in
//! [`glyphs::Glyphs`], which lays text out itself (plotters misplaces
//! glyphs); text comes from the bundled DejaVu Sans Mono (assets/fonts),
//! so no system font is needed. The PNG is built in memory: written to a
//! file, or inlined in HTML.

mod glyphs;

pub(crate) use glyphs::Glyphs;

use std::io::Cursor;
use std::path::Path;
use std::sync::Once;

use ab_glyph::FontRef;
use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// The bundled font: DejaVu Sans Mono (Bitstream Vera licence, see
/// assets/fonts/DejaVu-LICENSE.txt).
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSansMono.ttf");
/// The family every plot names (there is one font).
pub(crate) const FAMILY: &str = "sans-serif";

/// Width of a plot, pixels.
pub(crate) const WIDTH: u32 = 1200;
/// Height of one panel, pixels.
pub(crate) const PANEL_HEIGHT: u32 = 300;
/// Height of the title block with a one-line subtitle, pixels.
const TITLE_HEIGHT: u32 = 80;
/// Sizes of the title and subtitle text, pixels.
const TITLE_SIZE: f64 = 26.0;
const SUBTITLE_SIZE: f64 = 20.0;
/// Height each further subtitle line adds, pixels.
const SUBTITLE_LINE: u32 = 26;
/// Left margin of the title block, pixels.
const TITLE_LEFT: u32 = 20;

/// Series colours, in order; the set rate has its own.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];
/// The set (target) rate line.
pub(crate) const SET_COLOR: RGBColor = RGBColor(255, 127, 14);

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stroke {
    /// A solid line with a dot per point.
    Solid,
    /// A dashed line without points (targets, limits).
    Dashed,
}

/// One named line.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, x ascending.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub color: RGBColor,
    /// Line style.
    pub stroke: Stroke,
}

impl Series {
    /// A solid series in the `i`-th palette colour.
    pub(crate) fn solid(name: &str, i: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_string(),
            points,
            color: PALETTE[i % PALETTE.len()],
            stroke: Stroke::Solid,
        }
    }

    /// The dashed set-rate line across `x0..x1` at `y`.
    pub(crate) fn target(name: &str, x0: f64, x1: f64, y: f64) -> Series {
        Series {
            name: name.to_string(),
            points: vec![(x0, y), (x1, y)],
            color: SET_COLOR,
            stroke: Stroke::Dashed,
        }
    }
}

/// One panel: a y axis and its series.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    /// Y axis label, with unit.
    pub y_label: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// A whole figure: title lines, an x axis shared by the panels.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    /// First title line: what and when.
    pub title: String,
    /// Second title line: rate, size, verdict.
    pub subtitle: String,
    /// X axis label, with unit.
    pub x_label: String,
    /// Panels, top to bottom.
    pub panels: Vec<Panel>,
}

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Only fails on a malformed font, which the bundled one is not;
        // text would then be missing, not the plot.
        let _ = register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// The x range of every panel's points, with room for a single point.
fn x_range(f: &Figure) -> (f64, f64) {
    let xs = f
        .panels
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.points);
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
        (l.min(p.0), h.max(p.0))
    });
    if lo.is_finite() && hi > lo {
        (lo, hi)
    } else if lo.is_finite() {
        (lo - 0.5, lo + 0.5)
    } else {
        (0.0, 1.0)
    }
}

/// A y range from 0 (or the lowest point) to a little above the highest,
/// never empty, so a flat zero line still gets a readable axis.
fn y_range(p: &Panel) -> (f64, f64) {
    let ys = p.series.iter().flat_map(|s| &s.points).map(|q| q.1);
    let (lo, hi) = ys.fold((0.0f64, f64::NEG_INFINITY), |(l, h), y| {
        (l.min(y), h.max(y))
    });
    if !hi.is_finite() || hi <= lo {
        return (lo, lo + 1.0);
    }
    // Headroom for the legend, upper right.
    (lo, hi + (hi - lo) * 0.35)
}

/// A drawing area of a plot being rendered.
pub(crate) type Area<'a> = DrawingArea<Glyphs<'a>, plotters::coord::Shift>;
/// What drawing on an [`Area`] returns.
pub(crate) type DrawResult<T> =
    std::result::Result<T, DrawingAreaErrorKind<<Glyphs<'static> as DrawingBackend>::ErrorType>>;

/// Renders a `width`×`height` picture drawn by `draw` (on white, the
/// bundled font registered) and returns it as PNG bytes.
pub(crate) fn render(
    width: u32,
    height: u32,
    draw: impl FnOnce(&Area<'_>) -> DrawResult<()>,
) -> Result<Vec<u8>> {
    fonts();
    let font = font()?;
    let mut rgb = vec![255u8; (width * height * 3) as usize];
    {
        let bitmap = BitMapBackend::with_buffer(&mut rgb, (width, height));
        let root = Glyphs::new(bitmap, font).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow!("drawing the plot: {e}"))?;
        draw(&root).map_err(|e| anyhow!("drawing the plot: {e}"))?;
        root.present()
            .map_err(|e| anyhow!("drawing the plot: {e}"))?;
    }
    let img = image::RgbImage::from_raw(width, height, rgb)
        .context("the plot's pixel buffer has the wrong size")?;
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageOutputFormat::Png)
        .context("encoding the plot as PNG")?;
    Ok(out.into_inner())
}

fn font() -> Result<FontRef<'static>> {
    FontRef::try_from_slice(FONT).map_err(|_| anyhow!("the bundled font does not load"))
}

/// `text` broken into lines of at most `max` pixels at `size`: whole
/// clauses ("; ") where they fit, words where a clause alone does not,
/// so a long subtitle wraps instead of running off the picture.
fn wrap(font: &FontRef<'static>, size: f64, text: &str, max: u32) -> Vec<String> {
    let fits = |t: &str| glyphs::width(font, size, t.trim_end()) <= max;
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut push = |line: &mut String, piece: &str| {
        if line.is_empty() || fits(&format!("{line}{piece}")) {
            line.push_str(piece);
        } else {
            lines.push(line.trim_end().to_string());
            *line = piece.to_string();
        }
    };
    for clause in text.split_inclusive("; ") {
        if fits(clause) {
            push(&mut line, clause);
        } else {
            clause
                .split_inclusive(' ')
                .for_each(|word| push(&mut line, word));
        }
    }
    lines.push(line.trim_end().to_string());
    lines
}

/// The subtitle's lines across the figure's width.
fn subtitle_lines(font: &FontRef<'static>, f: &Figure) -> Vec<String> {
    wrap(font, SUBTITLE_SIZE, &f.subtitle, WIDTH - 2 * TITLE_LEFT)
}

/// Draws `f` and returns it as PNG bytes.
pub(crate) fn png(f: &Figure) -> Result<Vec<u8>> {
    let sub = subtitle_lines(&font()?, f);
    let title = TITLE_HEIGHT + SUBTITLE_LINE * (sub.len().max(1) as u32 - 1);
    let height = title + PANEL_HEIGHT * f.panels.len().max(1) as u32;
    render(WIDTH, height, |root| draw(root, f, title, &sub))
}

/// Draws `f` into the PNG file `path`.
pub(crate) fn write_png(path: &Path, f: &Figure) -> Result<()> {
    let bytes = png(f)?;
    std::fs::write(path, bytes).with_context(|| format!("writing the plot {}", path.display()))
}

fn draw(root: &Area<'_>, f: &Figure, height: u32, subtitle: &[String]) -> DrawResult<()> {
    let (title, body) = root.split_vertically(height);
    let left = TITLE_LEFT as i32;
    title.draw(&Text::new(
        f.title.clone(),
        (left, 12),
        (FAMILY, TITLE_SIZE).into_font().color(&BLACK),
    ))?;
    for (k, line) in subtitle.iter().enumerate() {
        title.draw(&Text::new(
            line.clone(),
            (left, 46 + (k as u32 * SUBTITLE_LINE) as i32),
            (FAMILY, SUBTITLE_SIZE)
                .into_font()
                .color(&RGBColor(60, 60, 60)),
        ))?;
    }
    let xs = x_range(f);
    let n = f.panels.len().max(1);
    for (i, (panel, area)) in f.panels.iter().zip(body.split_evenly((n, 1))).enumerate() {
        // Only the bottom panel names the shared x axis.
        let x_label = (i + 1 == n).then_some(f.x_label.as_str());
        draw_panel(&area, panel, xs, x_label)?;
    }
    Ok(())
}

fn draw_panel(area: &Area<'_>, p: &Panel, xs: (f64, f64), x_label: Option<&str>) -> DrawResult<()> {
    let ys = y_range(p);
    let mut chart = ChartBuilder::on(area)
        .margin_left(20)
        .margin_right(30)
        .margin_top(10)
        .x_label_area_size(if x_label.is_some() { 50 } else { 30 })
        .y_label_area_size(90)
        .build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)?;
    let label_font = (FAMILY, 18).into_font();
    let tick_font = (FAMILY, 15).into_font();
    chart
        .configure_mesh()
        .x_labels(12)
        .y_labels(6)
        .x_desc(x_label.unwrap_or(""))
        .y_desc(p.y_label.as_str())
        .axis_desc_style(label_font)
        .label_style(tick_font)
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .x_label_formatter(&|x| trim(*x))
        .y_label_formatter(&|y| trim(*y))
        .draw()?;
    for s in &p.series {
        let color = s.color;
        let style =
            ShapeStyle::from(&color).stroke_width(if s.stroke == Stroke::Dashed { 3 } else { 2 });
        let legend = move |(x, y): (i32, i32)| PathElement::new([(x, y), (x + 24, y)], style);
        match s.stroke {
            Stroke::Solid => {
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), style).point_size(3))?
                    .label(s.name.as_str())
                    .legend(legend);
            }
            Stroke::Dashed => {
                chart
                    .draw_series(DashedLineSeries::new(
                        s.points.iter().copied(),
                        12,
                        8,
                        style,
                    ))?
                    .label(s.name.as_str())
                    .legend(legend);
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 16).into_font())
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()?;
    Ok(())
}

/// A tick label with as few digits as say it: 2, 2.5, 0.125.
pub(crate) fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_say_no_more_digits_than_needed() {
        assert_eq!(trim(2.0), "2");
        assert_eq!(trim(2.5), "2.5");
        assert_eq!(trim(0.125), "0.125");
        assert_eq!(trim(-0.0), "0");
    }

    #[test]
    fn a_figure_is_a_png_of_the_expected_size() {
        let f = Figure {
            title: "t".into(),
            subtitle: "s".into(),
            x_label: "time (s)".into(),
            panels: vec![Panel {
                y_label: "rate (Mbit/s)".into(),
                series: vec![
                    Series::solid("received", 0, vec![(0.0, 1.0), (1.0, 2.0)]),
                    Series::target("set", 0.0, 1.0, 2.0),
                ],
            }],
        };
        let png = png(&f).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let img = image::load_from_memory(&png).unwrap();
        assert_eq!(
            (img.width(), img.height()),
            (WIDTH, TITLE_HEIGHT + PANEL_HEIGHT)
        );
        // Not blank: the title and lines drew dark pixels.
        let dark = img.to_rgb8().pixels().filter(|p| p.0[0] < 100).count();
        assert!(dark > 500, "{dark} dark pixels");
    }

    /// Columns of `png` holding dark ink, as runs `(first, last)`.
    fn ink_runs(png: &[u8]) -> Vec<(u32, u32)> {
        let img = image::load_from_memory(png).unwrap().to_rgb8();
        let inked = |x: u32| (0..img.height()).any(|y| img.get_pixel(x, y).0[0] < 128);
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for x in 0..img.width() {
            if !inked(x) {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.1 + 1 == x => r.1 = x,
                _ => runs.push((x, x)),
            }
        }
        runs
    }

    #[test]
    fn a_decimal_point_sits_between_its_digits() {
        // plotters put each glyph's ink at the pen, so "." hugged the "0"
        // and a space opened before the "5": "0. 5".
        let png = render(200, 60, |root| {
            root.draw(&Text::new(
                "0.5",
                (10, 10),
                (FAMILY, 40).into_font().color(&BLACK),
            ))
        })
        .unwrap();
        let runs = ink_runs(&png);
        assert_eq!(runs.len(), 3, "{runs:?}");
        let before = runs[1].0 - runs[0].1;
        let after = runs[2].0 - runs[1].1;
        assert!(
            before.abs_diff(after) <= 2,
            "gaps {before} and {after}: {runs:?}"
        );
        // Monospace: the digits' cells are two advances apart (24 px at
        // 40 px, DejaVu Sans Mono's 1233/2048 em of a 2384-unit height).
        let centre = |r: (u32, u32)| (r.0 + r.1) / 2;
        assert!(
            centre(runs[2]).abs_diff(centre(runs[0]) + 2 * 21) <= 2,
            "{runs:?}"
        );
    }

    #[test]
    fn a_long_subtitle_wraps_instead_of_running_off() {
        let font = font().unwrap();
        let long = "set 9000.000 Mbit/s in 16 streams, 8960 B packets, 30.00 s; received 8999.999 Mbit/s, loss 0.0001%; PARTIAL FAIL (profile hd-2110)";
        let lines = wrap(&font, SUBTITLE_SIZE, long, WIDTH - 2 * TITLE_LEFT);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].ends_with("PARTIAL FAIL (profile hd-2110)"),
            "{lines:?}"
        );
        assert_eq!(lines.join(" "), long);
        for l in &lines {
            assert!(glyphs::width(&font, SUBTITLE_SIZE, l) <= WIDTH - 2 * TITLE_LEFT);
        }
        let f = Figure {
            title: "t".into(),
            subtitle: long.into(),
            x_label: "x".into(),
            panels: vec![],
        };
        let img = image::load_from_memory(&png(&f).unwrap()).unwrap();
        assert_eq!(img.height(), TITLE_HEIGHT + SUBTITLE_LINE + PANEL_HEIGHT);
    }

    #[test]
    fn empty_and_flat_panels_still_have_axes() {
        let p = Panel {
            y_label: "loss (%)".into(),
            series: vec![Series::solid("loss", 1, vec![(0.0, 0.0), (1.0, 0.0)])],
        };
        assert_eq!(y_range(&p), (0.0, 1.0));
        let empty = Figure {
            title: String::new(),
            subtitle: String::new(),
            x_label: String::new(),
            panels: vec![],
        };
        assert_eq!(x_range(&empty), (0.0, 1.0));
        assert!(png(&empty).is_ok());
    }
}
