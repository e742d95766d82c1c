//! Lossless screen codec (seed 004): the frame is cut into tiles, only
//! tiles that changed are sent, each XOR'd against its previous content
//! (so unchanged pixels become zero bytes) and LZ4-compressed.
//!
//! A frame travels as three kinds of framed messages ([`crate::framing`]),
//! so relays can pass it on chunk by chunk instead of waiting for the
//! whole frame: `FrameStart` (number, base, capture time, tile count), any
//! number of `Tiles` chunks, and `FrameEnd`.
//!
//! A frame has a *base*: `Some(b)` means its tiles apply to a canvas
//! holding frame `b` (delta frames have `b = number - 1`; a catch-up for
//! a lagging or re-attached peer has the peer's own version), `None` means
//! a key frame that replaces every tile and applies to anything. Tiles
//! come in two modes: `Xor` (against the tile's current content) and
//! `Replace` (content as is); catch-ups and key frames use `Replace`
//! because the sender does not hold the receiver's older content.
//!
//! Every [`Canvas`] remembers, per tile, the frame number that last
//! changed it, so any peer holding frame `r` can bring a peer holding
//! frame `v <= r` up to date with exactly the tiles changed after `v`.

mod canvas;
mod encoder;
mod error;
mod grid;
mod message;

pub use canvas::{Canvas, CompletedFrame};
pub use encoder::Encoder;
pub use error::Error;
pub use grid::TileGrid;
pub use message::{EncodedFrame, EncodedTile, ScreenMessage, TileIter, TileMode};

/// Tile edge in pixels.
pub const TILE: usize = 64;

/// Largest frame the codec holds (8K RGB is about 100 MB). A peer
/// announcing more is refused before anything is allocated.
pub const MAX_SCREEN_BYTES: usize = 128 << 20;

