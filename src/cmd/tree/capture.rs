//! Where the source's frames come from: an X11 screen (MIT-SHM), a raw
//! video file, or a test pattern.

use std::fs::File;
use std::io::{BufReader, Read};

use anyhow::{Context, bail};
use nagare_proto::VideoFormat;
use nagare_proto::video::pattern::Pattern;

use crate::cli::parse_format;

/// A source of packed frames.
pub(super) enum Capture {
    /// Test pattern, frame after frame.
    Pattern(Pattern, u64),
    /// Raw video file.
    File(BufReader<File>, String),
    /// X11 screen.
    #[cfg(feature = "x11")]
    X11(Box<x11::X11Capture>),
}

/// The display named by `--capture x11[:DISPLAY]` (`None`: $DISPLAY).
fn display_of(spec: &str) -> anyhow::Result<Option<String>> {
    match spec.split_once(':') {
        Some(("x11", d)) => Ok(Some(d.to_owned()).filter(|d| !d.is_empty()).map(|d| {
            if d.starts_with(':') {
                d
            } else {
                format!(":{d}")
            }
        })),
        None if spec == "x11" => Ok(None),
        _ => bail!("--capture {spec:?} is not known; use x11 or x11:DISPLAY (e.g. x11::99)"),
    }
}

impl Capture {
    /// Opens what the command line names.
    pub(super) fn open(
        capture: Option<&str>,
        input: Option<&str>,
        size: &str,
        pix_fmt: &str,
    ) -> anyhow::Result<(Capture, VideoFormat)> {
        if let Some(spec) = capture {
            let display = display_of(spec)?;
            return Self::open_x11(spec, display.as_deref());
        }
        let input = input.unwrap_or_default();
        let format = parse_format(size, pix_fmt)?;
        if let Some(name) = input.strip_prefix("pattern:") {
            if name != "bars" {
                bail!("pattern {name:?} is not known; the one pattern is pattern:bars");
            }
            return Ok((Capture::Pattern(Pattern::new(format), 0), format));
        }
        let f = File::open(input).with_context(|| {
            format!("opening input {input:?}; give a raw video file, pattern:bars or --capture x11")
        })?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < format.frame_bytes() as u64 {
            bail!(
                "input {input:?} holds {len} bytes, less than one {}x{} {} frame ({} bytes); check --size and --pix-fmt",
                format.width,
                format.height,
                format.pixel_format,
                format.frame_bytes()
            );
        }
        Ok((Capture::File(BufReader::new(f), input.to_owned()), format))
    }

    #[cfg(feature = "x11")]
    fn open_x11(_spec: &str, display: Option<&str>) -> anyhow::Result<(Capture, VideoFormat)> {
        let x = x11::X11Capture::open(display)?;
        let format = x.format();
        Ok((Capture::X11(Box::new(x)), format))
    }

    #[cfg(not(feature = "x11"))]
    fn open_x11(spec: &str, _display: Option<&str>) -> anyhow::Result<(Capture, VideoFormat)> {
        bail!(
            "--capture {spec}: this nagare was built without X11 support (cargo feature x11); \
             stream a raw video file or pattern:bars, or rebuild with default features"
        )
    }

    /// How frames are captured, for the banner (`None`: not a screen).
    pub(super) fn describe(&self) -> Option<&'static str> {
        match self {
            #[cfg(feature = "x11")]
            Capture::X11(x) if x.uses_shm() => Some("MIT-SHM"),
            #[cfg(feature = "x11")]
            Capture::X11(_) => Some("GetImage (no MIT-SHM)"),
            _ => None,
        }
    }

    /// Fills `frame` with the next frame; `false` at the end of a file.
    pub(super) fn next(&mut self, frame: &mut [u8]) -> anyhow::Result<bool> {
        match self {
            Capture::Pattern(p, n) => {
                p.render(*n, frame);
                *n += 1;
                Ok(true)
            }
            Capture::File(r, path) => match r.read_exact(frame) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
                Err(e) => Err(e).with_context(|| format!("reading {path}")),
            },
            #[cfg(feature = "x11")]
            Capture::X11(x) => {
                x.grab(frame)?;
                Ok(true)
            }
        }
    }
}

#[cfg(feature = "x11")]
pub(super) mod x11 {
    //! The X11 screen, captured through MIT-SHM when the server offers it.

    use anyhow::{Context, bail};
    use nagare_proto::{PixelFormat, VideoFormat};
    use x11rb::connection::{Connection, RequestConnection};
    use x11rb::protocol::shm::{self, ConnectionExt as _};
    use x11rb::protocol::xproto::{
        ConnectionExt as _, ImageFormat, ImageOrder, Screen, Setup, Window,
    };
    use x11rb::rust_connection::RustConnection;

    use crate::net::shm::Segment;

