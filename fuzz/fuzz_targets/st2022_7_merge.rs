//! The ST 2022-7 merge fed any datagrams on any legs, as `recv --dup`
//! feeds it from two sockets.
//!
//! Input: `legs (1) | window (2)` then datagrams as `leg (1) | len (2) |
//! bytes`. Invariants: no panic; memory stays within the window; every
//! datagram that parses as RTP is counted on exactly one leg and is
//! either forwarded, a duplicate or late; after `finish`, no leg lost more
//! than the stream's span and nothing is recovered that was unrecovered.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::Reader;
use nagare_proto::Nanos;
use nagare_proto::rtp::RtpPacket;
use nagare_proto::video::st2022_7::{Arrival, Input, Merger};

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let legs = usize::from(input.u8() % 5);
    let window = u64::from(input.u16());
    let mut m = Merger::new(legs, window);
    let (mut parsed, mut first) = (0u64, 0u64);
    while input.remaining() > 0 {
        let leg = usize::from(input.u8());
        let len = usize::from(input.u16());
        let bytes = input.bytes(len);
        let rtp = RtpPacket::new_checked(bytes).is_ok();
        m.handle_input(Nanos::ZERO, Input::Datagram { leg, bytes })
            .expect("every datagram is taken");
        let arrival = m.poll_event().expect("a verdict per datagram");
        if rtp {
            parsed += 1;
            first += u64::from(arrival == Arrival::First);
        } else {
            assert_eq!(arrival, Arrival::First, "non-RTP passes to the receiver");
        }
    }
    m.finish();
    let c = m.counters();
    let sum = |f: fn(&nagare_proto::video::st2022_7::LegCounters) -> u64| {
        c.legs.iter().map(f).sum::<u64>()
    };
    assert_eq!(sum(|l| l.received), parsed);
    assert_eq!(c.forwarded, first);
    assert_eq!(
        c.forwarded + sum(|l| l.duplicates) + sum(|l| l.late),
        parsed
    );
    assert!(sum(|l| l.recovered) <= c.forwarded);
});
