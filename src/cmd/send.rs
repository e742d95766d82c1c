//! `nagare send`: its flags, checked into a [`SendConfig`], and the exit
//! status. The sending itself (reader thread, frame ring, the paced
//! `video::Sender` schedule, GSO trains) is [`crate::engine::send`], which
//! `demo` runs too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use nagare_api::video::SendReport;
use nagare_proto::sdp::PtpClock;
use nagare_proto::video::st2110_20::{DEFAULT_PACKET_SIZE, Packetizer};
use nagare_proto::video::st2110_21::SenderType;
use nagare_proto::video::stripe::Rule;
use nagare_proto::{FrameRate, PixelFormat, Ssrc};

use crate::cli::{self, Size};
use crate::clock::Pacing;
use crate::engine::send::{SendConfig, Striping, print_summary, run, shaping, stripe_dest};
use crate::net::placement::CpuChoice;
use crate::net::tuning::Realtime;
use crate::net::udp::{self, Interface, SendOptions};

/// Command-line arguments of `nagare send`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SendArgs {
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
    /// Stop after N frames (0: write the --sdp files and send nothing).
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
    /// The PTP grandmaster and domain this host's clock follows, for the
    /// SDP's ts-refclk (GMID:DOMAIN, like 39-A7-94-FF-FE-07-CB-D0:0);
    /// without it the SDP names the sending interface's MAC (localmac).
    #[arg(long, value_name = "GMID:DOMAIN")]
    pub ptp: Option<PtpClock>,
    /// Frames read ahead into the ring between reader and sender.
    #[arg(long, default_value_t = 8)]
    pub buffer_frames: usize,
    /// ST 2110-21 sender type to keep to (and declare in the SDP): n
    /// (narrow, gapped over the active lines), nl (narrow linear) or w
    /// (wide: trains of up to CMAX_W packets).
    #[arg(long = "tp", default_value = "w", value_parser = cli::parse_sender_type)]
    pub sender_type: SenderType,
    /// ST 2110-21 TRoffset, declared in the SDP as TROFF: 'auto' gives a
    /// wide (W) sender the offset that lets it lead the receiver's reads
    /// by half of VRX_FULL from each frame's first packet (about 1.8 ms
    /// at 1080p59.94, so a host stall of 1.5 ms costs no compliance; N
    /// and NL keep TROdefault); 'default' keeps TROdefault (637 µs at
    /// 1080p59.94) for receivers that ignore TROFF; a number is
    /// microseconds.
    #[arg(long, default_value = "auto", value_name = "auto|default|MICROS", value_parser = cli::parse_tr_offset)]
    pub tr_offset: cli::TrOffsetChoice,
    /// Packets per train, sent back to back (default: half the longest
    /// train the sender type allows, leaving room for wake-up jitter).
    #[arg(long)]
    pub train: Option<u64>,
    /// precise: sleep then spin to each train's slot (a few µs late at
    /// most, more CPU); efficient: sleep only, with longer trains for W
    /// (three quarters of CMAX instead of half: fewer wake-ups; tens of
    /// µs late, within ST 2110-21's wide sender, a fraction of the CPU).
    #[arg(long, value_enum, default_value_t = Pacing::Precise)]
    pub pacing: Pacing,
    /// Send packet by packet (sendmmsg) even where UDP GSO is available.
    /// Use it to capture the stream on this host (tcpdump, Wireshark):
    /// with GSO a capture on lo sees one super-datagram per train, and a
    /// dissector then reports most packets lost.
    #[arg(long)]
    pub no_gso: bool,
    /// Split each frame into N stripes (see --split), each its own RTP
    /// stream to the next port (PORT, PORT+1, ...) with its own SDP, like
    /// the 8 nodes of the 8K stream server paper (README [1]) each sending one stripe; all stripes share one
    /// schedule and RTP timestamp.
    #[arg(long, default_value_t = 1)]
    pub stripes: usize,
    /// How a frame is split into --stripes: lines (horizontal bands),
    /// square (quadrants, then bands) or 2si (the quad-link two-sample
    /// interleave, then bands: 8 stripes are each 2SI sub-image in 2).
    #[arg(long, default_value = "lines", value_parser = cli::parse_split)]
    pub split: Rule,
    /// Send only stripe K of the --stripes (what one cluster node does);
    /// --to is then that stripe's own destination and --sdp its own file.
    #[arg(long, value_name = "K")]
    pub stripe: Option<usize>,
    /// Fix the SSRC (stripe k gets N+k) and number packets from the epoch
    /// frame, and start the input at the epoch frame too: two senders given
    /// the same N send identical packets, the two legs of an ST 2022-7
    /// stream (needs a looping or pattern input for the latter).
    #[arg(long, value_name = "N")]
    pub ssrc: Option<u32>,
    /// Read the input file with O_DIRECT (bypassing the page cache); the
    /// frame size must be a multiple of 4096 bytes.
    #[arg(long)]
    pub direct: bool,
    /// The sending (pacing) thread's CPU: 'auto' gives it the highest CPU
    /// this process may use and keeps the reader off it (docs/pacing.md);
    /// a number pins it there; 'none' places nothing.
    #[arg(long, default_value = "auto", value_name = "CPU|auto|none")]
    pub cpu: CpuChoice,
    /// Insist on real-time (SCHED_FIFO) pacing, failing without root or
    /// CAP_SYS_NICE. By default the pacer runs SCHED_FIFO wherever that
    /// is allowed and safe, and says so once when it is not.
    #[arg(long, conflicts_with = "no_realtime")]
    pub realtime: bool,
    /// Pace at normal priority even where real-time is allowed.
    #[arg(long)]
    pub no_realtime: bool,
    /// Sleep this long before each frame read (simulates slow storage).
    #[arg(long, hide = true, default_value_t = 0)]
    pub read_delay_ms: u64,
    /// Send no RTCP: no sender reports (RTP/wall-clock mapping, counts)
    /// to the RTP port + 1 (+ the stripe count with stripes), no BYE at
    /// the end, and no receiver reports read.
    #[arg(long)]
    pub no_rtcp: bool,
    /// Print statistics as JSON on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

