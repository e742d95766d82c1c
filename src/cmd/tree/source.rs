//! `nagare tree source`: capture the screen and drive the coordinator
//! machine, which admits and places peers, repairs the tree and relays
//! every frame to the source's own (at most two) children.

use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use nagare_api::tree::{MAX_LINK_ERRORS, SourceReport};
use nagare_proto::tree::coordinator::{Event, Input};
use nagare_proto::tree::{Coordinator, CoordinatorConfig};
use nagare_proto::{FrameRate, Nanos, VideoFormat};

use super::args::{SourceArgs, format_key, lag_limits, parse_key, random_key};
use super::capture::Capture;
use super::links::Links;
use super::stamp::{fingerprint, now_us};
use crate::cli::parse_rate;
use crate::clock::cpu_seconds;

/// How long children get to take the end of the stream before the source
/// exits anyway (a write blocks at most 10 s).
const DRAIN_LIMIT: Duration = Duration::from_secs(12);

/// Runs the source until the input ends, --frames is reached, or Ctrl-C.
pub(super) fn run(args: SourceArgs) -> anyhow::Result<ExitCode> {
    let rate = parse_rate(&args.fps)?;
    let key = match &args.key {
        Some(k) => parse_key(k)?,
        None => random_key()?,
    };
    let (mut capture, format) = Capture::open(
        args.capture.as_deref(),
        args.input.as_deref(),
        &args.size,
        &args.pix_fmt,
    )?;
    let limits = lag_limits(args.lag_limit_kib)?;
    let mut coord = Coordinator::new(CoordinatorConfig {
        key,
        format,
        key_interval: args.key_interval,
        limits,
    })
    .with_context(|| format!("screen {}x{}", format.width, format.height))?;
    let listener = TcpListener::bind(&args.listen).with_context(|| {
        format!(
            "listening on {}; pick another --listen HOST:PORT (port 0 picks a free one)",
            args.listen
        )
    })?;
    banner(&listener, &key, &capture, format)?;
    let mut links = Links::new(None);
    links.listen(listener)?;
    let mut src = Source {
        coord: &mut coord,
        links: &mut links,
        link_errors: Vec::new(),
    };
    if args.wait_peers > 0 && !src.wait_for_peers(args.wait_peers)? {
        return Ok(ExitCode::from(130));
    }
    let mut report = src.stream(&args, rate, &mut capture, format)?;
    src.end()?;
    report.link_errors = std::mem::take(&mut src.link_errors);
    let stats = coord.stats();
    report.lag_drops = coord.fanout().lag_drops();
    report.refreshes = coord.fanout().refreshes();
    report.key_frames = stats.key_frames;
    report.tiles = stats.tiles;
    report.bytes = stats.bytes;
    report.mbit_per_s = report.bytes as f64 * 8.0 / report.seconds.max(1e-9) / 1e6;
    eprintln!(
        "sent {} frames in {:.1} s ({:.1} fps), {:.2} Mbit/s, {:.1}:1 compression",
        report.frames,
        report.seconds,
        report.fps,
        report.mbit_per_s,
        report.raw_bytes as f64 / report.bytes.max(1) as f64
    );
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing report {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn banner(
    listener: &TcpListener,
    key: &[u8; 16],
    capture: &Capture,
    format: VideoFormat,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    let shown = if local.ip().is_unspecified() {
        format!("<this host's address>:{}", local.port())
    } else {
        local.to_string()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening {local}")?;
    writeln!(out, "key {}", format_key(key))?;
    writeln!(
        out,
        "join with: nagare tree join {shown} --key {}",
        format_key(key)
    )?;
    if let Some(how) = capture.describe() {
        writeln!(
            out,
            "capturing {}x{} through {how}",
            format.width, format.height
        )?;
    }
    out.flush()?;
    Ok(())
}

/// The coordinator and its connections.
struct Source<'a> {
    coord: &'a mut Coordinator,
    links: &'a mut Links,
    /// Why links were dropped, for the report.
    link_errors: Vec<String>,
}

impl Source<'_> {
    /// Holds the stream until `count` peers are attached; false on Ctrl-C.
    fn wait_for_peers(&mut self, count: usize) -> anyhow::Result<bool> {
        eprintln!("waiting for {count} peers to attach");
        let stop = crate::signal::stop_flag();
        while self.coord.ready() < count {
            if stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            // Wake now and then to notice Ctrl-C.
            let until = self.links.now() + Nanos::from_millis(200);
            self.pump(until, |c| c.ready() >= count)?;
        }
        Ok(true)
    }

    /// Captures and sends frames on the frame clock until the input ends,
    /// `--frames` is reached or Ctrl-C.
    fn stream(
        &mut self,
        args: &SourceArgs,
        rate: FrameRate,
        capture: &mut Capture,
        format: VideoFormat,
    ) -> anyhow::Result<SourceReport> {
        let mut report = SourceReport {
            width: format.width,
            height: format.height,
            pixel_format: format.pixel_format.to_string(),
            ..SourceReport::default()
        };
        let mut frame = vec![0u8; format.frame_bytes()];
        let (mut capture_s, mut encode_s) = (0.0, 0.0);
        let cpu0 = cpu_seconds();
        let start = self.links.now();
        let stop = crate::signal::stop_flag();
        let mut n = 0u64;
        while args.frames.is_none_or(|f| n < f) && !stop.load(Ordering::Relaxed) {
            // Frame start times fit u64 nanoseconds for 584 years.
            let due = start + Nanos(rate.frame_start_ns(n) as u64);
            self.pump(due, |_| false)?;
            let t0 = Instant::now();
            let captured_us = now_us();
            if !capture.next(&mut frame)? {
                break;
            }
            let t1 = Instant::now();
            let input = Input::Frame {
                pixels: &frame,
                captured_us,
            };
            self.coord.handle_input(self.links.now(), input)?;
            self.flush();
            capture_s += (t1 - t0).as_secs_f64();
            encode_s += t1.elapsed().as_secs_f64();
            report.frames += 1;
            report.raw_bytes += format.frame_bytes() as u64;
            if args.report.is_some() {
                report.fingerprints.push((n, fingerprint(&frame)));
            }
            n += 1;
        }
        let secs = (self.links.now() - start).as_secs_f64();
        report.seconds = secs;
        report.fps = report.frames as f64 / secs.max(1e-9);
        report.capture_ms_mean = capture_s * 1e3 / report.frames.max(1) as f64;
        report.encode_ms_mean = encode_s * 1e3 / report.frames.max(1) as f64;
        report.cpu_seconds = cpu_seconds() - cpu0;
        Ok(report)
    }

    /// Ends the stream and lets the children take the end (bounded).
    fn end(&mut self) -> anyhow::Result<()> {
        self.coord.handle_input(self.links.now(), Input::End)?;
        self.flush();
        let limit = self.links.now() + Nanos::from(DRAIN_LIMIT);
        self.pump(limit, Coordinator::is_finished)?;
        self.links.finish(DRAIN_LIMIT);
        Ok(())
    }

    /// Handles inputs until `until`, or until `done` holds.
    fn pump(&mut self, until: Nanos, done: impl Fn(&Coordinator) -> bool) -> anyhow::Result<()> {
        while !done(self.coord) {
            let deadline = self.coord.poll_timeout().map_or(until, |t| t.min(until));
            let input = match self.links.next(Some(deadline))? {
                Some(l) => Input::Link(l),
                None if self.links.now() >= until => return Ok(()),
                None => Input::Timeout,
            };
            self.coord.handle_input(self.links.now(), input)?;
            self.flush();
        }
        Ok(())
    }

    /// Writes what the coordinator wants written and tells the user what
    /// it did.
    fn flush(&mut self) {
        let now = self.links.now();
        while let Some(t) = self.coord.poll_transmit(now) {
            self.links.apply(t);
        }
        while let Some(e) = self.coord.poll_event() {
            match e {
                Event::Joined { peer, relay } => println!("joined {peer} from {relay}"),
                Event::Placed(p) => println!(
                    "placed {} slot {} depth {} under {}",
                    p.peer, p.slot, p.depth, p.parent
                ),
                Event::Orphaned { child, parent } => {
                    println!("orphaned {child} reports {parent} gone");
                }
                Event::Left { peer } => println!("left {peer}"),
                Event::Removed { peer, peers, depth } => {
                    println!("removed {peer}; {peers} peers, depth {depth}");
                }
                Event::Refused { from, why } => eprintln!("refused {from}: {why}"),
                Event::LinkDropped { peer, error } => {
                    let who = peer.map_or_else(|| "a child".to_owned(), |p| p.to_string());
                    eprintln!("dropped the link of {who}: {error}");
                    if self.link_errors.len() < MAX_LINK_ERRORS {
                        self.link_errors.push(error.to_string());
                    }
                }
                Event::Ready { .. } | Event::ChildAttached { .. } => {}
            }
        }
    }
}
