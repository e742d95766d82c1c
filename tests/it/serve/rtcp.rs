//! RTCP from `nagare serve` (RFC 3550): sender reports and the BYE that
//! ends a finite clip, read by hand over TCP and UDP and by real players
//! (FFmpeg and GStreamer end a clip without `?loop=1` on the BYE, with
//! every frame byte-identical); and a reader's receiver report, crafted
//! here, shown with its exact values in `/v1/streams` and `/metrics`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nagare_api::serve::{ReaderReport, StreamList};

use super::harness::{FRAMES, Media, Rtsp, Serve, gst_launch};
use crate::common::{Scratch, require, wait_bounded, wait_until};

const SR: u8 = 200;
const RR: u8 = 201;
const BYE: u8 = 203;
/// The reader SSRC of the crafted receiver reports.
const READER: u32 = 0xfeed_beef;

/// One RTCP packet of a compound, read by hand (RFC 3550 §6.4.1, §6.6).
#[derive(Debug)]
struct Rtcp {
    packet_type: u8,
    ssrc: u32,
    body: Vec<u8>,
}

impl Rtcp {
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.body[at..at + 4].try_into().unwrap())
    }
    /// An SR's NTP time, RTP time, packet and octet counts.
    fn sender_info(&self) -> (u64, u32, u32, u32) {
        let ntp = (u64::from(self.u32_at(0)) << 32) | u64::from(self.u32_at(4));
        (ntp, self.u32_at(8), self.u32_at(12), self.u32_at(16))
    }
}

/// The packets of a compound: each is `(length + 1) × 4` bytes.
fn compound(bytes: &[u8]) -> Vec<Rtcp> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 8 {
        assert_eq!(rest[0] >> 6, 2, "RTCP version 2: {bytes:02x?}");
        let len = (usize::from(u16::from_be_bytes([rest[2], rest[3]])) + 1) * 4;
        assert!(len <= rest.len(), "length past the datagram: {bytes:02x?}");
        out.push(Rtcp {
            packet_type: rest[1],
            ssrc: u32::from_be_bytes(rest[4..8].try_into().unwrap()),
            body: rest[8..len].to_vec(),
        });
        rest = &rest[len..];
    }
    assert!(rest.is_empty(), "bytes past the last packet: {bytes:02x?}");
    out
}

/// A receiver report from [`READER`] about `source`.
fn receiver_report(source: u32) -> Vec<u8> {
    let mut rr = vec![0x81, RR, 0, 7];
    rr.extend_from_slice(&READER.to_be_bytes());
    rr.extend_from_slice(&source.to_be_bytes());
    rr.push(64); // a quarter lost since the last report
    rr.extend_from_slice(&12u32.to_be_bytes()[1..]); // 12 lost in all
    rr.extend_from_slice(&70_000u32.to_be_bytes()); // highest sequence
    rr.extend_from_slice(&345u32.to_be_bytes()); // jitter, 90 kHz units
    rr.extend_from_slice(&0u32.to_be_bytes()); // LSR
    rr.extend_from_slice(&0u32.to_be_bytes()); // DLSR
    rr
}

/// What the crafted report must read as, from reader `reader`.
fn expected_report(reader: String) -> ReaderReport {
    ReaderReport {
        reader,
        ssrc: READER,
        reports: 1,
        malformed: 0,
        fraction_lost: 64,
        cumulative_lost: 12,
        highest_seq: 70_000,
        jitter: 345,
        jitter_us: 3833,
    }
}

/// Waits (up to 20 s) for the one stream's readers to show a report.
fn wait_for_reader(serve: &Serve) -> Vec<ReaderReport> {
    wait_until(
        "a reader report on the stream",
        Duration::from_secs(20),
        || {
            let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
            let s = list.streams.into_iter().find(|s| !s.readers.is_empty())?;
            Some(s.readers)
        },
    )
}

/// The report's figures in /metrics.
fn assert_metrics(serve: &Serve) {
    assert_eq!(serve.metric("nagare_reader_reports_total"), 1.0);
    assert_eq!(serve.metric("nagare_reader_fraction_lost"), 0.25);
    assert_eq!(serve.metric("nagare_reader_cumulative_lost"), 12.0);
    let jitter = serve.metric("nagare_reader_jitter_seconds");
    assert!((jitter - 345.0 / 90_000.0).abs() < 1e-9, "{jitter}");
}

