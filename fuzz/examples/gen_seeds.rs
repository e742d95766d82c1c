//! Writes a small seed corpus under `fuzz/seeds/<target>/`, so fuzzing
//! starts from valid packets, payloads and SDPs made by nagare itself:
//!
//! ```sh
//! cd fuzz && cargo run --example gen_seeds            # writes ./seeds
//! ```
//!
//! Deterministic: running it again rewrites the same files.

use std::fs;
use std::path::{Path, PathBuf};

use nagare_fuzz::{
    SESSION_ID, SessionScript, encode_depacketizer_input, screen_format, screen_format_bytes,
    screen_picture, session_params, small_format, small_format_bytes, step,
};
use nagare_proto::Nanos;
use nagare_proto::framing::{Kind, split};
use nagare_proto::probe::{
    Arrival, ControlMessage, DEFAULT_BURST_US, DataHeader, ECHO_LEN, Echo, EchoKind, LiveInterval,
    PROTOCOL_VERSION, Refusal, SenderReport, TestParams, analyze, records_to_frames,
};
use nagare_proto::screen::Encoder;
use nagare_proto::sdp::{RefClock, SdpStream};
use nagare_proto::tree::auth::{NONCE_LEN, PROOF_LEN};
use nagare_proto::tree::wire::{Control, PeerId};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::st2110_21::SenderType;
use nagare_proto::{ExtSeq, FrameRate, MediaTime, PixelFormat, Ssrc, VideoFormat};

