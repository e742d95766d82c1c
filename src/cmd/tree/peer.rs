//! `nagare tree join`: receive the screen from the parent the coordinator
//! names, relay every chunk to up to two children as it arrives, and
//! re-attach wherever the coordinator says when the parent vanishes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crossbeam_channel::{RecvTimeoutError, Sender, unbounded};
use nagare_proto::VideoFormat;
use nagare_proto::screen::{Canvas, ScreenMessage};
use nagare_proto::tree::relay::Chunk;
use nagare_proto::tree::wire::{
    self as tree_wire, Control, Kind, PeerId, Role, SessionKey, proof, proof_matches,
};
use serde::Serialize;

use super::fanout::{Fanout, Message};
use super::view::Viewer;
use super::{
    JoinArgs, challenge, check_no_refusal, fingerprint, now_us, parse_key, read_challenge,
    read_control, read_message, refuse, resolve, send,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A parent that sends nothing for this long is taken as gone (the
/// source sends a frame every period, even an empty one).
const SILENCE: Duration = Duration::from_secs(5);

enum Event {
    Placed {
        peer: PeerId,
        slot: u32,
        depth: u32,
        parent: PeerId,
        parent_addr: SocketAddr,
    },
    CoordinatorGone,
    Upstream(u64, Vec<u8>),
    UpstreamLost(u64, String),
    Child(TcpStream, PeerId, Option<u64>),
}

#[derive(Serialize, Default)]
struct LatencySummary {
    count: usize,
    mean: f64,
    p50: u64,
    p90: u64,
    p99: u64,
    max: u64,
}

impl LatencySummary {
    fn of(mut v: Vec<u64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        LatencySummary {
            count: v.len(),
            mean: v.iter().sum::<u64>() as f64 / v.len() as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

#[derive(Serialize, Default)]
struct PeerReport {
    peer: u32,
    slot: u32,
    depth: u32,
    frames: u64,
    first: Option<u64>,
    last: Option<u64>,
    /// Frame numbers skipped between frames this peer completed.
    lost: u64,
    /// Frames completed that were not newer than the last one (after
    /// re-attaching to a parent that was behind).
    repeated: u64,
    reattaches: u64,
    recoveries_ms: Vec<f64>,
    latency_us: LatencySummary,
    bytes_received: u64,
    cpu_seconds: f64,
    lag_drops: u64,
    refreshes: u64,
    ended: bool,
    fingerprints: Vec<(u64, u64)>,
}

struct Peer {
    key: SessionKey,
    source: SocketAddr,
    control: TcpStream,
    tx: Sender<Event>,
    id: PeerId,
    parent: PeerId,
    upstream: Option<TcpStream>,
    generation: u64,
    canvas: Option<Canvas>,
    fanout: Fanout,
    waiting_children: Vec<(TcpStream, PeerId, Option<u64>)>,
    report: PeerReport,
    latencies: Vec<u64>,
    lost_at: Option<Instant>,
    output: Option<BufWriter<File>>,
    viewer: Option<Viewer>,
    want_view: bool,
    fingerprints: bool,
    /// Test only: a pause the upstream reader takes once.
    stall: Option<Duration>,
}

/// Upstream messages read before a test stall starts: past the first
/// frames, so the stall hits a running stream.
const STALL_AFTER: u64 = 30;

/// Joins the tree and runs until the stream ends.
pub fn run(args: JoinArgs) -> anyhow::Result<ExitCode> {
    let key_text = match &args.key {
        Some(k) => k.clone(),
        None => std::env::var("NAGARE_TREE_KEY").map_err(|_| {
            anyhow::anyhow!("no session key: pass --key with the key `nagare tree source` printed, or set NAGARE_TREE_KEY")
        })?,
    };
    let key = parse_key(&key_text)?;
    let source = resolve(&args.source, "source address")?;
    let listener = TcpListener::bind(&args.listen).with_context(|| {
        format!(
            "binding the relay listener on {}; pick another --listen",
            args.listen
        )
    })?;
    let relay_port = listener.local_addr()?.port();
    let mut control = TcpStream::connect_timeout(&source, CONNECT_TIMEOUT).with_context(|| {
        format!("connecting to the source at {source}; is `nagare tree source` running there?")
    })?;
    control.set_nodelay(true)?;
    control.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let nonce = read_challenge(&mut control, "the source")?;
    let proof = proof(&key, &nonce, Role::Join);
    send(&mut control, &Control::Join { proof, relay_port })?;
    let placed = read_control(&mut control).context("waiting for the source to place this peer")?;
    check_no_refusal(&placed, "the source")?;
    control.set_read_timeout(None)?;
    let Control::Placed {
        peer,
        slot,
        depth,
        parent,
        parent_addr,
    } = placed
    else {
        bail!("the source answered the join with {placed:?}");
    };

    let (tx, rx) = unbounded();
    {
        let mut reader = control.try_clone()?;
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                loop {
                    match read_control(&mut reader) {
                        Ok(Control::Placed {
                            peer,
                            slot,
                            depth,
                            parent,
                            parent_addr,
                        }) => {
                            let _ = tx.send(Event::Placed {
                                peer,
                                slot,
                                depth,
                                parent,
                                parent_addr,
                            });
                        }
                        Ok(_) => {}
                        Err(_) => {
                            let _ = tx.send(Event::CoordinatorGone);
                            return;
                        }
                    }
                }
            })?;
    }
    {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || accept_children(listener, key, tx))?;
    }
    let output = match &args.output {
        Some(p) => {
            Some(BufWriter::new(File::create(p).with_context(|| {
                format!("creating output file {}", p.display())
            })?))
        }
        None => None,
    };
    let mut me = Peer {
        key,
        source,
        control,
        tx,
        id: peer,
        parent,
        upstream: None,
        generation: 0,
        canvas: None,
        fanout: Fanout::default(),
        waiting_children: Vec::new(),
        report: PeerReport {
            peer: peer.0,
            ..PeerReport::default()
        },
        latencies: Vec::new(),
        lost_at: None,
        output,
        viewer: None,
        want_view: args.view,
        fingerprints: args.report.is_some(),
        stall: (args.stall_ms > 0).then(|| Duration::from_millis(args.stall_ms)),
    };
    println!("placed {peer} slot {slot} depth {depth} under {parent}");
    let _ = std::io::stdout().flush();
    me.placed(slot, depth, parent, parent_addr);
    let cpu0 = super::source::cpu_seconds();

    let timeout = Duration::from_secs(args.timeout.max(1));
    let mut last_progress = Instant::now();
    let mut coordinator_gone = false;
    let result = loop {
        if args.frames.is_some_and(|f| me.report.frames >= f) {
            break Ok(());
        }
        if last_progress.elapsed() > timeout {
            break Err(anyhow::anyhow!(
                "no frame for {} s (parent {}); raise --timeout or check the source",
                args.timeout,
                me.parent
            ));
        }
        let ev = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break Ok(()),
        };
        match ev {
            Event::Placed {
                peer,
                slot,
                depth,
                parent,
                parent_addr,
            } => {
                me.id = peer;
                println!("moved {peer} slot {slot} depth {depth} under {parent}");
                me.placed(slot, depth, parent, parent_addr);
            }
            // The source closes every control link when it stops, which can
            // overtake the end of the stream still travelling down the
            // tree; only a lost parent after that is fatal.
            Event::CoordinatorGone => coordinator_gone = true,
            Event::Upstream(g, msg) if g == me.generation => match me.upstream_message(&msg) {
                Ok(true) => last_progress = Instant::now(),
                Ok(false) => {}
                Err(e) => {
                    eprintln!("bad data from {}: {e:#}; re-attaching", me.parent);
                    me.reattach_same();
                }
            },
            Event::Upstream(..) => {}
            Event::UpstreamLost(g, why) if g == me.generation => {
                if me.report.ended {
                    break Ok(());
                }
                if coordinator_gone {
                    break Err(anyhow::anyhow!(
                        "lost {} ({why}) and the source has closed this peer's control link (it stopped, or took this peer for dead)",
                        me.parent
                    ));
                }
                eprintln!(
                    "lost {} ({why}); asking the source where to attach",
                    me.parent
                );
                me.drop_upstream();
                me.lost_at.get_or_insert_with(Instant::now);
                let _ = send(&mut me.control, &Control::Orphaned { parent: me.parent });
            }
            Event::UpstreamLost(..) => {}
            Event::Child(stream, peer, version) => me.admit(stream, peer, version),
        }
        if me.report.ended {
            break Ok(());
        }
    };
    me.fanout.finish(&Message::from(Control::End.to_bytes()));
    if let Some(o) = &mut me.output {
        o.flush().context("writing the output file")?;
    }
    me.report.latency_us = LatencySummary::of(std::mem::take(&mut me.latencies));
    me.report.cpu_seconds = super::source::cpu_seconds() - cpu0;
    me.report.lag_drops = me.fanout.lag_drops;
    me.report.refreshes = me.fanout.refreshes;
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_vec(&me.report)?)
            .with_context(|| format!("writing report {}", path.display()))?;
    }
    let _ = me.control.shutdown(Shutdown::Both);
    result?;
    Ok(ExitCode::SUCCESS)
}