/// Target size of one `Tiles` chunk; a chunk is closed once it passes
/// this, so hops forward data while the rest of the frame is in flight.
pub const CHUNK_BYTES: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{Kind, split};
    use crate::video::format::{PixelFormat, VideoFormat};
    use crate::video::pattern::Pattern;
    use proptest::prelude::*;

    fn apply_all(
        canvas: &mut Canvas,
        frame: &EncodedFrame,
    ) -> Result<Option<CompletedFrame>, Error> {
        let mut done = None;
        for m in &frame.messages {
            let (kind, body) = split(m)?;
            let msg = ScreenMessage::parse(kind, body)?.expect("screen message");
            if let Some(c) = canvas.apply(&msg)? {
                done = Some(c);
            }
        }
        Ok(done)
    }

    fn rgb(w: u32, h: u32) -> VideoFormat {
        VideoFormat::new(w, h, PixelFormat::Rgb24).unwrap()
    }

    #[test]
    fn pattern_round_trips_and_sends_only_changed_tiles() {
        let f = rgb(320, 240);
        let p = Pattern::new(f);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        let mut buf = vec![0; f.frame_bytes()];
        for n in 0..5 {
            p.render(n, &mut buf);
            let e = enc.encode(&buf, n, 1000 + n).unwrap();
            assert_eq!(e.key, n == 0);
            let done = apply_all(&mut dec, &e).unwrap().unwrap();
            assert_eq!(done.number, n);
            assert_eq!(done.captured_us, 1000 + n);
            assert_eq!(dec.pixels(), &buf[..]);
        }
        // An unchanged frame costs no tiles.
        let e = enc.encode(&buf, 5, 0).unwrap();
        assert_eq!(e.tiles, 0);
        apply_all(&mut dec, &e).unwrap().unwrap();
        assert_eq!(dec.version(), Some(5));
    }

    #[test]
    fn periodic_key_frames() {
        let f = rgb(64, 64);
        let mut enc = Encoder::new(f, 3).unwrap();
        let buf = vec![7; f.frame_bytes()];
        let keys: Vec<bool> = (0..7)
            .map(|n| enc.encode(&buf, n, 0).unwrap().key)
            .collect();
        assert_eq!(keys, [true, false, false, true, false, false, true]);
    }

    #[test]
    fn delta_on_wrong_base_is_refused() {
        let f = rgb(128, 64);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        let a = vec![1; f.frame_bytes()];
        let mut b = a.clone();
        enc.encode(&a, 0, 0).unwrap();
        b[5] = 9;
        let e = enc.encode(&b, 1, 0).unwrap();
        assert!(matches!(
            apply_all(&mut dec, &e),
            Err(Error::BaseMismatch {
                expected: Some(0),
                held: None
            })
        ));
    }

    #[test]
    fn refresh_brings_a_lagging_canvas_up_to_date() {
        let f = rgb(320, 400);
        let p = Pattern::new(f);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut relay = Canvas::new(f).unwrap();
        let mut lagging = Canvas::new(f).unwrap();
        let mut buf = vec![0; f.frame_bytes()];
        p.render(0, &mut buf);
        for n in 0..6 {
            // One pixel a frame, each in its own tile row.
            if n > 0 {
                buf[n as usize * TILE * f.line_bytes()] ^= 0xff;
            }
            let e = enc.encode(&buf, n, n).unwrap();
            apply_all(&mut relay, &e).unwrap();
            if n < 2 {
                apply_all(&mut lagging, &e).unwrap();
            }
        }
        let r = relay.refresh(lagging.version()).unwrap();
        assert!(!r.key);
        assert_eq!(r.tiles, 4, "only the tiles changed in frames 2..=5");
        let done = apply_all(&mut lagging, &r).unwrap().unwrap();
        assert_eq!((done.number, done.base), (5, Some(1)));
        assert_eq!(lagging.pixels(), &buf[..]);
        // And it follows deltas from there.
        p.render(6, &mut buf);
        apply_all(&mut lagging, &enc.encode(&buf, 6, 6).unwrap()).unwrap();
        assert_eq!(lagging.pixels(), &buf[..]);
    }

    #[test]
    fn refresh_for_a_peer_ahead_is_a_key_frame() {
        let f = rgb(64, 64);
        let mut enc = Encoder::new(f, 0).unwrap();
        enc.encode(&vec![3; f.frame_bytes()], 4, 0).unwrap();
        let r = enc.canvas().refresh(Some(9)).unwrap();
        assert!(r.key);
        let mut c = Canvas::new(f).unwrap();
        apply_all(&mut c, &r).unwrap();
        assert_eq!(c.version(), Some(4));
    }

    #[test]
    fn cut_off_frame_rolls_back() {
        let f = rgb(256, 128);
        let mut enc = Encoder::new(f, 0).unwrap();
        let mut dec = Canvas::new(f).unwrap();
        apply_all(
            &mut dec,
            &enc.encode(&vec![0; f.frame_bytes()], 0, 0).unwrap(),
        )
        .unwrap();
        let e = enc.encode(&vec![9; f.frame_bytes()], 1, 0).unwrap();
        for m in &e.messages[..2] {
            let (k, b) = split(m).unwrap();
            dec.apply(&ScreenMessage::parse(k, b).unwrap().unwrap())
                .unwrap();
        }
        assert_eq!(dec.version(), None, "no whole frame while one is open");
        dec.abort();
        assert_eq!(dec.version(), Some(0));
        assert_eq!(dec.pixels(), &vec![0; f.frame_bytes()][..], "rolled back");
        apply_all(&mut dec, &enc.canvas().refresh(Some(0)).unwrap()).unwrap();
        assert_eq!(dec.pixels(), enc.canvas().pixels());
    }

    #[test]
    fn screens_above_the_limit_are_refused_before_allocating() {
        let f = VideoFormat::new(16384, 16384, PixelFormat::Uyvp).unwrap();
        assert!(matches!(Canvas::new(f), Err(Error::ScreenTooLarge { .. })));
    }

    #[test]
    fn hostile_tiles_are_refused() {
        let f = rgb(64, 64);
        let mut c = Canvas::new(f).unwrap();
        let start = ScreenMessage::FrameStart {
            number: 1,
            base: None,
            captured_us: 0,
            tiles: 1,
        };
        c.apply(&start).unwrap();
        // Index out of range.
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&1u32.to_be_bytes());
        body.push(0);
        assert_eq!(
            c.apply(&ScreenMessage::Tiles(&body)),
            Err(Error::TileIndex { index: 7, count: 1 })
        );
        // A block that claims a huge literal run.
        c.apply(&start).unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(&[0xf0, 0xff, 0xff]);
        assert_eq!(
            c.apply(&ScreenMessage::Tiles(&body)),
            Err(Error::Lz4 { index: 0 })
        );
        // Length beyond the chunk.
        c.apply(&start).unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            c.apply(&ScreenMessage::Tiles(&body)),
            Err(Error::Framing(crate::framing::Error::Truncated {
                needed: u32::MAX as usize,
                got: 0
            }))
        );
        // A frame end before the announced tile.
        c.apply(&start).unwrap();
        assert_eq!(
            c.apply(&ScreenMessage::FrameEnd { number: 1 }),
            Err(Error::MissingTiles {
                seen: 0,
                announced: 1
            })
        );
    }

    fn frames() -> impl Strategy<Value = (VideoFormat, Vec<Vec<u8>>)> {
        (
            1u32..150,
            1u32..150,
            prop::sample::select(PixelFormat::ALL.to_vec()),
        )
            .prop_flat_map(|(w, h, pf)| {
                let w = w.div_ceil(2) * 2;
                let f = VideoFormat::new(w, h, pf).unwrap();
                let n = f.frame_bytes();
                // Sparse edits on a base so deltas are partial, plus noise.
                (
                    Just(f),
                    prop::collection::vec(any::<u8>(), n),
                    prop::collection::vec(prop::collection::vec((0..n, any::<u8>()), 0..40), 1..6),
                )
                    .prop_map(|(f, base, edits)| {
                        let mut frames = vec![base];
                        for e in edits {
                            let mut next = frames.last().unwrap().clone();
                            for (at, v) in e {
                                next[at] = v;
                            }
                            frames.push(next);
                        }
                        (f, frames)
                    })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn round_trip_is_bit_exact((f, frames) in frames(), key_interval in 0u64..4) {
            let mut enc = Encoder::new(f, key_interval).unwrap();
            let mut dec = Canvas::new(f).unwrap();
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, n as u64).unwrap();
                apply_all(&mut dec, &e).unwrap().unwrap();
                prop_assert_eq!(dec.pixels(), &fr[..]);
            }
        }

        #[test]
        fn refresh_from_any_older_version_is_bit_exact((f, frames) in frames(), since in 0usize..6) {
            let mut enc = Encoder::new(f, 0).unwrap();
            let mut old = Canvas::new(f).unwrap();
            let since = since.min(frames.len() - 1);
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, 0).unwrap();
                if n <= since {
                    apply_all(&mut old, &e).unwrap();
                }
            }
            let r = enc.canvas().refresh(old.version()).unwrap();
            apply_all(&mut old, &r).unwrap();
            prop_assert_eq!(old.pixels(), &frames.last().unwrap()[..]);
        }

        #[test]
        fn frame_cut_anywhere_rolls_back_and_catches_up((f, frames) in frames(), cut in any::<prop::sample::Index>()) {
            let mut enc = Encoder::new(f, 0).unwrap();
            let mut dec = Canvas::new(f).unwrap();
            let last = frames.len() - 1;
            for (n, fr) in frames.iter().enumerate() {
                let e = enc.encode(fr, n as u64, 0).unwrap();
                if n < last {
                    apply_all(&mut dec, &e).unwrap();
                    continue;
                }
                let held = dec.pixels().to_vec();
                for m in &e.messages[..cut.index(e.messages.len())] {
                    let (k, b) = split(m).unwrap();
                    dec.apply(&ScreenMessage::parse(k, b).unwrap().unwrap()).unwrap();
                }
                dec.abort();
                prop_assert_eq!(dec.pixels(), &held[..]);
            }
            if dec.version() != enc.canvas().version() {
                let r = enc.canvas().refresh(dec.version()).unwrap();
                apply_all(&mut dec, &r).unwrap();
            }
            prop_assert_eq!(dec.pixels(), &frames[last][..]);
        }

        #[test]
        fn arbitrary_messages_never_panic(kind in 0u8..=255, body in prop::collection::vec(any::<u8>(), 0..300)) {
            let f = rgb(64, 64);
            let mut c = Canvas::new(f).unwrap();
            let start = ScreenMessage::FrameStart { number: 1, base: None, captured_us: 0, tiles: 1 };
            c.apply(&start).unwrap();
            if let Ok(k) = Kind::try_from(kind) {
                if let Ok(Some(m)) = ScreenMessage::parse(k, &body) {
                    let _ = c.apply(&m);
                }
            }
        }
    }
}
