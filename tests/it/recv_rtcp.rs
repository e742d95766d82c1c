//! Receiver reports from every receiver (RFC 3550 §6.4.2): each stripe of
//! `recv --stripes N --rtcp` answers its own sender's reports, a
//! multicast `recv --rtcp` reports to the group's RTCP port (and a
//! multicast `send` hears it there), each leg of an ST 2022-7 pair
//! answers its own sender, and a single `recv --sdp` reads its RTCP where
//! the SDP's `a=rtcp` says. The
//! senders are the test's own sockets, so every report block is checked
//! exactly.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use nagare_api::stripes::StripesReport;
use nagare_api::video::{RecvReport, RecvRtcp, SendReport};
use nagare_proto::rtcp::{self, NtpTime, Packet, ReportBlock, SenderInfo};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{ExtSeq, FrameRate, MediaTime, PixelFormat, Ssrc, VideoFormat};
use socket2::{Domain, Protocol, Socket, Type};

use crate::common::{Running, Scratch, free_udp_port, nagare, parse_report, wait_until};
use crate::stripes::consecutive_free_ports;

/// Frames each stream sends.
const FRAMES: u64 = 3;
/// Extended sequence number of each stream's first packet: just below the
/// 16-bit wrap, so the highest number reported must count the cycle.
const FIRST_SEQ: u64 = 0xfffe;
/// The NTP time of the test senders' reports; a report block names its
/// middle 32 bits as the last SR heard.
const SR_NTP: u64 = 0x1234_5678_9abc_def0;

fn rate() -> FrameRate {
    FrameRate::new(50, 1).unwrap()
}

fn whole() -> VideoFormat {
    VideoFormat::new(64, 16, PixelFormat::Uyvy422).unwrap()
}

/// The datagrams of [`FRAMES`] black frames of `format` from `ssrc`, and
/// the extended sequence number of the last.
fn stream(format: VideoFormat, ssrc: u32) -> (Vec<Vec<u8>>, u64) {
    stream_of(format, ssrc, FRAMES)
}

/// [`stream`] of `frames` frames.
fn stream_of(format: VideoFormat, ssrc: u32, frames: u64) -> (Vec<Vec<u8>>, u64) {
    let p = Packetizer::new(format, 1200, Ssrc(ssrc)).unwrap().uniform();
    let frame = vec![0u8; format.frame_bytes()];
    let mut out = Vec::new();
    let mut seq = FIRST_SEQ;
    for f in 0..frames {
        let ts = MediaTime(rate().rtp_timestamp(90_000 + f));
        for i in 0..p.packets_per_frame() {
            let mut head = [0u8; 1500];
            let n = p.write_header(i, ExtSeq(seq), ts, &mut head).unwrap();
            let mut d = head[..n].to_vec();
            d.extend_from_slice(&frame[p.data_range(i)]);
            d.extend_from_slice(p.padding(i));
            assert_eq!(d.len(), p.packet_len(i));
            out.push(d);
            seq += 1;
        }
    }
    (out, seq - 1)
}

/// A sender report from `ssrc`, as a sender's RTCP port sends it.
fn sender_report(ssrc: u32) -> Vec<u8> {
    let info = SenderInfo {
        ntp: NtpTime(SR_NTP),
        rtp: MediaTime(rate().rtp_timestamp(90_000)),
        packets: 3,
        octets: 3000,
    };
    rtcp::sender_report(Ssrc(ssrc), "sender@test", info)
}

/// Waits (bounded) for a receiver report on `sock` with a block on `ssrc`
/// up to extended sequence number `highest`; returns that block. An
/// earlier report may have gone out before the last packets were read.
fn report_about(sock: &UdpSocket, ssrc: u32, highest: u64) -> ReportBlock {
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let mut seen: Vec<ReportBlock> = Vec::new();
    let what = format!("a receiver report on SSRC {ssrc:#x} up to {highest:#x}");
    wait_until(&what, Duration::from_secs(10), || {
        while let Ok(n) = sock.recv(&mut buf) {
            for p in rtcp::parse(&buf[..n]).unwrap_or_default() {
                if let Packet::ReceiverReport { blocks, .. } = p {
                    seen.extend(blocks.into_iter().filter(|b| b.source == Ssrc(ssrc)));
                }
            }
        }
        seen.iter()
            .copied()
            .find(|b| u64::from(b.highest_seq) == highest)
    })
}

