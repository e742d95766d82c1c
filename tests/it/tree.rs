//! `nagare tree`: a source and tens of peer processes over loopback TCP.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use nagare_api::tree::{PeerReport, SourceReport};
use nagare_proto::video::pattern::Pattern;
use nagare_proto::{PixelFormat, VideoFormat};

use crate::common::{Scratch, nagare, spawn_first_line};

const KEY: &str = "00112233445566778899aabbccddeeff";

/// Kills every process it holds when dropped, so a failing test leaves
/// nothing running.
#[derive(Default)]
struct Procs(Vec<Child>);

impl Procs {
    fn push(&mut self, c: Child) -> usize {
        self.0.push(c);
        self.0.len() - 1
    }

    /// Waits (bounded) for every process to exit; returns their success.
    fn wait_all(&mut self, limit: Duration) -> Vec<bool> {
        let end = Instant::now() + limit;
        let mut done = vec![None; self.0.len()];
        while done.iter().any(Option::is_none) && Instant::now() < end {
            for (i, c) in self.0.iter_mut().enumerate() {
                if done[i].is_none() {
                    if let Ok(Some(st)) = c.try_wait() {
                        done[i] = Some(st.success());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            done.iter().all(Option::is_some),
            "processes still running after {limit:?}"
        );
        done.into_iter().map(|d| d.unwrap_or(false)).collect()
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts a source and returns its address; its stdout is drained on a
/// thread so it never blocks on a full pipe.
fn start_source(procs: &mut Procs, args: &[&str]) -> String {
    let mut all = vec!["tree", "source", "--listen", "127.0.0.1:0", "--key", KEY];
    all.extend_from_slice(args);
    let (c, line) = spawn_first_line(&all);
    procs.push(c);
    line.strip_prefix("listening ")
        .unwrap_or_else(|| panic!("source said {line:?}"))
        .trim()
        .to_owned()
}

/// A source of `frames` frames of the bars pattern at 30 fps that starts
/// once `peers` peers are in, writing its report to `report`.
fn start_bars(procs: &mut Procs, size: &str, frames: u64, peers: u32, report: &Path) -> String {
    start_source(
        procs,
        &[
            "pattern:bars",
            "--size",
            size,
            "--fps",
            "30",
            "--frames",
            &frames.to_string(),
            "--wait-peers",
            &peers.to_string(),
            "--report",
            report.to_str().unwrap(),
        ],
    )
}

/// Starts a peer and waits until the source has placed it, so peers
/// started one after another fill slots 1, 2, 3... in order.
fn join(procs: &mut Procs, addr: &str, report: &Path, extra: &[&str]) -> usize {
    let mut c = nagare()
        .args([
            "tree",
            "join",
            addr,
            "--listen",
            "127.0.0.1:0",
            "--timeout",
            "20",
        ])
        .arg("--report")
        .arg(report)
        .args(extra)
        .env("NAGARE_TREE_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out: BufReader<ChildStdout> = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("placed peer"), "peer said {line:?}");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    procs.push(c)
}

fn report<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report {}: {e}", path.display()))
}

fn source_report(path: &Path) -> SourceReport {
    report(path)
}

fn peer_report(path: &Path) -> PeerReport {
    report(path)
}

/// Waits (bounded) until `path` holds at least `bytes` bytes.
fn wait_for_size(path: &Path, bytes: u64, limit: Duration) {
    let end = Instant::now() + limit;
    while std::fs::metadata(path).map_or(0, |m| m.len()) < bytes {
        assert!(
            Instant::now() < end,
            "{} did not reach {bytes} bytes within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn thirty_peers_record_identical_frames() {
    let dir = Scratch::new("tree30");
    let mut procs = Procs::default();
    let src_report = dir.path("source.json");
    let addr = start_source(
        &mut procs,
        &[
            "pattern:bars",
            "--size",
            "320x240",
            "--fps",
            "30",
            "--frames",
            "45",
            "--key-interval",
            "20",
            "--wait-peers",
            "30",
            "--report",
            src_report.to_str().unwrap(),
        ],
    );
    let outputs = [0usize, 29];
    for i in 0..30 {
        let mut extra = Vec::new();
        let out = dir.path(&format!("p{i}.raw"));
        if outputs.contains(&i) {
            extra = vec!["--output", out.to_str().unwrap()];
        }
        join(&mut procs, &addr, &dir.path(&format!("p{i}.json")), &extra);
    }
    let ok = procs.wait_all(Duration::from_secs(60));
    assert!(ok.iter().all(|&o| o), "exit statuses: {ok:?}");

    let src = source_report(&src_report);
    assert_eq!(src.frames, 45);
    let truth = src.fingerprints;
    assert_eq!(truth.len(), 45);
    let mut depths = Vec::new();
    for i in 0..30 {
        let r = peer_report(&dir.path(&format!("p{i}.json")));
        assert!(r.ended, "peer {i}: {r:?}");
        assert_eq!(r.lost, 0, "peer {i}");
        assert_eq!(r.fingerprints, truth, "peer {i} decoded other frames");
        depths.push(r.depth);
    }
    // 30 peers + the source fill a balanced tree of depth 4.
    assert_eq!(depths.iter().max(), Some(&4));
    assert_eq!(depths.iter().filter(|&&d| d == 1).count(), 2);

    // And the decoded frames are the pattern itself, bit for bit.
    let f = VideoFormat::new(320, 240, PixelFormat::Rgb24).unwrap();
    let p = Pattern::new(f);
    let mut want = vec![0u8; f.frame_bytes()];
    for i in outputs {
        let mut file = std::fs::File::open(dir.path(&format!("p{i}.raw"))).unwrap();
        let mut got = vec![0u8; f.frame_bytes()];
        for n in 0..45 {
            file.read_exact(&mut got).unwrap();
            p.render(n, &mut want);
            assert!(got == want, "peer {i} frame {n} differs from the pattern");
        }
        assert_eq!(file.read(&mut got).unwrap(), 0, "peer {i}: extra frames");
    }
}

#[test]
fn subtree_of_a_killed_inner_node_reattaches_and_resumes() {
    let dir = Scratch::new("treekill");
    let mut procs = Procs::default();
    let src_report = dir.path("source.json");
    let frames = 150;
    let addr = start_bars(&mut procs, "320x240", frames, 14, &src_report);
    let mut idx = Vec::new();
    let first = dir.path("p0.raw");
    for i in 0..14 {
        let out = ["--output", first.to_str().unwrap()];
        let extra: &[&str] = if i == 0 { &out } else { &[] };
        idx.push(join(
            &mut procs,
            &addr,
            &dir.path(&format!("p{i}.json")),
            extra,
        ));
    }
    // Peer 0 sits in slot 1: its subtree is slots 3, 4, 7, 8, 9, 10. It
    // dies once it has written 30 frames, well inside the stream.
    wait_for_size(&first, 30 * 320 * 240 * 3, Duration::from_secs(30));
    procs.0[idx[0]].kill().unwrap();
    let ok = procs.wait_all(Duration::from_secs(60));
    assert!(ok[0], "source failed");
    for (i, &k) in idx.iter().enumerate().skip(1) {
        assert!(ok[k], "peer {i} failed");
    }

    let truth: BTreeMap<u64, u64> = source_report(&src_report)
        .fingerprints
        .into_iter()
        .collect();
    let subtree = [2usize, 3, 6, 7, 8, 9];
    let mut lost_total = 0;
    for i in 1..14 {
        let r = peer_report(&dir.path(&format!("p{i}.json")));
        assert!(r.ended, "peer {i}: {r:?}");
        assert_eq!(r.last, Some(frames - 1), "peer {i} did not reach the end");
        for (n, h) in &r.fingerprints {
            assert_eq!(
                truth.get(n),
                Some(h),
                "peer {i} frame {n} is not what was captured"
            );
        }
        if subtree.contains(&i) {
            // The orphans (slots 3, 4) re-attach; the grandchildren keep
            // their parents, which resume them from their last whole frame
            // through the new grandparent: one bounded gap (the frames
            // that went by while their parent re-attached), then every
            // frame to the end.
            if i == 2 || i == 3 {
                assert!(r.reattaches >= 1, "orphan {i} never re-attached: {r:?}");
                let rec = r.recoveries_ms[0];
                assert!(rec < 10_000.0, "orphan {i} took {rec} ms");
            } else {
                let numbers: Vec<u64> = r.fingerprints.iter().map(|f| f.0).collect();
                let gaps: Vec<u64> = numbers
                    .windows(2)
                    .map(|w| w[1].saturating_sub(w[0] + 1))
                    .filter(|&g| g > 0)
                    .collect();
                assert!(
                    gaps.len() <= 1 && gaps.iter().all(|&g| g < 100),
                    "grandchild {i} saw gaps {gaps:?}"
                );
                assert_eq!(r.lost, gaps.iter().sum::<u64>(), "grandchild {i}");
            }
        } else if i != 13 {
            assert_eq!(
                r.reattaches, 0,
                "peer {i} outside the subtree was disturbed: {r:?}"
            );
        }
        lost_total += r.lost;
    }
    eprintln!("frames lost across the subtree: {lost_total}");
}

#[test]
fn wrong_key_is_refused_with_a_message() {
    let mut procs = Procs::default();
    let addr = start_source(
        &mut procs,
        &["pattern:bars", "--size", "64x64", "--fps", "5"],
    );
    let out = nagare()
        .args([
            "tree",
            "join",
            &addr,
            "--key",
            "ffffffffffffffffffffffffffffffff",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wrong session key"), "{err}");

    let out = nagare()
        .args(["tree", "join", &addr, "--key", "xyz"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"xyz\"") && err.contains("32 hex digits"),
        "{err}"
    );
}

#[test]
fn hostile_length_does_not_take_the_source_down() {
    use std::io::Write;
    let mut procs = Procs::default();
    let addr = start_source(
        &mut procs,
        &["pattern:bars", "--size", "64x64", "--fps", "5"],
    );
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(
        read_wire(&mut s),
        nagare_proto::tree::Control::Challenge { .. }
    ));
    // A 4 GB message: refused without allocating, connection closed.
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    // The source still serves peers.
    let dir = Scratch::new("treehostile");
    let r = dir.path("p.json");
    join(&mut procs, &addr, &r, &["--frames", "3"]);
    let ok = procs.0[1].wait().unwrap();
    assert!(ok.success());
    assert_eq!(peer_report(&r).frames, 3);
}

#[cfg(not(feature = "x11"))]
#[test]
fn headless_build_says_it_has_no_x11() {
    let out = nagare()
        .args([
            "tree",
            "source",
            "--capture",
            "x11",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("built without X11 support"), "{err}");
    let out = nagare()
        .args(["tree", "join", "127.0.0.1:9", "--key", KEY, "--view"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("built without it"), "{err}");
}

/// Starts Xvfb on a free display; `None` (skip) when it is missing outside CI.
#[cfg(feature = "x11")]
fn xvfb(procs: &mut Procs, size: &str) -> Option<String> {
    if !crate::common::have("Xvfb") {
        assert!(
            std::env::var_os("CI").is_none(),
            "Xvfb is missing (Debian package xvfb)"
        );
        eprintln!("skipping: Xvfb not installed (apt-get install xvfb)");
        return None;
    }
    let mut c = std::process::Command::new("Xvfb")
        .args(["-displayfd", "1", "-nolisten", "tcp", "-screen", "0"])
        .arg(format!("{size}x24"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    procs.push(c);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    Some(format!(":{}", line.trim()))
}

/// Starts a source capturing `display`; returns its index in `procs`
/// and its address once it says it captures through MIT-SHM.
#[cfg(feature = "x11")]
fn start_x11_source(procs: &mut Procs, display: &str, report: &Path) -> (usize, String) {
    let mut c = nagare()
        .args(["tree", "source", "--listen", "127.0.0.1:0", "--key", KEY])
        .args(["--capture", &format!("x11:{display}")])
        .args(["--fps", "20", "--frames", "10", "--wait-peers", "1"])
        .arg("--report")
        .arg(report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let source = procs.push(c);
    let mut text = String::new();
    let mut addr = None;
    for _ in 0..5 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(a) = line.strip_prefix("listening ") {
            addr = Some(a.trim().to_owned());
        }
        text.push_str(&line);
        if line.starts_with("capturing") {
            break;
        }
    }
    assert!(text.contains("capturing 320x200 through MIT-SHM"), "{text}");
    // Keep reading: a closed pipe would fail the source's next line.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (source, addr.unwrap())
}

#[cfg(feature = "x11")]
#[test]
fn x11_capture_reaches_a_peer_with_a_window() {
    let mut procs = Procs::default();
    let Some(display) = xvfb(&mut procs, "320x200") else {
        return;
    };
    let dir = Scratch::new("treex11");
    let src_report = dir.path("source.json");
    let (source, addr) = start_x11_source(&mut procs, &display, &src_report);
    let r = dir.path("p.json");
    let raw = dir.path("p.raw");
    let mut peer = nagare()
        .args([
            "tree",
            "join",
            &addr,
            "--key",
            KEY,
            "--view",
            "--timeout",
            "20",
        ])
        .arg("--report")
        .arg(&r)
        .arg("-o")
        .arg(&raw)
        .env("DISPLAY", &display)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    peer.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(peer.wait().unwrap().success(), "{err}");
    assert!(!err.contains("--view"), "window failed: {err}");
    // The source writes its report once it has seen the stream out.
    let status = crate::common::wait_bounded(&mut procs.0[source], 30, "tree source");
    assert!(status.success());
    let got = peer_report(&r).fingerprints;
    assert_eq!(got, source_report(&src_report).fingerprints);
    assert_eq!(got.len(), 10);
    assert_eq!(std::fs::metadata(&raw).unwrap().len(), 10 * 320 * 200 * 3);
}

/// Frames of noise (incompressible, every tile changes every frame), so a
/// few seconds of stream are tens of megabytes: enough to overflow what a
/// stalled child's queue and socket buffers hold.
fn noise_file(path: &Path, frame_bytes: usize, frames: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut data = vec![0u8; frame_bytes * frames];
    for w in data.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, data).unwrap();
}

#[test]
fn stalled_child_lags_alone_and_catches_up_bit_exact() {
    let dir = Scratch::new("treeslow");
    let mut procs = Procs::default();
    let (w, h, frames) = (480, 270, 100u64);
    let input = dir.path("noise.raw");
    noise_file(&input, w * h * 3, frames as usize);
    let src_report = dir.path("source.json");
    let addr = start_source(
        &mut procs,
        &[
            input.to_str().unwrap(),
            "--size",
            &format!("{w}x{h}"),
            "--fps",
            "30",
            "--wait-peers",
            "2",
            "--lag-limit-kib",
            "3072",
            "--report",
            src_report.to_str().unwrap(),
        ],
    );
    // Both are children of the source: the sibling in slot 1, the
    // staller in slot 2. The stall (2 s, about 23 MB of stream) is far
    // more than the 3 MiB queue plus socket buffers (2 MiB send, at most
    // 6 MiB receive) hold; 3 MiB (8 frames) is slack enough that a busy
    // machine does not make the sibling lag.
    join(&mut procs, &addr, &dir.path("sibling.json"), &[]);
    join(
        &mut procs,
        &addr,
        &dir.path("slow.json"),
        &["--stall-ms", "2000"],
    );
    let ok = procs.wait_all(Duration::from_secs(25));
    assert!(ok.iter().all(|&o| o), "exit statuses: {ok:?}");

    let src = source_report(&src_report);
    assert_eq!(src.frames, frames);
    assert!(src.lag_drops >= 1, "no lag: {src:?}");
    assert!(src.refreshes >= 1, "no catch-up: {src:?}");
    let truth = src.fingerprints;

    // The sibling got every frame, bit-exact, and on time: had the source
    // waited on the staller, frames would have been late by the stall.
    let sib = peer_report(&dir.path("sibling.json"));
    assert_eq!(sib.lost, 0, "{sib:?}");
    assert_eq!(sib.fingerprints, truth);
    let max_ms = sib.latency_us.max / 1e3;
    assert!(max_ms < 1000.0, "sibling frame {max_ms} ms late: {sib:?}");

    // The staller skipped frames but every one it shows is bit-exact, and
    // it caught up to the end of the stream.
    let r = peer_report(&dir.path("slow.json"));
    let truth: BTreeMap<u64, u64> = truth.into_iter().collect();
    assert!(r.ended, "{r:?}");
    assert_eq!(
        r.last,
        Some(frames - 1),
        "the slow peer never caught up: {r:?}"
    );
    for (n, h) in &r.fingerprints {
        assert_eq!(truth.get(n), Some(h), "slow peer frame {n} is wrong");
    }
    assert!(r.lost > 0, "the stall skipped nothing: {r:?}");
    eprintln!(
        "slow peer: {} frames shown, {} skipped; sibling latency max {max_ms:.1} ms",
        r.fingerprints.len(),
        r.lost
    );
}

/// Reads one framed tree message off a raw connection.
fn read_wire(s: &mut std::net::TcpStream) -> nagare_proto::tree::Control {
    use nagare_proto::framing::body_len;
    let mut header = [0u8; 4];
    s.read_exact(&mut header).unwrap();
    let len = body_len(header).unwrap();
    let mut msg = header.to_vec();
    msg.resize(4 + len, 0);
    s.read_exact(&mut msg[4..]).unwrap();
    nagare_proto::tree::Control::parse_framed(&msg).unwrap()
}

/// Reads one framed message off a raw connection, as bytes.
fn read_raw(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut header = [0u8; 4];
    s.read_exact(&mut header).unwrap();
    let len = nagare_proto::framing::body_len(header).unwrap();
    let mut msg = header.to_vec();
    msg.resize(4 + len, 0);
    s.read_exact(&mut msg[4..]).unwrap();
    msg
}

#[test]
fn replayed_answer_is_refused_and_the_key_never_travels() {
    use nagare_proto::framing::Kind;
    use nagare_proto::tree::secure::Opened;
    use nagare_proto::tree::{Control, Role, SecureLink, proof};
    use std::io::Write;
    let mut procs = Procs::default();
    let addr = start_source(
        &mut procs,
        &["pattern:bars", "--size", "64x64", "--fps", "5"],
    );
    let key: [u8; 16] =
        std::array::from_fn(|i| u8::from_str_radix(&KEY[2 * i..2 * i + 2], 16).unwrap());

    // An honest join: answer the challenge, get placed.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let Control::Challenge { nonce } = read_wire(&mut s) else {
        panic!("the source did not open with a challenge");
    };
    let answer = Control::Join {
        proof: proof(&key, &nonce, Role::Join),
        relay_port: 9,
    }
    .to_bytes();
    assert!(
        !answer.windows(16).any(|w| w == key),
        "the key itself is on the wire"
    );
    s.write_all(&answer).unwrap();
    // Then the encrypted link's handshake; the placement comes sealed.
    let challenge = Control::Challenge { nonce }.to_bytes();
    let (mut channel, hello) =
        SecureLink::initiator(&key, &nonce, Role::Join, &challenge, &answer, [7; 32]).unwrap();
    s.write_all(&hello).unwrap();
    assert_eq!(
        channel.open(&read_raw(&mut s)),
        Ok(Opened::Established),
        "no handshake answer"
    );
    let sealed = read_raw(&mut s);
    assert_eq!(
        sealed[4],
        Kind::Sealed as u8,
        "the placement is in the clear"
    );
    let Ok(Opened::Message(placed)) = channel.open(&sealed) else {
        panic!("the placement does not open");
    };
    assert!(matches!(
        Control::parse_framed(&placed),
        Ok(Control::Placed { .. })
    ));

    // The same answer, captured and replayed against a new challenge.
    let mut r = std::net::TcpStream::connect(&addr).unwrap();
    r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let Control::Challenge { nonce: fresh } = read_wire(&mut r) else {
        panic!("the source did not open with a challenge");
    };
    assert_ne!(fresh, nonce, "the source reused a nonce");
    r.write_all(&answer).unwrap();
    match read_wire(&mut r) {
        Control::Refused { reason } => assert!(reason.contains("wrong session key"), "{reason}"),
        other => panic!("replay was answered with {other:?}"),
    }

    // A proof for joining is no good for attaching either.
    let mut a = std::net::TcpStream::connect(&addr).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let Control::Challenge { nonce } = read_wire(&mut a) else {
        panic!("the source did not open with a challenge");
    };
    let wrong_role = Control::Attach {
        proof: proof(&key, &nonce, Role::Join),
        peer: nagare_proto::tree::PeerId(1),
        version: None,
    };
    a.write_all(&wrong_role.to_bytes()).unwrap();
    assert!(matches!(read_wire(&mut a), Control::Refused { .. }));
}

#[test]
fn join_writes_frames_to_stdout_for_a_consumer_bit_exact() {
    // tree join -o - | cat: the consumer gets the frames alone (log lines
    // go to stderr), byte for byte the source's pattern.
    let dir = Scratch::new("tree-stdout");
    let mut procs = Procs::default();
    let src_report = dir.path("source.json");
    let peer_report_path = dir.path("peer.json");
    let frames = 10;
    let addr = start_bars(&mut procs, "160x120", frames, 1, &src_report);
    let mut peer = nagare()
        .args(["tree", "join", &addr, "--listen", "127.0.0.1:0"])
        .args(["--timeout", "20", "-o", "-", "--report"])
        .arg(&peer_report_path)
        .env("NAGARE_TREE_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let frames_out = peer.stdout.take().unwrap();
    procs.push(peer);
    let mut consumer = std::process::Command::new("cat")
        .stdin(Stdio::from(frames_out))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    // Ends when the peer exits (the stream's end, or its --timeout).
    consumer
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert!(consumer.wait().unwrap().success());
    let ok = procs.wait_all(Duration::from_secs(30));
    assert!(ok.iter().all(|&o| o), "exit statuses: {ok:?}");
    let f = VideoFormat::new(160, 120, PixelFormat::Rgb24).unwrap();
    let p = Pattern::new(f);
    let mut want = vec![0u8; f.frame_bytes() * frames as usize];
    for (n, frame) in want.chunks_mut(f.frame_bytes()).enumerate() {
        p.render(n as u64, frame);
    }
    assert_eq!(got.len(), want.len(), "{} frames' bytes", frames);
    assert!(got == want, "the piped frames differ from the pattern");
    let r = peer_report(&peer_report_path);
    assert_eq!(r.fingerprints, source_report(&src_report).fingerprints);
    assert!(r.ended && r.lost == 0, "{r:?}");
}

/// A man in the middle on loopback: relays every connection to `to`,
/// message by message (every tree message is framed), and flips the last
/// byte of message `flip_at` (1-based) from the server on connection
/// `flip_conn` (0-based). Counts what kinds it saw from the server after
/// each handshake, so the test can tell whether any travelled in the
/// clear.
struct Mitm {
    addr: String,
    /// Kinds seen from the server after its handshake answer.
    kinds: std::sync::Arc<std::sync::Mutex<BTreeMap<u8, u64>>>,
}

impl Mitm {
    fn start(to: &str, flip_conn: usize, flip_at: usize) -> Mitm {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let kinds = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let (to, seen) = (to.to_owned(), kinds.clone());
        std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&to) else {
                    return;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || relay(c2, s2, None, None));
                let flip = (n == flip_conn).then_some(flip_at);
                let seen = seen.clone();
                std::thread::spawn(move || relay(server, client, flip, Some(seen)));
            }
        });
        Mitm { addr, kinds }
    }

    /// Messages of `kind` the server sent after a handshake answer.
    fn seen(&self, kind: u8) -> u64 {
        self.kinds.lock().unwrap().get(&kind).copied().unwrap_or(0)
    }
}

type Kinds = std::sync::Arc<std::sync::Mutex<BTreeMap<u8, u64>>>;

/// Copies framed messages from `from` to `to` until either side closes.
fn relay(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    flip: Option<usize>,
    kinds: Option<Kinds>,
) {
    use std::io::Write;
    let mut n = 0;
    let mut secured = false;
    loop {
        let mut header = [0u8; 4];
        if from.read_exact(&mut header).is_err() {
            break;
        }
        let len = u32::from_be_bytes(header) as usize;
        let mut msg = header.to_vec();
        msg.resize(4 + len.min(1 << 20), 0);
        if from.read_exact(&mut msg[4..]).is_err() {
            break;
        }
        n += 1;
        if let Some(k) = &kinds {
            if secured {
                *k.lock().unwrap().entry(msg[4]).or_default() += 1;
            }
            // The handshake answer (kind 10): everything after is sealed.
            secured |= msg[4] == 10;
        }
        if flip == Some(n) {
            let last = msg.len() - 1;
            msg[last] ^= 0x01;
        }
        if to.write_all(&msg).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_flipped_byte_on_an_encrypted_link_is_named_and_the_peer_recovers() {
    let dir = Scratch::new("treemitm");
    let mut procs = Procs::default();
    let src_report = dir.path("source.json");
    let frames = 60;
    let addr = start_bars(&mut procs, "320x240", frames, 2, &src_report);
    // The peer joins (connection 0) and attaches (connection 1) through
    // the man in the middle, which flips a byte in the 40th message the
    // source sends on the attach link: a record about a dozen frames into
    // the stream (after challenge, handshake answer and welcome, frames
    // take three records each).
    let mitm = Mitm::start(&addr, 1, 40);
    let r0 = dir.path("p0.json");
    let out0 = dir.path("p0.raw");
    join(
        &mut procs,
        &mitm.addr,
        &r0,
        &["--output", out0.to_str().unwrap()],
    );
    // A second peer, direct, so the stream starts once both are in; it
    // sits under the source too and is never touched.
    let r1 = dir.path("p1.json");
    join(&mut procs, &addr, &r1, &[]);
    let ok = procs.wait_all(Duration::from_secs(60));
    assert!(ok.iter().all(|&o| o), "a process failed: {ok:?}");

    let r = peer_report(&r0);
    assert!(
        r.link_errors
            .iter()
            .any(|e| e.contains("failed authentication (tampered, replayed or reordered)")),
        "the tampered record was not named: {r:?}"
    );
    assert!(r.reattaches >= 1, "never re-attached: {r:?}");
    assert!(r.ended && r.last == Some(frames - 1), "{r:?}");
    let truth: BTreeMap<u64, u64> = source_report(&src_report)
        .fingerprints
        .into_iter()
        .collect();
    for (n, h) in &r.fingerprints {
        assert_eq!(truth.get(n), Some(h), "frame {n} is not what was captured");
    }
    // Every frame the peer recorded is whole (and was decoded from
    // records that authenticated).
    let bytes = std::fs::metadata(&out0).unwrap().len();
    assert_eq!(bytes, r.frames * 320 * 240 * 3);
    // Nothing but sealed records crossed after the handshakes: no frame
    // chunk (kinds 16-18) or control message travelled in the clear.
    for kind in [2, 6, 7, 16, 17, 18] {
        assert_eq!(mitm.seen(kind), 0, "kind {kind} seen in the clear");
    }
    assert!(mitm.seen(11) > 0, "no sealed records seen");
    let clean = peer_report(&r1);
    assert!(clean.link_errors.is_empty(), "{clean:?}");
    assert_eq!(clean.last, Some(frames - 1));
}

/// Holds TCP connections to `addr` that send one byte of a handshake and
/// nothing more, as a trickler does.
struct Tricklers(Vec<std::net::TcpStream>);

impl Tricklers {
    fn open(addr: &str, n: usize, into: &mut Tricklers) {
        use std::io::Write;
        for _ in 0..n {
            // The source may already have evicted and closed older ones;
            // a refused connect is not this test's business.
            if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                let _ = s.write_all(&[0]);
                into.0.push(s);
            }
        }
    }

    /// How many the source has closed, reading each until it ends or
    /// `limit` passes.
    fn closed_by_source(&mut self, limit: Duration) -> usize {
        let end = Instant::now() + limit;
        let mut closed = 0;
        let mut buf = [0u8; 256];
        for s in &mut self.0 {
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                s.set_read_timeout(Some(left)).unwrap();
                match s.read(&mut buf) {
                    // The challenge, or whatever else comes before the end.
                    Ok(n) if n > 0 => continue,
                    Ok(_) => {
                        closed += 1;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        closed += 1;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        closed
    }
}

/// `peers` `tree join` processes started at once from 127.0.0.1, with
/// `tricklers` idle connections from the same address opened among them:
/// every peer must attach and record every frame, and every trickler
/// must be closed by the source.
fn burst(peers: usize, tricklers: usize) {
    let dir = Scratch::new(&format!("burst{peers}"));
    let mut procs = Procs::default();
    let src_report = dir.path("source.json");
    // 8 s of frames: the source is still running when every trickler
    // has had the handshake deadline (5 s), so what closes them is the
    // lobby, not the source's exit.
    let frames = 240u64;
    let addr = start_bars(&mut procs, "160x120", frames, peers as u32, &src_report);
    let mut held = Tricklers(Vec::new());
    // A third of the tricklers first, the rest among the joins.
    Tricklers::open(&addr, tricklers / 3, &mut held);
    let per_join = (tricklers - tricklers / 3).div_ceil(peers);
    for i in 0..peers {
        let c = nagare()
            .args(["tree", "join", &addr, "--listen", "127.0.0.1:0"])
            .args(["--timeout", "60", "--report"])
            .arg(dir.path(&format!("p{i}.json")))
            .env("NAGARE_TREE_KEY", KEY)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        procs.push(c);
        let left = tricklers.saturating_sub(held.0.len());
        Tricklers::open(&addr, per_join.min(left), &mut held);
    }
    assert!(held.0.len() >= tricklers * 9 / 10, "{}", held.0.len());
    // Evicted by newcomers, or expired after the handshake deadline (5 s):
    // none is left open while the source runs.
    let n = held.0.len();
    assert_eq!(held.closed_by_source(Duration::from_secs(6)), n);
    assert!(
        procs.0[0].try_wait().unwrap().is_none(),
        "the source ended before the tricklers were judged"
    );
    let ok = procs.wait_all(Duration::from_secs(120));
    assert!(
        ok.iter().all(|&o| o),
        "{} of {} processes failed (source first): {ok:?}",
        ok.iter().filter(|&&o| !o).count(),
        ok.len()
    );
    let truth = source_report(&src_report).fingerprints;
    assert_eq!(truth.len() as u64, frames);
    for i in 0..peers {
        let r = peer_report(&dir.path(&format!("p{i}.json")));
        assert!(r.ended, "peer {i}: {r:?}");
        assert_eq!(r.fingerprints, truth, "peer {i} recorded other frames");
    }
}

#[test]
fn bursts_of_30_then_100_peers_from_one_address_attach_while_300_tricklers_are_evicted() {
    burst(30, 300);
    burst(100, 300);
}
