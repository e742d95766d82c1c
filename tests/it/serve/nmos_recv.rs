//! `nagare recv --nmos`, an NMOS node with one IS-05 receiver: every
//! Node API and Connection API answer validated against the official
//! schemas (shipped in the `nmos` crate), and a controller's IS-05
//! activations connecting serve's path sender to it: frames arrive
//! byte-identical, the sender's `master_enable: false` stops the stream
//! and the receiver's ends the receive, its recording flushed.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{FRAME_BYTES, FRAMES, Media, Serve, assert_clip_frames, http};
use super::is05::{sender_id, start_sender, stop_sender};
use crate::common::{Running, free_udp_port, nagare, sigterm, wait_for_file_size};
use crate::nmos_schema::{NmosApi, validate_node_api};

const C: &str = "/x-nmos/connection/v1.1";
const N: &str = "/x-nmos/node/v1.3";

/// A running `recv --nmos` on an ephemeral loopback port.
struct RecvNode {
    run: Running,
    http: SocketAddr,
}

impl RecvNode {
    fn start(extra: &[&str]) -> RecvNode {
        let mut cmd = nagare();
        cmd.args(["recv", "--nmos", "--nmos-http", "127.0.0.1:0"])
            .args(extra);
        let mut run = Running::spawn(cmd);
        let line = run.wait_for("http listening on ");
        let http = line
            .rsplit("http listening on ")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        RecvNode { run, http }
    }

    fn get(&self, path: &str) -> Value {
        self.get_with_token(None, path)
    }

    fn get_with(&self, token: &str, path: &str) -> Value {
        self.get_with_token(Some(token), path)
    }

    fn get_with_token(&self, token: Option<&str>, path: &str) -> Value {
        let (status, body) = http(self.http, "GET", path, None, token);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// The receiver's `/staged` or `/active` under `base`, validated.
    fn receiver_json(&self, base: &str, which: &str) -> Value {
        let path = format!("{base}/{which}");
        self.call("GET", &path, None, 200, "receiver-response-schema.json")
    }

    /// The receiver's id, from the Node API.
    fn receiver_id(&self) -> String {
        self.get(&format!("{N}/receivers/"))[0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Stops it as a signal does; its exit status and stderr.
    fn stop(self) -> (std::process::ExitStatus, String) {
        sigterm(&self.run.child);
        let (status, _, stderr) = self.run.finish();
        (status, stderr)
    }
}

impl NmosApi for RecvNode {
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(self.http, method, path, body, None)
    }
}

/// A unicast ST 2110-20 SDP to 127.0.0.1:`port`.
fn unicast_sdp(port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=test\r\nt=0 0\r\nm=video {port} RTP/AVP 96\r\n\
         c=IN IP4 127.0.0.1\r\na=rtpmap:96 raw/90000\r\n\
         a=fmtp:96 sampling=YCbCr-4:2:2; width=320; height=240; depth=8; exactframerate=25\r\n"
    )
}

/// PATCHes serve's sender at `sender_base` with `setting` (its
/// `master_enable` and `transport_params`), activated at once; the
/// answer is schema-checked.
fn aim_sender(serve: &Serve, sender_base: &str, mut setting: Value) -> Value {
    setting["activation"] = json!({"mode": "activate_immediate"});
    serve.call(
        "PATCH",
        &format!("{sender_base}/staged"),
        Some(setting),
        200,
        "sender-response-schema.json",
    )
}

/// Stages `sdp` on the receiver at `receiver_base`, connected to
/// `sender` and enabled, activated at once; its schema-checked answer.
fn connect_with_sdp(node: &RecvNode, receiver_base: &str, sender: &str, sdp: &str) -> Value {
    let connect = json!({"sender_id": sender, "master_enable": true,
        "transport_file": {"data": sdp, "type": "application/sdp"},
        "activation": {"mode": "activate_immediate"}});
    node.call(
        "PATCH",
        &format!("{receiver_base}/staged"),
        Some(connect),
        200,
        "receiver-response-schema.json",
    )
}

#[test]
fn every_answer_of_recv_nmos_validates_against_the_is04_and_is05_schemas() {
    let node = RecvNode::start(&[]);
    assert_eq!(node.get("/x-nmos/"), json!(["node/", "connection/"]));
    let (me, counts) = validate_node_api(|path| node.get(path));
    assert_eq!(me["api"]["endpoints"][0]["port"], node.http.port());
    // One device holding one receiver, nothing else.
    assert_eq!(counts, [1, 0, 0, 0, 1]);
    let receiver = node.get(&format!("{N}/receivers/"))[0].clone();
    let id = receiver["id"].as_str().unwrap().to_string();
    assert_eq!(receiver["format"], "urn:x-nmos:format:video");
    assert_eq!(receiver["transport"], "urn:x-nmos:transport:rtp");
    assert_eq!(receiver["caps"]["media_types"], json!(["video/raw"]));
    // BCP-004-01: constraint sets come with the version they last changed
    // at (nmos-testing IS-04-01 test_27_1).
    assert_eq!(receiver["caps"]["version"], "0:0");
    // IS-04's deprecated receiver target: 501, as nmos-testing accepts
    // (test_13, test_14), naming the IS-05 call to use.
    let (status, body) = node.request("PUT", &format!("{N}/receivers/{id}/target"), Some("{}"));
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("/single/receivers/"), "{body}");
    assert_eq!(
        receiver["subscription"],
        json!({"sender_id": null, "active": false})
    );
    let device = node.get(&format!("{N}/devices/"))[0].clone();
    assert_eq!(device["receivers"], json!([id]));
    assert_eq!(
        device["controls"][0]["type"],
        "urn:x-nmos:control:sr-ctrl/v1.1"
    );

