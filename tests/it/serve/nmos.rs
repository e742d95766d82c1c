//! The NMOS IS-04 Node API of `nagare serve`, every answer validated
//! against the official v1.3 schemas (shipped in the `nmos` crate), and
//! registration with mock registries written here.

use serde_json::Value;

use super::harness::{Media, Serve, http};
use crate::common::{Netns, Running, Scratch, sigterm, wait_until};
use crate::nmos_schema::{assert_valid, schema_dir, validate_node_api, validator};

fn get(serve: &Serve, path: &str) -> Value {
    let (status, body) = serve.api("GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

#[test]
fn every_node_api_answer_validates_against_the_is04_schemas() {
    let dir = schema_dir();
    // The published examples pass, and an empty node fails: the
    // validator is not vacuous.
    assert!(!validator(&dir, "node.json").is_valid(&serde_json::json!({})));
    let media = Media::new("nmos-schema").with_ts().with_stripes("lines", 2);
    let state = Scratch::new("nmos-state");
    let serve = Serve::start(&media, &["--state-dir", state.0.to_str().unwrap()]);
    let push = r#"{"source": "clip.yuv", "destinations": ["127.0.0.1:9"], "loop": true}"#;
    let (status, body) = serve.api("POST", "/v1/streams", Some(push));
    assert_eq!(status, 201, "{body}");
    let v = "/x-nmos/node/v1.3";
    assert_eq!(
        get(&serve, "/x-nmos/"),
        serde_json::json!(["node/", "connection/"])
    );
    assert_eq!(get(&serve, "/x-nmos/node/"), serde_json::json!(["v1.3/"]));
    let (node, counts) = validate_node_api(|path| get(&serve, path));
    assert_eq!(node["api"]["endpoints"][0]["port"], serve.http.port());
    // One device; bars, clip.yuv and clip.ts each a source and a flow;
    // clip.yuv's two stripes a flow each; those five senders and the push
    // stream's.
    assert_eq!(counts, [1, 3, 5, 6, 0]);
    let flows = get(&serve, &format!("{v}/flows"));
    let whole = flows
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["label"] == "clip.yuv")
        .unwrap();
    for k in 0..2 {
        let label = format!("clip.yuv stripe {k}/2 lines");
        let stripe = flows
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["label"] == label.as_str())
            .unwrap_or_else(|| panic!("no flow {label}: {flows:#}"));
        // Its own geometry: half the lines; made from the whole flow.
        assert_eq!(stripe["frame_width"], 320, "{stripe:#}");
        assert_eq!(stripe["frame_height"], 120, "{stripe:#}");
        assert_eq!(stripe["parents"], serde_json::json!([whole["id"]]));
        assert_eq!(stripe["source_id"], whole["source_id"]);
        let senders = get(&serve, &format!("{v}/senders"));
        let sender = senders
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == label.as_str())
            .unwrap_or_else(|| panic!("no sender {label}: {senders:#}"));
        assert_eq!(sender["flow_id"], stripe["id"]);
        assert!(
            sender["manifest_href"]
                .as_str()
                .unwrap()
                .ends_with("/transportfile")
        );
    }
    let clip = flows
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["label"] == "clip.yuv")
        .unwrap();
    assert_eq!(clip["frame_width"], 320);
    assert_eq!(clip["frame_height"], 240);
    assert_eq!(clip["media_type"], "video/raw");
    let ts = flows
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["label"] == "clip.ts")
        .unwrap();
    assert_eq!(ts["media_type"], "video/MP2T");
    // Errors in the NMOS form, with CORS.
    for missing in [
        format!("{v}/senders/nope"),
        format!("{v}/nothing"),
        "/x-nmos/node/v1.0/".into(),
    ] {
        let (status, body) = serve.api("GET", &missing, None);
        assert_eq!(status, 404, "{missing}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_valid(&dir, "error.json", &missing, &e);
        assert_eq!(e["code"], 404);
    }
    let head = raw(&serve, &format!("OPTIONS {v}/self HTTP/1.1"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("access-control-allow-origin: *"),
        "{head}"
    );
    let head = raw(&serve, &format!("GET {v}/self HTTP/1.1"));
    assert!(
        head.to_ascii_lowercase()
            .contains("access-control-allow-origin: *"),
        "{head}"
    );
    let head = raw(&serve, "GET /v1/streams HTTP/1.1");
    assert!(
        !head.to_ascii_lowercase().contains("access-control"),
        "{head}"
    );
    // Versions stay put while nothing changes.
    assert_eq!(
        get(&serve, &format!("{v}/self"))["version"],
        node["version"]
    );
}

/// The head of the answer to a request line `line` (no body).
fn raw(serve: &Serve, line: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(serve.http).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "{line}\r\nHost: x\r\nOrigin: http://controller\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split("\r\n\r\n").next().unwrap().to_string()
}

#[test]
fn the_node_id_survives_a_restart_on_the_same_port() {
    let media = Media::new("nmos-restart");
    let state = Scratch::new("nmos-restart-state");
    // A free port, then two servers on it one after the other.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--state-dir", state.0.to_str().unwrap()];
    let ids = (0..2)
        .map(|_| {
            let mut cmd = crate::common::nagare();
            cmd.args([
                "serve",
                "--media",
                &media.path(),
                "--rtsp",
                "127.0.0.1:0",
                "--http",
                &listen,
            ])
            .args(args);
            let mut run = crate::common::Running::spawn(cmd);
            run.wait_for("http listening on ");
            let addr: std::net::SocketAddr = listen.parse().unwrap();
            let (status, body) = http(addr, "GET", "/x-nmos/node/v1.3/senders", None, None);
            assert_eq!(status, 200, "{body}");
            let senders: Value = serde_json::from_str(&body).unwrap();
            let (_, body) = http(addr, "GET", "/x-nmos/node/v1.3/self", None, None);
            let node: Value = serde_json::from_str(&body).unwrap();
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(run.child.id() as i32, libc::SIGTERM);
            }
            run.finish();
            let sender_ids: Vec<Value> = senders
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].clone())
                .collect();
            (node["id"].clone(), sender_ids)
        })
        .collect::<Vec<_>>();
    assert_eq!(ids[0], ids[1]);
    assert!(state.path(&format!("nmos-node-{port}.id")).exists());
}

