//! Any bytes as an RTCP compound packet from a reader: `rtcp::parse` and
//! `rtcp::Feedback`, which serve feeds every datagram on a session's RTCP
//! port and every interleaved RTCP frame.
//!
//! Invariants: no panic; an accepted compound opens with an SR or RR,
//! holds at most one packet per 4 bytes and 64 in all, and every report
//! block it yields lies within the input (24 bytes each); `Feedback`
//! counts each input exactly once, as accepted or malformed (or, for a
//! source, as that source's own), and keeps a report only from an
//! accepted compound.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::rtcp::{Feedback, Packet, parse};
use nagare_proto::{Nanos, Ssrc};

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    let mut f = Feedback::new();
    f.handle_input(Nanos::ZERO, data);
    let c = f.counters();
    assert_eq!(c.compounds + c.malformed, 1);
    assert_eq!(c.own, 0, "feedback on any source has no own stream");
    // A multicast sender's feedback sets its own compounds aside.
    let mut mine = Feedback::for_source(Ssrc(0x1234_5678));
    mine.handle_input(Nanos::ZERO, data);
    let m = mine.counters();
    assert_eq!(m.compounds + m.malformed + m.own, 1);
    assert!(m.own == 0 || mine.latest().is_none());
    let Ok(packets) = parsed else {
        assert_eq!(c.malformed, 1);
        assert!(f.latest().is_none());
        return;
    };
    assert_eq!(c.compounds, 1);
    assert!(!packets.is_empty() && packets.len() <= 64);
    assert!(packets.len() <= data.len() / 4);
    assert!(matches!(
        packets[0],
        Packet::SenderReport { .. } | Packet::ReceiverReport { .. }
    ));
    let blocks: usize = packets
        .iter()
        .map(|p| match p {
            Packet::SenderReport { blocks, .. } | Packet::ReceiverReport { blocks, .. } => {
                blocks.len()
            }
            _ => 0,
        })
        .sum();
    assert!(blocks * 24 <= data.len());
    assert_eq!(c.reports as usize, blocks);
});
