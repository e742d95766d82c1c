//! `nagare recv --stripes N` (and any `recv` with a second ST 2022-7 leg):
//! one frame arriving as N stripe streams, each maybe on two legs,
//! reassembled into whole frames and recorded.
//!
//! Threads: `min(N, cores)` receive threads each own the sockets of some
//! stripes (every leg of a stripe on the same thread, so its merge needs
//! no lock) and wait on them with `poll`. Per stripe, nagare-proto's
//! `st2022_7::Merger` keeps the first copy of each packet and its
//! `video::Receiver` makes stripe frames; the main thread puts them
//! together with `video::assembler::Assembler` (aligned by RTP timestamp)
//! and has `video::book::FrameBook` book every whole frame (its index,
//! lost frames, repeat-last, the frame limit, the stripes' skew); a writer
//! thread records what the book says. This driver only moves datagrams,
//! stripe frames, whole frames and the book's events between those
//! machines and the writer.
//!
//! When every stripe is one run of the frame's bytes (`--split lines`),
//! each stripe's receiver writes its frames straight into its part of the
//! assembler's whole frame ([`Assembler::lend`], through a
//! `st2110_20::Lender`): the assembler is shared behind a lock, taken by
//! a receive thread once per stripe frame, so the frame is written once,
//! by the kernel, and never copied into place.
//!
//! With `--rtcp` each stripe answers its sender's reports with receiver
//! reports, as a single `recv --rtcp` does: one `rtcp::Reader` per leg of
//! each stripe, on the leg's own RTCP port, looked at by its receive
//! thread between reads. One reader per leg rather than one compound
//! with a block per SSRC: each stripe, and each leg of an ST 2022-7 pair,
//! is an RTP session of its own (its own port and RTCP port, and its
//! sender reports on that port), so its reports go where its own sender
//! reports came from, with what that leg delivered, and a stripe's RTCP
//! never waits on another thread.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver as ChanRx, RecvTimeoutError, Sender as ChanTx, bounded};
use nagare_api::cluster::ClusterConfig;
use nagare_api::stripes::{FrameFailure, LegReport, StripeReport, StripesReport};
use nagare_api::video::{EndedBy, FrameList, RecvRtcp};
use nagare_proto::nmos::connection::Listen;
use nagare_proto::sdp::{SdpStream, Session};
use nagare_proto::video::aligned::{AlignedBuf, Part};
use nagare_proto::video::assembler::Assembler;
use nagare_proto::video::book::{
    Config as BookConfig, Event as BookEvent, FrameBook, Input as BookInput,
};
use nagare_proto::video::landing::Landed;
use nagare_proto::video::receiver::{self, Config, Datagram, Event, Incomplete};
use nagare_proto::video::st2022_7::{self, Arrival, Merger};
use nagare_proto::video::st2110_20::Lender;
use nagare_proto::video::stripe::Stripes;
use nagare_proto::{BitRate, ByteSize, FrameRate, MediaTime, Nanos};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::cli;
use crate::clock::Origin;
use crate::engine::recv::recording::Plan as RecordingPlan;
use crate::engine::recv::writer::{ToWriter, Writer};
use crate::engine::recv::{RecvArgs, read_sdp};
use crate::net::placement::{CpuChoice, Placement, Role};
use crate::net::rtcp::reading::{ReaderRtcp, next_port};
use crate::net::rtcp::sending::rtcp_dest;
use crate::net::udp::{self, Interface, ReceiveOptions, Receiver};
use crate::progress::{Ticker, bitrate};

/// Whether `args` ask for stripes or a second leg (this module's work).
pub(super) fn wanted(args: &RecvArgs) -> Result<bool> {
    let s = &args.striping;
    if s.stripes.is_some() || s.dup.is_some() || s.cluster.is_some() || args.sdp.len() > 1 {
        return Ok(true);
    }
    match args.sdp.first() {
        Some(path) => Ok(sdp_legs(path)?.0.len() > 1),
        None => Ok(false),
    }
}

/// Where one leg of one stripe arrives.
#[derive(Debug, Clone)]
struct Leg {
    listen: SocketAddr,
    /// The only sender accepted on a multicast group (SSM), from the SDP's
    /// source filter or --source.
    source: Option<IpAddr>,
    /// The multicast TTL the SDP names, for RTCP to the group.
    ttl: Option<u8>,
    /// The interface this leg's group is joined on, when it is not the
    /// plan's (`recv --nmos`: each leg's `interface_ip`).
    interface: Option<Interface>,
    /// Where its SDP's `a=rtcp` (RFC 3605) puts its RTCP.
    rtcp: Option<SocketAddr>,
}

/// Every stripe's legs, in stripe order.
type Legs = Vec<Vec<Leg>>;

/// A validated striped receive.
pub(super) struct Plan {
    stripes: Stripes,
    /// Per stripe, each leg.
    legs: Legs,
    /// Per stripe, each leg's RTCP port (`--rtcp`).
    rtcp: Vec<Vec<Option<SocketAddr>>>,
    rate: Option<FrameRate>,
    socket: ReceiveOptions,
    /// Where whole frames are recorded, if anywhere.
    recording: Option<RecordingPlan>,
    frames: Option<u64>,
    timeout: Option<Duration>,
    incomplete: Incomplete,
    threads: usize,
    /// --cpu: where the receive threads run.
    cpu: CpuChoice,
    /// --realtime: SCHED_FIFO for the receive threads.
    realtime: bool,
    quiet: bool,
}

/// The legs an SDP file describes, and the whole session (for each
/// leg's `a=rtcp`).
fn sdp_legs(path: &Path) -> Result<(Vec<SdpStream>, Session)> {
    let text = read_sdp(path)?;
    let bad = |e| anyhow!("SDP file '{}': {e}", path.display());
    let legs = SdpStream::parse_legs(&text).map_err(bad)?;
    Ok((legs, Session::parse(&text).map_err(bad)?))
}

