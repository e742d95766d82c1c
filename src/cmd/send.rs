//! `nagare send`: frames from a file, a directory or the test pattern,
//! read ahead on a reader thread, packetized per RFC 4175 and paced evenly
//! over each frame period on an absolute schedule.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::TryRecvError;
use hdrhistogram::Histogram;
use nagare_proto::sdp::SdpStream;
use nagare_proto::video::pacer::{Pacer, PacingStats};
use nagare_proto::video::st2110_20::{DEFAULT_PACKET_SIZE, Packetizer};
use nagare_proto::{FrameRate, VideoFormat};
use serde::Serialize;

use crate::cli::{parse_format, parse_rate};
use crate::clock::{Origin, wait_until};
use crate::net::udp::{self, SendOptions, Sender, iovec};
use crate::progress::{Ticker, bitrate};
use crate::source::{FrameBuf, FrameRing, Slot, Source};

/// Command-line arguments of `nagare send`.
#[derive(clap::Args, Debug, Clone)]
pub struct SendArgs {
    /// Raw video file (frames back to back), a directory with one file per
    /// frame (sorted by name), or pattern:bars for a moving test pattern.
    pub input: String,
    /// Destination HOST:PORT (unicast or multicast group; IPv4 or IPv6).
    #[arg(long)]
    pub to: String,
    /// Frame size WIDTHxHEIGHT.
    #[arg(long)]
    pub size: String,
    /// Pixel format: uyvy422 (8-bit 4:2:2), uyvp (10-bit 4:2:2), rgb24.
    #[arg(long = "pix-fmt")]
    pub pix_fmt: String,
    /// Frame rate: 30, 60000/1001 or 29.97.
    #[arg(long)]
    pub fps: String,
    /// UDP payload bytes per packet (up to 8960 for jumbo frames).
    #[arg(long, default_value_t = DEFAULT_PACKET_SIZE)]
    pub packet_size: usize,
    /// Stop after N frames.
    #[arg(long)]
    pub frames: Option<u64>,
    /// Play the input again and again (until --frames or Ctrl-C).
    #[arg(long = "loop")]
    pub looping: bool,
    /// Multicast interface, by address (127.0.0.1) or name (lo).
    #[arg(long)]
    pub interface: Option<String>,
    /// TTL / hop limit.
    #[arg(long)]
    pub ttl: Option<u32>,
    /// Write an ST 2110-20 SDP for receivers here.
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// Frames read ahead into the ring between reader and sender.
    #[arg(long, default_value_t = 8)]
    pub buffer_frames: usize,
    /// Longest train of packets sent back to back, in microseconds of
    /// schedule (bigger trains cost less CPU, smaller ones burst less).
    #[arg(long, default_value_t = 100)]
    pub burst_us: u64,
    /// Send packet by packet (sendmmsg) even where UDP GSO is available.
    #[arg(long)]
    pub no_gso: bool,
    /// Split each frame into N horizontal stripes, each its own RTP stream
    /// to the next port (PORT, PORT+1, ...), like seed 000's 8 nodes each
    /// sending one stripe; all stripes share one schedule and timestamp.
    #[arg(long, default_value_t = 1)]
    pub stripes: usize,
    /// Read the input file with O_DIRECT (bypassing the page cache); the
    /// frame size must be a multiple of 4096 bytes.
    #[arg(long)]
    pub direct: bool,
    /// Pin the sending thread to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Run the sending thread with real-time (SCHED_FIFO) priority; needs
    /// root or CAP_SYS_NICE.
    #[arg(long)]
    pub realtime: bool,
    /// Sleep this long before each frame read (simulates slow storage).
    #[arg(long, hide = true, default_value_t = 0)]
    pub read_delay_ms: u64,
    /// Print statistics as JSON on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// A validated sender configuration.
#[derive(Debug, Clone)]
pub struct SendConfig {
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
    /// Ring capacity.
    pub buffer_frames: usize,
    /// Train length limit in schedule time.
    pub burst: Duration,
    /// Use GSO where available.
    pub gso: bool,
    /// Artificial per-frame read delay.
    pub read_delay: Duration,
    /// Keep an xxh3 checksum of every frame sent (for the demo).
    pub checksums: bool,
    /// Suppress the progress line.
    pub quiet: bool,
    /// CPU to pin the sending thread to.
    pub cpu: Option<usize>,
    /// Horizontal stripes, one RTP stream each.
    pub stripes: usize,
    /// Read the input file with O_DIRECT.
    pub direct: bool,
    /// SCHED_FIFO for the sending thread.
    pub realtime: bool,
}

impl SendArgs {
    /// Validates the arguments.
    pub fn config(&self) -> Result<SendConfig> {
        let format = parse_format(&self.size, &self.pix_fmt)?;
        let rate = parse_rate(&self.fps)?;
        let dest = udp::parse_addr(&self.to, "destination")?;
        if dest.port() == 0 {
            bail!("destination {dest} has port 0: give the receiver's port");
        }
        let stripe = stripe_format(format, self.stripes)?;
        stripe_dest(dest, self.stripes - 1)?;
        Packetizer::new(stripe, self.packet_size, 0)
            .map_err(|e| anyhow!("--packet-size {}: {e}", self.packet_size))?;
        let interface = self
            .interface
            .as_deref()
            .map(udp::parse_interface)
            .transpose()?;
        if self.buffer_frames == 0 || self.buffer_frames > 1024 {
            bail!(
                "--buffer-frames {} is out of range: 1..=1024",
                self.buffer_frames
            );
        }
        Ok(SendConfig {
            input: self.input.clone(),
            dest,
            format,
            rate,
            packet_size: self.packet_size,
            frames: self.frames,
            looping: self.looping,
            socket: SendOptions {
                interface,
                ttl: self.ttl,
                buffer_bytes: 8 << 20,
            },
            sdp: self.sdp.clone(),
            buffer_frames: self.buffer_frames,
            burst: Duration::from_micros(self.burst_us),
            gso: !self.no_gso,
            read_delay: Duration::from_millis(self.read_delay_ms),
            checksums: false,
            quiet: self.json,
            cpu: self.cpu,
            realtime: self.realtime,
            stripes: self.stripes,
            direct: self.direct,
        })
    }
}

/// What a sender did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SendReport {
    /// Frames sent completely.
    pub frames_sent: u64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// From the first to the last packet, seconds.
    pub seconds: f64,
    /// UDP payload rate over that span.
    pub rate_bps: f64,
    /// Packets per frame.
    pub packets_per_frame: u64,
    /// Packets released more than 100 µs behind their slot.
    pub packets_late: u64,
    /// Lateness of train starts against the schedule, microseconds.
    pub lateness_us: Lateness,
    /// Frame slots skipped because the ring was empty.
    pub underruns: u64,
    /// Datagrams the kernel refused (no receiver on a unicast port).
    pub refused: u64,
    /// Whether UDP GSO trains were used.
    pub gso: bool,
    /// Epoch frame number of the first frame (its RTP timestamp is this
    /// times the frame period at 90 kHz).
    pub first_frame: u64,
    /// RTP SSRC of the stream (of the first stripe).
    pub ssrc: u32,
    /// Streams the frame was split into.
    pub stripes: usize,
    /// Why sending stopped early, if it did.
    pub error: Option<String>,
    /// xxh3 of every frame sent, in order (demo only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checksums: Vec<u64>,
}