fn accept_children(listener: TcpListener, key: SessionKey, tx: Sender<Event>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name("child-handshake".into())
            .spawn(move || {
                let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
                let Ok(nonce) = challenge(&mut stream) else {
                    return;
                };
                match read_control(&mut stream) {
                    Ok(Control::Attach {
                        proof,
                        peer,
                        version,
                    }) if proof_matches(&key, &nonce, Role::Attach, &proof) => {
                        let _ = stream.set_read_timeout(None);
                        let _ = tx.send(Event::Child(stream, peer, version));
                    }
                    Ok(Control::Attach { .. }) => refuse(
                        &mut stream,
                        "wrong session key: use the key `nagare tree source` printed",
                    ),
                    _ => refuse(&mut stream, "expected an attach request"),
                }
            });
    }
}

impl Peer {
    fn placed(&mut self, slot: u32, depth: u32, parent: PeerId, parent_addr: SocketAddr) {
        self.report.slot = slot;
        self.report.depth = depth;
        if parent == self.parent && self.upstream.is_some() {
            // A repeated placement (e.g. the answer to an orphan report
            // that a sibling's report already settled).
            return;
        }
        let addr = if parent == PeerId::SOURCE {
            self.source
        } else {
            parent_addr
        };
        if self.canvas.is_some() {
            // A move (the parent failed and a sibling's report got here
            // first, or this peer fills a hole): time it as a recovery.
            self.lost_at.get_or_insert_with(Instant::now);
        }
        self.drop_upstream();
        self.parent = parent;
        if let Err(e) = self.attach(addr) {
            eprintln!("attaching to {parent} at {addr} failed: {e:#}");
            self.lost_at.get_or_insert_with(Instant::now);
            // Do not hammer the coordinator while a repair is settling.
            std::thread::sleep(Duration::from_millis(50));
            let _ = send(&mut self.control, &Control::Orphaned { parent });
        }
    }

