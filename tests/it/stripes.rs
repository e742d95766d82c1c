//! One frame as N stripe streams (`send --split --stripes`, `send --stripe
//! K`) reassembled by one `recv --stripes N`, and one stripe on two
//! ST 2022-7 legs from two senders, one of which dies mid-stream.

use std::time::Duration;

use nagare_api::stripes::StripesReport;
use nagare_api::video::SendReport;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{PixelFormat, VideoFormat};

use crate::common::{
    Running, Scratch, assert_ok, nagare, noise, parse_report, wait_bounded, wait_for_file_size,
    wait_for_udp_port,
};

/// A base port with the next `n - 1` free as well (on 127.0.0.1).
pub(crate) fn consecutive_free_ports(n: u16) -> u16 {
    loop {
        let p = crate::common::free_udp_port();
        if p < 60000 && (1..n).all(|k| std::net::UdpSocket::bind(("127.0.0.1", p + k)).is_ok()) {
            return p;
        }
    }
}

fn path(s: &Scratch, f: &str) -> String {
    s.path(f).to_str().unwrap().to_string()
}

#[test]
fn eight_2si_stripes_rebuild_the_frames_byte_identical() {
    // 256x128 uyvy422: the eight stripes are the four 2SI sub-images
    // (128x64), each in two bands of 32 lines.
    rebuild_2si("stripes-2si", 256, &[]);
}

#[test]
fn eight_2si_stripes_recorded_with_o_direct_are_byte_identical() {
    // 264x128 uyvy422 frames (67,584 bytes) are no whole number of 4 KiB
    // blocks: every other frame starts mid-block in the file.
    rebuild_2si("stripes-2si-direct", 264, &["--direct"]);
}

