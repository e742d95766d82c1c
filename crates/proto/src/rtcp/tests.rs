use proptest::prelude::*;

use super::*;
use crate::units::{MediaTime, Nanos, Ssrc};

const SSRC: Ssrc = Ssrc(0x1234_5678);
/// 2026-01-01T00:00:00Z plus half a second.
const WALL: WallTime = WallTime(1_767_225_600_500_000_000);

fn sent(packets: u64, payload_octets: u64) -> Input {
    Input::Sent {
        packets,
        payload_octets,
        anchor: Anchor {
            wall: WallTime(1_767_225_600_000_000_000),
            rtp: MediaTime(1000),
        },
    }
}

/// A receiver report from `reader` with one block about `source`, laid
/// out by hand as RFC 3550 §6.4.2 draws it.
fn receiver_report(reader: u32, source: u32, fraction: u8, lost: u32, jitter: u32) -> Vec<u8> {
    let mut rr = vec![0x81, 201, 0, 7];
    rr.extend_from_slice(&reader.to_be_bytes());
    rr.extend_from_slice(&source.to_be_bytes());
    rr.push(fraction);
    rr.extend_from_slice(&lost.to_be_bytes()[1..]);
    rr.extend_from_slice(&70_000u32.to_be_bytes()); // highest sequence
    rr.extend_from_slice(&jitter.to_be_bytes());
    rr.extend_from_slice(&0xabcd_0001u32.to_be_bytes()); // LSR
    rr.extend_from_slice(&65_536u32.to_be_bytes()); // DLSR: one second
    rr
}

#[test]
fn ntp_time_counts_from_1900_with_a_binary_fraction() {
    let unix = NtpTime::from_wall(WallTime(0));
    assert_eq!(unix.0 >> 32, 2_208_988_800);
    assert_eq!(unix.0 & 0xffff_ffff, 0);
    let half = NtpTime::from_wall(WallTime(1_500_000_000));
    assert_eq!(half.0 >> 32, 2_208_988_801);
    assert_eq!(half.0 & 0xffff_ffff, 0x8000_0000);
    assert_eq!(half.to_wall(), WallTime(1_500_000_000));
    assert_eq!(
        half.middle(),
        ((2_208_988_801u64 & 0xffff) << 16) as u32 | 0x8000
    );
}

#[test]
fn rtp_time_is_counted_from_the_anchor_both_ways_modulo_2_32() {
    let a = Anchor {
        wall: WallTime(10_000_000_000),
        rtp: MediaTime(1000),
    };
    assert_eq!(
        a.rtp_at(WallTime(11_000_000_000), 90_000),
        MediaTime(91_000)
    );
    assert_eq!(a.rtp_at(WallTime(10_000_000_000), 90_000), MediaTime(1000));
    // A report may come just before the anchor's frame starts.
    assert_eq!(
        a.rtp_at(WallTime(9_000_000_000), 90_000),
        MediaTime(1000u32.wrapping_sub(90_000))
    );
}

