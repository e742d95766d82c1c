//! A relay's per-child queue (`relay::ChildQueue`) driven by any schedule
//! of offers, writer pops, catch-ups, close and link failure, with the
//! child decoding everything it is handed.
//!
//! Input: `format (3) | lag (2) | resume (2) | opts (1)`, then steps of
//! `op (1) | arg (1)`. The stream is real: an `Encoder` (key interval
//! `opts >> 1 & 7`) makes up to 48 frames whose changed tiles `arg`
//! picks; the relay is the source (catch-ups from the encoder's canvas)
//! or, with `opts & 1`, a peer that decodes the stream into its own
//! canvas. `op & 7`: 0-1 offer the next chunk, 2 offer the rest of the
//! frame, 3 pop one message, 4 pop `arg * 64` bytes (0: a stalled
//! child), 5 pop everything, 6 catch up at a frame boundary, 7 close the
//! stream (`arg == 0xc1`) or fail the link (`arg == 0xfa`).
//! Invariants: no panic; the queue never holds more than the lag limit
//! or a drained queue plus one catch-up (plus the end message); its byte
//! count follows what is popped; every message the child is handed
//! applies to its canvas, and every frame it completes is bit-exact and
//! newer than the one before; a closed queue hands out the end message
//! and then only `Close`, a failed one only `Close`; once the child reads
//! freely again it holds the newest frame after one more frame
//! boundary; heap use stays within a
//! bound set by the limits and the format.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader, fnv1a, screen_format, screen_picture};
use nagare_proto::VideoFormat;
use nagare_proto::framing::{Kind, split};
use nagare_proto::screen::{Canvas, Encoder, ScreenMessage, TILE, TileGrid};
use nagare_proto::tree::relay::{ChildQueue, Chunk, Limits, Next, Offer};
use nagare_proto::tree::wire::Control;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Frames the stream may have (one more is made at the end).
const MAX_FRAMES: usize = 48;

struct Child {
    canvas: Canvas,
    completed: Option<u64>,
    ended: bool,
}

struct Sim {
    format: VideoFormat,
    enc: Encoder,
    via_peer: bool,
    relay: Canvas,
    picture: Vec<u8>,
    /// Hash of every frame made, by number.
    truth: Vec<u64>,
    /// Messages of the newest frame not offered yet.
    pending: std::collections::VecDeque<Vec<u8>>,
    queue: ChildQueue<Vec<u8>>,
    child: Child,
    bound: usize,
    closed: bool,
    failed: bool,
}

impl Sim {
    /// Changes the tiles `mask` picks (noise or a fill) and encodes the
    /// next frame; false when the stream is as long as allowed.
    fn next_frame(&mut self, mask: u8, noisy: bool, limit: usize) -> bool {
        if self.truth.len() >= limit {
            return false;
        }
        let f = self.format;
        let pf = f.pixel_format;
        let tile_w = TILE / pf.pgroup_pixels() * pf.pgroup_bytes();
        let line = f.line_bytes();
        let cols = line.div_ceil(tile_w);
        let n = self.truth.len() as u64;
        let mut x = (n << 8 | u64::from(mask)) | 1;
        for i in 0..9usize {
            if mask & (1 << (i % 8)) == 0 || (i == 8 && mask != 0xff) {
                continue;
            }
            let (r, c) = (i / cols, i % cols);
            if r * TILE >= f.height as usize {
                continue;
            }
            for y in r * TILE..(r * TILE + TILE).min(f.height as usize) {
                let row = &mut self.picture[y * line..(y + 1) * line];
                for b in &mut row[c * tile_w..((c + 1) * tile_w).min(line)] {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = if noisy { x as u8 } else { n as u8 ^ mask };
                }
            }
        }
        let e = self
            .enc
            .encode(&self.picture, n, n)
            .expect("numbers increase");
        self.truth.push(fnv1a(&self.picture));
        self.pending = e.messages.into();
        true
    }

    fn at_boundary(&self) -> bool {
        self.pending.is_empty()
    }

    fn offer_one(&mut self, mask: u8, noisy: bool, limit: usize) {
        if self.pending.is_empty() && !self.next_frame(mask, noisy, limit) {
            return;
        }
        let Some(m) = self.pending.pop_front() else {
            return;
        };
        let before = self.queue.bytes();
        let offer = self
            .queue
            .offer(Chunk::of(&m).expect("screen message"), m.clone());
        match offer {
            Offer::Queued => assert_eq!(self.queue.bytes(), before + m.len()),
            Offer::Skipped => assert_eq!(self.queue.bytes(), before),
            Offer::Dropped => {
                assert!(self.queue.bytes() <= before);
                assert!(self.queue.lagging_since().is_some());
            }
        }
        if self.closed || self.failed {
            assert_eq!(offer, Offer::Skipped, "offer after close or failure");
        }
        if self.via_peer {
            let (k, b) = split(&m).expect("encoder framing");
            let msg = ScreenMessage::parse(k, b)
                .expect("encoder message")
                .expect("screen kind");
            self.relay
                .apply(&msg)
                .expect("the relay decodes its parent's stream");
        }
        self.check_bound();
    }

    fn check_bound(&self) {
        let bytes = self.queue.bytes();
        assert!(
            bytes <= self.bound,
            "{bytes} bytes queued, bound {}",
            self.bound
        );
    }

