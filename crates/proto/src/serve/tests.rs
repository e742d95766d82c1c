use std::net::IpAddr;

use super::budget::{BEHIND_LIMIT, DRY_RING_HOLD, Slack, Thread};
use super::describe::{self, Track};
use super::leg::{self, LEG_MARGIN, MAX_START_AHEAD};
use super::readahead::{RingFill, due_order};
use super::*;
use crate::video::stripe::Rule;
use crate::{BitRate, ByteSize, FrameRate, Nanos, PixelFormat, VideoFormat};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn cidr_blocks_contain_their_addresses() {
    let b = Cidr::parse("10.1.0.0/16").unwrap();
    assert!(b.contains(ip("10.1.200.3")));
    assert!(!b.contains(ip("10.2.0.1")));
    assert!(b.contains(ip("::ffff:10.1.0.9")));
    assert!(Cidr::parse("::/0").unwrap().contains(ip("fd00::1")));
    assert!(!Cidr::parse("::/0").unwrap().contains(ip("1.2.3.4")));
    assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
    assert_eq!(
        Cidr::parse(" 10.0.0.7 ").unwrap().to_string(),
        "10.0.0.7/32"
    );
    assert_eq!(
        Cidr::parse("::ffff:192.168.0.0/112").unwrap().to_string(),
        "192.168.0.0/112"
    );
    assert_eq!(
        "fd00::/64".parse::<Cidr>().unwrap().to_string(),
        "fd00::/64"
    );
}

#[test]
fn bad_cidr_text_is_refused_with_the_text() {
    let e = Cidr::parse("nope").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--allow 'nope' is not an address block such as 127.0.0.0/8 or fd00::/64"
    );
    assert_eq!(
        Cidr::parse("10.0.0.0/33").unwrap_err(),
        Error::CidrPrefix {
            text: "10.0.0.0/33".into(),
            max: 32
        }
    );
    assert_eq!(
        Cidr::parse("fd00::/129").unwrap_err().to_string(),
        "--allow 'fd00::/129': prefix length must be 0..=128"
    );
    assert!(Cidr::parse("10.0.0.0/x").is_err());
}

#[test]
fn allow_list_permits_own_address_and_blocks() {
    let list = AllowList::new(vec![Cidr::parse("239.0.0.0/8").unwrap()]);
    let me = ip("127.0.0.1");
    assert!(list.permits(me, me));
    assert!(list.permits(me, ip("::ffff:127.0.0.1")));
    assert!(list.permits(me, ip("239.1.1.1")));
    assert!(!list.permits(me, ip("127.0.0.2")));
    assert_eq!(list.check(me, ip("239.1.1.1")), Ok(()));
    let e = list.check(me, ip("10.0.0.9")).unwrap_err();
    assert_eq!(
        e,
        Error::DestinationNotAllowed {
            client: me,
            destination: ip("10.0.0.9"),
            allowed: vec![Cidr::parse("239.0.0.0/8").unwrap()],
        }
    );
    assert_eq!(
        e.to_string(),
        "destination 10.0.0.9 is neither your own address (127.0.0.1) nor inside --allow \
         (239.0.0.0/8); start the server with --allow 10.0.0.9/32 to permit it"
    );
    let none = AllowList::default().check(me, ip("10.0.0.9")).unwrap_err();
    assert!(
        none.to_string().contains("inside --allow (none);"),
        "{none}"
    );
    let two = AllowList::new(vec![
        Cidr::parse("10.1.0.0/16").unwrap(),
        Cidr::parse("fd00::/64").unwrap(),
    ]);
    let e = two.check(me, ip("10.2.0.1")).unwrap_err().to_string();
    assert!(e.contains("(10.1.0.0/16, fd00::/64)"), "{e}");
}

#[test]
fn token_is_checked_in_full() {
    let t = Token::new(Some("s3cret-token".into()), false).unwrap();
    assert!(t.admits(Some("Bearer s3cret-token")));
    assert!(t.admits(Some("  Bearer  s3cret-token ")));
    assert!(!t.admits(Some("Bearer s3cret-tokeN")));
    assert!(!t.admits(Some("Bearer s3cret-toke")));
    assert!(!t.admits(Some("s3cret-token")));
    assert!(!t.admits(None));
    assert_eq!(format!("{t:?}"), "Token(\"set\")");
    assert_eq!(
        Token::new(Some("short".into()), true).unwrap_err(),
        Error::TokenTooShort { len: 5 }
    );
    assert_eq!(Token::new(None, false).unwrap_err(), Error::TokenNeeded);
    for unusable in [
        "        ",
        "two words here",
        "tab\there-token",
        "ünïcödé-token",
    ] {
        assert_eq!(
            Token::new(Some(unusable.into()), false).unwrap_err(),
            Error::TokenNotPrintable,
            "{unusable:?}"
        );
    }
    assert!(Token::new(None, true).unwrap().admits(None));
}

