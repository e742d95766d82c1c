//! The send engine that `nagare send` and `nagare demo` run: frames from
//! a file, a directory or the test pattern, read ahead on a reader
//! thread, and sent as nagare-proto's `video::Sender` schedules them.
//! `send`'s flags become a [`SendConfig`] in `cmd/send.rs`; `demo` builds
//! one of its own. This driver only moves bytes and time:
//! it answers the schedule's frame requests from the ring, gathers each
//! train's headers, frame slices and padding into one GSO send (or
//! `sendmmsg`), waits for the next deadline and prints progress.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::video::{PacingHost, SendReport};
use nagare_proto::sdp::{PtpClock, RefClock, SdpStream};
use nagare_proto::video::sender::{
    self as schedule, Event, FlowId, FlowSpec, Input, RingFrame, Transmit,
};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::st2110_21::{Model, Scan, SenderSchedule, SenderType};
use nagare_proto::video::stripe::Rule;
use nagare_proto::{BitRate, ByteSize, ExtSeq, FrameRate, Nanos, Ssrc, VideoFormat};

use crate::analysis::ideal::IdealReceiver;
use crate::cli::{self, TrOffsetChoice};
use crate::clock::{EpochStart, Origin, Pacing};
use crate::net::awake::KeepAwake;
use crate::net::placement::{CpuChoice, Placement, Role};
use crate::net::rtcp::sending::{self, SenderRtcp, rtcp_dest};
use crate::net::train::{self, TrainBuf};
use crate::net::tuning::Realtime;
use crate::net::udp::{self, SendOptions, Sender};
use crate::net::watch::{Gauge, Watch, thread_id};
use crate::progress::{Ticker, bitrate};
use crate::source::{Arrange, FrameData, Frames, ReadPlan, Source, Take};

/// How the stripes of a send are made and named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Striping {
    /// How a frame is divided.
    pub split: Rule,
    /// Send this stripe alone.
    pub only: Option<usize>,
    /// Fixed SSRC of stripe 0 (stripe k: +k), with epoch-locked numbers.
    pub ssrc: Option<u32>,
}

impl Default for Striping {
    fn default() -> Striping {
        Striping {
            split: Rule::Lines,
            only: None,
            ssrc: None,
        }
    }
}

/// A validated sender configuration.
#[derive(Debug, Clone)]
pub(crate) struct SendConfig {
    /// Input description (file, directory, pattern:bars).
    pub input: String,
    /// Destination.
    pub dest: SocketAddr,
    /// Frame format.
    pub format: VideoFormat,
    /// Frame rate.
    pub rate: FrameRate,
    /// UDP payload size.
    pub packet_size: usize,
    /// Frame limit.
    pub frames: Option<u64>,
    /// Repeat the input.
    pub looping: bool,
    /// Socket options.
    pub socket: SendOptions,
    /// SDP output path.
    pub sdp: Option<PathBuf>,
    /// The PTP clock the SDP names (else the interface's MAC).
    pub ptp: Option<PtpClock>,
    /// Ring capacity.
    pub buffer_frames: usize,
    /// The ST 2110-21 sender type kept to.
    pub sender_type: SenderType,
    /// Packets per train (`None`: the type's default).
    pub train: Option<u64>,
    /// How the TRoffset is picked (and declared).
    pub tr_offset: TrOffsetChoice,
    /// How the sender waits between trains.
    pub pacing: Pacing,
    /// Use GSO where available.
    pub gso: bool,
    /// Artificial per-frame read delay.
    pub read_delay: Duration,
    /// Keep an xxh3 checksum of every frame sent (for the demo).
    pub checksums: bool,
    /// Suppress the progress line.
    pub quiet: bool,
    /// Where the pacing thread and its helpers run.
    pub cpu: CpuChoice,
    /// Stripes, one RTP stream each.
    pub stripes: usize,
    /// Rule, only-this-stripe and SSRC of the stripes.
    pub striping: Striping,
    /// Read the input file with O_DIRECT.
    pub direct: bool,
    /// SCHED_FIFO for the pacing thread.
    pub realtime: Realtime,
    /// Send RTCP sender reports and a BYE, and read receiver reports.
    pub rtcp: bool,
}

impl SendConfig {
    /// The ST 2110-21 schedule of one of this sender's flows of `packets`
    /// packets per frame (see [`shaping`]).
    fn shaping(&self, packets: usize) -> Result<SenderSchedule> {
        shaping(
            self.format,
            self.rate,
            (packets, self.packet_size),
            (self.sender_type, self.pacing),
            self.train,
            self.tr_offset,
        )
    }
}

