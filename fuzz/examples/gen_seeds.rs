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

use nagare_fuzz::{encode_depacketizer_input, small_format, small_format_bytes, step};
use nagare_proto::rfc4175::Packetizer;
use nagare_proto::sdp::SdpStream;
use nagare_proto::{FrameRate, PixelFormat, VideoFormat};

fn frame_of(format: &VideoFormat, seed: u8) -> Vec<u8> {
    (0..format.frame_bytes())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn packets(p: &Packetizer, frame: &[u8], seq0: u32, ts: u32) -> Vec<Vec<u8>> {
    (0..p.packets_per_frame())
        .map(|i| {
            let mut buf = vec![0u8; p.packet_size()];
            let n = p
                .write_packet(i, frame, seq0.wrapping_add(i as u32), ts, &mut buf)
                .expect("buffer of packet_size fits");
            buf.truncate(n);
            buf
        })
        .collect()
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
        let p = Packetizer::new(*format, 100, 0x1234_5678).expect("packet size in range");
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
    };
    out.write("sdp", "multicast_ssm", stream.to_sdp(1).as_bytes());
    let unicast = SdpStream {
        address: "127.0.0.1".parse().expect("address"),
        ttl: None,
        source: None,
        format: VideoFormat::new(640, 480, PixelFormat::Rgb24).expect("format"),
        rate: Some(FrameRate::new(30, 1).expect("rate")),
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
}
