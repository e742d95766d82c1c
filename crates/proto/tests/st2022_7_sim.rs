//! ST 2022-7 on virtual time, no sockets: two epoch-locked senders of the
//! same stream (as two cluster nodes during a hitless move), each leg
//! through its own netem with its own losses, the second leg two frame
//! periods behind, into one `Merger` and one `Receiver`. Every frame and
//! every counter is known by hand.

use nagare_proto::netem::{ImpairConfig, Netem};
use nagare_proto::video::receiver::{self, Config, Datagram, Incomplete};
use nagare_proto::video::sender::{self, Event, FlowSpec, Input, locked_seq_base};
use nagare_proto::video::st2022_7::{self, Arrival, Merger};
use nagare_proto::video::st2110_20::{Frame, Packetizer};
use nagare_proto::{FrameRate, Nanos, PixelFormat, Ssrc, VideoFormat};

/// Epoch frame number of the stream's first frame.
const FIRST: u64 = 7_000;
const SSRC: Ssrc = Ssrc(0x2022_0007);

fn format() -> VideoFormat {
    VideoFormat::new(64, 16, PixelFormat::Uyvy422).unwrap()
}

fn rate() -> FrameRate {
    FrameRate::new(50, 1).unwrap()
}

/// Epoch frame `f`'s picture: the same on both nodes (shared storage).
fn picture(f: u64) -> Vec<u8> {
    (0..format().frame_bytes())
        .map(|i| (i as u64 * 31 + f * 7) as u8)
        .collect()
}

fn packetizer() -> Packetizer {
    Packetizer::new(format(), 300, SSRC).unwrap().uniform()
}

/// One node: frames `first..first + frames` of the epoch grid, starting
/// at the first one's place on the timeline (50 fps: 20 ms a frame).
struct Node {
    tx: sender::Sender,
    net: Netem<Vec<u8>>,
    /// (frame offset from FIRST, packet index) this leg's path loses.
    lose: Vec<(u64, usize)>,
    done: bool,
}

impl Node {
    fn new(first: u64, frames: u64, delay: Nanos, lose: Vec<(u64, usize)>) -> Node {
        let mut tx = sender::Sender::new();
        let start = Nanos::from_millis(20 * (first - FIRST));
        tx.add_flow(
            FlowSpec::video(rate(), packetizer())
                .start(start, first)
                .epoch_locked(locked_seq_base(SSRC))
                .frame_limit(Some(frames)),
        );
        let net = Netem::new(ImpairConfig {
            delay,
            ..ImpairConfig::default()
        });
        Node {
            tx,
            net,
            lose,
            done: false,
        }
    }

    /// Answers frame requests and puts due trains on the path.
    fn step(&mut self, now: Nanos) {
        while let Some(e) = self.tx.poll_event() {
            match e {
                Event::NeedFrame { flow, .. } => {
                    self.tx.handle_input(now, Input::Frame { flow }).unwrap()
                }
                Event::Finished { .. } => self.done = true,
                Event::FrameSent { .. }
                | Event::Underrun { .. }
                | Event::Dropped { .. }
                | Event::Slipped { .. } => {}
            }
        }
        while let Some(t) = self.tx.poll_transmit(now) {
            let p = self.tx.packetizer(t.flow).unwrap();
            let frame = picture(t.frame);
            for k in 0..t.len() {
                let i = t.packets.start + k;
                if self.lose.contains(&(t.frame - FIRST, i)) {
                    continue;
                }
                let mut d = vec![0u8; 300];
                let h = self.tx.write_header(&t, k, &mut d).unwrap();
                d.truncate(h);
                d.extend_from_slice(&frame[p.data_range(i)]);
                d.extend_from_slice(p.padding(i));
                let len = d.len();
                self.net.handle_input(now, d, len, None);
            }
        }
    }