#[test]
fn nothing_is_reported_before_the_first_packet() {
    let mut r = Reporter::new(Config::new(SSRC, "nagare", 1));
    assert_eq!(r.poll_transmit(Nanos::from_secs(5), WALL), None);
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn the_first_sender_report_goes_with_the_first_packets_and_says_exact_counts() {
    let mut r = Reporter::new(Config::new(SSRC, "nagare@test", 1));
    r.handle_input(Nanos::from_secs(1), sent(10, 12_000));
    r.handle_input(Nanos::from_secs(1), sent(5, 6_000));
    assert_eq!(r.poll_timeout(), Some(Nanos::from_secs(1)));
    let bytes = r.poll_transmit(Nanos::from_secs(1), WALL).expect("an SR");
    let packets = parse(&bytes).unwrap();
    assert_eq!(packets.len(), 2, "SR and SDES: {packets:?}");
    let Packet::SenderReport { ssrc, info, blocks } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!(*ssrc, SSRC);
    assert!(blocks.is_empty());
    assert_eq!(info.packets, 15);
    assert_eq!(info.octets, 18_000);
    assert_eq!(info.ntp, NtpTime::from_wall(WALL));
    // Half a second after the anchor on the 90 kHz clock.
    assert_eq!(info.rtp, MediaTime(1000 + 45_000));
    assert_eq!(packets[1], Packet::Sdes);
    // The CNAME is in the SDES chunk, as written.
    assert!(bytes.windows(11).any(|w| w == b"nagare@test"));
    assert_eq!(r.reports(), 1);
}

#[test]
fn reports_follow_at_half_to_one_and_a_half_intervals_and_only_after_fresh_packets() {
    let mut r = Reporter::new(Config::new(SSRC, "n", 7));
    let mut now = Nanos::from_secs(1);
    r.handle_input(now, sent(1, 100));
    assert!(r.poll_transmit(now, WALL).is_some());
    for _ in 0..50 {
        assert_eq!(r.poll_timeout(), None, "nothing new, no report");
        r.handle_input(now, sent(1, 100));
        let due = r.poll_timeout().unwrap();
        let gap = due - now;
        assert!(
            gap >= Nanos::from_millis(500) && gap < Nanos::from_millis(1500),
            "{gap:?}"
        );
        assert_eq!(r.poll_transmit(due - Nanos(1), WALL), None);
        assert!(r.poll_transmit(due, WALL).is_some());
        now = due;
    }
    assert_eq!(r.reports(), 51);
}

#[test]
fn counts_wrap_modulo_2_32() {
    let mut r = Reporter::new(Config::new(SSRC, "n", 1));
    r.handle_input(Nanos::ZERO, sent(u64::from(u32::MAX), u64::from(u32::MAX)));
    r.handle_input(Nanos::ZERO, sent(3, 5));
    let packets = parse(&r.poll_transmit(Nanos::ZERO, WALL).unwrap()).unwrap();
    let Packet::SenderReport { info, .. } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!((info.packets, info.octets), (2, 4));
}

#[test]
fn an_ended_stream_says_bye_once_after_a_last_report() {
    let mut r = Reporter::new(Config::new(SSRC, "n", 1));
    r.handle_input(Nanos::ZERO, sent(4, 400));
    assert!(r.poll_transmit(Nanos::ZERO, WALL).is_some());
    r.handle_input(Nanos::from_millis(10), sent(2, 200));
    r.handle_input(Nanos::from_millis(20), Input::Ended);
    // The BYE waits out its delay, so the last frame is read first.
    let at = Nanos::from_millis(20) + BYE_DELAY;
    assert_eq!(r.poll_timeout(), Some(at));
    assert_eq!(r.poll_transmit(at - Nanos(1), WALL), None);
    let bytes = r.poll_transmit(at, WALL).unwrap();
    let packets = parse(&bytes).unwrap();
    assert_eq!(packets.len(), 3, "{packets:?}");
    let Packet::SenderReport { info, .. } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!((info.packets, info.octets), (6, 600));
    assert_eq!(packets[1], Packet::Sdes);
    assert_eq!(
        packets[2],
        Packet::Bye {
            sources: vec![SSRC]
        }
    );
    assert!(r.said_bye());
    // Nothing after the BYE, whatever comes.
    r.handle_input(Nanos::from_secs(1), sent(1, 1));
    assert_eq!(r.poll_transmit(Nanos::from_secs(9), WALL), None);
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn a_stream_that_never_sent_says_bye_behind_an_empty_receiver_report() {
    let mut r = Reporter::new(Config::new(SSRC, "n", 1));
    r.handle_input(Nanos::ZERO, Input::Ended);
    let packets = parse(&r.poll_transmit(BYE_DELAY, WALL).unwrap()).unwrap();
    assert_eq!(
        packets,
        vec![
            Packet::ReceiverReport {
                ssrc: SSRC,
                blocks: vec![]
            },
            Packet::Sdes,
            Packet::Bye {
                sources: vec![SSRC]
            }
        ]
    );
}

#[test]
fn a_receiver_report_reads_back_every_field() {
    let rr = receiver_report(0xfeed, SSRC.0, 64, 12, 345);
    let packets = parse(&rr).unwrap();
    let want = ReportBlock {
        source: SSRC,
        fraction_lost: 64,
        cumulative_lost: 12,
        highest_seq: 70_000,
        jitter: 345,
        last_sr: 0xabcd_0001,
        delay_since_last_sr: 65_536,
    };
    assert_eq!(
        packets,
        vec![Packet::ReceiverReport {
            ssrc: Ssrc(0xfeed),
            blocks: vec![want]
        }]
    );
}

#[test]
fn cumulative_loss_is_24_bit_signed() {
    let rr = receiver_report(1, 2, 0, 0xff_ffff, 0);
    let Packet::ReceiverReport { blocks, .. } = &parse(&rr).unwrap()[0] else {
        panic!();
    };
    assert_eq!(blocks[0].cumulative_lost, -1);
    let rr = receiver_report(1, 2, 0, 0x7f_ffff, 0);
    let Packet::ReceiverReport { blocks, .. } = &parse(&rr).unwrap()[0] else {
        panic!();
    };
    assert_eq!(blocks[0].cumulative_lost, 0x7f_ffff);
}

#[test]
fn ffmpegs_empty_receiver_report_is_a_valid_compound() {
    // What FFmpeg sends to punch through NAT: an RR with no blocks.
    let punch = [0x80, 201, 0, 1, 0, 0, 0, 0];
    assert_eq!(
        parse(&punch).unwrap(),
        vec![Packet::ReceiverReport {
            ssrc: Ssrc(0),
            blocks: vec![]
        }]
    );
}

#[test]
fn malformed_compounds_are_refused() {
    let rr = receiver_report(1, 2, 0, 0, 0);
    // Empty, and shorter than a header.
    assert!(parse(&[]).is_err());
    assert!(parse(&[0x80]).is_err());
    // Cut short: the length says more than came.
    assert!(parse(&rr[..rr.len() - 4]).is_err());
    // Trailing bytes that no length covers.
    let mut long = rr.clone();
    long.extend_from_slice(&[0, 0]);
    assert!(parse(&long).is_err());
    // Version 1.
    let mut v1 = rr.clone();
    v1[0] = 0x41;
    assert!(parse(&v1).is_err());
    // A second packet of version 0 behind a good first one.
    let mut second = rr.clone();
    second.extend_from_slice(&[0x00, 203, 0, 0]);
    assert!(parse(&second).is_err());
    // A compound opening with a BYE.
    assert_eq!(
        parse(&[0x81, 203, 0, 1, 0, 0, 0, 1]),
        Err(Error::FirstNotReport(203))
    );
    // A report count the length cannot hold.
    let mut count = rr.clone();
    count[0] = 0x82;
    assert!(parse(&count).is_err());
}

#[test]
fn feedback_keeps_the_latest_report_and_counts_what_came() {
    let mut f = Feedback::new();
    f.handle_input(Nanos::from_secs(1), &receiver_report(9, 2, 10, 3, 100));
    f.handle_input(Nanos::from_secs(2), &receiver_report(9, 2, 20, 5, 200));
    f.handle_input(Nanos::from_secs(3), &[0x80, 201, 0, 1, 0, 0, 0, 9]);
    f.handle_input(Nanos::from_secs(3), b"garbage!");
    let mut leaving = receiver_report(9, 2, 0, 5, 200);
    leaving.extend_from_slice(&[0x81, 203, 0, 1, 0, 0, 0, 9]);
    f.handle_input(Nanos::from_secs(4), &leaving);
    let c = f.counters();
    assert_eq!(
        c,
        FeedbackCounters {
            compounds: 4,
            reports: 3,
            byes: 1,
            malformed: 1,
            own: 0,
        }
    );
    let latest = f.latest().unwrap();
    assert_eq!(latest.reader, Ssrc(9));
    assert_eq!(latest.at, Nanos::from_secs(4));
    assert_eq!(latest.block.cumulative_lost, 5);
}

#[test]
fn feedback_for_a_source_skips_blocks_about_others() {
    let mut f = Feedback::for_source(Ssrc(2));
    f.handle_input(Nanos::ZERO, &receiver_report(9, 3, 10, 3, 100));
    assert_eq!(f.latest(), None);
    f.handle_input(Nanos::ZERO, &receiver_report(9, 2, 10, 3, 100));
    assert_eq!(f.latest().unwrap().block.jitter, 100);
    assert_eq!(f.counters().reports, 1);
}

#[test]
fn feedback_for_a_source_sets_its_own_reports_and_bye_aside() {
    // A multicast sender hears its own SR and SR+BYE on the group.
    let mut r = Reporter::new(Config::new(SSRC, "me@host", 7));
    r.handle_input(Nanos::ZERO, sent(10, 12_000));
    let own_sr = r.poll_transmit(Nanos::ZERO, WALL).unwrap();
    r.handle_input(Nanos::ZERO, Input::Ended);
    let own_bye = r.poll_transmit(BYE_DELAY, WALL).unwrap();
    let mut f = Feedback::for_source(SSRC);
    f.handle_input(Nanos::ZERO, &own_sr);
    f.handle_input(Nanos::ZERO, &own_bye);
    // A stream that never sent closes with an RR of its own.
    f.handle_input(Nanos::ZERO, &bye(SSRC, "me@host", None));
    // A reader's report on the same group counts as before.
    f.handle_input(Nanos::ZERO, &receiver_report(9, SSRC.0, 0, 0, 50));
    assert_eq!(
        f.counters(),
        FeedbackCounters {
            compounds: 1,
            reports: 1,
            byes: 0,
            malformed: 0,
            own: 3,
        }
    );
    assert_eq!(f.latest().unwrap().reader, Ssrc(9));
    // Feedback on any source has no own stream: a sender's BYE counts.
    let mut any = Feedback::new();
    any.handle_input(Nanos::ZERO, &own_bye);
    assert_eq!((any.counters().byes, any.counters().own), (1, 0));
}

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&bytes);
        Feedback::new().handle_input(Nanos::ZERO, &bytes);
    }

    #[test]
    fn a_changed_byte_of_a_valid_compound_never_panics(at in 0usize..64, to in any::<u8>()) {
        let mut bytes = receiver_report(1, 2, 3, 4, 5);
        bytes.extend_from_slice(&bye(SSRC, "n", None));
        let n = bytes.len();
        bytes[at % n] = to;
        let _ = parse(&bytes);
    }
}

