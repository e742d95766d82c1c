//! RTSP sessions against `nagare serve` with a bare client: bad requests,
//! keep-alive and reaping, PAUSE, a slow TCP reader next to a healthy one.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use nagare_api::serve::{StreamList, StreamState};

use super::harness::{Media, Rtsp, Serve, start_with_tiny_and};
use crate::common::wait_until;

#[test]
fn bad_rtsp_requests_get_4xx_and_the_server_lives_on() {
    let media = Media::new("serve-bad-rtsp");
    let serve = Serve::start(&media, &[]);
    let url = serve.url("clip.yuv");
    let mut c = Rtsp::connect(serve.rtsp);
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, u16);
    let cases: Vec<Case> = vec![
        ("DESCRIBE", serve.url("nope"), vec![], 404),
        ("DESCRIBE", url.clone(), vec![("Accept", "text/html")], 406),
        ("PLAY", url.clone(), vec![], 455),
        (
            "SETUP",
            format!("{url}/trackID=5"),
            vec![("Transport", "RTP/AVP;unicast;client_port=5000-5001")],
            404,
        ),
        (
            "SETUP",
            format!("{url}/trackID=0"),
            vec![("Transport", "RTP/SAVP;unicast")],
            461,
        ),
        (
            "SETUP",
            format!("{url}/trackID=0"),
            vec![("Transport", "RTP/AVP;multicast")],
            461,
        ),
        ("RECORD", url.clone(), vec![], 405),
        ("FROB", url.clone(), vec![], 501),
        ("PAUSE", url.clone(), vec![("Session", "0123")], 454),
        ("OPTIONS", url.clone(), vec![("Require", "funky")], 551),
    ];
    for (method, target, headers, want) in cases {
        let r = c.request(method, &target, &headers);
        assert_eq!(r.status, want, "{method} {target} {headers:?}: {r:?}");
    }
    // A request without CSeq, then garbage that ends the connection.
    c.send_raw(b"OPTIONS rtsp://127.0.0.1/ RTSP/1.0\r\n\r\n");
    assert_eq!(c.reply().status, 400);
    c.send_raw(b"\x00\x01 nonsense \r\n\r\n");
    assert_eq!(c.reply().status, 400);
    // A head ended by bare line feeds, and Content-Length headers that
    // disagree: 400 at once, not a wait for the size limit or a guess.
    let mut bare = Rtsp::connect(serve.rtsp);
    bare.send_raw(b"OPTIONS * RTSP/1.0\nCSeq: 1\n\n");
    assert_eq!(bare.reply().status, 400);
    let mut two = Rtsp::connect(serve.rtsp);
    two.send_raw(
        b"GET_PARAMETER * RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(two.reply().status, 400);
    // The server still answers a new client.
    let mut d = Rtsp::connect(serve.rtsp);
    let r = d.request("OPTIONS", &url, &[]);
    assert_eq!(r.status, 200);
    assert!(r.header("Public").unwrap().contains("GET_PARAMETER"));
    let r = d.request("DESCRIBE", &url, &[]);
    let sdp = String::from_utf8_lossy(&r.body);
    assert!(sdp.contains("a=rtpmap:96 raw/90000"), "{sdp}");
    assert!(sdp.contains("a=control:trackID=0"), "{sdp}");
    assert!(serve.metric("nagare_rtsp_refused_total") >= 12.0);
}

/// RTP sequence numbers of the datagrams on `sock` until `n` arrived or
/// 20 s passed.
fn sequences(sock: &UdpSocket, n: usize) -> Vec<u16> {
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = vec![0u8; 65536];
    let mut seqs = Vec::with_capacity(n);
    let mut own = None::<u32>;
    while seqs.len() < n && Instant::now() < deadline {
        match sock.recv(&mut buf) {
            Ok(len) if len >= 12 => {
                // Only the stream's own SSRC (the first seen) counts.
                let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
                if *own.get_or_insert(ssrc) == ssrc {
                    seqs.push(u16::from_be_bytes([buf[2], buf[3]]));
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    seqs
}

fn udp_transport(sock: &UdpSocket) -> String {
    let port = sock.local_addr().unwrap().port();
    format!("RTP/AVP;unicast;client_port={port}-{}", port + 1)
}

#[test]
fn a_stalled_tcp_reader_is_dropped_and_a_udp_reader_beside_it_loses_nothing() {
    let media = Media::new("serve-slow");
    // The healthy reader plays a small stream (100 packets/s), so that
    // this test's socket buffer never overflows on a busy machine.
    let serve = start_with_tiny_and(&media, &["--write-queue", "64"]);
    // The stalled reader: plays 23 Mbit/s over TCP and never reads.
    let mut stalled = Rtsp::connect(serve.rtsp);
    stalled.play(&serve.url("bars"), "RTP/AVP/TCP;unicast;interleaved=0-1");
    // The healthy reader, over UDP.
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut healthy = Rtsp::connect(serve.rtsp);
    healthy.play(&serve.url("tiny"), &udp_transport(&rx));
    // The healthy stream is read from now on, while the stalled one fills
    // its queue: 300 packets (three seconds), all of them, in order.
    // (The socket comes back and stays open: a closed port would make
    // the server's sends fail.)
    let reading = std::thread::spawn(move || (sequences(&rx, 300), rx));
    wait_until(
        "the stalled reader to be dropped",
        Duration::from_secs(30),
        || (serve.metric("nagare_slow_readers_dropped_total") >= 1.0).then_some(()),
    );
    let (seqs, _rx) = reading.join().unwrap();
    assert_eq!(seqs.len(), 300);
    let gaps: Vec<(u16, u16)> = seqs
        .windows(2)
        .filter(|w| w[1] != w[0].wrapping_add(1))
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        gaps.is_empty(),
        "the UDP reader lost or reordered packets: {gaps:?}"
    );
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert_eq!(list.streams.len(), 1, "the dropped reader's stream is gone");
    let s = &list.streams[0];
    assert_eq!(s.state, StreamState::Playing);
    assert_eq!((s.counters.queue_drops, s.counters.send_errors), (0, 0));
}

#[test]
fn keepalive_pause_resume_and_a_vanished_client_is_reaped() {
    let media = Media::new("serve-reap");
    let serve = Serve::start(&media, &["--session-timeout", "2"]);
    let url = serve.url("bars");
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut c = Rtsp::connect(serve.rtsp);
    let session = c.play(&url, &udp_transport(&rx));
    let before = sequences(&rx, 50);
    assert_eq!(before.len(), 50);
    let r = c.request("GET_PARAMETER", &url, &[("Session", &session)]);
    assert_eq!(r.status, 200);
    let r = c.request("PAUSE", &url, &[("Session", &session)]);
    assert_eq!(r.status, 200);
    wait_until("the stream to pause", Duration::from_secs(10), || {
        let l: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
        (l.streams[0].state == StreamState::Paused).then_some(())
    });
    let r = c.request("PLAY", &url, &[("Session", &session)]);
    assert_eq!(r.status, 200);
    let after = sequences(&rx, 50);
    assert_eq!(after.len(), 50);
    // The sender's numbers go on across the pause: no gap, no repeat.
    let all: Vec<u16> = before.iter().chain(&after).copied().collect();
    assert!(
        all.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{all:?}"
    );
    assert_eq!(serve.metric("nagare_rtsp_sessions"), 1.0);
    // The client goes quiet: after the timeout its session and stream go.
    wait_until(
        "the quiet session to be reaped",
        Duration::from_secs(30),
        || (serve.metric("nagare_rtsp_sessions") == 0.0).then_some(()),
    );
    let l: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert!(l.streams.is_empty());
}
