//! `nagare recv`: receives an RFC 4175 stream (nagare's, GStreamer's or
//! FFmpeg's), reassembles frames, and records them on a writer thread in
//! the raw layout `nagare send` reads.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx, bounded};
use nagare_proto::rtp::RtpPacket;
use nagare_proto::sdp::SdpStream;
use nagare_proto::stats::{Arrival, Jitter, SeqExtender, SequenceTracker};
use nagare_proto::video::format::VIDEO_CLOCK_RATE;
use nagare_proto::video::st2110_20::{Depacketizer, Output};
use nagare_proto::{FrameRate, VideoFormat};
use serde::Serialize;

use crate::cli::{parse_format, parse_rate};
use crate::net::udp::{self, ReceiveOptions, Receiver};
use crate::progress::{Ticker, bitrate};

/// What to record for a frame that arrived with bytes missing.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Incomplete {
    /// Write nothing for it (the recording holds complete frames only).
    Drop,
    /// Write it with its missing bytes as zeros.
    Keep,
    /// Write the last complete frame in its place (and for lost frames),
    /// so the recording keeps its timing.
    RepeatLast,
}

/// Command-line arguments of `nagare recv`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecvArgs {
    /// Address to listen on, HOST:PORT (a multicast group joins it).
    #[arg(long, conflicts_with = "sdp", required_unless_present = "sdp")]
    pub listen: Option<String>,
    /// Frame size WIDTHxHEIGHT (with --listen).
    #[arg(long, requires = "listen")]
    pub size: Option<String>,
    /// Pixel format (with --listen): uyvy422, uyvp, rgb24.
    #[arg(long = "pix-fmt", requires = "listen")]
    pub pix_fmt: Option<String>,
    /// Frame rate, used to number frames and count lost ones (otherwise
    /// learned from the SDP or the stream).
    #[arg(long)]
    pub fps: Option<String>,
    /// Take address, port and format from an SDP file (nagare's or FFmpeg's).
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// Multicast interface, by address (127.0.0.1) or name (lo).
    #[arg(long)]
    pub interface: Option<String>,
    /// Source address for source-specific multicast.
    #[arg(long)]
    pub source: Option<String>,
    /// Record frames to this raw file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Stop after N frames (complete, incomplete or lost).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Give up after this many seconds without a packet.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// What to record for incomplete frames.
    #[arg(long, value_enum, default_value_t = Incomplete::Drop)]
    pub incomplete: Incomplete,
    /// Frames buffered between the receive thread and the writer.
    #[arg(long, default_value_t = 8)]
    pub buffer_frames: usize,
    /// Pin the receiving thread to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Run the receiving thread with real-time (SCHED_FIFO) priority;
    /// needs root or CAP_SYS_NICE.
    #[arg(long)]
    pub realtime: bool,
    /// Print statistics as JSON on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// A validated receiver configuration.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Frame format.
    pub format: VideoFormat,
    /// Frame rate if known.
    pub rate: Option<FrameRate>,
    /// Socket options.
    pub socket: ReceiveOptions,
    /// Recording path.
    pub output: Option<PathBuf>,
    /// Frame limit.
    pub frames: Option<u64>,
    /// Idle timeout.
    pub timeout: Option<Duration>,
    /// Incomplete-frame policy.
    pub incomplete: Incomplete,
    /// Writer queue depth.
    pub buffer_frames: usize,
    /// Keep an xxh3 of each frame (demo).
    pub checksums: bool,
    /// Suppress the progress line.
    pub quiet: bool,
}

