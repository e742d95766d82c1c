//! `nagare send`: frames from a file, a directory or the test pattern,
//! read ahead on a reader thread, and sent as nagare-proto's
//! `video::Sender` schedules them. This driver only moves bytes and time:
//! it answers the schedule's frame requests from the ring, gathers each
//! train's headers, frame slices and padding into one GSO send (or
//! `sendmmsg`), waits for the next deadline and prints progress.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::TryRecvError;
use nagare_api::video::SendReport;
use nagare_proto::sdp::SdpStream;
use nagare_proto::video::sender::{self as schedule, Event, FlowId, FlowSpec, Input, Transmit};
use nagare_proto::video::st2110_20::{DEFAULT_PACKET_SIZE, Packetizer};
use nagare_proto::{BitRate, ByteSize, ExtSeq, FrameRate, Nanos, PixelFormat, Ssrc, VideoFormat};

use crate::cli::{self, Size};
use crate::clock::{Origin, wait_until};
use crate::net::file::AlignedBuf;
use crate::net::udp::{self, Interface, SendOptions, Sender, iovec};
use crate::progress::{Ticker, bitrate};
use crate::source::{FrameRing, Slot, Source};
/// Command-line arguments of `nagare send`.
#[derive(clap::Args, Debug, Clone)]
pub struct SendArgs {
    /// Raw video file (frames back to back), a directory with one file per
    /// frame (sorted by name), pattern:bars for a moving test pattern, or
    /// `-` (or a pipe such as /dev/stdin) to read frames as they come
    /// (`ffmpeg ... -f rawvideo - | nagare send - ...`).
    pub input: String,
    /// Destination HOST:PORT (unicast or multicast group; IPv4 or IPv6).
    #[arg(long)]
    pub to: String,
    /// Frame size WIDTHxHEIGHT.
    #[arg(long, value_parser = cli::parse_size)]
    pub size: Size,
    /// Pixel format: uyvy422 (8-bit 4:2:2), uyvp (10-bit 4:2:2), rgb24.
    #[arg(long = "pix-fmt", value_parser = cli::parse_pix_fmt)]
    pub pix_fmt: PixelFormat,
    /// Frame rate: 30, 60000/1001 or 29.97.
    #[arg(long, value_parser = cli::parse_rate)]
    pub fps: FrameRate,
    /// UDP payload bytes per packet (up to 8960 for jumbo frames).
    #[arg(long, default_value_t = DEFAULT_PACKET_SIZE, value_parser = cli::parse_packet_size)]
    pub packet_size: usize,
    /// Stop after N frames.
    #[arg(long)]
    pub frames: Option<u64>,
    /// Play the input again and again (until --frames or Ctrl-C).
    #[arg(long = "loop")]
    pub looping: bool,
    /// Multicast interface, by address (127.0.0.1) or name (lo).
    #[arg(long, value_parser = cli::parse_interface)]
    pub interface: Option<Interface>,
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
    /// Use it to capture the stream on this host (tcpdump, Wireshark):
    /// with GSO a capture on lo sees one super-datagram per train, and a
    /// dissector then reports most packets lost.
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
        let format = cli::video_format(self.size, self.pix_fmt)?;
        let rate = self.fps;
        let dest = udp::parse_addr(&self.to, "destination")?;
        if dest.port() == 0 {
            bail!("destination {dest} has port 0: give the receiver's port");
        }
        let stripe = stripe_format(format, self.stripes)?;
        stripe_dest(dest, self.stripes - 1)?;
        Packetizer::new(stripe, self.packet_size, Ssrc(0))
            .map_err(|e| anyhow!("--packet-size {}: {e}", self.packet_size))?;
        let interface = self.interface.clone();
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
    let mut driver = Driver::new(cfg, sockets)?;
    let result = driver.run(&ring, stop);
    driver.ticker.finish();
    let mut report = driver.report();
    if let Err(e) = result {
        report.error = Some(format!("{e:#}"));
    }
    Ok(report)
}

/// One socket per stripe (writing each stripe's SDP next to it).
fn open_sockets(cfg: &SendConfig) -> Result<Vec<Flow>> {
    let format = stripe_format(cfg.format, cfg.stripes)?;
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
            write_sdp(cfg, format, dest, &sender, &path)?;
        }
        flows.push(Flow {
            dest,
            sender,
            data: k * format.frame_bytes()..(k + 1) * format.frame_bytes(),
            refused: 0,
        });
    }
    Ok(flows)
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

/// One RTP stream's socket and its stripe of the frame.
struct Flow {
    dest: SocketAddr,
    sender: Sender,
    /// Where this flow's stripe lies in the frame.
    data: std::ops::Range<usize>,
    refused: u64,
}