/// A bars-like stream: 23 Mbit/s, 2,075 datagrams and 2.9 MB read a
/// second, a 450 KiB ring.
fn bars() -> Demand {
    Demand {
        rate: BitRate(23_040_000),
        packets_per_s: 2_075.0,
        read_bytes_per_s: 2_880_000.0,
        ring: ByteSize(460_800),
    }
}

fn idle(pacers: usize) -> Work {
    Work {
        pacers,
        cores: pacers,
        slack: Slack::default(),
        unproven: Demand::default(),
        pacer_load: 0.0,
        reader_load: 0.0,
        cost: Cost::PRIOR,
    }
}

fn unlimited(max_load: f64) -> Budget {
    Budget {
        max_rate: None,
        max_load,
        max_memory: None,
    }
}

#[test]
fn rtsp_needs_credentials_off_loopback_or_when_asked() {
    use crate::rtsp::{Guard, NONCE_KEY_LEN};
    let with = Token::new(Some("s3cret-token".into()), true).unwrap();
    let without = Token::new(None, true).unwrap();
    assert!(with.rtsp_credentials(true, false).unwrap().is_none());
    assert!(without.rtsp_credentials(true, false).unwrap().is_none());
    assert_eq!(
        without.rtsp_credentials(false, false).unwrap_err(),
        Error::RtspTokenNeeded
    );
    assert_eq!(
        without.rtsp_credentials(false, true).unwrap_err(),
        Error::RtspTokenNeeded
    );
    assert_eq!(
        without.rtsp_credentials(true, true).unwrap_err(),
        Error::RtspAuthWithoutToken
    );
    // The password is the token itself (Basic "u:s3cret-token").
    for (loopback, asked) in [(false, false), (false, true), (true, true)] {
        let c = with.rtsp_credentials(loopback, asked).unwrap().unwrap();
        let g = Guard::new(std::sync::Arc::new(c), [1; NONCE_KEY_LEN]);
        let basic = Some("Basic dTpzM2NyZXQtdG9rZW4=");
        assert_eq!(g.check(Nanos::ZERO, "PLAY", "rtsp://h/p", basic), Ok(()));
    }
    assert!(
        Error::RtspTokenNeeded
            .to_string()
            .contains("--rtsp 127.0.0.1:8554")
    );
}

#[test]
fn budget_admits_up_to_max_rate() {
    let b = Budget {
        max_rate: Some(BitRate(50_000_000)),
        ..unlimited(0.9)
    };
    let one = b.admit(Demand::default(), bars(), &idle(2)).unwrap();
    let two = b.admit(one, bars(), &idle(2)).unwrap();
    assert_eq!(two.rate, BitRate(46_080_000));
    let e = b.admit(two, bars(), &idle(2)).unwrap_err();
    assert_eq!(
        e,
        Error::RateOverBudget {
            asked: BitRate(23_040_000),
            reserved: BitRate(46_080_000),
            max: BitRate(50_000_000),
        }
    );
    assert_eq!(
        e.to_string(),
        "a stream of 23.04 Mbit/s on top of the 46.08 Mbit/s in use would exceed --max-rate 50.00 Mbit/s"
    );
    assert_eq!(two.minus(bars()), one);
    assert_eq!(Demand::default().minus(bars()), Demand::default());
}

#[test]
fn budget_checks_measured_load_first() {
    let b = Budget {
        max_rate: Some(BitRate(1)),
        ..unlimited(0.8)
    };
    let busy = Work {
        pacer_load: 0.95,
        ..idle(2)
    };
    let e = b.admit(Demand::default(), bars(), &busy).unwrap_err();
    assert_eq!(
        e,
        Error::LoadOverBudget {
            thread: Thread::Pacing,
            load: 0.95,
            max: 0.8
        }
    );
    let reading = Work {
        reader_load: 0.85,
        ..idle(2)
    };
    let e = b.admit(Demand::default(), bars(), &reading).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the read-ahead thread worked 85% of the last second (limit 80%"),
        "{e}"
    );
}

