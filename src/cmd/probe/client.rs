//! `nagare probe client`: runs one test and prints the report.

use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::probe::{Direction, DirectionReport, Report, StreamReport, Verdict};
use nagare_proto::probe::profile::{GENERIC, PROFILES, Profile, profile};
use nagare_proto::probe::{
    Arrival, ClientConfig, Event, Leg, ReceiverReport, Results, Schedule, SenderReport, Session,
    TestParams, parse_fps, receiver_total, sender_total,
};

use super::args::{ClientArgs, DEFAULT_PORT};
use super::link::{Link, Outcome};
use super::output::{LiveLines, print_human, write_csv};
use crate::cli::parse_bit_rate;
use crate::net::udp::parse_addr;
use crate::net::udp::{any_for, bind_buffered};

/// Longest wait for the TCP connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) fn run(a: ClientArgs) -> Result<ExitCode> {
    // Ctrl-C from here on ends the test early with a report of what was
    // done, in either direction (installed first, so it is never missed).
    let stop = crate::signal::stop_flag();
    let prof = chosen_profile(&a)?;
    let params = test_params(&a, &prof)?;
    let schedule = params.validate().map_err(|e| {
        anyhow!(
            "{e}; adjust --rate, --duration, --packet-size, --fps or --burst-us (a test may \
             plan at most 10 million packets)"
        )
    })?;
    // Before the test, not after it: a typo in a path must not cost a run.
    check_outputs(&a)?;
    let server = server_addr(&a.server)?;
    let started = SystemTime::now();
    let results = run_test(&a, server, params, stop)?;
    let short = |s: &[SenderReport]| s.iter().any(|s| s.sent < schedule.total_packets);
    let clock = Clock {
        start: started,
        end: SystemTime::now(),
        interrupted: stop.load(Ordering::Relaxed)
            && (short(&results.sender) || results.back.as_ref().is_some_and(|b| short(&b.sender))),
    };
    let mut results = results;
    let records = std::mem::take(&mut results.records);
    let report = report(&prof, &params, &schedule, server, *results, &clock);
    // The report first: a failing output file must not hide it.
    if a.json {
        use std::io::Write;
        let text = serde_json::to_string_pretty(&report)?;
        // A closed pipe (| head) is not an error worth a panic.
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    } else {
        print_human(&report);
    }
    write_outputs(&a, &report, records)?;
    Ok(if report.interrupted {
        // As a shell reports a job stopped by SIGINT: not a full answer.
        ExitCode::from(130)
    } else if report.verdict.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// When the test ran, and whether it was cut short.
struct Clock {
    start: SystemTime,
    end: SystemTime,
    interrupted: bool,
}

/// Connects, runs the session with live interval lines, and gives back
/// its results.
fn run_test(
    a: &ClientArgs,
    server: SocketAddr,
    params: TestParams,
    stop: &AtomicBool,
) -> Result<Box<Results>> {
    let conn = TcpStream::connect_timeout(&server, CONNECT_TIMEOUT).with_context(|| {
        format!(
            "cannot reach the probe server at {server}: is `nagare probe server` running \
             there, and the port open?"
        )
    })?;
    let udp = bind_buffered(any_for(server))?;
    udp.connect(server)
        .with_context(|| format!("connecting UDP to {server}"))?;
    let mut link = Link::new(conn, Some(&udp))?;
    let config = ClientConfig {
        params,
        token: a.token.clone(),
    };
    let mut session = Session::client(link.now(), server, config)?;
    let mut live = LiveLines::new(!a.json, a.bidir);
    let outcome = link.run(&mut session, Some(stop), |e, _| {
        if let Event::Interval {
            direction,
            intervals,
        } = e
        {
            live.lines(*direction, intervals);
        }
    })?;
    // Closes the control connection: a reverse-mode server waits for it.
    drop(link);
    match outcome {
        Outcome::Results(r) => Ok(r),
        Outcome::Refused {
            reason,
            version,
            message,
        } => bail!("{reason}: the server at {server} (protocol version {version}) says: {message}"),
        Outcome::Aborted(message) => bail!("the server at {server} aborted the test: {message}"),
        Outcome::Failed(e) => bail!("the probe server at {server}: {e}"),
        Outcome::Finished => bail!("the session with {server} ended without results"),
    }
}

/// Creates every output file the flags name, so a bad path fails now.
fn check_outputs(a: &ClientArgs) -> Result<()> {
    for (flag, path) in [("--log", &a.log), ("--plot", &a.plot), ("--html", &a.html)] {
        if let Some(p) = path {
            std::fs::File::create(p).with_context(|| {
                format!(
                    "cannot create the {flag} file {}: check that its directory exists and \
                     is writable, or choose another path",
                    p.display()
                )
            })?;
        }
    }
    Ok(())
}

/// Writes the --log, --plot and --html files (after the report printed).
fn write_outputs(a: &ClientArgs, report: &Report, mut records: Vec<Arrival>) -> Result<()> {
    if let Some(path) = &a.log {
        records.sort_by_key(|r| r.received_at);
        write_csv(path, &records)?;
    }
    if let Some(path) = &a.plot {
        super::plot::draw(path, report)?;
    }
    if let Some(path) = &a.html {
        super::html::write(path, report)?;
    }
    Ok(())
}

fn chosen_profile(a: &ClientArgs) -> Result<Profile> {
    match &a.profile {
        Some(n) => profile(n).ok_or_else(|| {
            let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
            anyhow!(
                "unknown --profile {n:?}; built-in profiles: {}",
                names.join(", ")
            )
        }),
        None => Ok(GENERIC),
    }
}

/// The test the flags ask for, with the profile's values where a flag is
/// not given.
fn test_params(a: &ClientArgs, prof: &Profile) -> Result<TestParams> {
    if a.parallel > 1 && a.log.is_some() {
        bail!(
            "--log records one stream's packets: drop --log, or run with -P 1 (got -P {})",
            a.parallel
        );
    }
    if a.bidir && a.log.is_some() {
        bail!("--log records one direction's packets: drop --log, or run without --bidir");
    }
    let rate_bps = match &a.rate {
        Some(r) => parse_bit_rate(r)?,
        None => prof.rate_bps,
    };
    let fps = match &a.fps {
        Some(f) => Some(parse_fps(f).with_context(|| format!("--fps {f:?}"))?),
        None if a.profile.is_some() => prof.fps,
        None => None,
    };
    let playout_us = match a.playout {
        Some(p) if !p.is_finite() || !(0.0..=1e7).contains(&p) => {
            bail!("--playout {p} must be a number of milliseconds, 0 or more")
        }
        Some(p) => (p * 1000.0).round() as u64,
        None => prof.playout_us,
    };
    Ok(TestParams {
        rate_bps,
        duration_ms: millis(a.duration, "duration")?,
        packet_size: a.packet_size.unwrap_or(prof.packet_size),
        fps,
        reverse: a.reverse,
        records: a.log.is_some(),
        playout_us,
        burst_threshold: a.burst_threshold,
        interval_ms: millis(a.interval, "interval")?,
        burst_us: a.burst_us,
        streams: a.parallel,
        bidir: a.bidir,
    })
}

fn millis(secs: f64, what: &str) -> Result<u64> {
    if !secs.is_finite() || secs <= 0.0 || secs > 1e7 {
        bail!("--{what} {secs} must be a positive number of seconds");
    }
    Ok((secs * 1000.0).round() as u64)
}

/// The server's address; PORT defaults to [`DEFAULT_PORT`].
fn server_addr(text: &str) -> Result<SocketAddr> {
    let has_port = text.parse::<SocketAddr>().is_ok()
        || text
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok());
    let with_port = if has_port {
        text.to_string()
    } else if text.starts_with('[') || text.contains(':') {
        format!("[{}]:{DEFAULT_PORT}", text.trim_matches(['[', ']']))
    } else {
        format!("{text}:{DEFAULT_PORT}")
    };
    parse_addr(&with_port, "probe server address")
}