/// What a mock registry answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// 201 to resources, 200 to heartbeats of a known node, 404 to others.
    Normal,
    /// 404 to the next heartbeat (the registry lost the node), then Normal.
    LoseNode,
    /// 503 to everything.
    Down,
    /// No answer to a DELETE (the connection held open).
    HangDeletes,
}

/// A Registration API that records each request as `POST node`,
/// `POST heartbeat`, `DELETE senders`.
struct MockRegistry {
    addr: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    mode: std::sync::Arc<std::sync::Mutex<Mode>>,
}

impl MockRegistry {
    fn start(ip: [u8; 4]) -> MockRegistry {
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::from(ip), 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mode = Arc::new(Mutex::new(Mode::Normal));
        let (l, m) = (log.clone(), mode.clone());
        std::thread::spawn(move || {
            let mut known = false;
            let mut unanswered = Vec::new();
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                if let Ok(Some(held)) = answer_one(conn, &l, &m, &mut known) {
                    unanswered.push(held);
                }
            }
        });
        MockRegistry { addr, log, mode }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (bounded) until the log has `n` entries after `from` matching
    /// `what`; the log then.
    fn wait_for(&self, from: usize, what: &str, n: usize) -> Vec<String> {
        let said = format!("{}: {n} × '{what}' after entry {from}", self.url());
        wait_until(&said, std::time::Duration::from_secs(20), || {
            let log = self.log();
            (log.iter().skip(from).filter(|l| *l == what).count() >= n).then_some(log)
        })
    }
}

/// Reads one request from `conn`, logs it and answers as `mode` says;
/// the connection back when it is to be held unanswered.
fn answer_one(
    conn: std::net::TcpStream,
    log: &std::sync::Mutex<Vec<String>>,
    mode: &std::sync::Mutex<Mode>,
    known: &mut bool,
) -> std::io::Result<Option<std::net::TcpStream>> {
    use std::io::{BufRead, BufReader, Read, Write};
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let what = if path.contains("/health/nodes/") {
        "heartbeat".to_string()
    } else if method == "DELETE" {
        path.rsplit('/').nth(1).unwrap_or("").to_string()
    } else {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        v["type"].as_str().unwrap_or("?").to_string()
    };
    log.lock().unwrap().push(format!("{method} {what}"));
    let mut m = mode.lock().unwrap();
    let status = match (*m, what.as_str()) {
        (Mode::Down, _) => 503,
        (Mode::HangDeletes, _) if method == "DELETE" => return Ok(Some(conn)),
        (Mode::LoseNode, "heartbeat") => {
            *m = Mode::Normal;
            *known = false;
            404
        }
        (_, "heartbeat") if *known => 200,
        (_, "heartbeat") => 404,
        (_, "node") if method == "POST" => {
            *known = true;
            201
        }
        (_, _) if method == "DELETE" => 204,
        _ => 201,
    };
    drop(m);
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )?;
    Ok(None)
}

