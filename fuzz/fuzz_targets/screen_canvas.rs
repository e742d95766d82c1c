//! The screen decoder fed hostile messages: `Canvas::apply` on a small
//! canvas (at most 192x144, 3x3 tiles) after one valid key frame.
//!
//! Input: `format (3) | key number (8) | picture seed (1)`, then steps of
//! `op (1) | len (2, big-endian) | body (len)`. `op & 3` picks the kind
//! (frame start, tiles, frame end) whose body is parsed with
//! `ScreenMessage::parse` and applied; 3 instead encodes a real next
//! frame with an `Encoder` (body bytes edit its picture; it may not fit
//! the canvas any more) and applies its messages one by one. `op & 0x40`
//! checks catch-ups afterwards, `op & 0x80` calls `abort`.
//! Invariants: no panic; the key frame applies; the canvas always holds
//! `frame_bytes` of pixels; whenever no frame is open (after an error, an
//! abort, or a completed frame) the canvas holds exactly its last whole
//! frame and version; a completed frame matches its start (number, base
//! = the version it was applied to, tile count); a catch-up built by
//! `refresh` from the canvas brings a canvas holding any earlier frame of
//! an increasing run of frame numbers (or nothing) to the same pixels;
//! heap use stays within a bound set by the format, not by the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader, screen_format, screen_picture};
use nagare_proto::VideoFormat;
use nagare_proto::framing::{Kind, split};
use nagare_proto::screen::{Canvas, EncodedFrame, Encoder, ScreenMessage};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Earlier whole frames kept for the catch-up check.
const HISTORY: usize = 4;

struct Held {
    version: u64,
    captured_us: u64,
    pixels: Vec<u8>,
}

struct State {
    canvas: Canvas,
    /// The last whole frame; the canvas must hold it when no frame is open.
    whole: Held,
    /// Earlier whole frames with increasing numbers, ending before `whole`.
    history: Vec<Held>,
    /// The open frame as started: number, base, tiles announced.
    open: Option<(u64, Option<u64>, u32)>,
}

fn apply_all(canvas: &mut Canvas, frame: &EncodedFrame) -> Option<u64> {
    let mut done = None;
    for m in &frame.messages {
        let (kind, body) = split(m).expect("encoder framing");
        let msg = ScreenMessage::parse(kind, body)
            .expect("encoder message")
            .expect("screen kind");
        if let Some(c) = canvas.apply(&msg).expect("a catch-up applies") {
            done = Some(c.number);
        }
    }
    done
}

impl State {
    fn check_held(&self) {
        assert_eq!(
            self.canvas.pixels().len(),
            self.canvas.format().frame_bytes()
        );
        if self.canvas.in_frame() {
            assert_eq!(
                self.canvas.version(),
                None,
                "a version while a frame is open"
            );
            return;
        }
        assert!(self.open.is_none());
        assert_eq!(self.canvas.version(), Some(self.whole.version));
        assert_eq!(self.canvas.captured_us(), self.whole.captured_us);
        assert!(
            self.canvas.pixels() == &self.whole.pixels[..],
            "canvas differs from its last whole frame"
        );
    }

    fn apply(&mut self, msg: &ScreenMessage<'_>) {
        match self.canvas.apply(msg) {
            Err(_) => {
                self.open = None;
                assert!(!self.canvas.in_frame(), "frame still open after an error");
            }
            Ok(None) => match *msg {
                ScreenMessage::FrameStart {
                    number,
                    base,
                    tiles,
                    ..
                } => {
                    // A start rolls back an open frame first, so it
                    // applies to the last whole frame.
                    assert!(self.canvas.in_frame());
                    if let Some(b) = base {
                        assert_eq!(b, self.whole.version, "delta started on another version");
                        assert!(number > b);
                    }
                    self.open = Some((number, base, tiles));
                    assert!(
                        self.canvas.pixels() == &self.whole.pixels[..],
                        "a frame start changed pixels"
                    );
                }
                ScreenMessage::Tiles(_) => assert!(self.open.is_some() && self.canvas.in_frame()),
                ScreenMessage::FrameEnd { .. } => panic!("frame end completed nothing"),
            },
            Ok(Some(done)) => {
                let (number, base, tiles) = self.open.take().expect("completed an open frame");
                assert!(matches!(*msg, ScreenMessage::FrameEnd { number: n } if n == number));
                assert_eq!((done.number, done.base, done.tiles), (number, base, tiles));
                assert!(!self.canvas.in_frame());
                let old = std::mem::replace(
                    &mut self.whole,
                    Held {
                        version: number,
                        captured_us: done.captured_us,
                        pixels: self.canvas.pixels().to_vec(),
                    },
                );
                if number > old.version {
                    self.history.push(old);
                    if self.history.len() > HISTORY {
                        self.history.remove(0);
                    }
                } else {
                    // Numbers went back (a key frame may): older versions
                    // are ambiguous from here on.
                    self.history.clear();
                }
            }
        }
        self.check_held();
    }