/// The ST 2110-21 schedule of one flow of `packets` packets per frame of
/// a `format` raster in datagrams of up to `packet_size` bytes: the sender
/// type's, with `train` packets per train (checked against what the type
/// allows) or the default for how the sender waits (a spinning sender's
/// jitter margin, or a sleeping one's), from the TRoffset `tr_offset`
/// picks. Datagrams above ST 2110-10's standard size make the flow
/// declare `MAXUDP` ([`Model::max_udp_for`]), which its limits count in.
pub(crate) fn shaping(
    format: VideoFormat,
    rate: FrameRate,
    (packets, packet_size): (usize, usize),
    (sender, pacing): (SenderType, Pacing),
    train: Option<u64>,
    tr_offset: TrOffsetChoice,
) -> Result<SenderSchedule> {
    let packets = u32::try_from(packets).unwrap_or(u32::MAX);
    let mut model = Model::new(rate, format.height, Scan::Progressive, packets)
        .map_err(|e| anyhow!("the ST 2110-21 model of this stream: {e}"))?
        .for_datagrams(packet_size)
        .map_err(|e| anyhow!("--packet-size {packet_size}: {e}"))?;
    if let TrOffsetChoice::Micros(us) = tr_offset {
        model = model
            .with_tr_offset(Nanos::from_micros(us))
            .map_err(|e| anyhow!("--tr-offset {us}: {e}"))?;
    }
    let schedule = match pacing {
        Pacing::Precise => SenderSchedule::with_jitter_margin(&model, sender),
        Pacing::Efficient => SenderSchedule::for_sleeping_sender(&model, sender),
    };
    let schedule = match train {
        None => schedule,
        Some(n) => schedule.with_train(n).map_err(|e| {
            anyhow!(
                "--train {n} with --tp {}: {e} (CMAX {}, VRX_FULL {} for {packets} packets a frame)",
                sender.name().to_lowercase(),
                schedule.cmax(),
                schedule.vrx_full()
            )
        })?,
    };
    match tr_offset {
        TrOffsetChoice::Auto => schedule
            .with_room_to_lead()
            .map_err(|e| anyhow!("the TRoffset that gives this stream room to lead: {e}")),
        TrOffsetChoice::Default | TrOffsetChoice::Micros(_) => Ok(schedule),
    }
}

/// A send whose destination refused trains from among its first
/// [`REFUSED_TAIL`] to among its last failed: nothing listened there at
/// all. Not "more than half refused": the kernel answers each ICMP port
/// unreachable once, on the next send, so a send to nobody alternates
/// sent and refused trains and sits at about half. A receiver started
/// late (refusals only at the start) or one that quit early (only at the
/// end: a full disk, a frame count reached) passes; a send to nobody
/// fails, and says how to write only the SDP.
pub(crate) const REFUSED_TAIL: u32 = 4;

/// The perfect-clock judge of a flow of `packets` packets per frame whose
/// timeline `start.at` is the epoch start of frame `start.first_frame`.
fn ideal_receiver(
    cfg: &SendConfig,
    packets: usize,
    start: crate::clock::EpochStart,
) -> Result<IdealReceiver> {
    let shape = cfg.shaping(packets)?;
    let base = cfg.rate.frame_start_ns(start.first_frame) as i128 - i128::from(start.at.0);
    Ok(IdealReceiver::new(*shape.model(), cfg.sender_type, base))
}

/// A random value from the operating system (RFC 3550 wants SSRCs and
/// first sequence numbers unpredictable).
fn random_u32() -> Result<u32> {
    getrandom::u32().map_err(|e| anyhow!("drawing a random SSRC: {e}"))
}

/// Writes one stream's SDP.
fn write_sdp(
    cfg: &SendConfig,
    format: VideoFormat,
    dest: SocketAddr,
    sender: &Sender,
    path: &std::path::Path,
) -> Result<()> {
    let source = sender
        .local_addr()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified());
    let clock = match cfg.ptp {
        Some(ptp) => RefClock::Ptp(ptp),
        None => RefClock::LocalMac(clock_mac(source)?),
    };
    let declared = declared_schedule(cfg, format)?;
    let sdp = SdpStream {
        address: dest.ip(),
        port: dest.port(),
        ttl: cfg.socket.ttl.map(|t| t.min(255) as u8),
        source,
        payload_type: nagare_proto::video::st2110_20::DEFAULT_PAYLOAD_TYPE,
        format,
        rate: Some(cfg.rate),
        name: format!("nagare {}", cfg.input),
        clock: Some(clock),
        sender_type: Some(cfg.sender_type),
        tr_offset: declared.declared_tr_offset(),
        max_udp: declared.model().max_udp(),
    };
    let mut session = sdp.to_session((crate::clock::epoch_ns() / 1_000_000_000) as u64);
    // Stripes' RTCP lies past their RTP ports, not at port + 1.
    if cfg.rtcp && cfg.stripes > 1 {
        for m in &mut session.media {
            m.rtcp_port = rtcp_dest(dest, cfg.stripes).map(|a| a.port());
        }
    }
    let text = session.to_sdp();
    std::fs::write(path, text).with_context(|| format!("writing SDP to '{}'", path.display()))
}

/// The schedule of a flow of `format`, whose model holds what its SDP
/// declares: the TRoffset when it is not TROdefault (`TROFF`), the UDP
/// size limit when it is not the standard one (`MAXUDP`).
fn declared_schedule(cfg: &SendConfig, format: VideoFormat) -> Result<SenderSchedule> {
    let packets = Packetizer::new(format, cfg.packet_size, Ssrc(0))?.packets_per_frame();
    cfg.shaping(packets)
}

/// The MAC naming this host's clock for a stream sent from `local`.
fn clock_mac(local: Option<std::net::IpAddr>) -> Result<[u8; 6]> {
    let links = crate::net::iface::links().context("listing network interfaces")?;
    let (mac, from) = crate::net::iface::clock_mac(local, &links);
    if let Some(name) = from {
        eprintln!(
            "nagare send: note: the SDP names this host's clock by {name}'s MAC (loopback has none); \
             give --ptp GMID:DOMAIN if the clock follows PTP"
        );
    } else if mac == [0; 6] {
        eprintln!(
            "nagare send: note: no interface has a MAC address: the SDP's localmac is all zeros; \
             give --ptp GMID:DOMAIN if the clock follows PTP"
        );
    }
    Ok(mac)
}