#[test]
fn registers_heartbeats_reregisters_after_a_404_and_fails_over() {
    let a = MockRegistry::start([127, 0, 0, 2]);
    let b = MockRegistry::start([127, 0, 0, 3]);
    let media = Media::new("nmos-register");
    let mut serve = Serve::start(&media, &["--registry", &a.url(), "--registry", &b.url()]);
    // Parent order: node, device, sources, flows, senders (bars and
    // clip.yuv), then a heartbeat within 5 s.
    let log = a.wait_for(0, "POST heartbeat", 1);
    let first: Vec<&str> = log.iter().take(8).map(String::as_str).collect();
    assert_eq!(
        first,
        [
            "POST node",
            "POST device",
            "POST source",
            "POST source",
            "POST flow",
            "POST flow",
            "POST sender",
            "POST sender"
        ]
    );
    serve.wait_for_log(&format!("NMOS: registered with {}", a.url()));
    // The registry loses the node: the next heartbeat is a 404, and
    // everything is registered again, node first.
    a.set(Mode::LoseNode);
    let n = a.log().len();
    let log = a.wait_for(n, "POST sender", 2);
    let after: Vec<&str> = log[n..].iter().map(String::as_str).collect();
    assert_eq!(
        &after[..3],
        ["POST heartbeat", "POST node", "POST device"],
        "{log:?}"
    );
    // The registry goes down: the node moves to b, heartbeat first (b
    // does not know it: 404), then registers everything there.
    a.set(Mode::Down);
    let log = b.wait_for(0, "POST sender", 2);
    assert_eq!(
        &log[..3],
        ["POST heartbeat", "POST node", "POST device"],
        "{log:?}"
    );
    serve.wait_for_log(&format!("NMOS: registered with {}", b.url()));
    b.wait_for(0, "POST heartbeat", 2);
    let (status, stderr_tail, _) = serve.terminate();
    assert!(status.success(), "{stderr_tail}");
}

#[test]
fn a_clean_stop_deletes_the_resources_children_first_and_the_node_last() {
    let registry = MockRegistry::start([127, 0, 0, 7]);
    let media = Media::new("nmos-deregister");
    let mut serve = Serve::start(&media, &["--registry", &registry.url()]);
    registry.wait_for(0, "POST heartbeat", 1);
    serve.wait_for_log(&format!("NMOS: registered with {}", registry.url()));
    let (status, _, stderr) = serve.terminate();
    assert!(status.success(), "{stderr}");
    // By the time serve has exited, the registry has heard every DELETE.
    let deletes: Vec<String> = registry
        .log()
        .into_iter()
        .filter(|l| l.starts_with("DELETE"))
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE senders",
            "DELETE senders",
            "DELETE flows",
            "DELETE flows",
            "DELETE sources",
            "DELETE sources",
            "DELETE devices",
            "DELETE nodes"
        ],
        "{stderr}"
    );
    let log = registry.log();
    assert_eq!(log.last().map(String::as_str), Some("DELETE nodes"));
    assert!(stderr.contains("deregistered from"), "{stderr}");
}

#[test]
fn a_registry_that_does_not_answer_holds_a_clean_stop_about_2_s_at_most() {
    let registry = MockRegistry::start([127, 0, 0, 8]);
    let media = Media::new("nmos-deregister-hung");
    let mut serve = Serve::start(&media, &["--registry", &registry.url()]);
    registry.wait_for(0, "POST heartbeat", 1);
    serve.wait_for_log(&format!("NMOS: registered with {}", registry.url()));
    registry.set(Mode::HangDeletes);
    let asked = std::time::Instant::now();
    let (status, _, stderr) = serve.terminate();
    let took = asked.elapsed();
    assert!(status.success(), "{stderr}");
    // The first DELETE hangs: the stop gives up on it after 2 s.
    let deletes = registry
        .log()
        .iter()
        .filter(|l| l.starts_with("DELETE"))
        .count();
    assert_eq!(deletes, 1, "{:?}", registry.log());
    assert!(
        took < std::time::Duration::from_secs(5),
        "serve took {took:?} to stop: {stderr}"
    );
    assert!(stderr.contains("resources left"), "{stderr}");
}

/// A name in DNS wire form (no compression).
fn dns_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

/// One resource record: name, type, class IN, TTL 60, data.
fn dns_record(name: &str, rtype: u16, data: &[u8]) -> Vec<u8> {
    let mut out = dns_name(name);
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&60u32.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A unicast DNS server that answers every query with the one registry
/// `registry` as `_nmos-register._tcp.test.local` (PTR in the answer;
/// SRV, TXT and A as additional records); counts the queries.
fn mock_dns(
    registry: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let socket = std::net::UdpSocket::bind("127.0.0.5:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let queries = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = queries.clone();
    let std::net::IpAddr::V4(ip) = registry.ip() else {
        panic!("IPv4")
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            seen.fetch_add(1, Ordering::Relaxed);
            let out = dns_sd_answer(&buf[..n], ip, registry.port(), "test.local");
            let _ = socket.send_to(&out, from);
        }
    });
    (addr, queries)
}

