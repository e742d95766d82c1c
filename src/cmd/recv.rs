//! `nagare recv`: receives an RFC 4175 stream (nagare's, GStreamer's or
//! FFmpeg's) and records its frames on a writer thread in the raw layout
//! `nagare send` reads. Every decision about packets and frames is
//! nagare-proto's `video::Receiver`; this driver moves socket batches in,
//! frames out to the writer, and builds the report.

use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx, bounded};
use nagare_api::video::{EndedBy, FrameList, RecvReport};
use nagare_proto::sdp::SdpStream;
use nagare_proto::video::receiver::{self, Config, Datagram, Event, Incomplete, Record};
use nagare_proto::video::st2110_20::Frame;
use nagare_proto::{BitRate, ByteSize, FrameRate, Nanos, PixelFormat, VideoFormat};

use crate::cli::{self, Size};
use crate::clock::Origin;
use crate::net::udp::{self, Interface, ReceiveOptions, Receiver};
use crate::progress::{Ticker, bitrate};

/// Command-line arguments of `nagare recv`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecvArgs {
    /// Address to listen on, HOST:PORT (a multicast group joins it).
    #[arg(long, conflicts_with = "sdp", required_unless_present = "sdp")]
    pub listen: Option<String>,
    /// Frame size WIDTHxHEIGHT (with --listen; with --sdp, checked
    /// against the SDP's).
    #[arg(long, value_parser = cli::parse_size)]
    pub size: Option<Size>,
    /// Pixel format (with --listen): uyvy422, uyvp, rgb24 (with --sdp,
    /// checked against the SDP's).
    #[arg(long = "pix-fmt", value_parser = cli::parse_pix_fmt)]
    pub pix_fmt: Option<PixelFormat>,
    /// Frame rate, used to number frames and count lost ones (otherwise
    /// learned from the SDP or the stream).
    #[arg(long, value_parser = cli::parse_rate)]
    pub fps: Option<FrameRate>,
    /// Take address, port and format from an SDP file (nagare's or FFmpeg's).
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// Multicast interface, by address (127.0.0.1) or name (lo).
    #[arg(long, value_parser = cli::parse_interface)]
    pub interface: Option<Interface>,
    /// Source address for source-specific multicast.
    #[arg(long)]
    pub source: Option<String>,
    /// Record frames to this raw file; `-` writes them to standard output
    /// (`nagare recv -o - | ffmpeg -f rawvideo ... -i -`).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Stop after N frames (complete, incomplete or lost).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Give up after this many seconds without a packet (5, 0.5, 250ms).
    #[arg(long, value_parser = cli::parse_seconds)]
    pub timeout: Option<Duration>,
    /// What to record for incomplete frames: drop (nothing), keep (with
    /// zeros where bytes are missing) or repeat-last (the last complete
    /// frame, also for lost frames).
    #[arg(long, default_value = "drop", value_parser = cli::parse_incomplete())]
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
    /// With --sdp, a --size or --pix-fmt given too must say what the SDP
    /// says: silently preferring one would record the wrong frames.
    fn agrees_with(&self, f: &VideoFormat, path: &std::path::Path) -> Result<()> {
        if let Some(s) = self.size
            && (s.width, s.height) != (f.width, f.height)
        {
            bail!(
                "--size {s} disagrees with the SDP '{}', which says {}x{}: drop --size (the SDP \
                 describes the stream) or fix the SDP",
                path.display(),
                f.width,
                f.height
            );
        }
        if let Some(p) = self.pix_fmt
            && p != f.pixel_format
        {
            bail!(
                "--pix-fmt {p} disagrees with the SDP '{}', which says {}: drop --pix-fmt (the \
                 SDP describes the stream) or fix the SDP",
                path.display(),
                f.pixel_format
            );
        }
        Ok(())
    }

    pub fn config(&self) -> Result<RecvConfig> {
        let interface = self.interface.clone();
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
                let (Some(size), Some(pf)) = (self.size, self.pix_fmt) else {
                    bail!("--listen needs --size and --pix-fmt (or use --sdp FILE)");
                };
                (listen, cli::video_format(size, pf)?, None)
            }
            (None, Some(path)) => {
                let text = read_small(path)?;
                let sdp = SdpStream::parse(&text)
                    .map_err(|e| anyhow!("SDP file '{}': {e}", path.display()))?;
                if source.is_none() && sdp.address.is_multicast() {
                    source = sdp.source;
                }
                self.agrees_with(&sdp.format, path)?;
                (SocketAddr::new(sdp.address, sdp.port), sdp.format, sdp.rate)
            }
            _ => bail!("give either --listen HOST:PORT with --size and --pix-fmt, or --sdp FILE"),
        };
        if self.fps.is_some() {
            rate = self.fps;
        }
        if let Some(s) = source {
            if !listen.ip().is_multicast() {
                bail!("--source {s} only applies to a multicast group; {listen} is unicast");
            }
            udp::check_family(listen.ip(), Some(s))?;
        }
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
            timeout: self.timeout,
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
    Frame(Frame),
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
                crate::cli::open_output(p)?,
            )),
            None => None,
        };
        let (tx, rx) = bounded::<ToWriter>(cfg.buffer_frames);
        let (back, recycled) = bounded::<Vec<u8>>(cfg.buffer_frames + 4);
        let policy = cfg.incomplete;
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                crate::net::tuning::ordinary();
                write_loop(file, rx, back, policy)
            })
            .context("starting the writer thread")?;
        Ok(Writer {
            tx,
            recycled,
            thread,
        })
    }

    fn send(&self, msg: ToWriter) -> Result<()> {
        self.tx
            .send(msg)
            .map_err(|_| anyhow!("the writer thread stopped"))
    }

    /// Closes the queue and returns how many frames were written.
    fn finish(self) -> Result<u64> {
        drop(self.tx);
        self.thread
            .join()
            .map_err(|_| anyhow!("the writer thread panicked"))?
    }
}

