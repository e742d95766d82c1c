//! `nagare probe server`: one test at a time; others are told "busy".
//! A client holds the test slot only once its hello is complete: until
//! then it waits in a capped lobby with a deadline for the whole hello,
//! so a trickling or silent connection never makes the server busy.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::Nanos;
use nagare_proto::lobby::{Guest, Lobby, LobbyLimits};
use nagare_proto::probe::{
    Event, FRAME_HEADER_LEN, FrameHeader, FrameKind, MAX_HELLO_LEN, ServerConfig, Session,
    receiver_total, sender_total,
};

use super::args::ServerArgs;
use super::link::{Link, Outcome};
use super::output::live_lines;
use crate::cli::parse_bit_rate;
use crate::net::udp::bind_buffered;

/// `--max-rate` of a server listening beyond loopback, bits/s.
const DEFAULT_REMOTE_MAX_RATE: u64 = 10_000_000_000;

pub(super) fn run(args: ServerArgs) -> Result<ExitCode> {
    if !args.listen.ip().is_loopback() && args.token.is_none() {
        bail!(
            "listening on {} reaches beyond this host: give --token SECRET (clients pass the same), \
             or listen on 127.0.0.1",
            args.listen
        );
    }
    let max_rate_bps = match &args.max_rate {
        Some(r) => Some(parse_bit_rate(r).context("--max-rate")?),
        None => default_max_rate(args.listen),
    };
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("listening on TCP {}: is the port taken?", args.listen))?;
    let local = listener.local_addr()?;
    // The test stream uses the same port number, as iperf3 does.
    let udp = Arc::new(bind_buffered(local)?);
    eprintln!(
        "nagare probe server listening on {local} (TCP control, UDP test stream); port {}",
        local.port()
    );
    let config = Arc::new(ServerConfig {
        token: args.token,
        max_rate_bps,
    });
    let shared = Arc::new(Shared {
        door: Door::new(LobbyLimits::default()),
        busy: AtomicBool::new(false),
        served: AtomicU64::new(0),
        udp,
        config,
    });
    let more = || {
        args.tests
            .is_none_or(|t| shared.served.load(Ordering::Acquire) < t)
    };
    let mut guest: Guest = 0;
    // SIGTERM / Ctrl-C end the loop: the server says so and exits 0.
    while let Some(conn) = crate::signal::accept_while(&listener, more) {
        let Ok((conn, peer)) = conn else { continue };
        guest += 1;
        let Some(deadline) = shared.door.enter(guest, &conn, peer.ip()) else {
            continue;
        };
        let host = shared.clone();
        let id = guest;
        // One thread per connection in the lobby, which is capped; it
        // holds a 5-byte header and at most a hello's bytes.
        let spawned = std::thread::Builder::new()
            .name("hello".into())
            .spawn(move || host.greet(id, conn, deadline));
        if spawned.is_err() {
            shared.door.leave(guest);
        }
    }
    if crate::signal::stopping() {
        let done = shared.served.load(Ordering::Acquire);
        eprintln!("nagare probe server: stopped by a signal after {done} tests");
    }
    Ok(ExitCode::SUCCESS)
}

/// What the connection threads share.
struct Shared {
    door: Door,
    busy: AtomicBool,
    served: AtomicU64,
    udp: Arc<UdpSocket>,
    config: Arc<ServerConfig>,
}