/// What every block must say of a clean stream after one SR.
fn assert_clean(b: &ReportBlock) {
    assert_eq!((b.cumulative_lost, b.fraction_lost), (0, 0), "{b:?}");
    assert_eq!(b.last_sr, (SR_NTP >> 16) as u32, "{b:?}");
}

#[test]
fn each_stripe_answers_its_own_senders_reports() {
    // Stripes on base and base + 1; their RTCP past them, on base + 2 and
    // base + 3, as `send --stripes 2` sends it.
    let base = consecutive_free_ports(4);
    let mut recv = nagare();
    recv.args(["recv", "--listen", &format!("127.0.0.1:{base}")])
        .args(["--size", "64x16", "--pix-fmt", "uyvy422", "--fps", "50"])
        .args(["--stripes", "2", "--split", "lines", "--rtcp"])
        .args(["--timeout", "4", "--json"]);
    let mut r = Running::spawn(recv);
    r.listening();
    for k in 0..2 {
        let at = format!("stripe {k} RTCP on 127.0.0.1:{}", base + 2 + k);
        assert!(r.has_said(&at), "{at}: {:#?}", r.stderr);
    }
    let stripes = Stripes::new(whole(), Rule::Lines, 2).unwrap();
    let mut senders = Vec::new();
    for k in 0..2u16 {
        let ssrc = 0x5717_0000 + u32::from(k);
        let (packets, highest) = stream(stripes.stripe_format(), ssrc);
        let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in &packets {
            rtp.send_to(d, ("127.0.0.1", base + k)).unwrap();
        }
        // The stripe sender's RTCP port: its report goes out from here,
        // and the stripe's receiver reports come back here.
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        rtcp.send_to(&sender_report(ssrc), ("127.0.0.1", base + 2 + k))
            .unwrap();
        senders.push((rtcp, ssrc, highest));
    }
    for (rtcp, ssrc, highest) in &senders {
        // 3 packets from 0xfffe: the highest, 0x1_0000, is in cycle 1.
        assert_eq!(*highest, 0x1_0000);
        assert_clean(&report_about(rtcp, *ssrc, *highest));
    }
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    let rep: StripesReport = parse_report(&out);
    assert_eq!(rep.frames_complete, FRAMES, "{err}");
    for (k, (rtcp, _, _)) in senders.iter().enumerate() {
        let got = rep.per_stripe[k].rtcp.as_ref().expect("the stripe's RTCP");
        assert_eq!(got.port, base + 2 + k as u16);
        assert_eq!(got.sender, Some(rtcp.local_addr().unwrap()));
        assert_eq!((got.sender_reports, got.malformed), (1, 0));
        assert!(got.receiver_reports >= 1, "{got:?}");
    }
}

/// A socket on `group`'s port `port`, joined on lo, sending there on lo:
/// a multicast sender's RTCP port, where RFC 3550 §6 has every
/// participant's RTCP.
fn group_socket(group: Ipv4Addr, port: u16) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&SocketAddr::V4(SocketAddrV4::new(group, port)).into())
        .unwrap();
    s.join_multicast_v4(&group, &Ipv4Addr::LOCALHOST).unwrap();
    s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
    s.set_multicast_loop_v4(true).unwrap();
    s.into()
}

#[test]
fn a_multicast_receiver_reports_to_the_group() {
    let group = Ipv4Addr::new(239, 255, 78, 5);
    let port = port_with_rtcp();
    let rtcp = group_socket(group, port + 1);
    let r = group_recv(group, port, "64x16", &["--fps", "50", "--timeout", "4"]);
    let ssrc = 0x6d17_0001;
    let (packets, highest) = stream(whole(), ssrc);
    let rtp = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    rtp.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
    let to = SocketAddr::V4(SocketAddrV4::new(group, port)).into();
    for d in &packets {
        rtp.send_to(d, &to).unwrap();
    }
    rtcp.send_to(&sender_report(ssrc), (group, port + 1))
        .unwrap();
    // Bound to the group's address, this socket only hears what goes to
    // the group: the report went there, not back to a unicast address.
    assert_clean(&report_about(&rtcp, ssrc, highest));
    let got = rtcp_once_every_frame_came(r);
    assert_eq!(got.port, port + 1);
    assert_eq!(got.sender_reports, 1, "{got:?}");
    assert!(got.receiver_reports >= 1, "{got:?}");
}

/// Waits for a single `recv` to end; its RTCP statistics, once it ended
/// well with every one of the [`FRAMES`] frames whole.
fn rtcp_once_every_frame_came(r: Running) -> RecvRtcp {
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    let rep: RecvReport = parse_report(&out);
    assert_eq!(rep.frames_complete, FRAMES, "{err}");
    rep.rtcp.expect("recv's RTCP")
}

