//! `nagare tree join`: drive a peer machine (join, attach, decode, relay,
//! re-attach) over real sockets, and record, show and report the frames
//! it decodes.

use std::io::{BufWriter, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use nagare_api::tree::{MAX_LINK_ERRORS, PeerReport};
use nagare_proto::Nanos;
use nagare_proto::screen::CompletedFrame;
use nagare_proto::stats::Distribution;
use nagare_proto::tree::peer::{AttachFailure, Event, Failure, Input, Loss};
use nagare_proto::tree::{DialId, Peer, PeerConfig, Transmit};

use super::args::{JoinArgs, lag_limits, parse_key};
use super::links::Links;
use super::stamp::{fingerprint, now_us};
use crate::clock::cpu_seconds;
use crate::net::udp::parse_addr;

/// How long children get to take the end of the stream before the peer
/// exits anyway (a write blocks at most 10 s).
const DRAIN_LIMIT: Duration = Duration::from_secs(12);

/// How often a waiting peer looks at the stop flag.
const SIGNAL_TICK: Nanos = Nanos::from_millis(200);

/// Joins the tree and runs until the stream ends.
pub(super) fn run(args: JoinArgs) -> anyhow::Result<ExitCode> {
    let key_text = match &args.key {
        Some(k) => k.clone(),
        None => std::env::var("NAGARE_TREE_KEY").map_err(|_| {
            anyhow!("no session key: pass --key with the key `nagare tree source` printed, or set NAGARE_TREE_KEY")
        })?,
    };
    let key = parse_key(&key_text)?;
    let source = parse_addr(&args.source, "source address")?;
    #[cfg(not(feature = "x11"))]
    if args.view {
        anyhow::bail!(
            "--view needs X11, and this nagare was built without it (cargo feature x11); \
             use --output FILE, or rebuild with default features"
        );
    }
    let listen = match &args.listen {
        Some(l) => l.clone(),
        None => SocketAddr::new(toward(source)?, 0).to_string(),
    };
    let listener = TcpListener::bind(&listen).with_context(|| {
        format!("binding the relay listener on {listen}; pick another --listen")
    })?;
    let relay_port = listener.local_addr()?.port();
    eprintln!(
        "nagare tree join: relay listener for children on {}",
        listener.local_addr()?
    );
    let output = match &args.output {
        Some(p) => Some(BufWriter::new(crate::cli::open_output(p)?)),
        None => None,
    };
    let stall = (args.stall_ms > 0).then(|| Duration::from_millis(args.stall_ms));
    let links = Links::new(stall);
    links.listen(listener)?;
    let cfg = PeerConfig {
        key,
        source,
        relay_port,
        limits: lag_limits(args.lag_limit_kib)?,
        give_up: Nanos::from_secs(args.timeout.max(1)),
        retry_seed: getrandom::u64().unwrap_or(u64::from(std::process::id())),
    };
    let mut session = Session {
        peer: Peer::new(links.now(), cfg),
        links,
        source,
        frames: args.frames,
        output,
        frames_on_stdout: args.output.as_deref().is_some_and(crate::cli::is_stdio),
        want_view: args.view,
        #[cfg(feature = "x11")]
        viewer: None,
        latency: Distribution::new(),
        fingerprints: args.report.as_ref().map(|_| Vec::new()),
        dials: Vec::new(),
        failure: None,
        cpu0: cpu_seconds(),
        link_errors: Vec::new(),
    };
    let result = session.run();
    session.links.finish(DRAIN_LIMIT);
    if let Some(o) = &mut session.output {
        o.flush().context("writing the output file")?;
    }
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_vec(&session.report())?)
            .with_context(|| format!("writing report {}", path.display()))?;
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The local address the kernel would use to reach `source`: where
/// children in the same network can reach this peer, and nothing wider
/// (no UDP datagram is sent; connect only picks a route).
fn toward(source: SocketAddr) -> anyhow::Result<std::net::IpAddr> {
    let any = crate::net::udp::any_for(source);
    let probe = std::net::UdpSocket::bind(any).context("finding the route to the source")?;
    probe
        .connect(source)
        .with_context(|| format!("no route to the source at {source}"))?;
    Ok(probe.local_addr()?.ip())
}

/// A peer machine with its sockets, output and window.
struct Session {
    peer: Peer,
    links: Links,
    source: SocketAddr,
    frames: Option<u64>,
    output: Option<BufWriter<Box<dyn Write + Send>>>,
    /// `-o -`: the frames go to stdout, the log lines to stderr.
    frames_on_stdout: bool,
    want_view: bool,
    #[cfg(feature = "x11")]
    viewer: Option<super::view::Viewer>,
    /// Capture-to-decode latency of delta frames, µs.
    latency: Distribution,
    fingerprints: Option<Vec<(u64, u64)>>,
    /// Dials asked for, in order, so a failure can name its I/O error.
    dials: Vec<DialId>,
    failure: Option<anyhow::Error>,
    cpu0: f64,
    /// Why links were dropped, for the report.
    link_errors: Vec<String>,
}

impl Session {
    /// Runs the machine until it is done; the error is why it gave up.
    fn run(&mut self) -> anyhow::Result<()> {
        let mut left = false;
        loop {
            self.flush()?;
            if self.peer.is_done() {
                break;
            }
            let reached = self.frames.is_some_and(|f| self.peer.stats().frames >= f);
            // SIGTERM / Ctrl-C leave the tree the way --frames does.
            let input = if (reached || crate::signal::stopping()) && !left {
                left = true;
                Input::Leave
            } else {
                // Wake now and then to notice a signal.
                let tick = self.links.now() + SIGNAL_TICK;
                let deadline = self.peer.poll_timeout().map_or(tick, |t| t.min(tick));
                match self.links.next(Some(deadline))? {
                    Some(l) => Input::Link(l),
                    None => Input::Timeout,
                }
            };
            self.peer.handle_input(self.links.now(), input);
        }
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes what the machine wants written and acts on what happened.
    fn flush(&mut self) -> anyhow::Result<()> {
        let now = self.links.now();
        while let Some(t) = self.peer.poll_transmit(now) {
            if let Transmit::Connect { dial, .. } = &t {
                self.dials.push(*dial);
            }
            self.links.apply(t);
        }
        while let Some(e) = self.peer.poll_event() {
            self.event(e)?;
        }
        Ok(())
    }

    fn event(&mut self, e: Event) -> anyhow::Result<()> {
        match e {
            Event::Placed {
                placement: p,
                moved,
            } => {
                let verb = if moved { "moved" } else { "placed" };
                let line = format!(
                    "{verb} {} slot {} depth {} under {}",
                    p.peer, p.slot, p.depth, p.parent
                );
                // With -o -, stdout carries the frames alone.
                if self.frames_on_stdout {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }
            Event::Attached { format, .. } => self.open_view(format),
            Event::JoinRetry { attempt, after } => eprintln!(
                "the source at {} closed the connection before placing this peer (busy with \
                 other joins); joining again in {:.0} ms, attempt {attempt} of {}",
                self.source,
                after.as_millis_f64(),
                nagare_proto::tree::peer::JOIN_ATTEMPTS
            ),
            Event::AttachFailed { parent, addr, why } => {
                let why = self.attach_failure(why);
                eprintln!("attaching to {parent} at {addr} failed: {why}");
            }
            Event::ParentLost { parent, why } => {
                let why = match why {
                    Loss::Closed => "connection closed",
                    Loss::Silent => "silent too long",
                };
                eprintln!("lost {parent} ({why}); asking the source where to attach");
            }
            Event::BadData { parent, error } => {
                eprintln!("bad data from {parent}: {error}; re-attaching");
                self.link_error(error);
            }
            Event::LinkDropped { error } => {
                eprintln!("dropped a child's link: {error}");
                self.link_error(error);
            }
            Event::Frame(f) => self.frame(f)?,
            Event::Failed(f) => self.failure = Some(self.failure_message(f)),
            Event::SourceClosed
            | Event::ChildAttached { .. }
            | Event::Refused { .. }
            | Event::Ended => {}
        }
        Ok(())
    }

    fn link_error(&mut self, error: nagare_proto::tree::Error) {
        if self.link_errors.len() < MAX_LINK_ERRORS {
            self.link_errors.push(error.to_string());
        }
    }

    fn frame(&mut self, f: CompletedFrame) -> anyhow::Result<()> {
        if f.base == f.number.checked_sub(1) {
            self.latency.record(now_us().saturating_sub(f.captured_us));
        }
        let Some(canvas) = self.peer.canvas() else {
            return Ok(());
        };
        let pixels = canvas.pixels();
        if let Some(fp) = &mut self.fingerprints {
            fp.push((f.number, fingerprint(pixels)));
        }
        if let Some(o) = &mut self.output {
            o.write_all(pixels).context("writing the output file")?;
        }
        #[cfg(feature = "x11")]
        if let Some(v) = &mut self.viewer {
            if let Err(e) = v.show(pixels) {
                eprintln!("--view: {e:#}; closing the window");
                self.viewer = None;
            }
        }
        Ok(())
    }

    #[cfg(feature = "x11")]
    fn open_view(&mut self, format: nagare_proto::VideoFormat) {
        if self.want_view && self.viewer.is_none() {
            match super::view::Viewer::open(format) {
                Ok(v) => self.viewer = Some(v),
                Err(e) => {
                    eprintln!("--view: {e:#}; going on without a window");
                    self.want_view = false;
                }
            }
        }
    }

    #[cfg(not(feature = "x11"))]
    fn open_view(&mut self, _format: nagare_proto::VideoFormat) {
        // Refused at start: --view needs the x11 feature.
        let _ = self.want_view;
    }

    /// The I/O error of the newest dial, for messages.
    fn last_dial_error(&self) -> String {
        self.dials
            .last()
            .and_then(|&d| self.links.dial_error(d))
            .map_or_else(|| "no answer".to_owned(), ToString::to_string)
    }

    fn attach_failure(&self, why: AttachFailure) -> String {
        match why {
            AttachFailure::Unreachable => self.last_dial_error(),
            AttachFailure::Refused(reason) => format!("refused: {reason}"),
            AttachFailure::Timeout => "no answer within 5 s".to_owned(),
            AttachFailure::Closed => "the parent closed the connection".to_owned(),
            AttachFailure::Protocol(e) => e.to_string(),
        }
    }

    fn failure_message(&self, f: Failure) -> anyhow::Error {
        let source = self.source;
        match f {
            Failure::SourceUnreachable => anyhow!(
                "connecting to the source at {source}: {}; is `nagare tree source` running there?",
                self.last_dial_error()
            ),
            Failure::Refused(reason) => anyhow!("the source refused: {reason}"),
            Failure::SourceClosed => {
                anyhow!("the source at {source} closed the connection before placing this peer")
            }
            Failure::Timeout => anyhow!(
                "the source at {source} did not answer within 5 s; is it a `nagare tree` of the same version?"
            ),
            Failure::Protocol(e) => anyhow!(
                "the source at {source} broke the protocol ({e}); is it a `nagare tree` of the same version?"
            ),
            Failure::Silent { parent, waited } => anyhow!(
                "no frame for {} s (parent {parent}); raise --timeout or check the source",
                waited.as_secs_f64()
            ),
            Failure::Abandoned { parent } => anyhow!(
                "lost {parent} and the source has closed this peer's control link (it stopped, or took this peer for dead)"
            ),
        }
    }

    fn report(&mut self) -> PeerReport {
        let s = self.peer.stats();
        let fanout = self.peer.fanout();
        PeerReport {
            peer: s.peer.0,
            slot: s.slot,
            depth: s.depth,
            frames: s.frames,
            first: s.first,
            last: s.last,
            lost: s.lost,
            repeated: s.repeated,
            reattaches: s.reattaches,
            recoveries_ms: s.recoveries.iter().map(|r| r.as_millis_f64()).collect(),
            latency_us: self.latency.summary(1.0),
            bytes_received: s.bytes_received,
            cpu_seconds: cpu_seconds() - self.cpu0,
            lag_drops: fanout.lag_drops(),
            refreshes: fanout.refreshes(),
            ended: self.peer.ended(),
            link_errors: std::mem::take(&mut self.link_errors),
            fingerprints: self.fingerprints.take().unwrap_or_default(),
        }
    }
}
