//! ST 2110-21 on virtual time: ideal N, NL and W senders built from
//! `SenderSchedule`, and a bursty one that sends each frame in one go
//! (GStreamer's rtpvrawpay), fed to the `Analyzer` that judges by the same
//! model. 4:2:2 10-bit with 1200 bytes of video per packet: 4 packets a
//! line at 1080p59.94 (4320 a frame), 8 at 2160p50 (17280).

use nagare_proto::video::FrameRate;
use nagare_proto::video::st2110_21::{
    Analyzer, Compliance, Model, Observation, ReadSchedule, Scan, SenderSchedule, SenderType,
    Summary,
};
use nagare_proto::{ByteSize, ExtSeq, MediaTime, Nanos};

/// UDP payload: 1200 bytes of video, RTP, ESN and one SRD header.
const PAYLOAD: u64 = 1200 + 12 + 2 + 6;
/// One such packet on 10 Gbit/s Ethernet (with UDP/IP/MAC headers,
/// preamble and inter-frame gap): 1286 bytes, 1028.8 ns.
const WIRE_NS: u64 = 1029;
/// Frames sent; the first is not judged (the analyser waits for a
/// frame boundary).
const FRAMES: u64 = 8;

fn model(num: u32, den: u32, lines: u32, packets: u32) -> Model {
    Model::new(
        FrameRate::new(num, den).unwrap(),
        lines,
        Scan::Progressive,
        packets,
    )
    .unwrap()
}

fn p1080_5994() -> Model {
    model(60000, 1001, 1080, 4320)
}

fn p2160_50() -> Model {
    model(50, 1, 2160, 17_280)
}

/// Feeds `FRAMES` frames from about 2025-06-15 on the epoch, packet j of
/// frame n arriving at `at(n, j)`, and returns the analyser.
fn run(model: &Model, at: impl Fn(u64, u32) -> Nanos) -> Analyzer {
    let mut a = Analyzer::new(*model);
    let first = model.epoch_frame(Nanos::from_secs(1_750_000_000));
    let mut seq = 0;
    let mut last = Nanos::ZERO;
    for n in first..first + FRAMES {
        let rtp = MediaTime(model.rate().rtp_timestamp(n));
        for j in 0..model.packets() {
            let arrival = at(n, j);
            assert!(arrival >= last, "the sender's packets leave in order");
            last = arrival;
            a.handle_input(Observation {
                arrival,
                rtp_timestamp: rtp,
                marker: j + 1 == model.packets(),
                seq: ExtSeq(seq),
                len: ByteSize(PAYLOAD),
            });
            seq += 1;
        }
    }
    a
}

fn ideal(model: &Model, schedule: SenderSchedule) -> Summary {
    assert_eq!(schedule.model(), model);
    let mut a = run(model, |n, j| schedule.release(n, j));
    let mut frames = 0;
    while let Some(r) = a.poll_event() {
        frames += 1;
        assert!(r.complete && r.lost == 0 && r.seq_errors == 0);
        assert_eq!(r.packets, u64::from(model.packets()));
        // Stamped with the epoch frame they are sent in.
        assert_eq!(r.rtp_offset, 0);
        assert_eq!(r.latency, i64::try_from(r.fpt.0).unwrap());
        // The first packet leaves `lead` reads ahead of TPR0 (to within
        // the nanosecond the release rounds to).
        let ahead = schedule.trs().as_f64() * schedule.lead() as f64;
        assert!(
            (r.to_tpr0 as f64 - ahead).abs() <= 1.0,
            "{} vs {ahead}",
            r.to_tpr0
        );
        assert_eq!(
            r.verdict.compliance,
            a.summary().verdict().unwrap().compliance
        );
    }
    assert_eq!(frames, FRAMES - 1);
    a.summary().clone()
}

fn verdict(s: &Summary) -> String {
    s.verdict().expect("frames were judged").to_string()
}

