//! ST 2110 conformance: the SDP nagare writes passes AMWA's sdpoker with
//! its strictest ST 2110 checks.

use nagare_api::video::{RecvReport, SendReport};
use nagare_proto::Nanos;
use nagare_proto::sdp::{RefClock, SdpStream};
use nagare_proto::video::st2110_21::{Measure, RtpClock, SenderType};

use crate::common::{Scratch, assert_ok, free_udp_port, nagare, require};

/// sdpoker's strict run on `path`: its complaints, if any.
pub(crate) fn sdpoker(path: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new("sdpoker")
        .args([
            "--shaping",
            "true",
            "--whitespace",
            "true",
            "--should",
            "true",
        ])
        .arg(path)
        .output()
        .expect("running sdpoker");
    let err = String::from_utf8_lossy(&out.stderr);
    // sdpoker exits 0 on some internal failures, printing the exception.
    if out.status.success() && !err.contains("Error") {
        Ok(())
    } else {
        Err(format!("{err}{}", String::from_utf8_lossy(&out.stdout)))
    }
}

/// Writes the SDPs of a send with `args` (`--frames 0`: nothing is sent)
/// and returns them (`sdps` names them, relative to the scratch
/// directory).
fn send_sdps(s: &Scratch, args: &[&str], sdps: &[&str]) -> Vec<(std::path::PathBuf, SdpStream)> {
    let sdp = s.path("out.sdp");
    let out = nagare()
        .args(["send", "pattern:bars", "--frames", "0"])
        .args(["--sdp", sdp.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert_ok(&out);
    sdps.iter()
        .map(|name| {
            let path = s.path(name);
            let text = std::fs::read_to_string(&path).unwrap();
            (path, SdpStream::parse(&text).unwrap())
        })
        .collect()
}

#[test]
fn every_sdp_send_writes_passes_sdpoker() {
    if !require("sdpoker") {
        return;
    }
    let s = Scratch::new("sdpoker");
    let port = free_udp_port().to_string();
    let to = format!("127.0.0.1:{port}");
    let group = format!("239.255.21.10:{port}");
    let v6 = format!("[::1]:{port}");
    let ptp = "39-A7-94-FF-FE-07-CB-D0:37";
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &[
                "--to",
                &to,
                "--size",
                "1920x1080",
                "--pix-fmt",
                "uyvp",
                "--fps",
                "60000/1001",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "64x48",
                "--pix-fmt",
                "rgb24",
                "--fps",
                "50",
                "--ptp",
                ptp,
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &group,
                "--interface",
                "lo",
                "--ttl",
                "4",
                "--size",
                "720x576",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &v6,
                "--size",
                "320x240",
                "--pix-fmt",
                "uyvy422",
                "--fps",
                "30000/1001",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "3840x2160",
                "--pix-fmt",
                "uyvp",
                "--fps",
                "50",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "640x480",
                "--pix-fmt",
                "rgb24",
                "--fps",
                "25",
            ],
            &["out-0.sdp", "out-1.sdp"],
        ),
    ];
    for (k, (args, sdps)) in cases.iter().enumerate() {
        let mut args = args.to_vec();
        if k == 2 {
            args.extend(["--pix-fmt", "uyvy422", "--fps", "25"]);
        }
        if k == 5 {
            args.extend(["--stripes", "2"]);
        }
        // Jumbo packets: ST 2110-10's extended UDP size, declared.
        if k == 4 {
            args.extend(["--packet-size", "8800"]);
        }
        let want = match k {
            0 => SenderType::N,
            3 => SenderType::NL,
            _ => SenderType::W,
        };
        let tp = want.name().to_lowercase();
        if k != 4 {
            args.extend(["--tp", &tp]);
        }
        for (path, stream) in send_sdps(&s, &args, sdps) {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = sdpoker(&path) {
                panic!("sdpoker refuses the SDP of send {args:?}:\n{e}\n{text}");
            }
            assert!(text.contains("; \r\na=ts-refclk:"), "{text}");
            assert_eq!(stream.sender_type, Some(want), "{text}");
            let max_udp = (k == 4).then_some(8960);
            assert_eq!(stream.max_udp, max_udp, "{text}");
            match stream.clock {
                Some(RefClock::Ptp(p)) if k == 1 => assert_eq!(p.to_string(), ptp),
                Some(RefClock::LocalMac(_)) if k != 1 => {}
                other => panic!("case {k}: clock {other:?} in\n{text}"),
            }
        }
    }
}