/// An SDP of [`whole`] frames on `rtp`, its RTCP where `rtcp_line` says
/// (the value of an `a=rtcp:` line).
fn sdp_with_rtcp(rtp: SocketAddr, rtcp_line: &str) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=rtcp test\r\nt=0 0\r\n\
         m=video {port} RTP/AVP 96\r\nc=IN IP4 {ip}\r\na=rtcp:{rtcp_line}\r\n\
         a=rtpmap:96 raw/90000\r\n\
         a=fmtp:96 sampling=YCbCr-4:2:2; width=64; height=16; exactframerate=50; depth=8\r\n",
        ip = rtp.ip(),
        port = rtp.port()
    )
}

#[test]
fn a_single_receiver_reads_rtcp_where_the_sdps_a_rtcp_says() {
    // RFC 3605's long form: another port on another address (both on
    // loopback), so neither the RTP port + 1 nor the RTP address would do.
    let rtp: SocketAddr = format!("127.0.0.1:{}", free_udp_port()).parse().unwrap();
    let rtcp_at = UdpSocket::bind("127.0.0.2:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = Scratch::new("sdp-rtcp");
    let sdp = s.path("stream.sdp");
    let line = format!("{} IN IP4 {}", rtcp_at.port(), rtcp_at.ip());
    std::fs::write(&sdp, sdp_with_rtcp(rtp, &line)).unwrap();
    let mut recv = nagare();
    recv.args(["recv", "--sdp", sdp.to_str().unwrap(), "--rtcp"])
        .args(["--timeout", "4", "--json"]);
    let mut r = Running::spawn(recv);
    r.listening();
    let ssrc = 0x5d90_0001;
    let (packets, highest) = stream(whole(), ssrc);
    let out = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &packets {
        out.send_to(d, rtp).unwrap();
    }
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.send_to(&sender_report(ssrc), rtcp_at).unwrap();
    assert_clean(&report_about(&sender, ssrc, highest));
    let got = rtcp_once_every_frame_came(r);
    assert_eq!(got.port, rtcp_at.port());
    assert_eq!(got.sender, Some(sender.local_addr().unwrap()));
    assert_eq!((got.sender_reports, got.malformed), (1, 0), "{got:?}");
}

#[test]
fn a_multicast_sender_hears_the_receiver_reports_on_the_group() {
    // recv reports to the group's RTCP port, not to the sender's address:
    // send must be on the group to hear them.
    let group = Ipv4Addr::new(239, 255, 78, 6);
    let port = port_with_rtcp();
    let r = group_recv(group, port, "64x36", &["--frames", "150", "--timeout", "5"]);
    // 1.5 s at 100 fps: room for a report or two each way.
    let send = nagare()
        .args(["send", "pattern:bars", "--to", &format!("{group}:{port}")])
        .args([
            "--interface",
            "lo",
            "--size",
            "64x36",
            "--pix-fmt",
            "uyvy422",
        ])
        .args(["--fps", "100", "--frames", "150", "--json"])
        .output()
        .unwrap();
    let send_err = String::from_utf8_lossy(&send.stderr);
    assert!(send.status.success(), "send failed: {send_err}");
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&send.stdout));
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    let got: RecvReport = parse_report(&out);
    let heard = got.rtcp.expect("recv's RTCP");
    assert!(heard.sender_reports >= 1, "{heard:?}\n{err}");
    assert!(heard.receiver_reports >= 1, "{heard:?}\n{err}");
    let rtcp = sent.rtcp.expect("send's RTCP");
    // Every receiver report recv sent reached send on the group (the
    // last may come after send stopped reading), and its own reports,
    // looped back to it, are not counted as any.
    assert!(rtcp.receiver_reports >= 1, "{rtcp:?}\n{send_err}");
    assert!(
        rtcp.receiver_reports <= heard.receiver_reports,
        "{rtcp:?} {heard:?}"
    );
    assert_eq!(rtcp.reported_lost, Some(0), "{rtcp:?}");
    assert!(rtcp.reported_jitter_ms.is_some(), "{rtcp:?}");
    assert_eq!((rtcp.byes, rtcp.malformed), (1, 0), "{rtcp:?}");
    assert_eq!(rtcp.to, [SocketAddr::from((group, port + 1))]);
}

