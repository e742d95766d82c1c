//! Sender → netem → receiver on virtual time, no sockets: the whole raw
//! video path of nagare-proto, with impairments scripted by sequence
//! number, so every frame and every counter is known exactly.

use std::collections::BTreeSet;

use nagare_proto::netem::{ImpairConfig, ImpairCounters, Netem};
use nagare_proto::video::receiver::{self, Config, Datagram, Incomplete};
use nagare_proto::video::sender::{self, Event, FlowSpec, Input, Transmit};
use nagare_proto::video::st2110_20::{Frame, Packetizer};
use nagare_proto::{ExtSeq, FrameRate, Nanos, PixelFormat, Ssrc, VideoFormat};

const FRAMES: u64 = 12;
/// The sender's first sequence number: netem's scripts count from it.
const FIRST_SEQ: u64 = 1000;
/// Epoch frame number of the first frame.
const FIRST_FRAME: u64 = 90_000;

fn format() -> VideoFormat {
    VideoFormat::new(64, 32, PixelFormat::Uyvp).unwrap()
}

fn rate() -> FrameRate {
    FrameRate::new(50, 1).unwrap()
}

/// Frame `k` of the source: distinct bytes everywhere.
fn source(k: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ k;
    (0..format().frame_bytes())
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect()
}

fn packetizer() -> Packetizer {
    Packetizer::new(format(), 600, Ssrc(0x5eed))
        .unwrap()
        .uniform()
}

fn packets_per_frame() -> u64 {
    packetizer().packets_per_frame() as u64
}

/// What came out of the receiver.
struct Outcome {
    frames: Vec<Frame>,
    lost: Vec<(u64, u64)>,
    stats: receiver::Stats,
    netem: ImpairCounters,
    sent: u64,
}

/// Runs `FRAMES` frames through `impair` into a receiver.
fn run(impair: ImpairConfig) -> Outcome {
    let mut tx = sender::Sender::new();
    tx.add_flow(
        FlowSpec::video(rate(), packetizer())
            .start(Nanos::from_millis(1), FIRST_FRAME)
            .first_seq(ExtSeq(FIRST_SEQ))
            .frame_limit(Some(FRAMES)),
    );
    let mut net: Netem<Vec<u8>> = Netem::new(impair);
    let mut rx = receiver::Receiver::new(Config {
        format: format(),
        rate: Some(rate()),
        incomplete: Incomplete::Keep,
        frame_limit: Some(FRAMES),
    });
    let mut out = Outcome {
        frames: Vec::new(),
        lost: Vec::new(),
        stats: receiver::Stats::default(),
        netem: ImpairCounters::default(),
        sent: 0,
    };
    let mut now = Nanos::ZERO;
    let mut finished = false;
    loop {
        while let Some(e) = tx.poll_event() {
            match e {
                Event::NeedFrame { flow, .. } => {
                    tx.handle_input(now, Input::Frame { flow }).unwrap()
                }
                Event::Finished { .. } => finished = true,
                Event::FrameSent { .. }
                | Event::Underrun { .. }
                | Event::Dropped { .. }
                | Event::Slipped { .. } => {}
            }
        }
        if let Some(t) = tx.poll_transmit(now) {
            out.sent += transmit(&tx, &t, &mut net, now);
            continue;
        }
        while let Some(d) = net.poll_transmit(now) {
            rx.handle_input(
                now,
                Datagram {
                    bytes: &d,
                    from: None,
                },
            );
        }
        collect(&mut rx, &mut out);
        let next = [tx.poll_timeout(), net.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(at) => now = now.max(at),
            None if finished => break,
            None => panic!("nothing to do before the sender finished"),
        }
    }
    for d in net.drain().collect::<Vec<_>>() {
        rx.handle_input(
            now,
            Datagram {
                bytes: &d,
                from: None,
            },
        );
    }
    rx.finish();
    collect(&mut rx, &mut out);
    out.stats = rx.stats();
    out.netem = net.counters();
    out
}

/// Puts train `t` on the path as datagrams: headers, frame bytes and
/// padding, as the driver gathers them. Returns how many.
fn transmit(tx: &sender::Sender, t: &Transmit, net: &mut Netem<Vec<u8>>, now: Nanos) -> u64 {
    let p = tx.packetizer(t.flow).unwrap();
    let frame = source(t.frame - FIRST_FRAME);
    let mut buf = [0u8; 600];
    for k in 0..t.len() {
        let i = t.packets.start + k;
        let h = tx.write_header(t, k, &mut buf).unwrap();
        let mut datagram = buf[..h].to_vec();
        datagram.extend_from_slice(&frame[p.data_range(i)]);
        datagram.extend_from_slice(p.padding(i));
        let seq = t.first_seq.add(k as u64).wire();
        let len = datagram.len();
        net.handle_input(now, datagram, len, Some(seq));
    }
    t.len() as u64
}