/// Writes what the policy says for each frame slot; keeps a copy of the
/// last complete frame only when the policy repeats it.
fn write_loop(
    mut file: Option<BufWriter<Box<dyn Write + Send>>>,
    rx: ChanRx<ToWriter>,
    back: ChanTx<Vec<u8>>,
    policy: Incomplete,
) -> Result<u64> {
    let mut last: Option<Vec<u8>> = None;
    let mut written = 0u64;
    let mut put = |data: Option<&[u8]>| -> Result<()> {
        let Some(data) = data else { return Ok(()) };
        if let Some(f) = file.as_mut() {
            f.write_all(data).context("writing the output file")?;
        }
        written += 1;
        Ok(())
    };
    for msg in rx {
        match msg {
            ToWriter::Frame(f) => {
                match policy.record(f.complete) {
                    Record::Frame => put(Some(&f.data))?,
                    Record::LastComplete => put(last.as_deref())?,
                    Record::Nothing => {}
                }
                if f.complete && policy == Incomplete::RepeatLast {
                    last.get_or_insert_with(Vec::new).clone_from(&f.data);
                }
                let _ = back.try_send(f.data);
            }
            ToWriter::Lost(count) => {
                if policy.record_lost() == Record::LastComplete {
                    for _ in 0..count {
                        put(last.as_deref())?;
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

/// The receive loop's state around the proto machine.
struct Driver<'a> {
    cfg: &'a RecvConfig,
    machine: receiver::Receiver,
    writer: Writer,
    origin: Origin,
    report: RecvReport,
    ticker: Ticker,
    window: (u64, Instant),
}

/// Receives until the frame limit, the idle timeout, or `stop`.
pub fn run(cfg: &RecvConfig, bound: Bound, stop: &AtomicBool) -> Result<RecvReport> {
    let mut rx = bound.rx;
    let drops_at_start = rx.kernel_drops;
    let mut d = Driver {
        cfg,
        machine: receiver::Receiver::new(Config {
            format: cfg.format,
            rate: cfg.rate,
            incomplete: cfg.incomplete,
            frame_limit: cfg.frames,
        }),
        writer: Writer::start(cfg)?,
        origin: Origin::now(),
        report: RecvReport::default(),
        ticker: Ticker::new(cfg.quiet),
        window: (0, Instant::now()),
    };
    let ended_by = match d.receive(&mut rx, stop) {
        Ok(e) => e,
        Err(e) => {
            let _ = d.writer.finish();
            return Err(e);
        }
    };
    d.ticker.finish();
    d.machine.finish();
    d.events()?;
    let Driver {
        machine,
        writer,
        mut report,
        ..
    } = d;
    report.frames_written = writer.finish()?;
    fill_report(&mut report, &machine.stats(), cfg);
    report.kernel_drops = u64::from(rx.kernel_drops.wrapping_sub(drops_at_start));
    report.ended_by = ended_by;
    report.gro = rx.gro;
    Ok(report)
}

impl Driver<'_> {
    /// Feeds socket batches to the machine until it is done, the socket is
    /// idle for the timeout, or `stop`.
    fn receive(&mut self, rx: &mut Receiver, stop: &AtomicBool) -> Result<EndedBy> {
        let mut last_packet = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(EndedBy::Interrupted);
            }
            if self.machine.is_done() {
                return Ok(EndedBy::FrameCount);
            }
            if self.cfg.timeout.is_some_and(|t| last_packet.elapsed() >= t) {
                return Ok(EndedBy::Timeout);
            }
            let (machine, origin) = (&mut self.machine, self.origin);
            let got = rx
                .recv_batch(|d| {
                    let now = origin.nanos(d.at);
                    for bytes in d.segments() {
                        machine.handle_input(
                            now,
                            Datagram {
                                bytes,
                                from: d.from,
                            },
                        );
                    }
                })
                .context("receiving")?;
            if got > 0 {
                last_packet = Instant::now();
            }
            self.events()?;
            self.progress();
        }
    }

    /// Hands frames to the writer and books them in the report.
    fn events(&mut self) -> Result<()> {
        while let Ok(buf) = self.writer.recycled.try_recv() {
            self.machine.recycle(buf);
        }
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Stream { from, .. } => self.report.sender = from,
                Event::Frame(f) => {
                    if !f.complete {
                        self.report.frames_incomplete.add(f.index, 1);
                    } else if self.cfg.checksums {
                        let sum = xxhash_rust::xxh3::xxh3_64(&f.data);
                        self.report.checksums.push((f.index, sum));
                    }
                    self.writer.send(ToWriter::Frame(f))?;
                }
                Event::Lost { first, count } => {
                    self.report.frames_lost.add(first, count);
                    self.writer.send(ToWriter::Lost(count))?;
                }
                // Frames the stream ended before are reported, not written.
                Event::Missing { first, count } => self.report.frames_lost.add(first, count),
            }
        }
        Ok(())
    }

    fn progress(&mut self) {
        let now = Instant::now();
        if !self.ticker.due(now) {
            return;
        }
        let s = self.machine.stats();
        let (b0, t0) = self.window;
        let rate = (s.bytes - b0) as f64 * 8.0 / now.duration_since(t0).as_secs_f64().max(1e-9);
        self.window = (s.bytes, now);
        self.ticker.print(&format!(
            "recv: {}  frames {} complete, {} incomplete, {} lost  packets lost {}",
            bitrate(rate),
            s.frames_complete,
            s.frames_incomplete,
            s.frames_lost,
            s.packets_lost
        ));
    }
}