    fn drop_upstream(&mut self) {
        if let Some(s) = self.upstream.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.generation += 1;
        if let Some(c) = &mut self.canvas {
            c.abort();
        }
    }

    fn reattach_same(&mut self) {
        let addr = self
            .upstream
            .as_ref()
            .and_then(|s| s.peer_addr().ok())
            .unwrap_or(self.source);
        let parent = self.parent;
        self.drop_upstream();
        if self.attach(addr).is_err() {
            let _ = send(&mut self.control, &Control::Orphaned { parent });
        }
    }

    fn attach(&mut self, addr: SocketAddr) -> anyhow::Result<()> {
        let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let version = self.canvas.as_ref().and_then(Canvas::version);
        let nonce = read_challenge(&mut s, "the parent")?;
        send(
            &mut s,
            &Control::Attach {
                proof: proof(&self.key, &nonce, Role::Attach),
                peer: self.id,
                version,
            },
        )?;
        let reply = read_control(&mut s)?;
        check_no_refusal(&reply, "the parent")?;
        let Control::Welcome { format } = reply else {
            bail!("parent answered the attach with {reply:?}");
        };
        self.set_format(format)?;
        s.set_read_timeout(Some(SILENCE))?;
        let mut reader = s.try_clone()?;
        let (tx, generation) = (self.tx.clone(), self.generation);
        let mut stall = self.stall.take();
        std::thread::Builder::new()
            .name("upstream".into())
            .spawn(move || {
                let mut read = 0u64;
                loop {
                    if read == STALL_AFTER {
                        if let Some(d) = stall.take() {
                            std::thread::sleep(d);
                        }
                    }
                    read += 1;
                    match read_message(&mut reader) {
                        Ok(m) => {
                            if tx.send(Event::Upstream(generation, m)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Event::UpstreamLost(generation, format!("{e:#}")));
                            return;
                        }
                    }
                }
            })?;
        self.upstream = Some(s);
        send(&mut self.control, &Control::Ready)?;
        Ok(())
    }