/// Checks an SR's time mapping: raw video runs on the epoch grid, so the
/// RTP time of any wall-clock instant is its 90 kHz ticks since the Unix
/// epoch (modulo 2^32), to within the tick the NTP fraction rounds.
fn assert_epoch_mapping(ntp: u64, rtp: u32) {
    let unix_ns = ((ntp >> 32) - 2_208_988_800) as u128 * 1_000_000_000
        + (((ntp & 0xffff_ffff) as u128 * 1_000_000_000) >> 32);
    let ticks = (unix_ns * 90_000 / 1_000_000_000) as u32;
    let off = ticks.wrapping_sub(rtp) as i32;
    assert!(
        off.abs() <= 1,
        "SR RTP time {rtp} vs {ticks} from its NTP time"
    );
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let age = now.as_nanos().abs_diff(unix_ns);
    assert!(age < 600_000_000_000, "SR NTP time not today's: {ntp:x}");
}

/// An interleaved reader: every `$` frame from the server, in order, as
/// (channel, payload), until the connection closes.
fn interleaved(stream: TcpStream) -> mpsc::Receiver<(u8, Vec<u8>)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(stream);
        let mut head = [0u8; 4];
        while r.read_exact(&mut head).is_ok() {
            if head[0] != b'$' {
                // A response (TEARDOWN's): no frames follow.
                return;
            }
            let mut body = vec![0u8; usize::from(u16::from_be_bytes([head[2], head[3]]))];
            if r.read_exact(&mut body).is_err() || tx.send((head[1], body)).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn a_finite_clip_over_tcp_ends_with_a_bye_counting_every_packet() {
    let media = Media::new("serve-rtcp-bye");
    let serve = Serve::start(&media, &[]);
    let mut c = Rtsp::connect(serve.rtsp);
    c.play(
        &serve.url("clip.yuv"),
        "RTP/AVP/TCP;unicast;interleaved=0-1",
    );
    let frames = interleaved(c.stream.try_clone().unwrap());
    let (mut packets, mut octets, mut markers) = (0u32, 0u32, 0usize);
    let mut reports = 0;
    let mut ssrc = None;
    let bye = loop {
        let (channel, body) = frames
            .recv_timeout(Duration::from_secs(20))
            .expect("frames until a BYE");
        if channel == 0 {
            packets += 1;
            octets += body.len() as u32 - 12;
            markers += usize::from(body[1] & 0x80 != 0);
            ssrc = Some(u32::from_be_bytes(body[8..12].try_into().unwrap()));
            continue;
        }
        assert_eq!(channel, 1, "RTCP on the RTP channel + 1");
        let rtcp = compound(&body);
        assert_eq!(rtcp[0].packet_type, SR, "{rtcp:?}");
        assert_eq!(rtcp[1].packet_type, 202, "SDES follows: {rtcp:?}");
        assert_eq!(Some(rtcp[0].ssrc), ssrc, "the stream's own SSRC");
        let (ntp, rtp, _, _) = rtcp[0].sender_info();
        assert_epoch_mapping(ntp, rtp);
        reports += 1;
        if rtcp.iter().any(|p| p.packet_type == BYE) {
            break rtcp;
        }
    };
    assert_eq!(markers, FRAMES, "every frame before the BYE");
    assert!(
        reports >= 2,
        "a report with the first frame, then the BYE's"
    );
    // The last SR counts exactly what went out on channel 0.
    let (_, _, sr_packets, sr_octets) = bye[0].sender_info();
    assert_eq!((sr_packets, sr_octets), (packets, octets));
    assert_eq!(bye[2].packet_type, BYE);
    assert_eq!(Some(bye[2].ssrc), ssrc, "BYE names the stream's SSRC");
    assert!(
        frames.recv_timeout(Duration::from_millis(300)).is_err(),
        "nothing after the BYE"
    );
}

#[test]
fn udp_sessions_report_from_the_server_rtcp_port_and_hear_receiver_reports() {
    let media = Media::new("serve-rtcp-udp");
    let serve = Serve::start(&media, &[]);
    let (rtp, rtcp) = client_pair();
    let client_rtp = rtp.local_addr().unwrap().port();
    let mut c = Rtsp::connect(serve.rtsp);
    let url = serve.url("clip.yuv?loop=1");
    let d = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")]);
    assert_eq!(d.status, 200);
    let transport = format!(
        "RTP/AVP;unicast;client_port={client_rtp}-{}",
        client_rtp + 1
    );
    let s = c.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &[("Transport", &transport)],
    );
    assert_eq!(s.status, 200, "{s:?}");
    let reply = s.header("Transport").unwrap().to_string();
    let ports = reply
        .split(';')
        .find_map(|p| p.strip_prefix("server_port="))
        .unwrap_or_else(|| panic!("no server_port in {reply}"));
    let (srv_rtp, srv_rtcp) = ports.split_once('-').unwrap();
    let (srv_rtp, srv_rtcp): (u16, u16) = (srv_rtp.parse().unwrap(), srv_rtcp.parse().unwrap());
    assert_eq!(srv_rtcp, srv_rtp + 1, "{reply}");
    let session = s.session();
    let p = c.request("PLAY", &url, &[("Session", &session)]);
    assert_eq!(p.status, 200);

    // RTP comes from the server's RTP port.
    let mut buf = [0u8; 2048];
    rtp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (_, from) = rtp.recv_from(&mut buf).unwrap();
    assert_eq!(from.port(), srv_rtp, "RTP from server_port's first");
    let ssrc = u32::from_be_bytes(buf[8..12].try_into().unwrap());
    // A sender report comes from its RTCP port, about that SSRC.
    rtcp.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (n, from) = rtcp.recv_from(&mut buf).unwrap();
    assert_eq!(from.port(), srv_rtcp, "RTCP from server_port's second");
    let sr = compound(&buf[..n]);
    assert_eq!((sr[0].packet_type, sr[0].ssrc), (SR, ssrc), "{sr:?}");
    let (ntp, rtp_time, packets, octets) = sr[0].sender_info();
    assert_epoch_mapping(ntp, rtp_time);
    assert!(packets > 0 && octets >= packets, "{packets} {octets}");

    // The reader's report on it, sent where RFC 3550 says: the server's
    // RTCP port, from the client's.
    rtcp.send_to(&receiver_report(ssrc), from).unwrap();
    let readers = wait_for_reader(&serve);
    assert_eq!(
        readers,
        vec![expected_report(format!("127.0.0.1:{client_rtp}"))]
    );
    assert_metrics(&serve);
}