/// Runs a sender until its frames are sent, the input ends, or `stop`.
pub(crate) fn run(cfg: &SendConfig, stop: &AtomicBool) -> Result<SendReport> {
    let source = Source::open(&cfg.input, cfg.format, cfg.direct)?;
    if source.is_stream() && cfg.looping {
        bail!(
            "--loop replays the input, but '{}' is a pipe, read once: drop --loop",
            cfg.input
        );
    }
    if let (Some(avail), Some(want), false) = (source.frames(), cfg.frames, cfg.looping)
        && want > avail
    {
        bail!("input has {avail} frames but --frames asks for {want}; add --loop to repeat it");
    }
    let sockets = open_sockets(cfg)?;
    // An epoch-locked sender fixes its first frame before reading, so the
    // input starts at that frame: every sender of the stream shows input
    // frame f mod n in epoch frame f. The lead leaves room to fill the ring.
    let planned = cfg.striping.ssrc.map(|_| {
        let origin = Origin::now();
        let lead = Duration::from_millis(250).max(Duration::from_secs_f64(
            2.0 * cfg.buffer_frames as f64 / cfg.rate.as_f64(),
        ));
        (origin, origin.epoch_start(cfg.rate, lead))
    });
    let looping = cfg.looping || cfg.frames.is_none() && cfg.input.starts_with("pattern:");
    let plan = ReadPlan {
        // An epoch-locked sender drops the ring frames of slots it gave
        // up, so a looping reader reads on and the schedule's frame limit
        // ends the send.
        limit: cfg.frames.filter(|_| !(looping && planned.is_some())),
        looping,
        read_delay: cfg.read_delay,
        first: planned.map_or(0, |(_, s)| s.first_frame),
        arrange: arrangement(cfg)?,
        checksums: cfg.checksums,
    };
    // The reader is spawned from a thread already on the helper CPUs, so
    // it never runs on the pacer's CPU; only then does this thread move.
    let placement = Placement::new(cfg.cpu);
    let helper_cpus = placement.apply(Role::Helper { pacers: 1 })?;
    let mut frames = Frames::start(source, cfg.format, cfg.buffer_frames, plan);
    // Fill the ring before the first frame so early frames never underrun.
    while !frames.primed(cfg.buffer_frames) && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut driver = Driver::new(cfg, sockets, planned)?;
    // Spawned from the helper CPUs, like the reader.
    driver.rtcp = start_rtcp(cfg, &driver)?;
    // The watcher too starts from the helper CPUs, never for an instant on
    // the pacer's; then this thread becomes the pacer.
    let watch = Watch::start(
        thread_id(),
        placement.cpus(Role::Pacer { index: 0 }),
        Arc::clone(&driver.gauge),
        driver.origin,
        &placement,
        1,
    );
    // Started from the helper CPUs at normal priority: each holder lowers
    // itself to SCHED_IDLE before it moves to the pacer's CPU.
    let awake = hold_awake(cfg, &placement, &helper_cpus);
    let mut host = tune_pacer(cfg, &placement, helper_cpus)?;
    host.held_awake = awake.is_some();
    let cpu = crate::clock::thread_cpu_seconds();
    let result = driver.run(&mut frames, stop);
    drop(awake);
    driver.ticker.finish();
    host.stalls = watch.map(Watch::finish);
    let mut report = driver.report();
    report.send_cpu_seconds = crate::clock::thread_cpu_seconds() - cpu;
    // Waits out the BYE's delay (rtcp::BYE_DELAY).
    report.rtcp = driver.rtcp.take().map(SenderRtcp::finish);
    report.pacing_host = Some(host);
    if let Err(e) = result {
        report.error = Some(format!("{e:#}"));
    }
    Ok(report)
}

/// The RTCP thread of a send, unless `--no-rtcp` or a stream's RTCP
/// port would be above 65535 (then said once, and none is sent).
fn start_rtcp(cfg: &SendConfig, driver: &Driver<'_>) -> Result<Option<SenderRtcp>> {
    if !cfg.rtcp {
        return Ok(None);
    }
    let mut streams = Vec::with_capacity(driver.flows.len());
    let mut sockets = RtcpSockets::default();
    for (flow, id) in driver.flows.iter().zip(&driver.ids) {
        let Some(to) = rtcp_dest(flow.dest, cfg.stripes) else {
            eprintln!(
                "nagare send: note: no RTCP: the RTCP port of {} would be above 65535",
                flow.dest
            );
            return Ok(None);
        };
        let ssrc = driver
            .schedule
            .packetizer(*id)
            .map_or(Ssrc(0), Packetizer::ssrc);
        let socket = sockets.for_dest(cfg, to)?;
        streams.push(sending::Stream { ssrc, to, socket });
    }
    SenderRtcp::start(streams, cfg.rate, sockets.all).map(Some)
}

/// The sockets of a send's RTCP thread, opened as its streams need them.
#[derive(Default)]
struct RtcpSockets {
    all: Vec<std::net::UdpSocket>,
    /// The one the unicast streams share, once opened.
    unicast: Option<usize>,
}

