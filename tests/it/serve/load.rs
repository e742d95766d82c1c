//! One server, 100 concurrent push streams of a small pattern on
//! loopback: every frame of every stream arrives (no sequence gap), and
//! the server counts no underrun.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use nagare_api::serve::{StreamInfo, StreamList};

use super::harness::{Media, start_with_tiny};

const STREAMS: usize = 100;
/// Frames each receiver waits for (two seconds at 25 fps).
const FRAMES_EACH: usize = 50;

/// Receives one stream until `FRAMES_EACH` frames ended (marker bits),
/// bounded by 60 s; returns (frames, sequence gaps, the first gap) and
/// the socket, kept open until its stream stops (a port closed while a
/// stream still sends to it could be handed to another test's socket).
fn receive(sock: UdpSocket) -> (usize, usize, Option<(u16, u16, usize)>, UdpSocket) {
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 2048];
    let (mut frames, mut gaps, mut last) = (0, 0, None::<u16>);
    let (mut first_gap, mut count, mut own) = (None, 0, None::<u32>);
    while frames < FRAMES_EACH && Instant::now() < deadline {
        let Ok(n) = sock.recv(&mut buf) else { break };
        if n < 12 {
            continue;
        }
        // The stream's SSRC is the first one seen; a stray datagram from
        // another test's server (a port reused after its socket closed)
        // is not this stream's loss.
        let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if *own.get_or_insert(ssrc) != ssrc {
            continue;
        }
        let seq = u16::from_be_bytes([buf[2], buf[3]]);
        count += 1;
        if let Some(l) = last
            && seq != l.wrapping_add(1)
        {
            gaps += 1;
            first_gap.get_or_insert((l, seq, count));
        }
        last = Some(seq);
        frames += usize::from(buf[1] & 0x80 != 0);
    }
    (frames, gaps, first_gap, sock)
}

#[test]
fn a_hundred_concurrent_streams_lose_no_frame() {
    let media = Media::new("serve-load");
    let serve = start_with_tiny(&media);
    let mut receivers = Vec::with_capacity(STREAMS);
    let mut ids = Vec::with_capacity(STREAMS);
    // Every socket is bound before the first receiver finishes: a port
    // freed early could be handed to a later socket, which would then get
    // two streams.
    let sockets: Vec<UdpSocket> = (0..STREAMS)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for sock in sockets {
        let body = format!(
            r#"{{"source": "tiny", "destinations": ["{}"]}}"#,
            sock.local_addr().unwrap()
        );
        let made: StreamInfo = serve.api_json("POST", "/v1/streams", Some(&body), 201);
        ids.push(made.id);
        receivers.push(std::thread::spawn(move || receive(sock)));
    }
    let results: Vec<_> = receivers.into_iter().map(|t| t.join().unwrap()).collect();
    let short = results.iter().filter(|r| r.0 < FRAMES_EACH).count();
    let gaps: usize = results.iter().map(|r| r.1).sum();
    let first: Vec<_> = results.iter().filter_map(|r| r.2).take(5).collect();
    assert_eq!(
        (short, gaps),
        (0, 0),
        "streams short of frames, sequence gaps (first: {first:?})"
    );
    let list: StreamList = serve.api_json("GET", "/v1/streams", None, 200);
    assert_eq!(list.streams.len(), STREAMS);
    let underruns: u64 = list.streams.iter().map(|s| s.counters.underruns).sum();
    let errors: u64 = list.streams.iter().map(|s| s.counters.send_errors).sum();
    assert_eq!((underruns, errors), (0, 0));
    for id in ids {
        serve.api_json::<StreamInfo>("DELETE", &format!("/v1/streams/{id}"), None, 200);
    }
    drop(results);
}