/// Percentiles of pacing lateness.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Lateness {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(crate::clock::epoch_ns());
    h.finish() as u32
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
    let sdp = SdpStream {
        address: dest.ip(),
        port: dest.port(),
        ttl: cfg.socket.ttl.map(|t| t.min(255) as u8),
        source,
        payload_type: nagare_proto::video::st2110_20::DEFAULT_PAYLOAD_TYPE,
        format,
        rate: Some(cfg.rate),
        name: format!("nagare {}", cfg.input),
    };
    let text = sdp.to_sdp((crate::clock::epoch_ns() / 1_000_000_000) as u64);
    std::fs::write(path, text).with_context(|| format!("writing SDP to '{}'", path.display()))
}

/// Runs a sender until its frames are sent, the input ends, or `stop`.
pub fn run(cfg: &SendConfig, stop: &AtomicBool) -> Result<SendReport> {
    let source = Source::open(&cfg.input, cfg.format, cfg.direct)?;
    if let (Some(avail), Some(want), false) = (source.frames(), cfg.frames, cfg.looping)
        && want > avail
    {
        bail!("input has {avail} frames but --frames asks for {want}; add --loop to repeat it");
    }
    let stripe_format = stripe_format(cfg.format, cfg.stripes)?;
    let mut flows = Vec::with_capacity(cfg.stripes);
    for k in 0..cfg.stripes {
        let dest = stripe_dest(cfg.dest, k)?;
        let sender = Sender::open(dest, &cfg.socket)
            .with_context(|| format!("opening a socket to {dest}"))?;
        if k == 0 {
            for n in &sender.notices {
                eprintln!("nagare send: note: {n}");
            }
        }
        if let Some(path) = &cfg.sdp {
            let path = stripe_sdp_path(path, k, cfg.stripes);
            write_sdp(cfg, stripe_format, dest, &sender, &path)?;
        }
        let ssrc = random_u32();
        let packetizer = Packetizer::new(stripe_format, cfg.packet_size, ssrc)?.uniform();
        flows.push(Flow {
            dest,
            sender,
            packetizer,
            ext_seq: random_u32(),
            data_offset: k * stripe_format.frame_bytes(),
            refused: 0,
        });
    }
    let ring = FrameRing::start(
        source,
        cfg.format,
        cfg.buffer_frames,
        cfg.frames,
        cfg.looping || cfg.frames.is_none() && cfg.input.starts_with("pattern:"),
        cfg.read_delay,
    );
    // Only the sending thread is tuned; the reader keeps default priority.
    crate::net::tuning::precise_timers();
    if let Some(cpu) = cfg.cpu {
        crate::net::tuning::pin_to_cpu(cpu)?;
    }
    if cfg.realtime {
        crate::net::tuning::realtime()?;
    }
    // Fill the ring before the first frame so early frames never underrun.
    while ring.fill() < cfg.buffer_frames && !ring.reader_done() && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut engine = Engine::new(cfg, flows);
    let result = engine.run(&ring, stop);
    engine.ticker.finish();
    let mut report = engine.report();
    if let Err(e) = result {
        report.error = Some(format!("{e:#}"));
    }
    Ok(report)
}