#[test]
fn a_train_longer_than_the_type_allows_is_refused_with_the_limits() {
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "1920x1080",
        ])
        .args([
            "--pix-fmt",
            "uyvp",
            "--fps",
            "60000/1001",
            "--packet-size",
            "1220",
        ])
        .args(["--tp", "n", "--train", "7"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--train 7 with --tp n: a train of 7 packets is out of range 1..=6"),
        "{err}"
    );
    assert!(
        err.contains("(CMAX 6, VRX_FULL 9 for 4320 packets a frame)"),
        "{err}"
    );
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "64x48",
        ])
        .args(["--pix-fmt", "rgb24", "--fps", "25", "--tp", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("give n (narrow gapped), nl (narrow linear) or w (wide)"),
        "{err}"
    );
}

#[test]
fn a_bad_ptp_clock_is_refused_with_the_form_to_use() {
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "64x48",
        ])
        .args(["--pix-fmt", "rgb24", "--fps", "25", "--ptp", "39:A7:94:FF"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("39-A7-94-FF-FE-07-CB-D0"), "{err}");
}

/// An Ethernet/IPv4/UDP frame to 127.0.0.1:`port` holding `payload`.
fn udp_frame(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (28 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// An RTP packet of RFC 4175 video: its ESN, one sample row header
/// (16 bytes at the start of `line`) and those 16 bytes.
fn rtp(seq: u32, ts: u32, marker: bool, line: u16) -> Vec<u8> {
    let mut p = vec![0x80, 96 | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&(seq as u16).to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    p.extend_from_slice(&((seq >> 16) as u16).to_be_bytes());
    p.extend_from_slice(&16u16.to_be_bytes());
    p.extend_from_slice(&line.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&[0x80; 16]);
    p
}

/// The line packet j of 960 starts: 0 for the first, 1079 for the last.
fn line_of(j: u64) -> u16 {
    ((j + 1) * 1080 / 960 - 1) as u16
}

/// A nanosecond pcap of `records` (capture time, frame).
fn pcap(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut f = 0xa1b2_3c4du32.to_le_bytes().to_vec();
    f.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for (ns, data) in records {
        f.extend_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&(data.len() as u32).to_le_bytes());
        f.extend_from_slice(&(data.len() as u32).to_le_bytes());
        f.extend_from_slice(data);
    }
    f
}

/// Five frames of 1080p50 in 960 packets: gapped TRS is exactly 20 µs
/// and TROdefault 43/1125 of 20 ms = 764 444.4 ns. Packet j of epoch frame
/// N arrives at ⌊N · 20 ms + TROdefault⌋ + j · 20 µs, one read period
/// after the one before, so the gapped receiver holds 1 packet and the
/// bucket (drained every 18 939.4 ns) empties between packets. Then:
/// frame 2 sends packets 100..=109 together (Cinst 0..9, VRX 10); frame 3
/// is stamped 90 ticks (1 ms) late; frame 4 loses packet 500. RTP time
/// counts from `ts_base` ticks after the epoch (0: on the epoch).
fn hand_made_capture(ts_base: u32) -> Vec<u8> {
    const N0: u64 = 87_500_000_000; // 2025-06-15 at 50 fps
    let port = 5004;
    let arrival = |n: u64, j: u64| n * 20_000_000 + 764_444 + j * 20_000;
    let stamp = |n: u64| ((n * 1800) as u32).wrapping_add(ts_base);
    let mut seq = 7u32 << 16;
    let mut records = vec![
        (
            arrival(N0 - 1, 959),
            udp_frame(port, &rtp(seq, stamp(N0 - 1), true, 1079)),
        ),
        // An ARP frame and a datagram to another port are not the stream.
        (arrival(N0 - 1, 959) + 5, vec![0xff; 42]),
        (arrival(N0 - 1, 959) + 6, udp_frame(9, &rtp(1, 2, false, 0))),
    ];
    for f in 0..5u64 {
        let n = N0 + f;
        let ts = stamp(n) + if f == 3 { 90 } else { 0 };
        for j in 0..960u64 {
            seq += 1;
            if f == 4 && j == 500 {
                continue;
            }
            let at = if f == 2 && (100..110).contains(&j) {
                arrival(n, 100)
            } else {
                arrival(n, j)
            };
            records.push((at, udp_frame(port, &rtp(seq, ts, j == 959, line_of(j)))));
        }
    }
    pcap(&records)
}

#[test]
fn a_capture_is_judged_as_worked_out_by_hand() {
    use nagare_api::st2110::AnalyzeReport;
    use nagare_proto::video::st2110_21::{Compliance, Limits, ReadSchedule};
    let s = Scratch::new("analyze-pcap");
    let file = s.path("five.pcap");
    std::fs::write(&file, hand_made_capture(0)).unwrap();
    let plot = s.path("five.png");
    let run = |tp: &str| {
        nagare()
            .args([
                "analyze",
                "--pcap",
                file.to_str().unwrap(),
                "--port",
                "5004",
            ])
            .args(["--size", "1920x1080", "--fps", "50", "--tp", tp, "--json"])
            .args(["--plot", plot.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = run("w");
    assert_ok(&out);
    let r: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    let m = r.model.as_ref().expect("a model");
    assert_eq!(m.packets, 960, "learned from the frame starts");
    assert_eq!(
        m.limits,
        Limits {
            cmax_n: 4,
            cmax_nl: 4,
            cmax_w: 16,
            vrx_full_n: 8,
            vrx_full_w: 720
        }
    );
    assert!((m.trs_ns - 20_000.0).abs() < 1e-6 && (m.tr_offset_ns - 764_444.44).abs() < 0.01);
    assert_eq!(
        (r.frames, r.packets, r.lost, r.seq_errors),
        (5, 1 + 5 * 960 - 1, 1, 1)
    );
    assert_eq!(r.other, 2);
    assert_eq!(
        (
            r.frame_verdicts.n,
            r.frame_verdicts.w,
            r.frame_verdicts.not_compliant
        ),
        (4, 1, 0)
    );
    let v = r.verdict.as_ref().unwrap();
    assert_eq!(
        (v.compliance, v.schedule),
        (Compliance::Wide, ReadSchedule::Gapped)
    );
    // Within one packet of the hand values: Cinst 9, VRX 0 (after the
    // loss) to 10.
    assert!(v.cinst_peak.abs_diff(9) <= 1, "{}", v.text);
    assert!(
        v.vrx.peak.abs_diff(10) <= 1 && v.vrx.min.abs_diff(0) <= 1,
        "{}",
        v.text
    );
    assert_eq!(
        v.text,
        "W (gapped): Cinst peak 9 > CMAX_N 4; within CMAX_W 16; VRX peak 10 > VRX_FULL_N 8; within VRX_FULL_W 720"
    );
    assert_eq!(r.declared_met, Some(true));
    // FPT is TROdefault, to the nanosecond the capture keeps.
    assert!((r.fpt_us.min - 764.444).abs() < 0.002 && (r.fpt_us.max - 764.444).abs() < 0.002);
    assert_eq!(
        (r.rtp_offset_ticks.min, r.rtp_offset_ticks.max),
        (Some(0), Some(90))
    );
    // Latency: FPT, or 1 ms less for the frame stamped late.
    assert_eq!(
        (r.latency_us.min, r.latency_us.max),
        (Some(-236), Some(764))
    );
    assert_eq!(
        (r.rtp_delta_ticks.min, r.rtp_delta_ticks.max),
        (Some(1710), Some(1890))
    );
    let cinst_9: Vec<_> = r.cinst_histogram.iter().filter(|b| b[0] == 9).collect();
    assert_eq!(cinst_9, [&[9, 1]]);
    // The figure, read as pixels: a title block of 80 px over three
    // panels of 333 px (Cinst, VRX, FPT), each limit a dashed line of its
    // own colour across its panel.
    let img = image::open(&plot).unwrap().to_rgb8();
    assert_eq!((img.width(), img.height()), (1200, 1080));
    let in_panel = |k: u32, c: [u8; 3]| {
        let (y0, y1) = (80 + k * 333, 80 + (k + 1) * 333);
        (0..img.width())
            .flat_map(|x| (y0..y1).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == c)
            .count()
    };
    let (green, red, purple, orange) = (
        [44, 160, 44],
        [214, 39, 40],
        [148, 103, 189],
        [255, 127, 14],
    );
    // CMAX_N (4), CMAX_NL (4) and CMAX_W (16) all sit on the Cinst scale.
    assert!(
        in_panel(0, green) + in_panel(0, purple) > 600,
        "no CMAX_N/NL line"
    );
    assert!(in_panel(0, red) > 600, "no CMAX_W line");
    // VRX_FULL_N (8) on the VRX scale; VRX_FULL_W (720) would squash the
    // data (peak 10), so only its legend entry is drawn.
    assert!(in_panel(1, green) > 600, "no VRX_FULL_N line");
    let w_legend = in_panel(1, red);
    assert!((10..200).contains(&w_legend), "VRX_FULL_W: {w_legend} px");
    // TRoffset (764 µs) as a vertical line through the FPT histogram.
    assert!(in_panel(2, orange) > 300, "no TRoffset line");
    assert_eq!(in_panel(1, orange) + in_panel(0, orange), 0);
    // Frames by the types they keep: the linear receiver runs 4 % behind
    // the gapped sender (VRX 39 > 8) in every frame; frame 2's burst
    // breaks N, not W.
    let k = r.frames_kept;
    assert_eq!((k.n, k.nl, k.w), (4, 0, 5));
    assert_eq!((r.broken_type, r.broken_total), (Some(SenderType::W), 0));
    assert_eq!(r.rtp_clock, Some(RtpClock::OnEpoch));
    assert_eq!(r.size_mismatch, None, "1080 lines, offsets 0");
    let plain = &v.plain;
    assert_eq!(
        plain[1],
        "the sender's bursts were too long for a narrow receiver: 10 packets at once (Cinst 9), where a narrow gapped (N) receiver takes 5 (CMAX_N 4); a wide (W) receiver takes them (CMAX_W 16)"
    );
    // Held to N, the same capture fails, and says which frame, when and
    // by how much.
    let out = run("n");
    assert_eq!(out.status.code(), Some(1));
    let r: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(r.declared_met, Some(false));
    assert_eq!((r.broken_type, r.broken_total), (Some(SenderType::N), 1));
    let b = &r.broken[0];
    assert_eq!((b.index, b.epoch_frame), (2, 87_500_000_002));
    assert!((b.at_s - 0.040).abs() < 1e-9, "{}", b.at_s);
    assert_eq!(
        (b.kind, b.value, b.limit, b.margin),
        (Some(Measure::Cinst), 9, 4, 5)
    );
    assert_eq!(b.standard, "Cinst 9 > CMAX_N 4 by 5");
    assert_eq!(
        b.plain,
        "a burst of 10 packets at once, where a narrow gapped (N) receiver takes 5"
    );
    // The text says the same on one screen; the histograms wait for
    // --verbose.
    let text = |extra: &[&str]| {
        let out = nagare()
            .args(["analyze", file.to_str().unwrap(), "--port", "5004"])
            .args(["--size", "1920x1080", "--fps", "50", "--tp", "n"])
            .args(extra)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let short = text(&[]);
    assert!(
        short.contains(
            "  1 of 5 frames broke narrow gapped (N), worst first:\n    frame 2 at 0.040 s (epoch frame 87500000002): Cinst 9 > CMAX_N 4 by 5: a burst of 10 packets at once, where a narrow gapped (N) receiver takes 5\n"
        ),
        "{short}"
    );
    assert!(
        short.contains("  frames that kept each type: N 4 of 5, NL 0 of 5, W 5 of 5\n"),
        "{short}"
    );
    assert!(short.contains("analyze: verdict: wide (W)\n"), "{short}");
    assert!(short.lines().count() <= 24, "not one screen:\n{short}");
    assert!(!short.contains("Cinst over packets"), "{short}");
    let long = text(&["--verbose"]);
    assert!(long.contains("Cinst over packets:"), "{long}");
}

#[test]
fn rtp_time_off_the_epoch_is_said_and_frames_are_timed_on_the_senders_grid() {
    use nagare_api::st2110::AnalyzeReport;
    let s = Scratch::new("analyze-off-epoch");
    let file = s.path("gst.pcap");
    // As GStreamer and FFmpeg stamp: RTP time from a random base, here
    // 0x6000_0000 ticks (4.97 hours) past the epoch's.
    std::fs::write(&file, hand_made_capture(0x6000_0000)).unwrap();
    let args = [
        "analyze",
        file.to_str().unwrap(),
        "--size",
        "1920x1080",
        "--fps",
        "50",
    ];
    let out = nagare().args(args).arg("--json").output().unwrap();
    let r: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    let Some(RtpClock::OffEpoch { offset_s }) = r.rtp_clock else {
        panic!("{:?}", r.rtp_clock)
    };
    // Arrival less RTP time: minus the base, plus the frames' lag.
    let base_s = f64::from(0x6000_0000u32) / 90_000.0;
    assert!((offset_s + base_s).abs() < 0.01, "{offset_s}");
    // On its own grid the frame stamped 1 ms late is the earliest: the
    // others lag it by exactly 1 ms.
    let lag = r.grid_lag_us.expect("a lag on the sender's grid");
    assert_eq!((lag.min, lag.max), (Some(0), Some(1000)));
    assert!((lag.mean - 800.0).abs() < 0.01, "{}", lag.mean);
    let out = nagare().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the RTP timestamps are not on the ST 2110-10 epoch (a frame's RTP time lies {base_s:.1} s from its arrival)"
        )),
        "{err}"
    );
    assert!(
        err.contains("on the sender's own grid (its RTP timestamps): frames start 0..1000 µs late (mean 800.0)"),
        "{err}"
    );
    assert!(!err.contains("RTP offset"), "no epoch figures: {err}");
}

#[test]
fn what_is_not_rfc_4175_video_is_refused_with_what_it_is() {
    use nagare_api::st2110::AnalyzeReport;
    let s = Scratch::new("analyze-ts");
    let file = s.path("ts.pcap");
    // 168 datagrams of RTP MP2T (payload type 33): 7 TS packets each.
    let records: Vec<(u64, Vec<u8>)> = (0..168u32)
        .map(|k| {
            let mut p = vec![0x80, 33];
            p.extend_from_slice(&(k as u16).to_be_bytes());
            p.extend_from_slice(&(k * 300).to_be_bytes());
            p.extend_from_slice(&0x00c0_ffeeu32.to_be_bytes());
            for _ in 0..7 {
                p.push(0x47);
                p.extend_from_slice(&[0x1f, 0xff, 0x10]);
                p.resize(p.len() + 184, 0xff);
            }
            (
                1_000_000_000 + u64::from(k) * 1_000_000,
                udp_frame(5004, &p),
            )
        })
        .collect();
    std::fs::write(&file, pcap(&records)).unwrap();
    let args = [
        "analyze",
        file.to_str().unwrap(),
        "--size",
        "1920x1080",
        "--fps",
        "25",
    ];
    let out = nagare().args(args).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let r: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((r.packets, r.lost, r.seq_errors, r.frames), (0, 0, 0, 0));
    assert_eq!((r.not_video, r.not_rtp), (168, 0));
    assert!(r.verdict.is_none());
    let out = nagare().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "analyze: no verdict: this is not RFC 4175 video: MPEG-TS in RTP (RFC 2250): payload type 33, 7 × 188-byte packets starting 0x47"
        ),
        "{err}"
    );
    assert!(
        err.contains(" 0 packets, 0 lost, 0 sequence errors"),
        "{err}"
    );
}

#[test]
fn a_size_the_packets_disagree_with_is_flagged() {
    use nagare_api::st2110::AnalyzeReport;
    let s = Scratch::new("analyze-size");
    let file = s.path("five.pcap");
    std::fs::write(&file, hand_made_capture(0)).unwrap();
    let run = |size: &str| {
        let out = nagare()
            .args(["analyze", file.to_str().unwrap(), "--json"])
            .args(["--size", size, "--fps", "50"])
            .output()
            .unwrap();
        crate::common::parse_report::<AnalyzeReport>(&String::from_utf8_lossy(&out.stdout))
    };
    let r = run("1280x720");
    assert_eq!(
        r.size_mismatch.as_deref(),
        Some("the packets carry lines 0..=1079 and pixel offsets up to 0, not the 1280x720 given")
    );
    assert_eq!(r.raster.and_then(|r| r.lines), Some(1080));
    // Every frame was still judged, by the limits of the size given.
    assert_eq!(r.frames, 5);
    assert_eq!(run("1920x1080").size_mismatch, None);
    let out = nagare()
        .args([
            "analyze",
            file.to_str().unwrap(),
            "--size",
            "1280x720",
            "--fps",
            "50",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("  WARNING: the packets carry lines 0..=1079 and pixel offsets up to 0, not the 1280x720 given; the limits below assume the size given\n"),
        "{err}"
    );
}

#[test]
fn a_corrupt_capture_is_refused_with_the_fix() {
    let s = Scratch::new("analyze-bad");
    let file = s.path("bad.pcap");
    std::fs::write(&file, b"GIF89a and then some bytes that are no capture").unwrap();
    let out = nagare()
        .args([
            "analyze",
            "--pcap",
            file.to_str().unwrap(),
            "--size",
            "64x48",
            "--fps",
            "25",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a pcap or pcapng capture"), "{err}");
    assert!(err.contains("tcpdump -w FILE"), "{err}");
}

/// Starts `recv --sdp SDP --analyze` for `frames` frames, sends them with
/// `send pattern:bars ARGS`, and returns both reports.
fn send_to_recv_analyze(
    sdp: &std::path::Path,
    args: &[&str],
    frames: u64,
) -> (SendReport, RecvReport) {
    let mut recv = nagare();
    recv.args([
        "recv",
        "--sdp",
        sdp.to_str().unwrap(),
        "--analyze",
        "--json",
    ])
    .args(["--frames", &frames.to_string(), "--timeout", "5"]);
    let mut r = crate::common::Running::spawn(recv);
    r.listening();
    let out = nagare()
        .args(["send", "pattern:bars"])
        .args(args)
        .args(["--frames", &frames.to_string(), "--json"])
        .output()
        .unwrap();
    assert_ok(&out);
    let sent = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    (sent, crate::common::parse_report(&out))
}

#[test]
fn recv_analyze_judges_the_stream_it_records() {
    let s = Scratch::new("recv-analyze");
    let sdp = s.path("s.sdp");
    let frames = 30u64;
    let port = free_udp_port();
    // The SDP first (--frames 0: nothing sent), so recv learns rate and TP.
    let out = nagare()
        .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
        .args(["--size", "320x240", "--pix-fmt", "uyvy422", "--fps", "50"])
        .args([
            "--tp",
            "nl",
            "--frames",
            "0",
            "--sdp",
            sdp.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_ok(&out);
    let to = format!("127.0.0.1:{port}");
    let (sent, got) = send_to_recv_analyze(
        &sdp,
        &[
            "--to",
            &to,
            "--size",
            "320x240",
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "50",
            "--tp",
            "nl",
        ],
        frames,
    );
    assert_eq!(got.frames_complete, frames);
    assert!(!got.gro, "analysis needs a stamp per datagram");
    let a = got.analysis.expect("recv --analyze reports an analysis");
    let m = a.model.expect("a model");
    assert_eq!(u64::from(m.packets), sent.packets_per_frame);
    assert_eq!(a.declared, Some(SenderType::NL));
    // The first frame waits for a boundary; every other one is judged.
    assert_eq!(a.frames, frames - 1);
    assert_eq!((a.lost, a.seq_errors), (0, 0));
    assert!(a.verdict.is_some() && a.declared_met.is_some());
    // Which frames broke the declared type and which kept it add up to
    // the frames judged, however the machine paced them.
    assert_eq!(a.broken_type, Some(SenderType::NL));
    assert_eq!(a.frames_kept.nl + a.broken_total, a.frames);
    assert_eq!(a.broken.len() as u64, a.broken_total);
    assert_eq!(a.size_mismatch, None);
    assert_eq!(a.raster.and_then(|r| r.width), Some(320));
    // nagare stamps frames on the epoch grid: a frame's first packet
    // arrives in its own epoch frame (offset 0) or, from a sender late by
    // more than a frame on a loaded machine, a whole frame later.
    let (lo, hi) = (
        a.rtp_offset_ticks.min.unwrap(),
        a.rtp_offset_ticks.max.unwrap(),
    );
    assert!(hi <= 0 && lo % 1800 == 0 && hi % 1800 == 0, "{lo}..{hi}");
    assert_eq!(
        (a.rtp_delta_ticks.min, a.rtp_delta_ticks.max),
        (Some(1800), Some(1800))
    );
    // The sender's own judgement is there too.
    let ideal = sent.st2110_21.expect("send judges its stream");
    assert_eq!(ideal.declared, Some(SenderType::NL));
    assert_eq!(ideal.frames, frames - 1);
    assert_eq!(ideal.broken_type, Some(SenderType::NL));
    assert_eq!(ideal.frames_kept.nl + ideal.broken_total, ideal.frames);
}

#[test]
fn a_wide_sender_declares_the_tr_offset_it_leads_from_and_recv_judges_by_it() {
    let s = Scratch::new("troff");
    let port = free_udp_port();
    let to = format!("127.0.0.1:{port}");
    let shape = ["--size", "320x240", "--pix-fmt", "uyvy422", "--fps", "50"];
    let mut args = vec!["--to", to.as_str()];
    args.extend(shape);
    // About 135 packets a frame, TRS about 142 µs: TROdefault (747 µs)
    // leaves W 4 reads of lead; it is given MAX_ROOM (4 ms), which needs a
    // TRoffset of a little more (the proto tests have the exact rule).
    let sdp = &send_sdps(&s, &args, &["out.sdp"])[0];
    let tro = sdp.1.tr_offset.expect("a wide sender declares TROFF");
    assert!(
        (Nanos::from_micros(4_000)..Nanos::from_micros(5_000)).contains(&tro),
        "{tro}"
    );
    let text = std::fs::read_to_string(&sdp.0).unwrap();
    let troff = format!("; TP=2110TPW; TROFF={}; ", tro.0 / 1000);
    assert!(text.contains(&troff), "{text}");
    // recv reads the offset from the SDP and judges from it, as the
    // sender judges itself.
    let frames = 10u64;
    let (sent, got) = send_to_recv_analyze(&sdp.0, &args, frames);
    let judged = |m: Option<&nagare_api::st2110::StreamModel>| m.map(|m| m.tr_offset_ns);
    let a = got.analysis.expect("recv --analyze reports an analysis");
    assert_eq!(judged(a.model.as_ref()), Some(tro.0 as f64));
    let ideal = sent.st2110_21.expect("send judges its stream");
    assert_eq!(judged(ideal.model.as_ref()), Some(tro.0 as f64));
    // Its first packets leave ahead of the reads by the lead, after
    // their frame's epoch start.
    assert!(ideal.fpt_us.max < tro.0 as f64 / 1e3, "{:?}", ideal.fpt_us);
    assert!(ideal.fpt_us.p50 > 0.0, "{:?}", ideal.fpt_us);
    // TROdefault when asked, or for a narrow sender; a given offset as is.
    let mut plain = args.clone();
    plain.extend(["--tr-offset", "default"]);
    assert_eq!(send_sdps(&s, &plain, &["out.sdp"])[0].1.tr_offset, None);
    let mut nl = args.clone();
    nl.extend(["--tp", "nl"]);
    assert_eq!(send_sdps(&s, &nl, &["out.sdp"])[0].1.tr_offset, None);
    let mut given = args.clone();
    given.extend(["--tr-offset", "2000"]);
    let given = &send_sdps(&s, &given, &["out.sdp"])[0].1;
    assert_eq!(given.tr_offset, Some(Nanos::from_micros(2_000)));
}

#[test]
fn a_jumbo_packet_sender_declares_maxudp_and_both_judges_count_vrx_full_in_its_packets() {
    let s = Scratch::new("maxudp");
    let port = free_udp_port();
    let to = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--to",
        to.as_str(),
        "--size",
        "640x360",
        "--pix-fmt",
        "uyvy422",
    ];
    args.extend(["--fps", "50", "--packet-size", "8800"]);
    let sdp = &send_sdps(&s, &args, &["out.sdp"])[0];
    assert_eq!(sdp.1.max_udp, Some(8960));
    let text = std::fs::read_to_string(&sdp.0).unwrap();
    assert!(text.contains("; MAXUDP=8960; "), "{text}");
    // 640x360 4:2:2 8-bit is 460,800 bytes, 53 packets of 8800 a frame:
    // the rate term, INT(53 · 50 / 300) = 8, is under the minimum, which
    // is 120 packets of 8960 bytes (1080000 / 8960), not 720.
    let frames = 10u64;
    let (sent, got) = send_to_recv_analyze(&sdp.0, &args, frames);
    let vrx_full_w = |m: Option<&nagare_api::st2110::StreamModel>| m.map(|m| m.limits.vrx_full_w);
    let a = got.analysis.expect("recv --analyze reports an analysis");
    assert_eq!(vrx_full_w(a.model.as_ref()), Some(120));
    let ideal = sent.st2110_21.expect("send judges its stream");
    assert_eq!(vrx_full_w(ideal.model.as_ref()), Some(120));
    // In packets of the standard size, the minimum is 720 and no MAXUDP
    // is declared.
    let mut standard = args.clone();
    standard.truncate(args.len() - 2);
    assert_eq!(send_sdps(&s, &standard, &["out.sdp"])[0].1.max_udp, None);
}

#[test]
fn a_tcpdump_capture_of_nagare_send_is_analysed() {
    use nagare_api::st2110::AnalyzeReport;
    use nagare_api::video::SendReport;
    use std::io::{BufRead, BufReader};
    if !require("tcpdump") {
        return;
    }
    let s = Scratch::new("tcpdump");
    let file = s.path("lo.pcap");
    // A socket on the port, so no send is refused (tcpdump binds none);
    // what it drops when full was captured already.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sink.local_addr().unwrap().port();
    let frames = 12u64;
    // 320x240 4:2:2 8-bit, a 640-byte line and its 20 bytes of headers
    // per packet: 240 a frame.
    let packets = frames * 240;
    /// tcpdump is killed however the test ends.
    struct Dump(std::process::Child);
    impl Drop for Dump {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut dump = std::process::Command::new("tcpdump")
        .args([
            "-i",
            "lo",
            "-n",
            "-U",
            "-B",
            "16384",
            "--time-stamp-precision=nano",
            "-c",
        ])
        .arg(packets.to_string())
        .arg("-w")
        .arg(&file)
        .args(["udp", "and", "dst", "port", &port.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running tcpdump");
    let mut err = BufReader::new(dump.stderr.take().unwrap());
    let mut dump = Dump(dump);
    // tcpdump says "listening on lo" once its filter is in place.
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
        line.clear();
    }
    assert!(
        line.contains("listening on"),
        "tcpdump did not start: {line}"
    );
    // Without GSO: tcpdump on lo sees a UDP GSO train as one unsegmented
    // datagram, as no receiver does.
    let out = nagare()
        .args(["send", "pattern:bars", "--to", &format!("127.0.0.1:{port}")])
        .args(["--size", "320x240", "--pix-fmt", "uyvy422", "--fps", "50"])
        .args(["--packet-size", "660", "--tp", "w", "--no-gso", "--json"])
        .args(["--frames", &frames.to_string()])
        .output()
        .unwrap();
    assert_ok(&out);
    let sent: SendReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(sent.packets_per_frame, 240);
    let status = crate::common::wait_bounded(&mut dump.0, 20, "tcpdump");
    assert!(status.success());
    let out = nagare()
        .args(["analyze", "--pcap", file.to_str().unwrap(), "--json"])
        .args(["--size", "320x240", "--fps", "50", "--tp", "w"])
        .output()
        .unwrap();
    let r: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(r.model.as_ref().map(|m| m.packets), Some(240));
    // The first frame waits for a boundary.
    assert_eq!((r.frames, r.packets, r.lost), (frames - 1, packets, 0));
    assert_eq!(r.ssrc, Some(sent.ssrc.0));
    // What the capture saw and what the sender judged agree on the
    // frame structure; pacing figures differ by the kernel's delivery.
    let ideal = sent.st2110_21.unwrap();
    assert_eq!(ideal.frames, r.frames);
    assert_eq!(r.rtp_delta_ticks.min, Some(1800));
    assert_eq!(r.rtp_delta_ticks.max, Some(1800));
    // The capture as a plain argument, as people type it, reads the same.
    let out = nagare()
        .args(["analyze", file.to_str().unwrap(), "--json"])
        .args(["--size", "320x240", "--fps", "50", "--tp", "w"])
        .output()
        .unwrap();
    let plain: AnalyzeReport = crate::common::parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (plain.frames, plain.packets, plain.lost),
        (r.frames, r.packets, r.lost)
    );
}

#[test]
fn demo_says_how_many_frames_kept_each_type_and_which_broke_the_declared_one() {
    let out = nagare()
        .args(["demo", "--size", "320x240", "--fps", "50", "--frames", "20"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The first frame waits for a boundary: 19 are judged. How many keep
    // each type is the machine's pacing; that the counts and the broken
    // frames agree is not.
    let kept = err
        .lines()
        .find_map(|l| l.strip_prefix("send:   frames that kept each type: "))
        .unwrap_or_else(|| panic!("no type counts: {err}"));
    let counts: Vec<u64> = kept
        .split(", ")
        .map(|part| {
            let (_, rest) = part.split_once(' ').unwrap();
            let (n, total) = rest.split_once(" of ").unwrap();
            assert_eq!(total, "19", "{kept}");
            n.parse().unwrap()
        })
        .collect();
    let w = counts[2];
    let broke = format!("send: {} of 19 frames broke wide (W); the worst:", 19 - w);
    assert_eq!(err.contains(&broke), w < 19, "{broke}\n{err}");
    assert!(err.contains("send:   verdict: "), "{err}");
}