#[test]
fn predicted_pacing_work_refuses_before_any_thread_is_measured_busy() {
    // 2 pacers at 6 µs a datagram and 90%: 2 * 0.9 / 6e-6 = 300,000
    // datagrams a second, 144 streams of 2,075 (on 8 cores, so the
    // pacing threads, not the cores they share, are the limit).
    let b = unlimited(0.9);
    let w = Work {
        cores: 8,
        ..idle(2)
    };
    let mut total = Demand::default();
    let mut admitted = 0;
    let refusal = loop {
        match b.admit(total, bars(), &w) {
            Ok(t) => {
                total = t;
                admitted += 1;
            }
            Err(e) => break e,
        }
        assert!(admitted <= 2_000, "never refused");
    };
    assert_eq!(admitted, 144);
    let Error::PredictedOverBudget {
        thread,
        predicted,
        threads,
        ..
    } = refusal
    else {
        panic!("{refusal:?}");
    };
    assert_eq!((thread, threads), (Thread::Pacing, 2));
    assert!(predicted > 0.9 && predicted < 0.91, "{predicted}");
    let text = refusal.to_string();
    assert!(
        text.starts_with(
            "admitting this stream would keep the pacing threads 90.3% busy (limit 90.0%"
        ) && text.contains("300875 datagrams a second over 2 thread(s) at 6.0 µs each"),
        "{text}"
    );
    // Measured cheaper datagrams admit more; a measured cost comes only
    // from a window with enough of them.
    let fast = Work {
        cost: Cost {
            per_packet: Cost::per_packet_from(Nanos::from_millis(200), 200_000).unwrap(),
            ..Cost::PRIOR
        },
        ..w
    };
    assert_eq!(fast.cost.per_packet, Nanos::from_micros(1));
    assert!(b.admit(total, bars(), &fast).is_ok());
    assert_eq!(Cost::per_packet_from(Nanos::from_millis(1), 1_999), None);
}

#[test]
fn pacing_and_reading_share_the_cores() {
    // Each thread alone fits 144 streams of bars; together on 2 cores, at
    // 12.45 ms of pacing and 2.75 ms of reading a stream a second, 118.
    let b = unlimited(0.9);
    let w = idle(2);
    let mut total = Demand::default();
    let mut admitted = 0;
    let refusal = loop {
        match b.admit(total, bars(), &w) {
            Ok(t) => total = t,
            Err(e) => break e,
        }
        admitted += 1;
        assert!(admitted <= 2_000, "never refused");
    };
    assert_eq!(admitted, 118);
    let Error::CoresOverBudget {
        predicted,
        pacers,
        cores,
        ..
    } = refusal
    else {
        panic!("{refusal:?}");
    };
    assert_eq!((pacers, cores), (2, 2));
    assert!(predicted > 0.9 && predicted < 0.91, "{predicted}");
    assert!(
        refusal
            .to_string()
            .starts_with("admitting this stream would keep the 2 core(s) 90.4% busy"),
        "{refusal}"
    );
}

#[test]
fn streams_not_yet_measured_take_at_most_a_quarter_of_the_load_limit() {
    // 0.25 * 0.9 of 2 cores at 15.2 ms a stream a second: 29 at once.
    let b = unlimited(0.9);
    let mut w = idle(2);
    let mut total = Demand::default();
    let mut admitted = 0;
    let refusal = loop {
        match b.admit(total, bars(), &w) {
            Ok(t) => total = t,
            Err(e) => break e,
        }
        w.unproven = total;
        admitted += 1;
        assert!(admitted <= 2_000, "never refused");
    };
    assert_eq!(admitted, 29);
    assert!(matches!(refusal, Error::Unproven { .. }), "{refusal:?}");
    assert!(refusal.to_string().contains("--max-load"), "{refusal}");
    // Time alone lifts it: the client is told when to ask again.
    assert_eq!(refusal.retry_after(), Some(Nanos::from_secs(1)));
    assert_eq!(
        refusal.rtsp_refusal().kind,
        crate::rtsp::RefusalKind::Busy {
            retry_after_secs: 1
        }
    );
    // Once measured they are no longer new, and more fit.
    w.unproven = Demand::default();
    assert!(b.admit(total, bars(), &w).is_ok());
    // One stream alone is judged by the other budgets only.
    let heavy = Demand {
        packets_per_s: 60_000.0,
        ..bars()
    };
    assert!(b.admit(Demand::default(), heavy, &idle(2)).is_ok());
}