impl RecvArgs {
    /// Validates the arguments.
    pub fn config(&self) -> Result<RecvConfig> {
        let interface = self
            .interface
            .as_deref()
            .map(udp::parse_interface)
            .transpose()?;
        let mut source: Option<IpAddr> = self
            .source
            .as_deref()
            .map(|s| {
                s.parse()
                    .map_err(|_| anyhow!("--source '{s}' is not an IP address"))
            })
            .transpose()?;
        let (listen, format, mut rate) = match (&self.listen, &self.sdp) {
            (Some(l), None) => {
                let listen = udp::parse_addr(l, "listen address")?;
                let (Some(size), Some(pf)) = (&self.size, &self.pix_fmt) else {
                    bail!("--listen needs --size and --pix-fmt (or use --sdp FILE)");
                };
                (listen, parse_format(size, pf)?, None)
            }
            (None, Some(path)) => {
                let text = read_small(path)?;
                let sdp = SdpStream::parse(&text)
                    .map_err(|e| anyhow!("SDP file '{}': {e}", path.display()))?;
                if source.is_none() && sdp.address.is_multicast() {
                    source = sdp.source;
                }
                (SocketAddr::new(sdp.address, sdp.port), sdp.format, sdp.rate)
            }
            _ => bail!("give either --listen HOST:PORT with --size and --pix-fmt, or --sdp FILE"),
        };
        if let Some(fps) = &self.fps {
            rate = Some(parse_rate(fps)?);
        }
        if let Some(s) = source {
            if !listen.ip().is_multicast() {
                bail!("--source {s} only applies to a multicast group; {listen} is unicast");
            }
            udp::check_family(listen.ip(), Some(s))?;
        }
        let timeout = match self.timeout {
            Some(t) if !(t > 0.0 && t < 1e6) => {
                bail!("--timeout {t} is out of range: give seconds above 0")
            }
            t => t.map(Duration::from_secs_f64),
        };
        if self.buffer_frames == 0 || self.buffer_frames > 1024 {
            bail!(
                "--buffer-frames {} is out of range: 1..=1024",
                self.buffer_frames
            );
        }
        // Room for a few frames in the kernel: senders that do not pace
        // (GStreamer, FFmpeg) send each frame as one burst.
        let buffer_bytes = (format.frame_bytes() * 4).clamp(16 << 20, 512 << 20);
        Ok(RecvConfig {
            listen,
            format,
            rate,
            socket: ReceiveOptions {
                interface,
                source,
                buffer_bytes,
            },
            output: self.output.clone(),
            frames: self.frames,
            timeout,
            incomplete: self.incomplete,
            buffer_frames: self.buffer_frames,
            checksums: false,
            quiet: self.json,
        })
    }
}

fn read_small(path: &PathBuf) -> Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read SDP file '{}'", path.display()))?;
    if meta.len() > 64 * 1024 {
        bail!(
            "SDP file '{}' is {} bytes; an SDP is at most a few KiB",
            path.display(),
            meta.len()
        );
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read SDP file '{}'", path.display()))
}

/// Runs of frame indices, for reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FrameList {
    /// `[first, last]` inclusive ranges, oldest first (at most 1000 kept).
    pub ranges: Vec<[u64; 2]>,
    /// Total frames in the list.
    pub count: u64,
}

impl FrameList {
    fn add(&mut self, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.count += count;
        let last = first + count - 1;
        if let Some(r) = self.ranges.last_mut()
            && r[1] + 1 == first
        {
            r[1] = last;
        } else if self.ranges.len() < 1000 {
            self.ranges.push([first, last]);
        }
    }
}

impl std::fmt::Display for FrameList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.ranges.iter().take(12).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r[0] == r[1] {
                write!(f, "{}", r[0])?;
            } else {
                write!(f, "{}-{}", r[0], r[1])?;
            }
        }
        if self.ranges.len() > 12 {
            f.write_str(",...")?;
        }
        Ok(())
    }
}

/// What a receiver saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecvReport {
    /// Frames with every byte.
    pub frames_complete: u64,
    /// Frames with bytes missing, by index.
    pub frames_incomplete: FrameList,
    /// Frames of which nothing arrived, by index.
    pub frames_lost: FrameList,
    /// Frames written to the output.
    pub frames_written: u64,
    /// Distinct packets received.
    pub packets_received: u64,
    /// Packets missing from the sequence range.
    pub packets_lost: u64,
    /// Packets that arrived out of order.
    pub packets_reordered: u64,
    /// Duplicate packets (dropped).
    pub packets_duplicate: u64,
    /// Packets that were not valid RTP / RFC 4175 for this format.
    pub packets_malformed: u64,
    /// Packets for frames already finished.
    pub packets_late: u64,
    /// Packets from another SSRC than the stream's (dropped).
    pub packets_foreign: u64,
    /// Datagrams the kernel dropped for lack of socket buffer.
    pub kernel_drops: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// From first to last packet, seconds.
    pub seconds: f64,
    /// Received rate.
    pub rate_bps: f64,
    /// RFC 3550 interarrival jitter, milliseconds.
    pub jitter_ms: f64,
    /// Whether every expected frame arrived complete.
    pub all_complete: bool,
    /// Why the receiver stopped.
    pub ended_by: String,
    /// Address the stream came from.
    pub sender: Option<String>,
    /// Whether the kernel coalesced datagrams (UDP GRO).
    pub gro: bool,
    /// xxh3 of each complete frame by index (demo only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<(u64, u64)>,
}