impl RtcpSockets {
    /// The socket of the stream whose RTCP goes to `to`, by its index.
    /// On a multicast group it is joined to `to` on `--interface`, where
    /// the receivers report (RFC 3550 §6); should that fail, it is said,
    /// and the reports still go out from an unjoined socket.
    fn for_dest(&mut self, cfg: &SendConfig, to: SocketAddr) -> Result<usize> {
        if to.ip().is_multicast() {
            let opts = udp::ReceiveOptions {
                interface: cfg.socket.interface.clone(),
                source: None,
                buffer_bytes: 0,
            };
            let ttl = cfg.socket.ttl.unwrap_or(1);
            match udp::open_group(to, &opts, ttl) {
                Ok(s) => {
                    self.all.push(s);
                    return Ok(self.all.len() - 1);
                }
                Err(e) => eprintln!(
                    "nagare send: note: no receiver reports from the group: RTCP on {to}: {e:#}"
                ),
            }
        } else if let Some(i) = self.unicast {
            return Ok(i);
        }
        let options = SendOptions {
            buffer_bytes: 0,
            ..cfg.socket.clone()
        };
        self.all.push(udp::open_unconnected(to, &options)?);
        let i = self.all.len() - 1;
        if !to.ip().is_multicast() {
            self.unicast = Some(i);
        }
        Ok(i)
    }
}

/// Keeps the pacer's CPU from halting between trains (see
/// `net::awake`): only for precise pacing, and only where the pacer has a
/// CPU no helper shares.
fn hold_awake(cfg: &SendConfig, placement: &Placement, helpers: &[usize]) -> Option<KeepAwake> {
    let pacer = placement.cpus(Role::Pacer { index: 0 });
    let own = !pacer.is_empty() && pacer.iter().all(|c| !helpers.contains(c));
    (cfg.pacing == Pacing::Precise && own)
        .then(|| KeepAwake::start(&pacer))
        .flatten()
}

/// Places the calling (pacing) thread, makes it real-time where allowed
/// and locks memory; reports what it got.
fn tune_pacer(cfg: &SendConfig, placement: &Placement, helpers: Vec<usize>) -> Result<PacingHost> {
    crate::net::tuning::precise_timers();
    let cpus = placement.apply(Role::Pacer { index: 0 })?;
    let (realtime, realtime_note) = cfg.realtime.apply()?;
    let lock_note = crate::net::tuning::lock_memory();
    for note in realtime_note.iter().chain(&lock_note) {
        if cfg.realtime != Realtime::Off && !cfg.quiet {
            eprintln!("nagare send: note: {note}");
        }
    }
    Ok(PacingHost {
        cpus,
        helper_cpus: helpers,
        realtime,
        realtime_note,
        memory_locked: lock_note.is_none(),
        held_awake: false,
        stalls: None,
    })
}

/// The stripes this sender sends, in order.
fn sent_stripes(cfg: &SendConfig) -> Vec<usize> {
    match cfg.striping.only {
        Some(k) => vec![k],
        None => (0..cfg.stripes).collect(),
    }
}

/// Stripes that are not one run of the frame are gathered on the reader
/// thread, back to back in the order sent; bands are sent from the frame
/// as read.
fn arrangement(cfg: &SendConfig) -> Result<Option<Arrange>> {
    let stripes = cli::stripes_of(cfg.format, cfg.stripes, cfg.striping.split)?;
    if stripes.contiguous(0).is_some() {
        return Ok(None);
    }
    let ks = sent_stripes(cfg);
    let n = stripes.stripe_format().frame_bytes();
    Ok(Some(Box::new(move |frame: &[u8], out: &mut [u8]| {
        for (i, &k) in ks.iter().enumerate() {
            // Sizes were checked when the division was made.
            let _ = stripes.split(frame, k, &mut out[i * n..(i + 1) * n]);
        }
    })))
}

/// One socket per stripe sent (writing each stripe's SDP next to it).
fn open_sockets(cfg: &SendConfig) -> Result<Vec<Flow>> {
    let stripes = cli::stripes_of(cfg.format, cfg.stripes, cfg.striping.split)?;
    let format = stripes.stripe_format();
    let ks = sent_stripes(cfg);
    let mut flows = Vec::with_capacity(ks.len());
    for (i, &k) in ks.iter().enumerate() {
        let dest = match cfg.striping.only {
            Some(_) => cfg.dest,
            None => stripe_dest(cfg.dest, k)?,
        };
        let sender = Sender::open(dest, &cfg.socket)
            .with_context(|| format!("opening a socket to {dest}"))?;
        if i == 0 {
            for n in &sender.notices {
                eprintln!("nagare send: note: {n}");
            }
        }
        if let Some(path) = &cfg.sdp {
            let path = match cfg.striping.only {
                Some(_) => path.clone(),
                None => stripe_sdp_path(path, k, cfg.stripes),
            };
            write_sdp(cfg, format, dest, &sender, &path)?;
        }
        let data = stripes.contiguous(k).unwrap_or_else(|| {
            let n = format.frame_bytes();
            i * n..(i + 1) * n
        });
        flows.push(Flow {
            dest,
            stripe: k,
            sender,
            data,
            refused: 0,
            since_refused: 0,
            first_refused: None,
            trains: 0,
        });
    }
    Ok(flows)
}

/// Stripe `k` goes to the base port plus `k`.
pub(crate) fn stripe_dest(base: SocketAddr, k: usize) -> Result<SocketAddr> {
    let port = usize::from(base.port()) + k;
    let port = u16::try_from(port).map_err(|_| {
        anyhow!("stripe {k} would need port {port}, above 65535: lower the base port")
    })?;
    Ok(SocketAddr::new(base.ip(), port))
}

/// `clip.sdp` for one stream; `clip-0.sdp`, `clip-1.sdp`, ... for stripes.
fn stripe_sdp_path(path: &std::path::Path, k: usize, stripes: usize) -> PathBuf {
    if stripes == 1 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map_or("stream".into(), |s| s.to_string_lossy().into_owned());
    let ext = path
        .extension()
        .map_or("sdp".into(), |e| e.to_string_lossy().into_owned());
    path.with_file_name(format!("{stem}-{k}.{ext}"))
}