/// Sends 6 frames of noise, `width`x128, as eight 2SI stripes to one
/// `recv --stripes 8` (with `recv_extra`) and checks the recording is the
/// input, byte for byte.
fn rebuild_2si(tag: &str, width: usize, recv_extra: &[&str]) {
    let s = Scratch::new(tag);
    let size = format!("{width}x128");
    let (frames, frame) = (6usize, width * 128 * 2);
    let input = noise(frame * frames, 77);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let base = consecutive_free_ports(8);
    let send = |extra: &[&str]| {
        nagare()
            .args([
                "send",
                &path(&s, "in.yuv"),
                "--to",
                &format!("127.0.0.1:{base}"),
            ])
            .args(["--size", &size, "--pix-fmt", "uyvy422", "--fps", "50"])
            .args(["--split", "2si", "--stripes", "8", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    // A first send writes the stripes' SDPs and sends nothing.
    assert_ok(&send(&["--frames", "0", "--sdp", &path(&s, "clip.sdp")]));
    let mut recv = nagare();
    recv.args([
        "recv",
        "--split",
        "2si",
        "--frames",
        "6",
        "--timeout",
        "5",
        "--json",
    ])
    .args(["-o", &path(&s, "out.yuv")])
    .args(recv_extra);
    for k in 0..8 {
        let sdp = std::fs::read_to_string(s.path(&format!("clip-{k}.sdp"))).unwrap();
        assert!(sdp.contains(&format!("m=video {} ", base + k)), "{sdp}");
        let stripe = format!("width={}; height=32;", width / 2);
        assert!(sdp.contains(&stripe), "{sdp}");
        recv.args(["--sdp", &path(&s, &format!("clip-{k}.sdp"))]);
    }
    let mut r = Running::spawn(recv);
    r.listening();
    let out = send(&[]);
    assert_ok(&out);
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((sent.stripes, sent.frames_sent), (8, frames as u64));
    let (status, stdout, err) = r.finish();
    assert!(status.success(), "{err}");
    let rep: StripesReport = parse_report(&stdout);
    assert_eq!((rep.stripes, rep.split.as_str()), (8, "2si"));
    assert_eq!((rep.frames_complete, rep.frames_written), (6, 6));
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    // Every stripe delivered every frame, under one RTP timestamp per
    // frame: the first and the last frame carry the same timestamp on all
    // eight streams.
    let first = rep.per_stripe[0].first_timestamp;
    for st in &rep.per_stripe {
        assert_eq!(st.frames.complete, 6, "stripe {}", st.stripe);
        assert_eq!(st.frames.missing + st.frames.late, 0);
        assert_eq!(st.first_timestamp, first, "stripe {}", st.stripe);
        assert_eq!(st.last_timestamp, rep.per_stripe[0].last_timestamp);
    }
    let period = 90_000 / 50;
    assert_eq!(
        rep.per_stripe[0].last_timestamp.unwrap() - first.unwrap(),
        5 * period
    );
    assert!(std::fs::read(s.path("out.yuv")).unwrap() == input);
}

#[test]
fn a_missing_stripe_is_named_for_every_frame() {
    // Stripes 0, 1 and 3 of 4 bands are sent by one `send --stripe K`
    // each, at once; stripe 2's sender never runs, so every frame names
    // stripe 2 as missing.
    let s = Scratch::new("stripes-missing");
    let input = noise(64 * 16 * 3 * 3, 5);
    std::fs::write(s.path("in.rgb"), &input).unwrap();
    let base = consecutive_free_ports(4);
    let mut recv = nagare();
    recv.args([
        "recv",
        "--listen",
        &format!("127.0.0.1:{base}"),
        "--stripes",
        "4",
    ])
    .args(["--size", "64x16", "--pix-fmt", "rgb24", "--fps", "50"])
    .args(["--frames", "20", "--timeout", "2", "--json"]);
    let mut r = Running::spawn(recv);
    r.listening();
    let senders: Vec<Running> = [0u16, 1, 3]
        .iter()
        .map(|k| {
            let mut c = nagare();
            c.args([
                "send",
                &path(&s, "in.rgb"),
                "--to",
                &format!("127.0.0.1:{}", base + k),
            ])
            .args(["--size", "64x16", "--pix-fmt", "rgb24", "--fps", "50"])
            .args(["--stripes", "4", "--stripe", &k.to_string()])
            .args(["--loop", "--frames", "40"]);
            Running::spawn(c)
        })
        .collect();
    // The receiver gives up before the senders end (their refused trains
    // at the end are no failure); one whose receiver was gone before it
    // began found nobody listening and says so (exit 1).
    for sender in senders {
        let (status, _, err) = sender.finish();
        assert!(
            status.success() || status.code() == Some(1) && err.contains("were refused"),
            "{err}"
        );
    }
    let (status, stdout, err) = r.finish();
    assert!(!status.success(), "{err}");
    let rep: StripesReport = parse_report(&stdout);
    assert_eq!(rep.frames_complete, 0);
    assert_eq!(rep.frames_incomplete.count, 20, "{err}");
    assert_eq!(rep.failures.len(), 20);
    for f in &rep.failures {
        assert!(f.missing.contains(&2), "{f:?}");
        assert!(f.incomplete.is_empty(), "{f:?}");
    }
    // Once all three senders run, stripe 2 alone is missing.
    assert_eq!(rep.failures.last().unwrap().missing, [2]);
    assert_eq!(rep.per_stripe[2].packets_received, 0);
    assert!(rep.per_stripe[2].frames.missing >= 20);
}

/// Stripe 2 of the 4 2SI stripes of every frame of `input` (256x128).
fn stripe_two(input: &[u8]) -> Vec<Vec<u8>> {
    let f = VideoFormat::new(256, 128, PixelFormat::Uyvy422).unwrap();
    let st = Stripes::new(f, Rule::TwoSampleInterleave, 4).unwrap();
    input
        .chunks(f.frame_bytes())
        .map(|frame| {
            let mut out = vec![0; st.stripe_format().frame_bytes()];
            st.split(frame, 2, &mut out).unwrap();
            out
        })
        .collect()
}

/// One `send --stripe 2` leg with a fixed SSRC, looping its input.
fn leg(s: &Scratch, to: &str) -> Running {
    let mut c = nagare();
    c.args([
        "send",
        &path(s, "in.yuv"),
        "--loop",
        "--frames",
        "400",
        "--to",
        to,
    ])
    .args(["--size", "256x128", "--pix-fmt", "uyvy422", "--fps", "50"])
    .args([
        "--split",
        "2si",
        "--stripes",
        "4",
        "--stripe",
        "2",
        "--ssrc",
        "4242",
    ]);
    Running::spawn(c)
}

#[test]
fn a_2022_7_leg_dying_mid_stream_loses_no_frame() {
    // Two senders of stripe 2, same SSRC: identical packets. Leg B goes
    // straight to the receiver; leg A goes through `impair`, losing 5%,
    // and its sender is killed mid-stream. B makes good every packet A
    // lost while it ran, and carries the stream alone after.
    let s = Scratch::new("stripes-dup");
    let n = 5;
    let input = noise(256 * 128 * 2 * n, 9);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let base = consecutive_free_ports(3);
    let (pa, pb, relay) = (base, base + 1, base + 2);
    let mut recv = nagare();
    recv.args(["recv", "--listen", &format!("127.0.0.1:{pa}")])
        .args(["--dup", &format!("127.0.0.1:{pb}")])
        .args(["--size", "128x64", "--pix-fmt", "uyvy422", "--fps", "50"])
        .args(["--frames", "200", "--timeout", "5", "--json"])
        .args(["-o", &path(&s, "out.yuv")]);
    let mut r = Running::spawn(recv);
    r.listening();
    let mut impair = nagare();
    impair
        .args(["impair", "--listen", &format!("127.0.0.1:{relay}")])
        .args([
            "--to",
            &format!("127.0.0.1:{pa}"),
            "--loss",
            "5%",
            "--seed",
            "3",
        ])
        .args(["--duration", "30"]);
    let mut impair = Running::spawn(impair);
    wait_for_udp_port(relay, Duration::from_secs(10));
    let stripe = 128 * 64 * 2;
    let mut b = leg(&s, &format!("127.0.0.1:{pb}"));
    wait_for_file_size(
        &s.path("out.yuv"),
        5 * stripe as u64,
        Duration::from_secs(10),
    );
    let mut a = leg(&s, &format!("127.0.0.1:{relay}"));
    // A's first progress line comes a second into its run (some 50
    // frames); then it dies, while the recording still runs.
    a.wait_for_within("  ring ", Duration::from_secs(20));
    let recorded = std::fs::metadata(s.path("out.yuv")).unwrap().len() / stripe as u64;
    a.child.kill().unwrap();
    assert!(recorded < 150, "the recording ended before A was killed");
    let (_, _, a_err) = a.finish();
    let (status, stdout, err) = r.finish();
    b.child.kill().unwrap();
    wait_bounded(&mut b.child, 10, "leg B");
    impair.child.kill().unwrap();
    let (_, _, impair_err) = impair.finish();
    assert!(status.success(), "{err}");
    let rep: StripesReport = parse_report(&stdout);
    assert_eq!(rep.frames_complete, 200, "{err}");
    assert_eq!((rep.frames_lost.count, rep.frames_incomplete.count), (0, 0));
    let st = &rep.per_stripe[0];
    let (la, lb) = (&st.legs[0], &st.legs[1]);
    eprintln!("leg A (lossy, killed): {la:?}\nleg B: {lb:?}");
    assert_eq!(st.unrecovered, 0, "{err}");
    // A lost packets while it ran (5% of hundreds); B recovered each one.
    assert!(la.lost > 0, "{stdout}\nA: {a_err}\nimpair: {impair_err}");
    assert_eq!(lb.recovered, la.lost, "{err}");
    assert_eq!(lb.lost, 0, "{err}");
    assert!(la.received > 0 && la.received < lb.received, "{err}");
    // Every frame recorded is the input's stripe 2, in input order.
    let want = stripe_two(&input);
    let out = std::fs::read(s.path("out.yuv")).unwrap();
    let got: Vec<&[u8]> = out.chunks(stripe).collect();
    let start = want
        .iter()
        .position(|w| w == got[0])
        .expect("a frame of the input");
    for (i, g) in got.iter().enumerate() {
        assert!(*g == want[(start + i) % n], "frame {i} differs");
    }
}

#[test]
fn an_sdp_with_a_dup_group_opens_both_legs() {
    // The two legs of one stream in one SDP (a=group:DUP, RFC 7104), as a
    // cluster controller would write it for a hot standby.
    let s = Scratch::new("stripes-dup-sdp");
    let pa = consecutive_free_ports(2);
    let pb = pa + 1;
    let media = |port: u16, mid: &str| {
        format!(
            "m=video {port} RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 raw/90000\r\n\
             a=fmtp:96 sampling=YCbCr-4:2:2; width=128; height=64; exactframerate=50; depth=8\r\n\
             a=mid:{mid}\r\n"
        )
    };
    let sdp = format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=dup\r\nt=0 0\r\na=group:DUP p s\r\n{}{}",
        media(pa, "p"),
        media(pb, "s")
    );
    std::fs::write(s.path("dup.sdp"), sdp).unwrap();
    let out = nagare()
        .args([
            "recv",
            "--sdp",
            &path(&s, "dup.sdp"),
            "--timeout",
            "0.3",
            "--json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("stripe 0 leg 0 on 127.0.0.1:{pa}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("stripe 0 leg 1 on 127.0.0.1:{pb}")),
        "{err}"
    );
    let rep: StripesReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rep.per_stripe[0].legs.len(), 2);
    assert_eq!(rep.ended_by, nagare_api::video::EndedBy::Timeout);
}

#[test]
fn recv_takes_its_stripes_from_a_cluster_config() {
    // The controller's cluster.toml names the stream and one destination
    // per stripe; `recv --cluster` listens on them and rebuilds frames.
    let s = Scratch::new("stripes-cluster");
    let frames = 4;
    let input = noise(128 * 32 * 3 * frames, 21);
    std::fs::write(s.path("in.rgb"), &input).unwrap();
    let base = consecutive_free_ports(4);
    let mut toml = String::from(
        "[stream]\nsource = \"in.rgb\"\nsize = \"128x32\"\npix_fmt = \"rgb24\"\nfps = \"50\"\n\
         split = \"square\"\nstripes = 4\n",
    );
    for k in 0..4 {
        toml += &format!("[[destination]]\nto = \"127.0.0.1:{}\"\n", base + k);
    }
    toml += "[[node]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\nstripes = [0, 1, 2, 3]\n";
    std::fs::write(s.path("cluster.toml"), toml).unwrap();
    let mut recv = nagare();
    recv.args(["recv", "--cluster", &path(&s, "cluster.toml")])
        .args(["--frames", &frames.to_string(), "--timeout", "5", "--json"])
        .args(["-o", &path(&s, "out.rgb")]);
    let mut r = Running::spawn(recv);
    r.listening();
    let out = nagare()
        .args([
            "send",
            &path(&s, "in.rgb"),
            "--to",
            &format!("127.0.0.1:{base}"),
        ])
        .args(["--size", "128x32", "--pix-fmt", "rgb24", "--fps", "50"])
        .args(["--split", "square", "--stripes", "4"])
        .output()
        .unwrap();
    assert_ok(&out);
    let (status, stdout, err) = r.finish();
    assert!(status.success(), "{err}");
    let rep: StripesReport = parse_report(&stdout);
    assert_eq!((rep.split.as_str(), rep.frames_complete), ("square", 4));
    assert!(std::fs::read(s.path("out.rgb")).unwrap() == input);
}

#[test]
fn recv_cluster_joins_on_the_configs_receiver_interface() {
    // `[receiver] interface` is read: a name this machine lacks is
    // refused, naming the file's setting; `--interface` overrides it.
    let s = Scratch::new("stripes-cluster-iface");
    let mut toml = String::from(
        "[stream]\nsource = \"in.rgb\"\nsize = \"128x32\"\npix_fmt = \"rgb24\"\nfps = \"50\"\n\
         split = \"lines\"\nstripes = 2\n",
    );
    for k in 0..2 {
        toml += &format!("[[destination]]\nto = \"239.7.7.7:{}\"\n", 6000 + k);
    }
    toml += "[[node]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\nstripes = [0, 1]\n";
    toml += "[receiver]\ninterface = \"nosuch0\"\n";
    std::fs::write(s.path("cluster.toml"), toml).unwrap();
    let recv = |extra: &[&str]| {
        nagare()
            .args(["recv", "--cluster", &path(&s, "cluster.toml")])
            .args(["--timeout", "0.2", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = recv(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("[receiver] interface = \"nosuch0\""), "{err}");
    assert!(err.contains("no interface named 'nosuch0'"), "{err}");
    let out = recv(&["--interface", "lo"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("nosuch0"), "{err}");
    assert!(!err.contains("default-route interface"), "{err}");
}

#[test]
fn recv_stripes_takes_cpu_and_refuses_one_out_of_range() {
    // --cpu pins the receive threads: a CPU this machine lacks is named
    // before anything listens.
    let base = consecutive_free_ports(2);
    let out = nagare()
        .args([
            "recv",
            "--listen",
            &format!("127.0.0.1:{base}"),
            "--stripes",
            "2",
        ])
        .args(["--size", "64x16", "--pix-fmt", "uyvy422", "--frames", "1"])
        .args(["--cpu", "4096"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--cpu 4096 is out of range"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
}

/// Four bands of 512x128 sent by one `send --stripes 4` (400-byte
/// packets, 87 a stripe frame), stripe 0 through `impair` (three packets
/// dropped, one reordered, one duplicated): the receiver lands packets in
/// frame memory (`packets_in_place`), loses exactly the dropped ones, and
/// records the frames they did not touch byte for byte.
#[test]
fn stripes_land_in_frame_memory_and_lose_exactly_what_impair_dropped() {
    let s = Scratch::new("stripes-landing");
    let (frames, frame) = (6usize, 512 * 128 * 2);
    let input = noise(frame * frames, 21);
    std::fs::write(s.path("in.yuv"), &input).unwrap();
    let base = consecutive_free_ports(4);
    let send = |extra: &[&str]| {
        nagare()
            .args(["send", &path(&s, "in.yuv")])
            .args(["--to", &format!("127.0.0.1:{base}")])
            .args(["--size", "512x128", "--pix-fmt", "uyvy422", "--fps", "50"])
            .args(["--stripes", "4", "--packet-size", "400", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    assert_ok(&send(&["--frames", "0", "--sdp", &path(&s, "clip.sdp")]));
    // Stripe 0 arrives from the relay, on a port of its own.
    let relayed = crate::common::free_udp_port();
    let sdp0 = std::fs::read_to_string(s.path("clip-0.sdp")).unwrap();
    let moved = sdp0.replace(&format!("m=video {base} "), &format!("m=video {relayed} "));
    assert_ne!(moved, sdp0);
    std::fs::write(s.path("clip-0.sdp"), moved).unwrap();
    let mut recv = nagare();
    recv.args(["recv", "--frames", "6", "--timeout", "3", "--json"])
        .args(["-o", &path(&s, "out.yuv")]);
    for k in 0..4 {
        recv.args(["--sdp", &path(&s, &format!("clip-{k}.sdp"))]);
    }
    let mut r = Running::spawn(recv);
    r.listening();
    let mut relay = nagare();
    relay
        .args(["impair", "--listen", &format!("127.0.0.1:{base}")])
        .args(["--to", &format!("127.0.0.1:{relayed}")])
        .args(["--drop-nth", "5,100-101", "--reorder-nth", "50"])
        .args(["--duplicate-nth", "70", "--json"]);
    let mut relay = Running::spawn(relay);
    relay.wait_for("port ");
    let out = send(&["--frames", "6"]);
    assert_ok(&out);
    let sent: SendReport = parse_report(&String::from_utf8_lossy(&out.stdout));
    let (status, stdout, err) = r.finish();
    crate::common::sigterm(&relay.child);
    let _ = relay.finish();
    let rep: StripesReport = parse_report(&stdout);
    let ppf = sent.packets_per_frame;
    let hit: std::collections::BTreeSet<u64> = [5u64, 100, 101].iter().map(|i| i / ppf).collect();
    assert_eq!(status.success(), hit.is_empty(), "{err}");
    let st0 = &rep.per_stripe[0];
    assert_eq!(st0.packets_lost, 3, "{err}");
    assert_eq!(st0.packets_received, 6 * ppf - 3);
    assert_eq!(rep.frames_complete, (frames - hit.len()) as u64, "{err}");
    for st in &rep.per_stripe {
        assert!(
            st.packets_in_place > 0,
            "stripe {} landed nothing: {err}",
            st.stripe
        );
    }
    for st in &rep.per_stripe[1..] {
        assert_eq!((st.packets_lost, st.packets_received), (0, 6 * ppf));
    }
    // Only the complete frames are recorded, in order.
    let want: Vec<u8> = input
        .chunks(frame)
        .enumerate()
        .filter(|(i, _)| !hit.contains(&(*i as u64)))
        .flat_map(|(_, f)| f.iter().copied())
        .collect();
    assert!(std::fs::read(s.path("out.yuv")).unwrap() == want);
}