impl Shared {
    /// Reads the hello within the lobby's deadline; only then is the
    /// client given the test slot (or told the server is busy). A client
    /// that trickles, stalls or sends too much never holds the slot.
    fn greet(&self, guest: Guest, conn: TcpStream, deadline: Instant) {
        let hello = read_hello(&conn, deadline);
        // Evicted: the door already closed it.
        if !self.door.leave(guest) {
            return;
        }
        let hello = match hello {
            Ok(h) => h,
            Err(e) => {
                let peer = conn.peer_addr().map_or("?".to_string(), |p| p.to_string());
                eprintln!(
                    "nagare probe server: connection from {peer} closed before a test: {e:#}"
                );
                return;
            }
        };
        if self.busy.swap(true, Ordering::AcqRel) {
            refuse_busy(conn, hello);
            return;
        }
        let peer = conn.peer_addr().ok();
        let result = serve(conn, hello, &self.udp, &self.config);
        // Free before saying why it failed: whoever reads the line may
        // start the next test at once.
        self.busy.store(false, Ordering::Release);
        self.served.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = result {
            eprintln!(
                "nagare probe server: test from {} failed: {e:#}",
                peer.map_or("?".to_string(), |p| p.to_string())
            );
        }
    }
}

/// nagare-proto's [`Lobby`] with the sockets it may evict.
struct Door {
    origin: Instant,
    lobby: Mutex<(Lobby, HashMap<Guest, TcpStream>)>,
}

impl Door {
    fn new(limits: LobbyLimits) -> Door {
        Door {
            origin: Instant::now(),
            lobby: Mutex::new((Lobby::new(limits), HashMap::new())),
        }
    }

