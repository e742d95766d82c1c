//! Helpers shared by the fuzz targets and the seed generator: a byte
//! reader, the choice of a small video or screen format from input bytes,
//! the packet stream encoding the `depacketizer` target reads, and an
//! allocator that counts live and peak bytes so targets can check that
//! memory stays bounded.
//!
//! Keeping the encodings here means `examples/gen_seeds.rs` writes seeds in
//! exactly the layout the targets parse.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use nagare_proto::probe::{DEFAULT_BURST_US, TestParams};
use nagare_proto::{PixelFormat, VideoFormat};

/// Reads fixed-width fields from the front of the fuzz input; past the end
/// every read returns zeros, so no input is rejected for being short.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len()
    }

    /// Takes up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.data.split_at(n.min(self.data.len()));
        self.data = tail;
        head
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.data.len())
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.bytes(N);
        out[..b.len()].copy_from_slice(b);
        out
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.array())
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }
}

/// Largest width [`small_format`] picks.
pub const MAX_WIDTH: u32 = 64;
/// Largest height [`small_format`] picks.
pub const MAX_HEIGHT: u32 = 16;

/// A valid format of at most 64x16 pixels from three bytes: pixel format,
/// width in pixel groups, height.
pub fn small_format(pf: u8, w: u8, h: u8) -> VideoFormat {
    let pixel_format = PixelFormat::ALL[usize::from(pf) % PixelFormat::ALL.len()];
    let pg = pixel_format.pgroup_pixels() as u32;
    let groups = 1 + u32::from(w) % (MAX_WIDTH / pg);
    let height = 1 + u32::from(h) % MAX_HEIGHT;
    // In range and a whole number of pixel groups by construction.
    VideoFormat::new(groups * pg, height, pixel_format).expect("small format is valid")
}

/// The three bytes [`small_format`] maps to `format` (inverse, for seeds).
pub fn small_format_bytes(format: &VideoFormat) -> [u8; 3] {
    let pf = PixelFormat::ALL
        .iter()
        .position(|p| *p == format.pixel_format)
        .unwrap_or(0) as u8;
    let pg = format.pixel_format.pgroup_pixels() as u32;
    [pf, (format.width / pg - 1) as u8, (format.height - 1) as u8]
}

/// One step of the `depacketizer` target's input after the header.
///
/// Layout: `ctrl (1) | len (2, big-endian) | packet (len bytes)`.
pub mod step {
    /// Hand every polled frame buffer back with `recycle`.
    pub const RECYCLE: u8 = 0x01;
    /// Call `flush` after pushing this packet.
    pub const FLUSH: u8 = 0x02;
    /// Also recycle a buffer of a (usually) wrong size.
    pub const RECYCLE_JUNK: u8 = 0x04;
}

/// Header of the `depacketizer` target's input.
///
/// Layout: `format (3) | opts (1) | period (8, big-endian f64 bits)`.
/// `opts` bits 0..=2 choose the period (see [`period_choice`]), bit 3 turns
/// zero-fill on, bits 4..=5 add to the minimum of 2 frames in flight.
pub const DEPACKETIZER_HEADER_LEN: usize = 12;

/// The period argument of `Depacketizer::new` chosen by `opts & 7`:
/// unknown, common rates, or the raw f64 from the input (any value).
pub fn period_choice(opts: u8, raw: u64) -> Option<f64> {
    match opts & 7 {
        0 | 1 => None,
        2 => Some(1500.0),              // 60 fps
        3 => Some(3003.0),              // 29.97 fps
        4 => Some(1501.5),              // 59.94 fps
        5 => Some(90.0),                // 1000 fps, the fastest FrameRate allows
        _ => Some(f64::from_bits(raw)), // anything, even NaN or negative
    }
}

