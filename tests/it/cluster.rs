//! `nagare cluster` against real `nagare serve` nodes on 127.0.0.x: one
//! 256x128 uyvy422 25 fps raw file split 2SI into 4 stripes, each node
//! reading the same media directory (seed 000's shared storage), and
//! `nagare recv --stripes 4` putting the frames back together. Start,
//! failover and move run both ways: through serve's API, and over NMOS
//! IS-05 (`api = "nmos"`: each node's stripe senders, offered by the
//! clip's `[stripes]` sidecar table, activated at the epoch frame's TAI
//! instant).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nagare_api::cluster::{ClusterLog, ClusterStatus};
use nagare_api::serve::{StreamInfo, StreamList, StreamState};
use nagare_api::stripes::StripesReport;

use crate::common::{Running, Scratch, nagare, noise, parse_report, sigterm};
use crate::serve::harness::http;

const W: usize = 256;
const H: usize = 128;
const FRAME: usize = W * H * 2;
/// Frames in the source file: epoch frame f carries file frame f mod 7.
const FILE_FRAMES: usize = 7;
const TOKEN: &str = "node-b-token";

/// A base port with the next `n - 1` free as well (on 127.0.0.1).
fn consecutive_free_ports(n: u16) -> u16 {
    loop {
        let p = crate::common::free_udp_port();
        if p < 60000 && (1..n).all(|k| std::net::UdpSocket::bind(("127.0.0.1", p + k)).is_ok()) {
            return p;
        }
    }
}

/// How the controller drives the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// serve's own API (`POST /v1/streams`).
    Streams,
    /// NMOS IS-05 activations of the nodes' stripe senders.
    Nmos,
}

impl Api {
    /// The node's `api` key in cluster.toml.
    fn key(self) -> &'static str {
        match self {
            Api::Streams => "streams",
            Api::Nmos => "nmos",
        }
    }
}

/// The media directory, the serve nodes and the receiver's ports.
struct Bed {
    api: Api,
    s: Scratch,
    source: Vec<u8>,
    nodes: Vec<(String, Running, String)>,
    base: u16,
    dup: u16,
}

impl Bed {
    /// Media and `names.len()` serve nodes on 127.0.0.(20+i), driven
    /// through `api`; node `b` wants a token.
    fn new(tag: &str, names: &[&str], api: Api) -> Bed {
        let s = Scratch::new(&format!("{tag}-{}", api.key()));
        let media = s.path("media");
        let source = noise(FRAME * FILE_FRAMES, 10);
        write_media(&media, &source);
        let mut nodes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let ip = format!("127.0.0.{}", 20 + i);
            let token = (*name == "b").then_some(TOKEN);
            let (r, url) = serve_node(&media, &ip, token);
            nodes.push((name.to_string(), r, url));
        }
        let base = consecutive_free_ports(4);
        let dup = loop {
            // Both picks were free a moment ago; they must not overlap.
            let d = consecutive_free_ports(4);
            if d.abs_diff(base) >= 4 {
                break d;
            }
        };
        Bed {
            api,
            s,
            source,
            nodes,
            base,
            dup,
        }
    }

    /// Writes cluster.toml: `failover`, and per node its stripes and
    /// whether it is an alternate; `token` is what the file says for b.
    fn config(&self, failover: &str, layout: &[(&[usize], bool)], token: &str) -> String {
        self.config_with(failover, layout, token, "")
    }

    /// [`Bed::config`] with `extra` top-level lines.
    fn config_with(
        &self,
        failover: &str,
        layout: &[(&[usize], bool)],
        token: &str,
        extra: &str,
    ) -> String {
        let mut t = format!(
            "name = \"wall\"\nfailover = \"{failover}\"\npoll_ms = 100\ndead_after_ms = 400\n\
             {extra}\n[stream]\nsource = \"clip.yuv\"\nsize = \"256x128\"\npix_fmt = \"uyvy422\"\n\
             fps = \"25\"\nsplit = \"2si\"\nstripes = 4\npacket_size = 1200\n"
        );
        for k in 0..4 {
            t += &format!(
                "\n[[destination]]\nto = \"127.0.0.1:{}\"\ndup = \"127.0.0.1:{}\"\n",
                self.base + k,
                self.dup + k
            );
        }
        for ((name, _, url), (stripes, alternate)) in self.nodes.iter().zip(layout) {
            t += &format!(
                "\n[[node]]\nname = \"{name}\"\nurl = \"{url}\"\nstripes = {stripes:?}\nalternate = {alternate}\napi = \"{}\"\n",
                self.api.key()
            );
            if name == "b" {
                t += &format!("token = \"{token}\"\n");
            }
        }
        let path = self.s.path("cluster.toml");
        std::fs::write(&path, t).unwrap();
        path.to_str().unwrap().to_string()
    }

    /// `recv --stripes 4` for `frames` frames, with the second legs.
    fn recv(&self, frames: u64) -> Running {
        let mut cmd = nagare();
        cmd.args([
            "recv",
            "--stripes",
            "4",
            "--split",
            "2si",
            "--size",
            "256x128",
        ])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--fps",
            "25",
            "--timeout",
            "5",
            "--json",
        ])
        .args(["--listen", &format!("127.0.0.1:{}", self.base)])
        .args(["--dup", &format!("127.0.0.1:{}", self.dup)])
        .args(["--frames", &frames.to_string(), "-o"])
        .arg(self.s.path("out.yuv"));
        let mut r = Running::spawn(cmd);
        r.listening();
        r
    }

    /// UDP sockets on every destination port, so the legs' datagrams
    /// are taken (and counted as sent) without a receiver.
    fn sinks(&self) -> Vec<UdpSocket> {
        (0..4)
            .flat_map(|k| [self.base + k, self.dup + k])
            .map(|p| UdpSocket::bind(("127.0.0.1", p)).unwrap())
            .collect()
    }

    /// The stream table of node `i`, straight from its API.
    fn table(&self, i: usize) -> Vec<StreamInfo> {
        let addr: SocketAddr = self.nodes[i]
            .2
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let token = (self.nodes[i].0 == "b").then_some(TOKEN);
        let (status, text) = http(addr, "GET", "/v1/streams", None, token);
        assert_eq!(status, 200, "{text}");
        let list: StreamList = parse_report(&text);
        list.streams
    }

    fn cluster(&self, config: &str, args: &[&str]) -> std::process::Command {
        let mut c = nagare();
        c.args(["cluster", "--config", config]).args(args);
        c
    }

    fn start(&self, config: &str) -> (Running, u64) {
        let mut r = Running::spawn(self.cluster(config, &["start", "--json"]));
        let line = r.wait_for("at epoch frame ");
        let frame = line.rsplit(' ').next().unwrap().parse().unwrap();
        (r, frame)
    }

    fn kill(&mut self, name: &str) {
        let n = self.nodes.iter_mut().find(|n| n.0 == name).unwrap();
        n.1.child.kill().unwrap();
        let _ = n.1.child.wait();
    }

    fn status(&self, config: &str) -> (bool, ClusterStatus) {
        let out = self
            .cluster(config, &["status", "--json"])
            .output()
            .unwrap();
        let st: ClusterStatus = parse_report(&String::from_utf8_lossy(&out.stdout));
        (out.status.success(), st)
    }

    /// The recorded frames as file frame indices (panics on a frame that
    /// is no file frame: a torn or misaligned reassembly).
    fn recorded(&self) -> Vec<usize> {
        let out = std::fs::read(self.s.path("out.yuv")).unwrap();
        assert_eq!(out.len() % FRAME, 0);
        out.chunks_exact(FRAME)
            .enumerate()
            .map(|(i, f)| {
                (0..FILE_FRAMES)
                    .find(|&k| &self.source[k * FRAME..(k + 1) * FRAME] == f)
                    .unwrap_or_else(|| panic!("recorded frame {i} is not a frame of the source"))
            })
            .collect()
    }
}