    /// Pops one message and hands it to the child; false when none.
    fn pop(&mut self) -> Option<usize> {
        let before = self.queue.bytes();
        match self.queue.pop() {
            Next::Send(m) => {
                assert!(!self.failed, "a failed link sends");
                assert!(!self.child.ended, "message after the end");
                assert_eq!(self.queue.bytes(), before - m.len());
                let (k, b) = split(&m).expect("queued messages are framed");
                if k == Kind::End {
                    assert!(self.closed, "end message without close");
                    assert_eq!(self.queue.bytes(), 0, "end message before the rest");
                    self.child.ended = true;
                    return Some(m.len());
                }
                let msg = ScreenMessage::parse(k, b)
                    .expect("screen message")
                    .expect("screen kind");
                let done = match self.child.canvas.apply(&msg) {
                    Ok(d) => d,
                    Err(e) => panic!("the child cannot apply {msg:?}: {e}"),
                };
                if let Some(d) = done {
                    if let Some(prev) = self.child.completed {
                        assert!(d.number > prev, "frame {} after {prev}", d.number);
                    }
                    let want = self
                        .truth
                        .get(d.number as usize)
                        .expect("a frame that was made");
                    assert_eq!(
                        fnv1a(self.child.canvas.pixels()),
                        *want,
                        "frame {} is not bit-exact",
                        d.number
                    );
                    self.child.completed = Some(d.number);
                }
                Some(m.len())
            }
            Next::Wait => {
                assert!(!self.closed && !self.failed);
                assert_eq!(before, 0);
                None
            }
            Next::Close => {
                assert!(self.failed || (self.closed && self.child.ended));
                assert_eq!(self.queue.bytes(), 0);
                None
            }
        }
    }

    fn catch_up(&mut self) {
        if !self.via_peer && !self.at_boundary() {
            return; // the source's canvas is ahead mid-frame
        }
        let lagging = self.queue.lagging_since().is_some();
        let before = self.queue.bytes();
        // The relay's canvas at a frame boundary.
        let canvas = if self.via_peer {
            &self.relay
        } else {
            self.enc.canvas()
        };
        let refreshed = self.queue.catch_up(canvas);
        if refreshed {
            assert!(lagging && before <= self.queue.bytes());
        }
        if !lagging {
            assert!(!refreshed);
        }
        self.check_bound();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = screen_format(r.u8(), r.u8(), r.u8());
    let (lag, resume, opts) = (r.u16(), r.u16(), r.u8());
    let tiles = TileGrid::new(format).expect("format fits").count();
    let frame_bytes = format.frame_bytes();
    // Largest frame on the wire: every tile at LZ4's worst case plus
    // tile, chunk and frame headers.
    let key_bound = frame_bytes * 11 / 10 + 64 * tiles + 256;
    let limits = Limits {
        lag: key_bound + usize::from(lag) * 16,
        resume: usize::from(resume) * 16,
    };
    let end = Control::End.to_bytes();
    let mut picture = Vec::new();
    screen_picture(&format, 0, &mut picture);
    let mut sim = Sim {
        format,
        enc: Encoder::new(format, u64::from(opts >> 1 & 7)).expect("format fits"),
        via_peer: opts & 1 != 0,
        relay: Canvas::new(format).expect("format fits"),
        picture,
        truth: Vec::with_capacity(MAX_FRAMES + 1),
        pending: std::collections::VecDeque::with_capacity(16),
        queue: ChildQueue::new(None, limits),
        child: Child {
            canvas: Canvas::new(format).expect("format fits"),
            completed: None,
            ended: false,
        },
        bound: limits.lag.max(limits.resume + key_bound) + end.len(),
        closed: false,
        failed: false,
    };
    let base = CountingAlloc::live();
    let heap_bound = 4 * sim.bound + 8 * frame_bytes + 65_536;

    while r.remaining() > 0 {
        let (op, arg) = (r.u8(), r.u8());
        match op & 7 {
            0 | 1 => sim.offer_one(arg, op & 0x10 != 0, MAX_FRAMES),
            2 => {
                sim.offer_one(arg, op & 0x10 != 0, MAX_FRAMES);
                while !sim.at_boundary() {
                    sim.offer_one(arg, false, MAX_FRAMES);
                }
            }
            3 => {
                sim.pop();
            }
            4 => {
                let mut budget = usize::from(arg) * 64;
                while budget > 0 {
                    let Some(n) = sim.pop() else { break };
                    budget = budget.saturating_sub(n);
                }
            }
            5 => while sim.pop().is_some() {},
            6 => sim.catch_up(),
            _ => match arg {
                0xc1 => {
                    sim.queue.close(end.clone());
                    sim.closed |= !sim.failed;
                    sim.check_bound();
                }
                0xfa => {
                    sim.queue.fail();
                    sim.failed = true;
                    assert!(sim.queue.is_dead());
                    assert_eq!(sim.queue.bytes(), 0);
                }
                _ => {}
            },
        }
        let live = CountingAlloc::live().saturating_sub(base);
        assert!(
            live <= heap_bound,
            "{live} heap bytes held, bound {heap_bound}"
        );
    }

    // The child reads freely from now on: it must reach the newest frame.
    while sim.pop().is_some() {}
    if sim.closed || sim.failed {
        assert_eq!(sim.queue.pop(), Next::Close);
        return;
    }
    while !sim.at_boundary() {
        sim.offer_one(0, false, MAX_FRAMES + 1);
    }
    while sim.pop().is_some() {}
    sim.catch_up();
    sim.offer_one(0x5a, true, MAX_FRAMES + 1);
    while !sim.at_boundary() {
        sim.offer_one(0, false, MAX_FRAMES + 1);
    }
    while sim.pop().is_some() {}
    // A catch-up still pinned in the queue may have pushed that frame
    // past the lag limit; the next boundary's catch-up covers it.
    sim.catch_up();
    while sim.pop().is_some() {}
    let newest = sim.truth.len() as u64 - 1;
    assert_eq!(
        sim.child.completed,
        Some(newest),
        "the child never caught up"
    );
    assert_eq!(sim.child.canvas.version(), Some(newest));
});