/// The schedule of stripe `k`: random SSRC and first sequence number
/// (RFC 3550), or with --ssrc fixed ones locked to the epoch.
fn flow_spec(
    cfg: &SendConfig,
    format: VideoFormat,
    flow: &Flow,
    start: EpochStart,
    cap: usize,
) -> Result<FlowSpec> {
    let k = flow.stripe;
    let ssrc = match cfg.striping.ssrc {
        Some(n) => Ssrc(n.wrapping_add(k as u32)),
        None => Ssrc(random_u32()?),
    };
    let packetizer = Packetizer::new(format, cfg.packet_size, ssrc)?;
    let packets = packetizer.packets_per_frame();
    let shape = cfg.shaping(packets)?;
    let spec = FlowSpec::video(cfg.rate, packetizer.uniform())
        .shaped(shape)
        .start(start.at, start.first_frame)
        .trains(Nanos::ZERO, cap)
        // Stagger as in the whole sender, so a node sending one stripe
        // keeps that stripe's timing.
        .stripe(k, cfg.stripes)
        // A late wake-up needs no slack: a shaped flow has no fixed
        // catch-up limit to push, only its Cinst bucket (CinstGate).
        .frame_limit(cfg.frames)
        // One whole-frame stream sends the frame in hand on a later slot
        // after a stall of a frame period; a stripe or a leg, whose frame
        // belongs to its slot, would lose it, so it catches up instead.
        .slip_late_frames(cfg.striping.ssrc.is_none() && cfg.stripes == 1);
    let (spec, first_seq) = match cfg.striping.ssrc {
        Some(_) => {
            let base = schedule::locked_seq_base(ssrc);
            let first = base
                .0
                .wrapping_add(start.first_frame.wrapping_mul(packets as u64));
            (spec.epoch_locked(base), first & 0xffff)
        }
        None => {
            let first = u64::from(random_u32()? & 0xffff);
            (spec.first_seq(ExtSeq(first)), first)
        }
    };
    // Receivers and `impair --drop-seq` can then name this stream and its
    // packets.
    eprintln!(
        "nagare send: stream to {}: SSRC 0x{:08x}, first sequence number {first_seq}",
        flow.dest, ssrc.0
    );
    Ok(spec)
}

/// One RTP stream's socket and its stripe of the frame.
struct Flow {
    dest: SocketAddr,
    /// Which stripe of the frame it carries.
    stripe: usize,
    sender: Sender,
    /// Where this flow's stripe lies in the frame.
    data: std::ops::Range<usize>,
    refused: u64,
    /// Trains sent since the last one refused.
    since_refused: u32,
    /// How many trains had gone when the first was refused.
    first_refused: Option<u64>,
    /// Trains sent (not refused).
    trains: u64,
}

/// A frame taken from the ring for every flow, or a slot given up.
struct Held {
    frame: u64,
    /// `None` for an underrun.
    data: Option<FrameData>,
    /// Flows that still need it.
    users: usize,
}

/// Buffers for gathering and sending one train.
struct TrainIo {
    gso: bool,
    train: TrainBuf,
    io: train::TrainIo,
}

/// The send loop's state: the schedule (nagare-proto), and what it needs
/// from the world.
struct Driver<'a> {
    cfg: &'a SendConfig,
    schedule: schedule::Sender,
    flows: Vec<Flow>,
    ids: Vec<FlowId>,
    origin: Origin,
    first_frame: u64,
    held: VecDeque<Held>,
    /// Open frame requests: flow and epoch frame.
    pending: VecDeque<(FlowId, u64)>,
    finished: usize,
    io: TrainIo,
    frames_sent: u64,
    packets_sent: u64,
    bytes_sent: u64,
    first_send: Option<Instant>,
    last_send: Option<Instant>,
    checksums: Vec<(u64, u64)>,
    ticker: Ticker,
    window: (u64, Instant),
    /// Frames waiting in the ring when the last frame was taken.
    ring_fill: usize,
    /// The ST 2110-21 judgement of the first flow as it left.
    ideal: Option<IdealReceiver>,
    /// Epoch-locked: the epoch frame the next frame in the ring belongs to
    /// (ring frames of slots given up are dropped, keeping input and epoch
    /// aligned).
    ring_next: Option<u64>,
    /// Late count and lateness, for the watcher that explains them.
    gauge: Arc<Gauge>,
    /// The RTCP thread, told what each train sent.
    rtcp: Option<SenderRtcp>,
}