fn frame_of(format: &VideoFormat, seed: u8) -> Vec<u8> {
    (0..format.frame_bytes())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn packets(p: &Packetizer, frame: &[u8], seq0: u32, ts: u32) -> Vec<Vec<u8>> {
    p.frame_packets(frame, ExtSeq(u64::from(seq0)), MediaTime(ts))
        .expect("frames here are made for the packetizer's format")
}

struct Out {
    root: PathBuf,
}

impl Out {
    fn write(&self, target: &str, name: &str, bytes: &[u8]) {
        assert!(
            bytes.len() < 10 * 1024,
            "{target}/{name} is too big for a seed"
        );
        let dir = self.root.join(target);
        fs::create_dir_all(&dir).expect("create seed directory");
        fs::write(dir.join(name), bytes).expect("write seed");
    }
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .map_or_else(|| Path::new("seeds").to_path_buf(), PathBuf::from);
    let out = Out { root };

    // Formats picked through the same byte mapping the targets use.
    let formats = [
        small_format(0, 3, 3),   // uyvy422 8x4
        small_format(1, 31, 15), // uyvp 64x16
        small_format(2, 11, 1),  // rgb24 12x2
    ];
    let names = ["uyvy422", "uyvp", "rgb24"];

    for (format, name) in formats.iter().zip(names) {
        let p = Packetizer::new(*format, 100, Ssrc(0x1234_5678)).expect("packet size in range");
        let frame = frame_of(format, 1);
        let pkts = packets(&p, &frame, 0x0001_fffe, 90_000);

        // rtp_packet: the first and the marked last packet.
        out.write("rtp_packet", &format!("{name}_first"), &pkts[0]);
        out.write(
            "rtp_packet",
            &format!("{name}_last"),
            pkts.last().expect("one packet"),
        );

        // rfc4175_payload: format bytes, then the payload after RTP.
        let mut seed = small_format_bytes(format).to_vec();
        seed.extend_from_slice(&pkts[0][12..]);
        out.write("rfc4175_payload", &format!("{name}_first"), &seed);

        // depacketizer: three frames, frame 0's last packet after frame
        // 1's first, frame 2 lost, frame 3 complete; 60 fps period.
        let f = |seed, ts| packets(&p, &frame_of(format, seed), u32::from(seed) * 1000, ts);
        let mut a = f(0, 3000);
        let b = f(1, 4500);
        let c = f(3, 7500);
        let late = a.pop().expect("one packet");
        let mut steps: Vec<(u8, Vec<u8>)> = a.into_iter().map(|p| (step::RECYCLE, p)).collect();
        steps.push((0, b[0].clone()));
        steps.push((step::RECYCLE, late));
        steps.extend(b[1..].iter().map(|p| (step::RECYCLE, p.clone())));
        steps.extend(c.into_iter().map(|p| (0, p)));
        let seed = encode_depacketizer_input(format, 2, 0, &steps);
        if seed.len() < 10 * 1024 {
            out.write("depacketizer", &format!("{name}_reorder_loss"), &seed);
        }
        // Same frames, period unknown, in-flight 3 and zero-fill on.
        let steps: Vec<(u8, Vec<u8>)> = f(0, 0).into_iter().map(|p| (step::FLUSH, p)).collect();
        let seed = encode_depacketizer_input(format, 0x18, 0, &steps);
        out.write("depacketizer", &format!("{name}_one_frame"), &seed);

        // video_receiver: the same frames as datagrams 100 µs apart, with
        // a copy and another SSRC's packet; keep, limit 4, recycle.
        let mut datagrams = f(0, 3000);
        datagrams.push(datagrams[0].clone());
        datagrams.extend(f(1, 4500));
        let mut foreign = datagrams[1].clone();
        foreign[8..12].copy_from_slice(&7u32.to_be_bytes());
        datagrams.push(foreign);
        datagrams.extend(f(3, 7500));
        let mut seed = small_format_bytes(format).to_vec();
        seed.extend_from_slice(&[0b111, 4]);
        for d in &datagrams {
            seed.push(100);
            seed.extend_from_slice(&(d.len() as u16).to_be_bytes());
            seed.extend_from_slice(d);
        }
        if seed.len() < 10 * 1024 {
            out.write("video_receiver", &format!("{name}_frames"), &seed);
        }

        // packetize_roundtrip: format, packet size, seq, ts, ssrc, order.
        let mut seed = small_format_bytes(format).to_vec();
        seed.extend_from_slice(&60u16.to_be_bytes());
        seed.extend_from_slice(&0xffff_fffeu32.to_be_bytes());
        seed.extend_from_slice(&0xffff_ff00u32.to_be_bytes());
        seed.extend_from_slice(&7u32.to_be_bytes());
        seed.extend_from_slice(&42u32.to_be_bytes());
        seed.extend_from_slice(b"nagare");
        out.write("packetize_roundtrip", name, &seed);
    }

    // rtp_packet: CSRCs, a header extension and padding.
    let mut pkt = vec![0xb2, 0xe0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
    pkt.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 5]); // 2 CSRCs
    pkt.extend_from_slice(&[0xbe, 0xde, 0, 1, 1, 2, 3, 4]); // 1-word extension
    pkt.extend_from_slice(b"payload");
    pkt.extend_from_slice(&[0, 0, 3]); // 3 bytes of padding
    out.write("rtp_packet", "csrc_ext_padding", &pkt);

    // sequence: in order, a 16-bit wrap, a reorder, a duplicate, an ESN
    // switching on, a jump, and raw values.
    let mut seq = Vec::new();
    let mut rec = |tag: u8, s: u16, esn: u16| {
        seq.push(tag);
        seq.extend_from_slice(&s.to_be_bytes());
        seq.extend_from_slice(&esn.to_be_bytes());
    };
    for s in [65533u16, 65534, 0, 65535, 1, 1] {
        rec(0, s, 0);
    }
    rec(1, 2, 0);
    rec(2, 3, 1);
    rec(6, 4, 1);
    rec(2, 40000, 9);
    rec(2, 39990, 9);
    rec(3, 5, 0);
    rec(3, 7, 0);
    rec(3, 6, 0);
    out.write("sequence", "mixed", &seq);

    // sdp: nagare's own, multicast with SSM, IPv6, and FFmpeg's.
    let stream = SdpStream {
        address: "239.1.2.3".parse().expect("address"),
        port: 5004,
        ttl: Some(8),
        source: Some("192.0.2.1".parse().expect("address")),
        payload_type: 96,
        format: VideoFormat::new(1920, 1080, PixelFormat::Uyvp).expect("format"),
        rate: Some(FrameRate::new(60000, 1001).expect("rate")),
        name: "nagare".into(),
        clock: Some(RefClock::Ptp(
            "39-A7-94-FF-FE-07-CB-D0:37".parse().expect("clock"),
        )),
        sender_type: Some(SenderType::N),
        tr_offset: None,
        // Jumbo packets: the seed carries MAXUDP for the parser.
        max_udp: Some(8960),
    };
    out.write("sdp", "multicast_ssm", stream.to_sdp(1).as_bytes());
    let unicast = SdpStream {
        address: "127.0.0.1".parse().expect("address"),
        ttl: None,
        source: None,
        format: VideoFormat::new(640, 480, PixelFormat::Rgb24).expect("format"),
        rate: Some(FrameRate::new(30, 1).expect("rate")),
        clock: Some(RefClock::LocalMac([2, 0xfc, 0, 0, 0, 1])),
        sender_type: Some(SenderType::W),
        tr_offset: None,
        ..stream.clone()
    };
    out.write("sdp", "unicast", unicast.to_sdp(2).as_bytes());
    let v6 = SdpStream {
        address: "ff15::1234".parse().expect("address"),
        ttl: None,
        source: Some("2001:db8::1".parse().expect("address")),
        format: VideoFormat::new(320, 240, PixelFormat::Uyvy422).expect("format"),
        rate: None,
        ..stream
    };
    out.write("sdp", "ipv6_multicast", v6.to_sdp(3).as_bytes());
    out.write(
        "sdp",
        "ffmpeg",
        b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
a=tool:libavformat\r\nm=video 5004 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=320; height=240; depth=8\r\na=framerate:29.97\r\n",
    );

    probe_seeds(&out);
    tree_seeds(&out);
}

