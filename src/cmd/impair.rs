//! `nagare impair`: a user-space UDP relay that impairs what it forwards,
//! in the spirit of Linux netem (absent here and on many VMs). The seeded
//! model lives in `nagare_proto::netem`; this is its socket driver.
//!
//! Datagrams from clients to `--listen` go through the model to `--to`;
//! replies come back untouched to the client that sent last (one flow at
//! a time, like a minimal NAT). With `--tcp`, TCP connections to the same
//! port are forwarded untouched, so a probe's control connection follows
//! its test stream through the relay.

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use nagare_api::impair::Report;
use nagare_proto::netem::{self, ImpairConfig, ImpairCounters, Netem, parse_seq_list};
use nagare_proto::{BitRate, ByteSize, Nanos};

/// `nagare impair`.
#[derive(Args, Debug)]
pub(crate) struct ImpairArgs {
    /// Address to receive on; port 0 picks one (printed on stderr).
    #[arg(long)]
    listen: SocketAddr,
    /// Where to forward to.
    #[arg(long)]
    to: SocketAddr,
    /// Random loss probability of stream packets: 0.01 or 1%.
    #[arg(long, value_parser = parse_probability)]
    loss: Option<f64>,
    /// Gilbert burst loss: P_GOOD_TO_BAD:P_BAD_TO_GOOD (every packet lost
    /// in the bad state; mean burst 1/P_BAD_TO_GOOD).
    #[arg(long)]
    gilbert: Option<String>,
    /// Probability that a stream packet is held back and overtaken.
    #[arg(long, value_parser = parse_probability)]
    reorder: Option<f64>,
    /// How many later packets overtake a reordered one.
    #[arg(long, default_value_t = 3)]
    reorder_gap: u64,
    /// Probability that a stream packet is duplicated.
    #[arg(long, value_parser = parse_probability)]
    duplicate: Option<f64>,
    /// One-way delay: 5ms, 500us, 0.1s (bare numbers are ms).
    #[arg(long, value_parser = parse_time_ns)]
    delay: Option<u64>,
    /// Delay varies uniformly within ± this (reorders when above the
    /// packet spacing, as netem does).
    #[arg(long, value_parser = parse_time_ns)]
    jitter: Option<u64>,
    /// Bottleneck rate (bits/s, k/M/G suffixes); 100 ms queue, then drops.
    #[arg(long)]
    rate: Option<String>,
    /// RTP sequence numbers to drop, as the sender numbers them (`nagare
    /// send` prints its first): 5,10-14,100.
    #[arg(long, value_name = "LIST")]
    drop_seq: Option<String>,
    /// Packets to drop by index from each stream's first packet (0), so
    /// a script works whatever sequence number the sender starts at:
    /// 5,10-14,100.
    #[arg(long, value_name = "LIST")]
    drop_nth: Option<String>,
    /// Packets to reorder by index from each stream's first (0).
    #[arg(long, value_name = "LIST")]
    reorder_nth: Option<String>,
    /// Packets to duplicate by index from each stream's first (0).
    #[arg(long, value_name = "LIST")]
    duplicate_nth: Option<String>,
    /// RTP sequence numbers to reorder (each overtaken by --reorder-gap).
    #[arg(long, value_name = "LIST")]
    reorder_seq: Option<String>,
    /// RTP sequence numbers to duplicate.
    #[arg(long, value_name = "LIST")]
    duplicate_seq: Option<String>,
    /// Most MiB waiting to leave (delay and rate queues together); more is
    /// dropped and counted as overflow, so a long delay at a high rate
    /// cannot eat the host's memory.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    queue_limit: u64,
    /// Seed of the random impairments (same seed, same fate per packet).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Forward TCP connections to the same port untouched.
    #[arg(long)]
    tcp: bool,
    /// Stop after this many seconds (default: on Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
    /// Print the counters as JSON when stopping.
    #[arg(long)]
    json: bool,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    public: bool,
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.trim().strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s.trim(), 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a probability; write 0.01 or 1%"))?;
    let p = v / scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("{s:?} is outside 0..1 (0%..100%)"));
    }
    Ok(p)
}

fn parse_time_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1e6)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a time; write 5ms, 500us or 0.1s"))?;
    let ns = v * scale;
    if !ns.is_finite() || !(0.0..=60e9).contains(&ns) {
        return Err(format!("{s:?} is outside 0..60 s"));
    }
    Ok(ns.round() as u64)
}