/// Writes the raw clip and its sidecar into `media`; the sidecar offers
/// the cluster's stripes as IS-05 senders (the same split, count and
/// packet size as cluster.toml's [stream]).
fn write_media(media: &std::path::Path, source: &[u8]) {
    std::fs::create_dir_all(media).unwrap();
    std::fs::write(media.join("clip.yuv"), source).unwrap();
    std::fs::write(
        media.join("clip.yuv.toml"),
        "size = \"256x128\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n\
         [stripes]\nsplit = \"2si\"\ncount = 4\npacket_size = 1200\n",
    )
    .unwrap();
}

/// A serve node of `media` on `ip`; its API URL.
fn serve_node(media: &std::path::Path, ip: &str, token: Option<&str>) -> (Running, String) {
    let mut cmd = nagare();
    cmd.args(["serve", "--pacers", "1", "--media"])
        .arg(media)
        .args(["--http", &format!("{ip}:0"), "--rtsp", &format!("{ip}:0")]);
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    let mut r = Running::spawn(cmd);
    let line = r.wait_for("http listening on ");
    let addr = line.rsplit("listening on ").next().unwrap().trim();
    let url = format!("http://{addr}");
    (r, url)
}

impl Drop for Bed {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.1.child.kill();
            let _ = n.1.child.wait();
        }
    }
}

fn finish_recv(r: Running) -> StripesReport {
    let (status, stdout, err) = r.finish();
    assert!(status.success(), "{status}: {stdout}\n{err}");
    parse_report(&stdout)
}

/// The receiver's report, showing the controller's log if it failed.
fn finish_recv_or(recv: Running, start: Running) -> (StripesReport, Running) {
    let (status, stdout, err) = recv.finish();
    if !status.success() {
        let (_, log) = stop_start(start);
        panic!("{status}: {stdout}\n{err}\n{log}");
    }
    (parse_report(&stdout), start)
}

fn stop_start(r: Running) -> (ClusterLog, String) {
    sigterm(&r.child);
    let (_, stdout, err) = r.finish();
    eprintln!("cluster start said:\n{err}");
    (parse_report(&stdout), err)
}

#[test]
fn four_nodes_send_one_frame_byte_identical_on_one_timestamp() {
    four_nodes_send_one_frame(Api::Streams);
}