/// Port `base + k`, or why not.
fn shifted(base: SocketAddr, k: usize, flag: &str) -> Result<SocketAddr> {
    let port = usize::from(base.port()) + k;
    let port = u16::try_from(port)
        .map_err(|_| anyhow!("stripe {k} would need {flag} port {port}, above 65535: lower it"))?;
    Ok(SocketAddr::new(base.ip(), port))
}

/// Stripes and legs from one SDP per stripe.
fn plan_from_sdps(args: &RecvArgs) -> Result<(Stripes, Legs, Option<FrameRate>)> {
    let rule = args.striping.split;
    let mut legs = Vec::new();
    let (mut format, mut rate) = (None, None);
    for path in &args.sdp {
        let (streams, session) = sdp_legs(path)?;
        let first = &streams[0];
        if format.is_some_and(|f| f != first.format) {
            bail!(
                "SDP '{}' describes {}x{} but the first SDP's stripes are {}: give the SDPs of one split stream",
                path.display(),
                first.format.width,
                first.format.height,
                format.map_or(String::new(), |f: nagare_proto::VideoFormat| format!(
                    "{}x{}",
                    f.width, f.height
                ))
            );
        }
        format = Some(first.format);
        rate = rate.or(first.rate);
        legs.push(
            streams
                .iter()
                .map(|s| {
                    let listen = SocketAddr::new(s.address, s.port);
                    Leg {
                        listen,
                        source: s.source,
                        ttl: s.ttl,
                        interface: None,
                        rtcp: session.rtcp_of(listen),
                    }
                })
                .collect(),
        );
    }
    let count = args.striping.stripes.unwrap_or(legs.len());
    if count != legs.len() {
        bail!(
            "--stripes {count} but {} --sdp files: give one SDP per stripe",
            legs.len()
        );
    }
    let format = format.context("no --sdp given")?;
    let stripes = Stripes::from_stripe(format, rule, count)
        .map_err(|e| anyhow!("the SDPs' stripes cannot be {count} stripes split by {rule}: {e}"))?;
    Ok((stripes, legs, rate))
}

/// Stripes and legs from --listen, --size and --stripes.
fn plan_from_listen(args: &RecvArgs) -> Result<(Stripes, Legs)> {
    let s = &args.striping;
    let listen = args
        .listen
        .as_deref()
        .context("give --listen HOST:PORT or --sdp FILE")?;
    let base = udp::parse_addr(listen, "listen address")?;
    let (Some(size), Some(pf)) = (args.size, args.pix_fmt) else {
        bail!(
            "--listen needs --size (of the whole frame) and --pix-fmt (or use --sdp FILE per stripe)"
        );
    };
    let count = s.stripes.unwrap_or(1);
    let format = cli::video_format(size, pf)?;
    let stripes = cli::stripes_of(format, count, s.split)?;
    if base.port() == 0 && count > 1 {
        bail!("--stripes {count} needs a fixed base port in --listen, not 0");
    }
    let dup = s
        .dup
        .as_deref()
        .map(|d| udp::parse_addr(d, "--dup address"))
        .transpose()?;
    let source = args
        .source
        .as_deref()
        .map(|t| {
            t.parse::<IpAddr>()
                .map_err(|_| anyhow!("--source '{t}' is not an IP address"))
        })
        .transpose()?;
    if let Some(src) = source
        && !base.ip().is_multicast()
    {
        bail!("--source {src} only applies to a multicast group; {base} is unicast");
    }
    let leg = |listen: SocketAddr| Leg {
        listen,
        source: source.filter(|_| listen.ip().is_multicast()),
        ttl: None,
        interface: None,
        rtcp: None,
    };
    let mut legs = Vec::with_capacity(count);
    for k in 0..count {
        let mut l = vec![leg(shifted(base, k, "--listen")?)];
        if let Some(d) = dup {
            l.push(leg(shifted(d, k, "--dup")?));
        }
        legs.push(l);
    }
    Ok((stripes, legs))
}

/// Where each leg of each stripe has its RTCP read and answered with
/// `--rtcp` (each leg is an RTP session of its own, with its own sender
/// reports): the SDP's `a=rtcp`; from `--listen`, where `send --stripes`
/// sends it (past every stripe's RTP port, the same rule as send's);
/// otherwise the RTP port + 1 (RFC 3550 §11).
fn rtcp_ports(args: &RecvArgs, legs: &Legs) -> Vec<Vec<Option<SocketAddr>>> {
    if !args.rtcp {
        return legs.iter().map(|l| vec![None; l.len()]).collect();
    }
    let from_listen = args.sdp.is_empty() && args.striping.cluster.is_none();
    let mut out = Vec::with_capacity(legs.len());
    for (k, l) in legs.iter().enumerate() {
        let mut per_leg = Vec::with_capacity(l.len());
        for (j, leg) in l.iter().enumerate() {
            let rtp = leg.listen;
            let at = match leg.rtcp {
                Some(at) => Some(at),
                // A port the kernel picks has no known port beside it.
                None if rtp.port() == 0 => None,
                None if from_listen => rtcp_dest(rtp, legs.len()),
                None => next_port(rtp).ok(),
            };
            if at.is_none() {
                eprintln!(
                    "nagare recv: note: {}: no RTCP: give its RTP port in --listen (not 0), \
                     one whose RTCP port is not above 65535",
                    leg_name(k, j, l.len())
                );
            }
            per_leg.push(at);
        }
        out.push(per_leg);
    }
    out
}

/// How messages name leg `j` of stripe `k` of `legs` legs.
fn leg_name(k: usize, j: usize, legs: usize) -> String {
    if legs > 1 {
        format!("stripe {k} leg {j}")
    } else {
        format!("stripe {k}")
    }
}

/// What a `nagare cluster` config says about receiving.
struct FromCluster {
    stripes: Stripes,
    legs: Legs,
    rate: FrameRate,
    /// Its `[receiver] interface`, resolved only when no --interface
    /// overrides it.
    interface: Option<String>,
}

