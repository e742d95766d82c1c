//! `nagare probe client`: runs one test and prints the report.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::probe::analysis::{Arrival, ReceiverReport, RttSummary, analyze};
use nagare_proto::probe::profile::{GENERIC, PROFILES, profile};
use nagare_proto::probe::{
    ControlMessage, EchoKind, PROTOCOL_VERSION, Refusal, SenderReport, TestParams, parse_fps,
};

use super::control::{self, Frame};
use super::output::{Report, print_human, write_csv};
use super::server::DRAIN;
use super::stream::{Receiver, StreamShape, any_for, bind, record_cap, send_stream};
use super::{ClientArgs, DEFAULT_PORT};
use crate::cli::parse_bit_rate;

/// Echo requests before the stream starts (idle RTT).
const IDLE_ECHOES: u64 = 10;
/// Spacing of echo requests: a low rate that does not disturb the test.
const ECHO_EVERY: Duration = Duration::from_millis(50);
/// After Ctrl-C in reverse mode, how long to wait for the server's report
/// of what it sent.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

pub fn run(a: ClientArgs) -> Result<ExitCode> {
    // Ctrl-C from here on ends the test early with a report of what was
    // done, in either direction (installed first, so it is never missed).
    let stop = crate::stop_flag();
    let prof = match &a.profile {
        Some(n) => profile(n).ok_or_else(|| {
            let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
            anyhow!(
                "unknown --profile {n:?}; built-in profiles: {}",
                names.join(", ")
            )
        })?,
        None => GENERIC,
    };
    let rate_bps = match &a.rate {
        Some(r) => parse_bit_rate(r)?,
        None => prof.rate_bps,
    };
    let fps = match &a.fps {
        Some(f) => Some(parse_fps(f).with_context(|| format!("--fps {f:?}"))?),
        None if a.profile.is_some() => prof.fps,
        None => None,
    };
    let ms = |secs: f64, what: &str| -> Result<u64> {
        if !secs.is_finite() || secs <= 0.0 || secs > 1e7 {
            bail!("--{what} {secs} must be a positive number of seconds");
        }
        Ok((secs * 1000.0).round() as u64)
    };
    let playout_us = match a.playout {
        Some(p) if !p.is_finite() || !(0.0..=1e7).contains(&p) => {
            bail!("--playout {p} must be a number of milliseconds, 0 or more")
        }
        Some(p) => (p * 1000.0).round() as u64,
        None => prof.playout_us,
    };
    let params = TestParams {
        rate_bps,
        duration_ms: ms(a.duration, "duration")?,
        packet_size: a.packet_size.unwrap_or(prof.packet_size),
        fps,
        reverse: a.reverse,
        records: a.log.is_some(),
        playout_us,
        burst_threshold: a.burst_threshold,
        interval_ms: ms(a.interval, "interval")?,
        burst_us: a.burst_us,
    };
    let schedule = params.validate().map_err(|e| {
        anyhow!("{e}; adjust --rate, --duration, --packet-size, --fps or --burst-us (a test may plan at most 10 million packets)")
    })?;

    let server = resolve(&a.server)?;
    let mut conn = TcpStream::connect_timeout(&server, Duration::from_secs(3)).with_context(|| {
        format!("cannot reach the probe server at {server}: is `nagare probe server` running there, and the port open?")
    })?;
    conn.set_nodelay(true)?;
    control::send(
        &mut conn,
        &ControlMessage::Hello {
            version: PROTOCOL_VERSION,
            token: a.token.clone(),
            params,
        },
    )?;
    let session = match control::receive(&mut conn, Duration::from_secs(10))
        .with_context(|| format!("waiting for the probe server at {server} to answer"))?
    {
        Some(Frame::Message(ControlMessage::Welcome { version, session })) => {
            if version != PROTOCOL_VERSION {
                bail!(
                    "the server at {server} speaks probe protocol version {version}, this client {PROTOCOL_VERSION}: \
                     run the same nagare release on both ends"
                );
            }
            session
        }
        Some(Frame::Message(ControlMessage::Refused {
            version,
            reason,
            message,
        })) => {
            let why = match reason {
                Refusal::Busy => "server busy",
                Refusal::Version => "protocol version mismatch",
                Refusal::Token => "access refused",
                Refusal::Params => "test parameters refused",
                Refusal::Other => "refused",
            };
            bail!("{why}: the server at {server} (protocol version {version}) says: {message}")
        }
        Some(_) => bail!("the server at {server} answered with something other than a welcome"),
        None => bail!("the server at {server} closed the connection without answering"),
    };

    let udp = bind(any_for(server))?;
    udp.connect(server)
        .with_context(|| format!("connecting UDP to {server}"))?;
    let start = Instant::now();
    let cap = if a.reverse { record_cap(&schedule) } else { 0 };
    let mut recv = Receiver::new(&udp, session, server.ip(), cap, start)?;

    // Idle RTT first, with nothing else on the path.
    for id in 0..IDLE_ECHOES {
        recv.send_echo(None, EchoKind::Request, id);
        recv.poll(Instant::now() + Duration::from_millis(10))?;
    }
    recv.poll(Instant::now() + Duration::from_millis(100))?;
    let mut echo_id = IDLE_ECHOES;

    let limit = Duration::from_millis(params.duration_ms) + Duration::from_secs(30);
    let (receiver, sender, mut records): (ReceiverReport, SenderReport, Vec<Arrival>) =
        if !a.reverse {
            let tx_sock = udp.try_clone()?;
            let shape = StreamShape::of(&params);
            // Ctrl-C ends the stream early; the report covers what was sent.
            let sending = std::thread::spawn(move || {
                send_stream(&tx_sock, None, session, &schedule, shape, stop)
            });
            let mut next_echo = Instant::now();
            while !sending.is_finished() {
                if Instant::now() >= next_echo {
                    recv.send_echo(None, EchoKind::Request, echo_id);
                    echo_id += 1;
                    next_echo += ECHO_EVERY;
                }
                recv.poll(Instant::now() + Duration::from_millis(10))?;
            }
            let sender = sending
                .join()
                .map_err(|_| anyhow!("the sending thread panicked"))?;
            recv.poll(Instant::now() + Duration::from_millis(100))?;
            control::send(
                &mut conn,
                &ControlMessage::Done {
                    sender: sender.clone(),
                },
            )?;
            let (receiver, n) = match control::receive(&mut conn, Duration::from_secs(30))
                .context("waiting for the receiver's report")?
            {
                Some(Frame::Message(ControlMessage::Report { receiver, records })) => {
                    (*receiver, records)
                }
                Some(Frame::Message(ControlMessage::Abort { message })) => {
                    bail!("the server aborted the test: {message}")
                }
                _ => bail!("the server closed the connection instead of sending its report"),
            };
            let mut records = Vec::new();
            while (records.len() as u64) < n {
                match control::receive(&mut conn, Duration::from_secs(30))? {
                    Some(Frame::Records(mut r)) => records.append(&mut r),
                    _ => bail!(
                        "the server stopped sending records ({} of {n})",
                        records.len()
                    ),
                }
                if records.len() as u64 > n {
                    bail!("the server sent more records than it announced ({n})");
                }
            }
            (receiver, sender, records)
        } else {
            let mut c2 = conn.try_clone()?;
            let (tx, rx) = crossbeam_channel::bounded(1);
            std::thread::spawn(move || {
                let _ = tx.send(control::receive(&mut c2, limit));
            });
            let deadline = Instant::now() + limit;
            let mut next_echo = Instant::now();
            let mut done: Option<(Instant, SenderReport)> = None;
            let mut interrupted: Option<Instant> = None;
            loop {
                let now = Instant::now();
                if done.as_ref().is_some_and(|(t, _)| now >= *t + DRAIN) {
                    break;
                }
                if now >= deadline {
                    bail!("the server never finished sending");
                }
                if interrupted.is_none() && done.is_none() && stop.load(Ordering::Relaxed) {
                    // Ctrl-C: ask the server to stop; it answers with its
                    // sender report, so the report covers what was sent.
                    control::send(
                        &mut conn,
                        &ControlMessage::Abort {
                            message: "interrupted (Ctrl-C) at the client".into(),
                        },
                    )?;
                    interrupted = Some(now);
                }
                if done.is_none() && interrupted.is_some_and(|t| now >= t + INTERRUPT_GRACE) {
                    bail!(
                        "interrupted, and the server did not confirm the stop within {} s",
                        INTERRUPT_GRACE.as_secs()
                    );
                }
                if now >= next_echo {
                    // Until data flows, keep opening the path (the first may be lost).
                    if recv.arrivals.is_empty() {
                        recv.send_echo(None, EchoKind::Open, 0);
                    }
                    recv.send_echo(None, EchoKind::Request, echo_id);
                    echo_id += 1;
                    next_echo += ECHO_EVERY;
                }
                recv.poll(now + Duration::from_millis(10))?;
                if done.is_none()
                    && let Ok(msg) = rx.try_recv()
                {
                    match msg.context("waiting for the server to finish sending")? {
                        Some(Frame::Message(ControlMessage::Done { sender })) => {
                            done = Some((Instant::now(), sender));
                        }
                        Some(Frame::Message(ControlMessage::Abort { message })) => {
                            bail!("the server aborted the test: {message}")
                        }
                        _ => bail!("the server closed the connection during the test"),
                    }
                }
            }
            let sender = done.map(|(_, s)| s).unwrap_or_default();
            let mut receiver = analyze(&recv.arrivals, sender.sent, &params, &schedule);
            receiver.strangers += recv.strangers;
            receiver.receiver_drops = recv.receiver_drops();
            (receiver, sender, std::mem::take(&mut recv.arrivals))
        };
    drop(conn);

    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    for &(id, rtt) in &recv.rtts {
        if id < IDLE_ECHOES {
            idle.push(rtt);
        } else {
            loaded.push(rtt);
        }
    }
    let set_bps = schedule.rate_bps(params.packet_size);
    let report = Report {
        verdict: prof.judge(&receiver, set_bps),
        server: server.to_string(),
        direction: if a.reverse {
            "server to client"
        } else {
            "client to server"
        },
        set_bandwidth_bps: set_bps,
        sender_achieved_bps: sender.achieved_bps,
        packet_size: params.packet_size,
        duration_s: params.duration_ms as f64 / 1000.0,
        fps: fps.map(|(n, d)| f64::from(n) / f64::from(d)),
        packets_per_frame: schedule.packets_per_frame,
        playout_ms: params.playout_us as f64 / 1000.0,
        rtt_idle: RttSummary::of_ns(&mut idle, IDLE_ECHOES),
        rtt_loaded: RttSummary::of_ns(&mut loaded, echo_id - IDLE_ECHOES),
        sender,
        receiver,
    };
    if let Some(path) = &a.log {
        records.sort_by_key(|r| r.recv_ns);
        write_csv(path, &records)?;
    }
    if let Some(path) = &a.plot {
        super::plot::draw(path, &report)?;
    }
    if a.json {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout().lock(),
            "{}",
            serde_json::to_string_pretty(&report)?
        );
    } else {
        print_human(&report);
    }
    Ok(if report.verdict.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn resolve(text: &str) -> Result<SocketAddr> {
    let with_port = if text.parse::<SocketAddr>().is_ok()
        || text
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.ends_with(':') && p.parse::<u16>().is_ok() && !h.contains(':'))
    {
        text.to_string()
    } else if text.starts_with('[') || text.contains(':') {
        format!("[{}]:{DEFAULT_PORT}", text.trim_matches(['[', ']']))
    } else {
        format!("{text}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| {
            format!("cannot resolve the probe server address {text:?} (want HOST:PORT)")
        })?
        .next()
        .ok_or_else(|| anyhow!("the probe server address {text:?} resolves to nothing"))
}
