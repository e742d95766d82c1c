//! Many idle RTSP connections against one serve: they all live on one
//! event loop thread, cost little memory, and neither another address
//! nor FFmpeg is kept out while they are held.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::harness::{Media, Rtsp, Serve, connect_from, ffmpeg_pull};
use crate::common::{Scratch, require};

/// Connections held by default; `NAGARE_IDLE_CONNECTIONS` asks for more
/// (docs/serve.md reports 10,000).
const DEFAULT_IDLE: usize = 2000;
/// Threads serve may have: main, signals, the reader, one pacer, the API
/// and RTSP loops, and room for the API's handler pool.
const MAX_THREADS: u64 = 10;
/// Resident memory allowed with the connections held.
const MAX_RSS_KB: u64 = 64 * 1024;

/// Raises this process's soft descriptor limit to fit `n` connections;
/// false (and a note) where the hard limit cannot.
fn room_for(n: usize) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit fill and read a plain struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return false;
        }
        let want = (n as libc::rlim_t + 256).min(lim.rlim_max);
        if lim.rlim_cur < want {
            lim.rlim_cur = want;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return false;
            }
        }
    }
    let fits = lim.rlim_cur >= n as libc::rlim_t + 256;
    if !fits {
        eprintln!("skipping: {n} connections need ulimit -Hn of {}", n + 256);
    }
    fits
}

/// A field of /proc/PID/status, in its unit (kB for memory).
fn status_field(pid: u32, name: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Opens `n` connections from 127.0.0.1, then asks OPTIONS on each and
/// reads every answer: each was accepted and is served, none waits in
/// the listen backlog.
fn hold(serve: &Serve, n: usize) -> Vec<TcpStream> {
    let mut held: Vec<TcpStream> = (0..n)
        .map(|_| connect_from([127, 0, 0, 1], serve.rtsp))
        .collect();
    for s in &mut held {
        s.write_all(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
            .unwrap();
    }
    for (k, s) in held.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut head = [0u8; 16];
        s.read_exact(&mut head)
            .unwrap_or_else(|e| panic!("connection {k} was not answered: {e}"));
        assert_eq!(&head[..13], b"RTSP/1.0 200 ", "connection {k}");
        // The rest of the answer stays unread: a client that reads
        // nothing more is what an idle connection is.
    }
    held
}

/// FFmpeg pulls the clip over TCP; its frames must be the file's.
fn ffmpeg_plays(serve: &Serve, media: &Media) {
    let s = Scratch::new("serve-idle-ff");
    let out = s.path("tcp.yuv");
    ffmpeg_pull(&serve.url("clip.yuv?loop=1"), "tcp", &out);
    assert!(
        std::fs::read(&out).unwrap() == media.clip,
        "FFmpeg's frames differ from the file"
    );
}

#[test]
fn thousands_of_idle_connections_take_one_thread_and_little_memory() {
    let n = std::env::var("NAGARE_IDLE_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_IDLE);
    if !room_for(n) || !require("ffmpeg") {
        return;
    }
    let media = Media::new("serve-idle");
    let per_address = (n + 16).to_string();
    let total = (n + 64).to_string();
    let serve = Serve::start(
        &media,
        &[
            "--pacers",
            "1",
            "--max-connections",
            &total,
            "--max-connections-per-address",
            &per_address,
        ],
    );
    let held = hold(&serve, n);
    // Another address is served while they are held...
    let mut other = Rtsp::over(connect_from([127, 0, 0, 2], serve.rtsp));
    let r = other.request("DESCRIBE", &serve.url("clip.yuv"), &[]);
    assert_eq!(r.status, 200, "{r:?}");
    // ...and so is FFmpeg, whose frames arrive whole.
    ffmpeg_plays(&serve, &media);
    let threads = status_field(serve.pid(), "Threads");
    let rss = status_field(serve.pid(), "VmRSS");
    let peak = status_field(serve.pid(), "VmHWM");
    eprintln!(
        "{n} idle RTSP connections: serve has {threads} threads, VmRSS {rss} kB, VmHWM {peak} kB"
    );
    assert!(threads < MAX_THREADS, "{threads} threads");
    assert!(rss < MAX_RSS_KB, "{rss} kB resident");
    // None was evicted to make room.
    assert_eq!(serve.metric("nagare_rtsp_evicted_total"), 0.0);
    let (status, _, err) = serve.terminate();
    assert!(status.success(), "{err}");
    drop(held);
}