fn probe_seeds(out: &Out) {
    datagram_seeds(out);
    control_seeds(out);
    session_seeds(out);
    analyze_seeds(out);
}

/// probe_datagram: a data packet with filler, each echo kind.
fn datagram_seeds(out: &Out) {
    let h = DataHeader {
        session: 0x1234_5678_9abc_def0,
        seq: 70_000,
        sent_at: Nanos(1_500_000_000),
        marker: true,
    };
    let mut buf = vec![0xa5; 96];
    h.write(&mut buf).expect("fits");
    out.write("probe_datagram", "data", &buf);
    for (kind, name) in [
        (EchoKind::Request, "echo_request"),
        (EchoKind::Reply, "echo_reply"),
        (EchoKind::Open, "echo_open"),
    ] {
        let mut buf = [0u8; ECHO_LEN];
        Echo {
            kind,
            session: 7,
            id: 9,
            sent_at: Nanos(11),
        }
        .write(&mut buf)
        .expect("fits");
        out.write("probe_datagram", name, &buf);
    }
}

/// probe_control: a hello then a welcome; a refusal; done + report +
/// records as a server sends them.
fn control_seeds(out: &Out) {
    let params = TestParams {
        rate_bps: 100_000_000,
        duration_ms: 1000,
        packet_size: 1200,
        fps: Some((60000, 1001)),
        reverse: false,
        records: true,
        playout_us: 20_000,
        burst_threshold: 5,
        burst_us: DEFAULT_BURST_US,
        interval_ms: 100,
        streams: 1,
        bidir: false,
    };
    let mut stream = ControlMessage::Hello {
        version: PROTOCOL_VERSION,
        token: Some("s3cret".into()),
        params,
    }
    .to_frame();
    stream.extend(
        ControlMessage::Welcome {
            version: PROTOCOL_VERSION,
            session: 42,
        }
        .to_frame(),
    );
    out.write("probe_control", "hello_welcome", &stream);
    let refused = ControlMessage::Refused {
        version: PROTOCOL_VERSION,
        reason: Refusal::Busy,
        message: "another test is running \u{2014} try later".into(),
    };
    out.write("probe_control", "refused", &refused.to_frame());
    let schedule = params.validate().expect("valid params");
    let arrivals: Vec<Arrival> = [0u64, 1, 3, 2, 2, 5, 9]
        .iter()
        .enumerate()
        .map(|(i, &seq)| Arrival {
            seq,
            sent_at: Nanos(seq * 100_000),
            received_at: Nanos(1_000_000 + i as u64 * 100_000),
        })
        .collect();
    let report = analyze(&arrivals, 8, &params, &schedule);
    let mut stream = ControlMessage::Done {
        sender: vec![SenderReport {
            sent: 8,
            bytes: 9600,
            ..SenderReport::default()
        }],
    }
    .to_frame();
    stream.extend(
        ControlMessage::Report {
            receiver: vec![report],
            records: arrivals.len() as u64,
        }
        .to_frame(),
    );
    for f in records_to_frames(&arrivals) {
        stream.extend(f);
    }
    out.write("probe_control", "done_report_records", &stream);
    out.write(
        "probe_control",
        "abort",
        &ControlMessage::Abort {
            message: "bye".into(),
        }
        .to_frame(),
    );
    // Live intervals of two parallel streams, as a receiver sends them
    // while the stream runs.
    let live = |stream, lost| LiveInterval {
        stream,
        start_s: 1.0,
        end_s: 1.5,
        received: 2000 - lost,
        lost,
        bytes: (2000 - lost) * 1200,
        rate_bps: 38_361_600.0,
        jitter_ms: 0.0123,
    };
    out.write(
        "probe_control",
        "interval",
        &ControlMessage::Interval {
            intervals: vec![live(0, 0), live(1, 16)],
        }
        .to_frame(),
    );
    // A bidir hello (protocol 4) and its welcome.
    let mut stream = ControlMessage::Hello {
        version: PROTOCOL_VERSION,
        token: None,
        params: TestParams {
            bidir: true,
            records: false,
            streams: 2,
            ..params
        },
    }
    .to_frame();
    stream.extend(
        ControlMessage::Welcome {
            version: PROTOCOL_VERSION,
            session: 7,
        }
        .to_frame(),
    );
    out.write("probe_control", "bidir_hello_welcome", &stream);
}

