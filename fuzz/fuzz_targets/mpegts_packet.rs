//! Any bytes as a TS file through `mpegts::Packet`, the continuity
//! checker, the PCR schedule and the RTP/UDP datagram writer.
//!
//! Input: `shift (1)` then the file; the file is cut into 188-byte
//! packets starting `shift % 188` bytes in (so misaligned streams are
//! seen too), and fed in 7-packet datagrams.
//! Invariants: no panic; a packet the view accepts starts with 0x47, its
//! payload lies inside the packet after the header and adaptation field,
//! its PID and counter are in range; the checker's counters add up (errors
//! + duplicates + discontinuities <= packets checked); the schedule gives
//! every datagram exactly one departure, in order, never earlier than the
//! one before, and `duration` is not before the last; the writer accepts a
//! datagram exactly when every packet in it starts with the sync byte, and
//! the RTP datagram reads back with payload type 33, consecutive sequence
//! numbers and the packets as payload; a second pass through
//! `LoopStamper` changes only counters and discontinuity bits, and the
//! restarted schedule's times go on from the first pass's end;
//! `psi::check_stream` accepts only whole valid packets, with its PAT
//! inside them; heap use stays bounded.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader};
use nagare_proto::mpegts::{
    ContinuityChecker, DatagramWriter, Departure, Encapsulation, LoopStamper, PACKET_LEN, Packet,
    Schedule, ScheduleConfig,
};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::{BitRate, Ssrc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn check_packet(p: &Packet<&[u8]>, bytes: &[u8]) {
    assert_eq!(bytes[0], 0x47);
    assert!(p.pid().0 < 0x2000 && p.continuity_counter() < 16);
    let header = if p.has_adaptation() {
        5 + usize::from(bytes[4])
    } else {
        4
    };
    let payload = p.payload();
    if p.has_payload() {
        assert_eq!(payload.len(), PACKET_LEN - header);
        assert_eq!(payload, &bytes[header..PACKET_LEN]);
    } else {
        assert!(payload.is_empty());
    }
}

fn check_datagram(w: &mut DatagramWriter, d: &Departure, chunk: &[u8], expect_seq: &mut u16) {
    let mut out = [0u8; 1400];
    let all_sync = chunk.len() % PACKET_LEN == 0 && chunk.chunks(PACKET_LEN).all(|p| p[0] == 0x47);
    match w.write(d, chunk, &mut out) {
        Ok(n) => {
            assert!(all_sync);
            let rtp = RtpPacket::new_checked(&out[..n]).expect("our RTP parses");
            assert_eq!(rtp.payload_type(), 33);
            assert_eq!(rtp.sequence_number(), *expect_seq);
            assert_eq!(rtp.payload(), chunk);
            *expect_seq = expect_seq.wrapping_add(1);
        }
        Err(_) => assert!(!all_sync),
    }
}

/// The file again as a loop: restamped (the stamper accepts exactly the
/// packets the view accepts and changes only their counter and
/// discontinuity bits), and timed on from where the first pass ended.
fn second_pass(file: &[u8], schedule: &mut Schedule, last: Option<Departure>) {
    let end = schedule.duration();
    schedule.restart();
    let mut stamper = LoopStamper::new();
    let mut copy = file.to_vec();
    for pass in 0..2 {
        if pass == 1 {
            stamper.next_pass();
        }
        copy.copy_from_slice(file);
        for (p, orig) in copy.chunks_mut(PACKET_LEN).zip(file.chunks(PACKET_LEN)) {
            let ok = stamper.stamp(p).is_ok();
            assert_eq!(ok, Packet::new_checked(orig).is_ok());
            for (k, (a, b)) in p.iter().zip(orig).enumerate() {
                let allowed = match k {
                    3 => 0x0f,
                    5 => 0x80,
                    _ => 0,
                };
                assert_eq!(a & !allowed, b & !allowed, "byte {k} changed");
            }
        }
    }
    let mut count = 0u64;
    let mut prev = last.map(|d| d.at);
    for p in file.chunks(PACKET_LEN) {
        schedule.feed(p);
        while let Some(d) = schedule.take_departure() {
            assert_eq!(d.datagram, count);
            assert!(prev.is_none_or(|t| d.at >= t) && end.is_none_or(|e| d.at >= e));
            prev = Some(d.at);
            count += 1;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let shift = usize::from(r.u8()) % PACKET_LEN;
    let file = r.rest();
    let file = &file[shift.min(file.len())..];
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();

    let mut checker = ContinuityChecker::new();
    let mut schedule = Schedule::new(ScheduleConfig {
        max_pending: 64,
        ..ScheduleConfig::new(BitRate(6_000_000))
    });
    let mut writer = DatagramWriter::new(Encapsulation::Rtp, Ssrc(7), 0xfff0, 3);
    let mut seq = 0xfff0u16;
    let datagrams: Vec<&[u8]> = file.chunks(7 * PACKET_LEN).collect();
    let mut departures = Vec::new();
    for chunk in &datagrams {
        for bytes in chunk.chunks(PACKET_LEN) {
            if let Ok(p) = Packet::new_checked(bytes) {
                check_packet(&p, bytes);
                checker.check(&p);
            }
            schedule.feed(bytes);
        }
        departures.extend(std::iter::from_fn(|| schedule.take_departure()));
    }
    schedule.finish();
    departures.extend(std::iter::from_fn(|| schedule.take_departure()));

    let whole = &file[..file.len() - file.len() % PACKET_LEN];
    if let Ok(found) = nagare_proto::mpegts::psi::check_stream(whole) {
        assert_eq!(found.packets, whole.len() / PACKET_LEN);
        assert!(found.pat_at < found.packets);
        assert!(
            whole
                .chunks(PACKET_LEN)
                .all(|p| Packet::new_checked(p).is_ok())
        );
    }

    let n = checker.counters();
    assert!(n.errors + n.duplicates + n.discontinuities <= n.packets);
    assert_eq!(departures.len(), datagrams.len());
    for (i, d) in departures.iter().enumerate() {
        assert_eq!(d.datagram, i as u64);
        if i > 0 {
            assert!(d.at >= departures[i - 1].at);
        }
        check_datagram(&mut writer, d, datagrams[i], &mut seq);
    }
    if let (Some(last), Some(end)) = (departures.last(), schedule.duration()) {
        assert!(end >= last.at);
    }
    second_pass(file, &mut schedule, departures.last().copied());
    let used = CountingAlloc::peak() - base;
    assert!(
        used < (96 << 10) + datagrams.len() * 128 + file.len(),
        "{used} bytes of heap"
    );
});