/// The format of one of `stripes` horizontal stripes of `format`.
pub fn stripe_format(format: VideoFormat, stripes: usize) -> Result<VideoFormat> {
    if stripes == 0 || stripes > 64 {
        bail!("--stripes {stripes} is out of range: 1..=64");
    }
    if format.height as usize % stripes != 0 {
        bail!(
            "--stripes {stripes} does not divide the frame height {}: pick a divisor of {}",
            format.height,
            format.height
        );
    }
    Ok(VideoFormat::new(
        format.width,
        format.height / stripes as u32,
        format.pixel_format,
    )?)
}

/// Stripe `k` goes to the base port plus `k`.
fn stripe_dest(base: SocketAddr, k: usize) -> Result<SocketAddr> {
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

/// One RTP stream: a socket, its packetizer and its place in the frame.
struct Flow {
    dest: SocketAddr,
    sender: Sender,
    packetizer: Packetizer,
    ext_seq: u32,
    /// Where this flow's stripe starts in the frame.
    data_offset: usize,
    refused: u64,
}

/// The send loop's state: every flow shares one schedule (the stripes of
/// a frame leave together), offset by a fraction of the packet interval
/// per flow so their trains interleave instead of colliding.
struct Engine<'a> {
    cfg: &'a SendConfig,
    flows: Vec<Flow>,
    pacers: Vec<Pacer>,
    offsets: Vec<Duration>,
    origin: Origin,
    gso: bool,
    max_train: usize,
    headers: Vec<u8>,
    header_stride: usize,
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
    lateness: Histogram<u64>,
    frames_sent: u64,
    packets_sent: u64,
    bytes_sent: u64,
    first_send: Option<Instant>,
    last_send: Option<Instant>,
    checksums: Vec<u64>,
    ticker: Ticker,
    window: (u64, Instant),
    /// Frames waiting in the ring when the last frame was taken.
    ring_fill: usize,
}

impl<'a> Engine<'a> {
    fn new(cfg: &'a SendConfig, flows: Vec<Flow>) -> Self {
        let ppf = flows[0].packetizer.packets_per_frame();
        let interval_ns = cfg.rate.frame_start_ns(1) as f64 / ppf as f64;
        let gso = cfg.gso && flows.iter().all(|f| f.sender.gso);
        if cfg.gso && !gso {
            eprintln!(
                "nagare send: note: this kernel has no UDP GSO; sending with sendmmsg (more CPU per Gbit/s)"
            );
        }
        // The schedule starts far enough ahead that the first frame is not
        // late, on the epoch grid shared with other senders.
        let origin = Origin::aligned(cfg.rate, Duration::from_millis(20));
        let pacers: Vec<Pacer> = (0..flows.len())
            .map(|_| Pacer::new(cfg.rate, ppf, origin.first_frame))
            .collect();
        // Packets whose slots fit in the burst window leave together.
        let max_train = pacers[0].max_train(cfg.burst, udp::train_cap(gso, cfg.packet_size));
        let header_stride = (0..ppf)
            .map(|i| flows[0].packetizer.header_len(i))
            .max()
            .unwrap_or(0);
        let n = flows.len();
        let train_ns = interval_ns * max_train as f64;
        Engine {
            cfg,
            pacers,
            offsets: (0..n)
                .map(|k| Duration::from_nanos((train_ns * k as f64 / n as f64) as u64))
                .collect(),
            flows,
            origin,
            gso,
            max_train,
            headers: vec![0; header_stride * max_train],
            header_stride,
            iov: Vec::with_capacity(3 * max_train),
            mmsg: Vec::with_capacity(max_train),
            // 1 ns to 100 s at 3 significant digits: the bounds are constants.
            lateness: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("constant histogram bounds are valid"),
            frames_sent: 0,
            packets_sent: 0,
            bytes_sent: 0,
            first_send: None,
            last_send: None,
            checksums: Vec::new(),
            ticker: Ticker::new(cfg.quiet),
            window: (0, Instant::now()),
            ring_fill: 0,
        }
    }