    fn next(&mut self) -> Option<Nanos> {
        [self.tx.poll_timeout(), self.net.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Runs both legs to the end; returns the frames and the merger.
fn run(legs: &mut [Node; 2], tolerance: usize) -> (Vec<Frame>, Merger) {
    let ppf = packetizer().packets_per_frame() as u64;
    let mut merger = Merger::new(2, 4 * ppf);
    let mut rx = receiver::Receiver::new(Config {
        format: format(),
        rate: Some(rate()),
        incomplete: Incomplete::Keep,
        frame_limit: None,
    });
    rx.set_tolerance(tolerance);
    let mut now = Nanos::ZERO;
    let mut frames = Vec::new();
    loop {
        for (leg, node) in legs.iter_mut().enumerate() {
            node.step(now);
            while let Some(d) = node.net.poll_transmit(now) {
                let datagram = st2022_7::Input::Datagram { leg, bytes: &d };
                merger.handle_input(now, datagram).unwrap();
                if merger.poll_event() == Some(Arrival::First) {
                    rx.handle_input(
                        now,
                        Datagram {
                            bytes: &d,
                            from: None,
                        },
                    );
                }
            }
        }
        while let Some(e) = rx.poll_event() {
            if let receiver::Event::Frame(f) = e {
                frames.push(f);
            }
        }
        match legs.iter_mut().filter_map(Node::next).min() {
            Some(at) => now = now.max(at),
            None if legs.iter().all(|n| n.done) => break,
            None => panic!("nothing to do before both nodes finished"),
        }
    }
    merger.finish();
    rx.finish();
    while let Some(e) = rx.poll_event() {
        if let receiver::Event::Frame(f) = e {
            frames.push(f);
        }
    }
    (frames, merger)
}

#[test]
fn disjoint_losses_on_two_legs_give_every_frame_whole() {
    // Node A (primary) sends frames 0..8 and stops; node B (the standby
    // taking over) joins at frame 2 and sends to frame 11, its path 40 ms
    // (two frame periods) longer. A's path loses packet 1 of frame 3 and
    // packets 0..3 of frame 5; B's loses packet 4 of frame 4 and packet 0
    // of frame 6: disjoint, and all inside the frames both carry.
    let a_lost = vec![(3, 1), (5, 0), (5, 1), (5, 2)];
    let b_lost = vec![(4, 4), (6, 0)];
    let mut legs = [
        Node::new(FIRST, 8, Nanos::from_micros(300), a_lost),
        Node::new(FIRST + 2, 10, Nanos::from_millis(40), b_lost),
    ];
    let (frames, merger) = run(&mut legs, 3);
    let indices: Vec<u64> = frames.iter().map(|f| f.index).collect();
    assert_eq!(indices, (0..12).collect::<Vec<_>>());
    for f in &frames {
        assert!(f.complete, "frame {}", f.index);
        assert!(
            f.data == picture(FIRST + f.index),
            "frame {} differs",
            f.index
        );
        assert_eq!(f.timestamp.0, rate().rtp_timestamp(FIRST + f.index));
    }
    // By hand, with p packets a frame: A carried frames 0..=7 (8p packets,
    // 4 lost), B frames 2..=11 (10p, 2 lost). Both carried 2..=7 (6p):
    // B made good A's 4, A made good B's 2, and every other packet of
    // those frames came twice, B's copy second (its path is longer).
    let p = packetizer().packets_per_frame() as u64;
    assert!(p >= 5, "{p} packets a frame");
    let c = merger.counters();
    let (a, b) = (c.legs[0], c.legs[1]);
    assert_eq!(
        (a.received, a.lost, a.recovered, a.duplicates),
        (8 * p - 4, 4, 2, 0)
    );
    assert_eq!(
        (b.received, b.lost, b.recovered, b.duplicates),
        (10 * p - 2, 2, 4, 6 * p - 6)
    );
    assert_eq!((c.forwarded, c.unrecovered), (12 * p, 0));
    assert_eq!((a.late, b.late), (0, 0));
}

#[test]
fn without_tolerance_a_copy_two_frames_late_comes_too_late() {
    // The same path differential, but a tolerance of one frame: the
    // receiver gives frame 3 up when frame 5 begins, before B's copy of
    // the packet A lost arrives, and frame 3 stays incomplete although
    // the merger forwarded the copy. Three frames of tolerance make it
    // count.
    let mut legs = [
        Node::new(FIRST, 8, Nanos::from_micros(300), vec![(3, 1)]),
        Node::new(FIRST, 8, Nanos::from_millis(40), vec![]),
    ];
    let (frames, merger) = run(&mut legs, 1);
    let incomplete: Vec<u64> = frames
        .iter()
        .filter(|f| !f.complete)
        .map(|f| f.index)
        .collect();
    assert_eq!(incomplete, [3]);
    assert_eq!(merger.counters().unrecovered, 0);
    let (frames, _) = run(
        &mut [
            Node::new(FIRST, 8, Nanos::from_micros(300), vec![(3, 1)]),
            Node::new(FIRST, 8, Nanos::from_millis(40), vec![]),
        ],
        3,
    );
    assert!(frames.iter().all(|f| f.complete));
}