#[test]
fn a_receiver_report_over_tcp_shows_in_the_api_and_metrics() {
    let media = Media::new("serve-rtcp-tcp");
    let serve = Serve::start(&media, &[]);
    let mut c = Rtsp::connect(serve.rtsp);
    c.play(
        &serve.url("clip.yuv?loop=1"),
        "RTP/AVP/TCP;unicast;interleaved=0-1",
    );
    let frames = interleaved(c.stream.try_clone().unwrap());
    let ssrc = loop {
        let (channel, body) = frames.recv_timeout(Duration::from_secs(20)).unwrap();
        if channel == 1 {
            break compound(&body)[0].ssrc;
        }
    };
    // Keep reading so the server never drops this reader as slow.
    std::thread::spawn(move || while frames.recv().is_ok() {});
    let rr = receiver_report(ssrc);
    let mut framed = vec![b'$', 1];
    framed.extend_from_slice(&(rr.len() as u16).to_be_bytes());
    framed.extend_from_slice(&rr);
    c.stream.write_all(&framed).unwrap();
    let readers = wait_for_reader(&serve);
    let peer = c.stream.local_addr().unwrap();
    assert_eq!(
        readers,
        vec![expected_report(format!("tcp:{peer}/channel 0"))]
    );
    assert_metrics(&serve);
}

/// A UDP port pair P, P + 1 on loopback for a client.
fn client_pair() -> (UdpSocket, UdpSocket) {
    for _ in 0..64 {
        let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rtp.local_addr().unwrap().port();
        if port == u16::MAX {
            continue;
        }
        if let Ok(rtcp) = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], port + 1))) {
            return (rtp, rtcp);
        }
    }
    panic!("no free UDP port pair on loopback");
}

#[test]
fn ffmpeg_ends_a_finite_raw_clip_by_itself_over_udp_and_tcp() {
    if !require("ffmpeg") {
        return;
    }
    let media = Media::new("serve-rtcp-ff");
    let serve = Serve::start(&media, &[]);
    let s = Scratch::new("serve-rtcp-ff-out");
    for transport in ["udp", "tcp"] {
        let out = s.path(&format!("{transport}.yuv"));
        // No ?loop=1 and no -frames:v: only the BYE ends the pull.
        let mut ff = Command::new("ffmpeg")
            .args(["-loglevel", "error", "-rtsp_transport", transport])
            .args(["-i", &serve.url("clip.yuv")])
            .args([
                "-c:v", "rawvideo", "-pix_fmt", "uyvy422", "-f", "rawvideo", "-y",
            ])
            .arg(&out)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let status = wait_bounded(&mut ff, 60, "ffmpeg on a finite clip");
        assert!(status.success(), "ffmpeg over {transport}");
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), media.clip.len(), "over {transport}");
        assert!(got == media.clip, "frames over {transport} differ");
    }
}