impl<'a> Driver<'a> {
    fn new(
        cfg: &'a SendConfig,
        flows: Vec<Flow>,
        planned: Option<(Origin, EpochStart)>,
    ) -> Result<Self> {
        let gso = cfg.gso && flows.iter().all(|f| f.sender.gso);
        if cfg.gso && !gso {
            eprintln!(
                "nagare send: note: this kernel has no UDP GSO; sending with sendmmsg (more CPU per Gbit/s)"
            );
        }
        // The schedule starts far enough ahead that the first frame is not
        // late, on the epoch grid shared with other senders.
        let (origin, start) = planned.unwrap_or_else(|| {
            let origin = Origin::now();
            (
                origin,
                origin.epoch_start(cfg.rate, Duration::from_millis(20)),
            )
        });
        let format = cli::stripes_of(cfg.format, cfg.stripes, cfg.striping.split)?.stripe_format();
        let cap = udp::train_cap_batched(gso, cfg.packet_size);
        let mut sched = schedule::Sender::new();
        let mut ids = Vec::with_capacity(flows.len());
        for flow in &flows {
            ids.push(sched.add_flow(flow_spec(cfg, format, flow, start, cap)?));
        }
        let packetizer = sched
            .packetizer(ids[0])
            .context("a video flow has a packetizer")?;
        let ideal = ideal_receiver(cfg, packetizer.packets_per_frame(), start)?;
        let train = TrainBuf::for_flow(&sched, ids[0]);
        Ok(Driver {
            cfg,
            schedule: sched,
            flows,
            ids,
            origin,
            first_frame: start.first_frame,
            held: VecDeque::new(),
            pending: VecDeque::new(),
            finished: 0,
            io: TrainIo {
                gso,
                train,
                io: train::TrainIo::default(),
            },
            frames_sent: 0,
            packets_sent: 0,
            bytes_sent: 0,
            first_send: None,
            last_send: None,
            checksums: Vec::new(),
            ticker: Ticker::new(cfg.quiet),
            window: (0, Instant::now()),
            ring_fill: 0,
            ideal: Some(ideal),
            ring_next: planned.map(|(_, s)| s.first_frame),
            gauge: Arc::new(Gauge::default()),
            rtcp: None,
        })
    }

    /// Sends until every flow finished, the input ended, or `stop`.
    fn run(&mut self, ring: &mut Frames, stop: &AtomicBool) -> Result<()> {
        let mut ended = false;
        loop {
            // A signal ends the stream like the end of the input: the
            // frame being sent goes out whole, no new one is started.
            ended = ended || stop.load(Ordering::Relaxed);
            self.events(ring);
            if self.finished == self.flows.len() {
                return Ok(());
            }
            let now = self.origin.elapsed();
            // At the end of the input, trains of frames in hand still go;
            // requests for more go unanswered.
            ended = ended || !self.answer(ring, now)?;
            if ended {
                self.end_requests(now)?;
            }
            if let Some(t) = self.schedule.poll_transmit(now) {
                self.transmit(&t)?;
                self.progress();
                continue;
            }
            // Slots given up at their deadline ask for the next frames.
            if self.events(ring) {
                continue;
            }
            match self.schedule.poll_timeout() {
                Some(at) => self.cfg.pacing.wait(self.origin.instant(at)),
                None => return Ok(()),
            }
        }
    }

    /// Takes the schedule's events: frame requests wait in `pending`, a
    /// frame every flow has sent (or given up) goes back to the ring.
    /// Returns whether there were any.
    fn events(&mut self, ring: &Frames) -> bool {
        let mut any = false;
        while let Some(e) = self.schedule.poll_event() {
            any = true;
            match e {
                Event::NeedFrame { flow, frame, .. } => self.pending.push_back((flow, frame)),
                Event::FrameSent { frame, .. } => self.release(frame, ring),
                Event::Underrun { flow, frame } => self.given_up(flow, frame, ring),
                Event::Slipped { first, count, .. } => self.slipped(first, count),
                Event::Finished { .. } => self.finished += 1,
                // send never pauses a flow.
                Event::Dropped { .. } => {}
            }
        }
        any
    }

    /// The schedule gave up `flow`'s slot of `frame` at its deadline: the
    /// other flows (stripes of the same frame) give it up too.
    fn given_up(&mut self, flow: FlowId, frame: u64, ring: &Frames) {
        self.pending.retain(|p| p.0 != flow);
        if !self.held.iter().any(|h| h.frame == frame) {
            let users = self.flows.len();
            self.held.push_back(Held {
                frame,
                data: None,
                users,
            });
        }
        self.release(frame, ring);
    }

    /// The one stream passed over `count` slots from `first` after a
    /// stall (only a whole-frame stream not tied to its slots may, see
    /// `flow_spec`): the frame in hand, if any, goes on the slot asked
    /// for next, so no frame is lost.
    fn slipped(&mut self, first: u64, count: u64) {
        if let Some(h) = self.held.iter_mut().find(|h| h.frame == first) {
            h.frame = first + count;
        }
    }

    /// At the end of the input: flows waiting for a frame finish.
    fn end_requests(&mut self, now: Nanos) -> Result<()> {
        for (flow, _) in std::mem::take(&mut self.pending) {
            self.schedule.handle_input(now, Input::End { flow })?;
        }
        Ok(())
    }

    /// Answers frame requests in order from the ring; a request the ring
    /// cannot answer waits (the schedule gives its slot up at its
    /// deadline). Returns false at the end of the input.
    fn answer(&mut self, ring: &mut Frames, now: Nanos) -> Result<bool> {
        while let Some(&(flow, frame)) = self.pending.front() {
            let have = match self.held.iter().find(|h| h.frame == frame) {
                Some(h) => h.data.is_some(),
                None => {
                    let data = match self.take_for(ring, frame)? {
                        Take::Frame(f) => f,
                        Take::Empty => return Ok(true),
                        Take::End => return Ok(false),
                    };
                    self.ring_fill = ring.fill();
                    let users = self.flows.len();
                    let data = Some(data);
                    self.held.push_back(Held { frame, data, users });
                    true
                }
            };
            self.pending.pop_front();
            let input = if have {
                Input::Frame { flow }
            } else {
                Input::Underrun { flow }
            };
            self.schedule.handle_input(now, input)?;
            if !have {
                self.release(frame, ring);
            }
            // An underrun asks for the next frame at once.
            self.events(ring);
        }
        Ok(true)
    }

