//! serve's HTTP API against clients that misbehave: none of them may stall
//! another client or the server's stop, and every limit answers the way
//! HTTP says.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use socket2::SockRef;

use super::harness::{Media, Rtsp, Serve, connect_from, http};

/// How long an honest client may wait for an answer while others
/// misbehave: generous for a loaded CI machine (answers take a few
/// milliseconds); a stalled API takes as long as the misbehaving client
/// wants.
const PROMPT: Duration = Duration::from_secs(1);

/// An authenticated call must answer within [`PROMPT`].
fn answers_promptly(serve: &Serve) {
    let t = Instant::now();
    let (status, text) = serve.api("GET", "/v1/streams", None);
    assert_eq!(status, 200, "{text}");
    assert!(t.elapsed() < PROMPT, "took {:?}", t.elapsed());
}

/// The status code of the first answer on `s`.
fn status_of(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut head = [0u8; 64];
    let n = s.read(&mut head).unwrap();
    let text = String::from_utf8_lossy(&head[..n]);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

#[test]
fn a_client_that_never_reads_stalls_nobody_and_not_the_stop() {
    let media = Media::new("serve-noread");
    let serve = Serve::start(&media, &["--token", "correct-horse-battery"]);
    // 20,000 pipelined requests whose answers are never read: the
    // server's writes to this client block once its small buffer fills.
    let hog = TcpStream::connect(serve.http).unwrap();
    SockRef::from(&hog).set_recv_buffer_size(4096).unwrap();
    hog.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let one = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", serve.http);
    let burst = one.repeat(20_000);
    let mut w = &hog;
    // The server stops reading once it cannot write; a write timeout here
    // only means the pipe is full, which is the point.
    let _ = w.write_all(burst.as_bytes());
    // And a POST whose announced body never comes.
    let mut trickle = TcpStream::connect(serve.http).unwrap();
    write!(
        trickle,
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer correct-horse-battery\r\n\
         Content-Length: 60000\r\n\r\n{{"
    )
    .unwrap();
    for _ in 0..20 {
        answers_promptly(&serve);
    }
    let t = Instant::now();
    let (status, _, _) = serve.terminate();
    assert!(status.success());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        t.elapsed()
    );
    drop((hog, trickle));
}

#[test]
fn a_trickling_body_and_trickling_heads_stall_nobody() {
    let media = Media::new("serve-trickle");
    let serve = Serve::start(&media, &[]);
    // A POST announcing 60,000 bytes that sends one.
    let mut body = TcpStream::connect(serve.http).unwrap();
    write!(
        body,
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{{"
    )
    .unwrap();
    // Twenty connections sending half a head.
    let heads: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(serve.http).unwrap();
            s.write_all(b"GET /v1/streams HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    answers_promptly(&serve);
    // The body's deadline answers 408, and so does the heads'.
    assert_eq!(status_of(&mut body), 408);
    drop(heads);
    answers_promptly(&serve);
}

#[test]
fn oversized_heads_are_refused_with_431_and_the_server_lives_on() {
    let media = Media::new("serve-bighead");
    let serve = Serve::start(&media, &[]);
    let line = format!("X-Big: {}\r\n", "a".repeat(200_000));
    let many: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
    for extra in [line, many] {
        let mut s = TcpStream::connect(serve.http).unwrap();
        let req = format!("GET /v1/streams HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        // The server may answer and close before reading all of it.
        let _ = s.write_all(req.as_bytes());
        assert_eq!(status_of(&mut s), 431);
    }
    answers_promptly(&serve);
}

/// Whether `s` is answered `200` to `GET /healthz`, reading the whole
/// answer (head and `Content-Length` body) and keeping the connection
/// open for the next request.
fn healthz_ok(s: &mut TcpStream) -> bool {
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .is_err()
    {
        return false;
    }
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                return head.starts_with("HTTP/1.1 200");
            }
        }
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
}

/// Whether the server closed `s`, past the rest of any answer it sent
/// (within a bound).
fn http_closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match s.read_to_end(&mut Vec::new()) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn full_http_caps_evict_the_longest_idle_instead_of_refusing() {
    let media = Media::new("serve-conncap");
    let serve = Serve::start(&media, &[]);
    // 32 connections are allowed from one address. The first never
    // finishes its request head (a trickler); the others are answered
    // once, in order, and then sit idle.
    let local = [127, 0, 0, 1];
    let mut trickler = connect_from(local, serve.http);
    trickler.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
    let mut a: Vec<TcpStream> = (1..32)
        .map(|k| {
            let mut s = connect_from(local, serve.http);
            assert!(healthz_ok(&mut s), "connection {k}");
            s
        })
        .collect();
    // The 33rd from the same address is served, and the trickler, idle
    // since it connected, is closed for it; then the longest idle of
    // those answered.
    let mut extra = connect_from(local, serve.http);
    assert!(healthz_ok(&mut extra), "the newcomer was not served");
    assert!(
        http_closed_by_server(&mut trickler),
        "the trickler stayed open"
    );
    let mut again = connect_from(local, serve.http);
    assert!(healthz_ok(&mut again), "the second newcomer was not served");
    assert!(
        http_closed_by_server(&mut a[0]),
        "the longest idle stayed open"
    );
    assert!(healthz_ok(&mut a[1]), "the wrong connection was closed");
    // Seven more addresses fill the server (256 in all); a client from a
    // ninth is served, and the longest idle anywhere, a[2], gives way.
    let mut others = Vec::new();
    for last in 2..=8 {
        for _ in 0..32 {
            let mut s = connect_from([127, 0, 0, last], serve.http);
            assert!(healthz_ok(&mut s), "from 127.0.0.{last}");
            others.push(s);
        }
    }
    let mut newcomer = connect_from([127, 0, 0, 9], serve.http);
    assert!(healthz_ok(&mut newcomer), "the newcomer was not served");
    assert!(
        http_closed_by_server(&mut a[2]),
        "the longest idle stayed open"
    );
    assert!(healthz_ok(&mut a[3]), "the wrong connection was closed");
    // The metric's own connection makes the server's 257th: a[4] gives
    // way for it.
    assert_eq!(serve.metric("nagare_api_evicted_total"), 4.0);
    assert!(
        http_closed_by_server(&mut a[4]),
        "the longest idle stayed open"
    );
    answers_promptly(&serve);
}

#[test]
fn running_out_of_file_descriptors_is_survived() {
    use std::os::unix::process::CommandExt;
    let media = Media::new("serve-nofile");
    // A hard limit of 256 that serve cannot raise.
    let mut serve = Serve::start_with(&media, &[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe and touches only the
        // child between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    });
    // RTSP needs no token: idle connections take every descriptor serve
    // has left. How many connects that takes depends on how fast serve
    // accepts: on a loaded machine its backlog fills and connects time
    // out long before the descriptors are gone, so connecting goes on
    // (bounded in count and time) until serve says accepting failed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut hogs = Vec::new();
    while !serve.has_said("RTSP accept failed") {
        assert!(
            hogs.len() < 2000 && Instant::now() < deadline,
            "{} connections and serve never ran out: {:#?}",
            hogs.len(),
            serve.lines()
        );
        if let Ok(s) = TcpStream::connect_timeout(&serve.rtsp, Duration::from_millis(300)) {
            hogs.push(s);
        }
    }
    // Meanwhile an HTTP client cannot be accepted; it waits in the
    // backlog, and the API must not die of it.
    let mut waiting = TcpStream::connect(serve.http).unwrap();
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    serve.wait_for_log("HTTP accept failed");
    drop(hogs);
    // Once the descriptors come back, the waiting client is answered and
    // so is a new one (accepting retries until a descriptor is free).
    assert_eq!(status_of(&mut waiting), 200);
    let (status, text) = http(serve.http, "GET", "/healthz", None, None);
    assert!(status == 200, "the API never came back: {status} {text}");
    let (_, _, err) = serve.terminate();
    assert!(err.contains("HTTP accept failed"), "{err}");
}

/// Whether an RTSP OPTIONS on `s` is answered 200.
fn rtsp_options_ok(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if s.write_all(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 512];
    matches!(s.read(&mut buf), Ok(n) if n > 0 && buf[..n].starts_with(b"RTSP/1.0 200"))
}

/// Whether the server closed `s` (it reads the end, within a bound).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 512];
    matches!(s.read(&mut buf), Ok(0))
}

/// `n` connections from `from`, each answered once, in order: the first
/// is then the longest idle.
fn held_from(from: [u8; 4], n: usize, to: std::net::SocketAddr) -> Vec<TcpStream> {
    (0..n)
        .map(|k| {
            let mut s = connect_from(from, to);
            assert!(rtsp_options_ok(&mut s), "connection {k} from {from:?}");
            s
        })
        .collect()
}

#[test]
fn full_rtsp_caps_evict_the_longest_idle_and_keep_sessions() {
    let media = Media::new("serve-rtspcap");
    let serve = Serve::start(
        &media,
        &[
            "--max-connections",
            "30",
            "--max-connections-per-address",
            "20",
        ],
    );
    let mut a = held_from([127, 0, 0, 1], 20, serve.rtsp);
    // The 21st from the same address is served, and that address's
    // longest idle connection is closed for it.
    let mut extra = connect_from([127, 0, 0, 1], serve.rtsp);
    assert!(rtsp_options_ok(&mut extra), "the newcomer was not served");
    assert!(closed_by_server(&mut a[0]), "the longest idle stayed open");
    assert!(
        rtsp_options_ok(&mut a[1]),
        "the wrong connection was closed"
    );
    // a[2] sets up a session, then every other connection talks, so a[2]
    // is the longest idle: it still gives way only after every connection
    // without a session.
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let mut with_session = Rtsp::over(a[2].try_clone().unwrap());
    let r = with_session.request(
        "SETUP",
        &format!("{}/trackID=0", serve.url("bars")),
        &[(
            "Transport",
            &format!("RTP/AVP;unicast;client_port={port}-{}", port + 1),
        )],
    );
    assert_eq!(r.status, 200, "{r:?}");
    for s in a[3..].iter_mut().chain([&mut extra]) {
        assert!(rtsp_options_ok(s));
    }
    assert!(rtsp_options_ok(&mut a[1]));
    // Ten from another address fill the server (30); one more from a
    // third closes the longest idle anywhere without a session: a[3].
    let _b = held_from([127, 0, 0, 2], 10, serve.rtsp);
    let mut c = connect_from([127, 0, 0, 3], serve.rtsp);
    assert!(rtsp_options_ok(&mut c), "the newcomer was not served");
    assert!(closed_by_server(&mut a[3]), "the longest idle stayed open");
    assert!(
        rtsp_options_ok(&mut a[2]),
        "the session's connection was closed"
    );
    assert_eq!(serve.metric("nagare_rtsp_evicted_total"), 2.0);
    assert_eq!(serve.metric("nagare_rtsp_sessions"), 1.0);
}

#[test]
fn an_rtsp_client_that_never_reads_is_closed_and_stalls_nobody() {
    let media = Media::new("serve-rtsp-noread");
    let serve = Serve::start(&media, &[]);
    // 20,000 pipelined DESCRIBEs (some 10 MB of answers) whose answers
    // are never read: the server's writes to it stop once the buffers
    // fill, and then it stops reading its requests. Each is padded so
    // that a read holds fewer than the 32 pipelined requests after which
    // the machine would close the connection for flooding.
    let hog = TcpStream::connect(serve.rtsp).unwrap();
    SockRef::from(&hog).set_recv_buffer_size(4096).unwrap();
    hog.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let one = format!(
        "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\nX-Pad: {}\r\n\r\n",
        serve.url("bars"),
        "p".repeat(200)
    );
    let mut w = &hog;
    // A write timeout here only means the server stopped reading.
    let _ = w.write_all(one.repeat(20_000).as_bytes());
    // Meanwhile others are answered at once...
    for _ in 0..10 {
        let t = Instant::now();
        let mut c = Rtsp::connect(serve.rtsp);
        assert_eq!(c.request("DESCRIBE", &serve.url("bars"), &[]).status, 200);
        assert!(t.elapsed() < PROMPT, "took {:?}", t.elapsed());
    }
    // ...and once its bytes have waited 10 s unread, it is closed.
    crate::common::wait_until(
        "the unread connection to be closed",
        Duration::from_secs(60),
        || (serve.metric("nagare_rtsp_stalled_total") == 1.0).then_some(()),
    );
    drop(hog);
}

#[test]
fn links_out_of_media_are_not_served_and_one_bad_file_is_skipped() {
    let media = Media::new("serve-files");
    // A link to a file outside --media, one to a file inside, and a raw
    // file whose sidecar has a typo.
    let outside = crate::common::Scratch::new("serve-files-outside");
    std::fs::write(outside.path("secret.ts"), b"not for clients").unwrap();
    std::os::unix::fs::symlink(outside.path("secret.ts"), media.dir.path("leak.ts")).unwrap();
    std::os::unix::fs::symlink(media.dir.path("clip.yuv"), media.dir.path("same.yuv")).unwrap();
    std::fs::write(
        media.dir.path("same.yuv.toml"),
        "size = \"320x240\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n",
    )
    .unwrap();
    std::fs::write(media.dir.path("typo.yuv"), vec![0u8; 1024]).unwrap();
    std::fs::write(
        media.dir.path("typo.yuv.toml"),
        "size = \"320x240\"\npix_fmt = \"uyvy42\"\nfps = \"25\"\n",
    )
    .unwrap();
    // Noise with every sync byte in place and well-formed headers: it
    // would "play" 0 packets.
    let noise: Vec<u8> = (0..200 * 188)
        .map(|i: usize| match i % 188 {
            0 => 0x47,
            3 => 0x10,
            _ => (i.wrapping_mul(2_654_435_761) >> 13) as u8,
        })
        .collect();
    std::fs::write(media.dir.path("noise.ts"), noise).unwrap();
    let serve = Serve::start(&media, &[]);
    let list: serde_json::Value = serve.api_json("GET", "/v3/paths/list", None, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"clip.yuv") && names.contains(&"same.yuv"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"leak.ts"),
        "a link out of --media is served: {names:?}"
    );
    assert!(!names.contains(&"typo.yuv"), "{names:?}");
    assert!(!names.contains(&"noise.ts"), "{names:?}");
    // Sources are named by catalog name, not by the server's paths.
    let text = list.to_string();
    assert!(!text.contains(&media.path()), "{text}");
    let (_, _, err) = serve.terminate();
    assert!(err.contains("a symbolic link out of --media"), "{err}");
    assert!(err.contains("skipping 'typo.yuv'"), "{err}");
    assert!(
        err.contains("skipping 'noise.ts'") && err.contains("no Program Association Table"),
        "{err}"
    );
}
