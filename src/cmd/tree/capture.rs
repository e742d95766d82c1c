//! Where the source's frames come from: an X11 screen (MIT-SHM), a raw
//! video file, or a test pattern.

use std::fs::File;
use std::io::{BufReader, Read};

use anyhow::{Context, bail};
use nagare_proto::video::format::{PixelFormat, VideoFormat, parse_size};
use nagare_proto::video::pattern::Pattern;
use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder, Window};
use x11rb::rust_connection::RustConnection;

/// A source of packed frames.
pub enum Capture {
    /// Test pattern, frame after frame.
    Pattern(Pattern, u64),
    /// Raw video file.
    File(BufReader<File>, String),
    /// X11 screen.
    X11(Box<X11Capture>),
}

impl Capture {
    /// Opens what the command line names.
    pub fn open(
        capture: Option<&str>,
        input: Option<&str>,
        size: &str,
        pixel_format: &str,
    ) -> anyhow::Result<(Capture, VideoFormat)> {
        if let Some(spec) = capture {
            let display = match spec.split_once(':') {
                Some(("x11", d)) => Some(d.to_owned()).filter(|d| !d.is_empty()).map(|d| {
                    if d.starts_with(':') {
                        d
                    } else {
                        format!(":{d}")
                    }
                }),
                None if spec == "x11" => None,
                _ => {
                    bail!("--capture {spec:?} is not known; use x11 or x11:DISPLAY (e.g. x11::99)")
                }
            };
            let x = X11Capture::open(display.as_deref())?;
            let format = x.format;
            return Ok((Capture::X11(Box::new(x)), format));
        }
        let input = input.unwrap_or_default();
        let (w, h) = parse_size(size).with_context(|| format!("--size {size:?}"))?;
        let pf: PixelFormat = pixel_format
            .parse()
            .with_context(|| format!("--pixel-format {pixel_format:?}"))?;
        let format = VideoFormat::new(w, h, pf).with_context(|| format!("--size {size}"))?;
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
                "input {input:?} holds {len} bytes, less than one {}x{} {} frame ({} bytes); check --size and --pixel-format",
                w,
                h,
                pf,
                format.frame_bytes()
            );
        }
        Ok((Capture::File(BufReader::new(f), input.to_owned()), format))
    }

    /// Fills `frame` with the next frame; `false` at the end of a file.
    pub fn next(&mut self, frame: &mut [u8]) -> anyhow::Result<bool> {
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
            Capture::X11(x) => {
                x.grab(frame)?;
                Ok(true)
            }
        }
    }
}

/// A shared-memory segment attached to the X server and to us.
struct Segment {
    seg: shm::Seg,
    addr: *mut u8,
    len: usize,
}

/// Captures the root window of an X11 screen as RGB24, through MIT-SHM
/// when the server offers it (one copy, no socket transfer) and through
/// plain GetImage otherwise.
pub struct X11Capture {
    conn: RustConnection,
    root: Window,
    format: VideoFormat,
    shm: Option<Segment>,
    /// Byte offsets of red, green and blue within a 32-bit pixel.
    offsets: [usize; 3],
}

/// Byte offsets of red, green and blue within the screen's 32-bit
/// pixels, for capture and for the viewer window alike.
pub fn rgb_offsets(
    setup: &x11rb::protocol::xproto::Setup,
    screen: &x11rb::protocol::xproto::Screen,
) -> anyhow::Result<[usize; 3]> {
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
    fn open(display: Option<&str>) -> anyhow::Result<Self> {
        let shown = display
            .map(str::to_owned)
            .or_else(|| std::env::var("DISPLAY").ok());
        let (conn, screen_num) = x11rb::connect(display).with_context(|| {
            format!("connecting to X display {shown:?}; is an X server (or Xvfb) running there?")
        })?;
        let setup = conn.setup();
        let screen = &setup.roots[screen_num];
        let offsets =
            rgb_offsets(setup, screen).with_context(|| format!("capturing X display {shown:?}"))?;
        let format = VideoFormat::new(
            u32::from(screen.width_in_pixels),
            u32::from(screen.height_in_pixels),
            PixelFormat::Rgb24,
        )?;
        let root = screen.root;
        let len = format.width as usize * format.height as usize * 4;
        let shm = Self::attach_shm(&conn, len).ok();
        Ok(X11Capture {
            conn,
            root,
            format,
            shm,
            offsets,
        })
    }

    fn attach_shm(conn: &RustConnection, len: usize) -> anyhow::Result<Segment> {
        conn.extension_information(shm::X11_EXTENSION_NAME)?
            .context("no MIT-SHM")?;
        // SAFETY: plain System V shared-memory calls; the result is checked
        // before use and the segment is marked for removal right after both
        // sides attached, so it cannot leak past the process.
        unsafe {
            let id = libc::shmget(libc::IPC_PRIVATE, len, libc::IPC_CREAT | 0o600);
            if id < 0 {
                bail!("shmget failed");
            }
            let addr = libc::shmat(id, std::ptr::null(), 0);
            if addr as isize == -1 {
                libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                bail!("shmat failed");
            }
            let seg = conn.generate_id()?;
            let attached = conn
                .shm_attach(seg, id as u32, false)
                .map_err(anyhow::Error::from)
                .and_then(|c| c.check().map_err(anyhow::Error::from));
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
            if let Err(e) = attached {
                libc::shmdt(addr);
                return Err(e);
            }
            Ok(Segment {
                seg,
                addr: addr.cast(),
                len,
            })
        }
    }

    /// Whether frames come through shared memory.
    pub fn uses_shm(&self) -> bool {
        self.shm.is_some()
    }

    fn grab(&mut self, frame: &mut [u8]) -> anyhow::Result<()> {
        let (w, h) = (self.format.width as u16, self.format.height as u16);
        let reply_data;
        let pixels: &[u8] = if let Some(s) = &self.shm {
            self.conn
                .shm_get_image(
                    self.root,
                    0,
                    0,
                    w,
                    h,
                    !0,
                    ImageFormat::Z_PIXMAP.into(),
                    s.seg,
                    0,
                )?
                .reply()
                .context("MIT-SHM GetImage")?;
            // SAFETY: the segment is `len` bytes, attached for our lifetime,
            // and the server finished writing it before the reply came.
            unsafe { std::slice::from_raw_parts(s.addr, s.len) }
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

impl Drop for X11Capture {
    fn drop(&mut self) {
        if let Some(s) = self.shm.take() {
            let _ = self.conn.shm_detach(s.seg);
            let _ = self.conn.flush();
            // SAFETY: `addr` came from shmat and is detached once.
            unsafe {
                libc::shmdt(s.addr.cast());
            }
        }
    }
}
