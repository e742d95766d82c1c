//! `nagare probe server`: one test at a time; others are told "busy".

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::probe::{Event, ServerConfig, Session, receiver_total, sender_total};

use super::ServerArgs;
use super::link::{Link, Outcome};
use super::output::live_lines;
use super::stream::bind;
use crate::cli::parse_bit_rate;

/// `--max-rate` of a server listening beyond loopback, bits/s.
const DEFAULT_REMOTE_MAX_RATE: u64 = 10_000_000_000;

pub fn run(args: ServerArgs) -> Result<ExitCode> {
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
    let udp = Arc::new(bind(local)?);
    eprintln!(
        "nagare probe server listening on {local} (TCP control, UDP test stream); port {}",
        local.port()
    );
    let config = Arc::new(ServerConfig {
        token: args.token,
        max_rate_bps,
    });
    let busy = Arc::new(AtomicBool::new(false));
    let mut done = 0u64;
    // SIGTERM / Ctrl-C end the loop: the server says so and exits 0.
    while let Some(conn) = crate::signal::accept(&listener) {
        let Ok((conn, _)) = conn else { continue };
        if busy.swap(true, Ordering::AcqRel) {
            std::thread::spawn(move || refuse_busy(conn));
            continue;
        }
        let (busy2, udp2, config2) = (busy.clone(), udp.clone(), config.clone());
        let last = args.tests.is_some_and(|t| done + 1 >= t);
        let worker = std::thread::spawn(move || {
            let peer = conn.peer_addr().ok();
            let result = serve(conn, &udp2, &config2);
            // Free before saying why it failed: whoever reads the line
            // may start the next test at once.
            busy2.store(false, Ordering::Release);
            if let Err(e) = result {
                eprintln!(
                    "nagare probe server: test from {} failed: {e:#}",
                    peer.map_or("?".to_string(), |p| p.to_string())
                );
            }
        });
        done += 1;
        if last {
            let _ = worker.join();
            break;
        }
    }
    if crate::signal::stopping() {
        eprintln!("nagare probe server: stopped by a signal after {done} tests");
    }
    Ok(ExitCode::SUCCESS)
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

fn refuse_busy(conn: TcpStream) {
    let Ok(peer) = conn.peer_addr() else { return };
    let Ok(mut link) = Link::new(conn, None) else {
        return;
    };
    let mut session = Session::busy(link.now(), peer);
    let _ = link.run(&mut session, None, |_, _| {});
}

/// Runs one test for the client on `conn`, logging its intervals and,
/// at its end, one line of what it measured.
fn serve(conn: TcpStream, udp: &UdpSocket, config: &ServerConfig) -> Result<()> {
    let peer = conn.peer_addr()?;
    let mut link = Link::new(conn, Some(udp))?;
    let mut session = Session::server(link.now(), peer, config.clone(), session_id()?);
    let outcome = link.run(&mut session, None, |e, s| match e {
        Event::Accepted { .. } => {
            if let (Some(p), Some(sched)) = (s.params(), s.schedule()) {
                let direction = if p.reverse { "to" } else { "from" };
                eprintln!(
                    "nagare probe server: test from {peer}: accepted, {} packets of {} B \
                     {direction} the client",
                    sched.total_packets, p.packet_size
                );
            }
        }
        Event::Interval(ivs) => {
            for l in live_lines(ivs) {
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
