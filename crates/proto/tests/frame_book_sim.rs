//! A striped receive's booking on virtual time, no sockets: 8 stripe
//! streams of a 50 fps picture whose RTP timestamps wrap past 2^32 at
//! frame 2, into one `Assembler` and one `FrameBook`, as `recv --stripes`
//! wires them. Stripe 5 misses frame 3, every stripe misses frame 6, and
//! frame 8's last stripe comes 1 ms after its first; every event, every
//! recorded picture and every counter is known by hand.

use nagare_proto::video::aligned::AlignedBuf;
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::book::{Config, Event, FrameBook, Input};
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{FrameRate, MediaTime, Nanos, PixelFormat, VideoFormat};

const STRIPES: usize = 8;
const FRAMES: u64 = 10;
/// 50 fps on the 90 kHz clock.
const PERIOD: u32 = 1800;
/// Frame 0's timestamp: frames 0 and 1 before the wrap, frame 2 at 1.
const T0: u32 = u32::MAX - 2 * PERIOD + 2;

fn stripes() -> Stripes {
    let f = VideoFormat::new(64, 32, PixelFormat::Uyvy422).unwrap();
    Stripes::new(f, Rule::Lines, STRIPES).unwrap()
}

fn picture(f: u64) -> Vec<u8> {
    let n = stripes().frame_format().frame_bytes();
    (0..n).map(|i| (i as u64 * 13 + f * 101) as u8).collect()
}

fn timestamp(f: u64) -> MediaTime {
    MediaTime(T0.wrapping_add(f as u32 * PERIOD))
}

/// When stripe `k` hands out frame `f`: 20 ms a frame, 25 µs between
/// stripes; frame 8's stripe 7 comes 1 ms after its stripe 0.
fn handed_out(f: u64, k: usize) -> Nanos {
    let offset = if (f, k) == (8, 7) {
        1000
    } else {
        25 * k as u64
    };
    Nanos::from_millis(20 * f) + Nanos::from_micros(offset)
}

/// Whether stripe `k` delivers frame `f`.
fn delivered(f: u64, k: usize) -> bool {
    f != 6 && (f, k) != (3, 5)
}

/// What the driver saw: events as words, and the pictures recorded.
#[derive(Default)]
struct Seen {
    words: Vec<String>,
    recorded: Vec<u64>,
}

impl Seen {
    /// The picture `data` holds: `f`, or `100 + f` for picture `f` with
    /// stripe 5 zeros.
    fn which(data: &AlignedBuf) -> u64 {
        let zeros = vec![0; stripes().stripe_format().frame_bytes()];
        (0..FRAMES)
            .find(|&f| data[..] == picture(f)[..])
            .or_else(|| {
                (0..FRAMES)
                    .find(|&f| {
                        let mut holed = picture(f);
                        stripes().merge(&zeros, 5, &mut holed).unwrap();
                        data[..] == holed[..]
                    })
                    .map(|f| 100 + f)
            })
            .expect("a recorded frame is one of the pictures")
    }

    fn take(&mut self, book: &mut FrameBook, assembler: &mut Assembler) {
        while let Some(e) = book.poll_event() {
            let word = match e {
                Event::Frame {
                    index,
                    timestamp,
                    complete,
                    missing,
                    data,
                    ..
                } => {
                    assert_eq!(timestamp, self::timestamp(index));
                    if let Some(d) = data {
                        self.recorded.push(Self::which(&d));
                    }
                    match complete {
                        true => format!("f{index}"),
                        false => format!("f{index}!{missing:b}"),
                    }
                }
                Event::Lost { first, count } => format!("lost{first}+{count}"),
                Event::Repeat { first, count, data } => {
                    let f = Self::which(&data);
                    self.recorded.extend((0..count).map(|_| f));
                    format!("rep{first}+{count}")
                }
                Event::Spent(buf) => {
                    assembler.recycle(buf);
                    continue;
                }
            };
            self.words.push(word);
        }
    }
}

