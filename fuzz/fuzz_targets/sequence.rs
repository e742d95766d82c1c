//! `SeqExtender::extend` feeding `SequenceTracker::record`, from a stream
//! of 5-byte records `tag | seq (2) | esn (2)`. `tag & 3` picks no ESN,
//! ESN 0, the given ESN, or a raw 32-bit value handed to the tracker
//! directly; `tag & 4` repeats the record at once.
//!
//! The tracker is checked against a plain set-based model of RFC 3550
//! A.3 counting; the extender against what its wrap rules promise.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::Reader;
use nagare_proto::stats::{Arrival, DUPLICATE_WINDOW, SeqExtender, SequenceTracker};

/// Where raw values handed straight to the tracker start (as the
/// extender's do, well above zero).
const DIRECT_BASE: u64 = 1 << 40;

#[derive(Default)]
struct Model {
    first: Option<u64>,
    highest: u64,
    received: HashSet<u64>,
    records: u64,
    duplicates: u64,
    too_old: u64,
    reordered: u64,
}

impl Model {
    fn record(&mut self, ext: u64) -> Arrival {
        self.records += 1;
        let Some(first) = self.first else {
            self.first = Some(ext);
            self.highest = ext;
            self.received.insert(ext);
            return Arrival::InOrder;
        };
        if ext > self.highest {
            let missing = ext - self.highest - 1;
            self.highest = ext;
            self.received.insert(ext);
            return if missing == 0 {
                Arrival::InOrder
            } else {
                Arrival::Ahead { missing }
            };
        }
        if self.highest - ext >= DUPLICATE_WINDOW || ext < first {
            self.too_old += 1;
            return Arrival::TooOld;
        }
        if !self.received.insert(ext) {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.reordered += 1;
        Arrival::Reordered
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let mut x = SeqExtender::default();
    let mut t = SequenceTracker::new();
    let mut m = Model::default();
    let mut ext_highest: Option<u64> = None;
    let mut last_expected = 0;

    while r.remaining() > 0 {
        let tag = r.u8();
        let seq = r.u16();
        let esn_field = r.u16();
        let repeats = if tag & 4 != 0 { 2 } else { 1 };
        let mut previous = None;
        for _ in 0..repeats {
            let ext = match tag & 3 {
                3 => DIRECT_BASE + ((u64::from(esn_field) << 16) | u64::from(seq)),
                mode => {
                    let esn = match mode {
                        0 => None,
                        1 => Some(0),
                        _ => Some(esn_field),
                    };
                    let ext = x.extend(seq, esn);
                    // The low half is always the packet's own number.
                    assert_eq!(ext as u16, seq);
                    // Without an ESN the 16-bit rule moves at most half
                    // the sequence space from the highest so far.
                    if let (None, Some(h)) = (esn, ext_highest) {
                        assert!(ext.abs_diff(h) <= 1 << 15, "{ext} from {h}");
                    }
                    // The same packet twice in a row extends the same way.
                    if let Some(p) = previous {
                        assert_eq!(ext, p);
                    }
                    previous = Some(ext);
                    ext_highest = Some(ext_highest.map_or(ext, |h: u64| h.max(ext)));
                    ext
                }
            };

            let before = t.counters();
            let arrival = t.record(ext);
            assert_eq!(arrival, m.record(ext), "ext {ext}");
            let c = t.counters();
            match arrival {
                Arrival::InOrder | Arrival::Ahead { .. } | Arrival::Reordered => {
                    assert_eq!(c.received, before.received + 1)
                }
                Arrival::Duplicate => assert_eq!(c.duplicates, before.duplicates + 1),
                Arrival::TooOld => assert_eq!(c.too_old, before.too_old + 1),
            }

            assert_eq!(c.received, m.received.len() as u64);
            assert_eq!(c.duplicates, m.duplicates);
            assert_eq!(c.too_old, m.too_old);
            assert_eq!(c.reordered, m.reordered);
            assert_eq!(c.received + c.duplicates + c.too_old, m.records);
            assert!(c.reordered <= c.received);
            let expected = t.expected();
            assert_eq!(expected, m.highest - m.first.unwrap_or(m.highest) + 1);
            assert!(expected >= last_expected);
            last_expected = expected;
            assert!(c.received <= expected);
            assert!(t.lost() <= expected);
            assert_eq!(t.lost(), expected - c.received);
        }
    }
});