/// Stripes, legs, rate and interface from a `nagare cluster` config.
fn plan_from_cluster(path: &Path) -> Result<FromCluster> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read --cluster '{}'", path.display()))?;
    if meta.len() > 1 << 20 {
        bail!(
            "--cluster '{}' is {} bytes; a cluster config is at most a few KiB",
            path.display(),
            meta.len()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --cluster '{}'", path.display()))?;
    let c: ClusterConfig = toml::from_str(&text).with_context(|| {
        format!(
            "--cluster '{}' is not a nagare cluster config ([stream], [[destination]], [[node]])",
            path.display()
        )
    })?;
    let s = &c.stream;
    let format = cli::parse_format(&s.size, &s.pix_fmt)?;
    let rate = cli::parse_rate(&s.fps)?;
    let stripes = cli::stripes_of(format, s.stripes, s.split)?;
    if c.destinations.len() != s.stripes {
        bail!(
            "--cluster '{}' has {} [[destination]] tables for {} stripes: one per stripe",
            path.display(),
            c.destinations.len(),
            s.stripes
        );
    }
    let mut legs = Vec::with_capacity(s.stripes);
    for (k, d) in c.destinations.iter().enumerate() {
        let mut l = Vec::new();
        for a in std::iter::once(&d.to).chain(&d.dup) {
            let listen = udp::parse_addr(a, &format!("destination {k}"))?;
            l.push(Leg {
                listen,
                source: None,
                ttl: None,
                interface: None,
                rtcp: None,
            });
        }
        legs.push(l);
    }
    Ok(FromCluster {
        stripes,
        legs,
        rate,
        interface: c.receiver.interface,
    })
}

impl Plan {
    fn new(args: &RecvArgs) -> Result<Plan> {
        if args.striping.dup.is_some() && !args.sdp.is_empty() {
            bail!("--dup goes with --listen; with --sdp, name both legs in the SDP (a=group:DUP)");
        }
        let mut interface = args.interface.clone();
        let (stripes, legs, sdp_rate) = match &args.striping.cluster {
            Some(path) => {
                let c = plan_from_cluster(path)?;
                // --interface wins over the file.
                if let (None, Some(i)) = (&interface, &c.interface) {
                    let found = cli::parse_interface(i).with_context(|| {
                        format!(
                            "--cluster '{}': [receiver] interface = \"{i}\"",
                            path.display()
                        )
                    })?;
                    interface = Some(found);
                }
                (c.stripes, c.legs, Some(c.rate))
            }
            None if args.sdp.is_empty() => {
                let (s, l) = plan_from_listen(args)?;
                (s, l, None)
            }
            None => plan_from_sdps(args)?,
        };
        Plan::build(args, stripes, legs, sdp_rate, interface)
    }

    /// One stream on the legs `listens` (an ST 2022-7 pair), of the
    /// format the SDP `text` says: what `recv --nmos` activates with two
    /// legs. `what` names the SDP in errors.
    pub(super) fn for_legs(
        args: &RecvArgs,
        text: &str,
        what: &str,
        listens: &[Listen],
    ) -> Result<Plan> {
        let streams = SdpStream::parse_legs(text).map_err(|e| anyhow!("{what}: {e}"))?;
        let session = Session::parse(text).ok();
        let first = &streams[0];
        let stripes = Stripes::from_stripe(first.format, args.striping.split, 1)
            .map_err(|e| anyhow!("{what}: {e}"))?;
        let mut legs = Vec::with_capacity(listens.len());
        for (k, l) in listens.iter().enumerate() {
            legs.push(Leg {
                listen: l.address,
                source: l.source.filter(|_| l.address.ip().is_multicast()),
                ttl: streams.get(k).and_then(|s| s.ttl),
                interface: l
                    .interface
                    .map(|ip| udp::parse_interface(&ip.to_string()))
                    .transpose()?,
                rtcp: session.as_ref().and_then(|s| s.rtcp_of(l.address)),
            });
        }
        Plan::build(
            args,
            stripes,
            vec![legs],
            first.rate,
            args.interface.clone(),
        )
    }

    /// The socket options of `leg`: the plan's, with the leg's source
    /// filter and, where it has its own, its interface.
    fn leg_options(&self, leg: &Leg) -> ReceiveOptions {
        ReceiveOptions {
            source: leg.source,
            interface: leg
                .interface
                .clone()
                .or_else(|| self.socket.interface.clone()),
            ..self.socket.clone()
        }
    }

    /// The plan of `legs` of `stripes`, every other flag from `args`.
    fn build(
        args: &RecvArgs,
        stripes: Stripes,
        legs: Legs,
        sdp_rate: Option<FrameRate>,
        interface: Option<Interface>,
    ) -> Result<Plan> {
        // Pinned to one CPU, a second receive thread would only take turns;
        // placed, receive threads share every CPU but a sender's.
        let all = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cores = match args.cpu {
            CpuChoice::Cpu(_) => 1,
            CpuChoice::Auto => all.saturating_sub(1).max(1),
            CpuChoice::None => all,
        };
        let threads = args
            .striping
            .threads
            .unwrap_or(cores)
            .clamp(1, stripes.count());
        let frame = stripes.stripe_format().frame_bytes();
        let rtcp = rtcp_ports(args, &legs);
        Ok(Plan {
            stripes,
            legs,
            rtcp,
            rate: args.fps.or(sdp_rate),
            socket: ReceiveOptions {
                interface,
                source: None,
                buffer_bytes: (frame * 4).clamp(8 << 20, 256 << 20),
            },
            recording: match &args.output {
                Some(path) => Some(RecordingPlan {
                    path: path.clone(),
                    frame_bytes: stripes.frame_format().frame_bytes() as u64,
                    segmenting: args.segmenting()?,
                    append: args.append,
                    pad_partial: args.incomplete == Incomplete::Keep,
                    direct: args.direct,
                }),
                None => None,
            },
            frames: args.frames,
            timeout: args.timeout,
            incomplete: args.incomplete,
            threads,
            cpu: args.cpu,
            realtime: args.realtime,
            quiet: args.json,
        })
    }
}

/// A stripe's frame on its way to the assembler.
struct Piece {
    stripe: usize,
    timestamp: MediaTime,
    data: Vec<u8>,
    /// The stripe's bytes, when they were written in the whole frame's
    /// memory (`data` is empty then).
    lent: Option<Part>,
    complete: bool,
    /// When its receive thread handed it out.
    at: Instant,
}

/// One stripe on a receive thread: its legs' sockets and its machines.
struct Unit {
    stripe: usize,
    sockets: Vec<Receiver>,
    drops_at_start: Vec<u32>,
    merger: Option<Merger>,
    machine: receiver::Receiver,
    /// Reads land in frame memory ([`Unit::land`]).
    landing: bool,
    recycled: ChanRx<Vec<u8>>,
    report: StripeReport,
    /// Its legs' senders' reports read and answered (`--rtcp`), by leg.
    rtcp: Vec<(usize, ReaderRtcp)>,
}

impl Unit {
    fn open(plan: &Plan, k: usize, recycled: ChanRx<Vec<u8>>) -> Result<Unit> {
        let mut sockets = Vec::new();
        for (leg, l) in plan.legs[k].iter().enumerate() {
            let opts = plan.leg_options(l);
            let addr = l.listen;
            if let Some(s) = l.source {
                udp::check_family(addr.ip(), Some(s))?;
            }
            let mut rx = Receiver::open(addr, &opts)
                .with_context(|| format!("stripe {k} leg {leg}: listening on {addr}"))?;
            rx.read_on_a_timer();
            for n in &rx.notices {
                eprintln!("nagare recv: note: stripe {k}: {n}");
            }
            sockets.push(rx);
        }
        let format = plan.stripes.stripe_format();
        // The path-differential tolerance: four frame periods of packets
        // of at least 500 bytes (ST 2022-7 asks for at least two).
        let window = (4 * format.frame_bytes() / 500) as u64;
        let legs = sockets.len();
        let mut machine = receiver::Receiver::new(Config {
            format,
            rate: plan.rate,
            // Zero-filled holes: a stripe with bytes missing still goes
            // into its frame, marked incomplete.
            incomplete: Incomplete::Keep,
            frame_limit: None,
        });
        if legs > 1 {
            // A packet the other leg makes good may come up to three frame
            // periods late (ST 2022-7 asks for two) and still count.
            machine.set_tolerance(3);
        }
        // Every buffer it would keep, faulted in before `listening on`.
        machine.warm(usize::MAX);
        // One leg, with GRO: reads land in frame memory (two legs go
        // through the merger, which needs every copy in hand).
        let landing = legs == 1 && sockets[0].gro;
        if landing {
            machine.enable_landing();
        }
        Ok(Unit {
            stripe: k,
            drops_at_start: sockets.iter().map(|s| s.kernel_drops).collect(),
            sockets,
            merger: (legs > 1).then(|| Merger::new(legs, window)),
            machine,
            landing,
            recycled,
            report: StripeReport {
                stripe: k,
                ..StripeReport::default()
            },
            rtcp: Vec::new(),
        })
    }

    /// Binds each leg's RTCP port that it has (joined as the leg is, on
    /// a multicast group); says why not when that fails.
    fn bind_rtcp(&mut self, plan: &Plan) {
        let k = self.stripe;
        let legs = &plan.legs[k];
        for (j, (leg, at)) in legs.iter().zip(&plan.rtcp[k]).enumerate() {
            let Some(at) = *at else { continue };
            let name = leg_name(k, j, legs.len());
            match ReaderRtcp::bind(at, &plan.leg_options(leg), leg.ttl) {
                Ok(r) => {
                    eprintln!("nagare recv: {name} RTCP on {at}");
                    self.rtcp.push((j, r));
                }
                Err(why) => eprintln!("nagare recv: note: {name}: {why}"),
            }
        }
    }

    /// Reads each leg sender's reports and answers them when due, with
    /// what that leg delivered (`st2022_7::Merger::reception`): a clock
    /// read per call, and a look at the socket at most every 10 ms
    /// (`reading::LOOK`), never per packet.
    fn rtcp(&mut self, origin: Origin) {
        let (machine, merger) = (&self.machine, &self.merger);
        for (leg, r) in &mut self.rtcp {
            r.step(origin.elapsed(), || {
                let merged = machine.reception()?;
                Some(match merger {
                    Some(m) => m.reception(*leg, merged),
                    None => merged,
                })
            });
        }
    }

    /// Whether any of this unit's sockets has a stream flowing.
    fn flowing(&self) -> bool {
        self.sockets.iter().any(Receiver::flowing)
    }

    /// Reads what socket `leg` has now (no waiting) and feeds the machines.
    fn read(&mut self, leg: usize, origin: Origin) -> Result<usize> {
        if self.landing {
            return self.land(leg, origin);
        }
        let (merger, machine) = (&mut self.merger, &mut self.machine);
        self.sockets[leg]
            .recv_ready(|d| {
                let now = origin.nanos(d.at);
                for bytes in d.segments() {
                    if let Some(m) = merger.as_mut()
                        && (m
                            .handle_input(now, st2022_7::Input::Datagram { leg, bytes })
                            .is_err()
                            || m.poll_event() != Some(Arrival::First))
                    {
                        continue;
                    }
                    machine.handle_input(
                        now,
                        Datagram {
                            bytes,
                            from: d.from,
                        },
                    );
                }
            })
            .with_context(|| format!("receiving stripe {}", self.stripe))
    }

    /// Reads what socket `leg` has now, one datagram or GRO batch at a
    /// time (as many as one `recvmmsg` would take), each aimed by the
    /// machine at the frame bytes its packets should fill.
    fn land(&mut self, leg: usize, origin: Origin) -> Result<usize> {
        let (sockets, machine) = (&mut self.sockets, &mut self.machine);
        let sock = &mut sockets[leg];
        let mut n = 0;
        while n < udp::RECV_SLOTS {
            let got = machine
                .land(|slices| {
                    Ok::<_, std::io::Error>(sock.recv_into(slices)?.map(|r| Landed {
                        len: r.len,
                        segment: r.segment,
                        at: origin.nanos(r.at),
                        from: r.from,
                    }))
                })
                .with_context(|| format!("receiving stripe {}", self.stripe))?;
            if got.is_none() {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Hands the machine's frames to the assembler.
    fn events(&mut self, out: &ChanTx<Piece>) -> Result<()> {
        while let Ok(buf) = self.recycled.try_recv() {
            self.machine.recycle(buf);
        }
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Stream { from, .. } => self.report.sender = from,
                Event::Frame(f) => {
                    self.report.first_timestamp.get_or_insert(f.timestamp.0);
                    self.report.last_timestamp = Some(f.timestamp.0);
                    let piece = Piece {
                        stripe: self.stripe,
                        timestamp: f.timestamp,
                        data: f.data,
                        lent: f.lent,
                        complete: f.complete,
                        at: Instant::now(),
                    };
                    out.send(piece)
                        .map_err(|_| anyhow!("the assembler stopped"))?;
                }
                // The assembler sees a stripe that skipped a frame when it
                // delivers the next one.
                Event::Lost { .. } | Event::Missing { .. } => {}
                Event::Rival {
                    ssrc, from, stream, ..
                } => eprintln!(
                    "nagare recv: warning: stripe {}: another stream (SSRC 0x{:08x} from {from:?}) \
                     besides SSRC 0x{:08x}; its packets are counted as foreign",
                    self.stripe, ssrc.0, stream.0
                ),
            }
        }
        Ok(())
    }

    /// Ends the stream: the last frames out, the counters into the report.
    fn finish(mut self, out: &ChanTx<Piece>) -> Result<Finished> {
        self.machine.finish();
        self.events(out)?;
        let s = self.machine.stats();
        let span = s.first_at.zip(s.last_at);
        let r = &mut self.report;
        r.packets_received = s.packets_received;
        r.packets_lost = s.packets_lost;
        r.packets_malformed = s.packets_malformed;
        r.packets_foreign = s.packets_foreign;
        r.bytes = s.bytes;
        let rtcp_of = |leg: usize| {
            self.rtcp
                .iter()
                .find(|(l, _)| *l == leg)
                .map(|(_, r)| r.report())
        };
        r.rtcp = rtcp_of(0);
        r.packets_in_place = self.machine.landing_stats().in_place;
        r.kernel_drops = self
            .sockets
            .iter()
            .zip(&self.drops_at_start)
            .map(|(s, d0)| u64::from(s.drops_now().unwrap_or(s.kernel_drops).wrapping_sub(*d0)))
            .sum();
        if let Some(m) = self.merger.as_mut() {
            m.finish();
            let c = m.counters();
            r.unrecovered = c.unrecovered;
            r.legs = c
                .legs
                .iter()
                .zip(&self.sockets)
                .map(|(l, s)| LegReport {
                    listen: s.local_addr(),
                    received: l.received,
                    lost: l.lost,
                    duplicates: l.duplicates,
                    recovered: l.recovered,
                    late: l.late,
                    rtcp: None,
                })
                .collect();
            for (leg, r) in r.legs.iter_mut().enumerate() {
                r.rtcp = rtcp_of(leg);
            }
        }
        Ok(Finished {
            report: self.report,
            span,
        })
    }
}

/// A stripe's report and the arrival of its first and last datagram.
struct Finished {
    report: StripeReport,
    span: Option<(Nanos, Nanos)>,
}

/// What the receive threads share with the main thread.
struct Shared {
    stop: AtomicBool,
    /// Nanoseconds on the origin's timeline of the newest datagram.
    last_packet: AtomicU64,
    origin: Origin,
}

/// A receive thread: waits on its units' sockets and feeds them.
fn receive_loop(
    mut units: Vec<Unit>,
    shared: &Shared,
    out: &ChanTx<Piece>,
) -> Result<Vec<Finished>> {
    let slots: Vec<(usize, usize)> = units
        .iter()
        .enumerate()
        .flat_map(|(u, unit)| (0..unit.sockets.len()).map(move |l| (u, l)))
        .collect();
    while !shared.stop.load(Ordering::Relaxed) {
        for u in &mut units {
            u.rtcp(shared.origin);
        }
        // While a stream flows, read every socket on a timer: asleep in
        // poll(), this thread would be woken by the sending CPU for
        // nearly every datagram (see udp::POLL_EVERY).
        if units.iter().any(Unit::flowing) {
            let mut got = 0;
            for &(u, l) in &slots {
                got += units[u].read(l, shared.origin)?;
                units[u].events(out)?;
            }
            if got > 0 {
                let now = shared.origin.elapsed().as_nanos();
                shared.last_packet.store(now, Ordering::Relaxed);
            } else {
                std::thread::sleep(udp::POLL_EVERY);
            }
            continue;
        }
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = slots
                .iter()
                .map(|&(u, l)| PollFd::new(units[u].sockets[l].as_fd(), PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::from(100u16)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(anyhow!("waiting for stripe datagrams: {e}")),
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        for (&(u, l), _) in slots.iter().zip(&ready).filter(|(_, r)| **r) {
            if units[u].read(l, shared.origin)? > 0 {
                let now = shared.origin.elapsed().as_nanos();
                shared.last_packet.store(now, Ordering::Relaxed);
            }
            units[u].events(out)?;
        }
    }
    units.into_iter().map(|u| u.finish(out)).collect()
}

/// The main thread's state: the assembler, the book and where their
/// output goes.
struct Books<'a> {
    plan: &'a Plan,
    /// Shared with the receive threads, which borrow parts of its frames.
    assembler: Arc<Mutex<Assembler>>,
    /// Frame indices, lost frames, repeat-last, the limit and the skew.
    book: FrameBook,
    writer: Writer<AlignedBuf>,
    /// Per stripe, where its used buffers go back.
    recycle: Recycle,
    report: StripesReport,
    /// The timeline stripes' hand-out times are read on.
    origin: Origin,
    ticker: Ticker,
}

impl Books<'_> {
    fn done(&self) -> bool {
        self.book.is_done()
    }

    /// One stripe frame into the book and the assembler; whole frames out.
    fn take(&mut self, p: Piece) -> Result<()> {
        let at = self.origin.nanos(p.at);
        let stripe = BookInput::Stripe {
            stripe: p.stripe,
            timestamp: p.timestamp,
        };
        self.book
            .handle_input(at, stripe)
            .context("booking stripes")?;
        // A lines stripe written in its part of the frame goes back in
        // place. 2SI stripes stay in their buffers until the frame goes
        // out (no copy); the assembler hands them back then, in `drain`.
        let mut assembler = lock(&self.assembler);
        let back = match p.lent {
            Some(part) => assembler
                .handle_lent(p.stripe, p.timestamp, part, p.complete)
                .map(|()| None),
            None => assembler.handle_owned(p.stripe, p.timestamp, p.data, p.complete),
        }
        .context("assembling stripes")?;
        drop(assembler);
        if let Some(buf) = back {
            let _ = self.recycle[p.stripe].try_send(buf);
        }
        self.drain()
    }

    /// Whole frames from the assembler into the book, and what the book
    /// says out to the writer and the report.
    fn drain(&mut self) -> Result<()> {
        let mut whole = Vec::new();
        {
            let mut assembler = lock(&self.assembler);
            while let Ok(buf) = self.writer.recycled.try_recv() {
                assembler.recycle(buf);
            }
            while let Some((k, buf)) = assembler.poll_spent() {
                let _ = self.recycle[k].try_send(buf);
            }
            whole.extend(std::iter::from_fn(|| assembler.poll_event()));
        }
        for f in whole {
            let now = self.origin.elapsed();
            self.book
                .handle_input(now, BookInput::Whole(f))
                .context("booking frames")?;
            self.book_events()?;
        }
        Ok(())
    }

    fn book_events(&mut self) -> Result<()> {
        while let Some(e) = self.book.poll_event() {
            match e {
                BookEvent::Frame {
                    index,
                    timestamp,
                    complete,
                    missing,
                    incomplete,
                    data,
                } => {
                    if !complete {
                        self.report.frames_incomplete.add(index, 1);
                        if self.report.failures.len() < FrameList::MAX_RANGES {
                            self.report.failures.push(FrameFailure {
                                index,
                                timestamp: timestamp.0,
                                missing: bits(missing),
                                incomplete: bits(incomplete),
                            });
                        }
                    }
                    if let Some(data) = data {
                        self.record(data, complete)?;
                    }
                }
                BookEvent::Lost { first, count } => self.report.frames_lost.add(first, count),
                BookEvent::Repeat { count, data, .. } => {
                    for _ in 1..count {
                        self.record(data.clone(), true)?;
                    }
                    self.record(data, true)?;
                }
                BookEvent::Spent(buf) => lock(&self.assembler).recycle(buf),
            }
        }
        Ok(())
    }

    /// One frame to the writer (the book already applied repeat-last).
    fn record(&mut self, data: AlignedBuf, complete: bool) -> Result<()> {
        if self.writer.send(ToWriter::Frame { data, complete }) {
            Ok(())
        } else {
            Err(anyhow!("the writer thread stopped"))
        }
    }

    /// The streams ended: the last whole frames booked, and the book closed.
    fn finish(&mut self) -> Result<()> {
        lock(&self.assembler).finish();
        self.drain()?;
        let now = self.origin.elapsed();
        self.book
            .handle_input(now, BookInput::End)
            .context("booking frames")?;
        self.book_events()
    }

    fn progress(&mut self) {
        let now = Instant::now();
        if !self.ticker.due(now) {
            return;
        }
        let s = self.book.stats();
        self.ticker.print(&format!(
            "recv: {} stripes  frames {} complete, {} incomplete, {} lost  held {}",
            self.plan.stripes.count(),
            s.frames_complete,
            s.frames_incomplete,
            s.frames_lost,
            lock(&self.assembler).held(),
        ));
    }
}

/// Stripe numbers of a set.
fn bits(set: u64) -> Vec<usize> {
    (0..64).filter(|k| set & (1 << k) != 0).collect()
}

/// Where each stripe's used frame buffers go back to its thread.
type Recycle = Vec<ChanTx<Vec<u8>>>;

/// Binds every stripe's sockets and spreads the stripes over threads.
fn open_units(plan: &Plan) -> Result<(Vec<Vec<Unit>>, Recycle)> {
    let mut threads: Vec<Vec<Unit>> = (0..plan.threads).map(|_| Vec::new()).collect();
    let mut recycle = Vec::new();
    for k in 0..plan.stripes.count() {
        let (tx, rx) = bounded::<Vec<u8>>(16);
        let unit = Unit::open(plan, k, rx)?;
        for (leg, s) in unit.sockets.iter().enumerate() {
            if let Some(a) = s.local_addr() {
                eprintln!("nagare recv: stripe {k} leg {leg} on {a}");
            }
        }
        threads[k % plan.threads].push(unit);
        recycle.push(tx);
    }
    // RTCP ports once every RTP port is bound: one at an RTP port + 1
    // then never takes another stripe's RTP port (it is refused, and
    // noted, instead).
    for u in threads.iter_mut().flatten() {
        u.bind_rtcp(plan);
    }
    // Every socket is bound: senders may start (tests wait for this line).
    if let Some(a) = threads[0].first().and_then(|u| u.sockets[0].local_addr()) {
        eprintln!("nagare recv: listening on {a}");
    }
    Ok((threads, recycle))
}

/// Frames held while stripes catch up: 8, or fewer when 8 whole frames
/// (and as many spare buffers) would pass 1 GiB (8K 10-bit frames are 83
/// MB); never fewer than 3, which still absorbs two frame periods of skew.
fn assembly_depth(plan: &Plan) -> usize {
    ((512 << 20) / plan.stripes.frame_format().frame_bytes().max(1)).clamp(3, 8)
}

/// Receives until the frame limit, the idle timeout or `stop`.
fn run(plan: &Plan, stop: &AtomicBool) -> Result<StripesReport> {
    // A bad --cpu is refused here, before anything listens.
    let placement = place(plan)?;
    let assembler = assembler(plan);
    let opened = open(plan)?;
    receive(plan, assembler, opened, &placement, stop)
}

/// Every socket of a plan, bound and joined ([`open`]).
pub(super) struct Opened {
    groups: Vec<Vec<Unit>>,
    recycle: Recycle,
}

/// Binds and joins every socket of `plan` (`recv --nmos`: before the
/// activation is answered, so a port taken refuses it).
pub(super) fn open(plan: &Plan) -> Result<Opened> {
    let (groups, recycle) = open_units(plan)?;
    Ok(Opened { groups, recycle })
}

/// [`run`] on sockets already [`open`]ed.
pub(super) fn run_opened(plan: &Plan, opened: Opened, stop: &AtomicBool) -> Result<StripesReport> {
    let placement = place(plan)?;
    let assembler = assembler(plan);
    receive(plan, assembler, opened, &placement, stop)
}

/// Places this thread (reassembly), the writer and any thread already
/// running on the helper CPUs, off a local sender's; each receive thread
/// places itself, and inherits --realtime from here.
fn place(plan: &Plan) -> Result<Placement> {
    let placement = Placement::new(plan.cpu);
    placement.apply(Role::Receive { index: 0 })?;
    placement.apply(Role::Helper { pacers: 0 })?;
    if plan.realtime {
        crate::net::tuning::realtime()?;
    }
    Ok(placement)
}

/// Lends a stripe's receiver its part of the assembler's whole frame.
struct StripeLender {
    assembler: Arc<Mutex<Assembler>>,
    stripe: usize,
}

impl Lender for StripeLender {
    fn lend(&mut self, timestamp: MediaTime) -> Option<Part> {
        lock(&self.assembler).lend(self.stripe, timestamp)
    }
}

/// The assembler, locked (past a receive thread that panicked: the run
/// then fails when that thread is joined, and the rest only drains).
fn lock(assembler: &Mutex<Assembler>) -> MutexGuard<'_, Assembler> {
    assembler
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The plan's assembler, its first frames faulted in.
fn assembler(plan: &Plan) -> Assembler {
    let mut assembler = Assembler::new(plan.stripes, assembly_depth(plan));
    // One frame being filled, one being written, one on its way back:
    // with fewer made ahead, an 8K receiver faulted fresh 83 MB frames in
    // as the stream started, and its 2-core sender fell 5-40 ms behind.
    assembler.warm(3);
    assembler
}

/// Receives on the opened sockets until the frame limit, the idle
/// timeout or `stop`.
fn receive(
    plan: &Plan,
    assembler: Assembler,
    Opened {
        mut groups,
        recycle,
    }: Opened,
    placement: &Placement,
    stop: &AtomicBool,
) -> Result<StripesReport> {
    let assembler = Arc::new(Mutex::new(assembler));
    if plan.stripes.contiguous(0).is_some() {
        for u in groups.iter_mut().flatten() {
            u.machine.set_lender(Box::new(StripeLender {
                assembler: assembler.clone(),
                stripe: u.stripe,
            }));
        }
    }
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        last_packet: AtomicU64::new(0),
        origin: Origin::now(),
    });
    let (tx, rx) = bounded::<Piece>(4 * plan.stripes.count());
    let mut handles = Vec::new();
    for (t, units) in groups.into_iter().enumerate() {
        let (shared, tx) = (shared.clone(), tx.clone());
        let placement = placement.clone();
        let h = std::thread::Builder::new()
            .name(format!("recv-{t}"))
            .spawn(move || {
                // Checked for thread 0 above; the rule only names CPUs
                // the process may use.
                let _ = placement.apply(Role::Receive { index: t });
                receive_loop(units, &shared, &tx)
            })
            .context("starting a receive thread")?;
        handles.push(h);
    }
    if plan.realtime {
        crate::net::tuning::ordinary();
    }
    drop(tx);
    let mut books = Books {
        plan,
        assembler,
        book: FrameBook::new(BookConfig {
            stripes: plan.stripes.count(),
            rate: plan.rate,
            incomplete: plan.incomplete,
            frame_limit: plan.frames,
        }),
        // Whole frames go to the file as they come, one write each, so a
        // recording grows frame by frame (a reader can follow it); the
        // book has already decided what an incomplete frame leaves.
        writer: Writer::start(plan.recording.clone(), 4, Incomplete::Keep)?,
        recycle,
        report: StripesReport {
            split: plan.stripes.rule().name().into(),
            stripes: plan.stripes.count(),
            threads: plan.threads,
            ..StripesReport::default()
        },
        origin: shared.origin,
        ticker: Ticker::new(plan.quiet),
    };
    let ended_by = pump(&mut books, &rx, &shared, stop);
    shared.stop.store(true, Ordering::Relaxed);
    // The threads' last frames still come until they have all gone.
    let mut failed = ended_by.as_ref().err().map(|e| format!("{e:#}"));
    for p in rx.iter() {
        if failed.is_none()
            && let Err(e) = books.take(p)
        {
            failed = Some(format!("{e:#}"));
        }
    }
    let mut finished = Vec::new();
    for h in handles {
        let r = h.join().map_err(|_| anyhow!("a receive thread panicked"))?;
        finished.extend(r?);
    }
    if let Some(e) = failed {
        bail!("{e}");
    }
    books.finish()?;
    finish_report(books, finished, ended_by?)
}