fn config(a: &ImpairArgs) -> Result<ImpairConfig> {
    let gilbert = match &a.gilbert {
        Some(g) => {
            let (x, y) = g.split_once(':').ok_or_else(|| {
                anyhow!("--gilbert {g:?}: write P_GOOD_TO_BAD:P_BAD_TO_GOOD, like 0.01:0.3")
            })?;
            let p = |v: &str| parse_probability(v).map_err(|e| anyhow!("--gilbert: {e}"));
            Some((p(x)?, p(y)?))
        }
        None => None,
    };
    let list = |l: &Option<String>, what: &str| -> Result<_> {
        match l {
            Some(t) => parse_seq_list(t).with_context(|| format!("--{what} {t:?}")),
            None => Ok(Default::default()),
        }
    };
    let cfg = ImpairConfig {
        loss: a.loss.unwrap_or(0.0),
        gilbert,
        reorder: a.reorder.unwrap_or(0.0),
        reorder_gap: a.reorder_gap,
        duplicate: a.duplicate.unwrap_or(0.0),
        delay: Nanos(a.delay.unwrap_or(0)),
        jitter: Nanos(a.jitter.unwrap_or(0)),
        rate: a
            .rate
            .as_deref()
            .map(crate::cli::parse_bit_rate)
            .transpose()?
            .map(BitRate),
        queue: Nanos::from_millis(100),
        queue_limit: ByteSize(a.queue_limit.saturating_mul(1 << 20)),
        drop_seq: list(&a.drop_seq, "drop-seq")?,
        reorder_seq: list(&a.reorder_seq, "reorder-seq")?,
        duplicate_seq: list(&a.duplicate_seq, "duplicate-seq")?,
        drop_nth: list(&a.drop_nth, "drop-nth")?,
        reorder_nth: list(&a.reorder_nth, "reorder-nth")?,
        duplicate_nth: list(&a.duplicate_nth, "duplicate-nth")?,
        seed: a.seed,
    };
    cfg.validate()
        .map_err(|e| anyhow!("{e}; check --loss, --gilbert, --reorder, --reorder-gap, --duplicate, --delay/--jitter, --rate"))?;
    Ok(cfg)
}

/// Binds the UDP listening socket and, with `--tcp`, a TCP listener on
/// the same port. With port 0 the kernel picks the UDP port, and the same
/// TCP port may already be taken (by any outgoing connection's ephemeral
/// port): then another UDP port is tried, a bounded number of times.
fn bind_listen(listen: SocketAddr, tcp: bool) -> Result<(UdpSocket, Option<TcpListener>)> {
    const TRIES: usize = 20;
    let mut tries = 1;
    loop {
        let down = crate::net::udp::bind_buffered(listen)?;
        if !tcp {
            return Ok((down, None));
        }
        let local = down.local_addr()?;
        match TcpListener::bind(local) {
            Ok(l) => return Ok((down, Some(l))),
            Err(e)
                if listen.port() == 0
                    && tries < TRIES
                    && e.kind() == std::io::ErrorKind::AddrInUse =>
            {
                tries += 1;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("binding TCP {local} for --tcp: is the port taken?"));
            }
        }
    }
}

pub(crate) fn run(a: ImpairArgs) -> Result<ExitCode> {
    let cfg = config(&a)?;
    if !a.listen.ip().is_loopback() && !a.public {
        bail!(
            "--listen {} reaches beyond this host; add --public if you mean it",
            a.listen
        );
    }
    let (down, tcp) = bind_listen(a.listen, a.tcp)?;
    let local = down.local_addr()?;
    let up = UdpSocket::bind(crate::net::udp::any_for(a.to))
        .context("binding the upstream UDP socket")?;
    up.connect(a.to)
        .with_context(|| format!("connecting UDP to --to {}", a.to))?;
    eprintln!(
        "nagare impair relaying {local} -> {}; port {}",
        a.to,
        local.port()
    );
    // Ctrl-C / SIGTERM stop the relay cleanly, so it prints its counters.
    let stop: &'static AtomicBool = crate::signal::stop_flag();
    let client: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    let replies = Arc::new(AtomicU64::new(0));
    let tcp_conns = Arc::new(AtomicU64::new(0));
    let back = spawn_replies(&up, &down, client.clone(), replies.clone(), stop)?;
    if let Some(listener) = tcp {
        spawn_tcp(listener, a.to, tcp_conns.clone(), stop)?;
    }
    let end = a
        .duration
        .filter(|d| d.is_finite() && *d > 0.0)
        .map(|d| Instant::now() + Duration::from_secs_f64(d.min(1e7)));
    let counters = forward(&down, &up, cfg, &client, stop, end)?;
    stop.store(true, Ordering::Relaxed);
    let _ = back.join();
    let report = Report {
        dropped: counters.dropped(),
        counters,
        replies: replies.load(Ordering::Relaxed),
        tcp_connections: tcp_conns.load(Ordering::Relaxed),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Replies flow upstream -> the last client, untouched.
fn spawn_replies(
    up: &UdpSocket,
    down: &UdpSocket,
    client: Arc<Mutex<Option<SocketAddr>>>,
    replies: Arc<AtomicU64>,
    stop: &'static AtomicBool,
) -> Result<std::thread::JoinHandle<()>> {
    let (up, down) = (up.try_clone()?, down.try_clone()?);
    Ok(std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let _ = up.set_read_timeout(Some(Duration::from_millis(50)));
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = up.recv(&mut buf) {
                let to = *client.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(to) = to {
                    let _ = down.send_to(&buf[..n], to);
                    replies.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }))
}

/// `--tcp`: every connection is piped to the same port upstream.
fn spawn_tcp(
    listener: TcpListener,
    to: SocketAddr,
    count: Arc<AtomicU64>,
    stop: &'static AtomicBool,
) -> Result<()> {
    std::thread::spawn(move || {
        while let Some(conn) = crate::signal::accept(&listener) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Ok((c, _)) = conn {
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || pipe_tcp(c, to));
            }
        }
    });
    Ok(())
}