/// The stream through an assembler and a book under `incomplete` and
/// `limit`.
fn run(incomplete: Incomplete, limit: Option<u64>) -> (Seen, FrameBook, Assembler) {
    let s = stripes();
    let mut assembler = Assembler::new(s, 8);
    let mut book = FrameBook::new(Config {
        stripes: STRIPES,
        rate: Some(FrameRate::new(50, 1).unwrap()),
        incomplete,
        frame_limit: limit,
    });
    let mut seen = Seen::default();
    let mut part = vec![0; s.stripe_format().frame_bytes()];
    for f in 0..FRAMES {
        for k in (0..STRIPES).filter(|&k| delivered(f, k)) {
            let (at, ts) = (handed_out(f, k), timestamp(f));
            let stripe = Input::Stripe {
                stripe: k,
                timestamp: ts,
            };
            book.handle_input(at, stripe).unwrap();
            s.split(&picture(f), k, &mut part).unwrap();
            assembler.handle_input(k, ts, &part, true).unwrap();
            while let Some(whole) = assembler.poll_event() {
                book.handle_input(at, Input::Whole(whole)).unwrap();
            }
            seen.take(&mut book, &mut assembler);
        }
    }
    assembler.finish();
    let end = Nanos::from_millis(20 * FRAMES);
    while let Some(whole) = assembler.poll_event() {
        book.handle_input(end, Input::Whole(whole)).unwrap();
    }
    book.handle_input(end, Input::End).unwrap();
    seen.take(&mut book, &mut assembler);
    (seen, book, assembler)
}

#[test]
fn without_repeat_last_lost_and_incomplete_frames_leave_gaps() {
    let (seen, book, assembler) = run(Incomplete::Drop, None);
    assert_eq!(
        seen.words,
        [
            "f0",
            "f1",
            "f2",
            "f3!100000",
            "f4",
            "f5",
            "lost6+1",
            "f7",
            "f8",
            "f9"
        ]
    );
    assert_eq!(seen.recorded, [0, 1, 2, 4, 5, 7, 8, 9]);
    let s = book.stats();
    assert_eq!(
        (s.frames_complete, s.frames_incomplete, s.frames_lost),
        (8, 1, 1)
    );
    // Seven frames of 175 µs, one of 1 ms.
    assert_eq!((s.skew_frames, s.skew_max), (8, Nanos::from_micros(1000)));
    assert_eq!(s.skew_mean(), Nanos(278_125));
    assert_eq!(assembler.counters()[5].missing, 1);
    assert_eq!(assembler.counters()[4].missing, 0);
}

#[test]
fn with_repeat_last_the_recording_keeps_its_timing() {
    let (seen, book, _) = run(Incomplete::RepeatLast, None);
    assert_eq!(
        seen.words,
        [
            "f0",
            "f1",
            "f2",
            "f3!100000",
            "rep3+1",
            "f4",
            "f5",
            "lost6+1",
            "rep6+1",
            "f7",
            "f8",
            "f9"
        ]
    );
    // One picture per frame period: 2 in place of 3, 5 in place of 6.
    assert_eq!(seen.recorded, [0, 1, 2, 2, 4, 5, 5, 7, 8, 9]);
    assert_eq!(book.stats().booked(), FRAMES);
}

#[test]
fn a_kept_incomplete_frame_is_recorded_with_its_hole() {
    let (seen, _, _) = run(Incomplete::Keep, None);
    assert_eq!(seen.words[3], "f3!100000");
    assert_eq!(seen.recorded, [0, 1, 2, 103, 4, 5, 7, 8, 9]);
}

#[test]
fn the_frame_limit_ends_the_booking_on_a_lost_frame() {
    let (seen, book, _) = run(Incomplete::RepeatLast, Some(7));
    assert_eq!(
        seen.words,
        [
            "f0",
            "f1",
            "f2",
            "f3!100000",
            "rep3+1",
            "f4",
            "f5",
            "lost6+1",
            "rep6+1"
        ]
    );
    assert!(book.is_done());
    assert_eq!(book.stats().booked(), 7);
}