    /// The ring's frame for epoch frame `frame`; an epoch-locked sender
    /// drops frames of slots already given up.
    fn take_for(&mut self, ring: &mut Frames, frame: u64) -> Result<Take> {
        loop {
            match (ring.take()?, self.ring_next.as_mut()) {
                (Take::Frame(f), Some(next)) => {
                    let number = *next;
                    *next += 1;
                    match RingFrame::of(number, frame) {
                        RingFrame::Behind => ring.give_back(f),
                        // Never ahead: the ring is numbered from the first
                        // request, and requests only move on.
                        RingFrame::Due | RingFrame::Ahead => return Ok(Take::Frame(f)),
                    }
                }
                (other, _) => return Ok(other),
            }
        }
    }

    /// One flow is done with `frame`; the last one hands it back.
    fn release(&mut self, frame: u64, ring: &Frames) {
        let Some(pos) = self.held.iter().position(|h| h.frame == frame) else {
            return;
        };
        let h = &mut self.held[pos];
        h.users -= 1;
        if h.users > 0 {
            return;
        }
        if let Some(Held {
            data: Some(data), ..
        }) = self.held.remove(pos)
        {
            // Hashed by the reader (the read plan asks when cfg.checksums).
            if let Some(sum) = data.checksum() {
                self.checksums
                    .push((frame.saturating_sub(self.first_frame), sum));
            }
            self.frames_sent += 1;
            ring.give_back(data);
        }
    }

    /// Sends one train: headers, frame slices and padding gathered into
    /// one GSO send (or sendmmsg) by `net::train`.
    fn transmit(&mut self, t: &Transmit) -> Result<()> {
        let held = self.held.iter().find(|h| h.frame == t.frame);
        let frame = held
            .and_then(|h| h.data.as_deref())
            .context("a train of a frame not held")?;
        let flow = &mut self.flows[t.flow.index()];
        let stripe = &frame[flow.data.clone()];
        let io = &mut self.io;
        let train = io.train.gather(&self.schedule, t, stripe)?;
        let bytes = train.bytes;
        match io.io.send(&flow.sender, &train, &mut io.gso) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                if flow.refused == 0 {
                    eprintln!(
                        "nagare send: note: {} refused packets (nothing listening there yet); \
                         still sending, refused packets are counted, not sent",
                        flow.dest
                    );
                }
                // The kernel turned the train down (an ICMP port
                // unreachable came back): those packets never left.
                flow.refused += t.len() as u64;
                flow.since_refused = 0;
                flow.first_refused.get_or_insert(flow.trains);
                return Ok(());
            }
            Err(e) => return Err(e).with_context(|| format!("sending to {}", flow.dest)),
        }
        flow.since_refused = flow.since_refused.saturating_add(1);
        flow.trains += 1;
        // Three relaxed stores; the RTCP thread does the rest.
        if let Some(tally) = self.rtcp.as_ref().and_then(|r| r.tally(t.flow.index())) {
            tally.sent(t.len() as u64, bytes as u64, t.frame);
        }
        let now = Instant::now();
        self.schedule
            .handle_input(self.origin.nanos(now), Input::Departed { flow: t.flow })?;
        // Late packets of every flow: with stripes, one flow's count
        // alone would go up and down from train to train.
        let (late, _, _) = self.late_underruns_slips();
        self.gauge
            .record(late, self.origin.nanos(now).saturating_sub(t.at));
        if let Some(ideal) = self.ideal.as_mut().filter(|_| t.flow == self.ids[0]) {
            ideal.sent(self.origin.nanos(now), t, self.cfg.packet_size);
        }
        self.first_send.get_or_insert(now);
        self.last_send = Some(now);
        self.packets_sent += t.len() as u64;
        self.bytes_sent += bytes as u64;
        Ok(())
    }

    fn progress(&mut self) {
        let now = Instant::now();
        if self.ticker.due(now) {
            self.progress_line(now);
        }
    }

    /// Late packets, underruns and slots passed over, over every flow
    /// (underruns and slips are per frame slot, which the stripes share,
    /// so those count once).
    fn late_underruns_slips(&self) -> (u64, u64, u64) {
        let stats = self
            .ids
            .iter()
            .filter_map(|id| self.schedule.flow_stats(*id));
        stats.fold((0, 0, 0), |(late, under, slip), s| {
            (late + s.late, under.max(s.underruns), slip.max(s.slipped))
        })
    }

    fn progress_line(&mut self, now: Instant) {
        let (bytes0, t0) = self.window;
        let secs = now.duration_since(t0).as_secs_f64().max(1e-9);
        let rate = (self.bytes_sent - bytes0) as f64 * 8.0 / secs;
        self.window = (self.bytes_sent, now);
        let (late, underruns, _) = self.late_underruns_slips();
        let total = self.cfg.frames.map_or(String::new(), |n| format!("/{n}"));
        self.ticker.print(&format!(
            "send: {}  frames {}{total}  ring {}/{}  late {late}  underruns {underruns}",
            bitrate(rate),
            self.frames_sent,
            self.ring_fill,
            self.cfg.buffer_frames,
        ));
    }

    fn report(&mut self) -> SendReport {
        let (late, underruns, slipped) = self.late_underruns_slips();
        let span = match (self.first_send, self.last_send) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => Duration::ZERO,
        };
        let p = self.schedule.packetizer(self.ids[0]);
        SendReport {
            frames_sent: self.frames_sent,
            packets_sent: self.packets_sent,
            bytes_sent: self.bytes_sent,
            seconds: span.as_secs_f64(),
            rate_bps: BitRate::of(ByteSize(self.bytes_sent), Nanos::from(span)),
            packets_per_frame: p.map_or(0, |p| p.packets_per_frame() as u64),
            packets_late: late,
            lateness_us: self.schedule.lateness().summary(1e3),
            underruns,
            slipped,
            refused: self.flows.iter().map(|f| f.refused).sum(),
            nobody_listened: self.flows.iter().any(|f| {
                f.first_refused.is_some_and(|n| n < u64::from(REFUSED_TAIL))
                    && f.since_refused < REFUSED_TAIL
            }),
            send_cpu_seconds: 0.0,
            gso: self.io.gso,
            first_frame: self.first_frame,
            ssrc: p.map_or(Ssrc(0), Packetizer::ssrc),
            stripes: self.flows.len(),
            error: None,
            checksums: self.checksums.clone(),
            // Trains the kernel refused never left: a receiver would have
            // seen holes, not the schedule, so there is nothing to judge.
            st2110_21: self
                .ideal
                .take()
                .filter(|_| self.flows.iter().all(|f| f.refused == 0))
                .map(IdealReceiver::finish),
            pacing_host: None,
            rtcp: None,
        }
    }
}