/// seq_list and metrics_analyze.
fn analyze_seeds(out: &Out) {
    // seq_list: the forms `nagare impair` documents.
    out.write("seq_list", "mixed", b"5,10-14,100");
    out.write("seq_list", "spaces_overlap", b" 10 - 20 , 15-30,,7 ");
    out.write(
        "seq_list",
        "big",
        b"18446744073709551000-18446744073709551615",
    );

    // metrics_analyze: params header (raw values the target maps into
    // range), then records; small seqs use the one-byte form.
    let mut seed = Vec::new();
    seed.extend_from_slice(&1000u32.to_be_bytes()); // rate 100 Mbit/s
    seed.extend_from_slice(&900u32.to_be_bytes()); // 1000 ms
    seed.extend_from_slice(&1136u16.to_be_bytes()); // 1200 bytes
    seed.push(0); // no fps
    seed.extend_from_slice(&5000u32.to_be_bytes()); // playout 20 ms
    seed.extend_from_slice(&4u16.to_be_bytes()); // burst threshold 5
    seed.extend_from_slice(&90u16.to_be_bytes()); // 100 ms intervals
    seed.extend_from_slice(&40u16.to_be_bytes()); // 40 sent
    for (i, s) in [0u8, 1, 2, 5, 3, 3, 4, 9, 8, 20, 39, 77].iter().enumerate() {
        seed.push(*s);
        seed.extend_from_slice(&(u64::from(*s) * 96_000).to_be_bytes());
        seed.extend_from_slice(&(1_000_000 + i as u64 * 90_000).to_be_bytes());
    }
    seed.push(0x80); // a raw sequence number far out
    seed.extend_from_slice(&u64::MAX.to_be_bytes());
    seed.extend_from_slice(&0u64.to_be_bytes());
    seed.extend_from_slice(&5u64.to_be_bytes());
    out.write("metrics_analyze", "mixed", &seed);
    seed[10] = 30; // 30 fps video frames
    out.write("metrics_analyze", "video", &seed);
}