    fn set_format(&mut self, format: VideoFormat) -> anyhow::Result<()> {
        match &self.canvas {
            Some(c) if c.format() != format => bail!(
                "the new parent streams {}x{} {}, this peer holds {}x{} {}",
                format.width,
                format.height,
                format.pixel_format,
                c.format().width,
                c.format().height,
                c.format().pixel_format
            ),
            Some(_) => {}
            None => {
                self.canvas = Some(Canvas::new(format)?);
                if self.want_view {
                    match Viewer::open(format) {
                        Ok(v) => self.viewer = Some(v),
                        Err(e) => eprintln!("--view: {e:#}; going on without a window"),
                    }
                }
                for (s, p, v) in std::mem::take(&mut self.waiting_children) {
                    self.admit(s, p, v);
                }
            }
        }
        Ok(())
    }

    fn admit(&mut self, mut stream: TcpStream, peer: PeerId, version: Option<u64>) {
        let Some(c) = &self.canvas else {
            // The format is not known yet; welcome it once it is.
            self.waiting_children.push((stream, peer, version));
            return;
        };
        let welcome = Control::Welcome { format: c.format() }.to_bytes();
        if stream.write_all(&welcome).is_ok() {
            let _ = self.fanout.add(peer, stream, version);
        }
    }

    /// Handles one message from the parent; `Ok(true)` when it completed
    /// a frame.
    fn upstream_message(&mut self, msg: &[u8]) -> anyhow::Result<bool> {
        self.report.bytes_received += msg.len() as u64;
        let (kind, body) = tree_wire::split(msg)?;
        if kind == Kind::End {
            self.report.ended = true;
            return Ok(false);
        }
        let Some(screen) = ScreenMessage::parse(kind, body)? else {
            bail!("unexpected {kind:?} in the stream");
        };
        let Some(canvas) = &mut self.canvas else {
            bail!("frame data before the welcome");
        };
        if let ScreenMessage::FrameStart { .. } = screen {
            // A start cuts off any open frame; children are caught up
            // from the last whole one.
            canvas.abort();
            self.fanout.catch_up(canvas);
        }
        self.fanout.offer(Chunk::from(&screen), &Message::from(msg));
        let Some(frame) = canvas.apply(&screen)? else {
            return Ok(false);
        };
        let r = &mut self.report;
        match r.last {
            Some(last) if frame.number <= last => r.repeated += 1,
            Some(last) => {
                r.lost += frame.number - last - 1;
                r.last = Some(frame.number);
            }
            None => {
                r.first = Some(frame.number);
                r.last = Some(frame.number);
            }
        }
        r.frames += 1;
        if frame.base == frame.number.checked_sub(1) {
            self.latencies
                .push(now_us().saturating_sub(frame.captured_us));
        }
        if let Some(t) = self.lost_at.take() {
            r.reattaches += 1;
            r.recoveries_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        if self.fingerprints {
            r.fingerprints
                .push((frame.number, fingerprint(canvas.pixels())));
        }
        if let Some(o) = &mut self.output {
            o.write_all(canvas.pixels())
                .context("writing the output file")?;
        }
        if let Some(v) = &mut self.viewer {
            if let Err(e) = v.show(canvas.pixels()) {
                eprintln!("--view: {e:#}; closing the window");
                self.viewer = None;
            }
        }
        Ok(true)
    }
}