    /// Captures the root window of an X11 screen as RGB24, through
    /// MIT-SHM when the server offers it (one copy, no socket transfer)
    /// and through plain GetImage otherwise.
    pub(crate) struct X11Capture {
        conn: RustConnection,
        root: Window,
        format: VideoFormat,
        shm: Option<(shm::Seg, Segment)>,
        /// Byte offsets of red, green and blue within a 32-bit pixel.
        offsets: [usize; 3],
    }

    /// Byte offsets of red, green and blue within the screen's 32-bit
    /// pixels, for capture and for the viewer window alike.
    pub(crate) fn rgb_offsets(setup: &Setup, screen: &Screen) -> anyhow::Result<[usize; 3]> {
        let depth = screen.root_depth;
        let bpp = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == depth)
            .map_or(0, |f| f.bits_per_pixel);
        if bpp != 32 || depth < 24 {
            bail!(
                "the display has depth {depth} at {bpp} bits per pixel; nagare tree needs 24-bit colour (start Xvfb with -screen 0 WxHx24)"
            );
        }
        let visual = screen
            .allowed_depths
            .iter()
            .flat_map(|d| &d.visuals)
            .find(|v| v.visual_id == screen.root_visual)
            .context("root visual not found in the X setup")?;
        let shift = |mask: u32| (mask.trailing_zeros() / 8) as usize;
        let offsets = [
            shift(visual.red_mask),
            shift(visual.green_mask),
            shift(visual.blue_mask),
        ];
        Ok(if setup.image_byte_order == ImageOrder::MSB_FIRST {
            offsets.map(|o| 3 - o)
        } else {
            offsets
        })
    }

    impl X11Capture {
        /// Connects to `display` (`None`: $DISPLAY).
        pub(crate) fn open(display: Option<&str>) -> anyhow::Result<Self> {
            let shown = display
                .map(str::to_owned)
                .or_else(|| std::env::var("DISPLAY").ok());
            let (conn, screen_num) = x11rb::connect(display).with_context(|| {
                format!(
                    "connecting to X display {shown:?}; is an X server (or Xvfb) running there?"
                )
            })?;
            let setup = conn.setup();
            let screen = &setup.roots[screen_num];
            let offsets = rgb_offsets(setup, screen)
                .with_context(|| format!("capturing X display {shown:?}"))?;
            let format = VideoFormat::new(
                u32::from(screen.width_in_pixels),
                u32::from(screen.height_in_pixels),
                PixelFormat::Rgb24,
            )?;
            let root = screen.root;
            let len = format.width as usize * format.height as usize * 4;
            let shm = attach_shm(&conn, len).ok();
            Ok(X11Capture {
                conn,
                root,
                format,
                shm,
                offsets,
            })
        }

        /// The screen's format (RGB24 at the screen's size).
        pub(crate) fn format(&self) -> VideoFormat {
            self.format
        }

        /// Whether frames come through shared memory.
        pub(crate) fn uses_shm(&self) -> bool {
            self.shm.is_some()
        }

        /// Fills `frame` (packed RGB24) with the screen.
        pub(crate) fn grab(&mut self, frame: &mut [u8]) -> anyhow::Result<()> {
            // The screen's size came from u16 fields of the X setup.
            let (w, h) = (self.format.width as u16, self.format.height as u16);
            let reply_data;
            let pixels: &[u8] = if let Some((seg, mem)) = &self.shm {
                let z = ImageFormat::Z_PIXMAP.into();
                self.conn
                    .shm_get_image(self.root, 0, 0, w, h, !0, z, *seg, 0)?
                    .reply()
                    .context("MIT-SHM GetImage")?;
                mem.bytes()
            } else {
                reply_data = self
                    .conn
                    .get_image(ImageFormat::Z_PIXMAP, self.root, 0, 0, w, h, !0)?
                    .reply()
                    .context("X11 GetImage")?
                    .data;
                &reply_data
            };
            let [r, g, b] = self.offsets;
            for (dst, src) in frame.chunks_exact_mut(3).zip(pixels.chunks_exact(4)) {
                dst[0] = src[r];
                dst[1] = src[g];
                dst[2] = src[b];
            }
            Ok(())
        }
    }

    /// A segment of `len` bytes attached to the X server and to us.
    fn attach_shm(conn: &RustConnection, len: usize) -> anyhow::Result<(shm::Seg, Segment)> {
        conn.extension_information(shm::X11_EXTENSION_NAME)?
            .context("no MIT-SHM")?;
        let mem = Segment::new(len)?;
        let seg = conn.generate_id()?;
        let attached = conn
            .shm_attach(seg, mem.id(), false)
            .map_err(anyhow::Error::from)
            .and_then(|c| c.check().map_err(anyhow::Error::from));
        // Both sides are attached (or the server failed to): the segment
        // goes away with the last of them, never outliving this process.
        mem.mark_removed();
        attached?;
        Ok((seg, mem))
    }

    impl Drop for X11Capture {
        fn drop(&mut self) {
            if let Some((seg, _mem)) = self.shm.take() {
                let _ = self.conn.shm_detach(seg);
                let _ = self.conn.flush();
            }
        }
    }
}
