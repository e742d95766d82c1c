//! The NMOS IS-05 Connection API v1.1 of `nagare serve`: every answer
//! validated against the official schemas (shipped in the `nmos` crate),
//! and an activation that streams a path to a `nagare recv` reading the
//! sender's transportfile, byte-identical, until `master_enable: false`
//! stops it.

use std::net::UdpSocket;
use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{FRAME_BYTES, FRAMES, Media, Serve, assert_clip_frames};
use crate::common::{Running, nagare, wait_until};
use crate::nmos_schema::NmosApi;

const C: &str = "/x-nmos/connection/v1.1";

impl NmosApi for Serve {
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.api(method, path, body)
    }
}

/// The id of path `name`'s sender, from the Node API.
pub(super) fn sender_id(serve: &Serve, name: &str) -> String {
    let (_, text) = serve.api("GET", "/x-nmos/node/v1.3/senders/", None);
    let all: Value = serde_json::from_str(&text).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == name && s["transport"] == "urn:x-nmos:transport:rtp")
        .unwrap_or_else(|| panic!("no sender of {name}: {all:#}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// PATCHes `staged` to park its sender: `master_enable` false, at once.
fn park(serve: &Serve, staged: &str) {
    enable(serve, staged, false);
}

/// PATCHes `master_enable` to `on` at `staged`, at once; the sender's
/// (schema-checked) answer.
fn enable(serve: &Serve, staged: &str, on: bool) -> Value {
    let patch = json!({"master_enable": on, "activation": {"mode": "activate_immediate"}});
    serve.call(
        "PATCH",
        staged,
        Some(patch),
        200,
        "sender-response-schema.json",
    )
}

/// Starts the sender at `base` (`master_enable` true, at once); its answer.
pub(super) fn start_sender(serve: &Serve, base: &str) -> Value {
    enable(serve, &format!("{base}/staged"), true)
}

/// Parks the sender at `base` (`master_enable` false, at once) and
/// waits until its stream has left the table.
pub(super) fn stop_sender(serve: &Serve, base: &str) {
    park(serve, &format!("{base}/staged"));
    wait_until("the stream stops", Duration::from_secs(5), || {
        let (_, text) = serve.api("GET", "/v1/streams", None);
        let list: Value = serde_json::from_str(&text).unwrap();
        list["streams"].as_array().unwrap().is_empty().then_some(())
    });
}

/// A UDP port free on loopback now.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn every_connection_api_answer_validates_against_the_is05_schemas() {
    // With stripe senders, so theirs are validated too.
    let media = Media::new("nmos-is05-schema").with_stripes("lines", 2);
    let serve = Serve::start(&media, &[]);
    serve.call(
        "GET",
        &format!("{C}/"),
        None,
        200,
        "connectionapi-base.json",
    );
    serve.call(
        "GET",
        &format!("{C}/single/"),
        None,
        200,
        "connectionapi-single.json",
    );
    serve.call(
        "GET",
        &format!("{C}/bulk/"),
        None,
        200,
        "connectionapi-bulk.json",
    );
    let senders = serve.call(
        "GET",
        &format!("{C}/single/senders/"),
        None,
        200,
        "sender-receiver-base.json",
    );
    serve.call(
        "GET",
        &format!("{C}/single/receivers/"),
        None,
        200,
        "sender-receiver-base.json",
    );
    // Every sender of the Node API has its Connection API, and back.
    let (_, text) = serve.api("GET", "/x-nmos/node/v1.3/senders/", None);
    let node: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        node.as_array().unwrap().len(),
        senders.as_array().unwrap().len()
    );
    for s in senders.as_array().unwrap() {
        let base = format!(
            "{C}/single/senders/{}",
            s.as_str().unwrap().trim_end_matches('/')
        );
        serve.call(
            "GET",
            &format!("{base}/"),
            None,
            200,
            "connectionapi-sender.json",
        );
        serve.call(
            "GET",
            &format!("{base}/constraints"),
            None,
            200,
            "constraints-schema.json",
        );
        serve.call(
            "GET",
            &format!("{base}/staged"),
            None,
            200,
            "sender-response-schema.json",
        );
        let active = serve.call(
            "GET",
            &format!("{base}/active"),
            None,
            200,
            "sender-response-schema.json",
        );
        assert!(!active.to_string().contains("\"auto\""), "{active}");
        serve.call(
            "GET",
            &format!("{base}/transporttype"),
            None,
            200,
            "transporttype-response-schema.json",
        );
    }
    let id = sender_id(&serve, "clip.yuv");
    let staged = format!("{C}/single/senders/{id}/staged");
    // The device names the API; the sender its transport file.
    let (_, text) = serve.api("GET", "/x-nmos/node/v1.3/devices/", None);
    let devices: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        devices[0]["controls"][0]["type"],
        "urn:x-nmos:control:sr-ctrl/v1.1"
    );
    let (_, text) = serve.api("GET", &format!("/x-nmos/node/v1.3/senders/{id}"), None);
    let sender: Value = serde_json::from_str(&text).unwrap();
    assert!(
        sender["manifest_href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{id}/transportfile"))
    );

    // 400s: a key the schema does not have, a bad port, a bad mode.
    for bad in [
        json!({"transport_params": [{"fec_enabled": true}]}),
        json!({"transport_params": [{"destination_port": 0}]}),
        json!({"activation": {"mode": "soon"}}),
        json!({"transport_params": [{}, {}]}),
    ] {
        serve.call("PATCH", &staged, Some(bad), 400, "error.json");
    }
    // A scheduled activation locks the resource (423) until cancelled.
    serve.schedule_lock_and_cancel(&staged, "sender-response-schema.json");
    // An absolute activation in the past happens at once.
    let past = json!({"transport_params": [{"destination_ip": "127.0.0.1", "destination_port": free_port()}],
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": "1:0"}});
    serve.call(
        "PATCH",
        &staged,
        Some(past),
        202,
        "sender-response-schema.json",
    );
    wait_until("the past activation", Duration::from_secs(5), || {
        let (_, text) = serve.api("GET", &format!("{C}/single/senders/{id}/active"), None);
        let a: Value = serde_json::from_str(&text).unwrap();
        (a["activation"]["mode"] == "activate_scheduled_absolute").then_some(())
    });
    // A destination outside the allow-list is refused with the reason.
    let outside = json!({"master_enable": true,
        "transport_params": [{"destination_ip": "192.0.2.1"}],
        "activation": {"mode": "activate_immediate"}});
    let e = serve.call("PATCH", &staged, Some(outside), 400, "error.json");
    assert!(e["error"].as_str().unwrap().contains("192.0.2.1"), "{e}");
    let bulk = json!([{"id": id, "params": {"master_enable": false}},
        {"id": "0a174530-e3cf-11e6-bf01-fe55135034f3", "params": {}}]);
    let r = serve.call(
        "POST",
        &format!("{C}/bulk/senders"),
        Some(bulk),
        200,
        "bulk-response-schema.json",
    );
    assert_eq!(r[0]["code"], 200);
    assert_eq!(r[1]["code"], 404);
    serve.call(
        "GET",
        &format!("{C}/single/senders/0a174530-e3cf-11e6-bf01-fe55135034f3/staged"),
        None,
        404,
        "error.json",
    );
}

#[test]
fn an_activation_streams_a_path_to_recv_byte_identical_and_master_enable_false_stops_it() {
    let media = Media::new("nmos-is05-stream");
    let serve = Serve::start(&media, &[]);
    let id = sender_id(&serve, "clip.yuv");
    let base = format!("{C}/single/senders/{id}");
    let receiver = "0a174530-e3cf-11e6-bf01-fe55135034f3";
    // Stage and activate the destination with master_enable false: the
    // transport file exists, nothing is sent yet.
    let port = free_port();
    let aim = json!({"receiver_id": receiver, "master_enable": false,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": port}],
        "activation": {"mode": "activate_immediate"}});
    let r = serve.call(
        "PATCH",
        &format!("{base}/staged"),
        Some(aim),
        200,
        "sender-response-schema.json",
    );
    assert_eq!(r["activation"]["mode"], "activate_immediate");
    let (status, sdp) = serve.api("GET", &format!("{base}/transportfile"), None);
    assert_eq!(status, 200, "{sdp}");
    assert!(sdp.contains(&format!("m=video {port} RTP/AVP 96")), "{sdp}");
    assert!(sdp.contains("c=IN IP4 127.0.0.1"), "{sdp}");
    let sdp_file = media.dir.path("sender.sdp");
    std::fs::write(&sdp_file, &sdp).unwrap();

    let frames = 2 * FRAMES;
    let out = media.dir.path("out.yuv");
    let mut cmd = nagare();
    cmd.args([
        "recv",
        "--sdp",
        sdp_file.to_str().unwrap(),
        "--timeout",
        "10",
    ])
    .args(["--frames", &frames.to_string(), "-o", out.to_str().unwrap()]);
    let mut recv = Running::spawn(cmd);
    recv.listening();

    let r = start_sender(&serve, &base);
    assert_eq!(r["master_enable"], true);
    let (status, _, stderr) = recv.finish();
    assert!(status.success(), "{stderr}");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), frames * FRAME_BYTES);
    assert_clip_frames(&media.clip, &got);
    // IS-04 shows the connection.
    let (_, text) = serve.api("GET", &format!("/x-nmos/node/v1.3/senders/{id}"), None);
    let sender: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        sender["subscription"],
        json!({"receiver_id": receiver, "active": true})
    );

    stop_sender(&serve, &base);
    let (_, text) = serve.api("GET", &format!("/x-nmos/node/v1.3/senders/{id}"), None);
    let sender: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sender["subscription"]["active"], false);
}