fn report(
    prof: &Profile,
    params: &TestParams,
    schedule: &Schedule,
    server: SocketAddr,
    r: Results,
    clock: &Clock,
) -> Report {
    let planned = params.duration().as_secs_f64();
    // What ran: up to the slot of the first packet not sent, in the
    // direction that got furthest.
    let back_sent = r.back.iter().flat_map(|b| &b.sender);
    let most = r.sender.iter().chain(back_sent).map(|s| s.sent).max();
    let ran = if clock.interrupted {
        schedule.slot(most.unwrap_or(0)).as_secs_f64().min(planned)
    } else {
        planned
    };
    let judge = Judge {
        prof,
        params,
        schedule,
        cut: clock.interrupted.then_some((ran, planned)),
    };
    let direction = if params.reverse {
        Direction::ServerToClient
    } else {
        Direction::ClientToServer
    };
    let main = judge.leg(
        direction,
        Leg {
            sender: r.sender,
            receiver: r.receiver,
        },
    );
    let directions = match r.back {
        Some(back) => vec![main.clone(), judge.leg(Direction::ServerToClient, back)],
        None => Vec::new(),
    };
    let verdict = if directions.is_empty() {
        main.verdict
    } else {
        both_ways(&directions)
    };
    Report {
        verdict,
        version: crate::version::VERSION.to_string(),
        command_line: std::env::args().collect(),
        start: humantime::format_rfc3339_millis(clock.start).to_string(),
        end: humantime::format_rfc3339_millis(clock.end).to_string(),
        interrupted: clock.interrupted,
        planned_duration_s: planned,
        server: server.to_string(),
        direction,
        bidir: params.bidir,
        set_bandwidth_bps: main.set_bandwidth_bps,
        sender_achieved_bps: main.sender_achieved_bps,
        parallel: params.streams,
        packet_size: params.packet_size,
        duration_s: ran,
        fps: params.fps.map(|(n, d)| f64::from(n) / f64::from(d)),
        packets_per_frame: schedule.packets_per_frame,
        playout_ms: params.playout().as_millis_f64(),
        rtt_idle: r.rtt_idle,
        rtt_loaded: r.rtt_loaded,
        sender: main.sender,
        receiver: main.receiver,
        streams: main.streams,
        directions,
    }
}