    fn check_refresh(&self, format: VideoFormat, pick: u8) {
        if self.canvas.in_frame() {
            assert!(self.canvas.refresh(None).is_err());
            return;
        }
        // From nothing: a key frame.
        let key = self.canvas.refresh(None).expect("refresh of a whole frame");
        assert!(key.key);
        let mut fresh = Canvas::new(format).expect("format fits");
        assert_eq!(apply_all(&mut fresh, &key), Some(self.whole.version));
        assert!(
            fresh.pixels() == self.canvas.pixels(),
            "key refresh differs"
        );
        // From an earlier frame of the run.
        let Some(h) = self.history.get(usize::from(pick) % HISTORY) else {
            return;
        };
        let mut enc = Encoder::new(format, 0).expect("format fits");
        let mut old = Canvas::new(format).expect("format fits");
        let e = enc
            .encode(&h.pixels, h.version, h.captured_us)
            .expect("old frame");
        assert_eq!(apply_all(&mut old, &e), Some(h.version));
        let up = self.canvas.refresh(Some(h.version)).expect("refresh");
        assert!(!up.key);
        assert_eq!(apply_all(&mut old, &up), Some(self.whole.version));
        assert!(
            old.pixels() == self.canvas.pixels(),
            "catch-up from {} to {} is not bit-exact",
            h.version,
            self.whole.version
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = screen_format(r.u8(), r.u8(), r.u8());
    let number = r.u64();
    let mut picture = Vec::new();
    screen_picture(&format, r.u8(), &mut picture);

    let mut enc = Encoder::new(format, 0).expect("format fits");
    let key = enc.encode(&picture, number, 1).expect("key frame");
    let mut canvas = Canvas::new(format).expect("format fits");
    assert_eq!(apply_all(&mut canvas, &key), Some(number));
    assert!(canvas.pixels() == &picture[..]);
    let mut s = State {
        canvas,
        whole: Held {
            version: number,
            captured_us: 1,
            pixels: picture.clone(),
        },
        history: Vec::with_capacity(HISTORY + 1),
        open: None,
    };
    let frame_bytes = format.frame_bytes();
    let tiles = s.canvas.grid().count();
    let base = CountingAlloc::live();

    while r.remaining() > 0 {
        let op = r.u8();
        let len = usize::from(r.u16());
        let body = r.bytes(len);
        let kind =
            [Kind::FrameStart, Kind::Tiles, Kind::FrameEnd, Kind::Ready][usize::from(op & 3)];
        if kind == Kind::Ready {
            // A real next frame of the encoder's stream.
            for (i, b) in body.iter().enumerate() {
                let at = (usize::from(*b) * 257 + i * 4099) % frame_bytes;
                picture[at] ^= b | 1;
            }
            let Ok(e) = enc.encode(
                &picture,
                enc.canvas().version().unwrap_or(0).wrapping_add(1),
                u64::from(op),
            ) else {
                continue; // numbers ran out
            };
            for m in &e.messages {
                let (kind, body) = split(m).expect("encoder framing");
                let msg = ScreenMessage::parse(kind, body)
                    .expect("encoder message")
                    .expect("screen kind");
                s.apply(&msg);
            }
        } else if let Ok(Some(msg)) = ScreenMessage::parse(kind, body) {
            s.apply(&msg);
        }
        if op & 0x80 != 0 {
            s.canvas.abort();
            s.open = None;
            s.check_held();
        }
        if op & 0x40 != 0 {
            s.check_refresh(format, op >> 2);
        }
        // Canvas (pixels, undo, scratch, tile versions), the history and
        // the whole-frame copy; the encoder's buffers predate `base`.
        let bound = (HISTORY + 6) * frame_bytes + 64 * tiles + 65_536;
        let live = CountingAlloc::live().saturating_sub(base);
        assert!(live <= bound, "{live} heap bytes held, bound {bound}");
    }
});