    /// Lets `conn` in, closing whoever the lobby evicts; returns the
    /// handshake's deadline.
    fn enter(&self, guest: Guest, conn: &TcpStream, from: IpAddr) -> Option<Instant> {
        let now = Nanos::from(self.origin.elapsed());
        let clone = conn.try_clone().ok()?;
        let mut g = self.lobby.lock().unwrap_or_else(|p| p.into_inner());
        let (lobby, socks) = &mut *g;
        for out in lobby.enter(now, guest, from) {
            if let Some(s) = socks.remove(&out) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        socks.insert(guest, clone);
        let at = lobby.deadline(guest)?;
        Some(self.origin + Duration::from(at))
    }

    /// `guest` is done with the lobby; false if it had been evicted.
    fn leave(&self, guest: Guest) -> bool {
        let mut g = self.lobby.lock().unwrap_or_else(|p| p.into_inner());
        let (lobby, socks) = &mut *g;
        socks.remove(&guest);
        lobby.leave(guest)
    }
}

/// Reads the client's first frame (its hello) by `deadline`, the whole
/// handshake's and not each read's; refuses a length prefix larger than
/// a hello needs before allocating.
fn read_hello(mut conn: &TcpStream, deadline: Instant) -> Result<Vec<u8>> {
    let mut frame = vec![0u8; FRAME_HEADER_LEN];
    read_by(&mut conn, &mut frame, deadline)?;
    let header = FrameHeader::parse(&frame)?;
    if header.kind != FrameKind::Json || header.len > MAX_HELLO_LEN {
        bail!("a first frame of {} bytes is not a hello", header.len);
    }
    frame.resize(FRAME_HEADER_LEN + header.len, 0);
    read_by(&mut conn, &mut frame[FRAME_HEADER_LEN..], deadline)?;
    Ok(frame)
}

/// `read_exact` that gives up at `deadline`, however the bytes trickle.
fn read_by(conn: &mut &TcpStream, mut buf: &mut [u8], deadline: Instant) -> Result<()> {
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no hello within the handshake deadline");
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(buf) {
            Ok(0) => bail!("closed before its hello"),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Default `--max-rate`: none on loopback (the test stays on this host),
/// else a cap no single path test should need to exceed.
fn default_max_rate(listen: SocketAddr) -> Option<u64> {
    (!listen.ip().is_loopback()).then_some(DEFAULT_REMOTE_MAX_RATE)
}

/// A random session id, so datagrams of an earlier test never count.
fn session_id() -> Result<u64> {
    getrandom::u64().map_err(|e| anyhow!("drawing a session id: {e}"))
}

fn refuse_busy(conn: TcpStream, hello: Vec<u8>) {
    let Ok(peer) = conn.peer_addr() else { return };
    let Ok(mut link) = Link::with_prefix(conn, None, hello) else {
        return;
    };
    let mut session = Session::busy(link.now(), peer);
    let _ = link.run(&mut session, None, |_, _| {});
}

/// Runs one test for the client on `conn`, logging its intervals and,
/// at its end, one line of what it measured.
fn serve(conn: TcpStream, hello: Vec<u8>, udp: &UdpSocket, config: &ServerConfig) -> Result<()> {
    let peer = conn.peer_addr()?;
    let mut link = Link::with_prefix(conn, Some(udp), hello)?;
    let mut session = Session::server(link.now(), peer, config.clone(), session_id()?);
    let outcome = link.run(&mut session, None, |e, s| match e {
        Event::Accepted { .. } => {
            if let (Some(p), Some(sched)) = (s.params(), s.schedule()) {
                let direction = match (p.bidir, p.reverse) {
                    (true, _) => "to and from",
                    (false, true) => "to",
                    (false, false) => "from",
                };
                eprintln!(
                    "nagare probe server: test from {peer}: accepted, {} packets of {} B \
                     {direction} the client",
                    sched.total_packets, p.packet_size
                );
            }
        }
        Event::Interval {
            direction,
            intervals,
        } => {
            let way = s.params().is_some_and(|p| p.bidir).then_some(*direction);
            for l in live_lines(way, intervals) {
                eprintln!("nagare probe server: {peer} {l}");
            }
        }
        _ => {}
    })?;
    match outcome {
        Outcome::Finished | Outcome::Results(_) => {
            eprintln!(
                "nagare probe server: test from {peer}: {}",
                summary(&session)
            );
            Ok(())
        }
        Outcome::Refused { message, .. } => bail!("refused: {message}"),
        Outcome::Aborted(message) => bail!("client aborted: {message}"),
        Outcome::Failed(e) => Err(e.into()),
    }
}

/// The log line of a finished test.
fn summary(s: &Session) -> String {
    let (sent, received) = s.told();
    match (sent.map(sender_total), received.map(receiver_total)) {
        (Some(x), Some(r)) if s.params().is_some_and(|p| p.bidir) => format!(
            "done, received {} of {} packets ({} lost, {:.4}%) at {:.3} Mbit/s, jitter {:.4} ms; \
             sent {} packets at {:.3} Mbit/s, {} send errors",
            r.received,
            r.sent,
            r.lost,
            r.loss_rate * 100.0,
            r.effective_bandwidth_bps / 1e6,
            r.jitter_rfc3550_ms,
            x.sent,
            x.achieved_bps / 1e6,
            x.send_errors
        ),
        (_, Some(r)) => format!(
            "done, received {} of {} packets ({} lost, {:.4}%), {:.3} Mbit/s over {:.2} s, \
             jitter {:.4} ms",
            r.received,
            r.sent,
            r.lost,
            r.loss_rate * 100.0,
            r.effective_bandwidth_bps / 1e6,
            r.receive_span_s,
            r.jitter_rfc3550_ms
        ),
        (Some(x), None) => format!(
            "done, sent {} packets ({} B) at {:.3} Mbit/s, {} send errors",
            x.sent,
            x.bytes,
            x.achieved_bps / 1e6,
            x.send_errors
        ),
        (None, None) => "done, nothing measured".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_capped_beyond_loopback_only() {
        let at = |s: &str| default_max_rate(s.parse().unwrap());
        assert_eq!(at("127.0.0.1:5201"), None);
        assert_eq!(at("[::1]:5201"), None);
        assert_eq!(at("0.0.0.0:5201"), Some(10_000_000_000));
        assert_eq!(at("[::]:5201"), Some(10_000_000_000));
        assert_eq!(at("192.0.2.7:5201"), Some(10_000_000_000));
    }

    #[test]
    fn session_ids_differ() {
        assert_ne!(session_id().unwrap(), session_id().unwrap());
    }
}