/// A bound receiver ready to run (binding first lets callers learn the
/// port before the sender starts).
pub struct Bound {
    rx: Receiver,
}

impl Bound {
    /// Binds and joins as configured.
    pub fn open(cfg: &RecvConfig) -> Result<Bound> {
        let rx = Receiver::open(cfg.listen, &cfg.socket)?;
        Ok(Bound { rx })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.rx.local_addr()
    }

    /// Notices from socket setup.
    pub fn notices(&self) -> &[String] {
        &self.rx.notices
    }
}

enum ToWriter {
    Frame(nagare_proto::video::st2110_20::Frame),
    Lost(u64),
}

struct Writer {
    tx: ChanTx<ToWriter>,
    recycled: ChanRx<Vec<u8>>,
    thread: JoinHandle<Result<u64>>,
}

impl Writer {
    fn start(cfg: &RecvConfig) -> Result<Writer> {
        let file = match &cfg.output {
            Some(p) => Some(BufWriter::with_capacity(
                4 << 20,
                File::create(p)
                    .with_context(|| format!("cannot create output '{}'", p.display()))?,
            )),
            None => None,
        };
        let (tx, rx) = bounded::<ToWriter>(cfg.buffer_frames);
        let (back, recycled) = bounded::<Vec<u8>>(cfg.buffer_frames + 4);
        let policy = cfg.incomplete;
        let frame_bytes = cfg.format.frame_bytes();
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                crate::net::tuning::ordinary();
                write_loop(file, rx, back, policy, frame_bytes)
            })
            .context("starting the writer thread")?;
        Ok(Writer {
            tx,
            recycled,
            thread,
        })
    }
}

fn write_loop(
    mut file: Option<BufWriter<File>>,
    rx: ChanRx<ToWriter>,
    back: ChanTx<Vec<u8>>,
    policy: Incomplete,
    frame_bytes: usize,
) -> Result<u64> {
    let mut last: Option<Vec<u8>> = None;
    let mut written = 0u64;
    let mut put = |file: &mut Option<BufWriter<File>>, data: &[u8]| -> Result<()> {
        if let Some(f) = file.as_mut() {
            f.write_all(data).context("writing the output file")?;
        }
        written += 1;
        Ok(())
    };
    for msg in rx {
        match msg {
            ToWriter::Frame(f) => {
                if f.complete {
                    put(&mut file, &f.data)?;
                    if policy == Incomplete::RepeatLast {
                        let l = last.get_or_insert_with(|| vec![0; frame_bytes]);
                        l.copy_from_slice(&f.data);
                    }
                } else {
                    match policy {
                        Incomplete::Drop => {}
                        Incomplete::Keep => put(&mut file, &f.data)?,
                        Incomplete::RepeatLast => {
                            if let Some(l) = &last {
                                put(&mut file, l)?;
                            }
                        }
                    }
                }
                let _ = back.try_send(f.data);
            }
            ToWriter::Lost(count) => {
                if let (Incomplete::RepeatLast, Some(l)) = (policy, &last) {
                    for _ in 0..count {
                        put(&mut file, l)?;
                    }
                }
            }
        }
    }
    if let Some(f) = file.as_mut() {
        f.flush().context("flushing the output file")?;
    }
    Ok(written)
}