/// Moves stripe frames into the books until the frame limit, the idle
/// timeout, `stop`, or every thread ended.
fn pump(
    books: &mut Books<'_>,
    rx: &ChanRx<Piece>,
    shared: &Shared,
    stop: &AtomicBool,
) -> Result<EndedBy> {
    let start = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(EndedBy::Interrupted);
        }
        if books.done() {
            return Ok(EndedBy::FrameCount);
        }
        if let Some(t) = books.plan.timeout {
            let last = shared.last_packet.load(Ordering::Relaxed);
            let idle_since = if last == 0 {
                start
            } else {
                shared.origin.instant(Nanos(last))
            };
            if idle_since.elapsed() >= t {
                return Ok(EndedBy::Timeout);
            }
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(p) => books.take(p)?,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(EndedBy::Interrupted),
        }
        books.progress();
    }
}

/// The per-stripe reports and totals into the report.
fn finish_report(
    books: Books<'_>,
    finished: Vec<Finished>,
    ended_by: EndedBy,
) -> Result<StripesReport> {
    let Books {
        plan,
        assembler,
        book,
        writer,
        mut report,
        ..
    } = books;
    let booked = book.stats();
    report.frames_complete = booked.frames_complete;
    report.skew_us_max = booked.skew_max.as_secs_f64() * 1e6;
    if booked.skew_frames > 0 {
        report.skew_us_mean = booked.skew_mean().as_secs_f64() * 1e6;
    }
    let written = writer.finish()?;
    if let Some(e) = written.error {
        bail!(e);
    }
    report.frames_written = written.frames;
    report.writer_wait_seconds = written.waited.as_secs_f64();
    let mut per_stripe: Vec<StripeReport> = Vec::new();
    let (mut first, mut last) = (None::<Nanos>, None::<Nanos>);
    for f in finished {
        if let Some((a, b)) = f.span {
            first = Some(first.map_or(a, |x| x.min(a)));
            last = Some(last.map_or(b, |x| x.max(b)));
        }
        per_stripe.push(f.report);
    }
    per_stripe.sort_by_key(|r| r.stripe);
    for r in &mut per_stripe {
        r.frames = lock(&assembler).counters()[r.stripe];
    }
    report.frames_before_join = lock(&assembler).before_join();
    report.bytes = per_stripe.iter().map(|r| r.bytes).sum();
    let span = match (first, last) {
        (Some(a), Some(b)) => b - a,
        _ => Nanos::ZERO,
    };
    report.seconds = span.as_secs_f64();
    report.rate_bps = BitRate::of(ByteSize(report.bytes), span);
    report.per_stripe = per_stripe;
    report.all_complete = report.frames_complete > 0
        && report.frames_incomplete.count == 0
        && report.frames_lost.count == 0
        && plan.frames.is_none_or(|n| report.frames_complete >= n);
    report.ended_by = ended_by;
    Ok(report)
}