/// probe_session: whole conversations of each side, as the peer's bytes.
fn session_seeds(out: &Out) {
    let frame = |m: ControlMessage| m.to_frame();
    let hello = |reverse, bidir| {
        frame(ControlMessage::Hello {
            version: PROTOCOL_VERSION,
            token: Some("s3cret".into()),
            params: session_params(reverse, bidir),
        })
    };
    let done = |sent| {
        frame(ControlMessage::Done {
            sender: vec![SenderReport {
                sent,
                ..SenderReport::default()
            }],
        })
    };
    let mut s = SessionScript::new(1 | 8)
        .control(&hello(false, false))
        .echo(0, SESSION_ID, 1);
    for seq in [0, 1, 3, 2, 2, 7] {
        s = s.data(SESSION_ID, seq);
    }
    let s = s.data(SESSION_ID + 1, 4).control(&done(10)).timeouts(2);
    out.write("probe_session", "server_forward", &s.0);
    let s = SessionScript::new(1 | 2 | 8)
        .control(&hello(true, false))
        .echo(2, SESSION_ID, 0)
        .echo(0, SESSION_ID, 1)
        .control(&frame(ControlMessage::Abort {
            message: "^C".into(),
        }))
        .stream_finished()
        .timeouts(1);
    out.write("probe_session", "server_reverse", &s.0);
    let s = SessionScript::new(1 | 4).control(&hello(false, false));
    out.write("probe_session", "server_busy", &s.0);
    let welcome = frame(ControlMessage::Welcome {
        version: PROTOCOL_VERSION,
        session: 9,
    });
    let records: Vec<Arrival> = (0..3)
        .map(|seq| Arrival {
            seq,
            sent_at: Nanos(seq * 1000),
            received_at: Nanos(seq * 1000 + 500),
        })
        .collect();
    let mut report = frame(ControlMessage::Report {
        receiver: vec![nagare_proto::probe::ReceiverReport::default()],
        records: 3,
    });
    report.extend(records_to_frames(&records).concat());
    let s = SessionScript::new(8)
        .control(&welcome)
        .echo(1, 9, 0)
        .timeouts(12)
        .stream_finished()
        .timeouts(1)
        .control(&report);
    out.write("probe_session", "client_forward", &s.0);
    let mut s = SessionScript::new(2).control(&welcome).timeouts(12);
    for seq in 0..4 {
        s = s.data(9, seq);
    }
    let s = s.interrupt().control(&done(4)).tick(400);
    out.write("probe_session", "client_reverse", &s.0);
    bidir_session_seeds(out, &done, &report);
}

/// probe_session, bidir: both sides send and receive at once.
fn bidir_session_seeds(out: &Out, done: &dyn Fn(u64) -> Vec<u8>, report: &[u8]) {
    let interval = ControlMessage::Interval {
        intervals: vec![LiveInterval {
            received: 3,
            ..LiveInterval::default()
        }],
    }
    .to_frame();
    let hello = ControlMessage::Hello {
        version: PROTOCOL_VERSION,
        token: Some("s3cret".into()),
        params: session_params(false, true),
    }
    .to_frame();
    // The client's stream starts before its open reaches the server.
    let mut s = SessionScript::new(1 | 8)
        .control(&hello)
        .data(SESSION_ID, 0)
        .echo(2, SESSION_ID, 0)
        .echo(0, SESSION_ID, 1);
    for seq in [1, 3, 2] {
        s = s.data(SESSION_ID, seq);
    }
    let s = s
        .control(&interval)
        .control(&done(5))
        .timeouts(1)
        .stream_finished()
        .control(&interval)
        .timeouts(1);
    out.write("probe_session", "server_bidir", &s.0);
    let welcome = ControlMessage::Welcome {
        version: PROTOCOL_VERSION,
        session: 9,
    }
    .to_frame();
    let mut s = SessionScript::new(16 | 8)
        .control(&welcome)
        .echo(1, 9, 0)
        .timeouts(12);
    for seq in [0, 1, 3] {
        s = s.data(9, seq);
    }
    let s = s
        .control(&interval)
        .stream_finished()
        .control(&done(4))
        .timeouts(1)
        .control(report)
        .tick(400);
    out.write("probe_session", "client_bidir", &s.0);
}