/// Receives until the frame limit, the idle timeout, or `stop`.
pub fn run(cfg: &RecvConfig, bound: Bound, stop: &AtomicBool) -> Result<RecvReport> {
    let mut rx = bound.rx;
    let writer = Writer::start(cfg)?;
    let period = cfg.rate.map(|r| r.period_ticks());
    let mut depack = Depacketizer::new(cfg.format, period);
    depack.set_zero_fill(cfg.incomplete == Incomplete::Keep);
    let mut ext = SeqExtender::default();
    let mut tracker = SequenceTracker::new();
    let mut jitter = Jitter::default();
    let mut report = RecvReport::default();
    let mut ssrc: Option<u32> = None;
    let started = Instant::now();
    let mut last_packet = Instant::now();
    let mut first_packet: Option<Instant> = None;
    let mut ticker = Ticker::new(cfg.quiet);
    let mut window = (0u64, Instant::now());
    let mut accounted = 0u64;
    let mut out: Vec<Output> = Vec::new();
    let drops_at_start = rx.kernel_drops;
    let ended_by = loop {
        if stop.load(Ordering::Relaxed) {
            break "interrupted";
        }
        if cfg.frames.is_some_and(|n| accounted >= n) {
            break "frame count reached";
        }
        let now = Instant::now();
        if let Some(t) = cfg.timeout
            && now.duration_since(last_packet) >= t
        {
            break "timeout";
        }
        let got = rx.recv_batch(|d| {
            let arrival = Instant::now();
            for seg in d.segments() {
                let Ok(pkt) = RtpPacket::new_checked(seg) else {
                    report.packets_malformed += 1;
                    continue;
                };
                // Garbage is refused before it can touch the statistics.
                let Ok(prepared) = depack.prepare(&pkt) else {
                    continue;
                };
                // The stream is the first SSRC heard; anything else on the
                // port is someone else's and must not corrupt frames.
                if *ssrc.get_or_insert(pkt.ssrc()) != pkt.ssrc() {
                    report.packets_foreign += 1;
                    continue;
                }
                if report.sender.is_none() {
                    report.sender = d.from.map(|a| a.to_string());
                }
                let esn = pkt
                    .payload()
                    .get(..2)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]));
                let seq = ext.extend(pkt.sequence_number(), esn);
                if matches!(tracker.record(seq), Arrival::Duplicate | Arrival::TooOld) {
                    continue;
                }
                report.bytes += seg.len() as u64;
                let ticks = arrival.duration_since(started).as_nanos() as i64
                    * VIDEO_CLOCK_RATE as i64
                    / 1_000_000_000;
                jitter.record(ticks, pkt.timestamp());
                let _ = depack.commit(prepared);
                while let Some(o) = depack.poll() {
                    out.push(o);
                }
            }
        });
        match got {
            Ok(0) => {}
            Ok(_) => {
                last_packet = Instant::now();
                first_packet.get_or_insert(last_packet);
            }
            Err(e) => {
                drop(writer.tx);
                let _ = writer.thread.join();
                return Err(e).context("receiving");
            }
        }
        for o in out.drain(..) {
            accounted += handle(o, cfg, &mut report, &writer, &mut depack)?;
        }
        if ticker.due(Instant::now()) {
            let (b0, t0) = window;
            let now = Instant::now();
            let rate =
                (report.bytes - b0) as f64 * 8.0 / now.duration_since(t0).as_secs_f64().max(1e-9);
            window = (report.bytes, now);
            ticker.print(&format!(
                "recv: {}  frames {} complete, {} incomplete, {} lost  packets lost {}",
                bitrate(rate),
                depack.stats().frames_complete,
                depack.stats().frames_incomplete,
                depack.stats().frames_lost,
                tracker.lost()
            ));
        }
    };
    ticker.finish();
    depack.flush();
    while let Some(o) = depack.poll() {
        if cfg.frames.is_some_and(|n| accounted >= n) {
            break;
        }
        accounted += handle(o, cfg, &mut report, &writer, &mut depack)?;
    }
    // Frames the sender promised but never reached us.
    if let Some(n) = cfg.frames
        && accounted < n
    {
        let next = depack.last_index().map_or(0, |i| i + 1);
        report.frames_lost.add(next, n - accounted);
    }
    let Writer { tx, thread, .. } = writer;
    drop(tx);
    report.frames_written = thread
        .join()
        .map_err(|_| anyhow!("the writer thread panicked"))??;
    let c = tracker.counters();
    report.packets_received = c.received;
    report.packets_lost = tracker.lost();
    report.packets_reordered = c.reordered;
    report.packets_duplicate = c.duplicates;
    let ds = depack.stats();
    report.packets_malformed += ds.malformed;
    report.packets_late = ds.late + c.too_old;
    report.kernel_drops = u64::from(rx.kernel_drops.wrapping_sub(drops_at_start));
    report.seconds = first_packet.map_or(0.0, |f| last_packet.duration_since(f).as_secs_f64());
    report.rate_bps = if report.seconds > 0.0 {
        report.bytes as f64 * 8.0 / report.seconds
    } else {
        0.0
    };
    report.jitter_ms = jitter.value() / VIDEO_CLOCK_RATE as f64 * 1000.0;
    report.all_complete = report.frames_complete > 0
        && report.frames_incomplete.count == 0
        && report.frames_lost.count == 0
        && cfg.frames.is_none_or(|n| report.frames_complete >= n);
    report.ended_by = ended_by.to_string();
    report.gro = rx.gro;
    Ok(report)
}

