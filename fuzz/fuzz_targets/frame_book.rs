//! The frame book of a striped receive fed any stripe timestamps, frames
//! and ends, as `recv --stripes` feeds it from the network's timestamps.
//!
//! Input: `stripes (1) | rate (1) | incomplete (1) | limit (2)`, then
//! records `kind (1) | ...`: a stripe hand-out `stripe (1) | timestamp (4)
//! | now (4)`, a whole frame `timestamp (4) | missing (1)`, or the end.
//! Invariants: no panic; a bounded number of events per input; frame
//! indices never go backwards; the counters add up to what was booked.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::Reader;
use nagare_proto::video::aligned::AlignedBuf;
use nagare_proto::video::assembler::Assembled;
use nagare_proto::video::book::{Config, Event, FrameBook, Input};
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::{FrameRate, MediaTime, Nanos};

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let stripes = usize::from(input.u8() % 9).max(1);
    let rate = match input.u8() % 3 {
        0 => None,
        1 => FrameRate::new(30, 1).ok(),
        _ => FrameRate::new(60000, 1001).ok(),
    };
    let incomplete = match input.u8() % 3 {
        0 => Incomplete::Drop,
        1 => Incomplete::Keep,
        _ => Incomplete::RepeatLast,
    };
    let limit = match input.u16() {
        0 => None,
        n => Some(u64::from(n)),
    };
    let mut book = FrameBook::new(Config {
        stripes,
        rate,
        incomplete,
        frame_limit: limit,
    });
    let mut last_index: Option<u64> = None;
    while input.remaining() > 0 {
        let fed = match input.u8() % 3 {
            0 => {
                let stripe = usize::from(input.u8());
                let ts = MediaTime(input.u32());
                let now = Nanos(u64::from(input.u32()));
                book.handle_input(
                    now,
                    Input::Stripe {
                        stripe,
                        timestamp: ts,
                    },
                )
            }
            1 => {
                let timestamp = MediaTime(input.u32());
                let missing = u64::from(input.u8()) & ((1 << stripes) - 1);
                let frame = Assembled {
                    timestamp,
                    data: AlignedBuf::new(64),
                    missing,
                    incomplete: 0,
                };
                book.handle_input(Nanos::ZERO, Input::Whole(frame))
            }
            _ => book.handle_input(Nanos::ZERO, Input::End),
        };
        let _ = fed;
        let mut events = 0;
        while let Some(e) = book.poll_event() {
            events += 1;
            assert!(events <= 5, "one input made more than five events");
            let index = match e {
                Event::Frame { index, .. } => Some(index),
                Event::Lost { first, count } => Some(first + count.saturating_sub(1)),
                Event::Repeat { first, count, .. } => Some(first + count.saturating_sub(1)),
                Event::Spent(_) => None,
            };
            if let Some(i) = index {
                assert!(
                    last_index.is_none_or(|l| i >= l),
                    "index went back: {last_index:?} -> {i}"
                );
                last_index = Some(i);
            }
        }
        let s = book.stats();
        assert_eq!(
            s.booked(),
            s.frames_complete + s.frames_incomplete + s.frames_lost
        );
        if let Some(n) = limit {
            assert!(s.booked() <= n, "booked past the limit");
        }
    }
});