fn tree_seeds(out: &Out) {
    // tree_control: every control message, framed by the target (mode 0).
    let controls = [
        (
            "join",
            Control::Join {
                proof: [7; PROOF_LEN],
                relay_port: 4000,
            },
        ),
        (
            "placed_v4",
            Control::Placed {
                peer: PeerId(3),
                slot: 3,
                depth: 2,
                parent: PeerId(1),
                parent_addr: "192.0.2.1:9000".parse().expect("address"),
            },
        ),
        (
            "placed_v6",
            Control::Placed {
                peer: PeerId(4),
                slot: 4,
                depth: 1,
                parent: PeerId::SOURCE,
                parent_addr: "[2001:db8::1]:9000".parse().expect("address"),
            },
        ),
        ("orphaned", Control::Orphaned { parent: PeerId(9) }),
        (
            "refused",
            Control::Refused {
                reason: "wrong key \u{2014} ask the source".into(),
            },
        ),
        (
            "attach",
            Control::Attach {
                proof: [1; PROOF_LEN],
                peer: PeerId(2),
                version: Some(77),
            },
        ),
        (
            "welcome",
            Control::Welcome {
                format: VideoFormat::new(1440, 900, PixelFormat::Rgb24).expect("format"),
            },
        ),
        ("end", Control::End),
        ("ready", Control::Ready),
        (
            "challenge",
            Control::Challenge {
                nonce: [0x5a; NONCE_LEN],
            },
        ),
    ];
    for (name, c) in &controls {
        let mut seed = vec![0];
        seed.extend_from_slice(&c.to_bytes()[4..]);
        out.write("tree_control", name, &seed);
    }
    // And two whole framed messages (mode 1).
    let mut seed = vec![1];
    seed.extend_from_slice(&controls[1].1.to_bytes());
    out.write("tree_control", "framed_placed", &seed);
    screen_seeds(out);
}

/// screen_message, screen_canvas, relay_queue, tree_peer: a real screen
/// stream.
fn screen_seeds(out: &Out) {
    let format = screen_format(2, 129, 99); // rgb24 130x100: 3x2 tiles
    let mut enc = Encoder::new(format, 0).expect("format fits");
    let mut picture = Vec::new();
    screen_picture(&format, 4, &mut picture);
    let key = enc.encode(&picture, 10, 1).expect("key frame");
    for (i, b) in picture.iter_mut().enumerate().step_by(97).take(40) {
        *b ^= i as u8 | 1;
    }
    let delta = enc.encode(&picture, 11, 2).expect("delta frame");
    for (i, m) in key.messages.iter().chain(&delta.messages).enumerate() {
        if m.len() < 1024 {
            out.write("screen_message", &format!("msg{i}"), &m[4..]);
        }
    }

    // screen_canvas: format, key number 10, picture seed 4 (the key frame
    // the target makes itself is this one), then the delta's messages as
    // steps, an encoder step, and a catch-up check.
    let mut seed = screen_format_bytes(&format).to_vec();
    seed.extend_from_slice(&10u64.to_be_bytes());
    seed.push(4);
    for m in &delta.messages {
        let (kind, body) = split(m).expect("framing");
        let op = match kind {
            Kind::FrameStart => 0,
            Kind::Tiles => 1,
            _ => 2,
        };
        seed.push(op | 0x40);
        seed.extend_from_slice(&(body.len() as u16).to_be_bytes());
        seed.extend_from_slice(body);
    }
    seed.extend_from_slice(&[3, 0, 3, 1, 2, 3]);
    seed.extend_from_slice(&[0xc0, 0, 0]);
    out.write("screen_canvas", "delta_then_encoder", &seed);
    // relay_queue: format, lag, resume, opts, then op/arg pairs: a few
    // frames through a fast child, a stall, a catch-up, the end.
    let mut seed = screen_format_bytes(&format).to_vec();
    seed.extend_from_slice(&64u16.to_be_bytes());
    seed.extend_from_slice(&16u16.to_be_bytes());
    for opts in [0u8, 1 | (3 << 1)] {
        let mut s = seed.clone();
        s.push(opts);
        for step in [
            [2, 0xff],
            [5, 0],
            [2, 0x01],
            [2, 0x12],
            [5, 0],
            [0x12, 0xff],
            [0x12, 0xff],
            [0x12, 0xff],
            [0x12, 0xff],
            [4, 4],
            [6, 0],
            [5, 0],
            [2, 0x40],
            [3, 0],
            [3, 0],
            [6, 0],
            [5, 0],
        ] {
            s.extend_from_slice(&step);
        }
        out.write("relay_queue", &format!("stall_catch_up_{opts}"), &s);
        s.extend_from_slice(&[7, 0xc1, 5, 0]);
        out.write("relay_queue", &format!("close_{opts}"), &s);
    }
    tree_peer_seeds(out, &format);
    st2110_21_seeds(out);
}

