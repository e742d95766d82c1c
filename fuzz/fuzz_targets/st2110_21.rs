//! The ST 2110-21 `Analyzer` on arbitrary packet observations, and the
//! `SenderSchedule` of the same model, as `nagare analyze` would run them
//! on a capture anyone could have made.
//!
//! Input: a header choosing rate, raster, Npackets and TRoffset (models
//! the crate refuses fall back to 1080p50 with 960 packets), then records
//! (layout in `nagare_fuzz::st2110_21`): arrivals that jump, stand still
//! or go backwards, any timestamps, sequence numbers and lengths.
//! Invariants: no panic; every packet is counted; frame reports are
//! consistent with the model (epoch frame, FPT below a frame period,
//! VRX ranges ordered, per-frame verdicts judged from the frame's own
//! figures); queued reports never exceed `MAX_QUEUED_REPORTS`; frames =
//! polled + dropped + still queued; release times grow with the packet
//! index; heap use stays under a fixed bound whatever the input length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::st2110_21::{
    ABSOLUTE, FLUSH, INTERLACED, MARKER, POLL, RECORD_LEN, SEQ, TR_OFFSET,
};
use nagare_fuzz::{CountingAlloc, Reader};
use nagare_proto::video::FrameRate;
use nagare_proto::video::st2110_21::{
    Analyzer, FrameReport, MAX_QUEUED_REPORTS, Model, Observation, Scan, SenderSchedule,
    SenderType, Verdict,
};
use nagare_proto::{ByteSize, ExtSeq, MediaTime, Nanos};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Heap the analyser may use whatever the input: histograms grow with the
/// logarithm of the values, everything else is fixed.
const HEAP_BOUND: usize = 8 << 20;

fn model(r: &mut Reader) -> Model {
    let (num, den) = (r.u32(), r.u32());
    let lines = u32::from(r.u16());
    let flags = r.u8();
    let packets = r.u32();
    let tro = Nanos::from_micros(u64::from(r.u16()));
    let scan = if flags & INTERLACED != 0 {
        Scan::Interlaced
    } else {
        Scan::Progressive
    };
    let chosen = FrameRate::new(num, den)
        .ok()
        .and_then(|rate| Model::new(rate, lines, scan, packets).ok())
        .and_then(|m| {
            if flags & TR_OFFSET != 0 {
                m.with_tr_offset(tro).ok()
            } else {
                Some(m)
            }
        });
    chosen.unwrap_or_else(|| {
        let rate = FrameRate::new(50, 1).expect("50 fps is valid");
        Model::new(rate, 1080, Scan::Progressive, 960).expect("1080p50 is valid")
    })
}

fn check_report(m: &Model, r: &FrameReport) {
    assert_eq!(r.epoch_frame, m.epoch_frame(r.first_arrival));
    assert!(r.fpt < m.frame_period().floor() + Nanos(1), "FPT {}", r.fpt);
    assert!(r.packets >= 1);
    for v in [r.vrx_gapped, r.vrx_linear] {
        assert!(v.min <= v.peak);
        assert!(v.peak <= i64::try_from(r.packets).unwrap_or(i64::MAX));
    }
    let own = Verdict::judge(m.limits(), r.cinst_peak, r.vrx_gapped, r.vrx_linear);
    assert_eq!(r.verdict, own);
    assert!(!r.verdict.to_string().is_empty());
}

fn check_schedules(m: &Model) {
    for t in SenderType::ALL {
        let s = SenderSchedule::new(m, t);
        assert!(s.train() >= 1 && s.train() <= s.max_train());
        let mut last = Nanos::ZERO;
        let mut packets = [0, 1, 2, m.packets() / 2, m.packets() - 1, m.packets()];
        packets.sort_unstable();
        for j in packets {
            let at = s.release(1_000_000, j);
            assert!(at >= last);
            last = at;
        }
        let _ = s.next_frame(Nanos(u64::MAX / 3));
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let m = model(&mut r);
    check_schedules(&m);

    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let mut a = Analyzer::new(m);
    let (mut arrival, mut seq, mut packets, mut polled) = (0u64, 0u64, 0u64, 0u64);
    while r.remaining() >= RECORD_LEN {
        let tag = r.u8();
        let time = r.u64();
        let rtp = r.u32();
        let len = r.u16();
        arrival = if tag & ABSOLUTE != 0 {
            time
        } else {
            arrival.saturating_add(time % (1 << 24))
        };
        seq = if tag & SEQ != 0 {
            time
        } else {
            seq.wrapping_add(1)
        };
        a.handle_input(Observation {
            arrival: Nanos(arrival),
            rtp_timestamp: MediaTime(rtp),
            marker: tag & MARKER != 0,
            seq: ExtSeq(seq),
            len: ByteSize(u64::from(len)),
        });
        packets += 1;
        if tag & FLUSH != 0 {
            a.flush();
        }
        if tag & POLL != 0 {
            while let Some(rep) = a.poll_event() {
                check_report(&m, &rep);
                polled += 1;
            }
        }
    }
    a.flush();
    let s = a.summary();
    assert_eq!(s.packets, packets);
    assert_eq!(s.cinst.count(), packets);
    let mut queued = 0;
    while let Some(rep) = a.poll_event() {
        check_report(&m, &rep);
        queued += 1;
    }
    assert!(queued <= MAX_QUEUED_REPORTS as u64);
    let s = a.summary();
    assert_eq!(s.frames, polled + queued + s.reports_dropped);
    assert!(s.incomplete_frames <= s.frames);
    let verdict_seen = s.verdict().is_some();
    assert_eq!(verdict_seen, s.frames > 0);
    let used = CountingAlloc::peak().saturating_sub(base);
    assert!(used <= HEAP_BOUND, "{used} bytes of heap");
});