fn reception(highest_seq: u64, received: u64, lost: u64) -> Reception {
    Reception {
        source: SSRC,
        highest_seq,
        received,
        lost,
        jitter: 42,
    }
}

/// A sender report from the stream's sender at `wall`.
fn sr_at(wall: WallTime) -> Vec<u8> {
    let info = SenderInfo {
        ntp: NtpTime::from_wall(wall),
        rtp: MediaTime(7),
        packets: 1,
        octets: 1,
    };
    sender_report(SSRC, "sender", info)
}

#[test]
fn a_reader_reports_only_after_the_senders_first_report_and_at_once_then() {
    let mut r = Reader::new(Ssrc(0xfeed), "reader", 3);
    let got = Some(reception(100, 101, 0));
    assert_eq!(r.poll_transmit(Nanos::from_secs(1), got), None);
    assert_eq!(r.poll_timeout(), None);
    r.handle_input(Nanos::from_secs(2), &sr_at(WALL));
    assert_eq!(r.poll_timeout(), Some(Nanos::from_secs(2)));
    // Nothing received yet: nothing to report on.
    assert_eq!(r.poll_transmit(Nanos::from_secs(2), None), None);
    // Half a second after the SR came.
    let at = Nanos::from_millis(2500);
    let bytes = r.poll_transmit(at, got).expect("an RR");
    let packets = parse(&bytes).unwrap();
    let Packet::ReceiverReport { ssrc, blocks } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!(*ssrc, Ssrc(0xfeed));
    assert_eq!(packets[1], Packet::Sdes);
    let b = blocks[0];
    assert_eq!(
        (b.source, b.fraction_lost, b.cumulative_lost, b.highest_seq),
        (SSRC, 0, 0, 100)
    );
    assert_eq!(b.jitter, 42);
    assert_eq!(b.last_sr, NtpTime::from_wall(WALL).middle());
    assert_eq!(b.delay_since_last_sr, 32_768, "half a second in 1/65536 s");
    let c = r.counters();
    assert_eq!((c.sender_reports, c.reports_sent, c.malformed), (1, 1, 0));
}