#[test]
fn ideal_n_sender_is_narrow_1080p5994() {
    let m = p1080_5994();
    let s = ideal(&m, SenderSchedule::new(&m, SenderType::N));
    // Four reads ahead: the buffer holds 4 or 5 packets once reading
    // starts, 1..4 while it fills.
    assert_eq!(
        verdict(&s),
        "N (gapped): Cinst peak 0 within CMAX_N 6; VRX 1..5 within VRX_FULL_N 9"
    );
    assert_eq!(s.frame_verdicts.n, FRAMES - 1);
    // FPT = TRoffset − 4 TRS = 622 844.4 ns after the epoch frame start.
    assert!(
        (622_843..=622_844).contains(&s.fpt.min()),
        "{}",
        s.fpt.min()
    );
    assert!(s.fpt.max() <= 622_844);
    // 1501 or 1502 ticks a frame at 59.94 Hz.
    assert_eq!(s.rtp_delta.min(), Some(1501));
    assert_eq!(s.rtp_delta.max(), Some(1502));
    // The linear receiver reads too slowly for a gapped sender.
    assert!(s.vrx_linear.range.unwrap().peak > 9);
}

#[test]
fn n_sender_with_trains_of_cmax_stays_narrow_1080p5994() {
    let m = p1080_5994();
    let schedule = SenderSchedule::new(&m, SenderType::N)
        .with_train(6)
        .unwrap();
    assert_eq!(schedule.lead(), 1);
    let s = ideal(&m, schedule);
    assert_eq!(
        verdict(&s),
        "N (gapped): Cinst peak 5 within CMAX_N 6; VRX 1..7 within VRX_FULL_N 9"
    );
}

#[test]
fn ideal_nl_sender_is_narrow_linear_1080p5994() {
    let m = p1080_5994();
    let s = ideal(&m, SenderSchedule::new(&m, SenderType::NL));
    assert_eq!(
        verdict(&s),
        "NL (linear): Cinst peak 0 within CMAX_NL 5; VRX 1..5 within VRX_FULL_N 9"
    );
    assert_eq!(s.frame_verdicts.nl, FRAMES - 1);
    // The gapped receiver reads too fast for a linear sender.
    assert!(s.vrx_gapped.range.unwrap().min < 0);
}

#[test]
fn ideal_w_sender_is_wide_1080p5994() {
    let m = p1080_5994();
    let schedule = SenderSchedule::new(&m, SenderType::W);
    assert_eq!((schedule.train(), schedule.lead()), (16, 150));
    let s = ideal(&m, schedule);
    assert_eq!(
        verdict(&s),
        "W (gapped): Cinst peak 15 > CMAX_N 6; within CMAX_W 16; VRX peak 334 > VRX_FULL_N 9; within VRX_FULL_W 863"
    );
    // VRX: the first train's lead of 150 reads, grown by 40/1024 of a
    // read each read over the frame's 4320 (168), plus the train of 16.
    // Cinst stays a packet below CMAX: the lead grows slower than the
    // bucket drains.
    assert_eq!(s.frame_verdicts.w, FRAMES - 1);
    // An eighth of TRoffset after the epoch start: TRoffset (637 674 ns)
    // less the lead's 150 reads (556 111 ns), 81 563 ns.
    assert!((81_562..=81_564).contains(&s.fpt.min()), "{}", s.fpt.min());
}

/// Each frame leaves at line rate from its epoch start (the first whole
/// nanosecond after it).
fn bursty(model: &Model) -> Analyzer {
    run(model, |n, j| {
        let start = model.rate().frame_start_ns(n) + 1;
        Nanos(u64::try_from(start).unwrap() + u64::from(j) * WIRE_NS)
    })
}

#[test]
fn bursty_sender_is_not_compliant_1080p5994() {
    let m = p1080_5994();
    let mut a = bursty(&m);
    let s = a.summary();
    let v = s.verdict().unwrap();
    assert_eq!(v.compliance, Compliance::NotCompliant);
    assert_eq!(s.frame_verdicts.not_compliant, FRAMES - 1);
    // 4320 packets 1029 ns apart against a 3510.8 ns drain: the bucket
    // keeps 70.7 % of them.
    assert!((3050..3060).contains(&v.cinst_peak), "{}", v.cinst_peak);
    let text = v.to_string();
    assert!(
        text.starts_with(&format!(
            "not compliant (gapped): Cinst peak {} > CMAX_W 16 by {}; VRX peak ",
            v.cinst_peak,
            v.cinst_peak - 16
        )),
        "{text}"
    );
    assert!(text.contains("> VRX_FULL_W 863 by"), "{text}");
    let r = a.poll_event().unwrap();
    assert!(r.fpt < Nanos::from_micros(1), "{}", r.fpt);
}