    fn run(&mut self, ring: &FrameRing, stop: &AtomicBool) -> Result<()> {
        loop {
            if stop.load(Ordering::Relaxed)
                || self.cfg.frames.is_some_and(|n| self.frames_sent >= n)
            {
                return Ok(());
            }
            wait_until(self.origin.at(self.pacers[0].next_release()));
            let frame = match ring.full.try_recv() {
                Ok(Slot::Frame(f)) => f,
                Ok(Slot::Failed(e)) => bail!("{e}"),
                Err(TryRecvError::Empty) if !ring.reader_done() => {
                    // Underrun: give up this frame's slot rather than shift
                    // the schedule; the receiver sees one frame missing.
                    self.pacers.iter_mut().for_each(Pacer::skip_frame);
                    continue;
                }
                Err(_) => {
                    // The reader may have finished right after try_recv.
                    match ring.full.try_recv() {
                        Ok(Slot::Frame(f)) => f,
                        Ok(Slot::Failed(e)) => bail!("{e}"),
                        Err(_) => return Ok(()),
                    }
                }
            };
            self.send_frame(&frame, stop)?;
            if self.cfg.checksums {
                self.checksums.push(xxhash_rust::xxh3::xxh3_64(&frame.data));
            }
            let _ = ring.empty.try_send(frame.data);
            self.frames_sent += 1;
            self.ring_fill = ring.fill();
            self.progress();
        }
    }