/// Copies the machine's counters into the report.
fn fill_report(r: &mut RecvReport, s: &receiver::Stats, cfg: &RecvConfig) {
    r.frames_complete = s.frames_complete;
    r.packets_received = s.packets_received;
    r.packets_lost = s.packets_lost;
    r.packets_reordered = s.packets_reordered;
    r.packets_duplicate = s.packets_duplicate;
    r.packets_malformed = s.packets_malformed;
    r.packets_late = s.packets_late;
    r.packets_foreign = s.packets_foreign;
    r.bytes = s.bytes;
    let span = match (s.first_at, s.last_at) {
        (Some(a), Some(b)) => b - a,
        _ => Nanos::ZERO,
    };
    r.seconds = span.as_secs_f64();
    r.rate_bps = BitRate::of(ByteSize(s.bytes), span);
    r.jitter_ms = s.jitter.as_millis_f64();
    r.all_complete = r.frames_complete > 0
        && r.frames_incomplete.count == 0
        && r.frames_lost.count == 0
        && cfg.frames.is_none_or(|n| r.frames_complete >= n);
}

/// ` (1,4-6)` for a non-empty list, nothing for an empty one.
fn listed(l: &FrameList) -> String {
    if l.count > 0 {
        format!(" ({l})")
    } else {
        String::new()
    }
}

/// Prints the human summary of a receive.
pub fn print_summary(r: &RecvReport) {
    eprintln!(
        "recv: {} frames complete, {} incomplete{}, {} lost{}; {} written",
        r.frames_complete,
        r.frames_incomplete.count,
        listed(&r.frames_incomplete),
        r.frames_lost.count,
        listed(&r.frames_lost),
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
        bitrate(r.rate_bps.as_f64()),
        r.seconds,
        r.jitter_ms,
        r.ended_by
    );
}

/// Why most of a stream failed to parse, when that looks like a format
/// mismatch rather than loss: packets whose lines or offsets fall outside
/// the frame this receiver expects are malformed, and their frames then
/// count as incomplete or lost.
pub fn format_hint(r: &RecvReport, f: &VideoFormat) -> Option<String> {
    let seen = r.packets_received + r.packets_malformed;
    let mostly_bad = r.packets_malformed > 0 && r.packets_malformed * 10 >= seen;
    (mostly_bad && r.frames_complete * 2 <= r.frames_incomplete.count + r.frames_lost.count + 1)
        .then(|| {
            format!(
                "recv: hint: {} of {seen} packets did not fit a {}x{} {} frame: the sender most \
                 likely sends another size or pixel format; give recv the sender's --size and \
                 --pix-fmt, or its SDP with --sdp",
                r.packets_malformed, f.width, f.height, f.pixel_format
            )
        })
}

/// `nagare recv`.
pub fn main(args: RecvArgs) -> Result<std::process::ExitCode> {
    let cfg = args.config()?;
    if args.json && cfg.output.as_deref().is_some_and(crate::cli::is_stdio) {
        bail!("--json prints on stdout, where -o - writes the frames: drop one, or give -o a file");
    }
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
    if let Some(h) = format_hint(&report, &cfg.format) {
        eprintln!("{h}");
    }
    Ok(if report.all_complete {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