/// Prints the human summary.
pub(super) fn print_summary(r: &StripesReport) {
    eprintln!(
        "recv: {} stripes ({}) on {} threads: {} frames complete, {} incomplete{}, {} lost; {} written{}",
        r.stripes,
        r.split,
        r.threads,
        r.frames_complete,
        r.frames_incomplete.count,
        listed(&r.frames_incomplete),
        r.frames_lost.count,
        r.frames_written,
        if r.writer_wait_seconds >= 0.001 {
            format!(
                " (reassembly waited {:.3} s for the recording: the output is slower than the stream)",
                r.writer_wait_seconds
            )
        } else {
            String::new()
        }
    );
    if r.frames_before_join > 0 {
        eprintln!(
            "recv: {} frame(s) before the last stripe joined were left out: the stream starts at \
             the first frame every stripe delivered",
            r.frames_before_join
        );
    }
    for f in r.failures.iter().take(10) {
        eprintln!(
            "recv: frame {} (ts {}): stripes missing {:?}, incomplete {:?}",
            f.index, f.timestamp, f.missing, f.incomplete
        );
    }
    for s in &r.per_stripe {
        eprintln!(
            "recv: stripe {}: frames {} complete, {} incomplete, {} missing, {} late; packets {} received, {} lost; kernel drops {}",
            s.stripe,
            s.frames.complete,
            s.frames.incomplete,
            s.frames.missing,
            s.frames.late,
            s.packets_received,
            s.packets_lost,
            s.kernel_drops
        );
        for (l, leg) in s.legs.iter().enumerate() {
            eprintln!(
                "recv: stripe {} leg {l}: {} received, {} lost, {} duplicates, {} recovered; {} unrecovered",
                s.stripe, leg.received, leg.lost, leg.duplicates, leg.recovered, s.unrecovered
            );
        }
        let legs = s.legs.len();
        let per_leg = s
            .legs
            .iter()
            .enumerate()
            .filter_map(|(j, l)| Some((j, l.rtcp.as_ref()?)));
        let rtcp: Vec<(usize, &RecvRtcp)> = if legs > 1 {
            per_leg.collect()
        } else {
            s.rtcp.iter().map(|c| (0, c)).collect()
        };
        for (j, c) in rtcp {
            let from = c.sender.map_or("no sender reports".to_owned(), |a| {
                format!("{} sender reports from {a}", c.sender_reports)
            });
            eprintln!(
                "recv: {} RTCP on port {}: {from}, {} BYE; {} receiver reports sent",
                leg_name(s.stripe, j, legs),
                c.port,
                c.byes,
                c.receiver_reports
            );
        }
    }
    eprintln!(
        "recv: {} over {:.2} s; stripe skew max {:.0} µs, mean {:.0} µs; ended by {}",
        bitrate(r.rate_bps.as_f64()),
        r.seconds,
        r.skew_us_max,
        r.skew_us_mean,
        r.ended_by
    );
}

fn listed(l: &FrameList) -> String {
    if l.count > 0 {
        format!(" ({l})")
    } else {
        String::new()
    }
}

/// `nagare recv --stripes N` / `--dup`.
pub(super) fn main(args: RecvArgs) -> Result<std::process::ExitCode> {
    let plan = Plan::new(&args)?;
    let report = run(&plan, crate::signal::stop_flag())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(if report.all_complete {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