fn collect(rx: &mut receiver::Receiver, out: &mut Outcome) {
    while let Some(e) = rx.poll_event() {
        match e {
            receiver::Event::Frame(f) => out.frames.push(f),
            receiver::Event::Lost { first, count } | receiver::Event::Missing { first, count } => {
                out.lost.push((first, count))
            }
            receiver::Event::Stream { .. } | receiver::Event::Rival { .. } => {}
        }
    }
}

/// Sequence number of packet `i` of frame `f`.
fn seq(f: u64, i: u64) -> u64 {
    FIRST_SEQ + f * packets_per_frame() + i
}

#[test]
fn a_clean_path_delivers_every_frame_byte_identical() {
    let out = run(ImpairConfig {
        delay: Nanos::from_micros(300),
        ..ImpairConfig::default()
    });
    assert_eq!(out.frames.len() as u64, FRAMES);
    for (k, f) in out.frames.iter().enumerate() {
        assert_eq!(f.index, k as u64);
        assert!(f.complete, "frame {k}");
        assert!(f.data == source(k as u64), "frame {k} differs");
        assert_eq!(f.timestamp.0, rate().rtp_timestamp(FIRST_FRAME + k as u64));
    }
    let s = out.stats;
    assert_eq!(out.sent, FRAMES * packets_per_frame());
    assert_eq!(out.netem.forwarded, out.sent);
    assert_eq!(s.packets_received, out.sent);
    let faults = [
        s.packets_lost,
        s.packets_reordered,
        s.packets_duplicate,
        s.packets_malformed,
    ];
    assert_eq!(faults, [0; 4]);
    assert_eq!(
        (s.packets_late, s.packets_foreign, s.frames_lost),
        (0, 0, 0)
    );
    assert!(out.lost.is_empty());
    // Evenly paced over a constant delay: no jitter at all.
    assert_eq!(s.jitter, Nanos::ZERO);
}

#[test]
fn scripted_loss_reorder_and_duplicates_are_counted_exactly() {
    let ppf = packets_per_frame();
    assert!(ppf >= 6, "{ppf} packets a frame");
    // Frame 2 loses one packet; frame 4 every packet; in frame 6 packet 2
    // is overtaken by three later ones; in frame 8 packet 1 arrives twice,
    // and in frame 9 packet 3 is both held back and doubled.
    let drop: BTreeSet<u64> = std::iter::once(seq(2, 3))
        .chain((0..ppf).map(|i| seq(4, i)))
        .collect();
    let out = run(ImpairConfig {
        delay: Nanos::from_micros(300),
        drop_seq: drop.clone(),
        reorder_seq: [seq(6, 2), seq(9, 3)].into(),
        duplicate_seq: [seq(8, 1), seq(9, 3)].into(),
        ..ImpairConfig::default()
    });
    let n = &out.netem;
    assert_eq!(
        (n.dropped_scripted, n.reordered, n.duplicated),
        (drop.len() as u64, 2, 2)
    );
    let s = out.stats;
    assert_eq!(s.packets_received, out.sent - drop.len() as u64);
    assert_eq!(s.packets_lost, drop.len() as u64);
    assert_eq!(s.packets_reordered, 2);
    assert_eq!(s.packets_duplicate, 2);
    assert_eq!(
        (s.packets_malformed, s.packets_late, s.packets_foreign),
        (0, 0, 0)
    );
    assert_eq!(
        (s.frames_complete, s.frames_incomplete, s.frames_lost),
        (FRAMES - 2, 1, 1)
    );
    assert_eq!(out.lost, [(4, 1)]);
    let indices: Vec<u64> = out.frames.iter().map(|f| f.index).collect();
    let want: Vec<u64> = (0..FRAMES).filter(|&k| k != 4).collect();
    assert_eq!(indices, want);
    // Complete frames are byte-identical, the incomplete one is too
    // except for the lost packet's bytes, which are zero.
    let hole = packetizer().data_range(3);
    for f in &out.frames {
        let want = source(f.index);
        if f.index == 2 {
            assert!(!f.complete);
            for (i, b) in f.data.iter().enumerate() {
                assert_eq!(*b, if hole.contains(&i) { 0 } else { want[i] }, "byte {i}");
            }
        } else {
            assert!(f.complete && f.data == want, "frame {}", f.index);
        }
    }
}

#[test]
fn a_lost_tail_is_reported_missing() {
    // The last two frames never arrive: the limit accounts for them.
    let ppf = packets_per_frame();
    let drop: BTreeSet<u64> = (seq(FRAMES - 2, 0)..seq(FRAMES, 0)).collect();
    assert_eq!(drop.len() as u64, 2 * ppf);
    let out = run(ImpairConfig {
        drop_seq: drop,
        ..ImpairConfig::default()
    });
    assert_eq!(out.frames.len() as u64, FRAMES - 2);
    assert_eq!(out.lost, [(FRAMES - 2, 2)]);
    // Packets after the last one received cannot be known lost.
    assert_eq!(out.stats.packets_lost, 0);
    assert_eq!(out.stats.frames_lost, 2);
}