/// A socket on loopback for a sender's packets, read with a 10 s
/// bound, and its port.
fn sink() -> (UdpSocket, u16) {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = sink.local_addr().unwrap().port();
    (sink, port)
}

/// A stripe sent in jumbo packets says so in its transport file:
/// `MAXUDP=8960` (ST 2110-21), so that a receiver counts VRX_FULL in
/// packets of that size (120 for W, not 720); within the standard UDP
/// size it declares none.
#[test]
fn a_jumbo_stripes_transport_file_declares_maxudp() {
    for (packet_size, declared) in [(1200, None), (8800, Some(8960))] {
        let media = Media::new("nmos-is05-maxudp").with_stripes_in("lines", 2, packet_size);
        let serve = Serve::start(&media, &[]);
        let id = sender_id(&serve, "clip.yuv stripe 0/2 lines");
        let base = format!("{C}/single/senders/{id}");
        let (sink, port) = sink();
        let go = json!({"master_enable": true,
            "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": port}],
            "activation": {"mode": "activate_immediate"}});
        serve.call(
            "PATCH",
            &format!("{base}/staged"),
            Some(go),
            200,
            "sender-response-schema.json",
        );
        // The stripe's packets are that size (a 320x120 stripe line is
        // 640 bytes: whole lines fill each packet up to it).
        let mut packet = vec![0u8; 9000];
        let (n, _) = sink
            .recv_from(&mut packet)
            .expect("the stripe's first packet");
        assert!(n <= packet_size && n > packet_size - 700, "{n} bytes");
        let (status, sdp) = serve.api("GET", &format!("{base}/transportfile"), None);
        assert_eq!(status, 200, "{sdp}");
        let legs = nagare_proto::sdp::SdpStream::parse_legs(&sdp).unwrap();
        assert_eq!(legs[0].max_udp, declared, "{sdp}");
        park(&serve, &format!("{base}/staged"));
    }
}