#[test]
fn a_readers_fraction_lost_covers_the_last_interval_and_its_count_everything() {
    let mut r = Reader::new(Ssrc(1), "reader", 3);
    r.handle_input(Nanos::ZERO, &sr_at(WALL));
    assert!(
        r.poll_transmit(Nanos::ZERO, Some(reception(99, 100, 0)))
            .is_some()
    );
    let due = r.poll_timeout().unwrap();
    let gap = due - Nanos::ZERO;
    assert!(gap >= Nanos::from_millis(500) && gap < Nanos::from_millis(1500));
    assert_eq!(
        r.poll_transmit(due - Nanos(1), Some(reception(199, 150, 50))),
        None
    );
    // 100 expected since, 50 of them received: 128/256 lost.
    let bytes = r.poll_transmit(due, Some(reception(199, 150, 50))).unwrap();
    let packets = parse(&bytes).unwrap();
    let Packet::ReceiverReport { blocks, .. } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!(
        (blocks[0].fraction_lost, blocks[0].cumulative_lost),
        (128, 50)
    );
    // Feedback reads back what a Reader wrote.
    let mut f = Feedback::for_source(SSRC);
    f.handle_input(Nanos::ZERO, &bytes);
    assert_eq!(f.latest().unwrap().block, blocks[0]);
}

#[test]
fn a_reader_counts_byes_and_garbage_and_clamps_a_huge_loss() {
    let mut r = Reader::new(Ssrc(1), "reader", 3);
    r.handle_input(Nanos::ZERO, b"\x80\xc8garbage");
    r.handle_input(Nanos::ZERO, &bye(SSRC, "sender", None));
    r.handle_input(Nanos::ZERO, &sr_at(WALL));
    let bytes = r
        .poll_transmit(Nanos::ZERO, Some(reception(1 << 40, 1, 1 << 30)))
        .unwrap();
    let packets = parse(&bytes).unwrap();
    let Packet::ReceiverReport { blocks, .. } = &packets[0] else {
        panic!("{packets:?}");
    };
    assert_eq!(blocks[0].cumulative_lost, 0x7f_ffff);
    let c = r.counters();
    assert_eq!((c.malformed, c.byes, c.sender_reports), (1, 1, 1));
}