/// The answer to DNS `query` naming one registry at `ip`:`port` as
/// `_nmos-register._tcp.DOMAIN` (PTR in the answer; SRV, TXT and A as
/// additional records).
fn dns_sd_answer(query: &[u8], ip: std::net::Ipv4Addr, port: u16, domain: &str) -> Vec<u8> {
    let service = format!("_nmos-register._tcp.{domain}");
    let instance = format!("reg.{service}");
    let target = format!("reg.{domain}");
    let mut srv = vec![0, 0, 0, 0];
    srv.extend_from_slice(&port.to_be_bytes());
    srv.extend_from_slice(&dns_name(&target));
    let mut txt = Vec::new();
    for kv in [
        "api_proto=http",
        "api_ver=v1.2,v1.3",
        "api_auth=false",
        "pri=10",
    ] {
        txt.push(kv.len() as u8);
        txt.extend_from_slice(kv.as_bytes());
    }
    let mut out = Vec::new();
    out.extend_from_slice(&query[..2]); // the query's id
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 3]);
    out.extend_from_slice(&query[12..]); // its question
    out.extend(dns_record(&service, 12, &dns_name(&instance)));
    out.extend(dns_record(&instance, 33, &srv));
    out.extend(dns_record(&instance, 16, &txt));
    out.extend(dns_record(&target, 1, &ip.octets()));
    out
}

#[test]
fn finds_its_registry_by_unicast_dns_sd() {
    let registry = MockRegistry::start([127, 0, 0, 6]);
    let (dns, queries) = mock_dns(registry.addr);
    let media = Media::new("nmos-dns");
    let dns = dns.to_string();
    let mut serve = Serve::start(&media, &["--nmos-dns", &dns, "--nmos-domain", "test.local"]);
    registry.wait_for(0, "POST sender", 2);
    serve.wait_for_log(&format!("NMOS: registered with {}", registry.url()));
    assert!(queries.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    let log = registry.log();
    assert_eq!(log[0], "POST node", "{log:?}");
}

/// Runs `f` on a thread inside network namespace `ns`: the sockets it
/// opens belong to the namespace, whichever thread then uses them.
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{}", ns.0);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// An mDNS responder on the interface with address `on`: every query to
/// 224.0.0.251:5353 is answered, by unicast to its sender (RFC 6762
/// §6.7), with the one registry at `registry`; counts the queries.
fn mdns_responder(
    on: std::net::Ipv4Addr,
    registry: std::net::SocketAddr,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let socket = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 5353)).unwrap();
    socket
        .join_multicast_v4(&std::net::Ipv4Addr::new(224, 0, 0, 251), &on)
        .unwrap();
    let queries = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = queries.clone();
    let std::net::IpAddr::V4(ip) = registry.ip() else {
        panic!("IPv4")
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            // Queries only (QR clear); the answers of others pass by.
            if n < 12 || buf[2] & 0x80 != 0 {
                continue;
            }
            seen.fetch_add(1, Ordering::Relaxed);
            let out = dns_sd_answer(&buf[..n], ip, registry.port(), "local");
            let _ = socket.send_to(&out, from);
        }
    });
    queries
}

#[test]
fn finds_its_registry_by_multicast_dns_on_the_named_interface() {
    let Some(ns) = Netns::new("mdns") else { return };
    // An IPv4 address on the namespace's v0: the registry and the mDNS
    // responder live there, and the node asks on it by name. The
    // namespace has no default route: nothing leaves the machine.
    let status = std::process::Command::new("ip")
        .args(["-n", &ns.0, "addr", "add", "10.77.0.1/24", "dev", "v0"])
        .status()
        .unwrap();
    assert!(status.success());
    let on = std::net::Ipv4Addr::new(10, 77, 0, 1);
    let (registry, queries) = in_netns(&ns, move || {
        let registry = MockRegistry::start(on.octets());
        let queries = mdns_responder(on, registry.addr);
        (registry, queries)
    });
    let mut cmd = ns.nagare();
    cmd.args([
        "recv",
        "--nmos",
        "--nmos-http",
        "127.0.0.1:0",
        "--nmos-mdns",
        "v0",
    ]);
    let mut node = Running::spawn(cmd);
    node.wait_for(&format!("NMOS: registered with {}", registry.url()));
    assert!(queries.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    let log = registry.log();
    assert_eq!(
        &log[..3],
        ["POST node", "POST device", "POST receiver"],
        "{log:?}"
    );
    sigterm(&node.child);
    let (status, _, stderr) = node.finish();
    assert!(status.success(), "{stderr}");
}