#[test]
fn four_nodes_send_one_frame_byte_identical_on_one_timestamp_over_is05() {
    four_nodes_send_one_frame(Api::Nmos);
}

fn four_nodes_send_one_frame(api: Api) {
    let bed = Bed::new("cluster-start", &["a", "b", "c", "d"], api);
    let one = |k: usize| -> (&'static [usize], bool) {
        const S: [&[usize]; 4] = [&[0], &[1], &[2], &[3]];
        (S[k], false)
    };
    let config = bed.config("manual", &[one(0), one(1), one(2), one(3)], TOKEN);
    let recv = bed.recv(40);
    let (start, epoch_frame) = bed.start(&config);
    let rep = finish_recv(recv);
    assert!(rep.all_complete, "{rep:#?}");
    assert_eq!(rep.frames_complete, 40);
    // All stripes of a frame carry one RTP timestamp, that of its epoch
    // frame (90 kHz, 3600 ticks a frame at 25 fps).
    let ts = (epoch_frame.wrapping_mul(3600) & 0xffff_ffff) as u32;
    for s in &rep.per_stripe {
        assert_eq!(s.first_timestamp, Some(ts), "stripe {}", s.stripe);
        assert_eq!(s.packets_lost, 0);
    }
    let frames = bed.recorded();
    assert_eq!(frames.len(), 40);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(*f, (epoch_frame as usize + i) % FILE_FRAMES, "frame {i}");
    }
    let (ok, st) = bed.status(&config);
    assert!(ok, "{st:#?}");
    for n in &st.nodes {
        assert_eq!(n.legs.len(), 1, "{n:#?}");
        assert!(n.rate_bps > 0 && n.legs[0].packets > 0, "{n:#?}");
        assert!(n.clock_offset_ns.is_some() && !n.clock_warning, "{n:#?}");
    }
    let (log, _) = stop_start(start);
    assert_eq!(log.epoch_frame, Some(epoch_frame));
    assert!(log.failed.is_empty(), "{log:#?}");
    // Stopped: no leg is left on any node.
    let (_, st) = bed.status(&config);
    assert!(st.nodes.iter().all(|n| n.legs.is_empty()), "{st:#?}");
}

const A: &[usize] = &[0, 1];
const B: &[usize] = &[2, 3];
const ALL: &[usize] = &[0, 1, 2, 3];

#[test]
fn a_node_killed_with_a_hot_standby_loses_no_frame() {
    hot_failover(Api::Streams);
}

#[test]
fn a_node_killed_with_a_hot_standby_loses_no_frame_over_is05() {
    hot_failover(Api::Nmos);
}

fn hot_failover(api: Api) {
    let mut bed = Bed::new("cluster-hot", &["a", "b", "spare"], api);
    let config = bed.config("hot", &[(A, false), (B, false), (ALL, true)], TOKEN);
    let recv = bed.recv(100);
    let (mut start, _) = bed.start(&config);
    start.wait_for("node spare: sending stripe 1");
    bed.kill("a");
    start.wait_for("stripe 1: hot failover from node a to node spare");
    let rep = finish_recv(recv);
    assert!(rep.all_complete, "{rep:#?}");
    assert_eq!(rep.frames_complete, 100);
    for s in &rep.per_stripe {
        assert_eq!((s.packets_lost, s.unrecovered), (0, 0), "{s:#?}");
    }
    // Node a's legs stopped mid-stream; the standby's legs carried on.
    let s0 = &rep.per_stripe[0];
    assert!(s0.legs[0].received < s0.legs[1].received, "{s0:#?}");
    let (log, err) = stop_start(start);
    assert_eq!(log.failed, vec!["a".to_string()], "{err}");
    assert!(err.contains("node a: failed: no answer"), "{err}");
}

#[test]
fn cold_failover_loses_a_bounded_number_of_frames() {
    cold_failover(Api::Streams);
}

#[test]
fn cold_failover_loses_a_bounded_number_of_frames_over_is05() {
    cold_failover(Api::Nmos);
}

fn cold_failover(api: Api) {
    let mut bed = Bed::new("cluster-cold", &["a", "b", "spare"], api);
    let config = bed.config("cold", &[(A, false), (B, false), (&[], true)], TOKEN);
    let recv = bed.recv(125);
    let (mut start, _) = bed.start(&config);
    start.wait_for("node b: sending stripe 3");
    bed.kill("a");
    start.wait_for("stripe 1: cold failover from node a to node spare");
    // recv exits 1: frames were incomplete.
    let (status, stdout, err) = recv.finish();
    assert_eq!(status.code(), Some(1), "{err}");
    let rep: StripesReport = parse_report(&stdout);
    let lost = rep.frames_incomplete.count + rep.frames_lost.count;
    eprintln!(
        "cold failover: {lost} of 125 frames lost ({} incomplete, {} lost whole)",
        rep.frames_incomplete.count, rep.frames_lost.count
    );
    // Dead after 400 ms, polled every 100 ms, a 120 ms start lead: about
    // 16 frames at 25 fps; allow a loaded machine three times that.
    assert!(lost > 0 && lost <= 50, "{rep:#?}");
    assert_eq!(rep.frames_complete + lost, 125);
    // Only the failed node's stripes miss frames.
    for f in &rep.failures {
        assert!(
            f.missing.iter().chain(&f.incomplete).all(|k| A.contains(k)),
            "{f:#?}"
        );
    }
    let (log, _) = stop_start(start);
    assert_eq!(log.senders[0], vec!["spare".to_string()]);
}