#[test]
fn gstreamer_rtspsrc_ends_a_finite_raw_clip_by_itself() {
    if !require("gst-launch-1.0") {
        return;
    }
    let media = Media::new("serve-rtcp-gst");
    let serve = Serve::start(&media, &[]);
    let s = Scratch::new("serve-rtcp-gst-out");
    for protocols in ["tcp", "udp"] {
        let out = s.path(&format!("{protocols}.yuv"));
        // No identity eos-after: only the BYE ends the pipeline.
        let mut gst = Command::new("gst-launch-1.0");
        gst.args(["-q", "rtspsrc"])
            .arg(format!("location={}", serve.url("clip.yuv")))
            .arg(format!("protocols={protocols}"))
            .args(["!", "rtpvrawdepay", "!", "filesink"])
            .arg(format!("location={}", out.display()));
        gst_launch(gst, 60);
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), media.clip.len(), "over {protocols}");
        assert!(got == media.clip, "frames over {protocols} differ");
    }
}

/// GStreamer's RTP jitter buffer synchronises on serve's sender reports:
/// rtspsrc's jitter buffer reads each SR (its debug log says "ext SR"
/// with the report's RTP and NTP times) and, once it has the stream's
/// RTP base, signals rtpbin to synchronise ("signaling sync"), which
/// nothing but an SR sets off. (tests/it/peers.rs shows the frames of the
/// same jitter buffer tagged with NTP time from `send`'s SRs, and none
/// from `send --no-rtcp`.)
#[test]
fn gstreamers_jitter_buffer_syncs_on_the_sender_reports() {
    if !require("gst-launch-1.0") {
        return;
    }
    let media = Media::new("serve-rtcp-gst-sync");
    let serve = Serve::start(&media, &[]);
    for protocols in ["udp", "tcp"] {
        // The finite clip: the BYE ends the pipeline.
        let mut gst = Command::new("gst-launch-1.0");
        gst.env("GST_DEBUG", "rtpjitterbuffer:5")
            .env("GST_DEBUG_NO_COLOR", "1")
            .args(["-q", "rtspsrc"])
            .arg(format!("location={}", serve.url("clip.yuv")))
            .arg(format!("protocols={protocols}"))
            .args(["!", "rtpvrawdepay", "!", "fakesink"]);
        let log = gst_launch(gst, 60);
        let srs = log.lines().filter(|l| l.contains("ext SR")).count();
        let syncs = log.lines().filter(|l| l.contains("signaling sync")).count();
        assert!(srs >= 1, "no SR reached the jitter buffer over {protocols}");
        assert!(syncs >= 1, "{srs} SRs but no sync over {protocols}");
    }
}

#[test]
fn ffmpeg_ends_a_finite_ts_clip_by_itself() {
    if !require("ffmpeg") {
        return;
    }
    let media = Media::new("serve-rtcp-ts").with_ts();
    let serve = Serve::start(&media, &[]);
    for transport in ["udp", "tcp"] {
        // The 4 s file once, no ?loop=1: the BYE ends the copy. Every
        // byte of the file leaves before the BYE, yet FFmpeg gives 99 of
        // its 100 frames, over
        // ordered TCP as over UDP: its MP2T-over-RTP reader hands on a
        // PES only when the next one begins, and the last never does.
        let ff = Command::new("ffmpeg")
            .args(["-v", "error", "-rtsp_transport", transport])
            .args(["-i", &serve.url("clip.ts")])
            .args(["-map", "0:v", "-c", "copy", "-f", "framemd5", "-"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = wait_stdout(ff, 60);
        let frames = out.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(frames, 99, "video frames over {transport}");
    }
}

/// Waits (bounded) for a spawned child; its stdout, once it succeeded.
fn wait_stdout(mut child: std::process::Child, secs: u64) -> String {
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = String::new();
        let _ = out.read_to_string(&mut v);
        v
    });
    let status = wait_bounded(&mut child, secs, "ffmpeg on a finite TS clip");
    assert!(status.success());
    reader.join().unwrap()
}