/// Routes one depacketizer output; returns how many frames it accounts for.
fn handle(
    o: Output,
    cfg: &RecvConfig,
    report: &mut RecvReport,
    writer: &Writer,
    depack: &mut Depacketizer,
) -> Result<u64> {
    while let Ok(buf) = writer.recycled.try_recv() {
        depack.recycle(buf);
    }
    let limit_left = |idx: u64| cfg.frames.is_none_or(|n| idx < n);
    match o {
        Output::Frame(f) => {
            if !limit_left(f.index) {
                return Ok(0);
            }
            if f.complete {
                report.frames_complete += 1;
                if cfg.checksums {
                    report
                        .checksums
                        .push((f.index, xxhash_rust::xxh3::xxh3_64(&f.data)));
                }
            } else {
                report.frames_incomplete.add(f.index, 1);
            }
            writer
                .tx
                .send(ToWriter::Frame(f))
                .map_err(|_| anyhow!("the writer thread stopped"))?;
            Ok(1)
        }
        Output::Lost { first, count } => {
            let count = match cfg.frames {
                Some(n) => count.min(n.saturating_sub(first)),
                None => count,
            };
            report.frames_lost.add(first, count);
            if count > 0 {
                writer
                    .tx
                    .send(ToWriter::Lost(count))
                    .map_err(|_| anyhow!("the writer thread stopped"))?;
            }
            Ok(count)
        }
    }
}

/// Prints the human summary of a receive.
pub fn print_summary(r: &RecvReport) {
    eprintln!(
        "recv: {} frames complete, {} incomplete{}, {} lost{}; {} written",
        r.frames_complete,
        r.frames_incomplete.count,
        if r.frames_incomplete.count > 0 {
            format!(" ({})", r.frames_incomplete)
        } else {
            String::new()
        },
        r.frames_lost.count,
        if r.frames_lost.count > 0 {
            format!(" ({})", r.frames_lost)
        } else {
            String::new()
        },
        r.frames_written
    );
    eprintln!(
        "recv: packets {} received, {} lost, {} reordered, {} duplicate, {} malformed, {} late, {} foreign; kernel drops {}",
        r.packets_received,
        r.packets_lost,
        r.packets_reordered,
        r.packets_duplicate,
        r.packets_malformed,
        r.packets_late,
        r.packets_foreign,
        r.kernel_drops
    );
    eprintln!(
        "recv: {} over {:.2} s, jitter (RFC 3550) {:.3} ms; ended by {}",
        bitrate(r.rate_bps),
        r.seconds,
        r.jitter_ms,
        r.ended_by
    );
}

/// `nagare recv`.
pub fn main(args: RecvArgs) -> Result<std::process::ExitCode> {
    let cfg = args.config()?;
    let bound = Bound::open(&cfg)?;
    for n in bound.notices() {
        eprintln!("nagare recv: note: {n}");
    }
    if let Some(a) = bound.local_addr() {
        eprintln!("nagare recv: listening on {a}");
    }
    // Only the receiving thread is tuned; the writer thread is started by
    // `run` after this and keeps default priority on any CPU.
    if let Some(cpu) = args.cpu {
        crate::net::tuning::pin_to_cpu(cpu)?;
    }
    if args.realtime {
        crate::net::tuning::realtime()?;
    }
    let report = run(&cfg, bound, crate::stop_flag())?;
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