    for (path, schema) in [
        (format!("{C}/"), "connectionapi-base.json"),
        (format!("{C}/single/"), "connectionapi-single.json"),
        (format!("{C}/bulk/"), "connectionapi-bulk.json"),
        (format!("{C}/single/senders/"), "sender-receiver-base.json"),
        (
            format!("{C}/single/receivers/"),
            "sender-receiver-base.json",
        ),
    ] {
        node.call("GET", &path, None, 200, schema);
    }
    assert_eq!(
        node.get(&format!("{C}/single/receivers/")),
        json!([format!("{id}/")])
    );
    let base = format!("{C}/single/receivers/{id}");
    node.call(
        "GET",
        &format!("{base}/"),
        None,
        200,
        "connectionapi-receiver.json",
    );
    node.call(
        "GET",
        &format!("{base}/constraints"),
        None,
        200,
        "constraints-schema.json",
    );
    node.receiver_json(&base, "staged");
    let active = node.receiver_json(&base, "active");
    assert!(!active.to_string().contains("\"auto\""), "{active}");
    node.call(
        "GET",
        &format!("{base}/transporttype"),
        None,
        200,
        "transporttype-response-schema.json",
    );

    let staged = format!("{base}/staged");
    // 400: a sender's key, another file type, a bad port; 500: no SDP.
    for bad in [
        json!({"transport_params": [{"destination_ip": "127.0.0.1"}]}),
        json!({"transport_file": {"data": "v=0", "type": "text/plain"}}),
        json!({"transport_params": [{"destination_port": 0}]}),
    ] {
        node.call("PATCH", &staged, Some(bad), 400, "error.json");
    }
    let not_sdp = json!({"transport_file": {"data": "hello", "type": "application/sdp"}});
    node.call("PATCH", &staged, Some(not_sdp), 500, "error.json");
    // Scheduled: locked (423) until cancelled.
    node.schedule_lock_and_cancel(&staged, "receiver-response-schema.json");
    // A transport file fills the parameters; parked, nothing is bound.
    let port = free_udp_port();
    let aim = json!({"master_enable": false,
        "transport_file": {"data": unicast_sdp(port), "type": "application/sdp"},
        "activation": {"mode": "activate_immediate"}});
    let r = node.call(
        "PATCH",
        &staged,
        Some(aim),
        200,
        "receiver-response-schema.json",
    );
    assert_eq!(r["activation"]["mode"], "activate_immediate");
    let active = node.receiver_json(&base, "active");
    assert_eq!(active["transport_params"][0]["destination_port"], port);
    assert_eq!(active["transport_params"][0]["interface_ip"], "127.0.0.1");
    assert_eq!(active["transport_file"]["type"], "application/sdp");
    // An interface this host does not have cannot be received on: the
    // activation is refused with the reason, /active unchanged.
    let elsewhere = json!({"master_enable": true,
        "transport_params": [{"interface_ip": "192.0.2.1"}],
        "activation": {"mode": "activate_immediate"}});
    node.call("PATCH", &staged, Some(elsewhere), 400, "error.json");
    let after = node.receiver_json(&base, "active");
    assert_eq!(after, active);
    // Bulk: one known, one unknown.
    let bulk = json!([{"id": id, "params": {"transport_params": [{"interface_ip": "127.0.0.1"}]}},
        {"id": "0a174530-e3cf-11e6-bf01-fe55135034f3", "params": {}}]);
    let r = node.call(
        "POST",
        &format!("{C}/bulk/receivers"),
        Some(bulk),
        200,
        "bulk-response-schema.json",
    );
    assert_eq!(
        (r[0]["code"].clone(), r[1]["code"].clone()),
        (json!(200), json!(404))
    );
    for missing in [
        format!("{C}/single/receivers/0a174530-e3cf-11e6-bf01-fe55135034f3/staged"),
        format!("{C}/single/senders/{id}/transportfile"),
    ] {
        node.call("GET", &missing, None, 404, "error.json");
    }
    let (status, stderr) = node.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn an_is05_activation_connects_serve_to_recv_nmos_byte_identical_and_master_enable_false_ends_it() {
    let media = Media::new("nmos-recv-connect");
    let serve = Serve::start(&media, &[]);
    let out = media.dir.path("out.yuv");
    let mut node = RecvNode::start(&["-o", out.to_str().unwrap()]);
    let receiver = node.receiver_id();
    let sender = sender_id(&serve, "clip.yuv");
    let sender_base = format!("{C}/single/senders/{sender}");
    let receiver_base = format!("{C}/single/receivers/{receiver}");
    let version = node.get(&format!("{N}/receivers/{receiver}"))["version"].clone();

    // The sender aimed at the receiver's port, parked: its transport
    // file exists, nothing is sent yet.
    let port = free_udp_port();
    aim_sender(
        &serve,
        &sender_base,
        json!({"receiver_id": receiver, "master_enable": false,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": port}]}),
    );
    let (status, sdp) = serve.api("GET", &format!("{sender_base}/transportfile"), None);
    assert_eq!(status, 200, "{sdp}");

    // The receiver takes the sender's SDP and starts receiving.
    let r = connect_with_sdp(&node, &receiver_base, &sender, &sdp);
    assert_eq!(r["master_enable"], true);
    node.run.wait_for(&format!("receiving on 127.0.0.1:{port}"));
    let shown = node.get(&format!("{N}/receivers/{receiver}"));
    assert_eq!(
        shown["subscription"],
        json!({"sender_id": sender, "active": true})
    );
    assert_ne!(shown["version"], version, "an activation moves the version");

    // The sender starts: frames arrive.
    start_sender(&serve, &sender_base);
    let want = (2 * FRAMES * FRAME_BYTES) as u64;
    wait_for_file_size(&out, want, Duration::from_secs(30));

    // The sender's master_enable false stops the stream.
    stop_sender(&serve, &sender_base);
    let stop = json!({"master_enable": false, "activation": {"mode": "activate_immediate"}});
    // The receiver's ends the receive: the summary says so, the
    // recording is whole.
    let r = node.call(
        "PATCH",
        &format!("{receiver_base}/staged"),
        Some(stop),
        200,
        "receiver-response-schema.json",
    );
    assert_eq!(r["master_enable"], false);
    node.run.wait_for("frames complete");
    let shown = node.get(&format!("{N}/receivers/{receiver}"));
    assert_eq!(
        shown["subscription"],
        json!({"sender_id": null, "active": false})
    );
    let active = node.get(&format!("{receiver_base}/active"));
    assert_eq!(active["master_enable"], false);

    let got = std::fs::read(&out).unwrap();
    assert!(got.len() as u64 >= want, "{} bytes", got.len());
    assert_clip_frames(&media.clip, &got);
    let (status, stderr) = node.stop();
    assert!(status.success(), "{stderr}");
}

/// A controller that connects a receiver with transport parameters
/// alone, staging no SDP (nmos-testing's IS-05-02 `test_07`, many
/// controllers): a `recv --nmos` whose operator fixed the format takes
/// it, says so in its caps, and receives byte-identical frames; one
/// with no format fixed refuses with the two ways out.
#[test]
fn recv_nmos_with_a_fixed_format_is_connected_without_a_transport_file() {
    let media = Media::new("nmos-recv-fixed");
    let serve = Serve::start(&media, &[]);
    let out = media.dir.path("out.yuv");
    let fixed = ["--size", "320x240", "--pix-fmt", "uyvy422", "--fps", "25"];
    let mut node = RecvNode::start(&[&fixed[..], &["-o", out.to_str().unwrap()]].concat());
    let receiver = node.receiver_id();
    let caps = node.get(&format!("{N}/receivers/{receiver}"))["caps"].clone();
    let sets = caps["constraint_sets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(sets.len(), 1, "{caps}");
    assert_eq!(
        sets[0]["urn:x-nmos:cap:format:frame_width"]["enum"],
        json!([320])
    );
    assert_eq!(
        sets[0]["urn:x-nmos:cap:format:frame_height"]["enum"],
        json!([240])
    );
    assert_eq!(
        sets[0]["urn:x-nmos:cap:format:grain_rate"]["enum"],
        json!([{"numerator": 25, "denominator": 1}])
    );

    let port = free_udp_port();
    let sender = sender_id(&serve, "clip.yuv");
    let sender_base = format!("{C}/single/senders/{sender}");
    let receiver_base = format!("{C}/single/receivers/{receiver}");
    let connect = json!({"sender_id": sender, "master_enable": true,
        "transport_params": [{"interface_ip": "127.0.0.1", "destination_port": port}],
        "activation": {"mode": "activate_immediate"}});
    let r = node.call(
        "PATCH",
        &format!("{receiver_base}/staged"),
        Some(connect.clone()),
        200,
        "receiver-response-schema.json",
    );
    assert_eq!(r["master_enable"], true);
    node.run.wait_for(&format!("receiving on 127.0.0.1:{port}"));
    aim_sender(
        &serve,
        &sender_base,
        json!({"receiver_id": receiver, "master_enable": false,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": port}]}),
    );
    play_two_passes_and_stop(&serve, &sender_base, node, &media, &out);

    // No format fixed: the same PATCH is refused, naming both ways out.
    let bare = RecvNode::start(&["-o", "/dev/null"]);
    let receiver = bare.receiver_id();
    let (status, body) = bare.request(
        "PATCH",
        &format!("{C}/single/receivers/{receiver}/staged"),
        Some(&connect.to_string()),
    );
    assert_eq!(status, 400, "{body}");
    for words in ["transport_file", "--size and --pix-fmt"] {
        assert!(body.contains(words), "{words}: {body}");
    }
    let (status, stderr) = bare.stop();
    assert!(status.success(), "{stderr}");
}

/// A multicast connection: serve's sender aimed at a group on `lo`, its
/// transport file staged on a `recv --nmos --interface lo`, which fills
/// `multicast_ip` from it, joins the group and records the frames
/// byte-identical.
#[test]
fn recv_nmos_joins_the_group_a_multicast_transport_file_names() {
    let media = Media::new("nmos-recv-group");
    let serve = Serve::start(
        &media,
        &["--multicast-interface", "lo", "--allow", "239.0.0.0/8"],
    );
    let out = media.dir.path("out.yuv");
    let mut node = RecvNode::start(&["--interface", "lo", "-o", out.to_str().unwrap()]);
    let receiver = node.receiver_id();
    let sender = sender_id(&serve, "clip.yuv");
    let sender_base = format!("{C}/single/senders/{sender}");
    let receiver_base = format!("{C}/single/receivers/{receiver}");
    let (group, port) = ("239.255.78.23", free_udp_port());
    aim_sender(
        &serve,
        &sender_base,
        json!({"receiver_id": receiver, "master_enable": false,
        "transport_params": [{"destination_ip": group, "destination_port": port}]}),
    );
    let (status, sdp) = serve.api("GET", &format!("{sender_base}/transportfile"), None);
    assert_eq!(status, 200, "{sdp}");
    assert!(sdp.contains(&format!("c=IN IP4 {group}/")), "{sdp}");

    let r = connect_with_sdp(&node, &receiver_base, &sender, &sdp);
    assert_eq!(r["transport_params"][0]["multicast_ip"], group, "{r}");
    node.run.wait_for(&format!("receiving on {group}:{port}"));
    let active = node.receiver_json(&receiver_base, "active");
    assert_eq!(active["transport_params"][0]["multicast_ip"], group);

    play_two_passes_and_stop(&serve, &sender_base, node, &media, &out);
}

/// serve's sender transport file, and the SDP DESCRIBE answers, declare
/// the ST 2110-21 type serve's raw pacer keeps (`TP=2110TPW`), and the
/// transport file passes sdpoker (nmos-testing's IS-05-01 `test_41`).
#[test]
fn serve_declares_its_sender_type_and_its_transport_file_passes_sdpoker() {
    if !crate::common::require("sdpoker") {
        return;
    }
    let media = Media::new("nmos-sdpoker");
    let serve = Serve::start(&media, &[]);
    let sender = sender_id(&serve, "clip.yuv");
    let sender_base = format!("{C}/single/senders/{sender}");
    aim_sender(
        &serve,
        &sender_base,
        json!({"master_enable": false,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": free_udp_port()}]}),
    );
    let (status, sdp) = serve.api("GET", &format!("{sender_base}/transportfile"), None);
    assert_eq!(status, 200, "{sdp}");
    assert!(sdp.contains("; TP=2110TPW; "), "{sdp}");
    let path = media.dir.path("transport.sdp");
    std::fs::write(&path, &sdp).unwrap();
    if let Err(e) = crate::st2110::sdpoker(&path) {
        panic!("sdpoker refuses serve's transport file:\n{e}\n{sdp}");
    }
}

#[test]
fn recv_nmos_off_loopback_needs_a_token_and_then_asks_for_it() {
    let out = nagare()
        .args(["recv", "--nmos", "--nmos-http", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("give --token"), "{stderr}");
    // With one, a controller without it is refused in the NMOS form.
    let token = "a-token-of-sixteen-bytes-or-more";
    let node = RecvNode::start(&["--token", token]);
    let (status, body) = node.request("GET", &format!("{N}/self"), None);
    assert_eq!(status, 401, "{body}");
    let me = node.get_with(token, &format!("{N}/self"));
    assert_eq!(me["api"]["endpoints"][0]["authorization"], true);
    let (status, stderr) = node.stop();
    assert!(status.success(), "{stderr}");
}

/// A GET of `serve`'s API, as JSON.
fn serve_get(serve: &Serve, path: &str) -> Value {
    let (status, body) = serve.api("GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// Every Connection API answer of a sender or receiver under `base`,
/// validated; its `/active`.
fn validate_connection(api: &impl NmosApi, base: &str, role: &str) -> Value {
    api.call(
        "GET",
        &format!("{base}/constraints"),
        None,
        200,
        "constraints-schema.json",
    );
    let schema = format!("{role}-response-schema.json");
    api.call("GET", &format!("{base}/staged"), None, 200, &schema);
    api.call("GET", &format!("{base}/active"), None, 200, &schema)
}

#[test]
fn a_two_leg_sender_reaches_a_two_leg_recv_nmos_on_both_legs_byte_identical() {
    let media = Media::new("nmos-recv-dup");
    let serve = Serve::start(&media, &["--nmos-legs", "2"]);
    let out = media.dir.path("out.yuv");
    let mut node = RecvNode::start(&["--nmos-legs", "2", "--json", "-o", out.to_str().unwrap()]);
    let receiver = node.receiver_id();
    let sender = sender_id(&serve, "clip.yuv");
    let sender_base = format!("{C}/single/senders/{sender}");
    let receiver_base = format!("{C}/single/receivers/{receiver}");

    // Both nodes validate with two legs: two interface bindings, two
    // constraints, staged and active entries.
    validate_node_api(|path| node.get(path));
    validate_node_api(|path| serve_get(&serve, path));
    let shown = node.get(&format!("{N}/receivers/{receiver}"));
    let bindings = shown["interface_bindings"].as_array().unwrap().len();
    let shown = serve_get(&serve, &format!("{N}/senders/{sender}"));
    assert_eq!(
        shown["interface_bindings"].as_array().unwrap().len(),
        bindings
    );
    let active = validate_connection(&node, &receiver_base, "receiver");
    assert_eq!(active["transport_params"].as_array().unwrap().len(), 2);
    let active = validate_connection(&serve, &sender_base, "sender");
    assert_eq!(active["transport_params"].as_array().unwrap().len(), 2);
    let (status, constraints) = serve.api("GET", &format!("{sender_base}/constraints"), None);
    assert_eq!(status, 200);
    let constraints: Value = serde_json::from_str(&constraints).unwrap();
    assert_eq!(constraints.as_array().unwrap().len(), 2);

    // The sender aimed at two ports, parked: its transport file is an
    // ST 2022-7 pair.
    let ports = [free_udp_port(), free_udp_port()];
    aim_sender(
        &serve,
        &sender_base,
        json!({"receiver_id": receiver, "master_enable": false,
        "transport_params": [
            {"destination_ip": "127.0.0.1", "destination_port": ports[0]},
            {"destination_ip": "127.0.0.1", "destination_port": ports[1]}]}),
    );
    let (status, sdp) = serve.api("GET", &format!("{sender_base}/transportfile"), None);
    assert_eq!(status, 200, "{sdp}");
    assert!(sdp.contains("a=group:DUP primary secondary"), "{sdp}");
    for p in ports {
        assert!(sdp.contains(&format!("m=video {p} ")), "{sdp}");
    }

    // The receiver takes the SDP: both legs filled, both listening.
    let r = connect_with_sdp(&node, &receiver_base, &sender, &sdp);
    assert_eq!(r["master_enable"], true);
    for (k, p) in ports.iter().enumerate() {
        assert_eq!(r["transport_params"][k]["destination_port"], *p, "{r}");
        node.run.wait_for(&format!("receiving on 127.0.0.1:{p}"));
    }

    // The sender starts: every packet goes to both legs.
    start_sender(&serve, &sender_base);
    let want = (2 * FRAMES * FRAME_BYTES) as u64;
    wait_for_file_size(&out, want, Duration::from_secs(30));
    stop_sender(&serve, &sender_base);
    let stop = json!({"master_enable": false, "activation": {"mode": "activate_immediate"}});
    // The receive has ended, its recording flushed, when this answers.
    node.call(
        "PATCH",
        &format!("{receiver_base}/staged"),
        Some(stop),
        200,
        "receiver-response-schema.json",
    );
    let got = std::fs::read(&out).unwrap();
    assert!(got.len() as u64 >= want, "{} bytes", got.len());
    assert_clip_frames(&media.clip, &got);

    // The report (--json, on stdout): both legs delivered, and the
    // second's packets were copies of the first's.
    sigterm(&node.run.child);
    let (status, stdout, stderr) = node.run.finish();
    assert!(status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let legs = &report["per_stripe"][0]["legs"];
    let received = |k: usize| legs[k]["received"].as_u64().unwrap();
    assert!(received(0) > 0 && received(1) > 0, "{report:#}");
    let copies = legs[0]["duplicates"].as_u64().unwrap() + legs[1]["duplicates"].as_u64().unwrap();
    assert!(copies > 0, "{report:#}");
    assert_eq!(report["per_stripe"][0]["unrecovered"], 0, "{report:#}");
}

/// Starts serve's sender, waits for two passes of the clip in `out`,
/// stops the sender and then `node`, and checks every recorded frame is
/// the clip's.
fn play_two_passes_and_stop(
    serve: &Serve,
    sender_base: &str,
    node: RecvNode,
    media: &Media,
    out: &std::path::Path,
) {
    start_sender(serve, sender_base);
    let want = (2 * FRAMES * FRAME_BYTES) as u64;
    wait_for_file_size(out, want, Duration::from_secs(30));
    stop_sender(serve, sender_base);
    let (status, stderr) = node.stop();
    assert!(status.success(), "{stderr}");
    assert_clip_frames(&media.clip, &std::fs::read(out).unwrap());
}
