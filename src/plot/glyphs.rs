//! Text drawn where its glyphs belong. plotters 0.3.7 draws each glyph
//! of an ab_glyph font with its ink box at the pen position, dropping the
//! glyph's left side bearing (`px_bounds().min.x`), so a narrow glyph
//! such as "." or "1" sits at the left of its cell and the gap it should
//! have before it opens after it: every tick label read "0. 5" and every
//! address "127. 0. 0. 1". [`Glyphs`] wraps the bitmap backend, passes
//! every shape through, and lays text out itself with the same font and
//! the same box plotters measures: each glyph's outline drawn at the pen
//! plus its own bounds, on a baseline a descent above the box's bottom.

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

type Error<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

/// The bitmap backend, with text laid out by [`Glyphs::draw_text`].
pub(crate) struct Glyphs<'a> {
    inner: BitMapBackend<'a>,
    font: FontRef<'static>,
}

impl<'a> Glyphs<'a> {
    /// Draws on `inner` with `font` for every text.
    pub(crate) fn new(inner: BitMapBackend<'a>, font: FontRef<'static>) -> Glyphs<'a> {
        Glyphs { inner, font }
    }
}

/// Pixels `text` takes at `size` in `font`.
pub(crate) fn width(font: &FontRef<'static>, size: f64, text: &str) -> u32 {
    let scaled = font.as_scaled(PxScale::from(size as f32));
    layout(&scaled, size, text).0.max(0) as u32
}

/// Width and height of `text` at `size`: the advances with kerning, and
/// plotters' own line height (size / 1.24), so boxes it measures itself
/// (legends) agree with what is drawn.
fn layout<F: Font, S: ScaleFont<F>>(font: &S, size: f64, text: &str) -> (i32, i32) {
    let mut width = 0f32;
    let mut prev = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(p) = prev {
            width += font.kern(p, id);
        }
        width += font.h_advance(id);
        prev = Some(id);
    }
    (width.round() as i32, (size / 1.24) as i32)
}

impl<'a> DrawingBackend for Glyphs<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), Error<'a>> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Error<'a>> {
        self.inner.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), Error<'a>> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), Error<'a>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), Error<'a>> {
        let font = self.font.as_scaled(PxScale::from(style.size() as f32));
        let (w, h) = layout(&font, style.size(), text);
        Ok((w.max(0) as u32, h.max(0) as u32))
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), Error<'a>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let font = self.font.as_scaled(PxScale::from(style.size() as f32));
        let (w, h) = layout(&font, style.size(), text);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Right => -w,
            HPos::Center => -w / 2,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        // Descenders fill the box's bottom, capitals reach its top.
        let baseline = h as f32 + font.descent();
        let turn = style.transform();
        let (bw, bh) = self.get_size();
        let mut pen = 0f32;
        let mut prev = None;
        let mut failed = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                pen += font.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(font.scale(), point(pen, baseline));
            pen += font.h_advance(id);
            let Some(outline) = font.outline_glyph(glyph) else {
                continue; // a space: nothing to draw
            };
            let bounds = outline.px_bounds();
            let (x0, y0) = (bounds.min.x as i32 + dx, bounds.min.y as i32 + dy);
            outline.draw(|x, y, coverage| {
                let (tx, ty) = turn.transform(x0 + x as i32, y0 + y as i32);
                let (px, py) = (pos.0 + tx, pos.1 + ty);
                if px < 0 || py < 0 || px >= bw as i32 || py >= bh as i32 || failed.is_some() {
                    return;
                }
                let ink = BackendColor {
                    alpha: color.alpha * f64::from(coverage),
                    rgb: color.rgb,
                };
                if let Err(e) = self.inner.draw_pixel((px, py), ink) {
                    failed = Some(e);
                }
            });
        }
        failed.map_or(Ok(()), Err)
    }
}