    /// Sends every flow's share of one frame, earliest train first.
    fn send_frame(&mut self, frame: &FrameBuf, stop: &AtomicBool) -> Result<()> {
        let ppf = self.pacers[0].packets_per_frame() as usize;
        let epoch_frame = self.pacers[0].frame();
        let ts = self.cfg.rate.rtp_timestamp(epoch_frame);
        let mut sent = vec![0usize; self.flows.len()];
        loop {
            let Some(k) = (0..self.flows.len())
                .filter(|&k| sent[k] < ppf)
                .min_by_key(|&k| self.pacers[k].next_release() + self.offsets[k])
            else {
                return Ok(());
            };
            let release = self
                .origin
                .at(self.pacers[k].next_release() + self.offsets[k]);
            wait_until(release);
            let now_i = Instant::now();
            // Each flow's pacer runs on its own offset clock.
            let now = self.origin.since(now_i).saturating_sub(self.offsets[k]);
            let n = self.pacers[k]
                .due(now, self.max_train, self.cfg.burst)
                .max(1);
            let late = self.pacers[k].lateness(now).as_nanos() as u64;
            self.lateness.saturating_record(late.max(1));
            self.transmit(k, &frame.data, sent[k], n, ts)?;
            self.pacers[k].sent(now, n);
            sent[k] += n;
            self.first_send.get_or_insert(now_i);
            self.last_send = Some(now_i);
            if self.ticker.due(now_i) {
                self.progress_line(now_i);
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    /// Sends packets `start..start + n` of flow `k`'s stripe as one train.
    fn transmit(&mut self, k: usize, frame: &[u8], start: usize, n: usize, ts: u32) -> Result<()> {
        let flow = &mut self.flows[k];
        let stripe =
            &frame[flow.data_offset..flow.data_offset + flow.packetizer.format().frame_bytes()];
        self.iov.clear();
        let mut bytes = 0usize;
        let mut uniform = true;
        for j in 0..n {
            let i = start + j;
            let hdr = &mut self.headers[j * self.header_stride..(j + 1) * self.header_stride];
            let h =
                flow.packetizer
                    .write_header(i, flow.ext_seq.wrapping_add(j as u32), ts, hdr)?;
            let data = &stripe[flow.packetizer.data_range(i)];
            let pad = flow.packetizer.padding(i);
            self.iov.push(iovec(&hdr[..h]));
            self.iov.push(iovec(data));
            self.iov.push(iovec(pad));
            let len = h + data.len() + pad.len();
            bytes += len;
            if j + 1 < n && len != self.cfg.packet_size {
                uniform = false;
            }
        }
        let segment = (n > 1 && uniform).then_some(self.cfg.packet_size);
        let sent = flow
            .sender
            .send_train(&self.iov, 3, segment, &mut self.gso, &mut self.mmsg);
        match sent {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                if flow.refused == 0 {
                    eprintln!(
                        "nagare send: note: {} refused packets (nothing listening there yet); still sending",
                        flow.dest
                    );
                }
                flow.refused += n as u64;
            }
            Err(e) => return Err(e).with_context(|| format!("sending to {}", flow.dest)),
        }
        flow.ext_seq = flow.ext_seq.wrapping_add(n as u32);
        self.packets_sent += n as u64;
        self.bytes_sent += bytes as u64;
        Ok(())
    }

    fn progress(&mut self) {
        let now = Instant::now();
        if self.ticker.due(now) {
            self.progress_line(now);
        }
    }

    fn stats(&self) -> PacingStats {
        let mut total = PacingStats::default();
        for p in &self.pacers {
            let s = p.stats();
            total.packets += s.packets;
            total.late += s.late;
            total.max_late_ns = total.max_late_ns.max(s.max_late_ns);
        }
        // Underruns are per frame, shared by every flow.
        total.skipped_frames = self.pacers[0].stats().skipped_frames;
        total
    }

    fn progress_line(&mut self, now: Instant) {
        let fill = self.ring_fill;
        let (bytes0, t0) = self.window;
        let secs = now.duration_since(t0).as_secs_f64().max(1e-9);
        let rate = (self.bytes_sent - bytes0) as f64 * 8.0 / secs;
        self.window = (self.bytes_sent, now);
        let st = self.stats();
        let total = self.cfg.frames.map_or(String::new(), |n| format!("/{n}"));
        self.ticker.print(&format!(
            "send: {}  frames {}{total}  ring {fill}/{}  late {}  underruns {}",
            bitrate(rate),
            self.frames_sent,
            self.cfg.buffer_frames,
            st.late,
            st.skipped_frames
        ));
    }

    fn report(&self) -> SendReport {
        let st = self.stats();
        let seconds = match (self.first_send, self.last_send) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let us = |q: f64| self.lateness.value_at_quantile(q) as f64 / 1000.0;
        SendReport {
            frames_sent: self.frames_sent,
            packets_sent: self.packets_sent,
            bytes_sent: self.bytes_sent,
            seconds,
            rate_bps: if seconds > 0.0 {
                self.bytes_sent as f64 * 8.0 / seconds
            } else {
                0.0
            },
            packets_per_frame: self.flows[0].packetizer.packets_per_frame() as u64,
            packets_late: st.late,
            lateness_us: Lateness {
                p50: us(0.5),
                p99: us(0.99),
                p999: us(0.999),
                max: self.lateness.max() as f64 / 1000.0,
            },
            underruns: st.skipped_frames,
            refused: self.flows.iter().map(|f| f.refused).sum(),
            gso: self.gso,
            first_frame: self.origin.first_frame,
            ssrc: self.flows[0].packetizer.ssrc(),
            stripes: self.flows.len(),
            error: None,
            checksums: self.checksums.clone(),
        }
    }
}

/// Prints the human summary of a send.
pub fn print_summary(r: &SendReport) {
    eprintln!(
        "send: {} frames, {} packets ({} per frame), {} in {:.2} s; late packets {}, underruns {}, \
         lateness p50 {:.1} µs p99 {:.1} µs max {:.1} µs; {}",
        r.frames_sent,
        r.packets_sent,
        r.packets_per_frame,
        bitrate(r.rate_bps),
        r.seconds,
        r.packets_late,
        r.underruns,
        r.lateness_us.p50,
        r.lateness_us.p99,
        r.lateness_us.max,
        if r.gso { "UDP GSO" } else { "sendmmsg" }
    );
    if let Some(e) = &r.error {
        eprintln!("send: stopped early: {e}");
    }
}

/// `nagare send`.
pub fn main(args: SendArgs) -> Result<std::process::ExitCode> {
    let cfg = args.config()?;
    let stop = crate::stop_flag();
    let report = run(&cfg, stop)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(if report.error.is_some() {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}