#[test]
fn a_stripe_moves_to_another_node_under_load_without_losing_a_frame() {
    hitless_move(Api::Streams);
}

#[test]
fn a_stripe_moves_to_another_node_under_load_without_losing_a_frame_over_is05() {
    hitless_move(Api::Nmos);
}

fn hitless_move(api: Api) {
    let bed = Bed::new("cluster-move", &["a", "b", "spare"], api);
    let config = bed.config("manual", &[(A, false), (B, false), (&[], true)], TOKEN);
    let recv = bed.recv(100);
    let (mut start, _) = bed.start(&config);
    start.wait_for("node b: sending stripe 3");
    let out = bed
        .cluster(&config, &["move", "1", "spare", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let log: ClusterLog = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert!(
        log.events
            .contains(&"stripe 1: moved from node a to node spare".to_string()),
        "{log:#?}"
    );
    assert_eq!(log.senders[1], vec!["spare".to_string()]);
    let (rep, start) = finish_recv_or(recv, start);
    assert!(rep.all_complete, "{rep:#?}");
    assert_eq!(rep.frames_complete, 100);
    let s1 = &rep.per_stripe[1];
    assert_eq!((s1.packets_lost, s1.unrecovered), (0, 0), "{s1:#?}");
    // Both legs carried the stripe for a while.
    assert!(
        s1.legs[0].received > 0 && s1.legs[1].received > 0,
        "{s1:#?}"
    );
    let (_, st) = bed.status(&config);
    assert_eq!(st.senders[1], vec!["spare".to_string()], "{st:#?}");
    stop_start(start);
}

#[test]
fn a_wrong_token_is_named_by_node() {
    let bed = Bed::new("cluster-token", &["a", "b"], Api::Streams);
    let config = bed.config("manual", &[(A, false), (B, false)], "not-the-token");
    let (ok, st) = bed.status(&config);
    assert!(!ok);
    let b = &st.nodes[1];
    assert!(!b.ok);
    let e = b.error.as_deref().unwrap_or("");
    assert!(e.starts_with("401 wrong token"), "{st:#?}");
    assert!(st.nodes[0].ok, "{st:#?}");
    let text = bed.cluster(&config, &["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("node b: 401 wrong token"), "{text}");
    // `start` names the refusing node and leaves its stripes unsent;
    // each decision is a log event, here one JSON object a line (a global
    // flag after the verb).
    let args = ["start", "--json", "--log-format", "json"];
    let mut start = Running::spawn(bed.cluster(&config, &args));
    let line = start.wait_for("node b: failed: refused: 401 wrong token");
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (&event["level"], &event["decision"], &event["node"]),
        (&"WARN".into(), &"node-failed".into(), &"b".into()),
        "{line}"
    );
    let (log, _) = stop_start(start);
    assert_eq!(log.failed, vec!["b".to_string()]);
    assert!(log.senders[2].is_empty() && log.senders[0] == vec!["a".to_string()]);
}

/// Three namespaces made for one test: the serve node (`s0`, 10.1.0.2),
/// a pimd router (`r0` 10.1.0.1, `r1` 10.2.0.1; itself the static
/// rendezvous point for 224.0.0.0/4) and a receiver (`c0`, 10.2.0.2);
/// removed on drop.
struct RoutedNet {
    ns: [String; 3],
    pimd: Option<Running>,
    _dir: Scratch,
}

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// The source's address in the node namespace.
const ROUTED_SOURCE: &str = "10.1.0.2";

impl RoutedNet {
    /// The namespaces, their veths and a pimd that knows its RP (which
    /// takes pimd 2.3 about 15 s, see `await_rp`).
    fn new() -> Option<RoutedNet> {
        if !crate::common::require("pimd") {
            return None;
        }
        let id = std::process::id();
        let ns = [
            format!("nagare-ms-{id}"),
            format!("nagare-mr-{id}"),
            format!("nagare-mc-{id}"),
        ];
        if !ip(&["netns", "add", &ns[0]]) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root with iproute2"
            );
            eprintln!("skipping: cannot create a network namespace (not root?)");
            return None;
        }
        let dir = Scratch::new("cluster-pimd");
        let mut net = RoutedNet {
            ns: ns.clone(),
            pimd: None,
            _dir: dir,
        };
        let [s, r, c] = &ns;
        for n in [r, c] {
            assert!(ip(&["netns", "add", n]));
        }
        for a in &Self::links(s, r, c) {
            assert!(ip(a), "ip {a:?} failed");
        }
        let conf = net._dir.path("pimd.conf");
        std::fs::write(
            &conf,
            "phyint r0 enable\nphyint r1 enable\nrp-address 10.1.0.1 224.0.0.0/4\nspt-threshold infinity\n",
        )
        .unwrap();
        // Foreground, logging to stderr: `rp` prints the RP set every few
        // seconds, `groups` each join and kernel route (shown when a wait
        // below fails).
        let mut pimd = std::process::Command::new("ip");
        pimd.args(["netns", "exec", r, "pimd", "-f", "--debug=rp,groups", "-c"])
            .arg(&conf);
        net.pimd = Some(Running::spawn(pimd));
        crate::common::wait_until("pimd's VIFs", std::time::Duration::from_secs(10), || {
            (net.vif("r1").is_some()).then_some(())
        });
        net.await_rp();
        Some(net)
    }

    /// The `ip` steps that wire source — router — receiver.
    fn links<'a>(s: &'a str, r: &'a str, c: &'a str) -> Vec<Vec<&'a str>> {
        vec![
            vec![
                "link", "add", "s0", "netns", s, "type", "veth", "peer", "name", "r0", "netns", r,
            ],
            vec![
                "link", "add", "c0", "netns", c, "type", "veth", "peer", "name", "r1", "netns", r,
            ],
            vec!["-n", s, "addr", "add", "10.1.0.2/24", "dev", "s0"],
            vec!["-n", r, "addr", "add", "10.1.0.1/24", "dev", "r0"],
            vec!["-n", r, "addr", "add", "10.2.0.1/24", "dev", "r1"],
            vec!["-n", c, "addr", "add", "10.2.0.2/24", "dev", "c0"],
            vec!["-n", s, "link", "set", "s0", "up"],
            vec!["-n", r, "link", "set", "r0", "up"],
            vec!["-n", r, "link", "set", "r1", "up"],
            vec!["-n", c, "link", "set", "c0", "up"],
            vec!["-n", s, "link", "set", "lo", "up"],
            vec!["-n", c, "link", "set", "lo", "up"],
            vec!["-n", s, "route", "add", "default", "via", "10.1.0.1"],
            vec!["-n", c, "route", "add", "default", "via", "10.2.0.1"],
            vec!["netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
        ]
    }

    /// Waits until pimd has taken its static RP. pimd 2.3 holds every
    /// `rp-address` back until it has run 15 s (main.c adds them once
    /// `now > boottime + 15`); until then it has no RP for the group, so
    /// it builds no route for a join and forwards nothing, which is what
    /// made this test flaky. Its RP-set dump then lists "10.1.0.1 ... 224/4".
    fn await_rp(&mut self) {
        let pimd = self.pimd.as_mut().unwrap();
        let line = pimd.wait_for_within("224/4", std::time::Duration::from_secs(60));
        assert!(line.starts_with("10.1.0.1 "), "unexpected RP: {line}");
    }

    /// One serve node in the node namespace sending 4 stripes of a noise
    /// clip to `group` (ports 5000..5003) through `nagare cluster start`:
    /// the clip, the node, the controller and its config (which names the
    /// receiver's interface for `recv --cluster`).
    fn send(&self, s: &Scratch, group: &str) -> (Vec<u8>, Running, Running, std::path::PathBuf) {
        let media = s.path("media");
        std::fs::create_dir_all(&media).unwrap();
        let source = noise(FRAME * FILE_FRAMES, 11);
        std::fs::write(media.join("clip.yuv"), &source).unwrap();
        std::fs::write(
            media.join("clip.yuv.toml"),
            "size = \"256x128\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n",
        )
        .unwrap();
        let mut serve = self.nagare(0);
        serve
            .args([
                "serve",
                "--pacers",
                "1",
                "--allow",
                "239.0.0.0/8",
                "--media",
            ])
            .arg(&media)
            .args(["--http", "127.0.0.1:0", "--rtsp", "127.0.0.1:0"]);
        let mut node = Running::spawn(serve);
        let line = node.wait_for("http listening on ");
        let url = format!(
            "http://{}",
            line.rsplit("listening on ").next().unwrap().trim()
        );
        let mut t = String::from(
            "failover = \"manual\"\npoll_ms = 100\ndead_after_ms = 1000\n[stream]\n\
         source = \"clip.yuv\"\nsize = \"256x128\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n\
         split = \"2si\"\nstripes = 4\npacket_size = 1200\n",
        );
        for k in 0..4 {
            t += &format!(
                "[[destination]]\nto = \"{group}:{}\"\ninterface = \"{ROUTED_SOURCE}\"\nttl = 8\n",
                5000 + k
            );
        }
        t += &format!("[[node]]\nname = \"n\"\nurl = \"{url}\"\nstripes = [0, 1, 2, 3]\n");
        // The receiver's interface, for `recv --cluster` (the destinations'
        // is the node's, on the other side of the router).
        t += "[receiver]\ninterface = \"10.2.0.2\"\n";
        let config = s.path("cluster.toml");
        std::fs::write(&config, t).unwrap();
        let mut start = self.nagare(0);
        start
            .args(["cluster", "--config"])
            .arg(&config)
            .args(["start", "--json"]);
        let mut start = Running::spawn(start);
        start.wait_for("node n: sending stripe 3");
        (source, node, start, config)
    }

    /// A command inside namespace `i` (0 node, 2 receiver).
    fn nagare(&self, i: usize) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], env!("CARGO_BIN_EXE_nagare")]);
        c
    }

    /// The router's (packets in, packets out) of multicast it routed on
    /// `vif`, from the kernel's `/proc/net/ip_mr_vif`.
    fn vif(&self, name: &str) -> Option<(u64, u64)> {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.ns[1], "cat", "/proc/net/ip_mr_vif"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines().find_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c.get(1) == Some(&name))
                .then(|| (c[3].parse().unwrap_or(0), c[5].parse().unwrap_or(0)))
        })
    }

    /// The outgoing interfaces of the kernel's resolved (source, `group`)
    /// route in the router (`ip mroute`), or None while it has none.
    fn oifs(&self, group: &str) -> Option<Vec<String>> {
        let out = std::process::Command::new("ip")
            .args(["-n", &self.ns[1], "mroute", "show"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let key = format!("({ROUTED_SOURCE},{group})");
        let line = text
            .lines()
            .find(|l| l.starts_with(&key) && l.contains("State: resolved"))?;
        let after = line.split("Oifs:").nth(1).unwrap_or("");
        let list = after.split("State:").next().unwrap_or("");
        Some(list.split_whitespace().map(str::to_string).collect())
    }
}

impl Drop for RoutedNet {
    fn drop(&mut self) {
        if let Some(mut p) = self.pimd.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Issue 10 item 4, seed 000's problem 2: one serve node sends 4 stripes
/// to a multicast group through a pimd router. With nobody joined the
/// router holds a resolved route for them but forwards none; a receiver's
/// (IGMPv3) join then brings them across, whole and byte-identical.
#[test]
fn stripes_cross_a_pimd_router_only_after_a_receiver_joins() {
    const GROUP: &str = "239.1.1.1";
    let Some(net) = RoutedNet::new() else { return };
    let s = Scratch::new("cluster-routed");
    let (source, node, start, config) = net.send(&s, GROUP);
    // Nobody joined: the router resolves the stripes' route (in from the
    // node's side) and forwards a thousand packets of them nowhere.
    let secs = std::time::Duration::from_secs;
    let oifs =
        crate::common::wait_until("pimd's route for the stripes", secs(10), || net.oifs(GROUP));
    assert!(!oifs.contains(&"r1".to_string()), "{oifs:?}");
    let (before, _) = net.vif("r0").unwrap();
    crate::common::wait_until("stripes reaching the router", secs(10), || {
        (net.vif("r0").unwrap().0 > before + 1000).then_some(())
    });
    assert_eq!(net.vif("r1").unwrap().1, 0, "forwarded with nobody joined");
    assert!(!net.oifs(GROUP).unwrap().contains(&"r1".to_string()));
    // A receiver joins the flowing group: the router brings it across.
    let mut recv = net.nagare(2);
    recv.args(["recv", "--cluster"])
        .arg(&config)
        .args(["--timeout", "5", "--json", "--frames", "30", "-o"])
        .arg(s.path("out.yuv"));
    let (_, stdout, err) = Running::spawn(recv).finish();
    let rep: StripesReport = parse_report(&stdout);
    // The first frame may be cut by the join; every later one is whole.
    assert!(rep.frames_complete >= 29, "{rep:#?}\n{err}");
    // Joined on the config's [receiver] interface, not the default route.
    assert!(!err.contains("default-route interface"), "{err}");
    let out = std::fs::read(s.path("out.yuv")).unwrap();
    assert!(out.len() >= 29 * FRAME);
    for f in out.chunks_exact(FRAME) {
        assert!(
            source.chunks_exact(FRAME).any(|g| g == f),
            "a recorded frame is no source frame"
        );
    }
    assert!(net.vif("r1").unwrap().1 > 0);
    assert!(net.oifs(GROUP).unwrap().contains(&"r1".to_string()));
    stop_start(start);
    sigterm(&node.child);
    let _ = node.finish();
}

/// Sends SIGINT (Ctrl-C) to `child`.
fn sigint(child: &std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    kill(pid, Signal::SIGINT).expect("sending SIGINT");
}

/// Which of a node's answers the proxy holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Late {
    /// The answer to the next `POST /v1/streams` only.
    NextPost,
    /// Every answer.
    All,
}

/// How long a late answer is held back: more than the controller's
/// first-try timeout (300 ms in these tests), less than its second try's.
const LATE: Duration = Duration::from_millis(450);

/// A TCP proxy in front of a node's API that passes requests on at once
/// (the node acts on them) and holds the node's answers back by [`LATE`],
/// as a node that answers late does. One thread per connection, each
/// ending when either side closes; the accepting thread ends on drop.
struct SlowProxy {
    addr: SocketAddr,
    late: Arc<Mutex<Option<Late>>>,
    done: Arc<AtomicBool>,
}

impl SlowProxy {
    fn new(node_url: &str, late: Late) -> SlowProxy {
        let upstream: SocketAddr = node_url.trim_start_matches("http://").parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let late = Arc::new(Mutex::new(Some(late)));
        let done = Arc::new(AtomicBool::new(false));
        let (l, d) = (late.clone(), done.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if d.load(Ordering::Acquire) {
                    break;
                }
                let Ok(client) = client else { continue };
                let l = l.clone();
                std::thread::spawn(move || relay(client, upstream, &l));
            }
        });
        SlowProxy { addr, late, done }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, late: Option<Late>) {
        *self.late.lock().unwrap() = late;
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Carries one connection: the request to the node at once, its answer
/// after [`LATE`] when the proxy's setting says so.
fn relay(mut client: TcpStream, upstream: SocketAddr, late: &Mutex<Option<Late>>) {
    let Ok(mut up) = TcpStream::connect(upstream) else {
        return;
    };
    for s in [&client, &up] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let mut buf = vec![0u8; 65536];
    let Ok(n) = client.read(&mut buf) else { return };
    let post = buf[..n].starts_with(b"POST /v1/streams ");
    let hold = {
        let mut l = late.lock().unwrap();
        match *l {
            Some(Late::All) => true,
            Some(Late::NextPost) if post => {
                *l = None;
                true
            }
            _ => false,
        }
    };
    if up.write_all(&buf[..n]).is_err() {
        return;
    }
    let (Ok(mut from_client), Ok(mut to_up)) = (client.try_clone(), up.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_up);
        let _ = to_up.shutdown(std::net::Shutdown::Write);
    });
    if hold {
        // The fault under test: the node has acted, its answer comes late.
        std::thread::sleep(LATE);
    }
    let _ = std::io::copy(&mut up, &mut client);
}

