//! `--view`: a plain X11 window that shows each received frame with
//! PutImage (no toolkit; x11rb is already there for capture).

use anyhow::{Context, bail};
use nagare_proto::{PixelFormat, VideoFormat};
use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{
    ConnectionExt as _, CreateGCAux, CreateWindowAux, EventMask, Gcontext, ImageFormat, Window,
    WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

/// A window showing RGB24 frames.
pub(super) struct Viewer {
    conn: RustConnection,
    window: Window,
    gc: Gcontext,
    width: u16,
    height: u16,
    depth: u8,
    offsets: [usize; 3],
    pixels: Vec<u8>,
}

impl Viewer {
    /// Opens a window of the frame's size on $DISPLAY.
    pub(super) fn open(format: VideoFormat) -> anyhow::Result<Self> {
        if format.pixel_format != PixelFormat::Rgb24 {
            bail!(
                "the window shows rgb24 screens; this one is {}",
                format.pixel_format
            );
        }
        let (conn, n) = x11rb::connect(None)
            .context("connecting to $DISPLAY for the window; is an X server running?")?;
        let setup = conn.setup();
        let screen = &setup.roots[n];
        let depth = screen.root_depth;
        let offsets =
            super::capture::x11::rgb_offsets(setup, screen).context("opening the window")?;
        let (width, height) = (
            u16::try_from(format.width).context("screen too wide for X11")?,
            u16::try_from(format.height).context("screen too tall for X11")?,
        );
        let root = screen.root;
        let window = conn.generate_id()?;
        conn.create_window(
            depth,
            window,
            root,
            0,
            0,
            width,
            height,
            0,
            WindowClass::INPUT_OUTPUT,
            screen.root_visual,
            &CreateWindowAux::new()
                .background_pixel(screen.black_pixel)
                .event_mask(EventMask::EXPOSURE),
        )?;
        conn.change_property8(
            x11rb::protocol::xproto::PropMode::REPLACE,
            window,
            x11rb::protocol::xproto::AtomEnum::WM_NAME,
            x11rb::protocol::xproto::AtomEnum::STRING,
            b"nagare tree",
        )?;
        let gc = conn.generate_id()?;
        conn.create_gc(gc, window, &CreateGCAux::new())?;
        conn.map_window(window)?;
        conn.flush()?;
        Ok(Viewer {
            conn,
            window,
            gc,
            width,
            height,
            depth,
            offsets,
            pixels: vec![0; usize::from(width) * usize::from(height) * 4],
        })
    }

    /// Draws one RGB24 frame.
    pub(super) fn show(&mut self, rgb: &[u8]) -> anyhow::Result<()> {
        let [r, g, b] = self.offsets;
        for (dst, src) in self.pixels.chunks_exact_mut(4).zip(rgb.chunks_exact(3)) {
            dst[r] = src[0];
            dst[g] = src[1];
            dst[b] = src[2];
        }
        // Send in strips that fit one request.
        let line = usize::from(self.width) * 4;
        let max = self.conn.maximum_request_bytes().saturating_sub(64);
        let rows = (max / line).clamp(1, usize::from(self.height));
        for (i, strip) in self.pixels.chunks(rows * line).enumerate() {
            self.conn.put_image(
                ImageFormat::Z_PIXMAP,
                self.window,
                self.gc,
                self.width,
                (strip.len() / line) as u16,
                0,
                (i * rows) as i16,
                0,
                self.depth,
                strip,
            )?;
        }
        self.conn.flush()?;
        // Exposure events are not needed (the next frame repaints); drain
        // them so the connection's queue stays empty.
        while self.conn.poll_for_event()?.is_some() {}
        Ok(())
    }
}