/// A `nagare cluster` leg over IS-05: a stripe sender activated for the
/// TAI instant of an epoch frame begins with exactly that frame (its RTP
/// timestamp), as stripe 1 with its SSRC, so legs activated on several
/// nodes for one frame line up; `master_enable` false removes it.
#[test]
fn a_stripe_sender_activated_for_a_frame_begins_on_that_frame() {
    let media = Media::new("nmos-is05-stripe").with_stripes("lines", 2);
    let serve = Serve::start(&media, &[]);
    let id = sender_id(&serve, "clip.yuv stripe 1/2 lines");
    let staged = format!("{C}/single/senders/{id}/staged");
    let (sink, port) = sink();
    // The frame (25 fps: 40 ms) starting a second from now, in TAI.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let frame = (now + 1_000_000_000).div_ceil(40_000_000) as u64;
    let at = format!("{}:{}", frame / 25 + 37, (frame % 25) * 40_000_000);
    let go = json!({"master_enable": true,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": port}],
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": at}});
    serve.call(
        "PATCH",
        &staged,
        Some(go),
        202,
        "sender-response-schema.json",
    );
    let mut packet = [0u8; 2048];
    let (n, _) = sink.recv_from(&mut packet).expect("the leg's first packet");
    assert!(n > 12, "{n} bytes");
    let timestamp = u32::from_be_bytes(packet[4..8].try_into().unwrap());
    assert_eq!(
        timestamp,
        (frame * 3600) as u32,
        "frame {frame}'s timestamp"
    );
    let ssrc = u32::from_be_bytes(packet[8..12].try_into().unwrap());
    assert_eq!(ssrc, 0x6e61_0001, "stripe 1's SSRC");
    let active = serve.call(
        "GET",
        &format!("{C}/single/senders/{id}/active"),
        None,
        200,
        "sender-response-schema.json",
    );
    assert_eq!(active["activation"]["activation_time"], at.as_str());
    assert_eq!(active["master_enable"], true);
    let label = format!("NMOS sender {id}");
    let list: nagare_api::serve::StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    let leg = list
        .streams
        .iter()
        .find(|s| s.label.as_deref() == Some(label.as_str()))
        .unwrap_or_else(|| panic!("no stream {label}: {list:#?}"));
    assert_eq!(leg.stripe.map(|s| (s.index, s.count)), Some((1, 2)));
    assert_eq!(leg.ssrc, Some(0x6e61_0001));
    park(&serve, &staged);
    let list: nagare_api::serve::StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert!(
        list.streams
            .iter()
            .all(|s| s.label.as_deref() != Some(label.as_str())),
        "{list:#?}"
    );
}