/// A frame taken from the ring for every flow, or a slot given up.
struct Held {
    frame: u64,
    /// `None` for an underrun.
    data: Option<AlignedBuf>,
    /// Flows that still need it.
    users: usize,
}

/// What the ring had when asked.
enum Take {
    Frame(AlignedBuf),
    Empty,
    End,
}

/// Buffers for gathering one train: headers back to back, and the iovecs
/// and message headers pointing into them and into the frame.
struct TrainIo {
    gso: bool,
    headers: Vec<u8>,
    header_stride: usize,
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
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
    pending: VecDeque<(FlowId, u64, Nanos)>,
    finished: usize,
    io: TrainIo,
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

impl<'a> Driver<'a> {
    fn new(cfg: &'a SendConfig, flows: Vec<Flow>) -> Result<Self> {
        let gso = cfg.gso && flows.iter().all(|f| f.sender.gso);
        if cfg.gso && !gso {
            eprintln!(
                "nagare send: note: this kernel has no UDP GSO; sending with sendmmsg (more CPU per Gbit/s)"
            );
        }
        // The schedule starts far enough ahead that the first frame is not
        // late, on the epoch grid shared with other senders.
        let origin = Origin::now();
        let start = origin.epoch_start(cfg.rate, Duration::from_millis(20));
        let format = stripe_format(cfg.format, cfg.stripes)?;
        let cap = udp::train_cap(gso, cfg.packet_size);
        let mut sched = schedule::Sender::new();
        let mut ids = Vec::with_capacity(flows.len());
        for k in 0..flows.len() {
            let packetizer = Packetizer::new(format, cfg.packet_size, Ssrc(random_u32()?))?;
            let spec = FlowSpec::video(cfg.rate, packetizer.uniform())
                .start(start.at, start.first_frame)
                .first_seq(ExtSeq(u64::from(random_u32()?)))
                .trains(Nanos::from(cfg.burst), cap)
                .stripe(k, flows.len())
                .frame_limit(cfg.frames);
            ids.push(sched.add_flow(spec));
        }
        let max_train = sched.max_train(ids[0]).unwrap_or(1);
        let packetizer = sched
            .packetizer(ids[0])
            .context("a video flow has a packetizer")?;
        let header_stride = (0..packetizer.packets_per_frame())
            .map(|i| packetizer.header_len(i))
            .max()
            .unwrap_or(0);
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
                headers: vec![0; header_stride * max_train],
                header_stride,
                iov: Vec::with_capacity(3 * max_train),
                mmsg: Vec::with_capacity(max_train),
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
        })
    }

    /// Sends until every flow finished, the input ended, or `stop`.
    fn run(&mut self, ring: &FrameRing, stop: &AtomicBool) -> Result<()> {
        let mut ended = false;
        while !stop.load(Ordering::Relaxed) {
            self.events(ring);
            if self.finished == self.flows.len() {
                return Ok(());
            }
            let now = self.origin.elapsed();
            // At the end of the input, trains of frames in hand still go;
            // requests for more go unanswered.
            ended = ended || !self.answer(ring, now)?;
            if ended {
                self.pending.clear();
            }
            if let Some(t) = self.schedule.poll_transmit(now) {
                self.transmit(&t)?;
                self.progress();
                continue;
            }
            let due = self.schedule.poll_timeout();
            let need = self.pending.iter().map(|p| p.2).min();
            match due.into_iter().chain(need).min() {
                Some(at) => wait_until(self.origin.instant(at)),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Takes the schedule's events: frame requests wait in `pending`, a
    /// frame every flow has sent goes back to the ring.
    fn events(&mut self, ring: &FrameRing) {
        while let Some(e) = self.schedule.poll_event() {
            match e {
                Event::NeedFrame { flow, frame, at } => self.pending.push_back((flow, frame, at)),
                Event::FrameSent { frame, .. } => self.release(frame, ring),
                Event::Finished { .. } => self.finished += 1,
            }
        }
    }

    /// Answers frame requests in order; an empty ring becomes an underrun
    /// once the frame is due (the schedule never shifts). Returns false at
    /// the end of the input.
    fn answer(&mut self, ring: &FrameRing, now: Nanos) -> Result<bool> {
        while let Some(&(flow, frame, at)) = self.pending.front() {
            let have = match self.held.iter().find(|h| h.frame == frame) {
                Some(h) => h.data.is_some(),
                None => {
                    let data = match take(ring)? {
                        Take::Frame(f) => Some(f),
                        Take::Empty if now < at => return Ok(true),
                        Take::Empty => None,
                        Take::End => return Ok(false),
                    };
                    self.ring_fill = ring.fill();
                    let users = self.flows.len();
                    let have = data.is_some();
                    self.held.push_back(Held { frame, data, users });
                    have
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

    /// One flow is done with `frame`; the last one hands it back.
    fn release(&mut self, frame: u64, ring: &FrameRing) {
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
            if self.cfg.checksums {
                self.checksums.push(xxhash_rust::xxh3::xxh3_64(&data));
            }
            self.frames_sent += 1;
            let _ = ring.empty.try_send(data);
        }
    }

    /// Sends one train: headers, frame slices and padding gathered into
    /// one GSO send (or sendmmsg).
    fn transmit(&mut self, t: &Transmit) -> Result<()> {
        let held = self.held.iter().find(|h| h.frame == t.frame);
        let frame = held
            .and_then(|h| h.data.as_deref())
            .context("a train of a frame not held")?;
        let flow = &mut self.flows[t.flow.index()];
        let p = self
            .schedule
            .packetizer(t.flow)
            .context("a video flow has a packetizer")?;
        let stripe = &frame[flow.data.clone()];
        let io = &mut self.io;
        io.iov.clear();
        let (mut bytes, mut uniform) = (0usize, true);
        for (j, chunk) in io
            .headers
            .chunks_exact_mut(io.header_stride)
            .take(t.len())
            .enumerate()
        {
            let i = t.packets.start + j;
            let h = self.schedule.write_header(t, j, chunk)?;
            let (data, pad) = (&stripe[p.data_range(i)], p.padding(i));
            io.iov.extend([iovec(&chunk[..h]), iovec(data), iovec(pad)]);
            let len = h + data.len() + pad.len();
            bytes += len;
            uniform &= j + 1 == t.len() || len == self.cfg.packet_size;
        }
        let segment = (t.len() > 1 && uniform).then_some(self.cfg.packet_size);
        match flow
            .sender
            .send_train(&io.iov, 3, segment, &mut io.gso, &mut io.mmsg)
        {
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
                return Ok(());
            }
            Err(e) => return Err(e).with_context(|| format!("sending to {}", flow.dest)),
        }
        let now = Instant::now();
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

    /// Late packets and underruns over every flow (underruns are per frame
    /// slot, which the stripes share).
    fn late_and_underruns(&self) -> (u64, u64) {
        let stats = self
            .ids
            .iter()
            .filter_map(|id| self.schedule.flow_stats(*id));
        stats.fold((0, 0), |(late, under), s| {
            (late + s.late, under.max(s.underruns))
        })
    }

    fn progress_line(&mut self, now: Instant) {
        let (bytes0, t0) = self.window;
        let secs = now.duration_since(t0).as_secs_f64().max(1e-9);
        let rate = (self.bytes_sent - bytes0) as f64 * 8.0 / secs;
        self.window = (self.bytes_sent, now);
        let (late, underruns) = self.late_and_underruns();
        let total = self.cfg.frames.map_or(String::new(), |n| format!("/{n}"));
        self.ticker.print(&format!(
            "send: {}  frames {}{total}  ring {}/{}  late {late}  underruns {underruns}",
            bitrate(rate),
            self.frames_sent,
            self.ring_fill,
            self.cfg.buffer_frames,
        ));
    }

    fn report(&self) -> SendReport {
        let (late, underruns) = self.late_and_underruns();
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
            refused: self.flows.iter().map(|f| f.refused).sum(),
            gso: self.io.gso,
            first_frame: self.first_frame,
            ssrc: p.map_or(Ssrc(0), Packetizer::ssrc),
            stripes: self.flows.len(),
            error: None,
            checksums: self.checksums.clone(),
        }
    }
}

/// The next frame from the ring, without waiting.
fn take(ring: &FrameRing) -> Result<Take> {
    match ring.full.try_recv() {
        Ok(Slot::Frame(f)) => Ok(Take::Frame(f.data)),
        Ok(Slot::Failed(e)) => bail!("{e}"),
        Err(TryRecvError::Empty) if !ring.reader_done() => Ok(Take::Empty),
        // The reader may have finished right after try_recv.
        Err(_) => match ring.full.try_recv() {
            Ok(Slot::Frame(f)) => Ok(Take::Frame(f.data)),
            Ok(Slot::Failed(e)) => bail!("{e}"),
            Err(_) => Ok(Take::End),
        },
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
        bitrate(r.rate_bps.as_f64()),
        r.seconds,
        r.packets_late,
        r.underruns,
        r.lateness_us.p50,
        r.lateness_us.p99,
        r.lateness_us.max,
        if r.gso { "UDP GSO" } else { "sendmmsg" }
    );
    if r.refused > 0 {
        eprintln!(
            "send: {} packets refused by the kernel and not sent: nothing was listening at the \
             destination (ICMP port unreachable); start the receiver first",
            r.refused
        );
    }
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