/// Judges one direction of a test against the profile.
struct Judge<'a> {
    prof: &'a Profile,
    params: &'a TestParams,
    schedule: &'a Schedule,
    /// Interrupted: seconds that ran, of those planned.
    cut: Option<(f64, f64)>,
}

impl Judge<'_> {
    /// The report of one direction: totals over its streams, its verdict.
    fn leg(&self, direction: Direction, leg: Leg) -> DirectionReport {
        let params = self.params;
        let set_bps = self.schedule.rate_bps(params.packet_size) * f64::from(params.streams);
        let sender = sender_total(&leg.sender);
        let receiver: ReceiverReport = receiver_total(&leg.receiver);
        let mut verdict = self.prof.judge(&receiver, set_bps, params.playout());
        if let Some((ran, planned)) = self.cut {
            verdict.partial = true;
            verdict.reasons.insert(
                0,
                format!(
                    "interrupted after {ran:.2} of {planned:.2} s: this verdict covers only \
                     what ran"
                ),
            );
        }
        let streams = if params.streams > 1 {
            leg.sender
                .into_iter()
                .zip(leg.receiver)
                .zip(0..)
                .map(|((sender, receiver), stream)| StreamReport {
                    stream,
                    sender,
                    receiver,
                })
                .collect()
        } else {
            Vec::new()
        };
        DirectionReport {
            direction,
            verdict,
            set_bandwidth_bps: set_bps,
            sender_achieved_bps: sender.achieved_bps,
            sender,
            receiver,
            streams,
        }
    }
}

/// The verdict of a `--bidir` test: it passes when both directions do,
/// and gives each failing direction's reasons, named.
fn both_ways(directions: &[DirectionReport]) -> Verdict {
    let mut v = directions[0].verdict.clone();
    v.pass = directions.iter().all(|d| d.verdict.pass);
    v.partial = directions.iter().any(|d| d.verdict.partial);
    v.reasons = Vec::new();
    for d in directions {
        for why in &d.verdict.reasons {
            let line = format!("{}: {why}", d.direction);
            // An interruption concerns both; say it once.
            if why.starts_with("interrupted") {
                if !v.reasons.iter().any(|r| r.starts_with("interrupted")) {
                    v.reasons.insert(0, why.clone());
                }
            } else {
                v.reasons.push(line);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_port_defaults_to_5201() {
        let at = |t: &str| server_addr(t).unwrap().to_string();
        assert_eq!(at("127.0.0.1"), "127.0.0.1:5201");
        assert_eq!(at("127.0.0.1:6000"), "127.0.0.1:6000");
        assert_eq!(at("::1"), "[::1]:5201");
        assert_eq!(at("[::1]"), "[::1]:5201");
        assert_eq!(at("[::1]:6000"), "[::1]:6000");
        assert!(server_addr("127.0.0.1:notaport").is_err());
    }
}