/// Encodes a depacketizer input (for seeds).
pub fn encode_depacketizer_input(
    format: &VideoFormat,
    opts: u8,
    period_bits: u64,
    steps: &[(u8, Vec<u8>)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&small_format_bytes(format));
    out.push(opts);
    out.extend_from_slice(&period_bits.to_be_bytes());
    for (ctrl, pkt) in steps {
        out.push(*ctrl);
        out.extend_from_slice(&(pkt.len() as u16).to_be_bytes());
        out.extend_from_slice(pkt);
    }
    out
}

/// Largest width [`screen_format`] picks: three 64-pixel tile columns.
pub const SCREEN_MAX_WIDTH: u32 = 192;
/// Largest height [`screen_format`] picks: three 64-line tile rows.
pub const SCREEN_MAX_HEIGHT: u32 = 144;

/// A valid format of at most 192x144 pixels (up to 3x3 screen tiles, the
/// last row and column partial) from three bytes: pixel format, width,
/// height. Width is rounded up to whole pixel groups.
pub fn screen_format(pf: u8, w: u8, h: u8) -> VideoFormat {
    let pixel_format = PixelFormat::ALL[usize::from(pf) % PixelFormat::ALL.len()];
    let pg = pixel_format.pgroup_pixels() as u32;
    let width = (1 + u32::from(w) % SCREEN_MAX_WIDTH).div_ceil(pg) * pg;
    let height = 1 + u32::from(h) % SCREEN_MAX_HEIGHT;
    VideoFormat::new(width, height, pixel_format).expect("screen format is valid")
}

/// The three bytes [`screen_format`] maps to `format` (inverse, for seeds).
pub fn screen_format_bytes(format: &VideoFormat) -> [u8; 3] {
    let pf = PixelFormat::ALL
        .iter()
        .position(|p| *p == format.pixel_format)
        .unwrap_or(0) as u8;
    [pf, (format.width - 1) as u8, (format.height - 1) as u8]
}

/// A deterministic picture for a screen target: `seed` picks between a
/// flat fill (compresses well) and noise (does not).
pub fn screen_picture(format: &VideoFormat, seed: u8, out: &mut Vec<u8>) {
    out.clear();
    let mut x = u64::from(seed) | 0x9e37_79b9_0000_0000;
    out.extend((0..format.frame_bytes()).map(|i| {
        if seed & 1 == 0 {
            seed ^ (i / 997) as u8
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }
    }));
}

/// FNV-1a of `bytes`: lets a target remember a frame without keeping it.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Counts live heap bytes allocated through it, and the peak since
/// [`CountingAlloc::reset_peak`]; install with `#[global_allocator]` in a
/// target that checks memory bounds. libFuzzer's own allocations bypass it
/// (they go to malloc directly).
pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl CountingAlloc {
    /// Heap bytes currently allocated by Rust code.
    pub fn live() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    /// Most heap bytes live at once since the last [`CountingAlloc::reset_peak`].
    pub fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }

    /// Starts a new peak measurement from what is live now.
    pub fn reset_peak() {
        PEAK.store(Self::live(), Ordering::Relaxed);
    }

    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged and only
// keeps a counter on the side.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            CountingAlloc::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            CountingAlloc::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Old and new blocks may both be live during the copy.
            CountingAlloc::grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

/// The `st2110_21` target's input: a header that picks the model, then
/// packet observations.
pub mod st2110_21 {
    /// Header: `rate num (4) | rate den (4) | lines (2) | flags (1) |
    /// packets (4) | TRoffset in µs (2)`, integers big-endian.
    pub const HEADER_LEN: usize = 17;
    /// Header flag: interlaced scan.
    pub const INTERLACED: u8 = 0x01;
    /// Header flag: signal the TRoffset of the header instead of the
    /// default.
    pub const TR_OFFSET: u8 = 0x02;

    /// Record: `tag (1) | time (8) | rtp timestamp (4) | length (2)`.
    pub const RECORD_LEN: usize = 15;
    /// Tag bit: the marker bit.
    pub const MARKER: u8 = 0x01;
    /// Tag bit: `time` is the arrival; else the arrival is the previous
    /// one plus `time` modulo 2^24 ns.
    pub const ABSOLUTE: u8 = 0x02;
    /// Tag bit: `time` is the extended sequence number; else the previous
    /// one plus one.
    pub const SEQ: u8 = 0x04;
    /// Tag bit: poll every report after this packet.
    pub const POLL: u8 = 0x08;
    /// Tag bit: flush after this packet.
    pub const FLUSH: u8 = 0x10;