impl SendArgs {
    /// Validates the arguments.
    pub(crate) fn config(&self) -> Result<SendConfig> {
        let format = cli::video_format(self.size, self.pix_fmt)?;
        let rate = self.fps;
        let dest = udp::parse_addr(&self.to, "destination")?;
        if dest.port() == 0 {
            bail!("destination {dest} has port 0: give the receiver's port");
        }
        check_multicast_scope(dest, self.interface.as_ref(), self.ttl)?;
        let striping = Striping {
            split: self.split,
            only: self.stripe,
            ssrc: self.ssrc,
        };
        let stripe = cli::stripes_of(format, self.stripes, self.split)?.stripe_format();
        if let Some(k) = self.stripe
            && k >= self.stripes
        {
            bail!(
                "--stripe {k} is not one of --stripes {}: give 0..={}",
                self.stripes,
                self.stripes - 1
            );
        }
        if self.stripe.is_none() {
            stripe_dest(dest, self.stripes - 1)?;
        }
        let packetizer = Packetizer::new(stripe, self.packet_size, Ssrc(0))
            .map_err(|e| anyhow!("--packet-size {}: {e}", self.packet_size))?;
        shaping(
            format,
            rate,
            (packetizer.packets_per_frame(), self.packet_size),
            (self.sender_type, self.pacing),
            self.train,
            self.tr_offset,
        )?;
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
            ptp: self.ptp,
            buffer_frames: self.buffer_frames,
            sender_type: self.sender_type,
            train: self.train,
            tr_offset: self.tr_offset,
            pacing: self.pacing,
            gso: !self.no_gso,
            read_delay: Duration::from_millis(self.read_delay_ms),
            checksums: false,
            quiet: self.json,
            cpu: self.cpu,
            realtime: Realtime::from_flags(self.realtime, self.no_realtime),
            stripes: self.stripes,
            striping,
            direct: self.direct,
            rtcp: !self.no_rtcp,
        })
    }
}

/// Refuses multicast without a named interface: the kernel would send
/// it out of the default route, and gigabits of video flooding a shared
/// (management) LAN is the classic way to take one down. `--ttl 0` keeps
/// the stream on this host, so it needs no interface.
fn check_multicast_scope(
    dest: SocketAddr,
    interface: Option<&Interface>,
    ttl: Option<u32>,
) -> Result<()> {
    if dest.ip().is_multicast() && interface.is_none() && ttl != Some(0) {
        bail!(
            "sending to multicast group {} needs --interface NAME|ADDRESS: without it the \
             stream leaves by the default route, and gigabits of multicast there can flood every \
             port of a shared LAN; name the interface meant for media (see `ip -br addr`), or \
             add --ttl 0 to keep the stream on this host",
            dest.ip()
        );
    }
    Ok(())
}

/// `nagare send`.
pub(crate) fn main(args: SendArgs) -> Result<std::process::ExitCode> {
    let cfg = args.config()?;
    let stop = crate::signal::stop_flag();
    let report = run(&cfg, stop)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    let refused = mostly_refused(&report);
    if let Some(why) = &refused {
        eprintln!("nagare send: {why}");
    }
    Ok(if report.error.is_some() || refused.is_some() {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Why a send failed for want of a receiver (see
/// [`crate::engine::send::REFUSED_TAIL`]).
fn mostly_refused(r: &SendReport) -> Option<String> {
    let tried = r.packets_sent + r.refused;
    r.nobody_listened.then(|| {
        format!(
            "{} of {tried} packets were refused, from the start to the end (nothing listens \
             at the destination): start the receiver first; to write only the SDP, send \
             --frames 0",
            r.refused
        )
    })
}