/// The counters, on stderr like every subcommand's summary (stdout is for
/// --json).
fn print_summary(r: &Report) {
    let c = &r.counters;
    eprintln!(
        "received {} ({} stream), forwarded {}, dropped {} (random {}, gilbert {}, scripted {}, queue {}, overflow {}) in {} episodes, duplicated {}, reordered {}, replies {}",
        c.received,
        c.stream,
        c.forwarded,
        r.dropped,
        c.dropped_random,
        c.dropped_gilbert,
        c.dropped_scripted,
        c.dropped_queue,
        c.dropped_overflow,
        c.loss_episodes,
        c.duplicated,
        c.reordered,
        r.replies
    );
}

/// Most datagrams a stopping relay still takes from its socket.
const STOP_DRAIN: usize = 1 << 16;

fn forward(
    down: &UdpSocket,
    up: &UdpSocket,
    cfg: ImpairConfig,
    client: &Mutex<Option<SocketAddr>>,
    stop: &AtomicBool,
    end: Option<Instant>,
) -> Result<ImpairCounters> {
    let mut netem: Netem<Vec<u8>> = Netem::new(cfg);
    let start = Instant::now();
    let now = || Nanos::from(start.elapsed());
    let mut buf = vec![0u8; 65_536];
    // Only a safety net: the wait below comes first, so a receive finds
    // a datagram waiting.
    down.set_read_timeout(Some(Duration::from_millis(20)))?;
    loop {
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        while let Some(p) = netem.poll_transmit(now()) {
            let _ = up.send(&p);
        }
        let wait = netem
            .poll_timeout()
            .map_or(Duration::from_millis(20), |at| {
                at.saturating_sub(now()).into()
            })
            .clamp(Duration::from_micros(20), Duration::from_millis(20));
        // ppoll, not the socket timeout: that one is rounded up to the
        // kernel's tick, and held packets would leave late (see net::wait).
        if !crate::net::wait::readable_within(down, wait).context("waiting on the relay")? {
            continue;
        }
        match down.recv_from(&mut buf) {
            Ok((n, src)) => {
                *client.lock().unwrap_or_else(|p| p.into_inner()) = Some(src);
                let pkt = &buf[..n];
                let id = netem::stream_packet(pkt);
                netem.handle_rtp(now(), pkt.to_vec(), n, id);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                        | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => return Err(e).context("receiving on the relay"),
        }
    }
    // A stop takes what the socket already holds, then whatever is still
    // held or queued goes out now, so the counters match what left.
    down.set_nonblocking(true)?;
    for _ in 0..STOP_DRAIN {
        let Ok((n, _)) = down.recv_from(&mut buf) else {
            break;
        };
        let pkt = &buf[..n];
        netem.handle_rtp(now(), pkt.to_vec(), n, netem::stream_packet(pkt));
    }
    netem.flush(now());
    for p in netem.drain() {
        let _ = up.send(&p);
    }
    Ok(netem.counters())
}

fn pipe_tcp(client: TcpStream, to: SocketAddr) {
    let Ok(server) = TcpStream::connect_timeout(&to, Duration::from_secs(3)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(mut c2), Ok(mut s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let mut c = client;
        let mut s = server;
        let _ = std::io::copy(&mut c, &mut s);
        let _ = s.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut s2, &mut c2);
    let _ = c2.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_and_times() {
        assert_eq!(parse_probability("1%").unwrap(), 0.01);
        assert_eq!(parse_probability("0.25").unwrap(), 0.25);
        assert!(parse_probability("150%").is_err());
        assert!(parse_probability("x").is_err());
        assert_eq!(parse_time_ns("5ms").unwrap(), 5_000_000);
        assert_eq!(parse_time_ns("500us").unwrap(), 500_000);
        assert_eq!(parse_time_ns("0.1s").unwrap(), 100_000_000);
        assert_eq!(parse_time_ns("2").unwrap(), 2_000_000);
        assert!(parse_time_ns("-1ms").is_err());
        assert!(parse_time_ns("1h").is_err());
    }
}