/// CPU seconds of the sending thread per gigabit sent (0 when nothing
/// was sent).
pub(crate) fn cpu_per_gbit(r: &SendReport) -> f64 {
    let gbit = r.bytes_sent as f64 * 8.0 / 1e9;
    if gbit > 0.0 {
        r.send_cpu_seconds / gbit
    } else {
        0.0
    }
}

/// Prints the human summary of a send.
pub(crate) fn print_summary(r: &SendReport) {
    eprintln!(
        "send: {} frames, {} packets ({} per frame), {} in {:.2} s; late packets {}, underruns {}, \
         lateness p50 {:.1} µs p99 {:.1} µs max {:.1} µs; {}; sending thread {:.3} CPU-s per Gbit",
        r.frames_sent,
        r.packets_sent,
        r.packets_per_frame,
        bitrate(r.rate_bps.as_f64()),
        r.seconds,
        r.packets_late,
        r.underruns,
        r.lateness_us.p50,
        r.lateness_us.p99,
        r.lateness_us.max,
        if r.gso { "UDP GSO" } else { "sendmmsg" },
        cpu_per_gbit(r),
    );
    if r.slipped > 0 {
        eprintln!(
            "send: fell behind its schedule by more than the ST 2110-21 slack (the host stalled \
             the sender) and passed over {} frame slot(s) to be back on time; see the lateness \
             causes below",
            r.slipped
        );
    }
    if r.refused > 0 {
        eprintln!(
            "send: {} packets refused by the kernel and not sent: nothing was listening at the \
             destination (ICMP port unreachable); start the receiver first; \
             ST 2110-21 not judged (the refused trains never left)",
            r.refused
        );
    }
    if let Some(a) = &r.st2110_21 {
        eprintln!("{}", pacing_verdict(a));
    }
    if let Some(a) = &r.st2110_21 {
        let stalls = r.pacing_host.as_ref().and_then(|h| h.stalls.as_ref());
        for line in crate::lateness::broken_lines(a, stalls) {
            eprintln!("send: {line}");
        }
    }
    if let Some(h) = &r.pacing_host {
        crate::lateness::print("send", h);
    }
    if let Some(c) = &r.rtcp {
        eprintln!("{}", rtcp_line(c));
    }
    if let Some(e) = &r.error {
        eprintln!("send: stopped early: {e}");
    }
}

/// The RTCP line of a send summary: what went, and what came back.
fn rtcp_line(c: &nagare_api::video::SendRtcp) -> String {
    let to: Vec<String> = c.to.iter().map(ToString::to_string).collect();
    let back = match (c.reported_lost, c.reported_jitter_ms) {
        (Some(lost), Some(j)) => format!(
            "{} receiver reports back (latest: {lost} packets lost, jitter {j:.3} ms)",
            c.receiver_reports
        ),
        _ => "no receiver reports back".to_owned(),
    };
    format!(
        "send: RTCP to {}: {} sender reports, {} BYE; {back}",
        to.join(", "),
        c.sender_reports,
        c.byes
    )
}

/// The ST 2110-21 lines of a send summary: what a receiver with a
/// perfect clock would find, in plain words and the standard's, how many
/// frames kept each type, and whether that is the declared type.
pub(crate) fn pacing_verdict(a: &nagare_api::st2110::AnalyzeReport) -> String {
    if a.verdict.is_none() {
        return "send: ST 2110-21: no whole frame sent to judge".into();
    }
    let declared = match (a.declared, a.declared_met) {
        (Some(t), Some(true)) => format!("keeps to its declared {}", t.sdp_value()),
        (Some(t), _) => format!("does NOT keep to its declared {}", t.sdp_value()),
        (None, _) => String::new(),
    };
    let mut out = String::from("send: ST 2110-21 at a perfect-clock receiver:");
    for l in crate::analysis::output::verdict_lines(a) {
        out.push_str(&format!("\nsend: {l}"));
    }
    // The reads start TRoffset into each frame: a wide sender's declared
    // one (TROFF) is longer than TROdefault, and is the lead it can use.
    let tro = a.model.as_ref().map_or(String::new(), |m| {
        format!("; reads from TRoffset {:.0} µs", m.tr_offset_ns / 1e3)
    });
    out.push_str(&format!(
        "\nsend: Cinst p50 {:.0} p99 {:.0} max {:.0}; FPT p50 {:.1} µs max {:.1} µs{tro}; {declared}",
        a.cinst.p50, a.cinst.p99, a.cinst.max, a.fpt_us.p50, a.fpt_us.max,
    ));
    out
}