/// Keys and states of a node's legs, by stripe label.
fn legs_of(table: &[StreamInfo]) -> Vec<(String, Option<String>, StreamState)> {
    let mut legs: Vec<_> = table
        .iter()
        .map(|s| {
            (
                s.label.clone().unwrap_or_default(),
                s.idempotency_key.clone(),
                s.state,
            )
        })
        .collect();
    legs.sort_by(|a, b| a.0.cmp(&b.0));
    legs
}

/// #22 item 5: a node that answers after the controller gave up still
/// acted. The unanswered send is followed up (the leg is found, not sent
/// twice: one keyed leg per stripe); on Ctrl-C the halts of a node that
/// now answers everything late are tried again with more patience until
/// it confirms; and `stop` from another process does the same. No leg
/// is left on any node.
#[test]
fn a_node_that_answers_late_keeps_one_leg_and_none_after_stop() {
    let mut bed = Bed::new("cluster-late", &["a", "b"], Api::Streams);
    let _sinks = bed.sinks();
    let proxy = SlowProxy::new(&bed.nodes[0].2, Late::NextPost);
    let direct = std::mem::replace(&mut bed.nodes[0].2, proxy.url());
    let config = bed.config_with(
        "manual",
        &[(A, false), (B, false)],
        TOKEN,
        "timeout_ms = 300",
    );
    bed.nodes[0].2 = direct;
    let (mut start, epoch) = bed.start(&config);
    start.wait_for("node a: no answer to sending stripe 0");
    start.wait_for("node a: sending stripe 0");
    start.wait_for("node a: sending stripe 1");
    let want = |k: usize| {
        (
            format!("wall/stripe {k}"),
            Some(format!("wall/stripe {k}@{epoch}")),
            StreamState::Playing,
        )
    };
    assert_eq!(legs_of(&bed.table(0)), vec![want(0), want(1)]);
    // Every answer of a now comes late; Ctrl-C.
    proxy.set(Some(Late::All));
    sigint(&start.child);
    let (status, out, err) = start.finish();
    eprintln!("cluster start said:\n{err}");
    let log: ClusterLog = parse_report(&out);
    assert!(log.not_halted.is_empty(), "{log:#?}\n{err}");
    let mut halted: Vec<(String, usize)> = log
        .halted
        .iter()
        .map(|h| (h.node.clone(), h.stripe))
        .collect();
    halted.sort();
    let names = |n: &str, k: &[usize]| k.iter().map(|&k| (n.to_string(), k)).collect::<Vec<_>>();
    assert_eq!(halted, [names("a", A), names("b", B)].concat(), "{err}");
    // a may have been declared failed (its polls came late) before the
    // signal: then and only then start exits 1.
    assert_eq!(status.success(), log.failed.is_empty(), "{err}");
    assert!(bed.table(0).is_empty() && bed.table(1).is_empty());

    // Legs left by somebody (say `start --leave`), removed by `stop`
    // through the same late node.
    let addr: SocketAddr = bed.nodes[0]
        .2
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    for k in A {
        let body = format!(
            r#"{{"source": "pattern:bars", "destinations": ["127.0.0.1:{}"], "label": "wall/stripe {k}"}}"#,
            bed.base + *k as u16
        );
        let (code, text) = http(addr, "POST", "/v1/streams", Some(&body), None);
        assert_eq!(code, 201, "{text}");
    }
    let out = bed.cluster(&config, &["stop", "--json"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("cluster stop said:\n{err}");
    assert!(out.status.success(), "{err}");
    let log: ClusterLog = parse_report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(log.halted.len(), 2, "{log:#?}");
    assert!(bed.table(0).is_empty(), "{err}");
}

/// #22: a leg the node fails (here: its source file is gone from the
/// node's storage) is refused by the node with its reason (serve checks
/// the file before it starts a stream, and keeps nothing of it); that
/// fails the node and makes `start` exit 1; on
/// Ctrl-C the text report says what was halted (#24), and no node keeps a
/// leg.
#[test]
fn a_failed_leg_is_named_start_exits_1_and_ctrl_c_removes_it() {
    let mut bed = Bed::new("cluster-failed", &["a"], Api::Streams);
    // c reads its own copy of the clip, which disappears once c is up.
    let own = bed.s.path("media-b");
    write_media(&own, &bed.source);
    let (run, url) = serve_node(&own, "127.0.0.21", None);
    bed.nodes.push(("c".into(), run, url));
    std::fs::remove_file(own.join("clip.yuv")).unwrap();
    let _sinks = bed.sinks();
    let config = bed.config("manual", &[(A, false), (B, false)], TOKEN);
    let mut start = Running::spawn(bed.cluster(&config, &["start"]));
    let line = start.wait_for("node c: failed: ");
    assert!(
        line.contains("the stream cannot start: opening 'clip.yuv': No such file"),
        "{line}"
    );
    start.wait_for("node a: sending stripe 1");
    let (ok, st) = bed.status(&config);
    assert!(ok, "{st:#?}");
    assert!(st.nodes[1].legs.is_empty(), "{:#?}", st.nodes[1]);
    sigint(&start.child);
    let (status, out, err) = start.finish();
    eprintln!("cluster start printed:\n{out}\nand said:\n{err}");
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "cluster wall: stopped", "{out}");
    for k in 0..4 {
        let by = if k < 2 { "a" } else { "nobody" };
        assert!(
            lines.contains(&format!("stripe {k}: was sent by {by}").as_str()),
            "{out}"
        );
    }
    assert!(out.contains("node c: failed: "), "{out}");
    for k in 0..2 {
        let halted = lines.iter().any(|l| {
            l.starts_with(&format!("node a: halted stripe {k} (stream "))
                && l.ends_with(", playing)")
        });
        assert!(halted, "node a stripe {k}:\n{out}");
    }
    assert!(!out.contains("NOT CONFIRMED"), "{out}");
    assert!(bed.table(0).is_empty() && bed.table(1).is_empty());
}

/// #24: under hot standby a stripe moves to the spare that already sends
/// it (no new leg; a warning that no standby is left), a move that makes
/// no sense is refused naming the node by its name, a move to another
/// node takes the leaving leg's address so the two legs stay on two
/// paths, and `move` prints only what changed.
#[test]
fn moves_under_hot_standby_name_nodes_keep_paths_apart_and_print_changes() {
    let bed = Bed::new("cluster-hot-move", &["a", "b", "spare", "c"], Api::Streams);
    let _sinks = bed.sinks();
    let layout: [(&[usize], bool); 4] = [(A, false), (B, false), (ALL, true), (&[], true)];
    let config = bed.config("hot", &layout, TOKEN);
    let (mut start, _) = bed.start(&config);
    start.wait_for_all(&["node b: sending stripe 3", "node spare: sending stripe 1"]);
    let moved = |stripe: &str, node: &str| {
        let out = bed
            .cluster(&config, &["move", stripe, node])
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };

    let (ok, out, err) = moved("0", "spare");
    assert!(ok, "{err}");
    assert_eq!(out, "stripe 0: sent by spare (was a, spare)\n");
    assert!(
        err.contains("stripe 0: moved from node a to node spare"),
        "{err}"
    );
    assert!(
        err.contains("stripe 0: node spare sends it alone now: no hot standby is left for it"),
        "{err}"
    );
    assert!(
        !err.contains("sending stripe"),
        "running legs re-printed:\n{err}"
    );

    let (ok, _, err) = moved("0", "spare");
    assert!(!ok);
    assert!(
        err.contains(
            "cannot move stripe 0 to node spare: node spare already sends stripe 0 and no \
             other node does: nothing to move"
        ),
        "{err}"
    );

    let (ok, out, err) = moved("1", "c");
    assert!(ok, "{err}");
    assert_eq!(out, "stripe 1: sent by spare, c (was a, spare)\n");
    let news: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("nagare cluster: "))
        .collect();
    assert_eq!(
        news,
        [
            "nagare cluster: node c: sending stripe 1",
            "nagare cluster: stripe 1: moved from node a to node c"
        ],
        "{err}"
    );
    let (_, st) = bed.status(&config);
    assert_eq!(st.senders[1], ["spare", "c"], "{st:#?}");
    let dest = |node: usize| {
        let l = st.nodes[node].legs.iter().find(|l| l.stripe == 1).unwrap();
        l.destination.clone()
    };
    assert_eq!(dest(2), format!("127.0.0.1:{}", bed.dup + 1));
    assert_eq!(dest(3), format!("127.0.0.1:{}", bed.base + 1));
    stop_start(start);
}