/// tree_peer: format, picture seed, then op/arg pairs: join, attach, a
/// child, frames, the parent lost and a new placement, a stall, the end.
fn tree_peer_seeds(out: &Out, format: &VideoFormat) {
    let mut seed = screen_format_bytes(format).to_vec();
    seed.push(4);
    let join = [[0, 0], [2, 7], [4, 1 | 1 << 2], [0, 0], [3, 9], [5, 0]];
    let child = [[9, 3], [10, 0], [11, 2]];
    let frames = [
        [7, 0xff],
        [11, 2],
        [7, 0x0f],
        [11, 2],
        [6, 0x30],
        [6, 0],
        [11, 2],
    ];
    let repair = [[12, 1], [4, 2 | 2 << 2], [0, 0], [3, 11], [5, 0], [7, 0x81]];
    let end = [[13, 3], [14, 0], [11, 2], [11, 2], [13, 100]];
    for step in join.iter().chain(&child).chain(&frames).chain(&repair) {
        seed.extend_from_slice(step);
    }
    out.write("tree_peer", "join_relay_repair", &seed);
    let mut stalled = seed.clone();
    stalled.extend_from_slice(&[13, 200, 13, 200]);
    out.write("tree_peer", "parent_silent", &stalled);
    for step in &end {
        seed.extend_from_slice(step);
    }
    out.write("tree_peer", "leave", &seed);
    // Garbage on the parent link mid-frame: kind FrameEnd, 3 bytes.
    let mut bad = screen_format_bytes(format).to_vec();
    bad.push(4);
    for step in join.iter().chain(&[[6, 0xff], [8, 1]]) {
        bad.extend_from_slice(step);
    }
    bad.extend_from_slice(&[18, 3, 1, 2, 3]);
    bad.extend_from_slice(&[0, 0, 3, 5, 5, 0, 7, 0xff]);
    out.write("tree_peer", "bad_data", &bad);
}

/// Two short streams of 16 packets a frame at 50 fps: an ideal N sender
/// (releases from `SenderSchedule`) and a bursty one, with TRoffset given
/// in the header for the second.
fn st2110_21_seeds(out: &Out) {
    use nagare_fuzz::st2110_21::{ABSOLUTE, MARKER, POLL, TR_OFFSET, header, record};
    use nagare_proto::video::st2110_21::{Model, Scan, SenderSchedule, SenderType};

    let rate = FrameRate::new(50, 1).expect("50 fps is valid");
    let model = Model::new(rate, 1080, Scan::Progressive, 16).expect("valid model");
    let n = SenderSchedule::new(&model, SenderType::N);
    let mut seed = header(50, 1, 1080, 0, 16, 0);
    for frame in 1_000..1_004u64 {
        let rtp = rate.rtp_timestamp(frame);
        for j in 0..16u32 {
            let last = j == 15;
            let tag = ABSOLUTE | if last { MARKER | POLL } else { 0 };
            seed.extend_from_slice(&record(tag, n.release(frame, j).0, rtp, 1220));
        }
    }
    out.write("st2110_21", "ideal_n", &seed);

    let mut seed = header(50, 1, 1080, TR_OFFSET, 16, 500);
    for frame in 1_000..1_004u64 {
        let start = u64::try_from(rate.frame_start_ns(frame)).expect("fits") + 1;
        seed.extend_from_slice(&record(ABSOLUTE, start, rate.rtp_timestamp(frame), 1220));
        for j in 1..16u8 {
            let tag = if j == 15 { MARKER | POLL } else { 0 };
            seed.extend_from_slice(&record(tag, 1_029, rate.rtp_timestamp(frame), 1220));
        }
    }
    out.write("st2110_21", "bursty", &seed);
}