    /// Encodes a header (for seeds).
    pub fn header(num: u32, den: u32, lines: u16, flags: u8, packets: u32, tro_us: u16) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.extend_from_slice(&num.to_be_bytes());
        out.extend_from_slice(&den.to_be_bytes());
        out.extend_from_slice(&lines.to_be_bytes());
        out.push(flags);
        out.extend_from_slice(&packets.to_be_bytes());
        out.extend_from_slice(&tro_us.to_be_bytes());
        out
    }

    /// Encodes a record (for seeds).
    pub fn record(tag: u8, time: u64, rtp: u32, len: u16) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0] = tag;
        out[1..9].copy_from_slice(&time.to_be_bytes());
        out[9..13].copy_from_slice(&rtp.to_be_bytes());
        out[13..].copy_from_slice(&len.to_be_bytes());
        out
    }
}

/// The test every `probe_session` input runs (a small plan, so records and
/// arrivals stay small), forward or reverse.
pub fn session_params(reverse: bool, bidir: bool) -> TestParams {
    TestParams {
        rate_bps: 1_000_000,
        duration_ms: 200,
        packet_size: 100,
        fps: None,
        reverse,
        records: true,
        playout_us: 10_000,
        burst_threshold: 5,
        interval_ms: 100,
        burst_us: DEFAULT_BURST_US,
        streams: 1,
        bidir,
    }
}

/// Session id the `probe_session` target's server gives its test.
pub const SESSION_ID: u64 = 42;

/// Builds a `probe_session` input: a mode byte, then actions.
pub struct SessionScript(pub Vec<u8>);

impl SessionScript {
    /// A script for `mode` (bit 0 server, 1 reverse, 2 busy, 3 token,
    /// 4 bidir).
    pub fn new(mode: u8) -> SessionScript {
        SessionScript(vec![mode])
    }

    /// Control bytes from the peer, in reads of at most 65535 bytes.
    pub fn control(mut self, bytes: &[u8]) -> SessionScript {
        for chunk in bytes.chunks(usize::from(u16::MAX)) {
            self.0.push(0);
            self.0
                .extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            self.0.extend_from_slice(chunk);
        }
        self
    }

    /// An echo datagram of `kind` (0 request, 1 reply, 2 open).
    pub fn echo(mut self, kind: u8, session: u64, id: u16) -> SessionScript {
        self.0.extend_from_slice(&[5, kind]);
        self.0.extend_from_slice(&session.to_be_bytes());
        self.0.extend_from_slice(&id.to_be_bytes());
        self
    }

    /// A test-stream packet.
    pub fn data(mut self, session: u64, seq: u16) -> SessionScript {
        self.0.push(6);
        self.0.extend_from_slice(&session.to_be_bytes());
        self.0.extend_from_slice(&seq.to_be_bytes());
        self
    }

    /// `ms` pass.
    pub fn tick(mut self, ms: u16) -> SessionScript {
        self.0.push(7);
        self.0.extend_from_slice(&ms.to_be_bytes());
        self
    }

    /// The peer closes the control connection.
    pub fn closed(mut self) -> SessionScript {
        self.0.push(8);
        self
    }

    /// This side's stream ends.
    pub fn stream_finished(mut self) -> SessionScript {
        self.0.push(9);
        self
    }

    /// Ctrl-C.
    pub fn interrupt(mut self) -> SessionScript {
        self.0.push(10);
        self
    }

    /// Time jumps to the session's own timeout, `n` times.
    pub fn timeouts(mut self, n: usize) -> SessionScript {
        self.0.extend(std::iter::repeat_n(255, n));
        self
    }
}