#[test]
fn ideal_senders_at_2160p50() {
    let m = p2160_50();
    let limits = m.limits();
    assert_eq!(
        (
            limits.cmax_n,
            limits.cmax_nl,
            limits.cmax_w,
            limits.vrx_full_n,
            limits.vrx_full_w
        ),
        (20, 20, 40, 32, 2880)
    );
    let n = ideal(&m, SenderSchedule::new(&m, SenderType::N));
    assert_eq!(
        verdict(&n),
        "N (gapped): Cinst peak 0 within CMAX_N 20; VRX 1..16 within VRX_FULL_N 32"
    );
    let nl = ideal(&m, SenderSchedule::new(&m, SenderType::NL));
    assert_eq!(
        verdict(&nl),
        "NL (linear): Cinst peak 0 within CMAX_NL 20; VRX 1..16 within VRX_FULL_N 32"
    );
    let w = ideal(&m, SenderSchedule::new(&m, SenderType::W));
    assert_eq!(w.verdict().unwrap().schedule, ReadSchedule::Gapped);
    assert_eq!(
        verdict(&w),
        "W (gapped): Cinst peak 39 > CMAX_N 20; within CMAX_W 40; VRX peak 1315 > VRX_FULL_N 32; within VRX_FULL_W 2880"
    );
    let b = bursty(&m);
    assert_eq!(
        b.summary().verdict().unwrap().compliance,
        Compliance::NotCompliant
    );
}

/// The send machine itself (`video::Sender` with a shaped flow, as
/// `nagare send --tp` drives it) on virtual epoch time, each train's
/// packets arriving `WIRE_NS` apart from its release, judged by the
/// analyser.
fn sent_by_machine(model: &Model, schedule: SenderSchedule) -> Summary {
    use nagare_proto::Ssrc;
    use nagare_proto::video::sender::{Event, FlowSpec, Input, Sender};
    let first = model.epoch_frame(Nanos::from_secs(1_750_000_000)) + 1;
    let start = Nanos(u64::try_from(model.rate().frame_start_ns(first)).unwrap());
    let mut s = Sender::new();
    let spec = FlowSpec::new(model.rate(), model.packets() as usize, Ssrc(1))
        .shaped(schedule)
        .start(start, first)
        .trains(Nanos::ZERO, 64)
        .frame_limit(Some(FRAMES));
    let id = s.add_flow(spec);
    assert_eq!(s.max_train(id), Some(schedule.train() as usize));
    let mut a = Analyzer::new(*model);
    let mut now = Nanos::ZERO;
    let mut seq = 0;
    loop {
        while let Some(e) = s.poll_event() {
            if let Event::NeedFrame { flow, .. } = e {
                s.handle_input(now, Input::Frame { flow }).unwrap();
            }
        }
        if let Some(t) = s.poll_transmit(now) {
            assert_eq!(t.at, now);
            for (k, j) in t.packets.clone().enumerate() {
                assert_eq!(schedule.release(t.frame, j as u32), t.at);
                a.handle_input(Observation {
                    arrival: now + Nanos(k as u64 * WIRE_NS),
                    rtp_timestamp: t.timestamp,
                    marker: j + 1 == model.packets() as usize,
                    seq: ExtSeq(seq),
                    len: ByteSize(PAYLOAD),
                });
                seq += 1;
            }
            continue;
        }
        match s.poll_timeout() {
            Some(at) => now = at,
            None => break,
        }
    }
    assert_eq!(seq, FRAMES * u64::from(model.packets()));
    a.flush();
    a.summary().clone()
}

#[test]
fn the_send_machine_keeps_each_declared_type() {
    for m in [p1080_5994(), p2160_50()] {
        for t in SenderType::ALL {
            let schedule = SenderSchedule::with_jitter_margin(&m, t);
            let s = sent_by_machine(&m, schedule);
            let v = s.verdict().unwrap();
            let want = match t {
                SenderType::N => Compliance::Narrow,
                SenderType::NL => Compliance::NarrowLinear,
                SenderType::W => Compliance::Wide,
            };
            assert_eq!(v.compliance, want, "{t} at {} packets: {v}", m.packets());
            // A train of k packets peaks at k − 1 at most (the bucket
            // drains while the train is on the wire).
            assert!(v.cinst_peak < schedule.train(), "{t}: {v}");
            // The first frame is not judged (no boundary seen before it).
            assert_eq!(s.frames, FRAMES - 1);
        }
    }
}