#[test]
fn a_schedule_slipping_closes_admission_whatever_the_prediction() {
    let b = unlimited(0.9);
    let on_time = idle(2);
    assert!(b.admit(Demand::default(), bars(), &on_time).is_ok());
    // A pacer late for a moment (its core taken) still admits.
    let woken_late = Work {
        slack: Slack {
            pacer_behind: BEHIND_LIMIT,
            since_dry_ring: Some(DRY_RING_HOLD),
        },
        ..on_time
    };
    assert!(b.admit(Demand::default(), bars(), &woken_late).is_ok());
    let behind = Work {
        slack: Slack {
            pacer_behind: Nanos::from_millis(35),
            since_dry_ring: None,
        },
        ..on_time
    };
    let e = b.admit(Demand::default(), bars(), &behind).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the pacing threads have been behind their schedule for 35.000 ms: another stream would \
         make the running ones late (load limit 90%, --max-load); stop a stream, or add cores"
    );
    let dry = Work {
        slack: Slack {
            pacer_behind: Nanos::ZERO,
            since_dry_ring: Some(Nanos::from_millis(120)),
        },
        ..on_time
    };
    let e = b.admit(Demand::default(), bars(), &dry).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the read-ahead thread left a running stream's ring empty 120.000 ms ago"),
        "{e}"
    );
}

