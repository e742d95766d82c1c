//! `nagare probe server`: one test at a time; others are told "busy".

use std::hash::{BuildHasher, RandomState};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nagare_proto::probe::analysis::analyze;
use nagare_proto::probe::{
    ControlMessage, PROTOCOL_VERSION, Refusal, Schedule, TestParams, records_to_frames,
};

use super::ServerArgs;
use super::control::{self, Frame};
use super::stream::{Receiver, StreamShape, bind, record_cap, send_stream};
use crate::cli::parse_bit_rate;

/// How long the receiver keeps listening after the sender said it is done.
pub const DRAIN: Duration = Duration::from_millis(300);
/// `--max-rate` of a server listening beyond loopback, bits/s.
const DEFAULT_REMOTE_MAX_RATE: u64 = 10_000_000_000;
/// Longest wait for a client's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(args: ServerArgs) -> Result<ExitCode> {
    if !args.listen.ip().is_loopback() && args.token.is_none() {
        bail!(
            "listening on {} reaches beyond this host: give --token SECRET (clients pass the same), \
             or listen on 127.0.0.1",
            args.listen
        );
    }
    let max_rate = match &args.max_rate {
        Some(r) => Some(parse_bit_rate(r).context("--max-rate")?),
        None => default_max_rate(args.listen),
    };
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("listening on TCP {}: is the port taken?", args.listen))?;
    let local = listener.local_addr()?;
    // The test stream uses the same port number, as iperf3 does.
    let udp = bind(local)?;
    eprintln!(
        "nagare probe server listening on {local} (TCP control, UDP test stream); port {}",
        local.port()
    );
    let busy = Arc::new(AtomicBool::new(false));
    let udp = Arc::new(udp);
    let limits = Arc::new(Limits {
        token: args.token,
        max_rate,
    });
    let mut done = 0u64;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if busy.swap(true, Ordering::AcqRel) {
            std::thread::spawn(move || refuse_busy(conn));
            continue;
        }
        let (busy2, udp2, limits2) = (busy.clone(), udp.clone(), limits.clone());
        let last = args.tests.is_some_and(|t| done + 1 >= t);
        let worker = std::thread::spawn(move || {
            let peer = conn.peer_addr().ok();
            if let Err(e) = session(conn, &udp2, &limits2) {
                eprintln!(
                    "nagare probe server: test from {} failed: {e:#}",
                    peer.map_or("?".to_string(), |p| p.to_string())
                );
            }
            busy2.store(false, Ordering::Release);
        });
        done += 1;
        if last {
            let _ = worker.join();
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Default `--max-rate`: none on loopback (the test stays on this host),
/// else a cap no single path test should need to exceed.
fn default_max_rate(listen: SocketAddr) -> Option<u64> {
    (!listen.ip().is_loopback()).then_some(DEFAULT_REMOTE_MAX_RATE)
}

/// What a client must satisfy before a test runs.
struct Limits {
    /// Token clients must present.
    token: Option<String>,
    /// Highest rate a client may ask for, bits/s.
    max_rate: Option<u64>,
}

/// Whether `given` is the token, in time that does not depend on where
/// the two first differ (only on their lengths), so timing the refusal
/// does not reveal the token byte by byte.
fn token_matches(given: Option<&str>, want: &str) -> bool {
    let Some(given) = given else { return false };
    let (a, b) = (given.as_bytes(), want.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    // xor-fold every byte; no early exit.
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn refuse_busy(mut conn: TcpStream) {
    // Read the hello first, so closing does not reset the connection
    // before the client has read the answer.
    let _ = control::receive(&mut conn, HELLO_TIMEOUT);
    let _ = control::send(
        &mut conn,
        &ControlMessage::Refused {
            version: PROTOCOL_VERSION,
            reason: Refusal::Busy,
            message: "another test is running on this server; try again when it ends".into(),
        },
    );
}

fn refuse(conn: &mut TcpStream, reason: Refusal, message: String) -> Result<()> {
    control::send(
        conn,
        &ControlMessage::Refused {
            version: PROTOCOL_VERSION,
            reason,
            message: message.clone(),
        },
    )?;
    bail!("refused: {message}")
}

fn session(mut conn: TcpStream, udp: &UdpSocket, limits: &Limits) -> Result<()> {
    conn.set_nodelay(true)?;
    let peer = conn.peer_addr()?;
    let Some(Frame::Message(hello)) = control::receive(&mut conn, HELLO_TIMEOUT)? else {
        bail!("client sent no hello");
    };
    let ControlMessage::Hello {
        version,
        token: given,
        params,
    } = hello
    else {
        return refuse(&mut conn, Refusal::Other, "expected a hello first".into());
    };
    if version != PROTOCOL_VERSION {
        return refuse(
            &mut conn,
            Refusal::Version,
            format!(
                "client speaks probe protocol version {version}, this server speaks {PROTOCOL_VERSION}: \
                 run the same nagare release on both ends"
            ),
        );
    }
    if let Some(t) = &limits.token
        && !token_matches(given.as_deref(), t)
    {
        return refuse(&mut conn, Refusal::Token, "missing or wrong --token".into());
    }
    if let Some(max) = limits.max_rate
        && params.rate_bps > max
    {
        return refuse(
            &mut conn,
            Refusal::Params,
            format!(
                "rate {} Mbit/s above this server's --max-rate {} Mbit/s; ask for a \
                 lower --rate, or start the server with a higher --max-rate",
                params.rate_bps as f64 / 1e6,
                max as f64 / 1e6
            ),
        );
    }
    let schedule = match params.validate() {
        Ok(s) => s,
        Err(e) => return refuse(&mut conn, Refusal::Params, format!("{e}")),
    };
    let session = RandomState::new().hash_one((Instant::now(), peer, std::process::id()));
    // Strangers that arrived between tests belong to no test.
    drain(udp);
    control::send(
        &mut conn,
        &ControlMessage::Welcome {
            version: PROTOCOL_VERSION,
            session,
        },
    )?;
    let test = Test {
        udp,
        peer,
        session,
        params: &params,
        schedule: &schedule,
        start: Instant::now(),
    };
    if params.reverse {
        serve_reverse(&mut conn, &test)
    } else {
        serve_forward(&mut conn, &test)
    }
}

/// One accepted test: what both directions of it serve from.
struct Test<'a> {
    /// The test-stream socket.
    udp: &'a UdpSocket,
    /// The client's control address; only its IP may take part.
    peer: SocketAddr,
    session: u64,
    params: &'a TestParams,
    schedule: &'a Schedule,
    /// Clock zero of receive and send times.
    start: Instant,
}

fn drain(udp: &UdpSocket) {
    let mut buf = [0u8; 2048];
    if udp.set_nonblocking(true).is_ok() {
        while udp.recv_from(&mut buf).is_ok() {}
        let _ = udp.set_nonblocking(false);
    }
}

/// Control-connection reader on its own thread, so UDP reception never
/// waits on TCP.
fn watch(conn: &TcpStream, limit: Duration) -> Result<crossbeam_channel::Receiver<Result<Frame>>> {
    let mut c = conn.try_clone()?;
    let (tx, rx) = crossbeam_channel::bounded(4);
    std::thread::spawn(move || {
        loop {
            let r = control::receive(&mut c, limit);
            let end = !matches!(r, Ok(Some(_)));
            let _ = tx.send(r.and_then(|f| f.context("peer closed the control connection")));
            if end {
                return;
            }
        }
    });
    Ok(rx)
}

fn test_limit(params: &TestParams) -> Duration {
    Duration::from_millis(params.duration_ms) + Duration::from_secs(30)
}

fn serve_forward(conn: &mut TcpStream, t: &Test<'_>) -> Result<()> {
    let rx = watch(conn, test_limit(t.params))?;
    let mut recv = Receiver::new(
        t.udp,
        t.session,
        t.peer.ip(),
        record_cap(t.schedule),
        t.start,
    )?;
    let deadline = t.start + test_limit(t.params);
    let mut done_at: Option<Instant> = None;
    let mut sender = None;
    loop {
        let now = Instant::now();
        if done_at.is_some_and(|d| now >= d + DRAIN) {
            break;
        }
        if now >= deadline {
            bail!("the client never said it was done");
        }
        recv.poll(now + Duration::from_millis(20))?;
        if done_at.is_none()
            && let Ok(msg) = rx.try_recv()
        {
            match msg? {
                Frame::Message(ControlMessage::Done { sender: s }) => {
                    sender = Some(s);
                    done_at = Some(Instant::now());
                }
                Frame::Message(ControlMessage::Abort { message }) => {
                    bail!("client aborted: {message}")
                }
                _ => bail!("unexpected control message during the test"),
            }
        }
    }
    let sent = sender.map_or(0, |s| s.sent);
    let mut report = analyze(&recv.arrivals, sent, t.params, t.schedule);
    report.strangers += recv.strangers;
    report.receiver_drops = recv.receiver_drops();
    let records = if t.params.records {
        recv.arrivals.len() as u64
    } else {
        0
    };
    control::send(
        conn,
        &ControlMessage::Report {
            receiver: Box::new(report),
            records,
        },
    )?;
    if t.params.records {
        use std::io::Write;
        for f in records_to_frames(&recv.arrivals) {
            conn.write_all(&f).context("sending records")?;
        }
    }
    Ok(())
}

fn serve_reverse(conn: &mut TcpStream, t: &Test<'_>) -> Result<()> {
    // Stream only to the address the client opens from, and only if it is
    // the TCP peer's: the server never sends to a third party.
    let mut recv = Receiver::new(t.udp, t.session, t.peer.ip(), 0, t.start)?;
    let wait = Instant::now() + Duration::from_secs(5);
    while recv.opened.is_none() {
        if Instant::now() >= wait {
            bail!("the client's UDP open datagram never arrived (firewall or NAT on the way?)");
        }
        recv.poll(Instant::now() + Duration::from_millis(20))?;
    }
    let target = recv.opened.context("open address vanished")?;
    let stop = Arc::new(AtomicBool::new(false));
    // Echo requests still need answers while the main thread sends.
    let stop2 = stop.clone();
    let echo = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            if recv
                .poll(Instant::now() + Duration::from_millis(20))
                .is_err()
            {
                break;
            }
        }
    });
    // The client aborting (closing) must stop the stream early.
    let rx = watch(conn, test_limit(t.params))?;
    let stop3 = stop.clone();
    let abort_watch = std::thread::spawn(move || {
        // Any frame or close from the client during the stream means stop.
        if rx.recv().is_ok() {
            stop3.store(true, Ordering::Relaxed);
        }
    });
    let report = send_stream(
        t.udp,
        Some(target),
        t.session,
        t.schedule,
        StreamShape::of(t.params),
        &stop,
    );
    control::send(conn, &ControlMessage::Done { sender: report })?;
    // Keep answering echoes until the client closes the connection.
    let _ = abort_watch.join();
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(token_matches(Some("s3cret"), "s3cret"));
        assert!(!token_matches(Some("s3creT"), "s3cret"));
        assert!(!token_matches(Some("s3cre"), "s3cret"));
        assert!(!token_matches(Some("s3crett"), "s3cret"));
        assert!(!token_matches(Some(""), "s3cret"));
        assert!(!token_matches(None, "s3cret"));
    }

    #[test]
    fn rate_is_capped_beyond_loopback_only() {
        let at = |s: &str| default_max_rate(s.parse().unwrap());
        assert_eq!(at("127.0.0.1:5201"), None);
        assert_eq!(at("[::1]:5201"), None);
        assert_eq!(at("0.0.0.0:5201"), Some(10_000_000_000));
        assert_eq!(at("[::]:5201"), Some(10_000_000_000));
        assert_eq!(at("192.0.2.7:5201"), Some(10_000_000_000));
    }
}