#[test]
fn each_leg_of_a_2022_7_pair_answers_its_own_senders_reports() {
    // Legs on base and base + 2, their RTCP on base + 1 and base + 3.
    let base = consecutive_free_ports(4);
    let mut recv = nagare();
    recv.args(["recv", "--listen", &format!("127.0.0.1:{base}")])
        .args(["--dup", &format!("127.0.0.1:{}", base + 2)])
        .args(["--size", "64x16", "--pix-fmt", "uyvy422", "--fps", "50"])
        .args(["--rtcp", "--timeout", "4", "--json"]);
    let mut r = Running::spawn(recv);
    r.listening();
    for j in 0..2 {
        let at = format!("stripe 0 leg {j} RTCP on 127.0.0.1:{}", base + 1 + 2 * j);
        assert!(r.has_said(&at), "{at}: {:#?}", r.stderr);
    }
    // 20 frames: enough packets past the one leg B loses for the merger
    // to settle it as lost (its window is 4 frames of packets).
    let frames = 20;
    let ssrc = 0x2022_0007;
    let (packets, highest) = stream_of(whole(), ssrc, frames);
    let lost_on_b = 2;
    let to = |leg: u16| ("127.0.0.1", base + 2 * leg);
    let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A leg counts losses only where it was seen carrying the stream, so
    // both must be under way before the loss settles, as on two real
    // paths. recv reads a socket's whole queue at once, so first packets
    // 0..=4 go to leg B and 0..=3 to leg A: a report naming packet 4 as
    // the highest then shows that leg B's were read.
    for (i, d) in packets[..4].iter().enumerate() {
        rtp.send_to(d, to(0)).unwrap();
        if i != lost_on_b {
            rtp.send_to(d, to(1)).unwrap();
        }
    }
    rtp.send_to(&packets[4], to(1)).unwrap();
    // Each leg's sender has an RTCP port of its own.
    let mut senders = Vec::new();
    for j in 0..2u16 {
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        rtcp.send_to(&sender_report(ssrc), ("127.0.0.1", base + 1 + 2 * j))
            .unwrap();
        senders.push(rtcp);
    }
    report_about(&senders[0], ssrc, FIRST_SEQ + 4);
    rtp.send_to(&packets[4], to(0)).unwrap();
    for d in &packets[5..] {
        rtp.send_to(d, to(0)).unwrap();
        rtp.send_to(d, to(1)).unwrap();
    }
    let a = report_about(&senders[0], ssrc, highest);
    assert_clean(&a);
    // Leg B's sender hears of leg B's loss, which leg A made good.
    let b = report_about(&senders[1], ssrc, highest);
    assert_eq!(b.cumulative_lost, 1, "{b:?}");
    assert_eq!(b.last_sr, (SR_NTP >> 16) as u32, "{b:?}");
    let (status, out, err) = r.finish();
    assert!(status.success(), "{err}");
    let rep: StripesReport = parse_report(&out);
    assert_eq!(rep.frames_complete, frames, "{err}");
    let stripe = &rep.per_stripe[0];
    assert_eq!(stripe.legs.len(), 2, "{stripe:?}");
    for (j, leg) in stripe.legs.iter().enumerate() {
        let got = leg.rtcp.as_ref().expect("the leg's RTCP");
        assert_eq!(got.port, base + 1 + 2 * j as u16);
        assert_eq!(got.sender, Some(senders[j].local_addr().unwrap()));
        assert_eq!((got.sender_reports, got.malformed), (1, 0), "{got:?}");
        assert!(got.receiver_reports >= 1, "{got:?}");
    }
    // The stripe's own entry is its first leg's, as with one leg.
    assert_eq!(stripe.rtcp, stripe.legs[0].rtcp);
}

/// A free UDP port whose RTCP port (+ 1) exists.
fn port_with_rtcp() -> u16 {
    loop {
        let p = free_udp_port();
        if p < u16::MAX {
            return p;
        }
    }
}

/// A listening `recv --rtcp --json` of `size` uyvy422 frames sent to
/// `group`:`port` over `lo`, with the flags in `more`.
fn group_recv(group: Ipv4Addr, port: u16, size: &str, more: &[&str]) -> Running {
    let mut recv = nagare();
    recv.args(["recv", "--listen", &format!("{group}:{port}")])
        .args(["--interface", "lo", "--size", size, "--pix-fmt", "uyvy422"])
        .args(["--rtcp", "--json"])
        .args(more);
    let mut r = Running::spawn(recv);
    r.listening();
    r
}