#[test]
fn predicted_reading_and_memory_are_budgets_too() {
    // A 4K raw file: 1.3 GB/s read by one thread at 1 ms a MiB.
    let uhd = Demand {
        rate: BitRate(10_600_000_000),
        packets_per_s: 120_000.0,
        read_bytes_per_s: 1_327_104_000.0,
        ring: ByteSize(4 * 16_588_800),
    };
    let b = unlimited(0.9);
    let e = b.admit(Demand::default(), uhd, &idle(16)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PredictedOverBudget {
                thread: Thread::Reading,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        Cost::per_mib_from(Nanos::from_millis(2), 16 << 20),
        Some(Nanos(125_000))
    );
    // Assumed from a copy rate: twice a memcpy of a MiB. 1 GiB/s copies
    // a MiB in 1/1024 s; 20 GB/s (a core of the VMs here) in 52.4 µs.
    assert_eq!(
        Cost::per_mib_for_copy_rate(f64::from(1u32 << 30)),
        Some(Nanos(1_953_125))
    );
    assert_eq!(Cost::per_mib_for_copy_rate(20e9), Some(Nanos(104_858)));
    assert_eq!(Cost::per_mib_for_copy_rate(0.0), None);
    assert_eq!(Cost::per_mib_for_copy_rate(f64::NAN), None);
    // The same UHD stream judged by that cost fits.
    let measured = Work {
        cost: Cost {
            per_mib: Cost::per_mib_for_copy_rate(20e9).unwrap(),
            ..Cost::PRIOR
        },
        ..idle(16)
    };
    assert!(b.admit(Demand::default(), uhd, &measured).is_ok());
    let b = Budget {
        max_memory: Some(ByteSize(800 << 10)),
        ..unlimited(0.9)
    };
    let total = b.admit(Demand::default(), bars(), &idle(2)).unwrap();
    let e = b.admit(total, bars(), &idle(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a stream whose ring holds 450.0 KiB on top of the 450.0 KiB the running streams hold \
         would exceed --max-memory 800.0 KiB; stop a stream, give fewer --ring-frames, or raise \
         --max-memory"
    );
}

fn hd() -> VideoFormat {
    VideoFormat::new(1920, 1080, PixelFormat::Uyvy422).unwrap()
}

#[test]
fn leg_stripe_is_checked_against_the_frame() {
    let (s, i) = leg::stripe(hd(), Rule::Lines, 4, 3).unwrap();
    assert_eq!((s.count(), i), (4, 3));
    assert_eq!(
        leg::stripe(hd(), Rule::Lines, 4, 4)
            .unwrap_err()
            .to_string(),
        "stripe index 4 is not one of 4 stripes: give 0..=3"
    );
    let e = leg::stripe(hd(), Rule::Lines, 0, 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::StripeSplit {
                count: 0,
                width: 1920,
                height: 1080,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("stripe split lines count 0 does not fit 1920x1080: "),
        "{e}"
    );
}

#[test]
fn leg_starts_on_the_soonest_frame_the_pacer_makes() {
    let rate = FrameRate::new(25, 1).unwrap(); // 40 ms frames
    let lead = Nanos::from_millis(100);
    let now = Nanos::from_secs(1_000); // frame 25_000 starts here
    // 100 ms lead + 20 ms margin: frame 25_003 starts exactly then.
    assert_eq!(leg::first_frame(rate, None, now, lead), Ok(25_003));
    assert_eq!(
        leg::first_frame(rate, None, now + Nanos(1), lead),
        Ok(25_004)
    );
    // Too soon is moved up; later is kept.
    assert_eq!(leg::first_frame(rate, Some(10), now, lead), Ok(25_003));
    assert_eq!(leg::first_frame(rate, Some(26_000), now, lead), Ok(26_000));
    // Exactly a minute ahead is the last frame allowed.
    assert_eq!(LEG_MARGIN, Nanos::from_millis(20));
    assert_eq!(MAX_START_AHEAD, Nanos::from_secs(60));
    assert_eq!(leg::first_frame(rate, Some(26_500), now, lead), Ok(26_500));
    let e = leg::first_frame(rate, Some(26_501), now, lead).unwrap_err();
    assert_eq!(e, Error::StartTooFar { frame: 26_501 });
    assert_eq!(
        e.to_string(),
        "epoch_frame 26501 starts more than a minute from now: give a frame within the next minute"
    );
    // The frame moves with the clock.
    assert_eq!(
        leg::first_frame(rate, None, now + Nanos::from_secs(1), lead),
        Ok(25_028)
    );
}

fn ring(id: u64, due_ms: u64, priority: u8) -> RingFill {
    RingFill {
        id,
        due: Nanos::from_millis(due_ms),
        priority,
        room: true,
    }
}

#[test]
fn readahead_reads_the_ring_that_runs_dry_first() {
    let now = Nanos::from_millis(1_000);
    let rings = [
        ring(1, 1_080, 200),
        ring(2, 1_040, 0),
        ring(3, 1_040, 9),
        RingFill {
            room: false,
            ..ring(4, 1_000, 255)
        },
        ring(5, 1_000, 1),
    ];
    assert_eq!(due_order(now, &rings), vec![5, 3, 2, 1]);
    assert_eq!(due_order(now, &[]), Vec::<u64>::new());
}

#[test]
fn readahead_rings_already_dry_go_by_priority() {
    // Ring 1 ran dry long ago, ring 2 just now; at 1 s both are dry, so
    // the higher priority reads first. Earlier, ring 1 was still the
    // one that would run dry first.
    let rings = [ring(1, 900, 10), ring(2, 990, 50), ring(3, 1_500, 255)];
    assert_eq!(due_order(Nanos::from_millis(1_000), &rings), vec![2, 1, 3]);
    assert_eq!(due_order(Nanos::from_millis(800), &rings), vec![1, 2, 3]);
    assert_eq!(due_order(Nanos::from_millis(950), &rings), vec![1, 2, 3]);
    assert_eq!(due_order(Nanos::from_millis(2_000), &rings), vec![3, 2, 1]);
}

#[test]
fn describe_raw_and_ts() {
    let rate = FrameRate::new(25, 1).unwrap();
    let format = VideoFormat::new(320, 180, PixelFormat::Uyvy422).unwrap();
    let raw = describe::sdp(
        "bars",
        Track::Raw {
            format,
            rate,
            max_udp: None,
        },
        1_700_000_000,
    );
    assert_eq!(
        raw,
        "v=0\r\no=- 1700000000 1700000000 IN IP4 0.0.0.0\r\ns=bars\r\nc=IN IP4 0.0.0.0\r\n\
         t=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\n\
         a=fmtp:96 sampling=YCbCr-4:2:2; width=320; height=180; exactframerate=25; depth=8; \
         TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPW; \r\n\
         a=mediaclk:direct=0\r\na=control:trackID=0\r\n"
    );
    // What the SDP declares is what the pacer keeps: W trains from
    // TROdefault (no TROFF= to declare).
    let shape = describe::raw_schedule(format, rate, (90, 1440)).expect("a schedule");
    assert_eq!(shape.sender(), describe::SENDER_TYPE);
    assert_eq!(shape.declared_tr_offset(), None);
    assert!(describe::raw_schedule(format, rate, (0, 1440)).is_none());
    let ts = describe::sdp("clip.ts", Track::Ts, 42);
    // No origin line for TS: players accept it, and it is what the
    // server has always sent (see the sdpoker and VLC tests).
    assert_eq!(
        ts,
        "v=0\r\ns=clip.ts\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\n\
         a=rtpmap:33 MP2T/90000\r\na=control:trackID=0\r\n"
    );
}
