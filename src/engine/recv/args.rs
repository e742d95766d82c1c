//! The flags of `nagare recv` and the configuration they make: one
//! stream (`single`) or stripes and ST 2022-7 legs (`stripes`). A leaf
//! both receive paths read.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::Nanos;
use nagare_proto::sdp::{SdpStream, Session};
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::video::st2110_21::{Scan, SenderType, StreamShape};
use nagare_proto::{FrameRate, PixelFormat, VideoFormat};

use crate::cli::{self, Size};
use crate::net::placement::CpuChoice;
use crate::net::udp::{self, Interface, ReceiveOptions};
use nagare_proto::video::stripe::Rule;

use super::recording::{Plan, Segmenting};

/// Command-line arguments of `nagare recv`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RecvArgs {
    /// Address to listen on, HOST:PORT (a multicast group joins it).
    #[arg(long, conflicts_with = "sdp", required_unless_present_any = ["sdp", "cluster", "nmos"])]
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
    /// Take address, port and format from an SDP file (nagare's or FFmpeg's);
    /// several (one per stripe) with --split, one with a=group:DUP for
    /// two legs.
    #[arg(long)]
    pub sdp: Vec<PathBuf>,
    /// Multicast interface, by address (127.0.0.1) or name (lo).
    #[arg(long, value_parser = cli::parse_interface)]
    pub interface: Option<Interface>,
    /// Only a stream from this address is recorded: the source of
    /// source-specific multicast, or a filter on a unicast port (an SDP's
    /// source filter does the same).
    #[arg(long)]
    pub source: Option<String>,
    /// When a new sender (SSRC) takes over after the stream went silent,
    /// record it as a new take instead of stopping with an error.
    #[arg(long)]
    pub follow_ssrc: bool,
    /// Record frames to this raw file; `-` writes them to standard output
    /// (`nagare recv -o - | ffmpeg -f rawvideo ... -i -`).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Append to the output file instead of replacing it (a partial frame
    /// at its end, left by a crash, is cut first).
    #[arg(long, requires = "output")]
    pub append: bool,
    /// Split the recording into files of N frames each, named with a
    /// counter (copy-000000.uyvy, copy-000001.uyvy, ...); each is renamed
    /// into place from NAME.part once complete.
    #[arg(long, requires = "output", conflicts_with_all = ["append", "segment_seconds"])]
    pub segment_frames: Option<u64>,
    /// Split the recording into files of about this many seconds each
    /// (a new file at the first frame after), named as with --segment-frames.
    #[arg(long, requires = "output", conflicts_with = "append", value_parser = cli::parse_seconds)]
    pub segment_seconds: Option<Duration>,
    /// Write the recording with O_DIRECT, past the page cache: at 8K rates
    /// (2.5 GB/s) copying into the page cache and reclaiming it costs
    /// most of a core. Needs a filesystem that takes O_DIRECT (ext4, xfs;
    /// tmpfs only since Linux 6.6, and gains nothing there) and a file
    /// (not -o -).
    #[arg(long, requires = "output", conflicts_with = "append")]
    pub direct: bool,
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
    /// The receiving thread's CPU (with --stripes, every receive thread's):
    /// 'auto' puts receive threads on the lowest CPUs and keeps every
    /// thread off the highest, which a sender takes (docs/pacing.md); a
    /// number pins them there; 'none' places nothing.
    #[arg(long, default_value = "auto", value_name = "CPU|auto|none")]
    pub cpu: CpuChoice,
    /// Run the receiving thread with real-time (SCHED_FIFO) priority;
    /// needs root or CAP_SYS_NICE.
    #[arg(long)]
    pub realtime: bool,
    /// Analyse the stream's ST 2110-21 timing too (Cinst, VRX, FPT, RTP
    /// offset, verdict; see `nagare analyze`), from kernel receive stamps.
    #[arg(long)]
    pub analyze: bool,
    /// The TRoffset the sender declares (its SDP's TROFF, microseconds),
    /// for --analyze without --sdp: a wide nagare sender declares one
    /// (see `send --tr-offset`), and judged from TROdefault its stream
    /// seems to have less room for a stall than it has.
    #[arg(long, value_name = "MICROS")]
    pub tr_offset: Option<u64>,
    /// Also bind the RTP port + 1, read the sender's RTCP reports there
    /// and answer them with receiver reports (loss, jitter). Not by
    /// default: receivers of consecutive ports (one per stripe) would
    /// each take the next one's port.
    #[arg(long)]
    pub rtcp: bool,
    /// Print statistics as JSON on stdout at the end.
    #[arg(long)]
    pub json: bool,
    /// Stripes and ST 2022-7 legs (see `stripes`).
    #[command(flatten)]
    pub striping: StripeArgs,
    /// Be an NMOS node with one receiver: serve the IS-04 Node API and
    /// the IS-05 Connection API on --nmos-http, and receive what a
    /// controller's activation connects it to (docs/nmos.md).
    #[arg(long, conflicts_with_all = ["listen", "sdp", "stripes", "dup", "cluster"])]
    pub nmos: bool,
    /// Where --nmos serves its APIs (`:8081` is every interface, and
    /// needs --token; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = cli::parse_listen_address, value_name = "ADDR:PORT")]
    pub nmos_http: SocketAddr,
    /// The --nmos receiver's legs: 2 is an ST 2022-7 pair (two
    /// transport_params entries; a transport file with a=group:DUP fills
    /// both, and the legs are merged as with --dup).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2), value_name = "1|2", requires = "nmos")]
    pub nmos_legs: u8,
    /// Token of the --nmos APIs (or NAGARE_TOKEN): required when
    /// --nmos-http is not loopback; controllers send 'Authorization:
    /// Bearer TOKEN'.
    #[arg(long, requires = "nmos")]
    pub token: Option<String>,
    /// NMOS registration and the node id's state directory (with --nmos).
    #[command(flatten)]
    pub registration: crate::nmos::register::RegistrationArgs,
}

/// The ST 2110-21 analysis of a receive run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnalyzeSpec {
    /// What is known of the stream.
    pub shape: StreamShape,
    /// The sender type to hold it to.
    pub declared: Option<SenderType>,
    /// Print a line per second on stderr.
    pub print_seconds: bool,
}

/// A validated receiver configuration.
#[derive(Debug, Clone)]
pub(crate) struct RecvConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Frame format.
    pub format: VideoFormat,
    /// Frame rate if known.
    pub rate: Option<FrameRate>,
    /// Socket options.
    pub socket: ReceiveOptions,
    /// The multicast TTL the SDP's `c=` line names, for RTCP to the
    /// group (`--rtcp`).
    pub ttl: Option<u8>,
    /// Where the SDP's `a=rtcp` (RFC 3605) puts the stream's RTCP
    /// (`--rtcp`); `None`: the RTP port + 1.
    pub rtcp: Option<SocketAddr>,
    /// Only datagrams from here can be the stream.
    pub source_filter: Option<IpAddr>,
    /// Follow a takeover as a new take.
    pub follow_ssrc: bool,
    /// Recording path.
    pub output: Option<PathBuf>,
    /// Append to the recording.
    pub append: bool,
    /// Split the recording into segment files.
    pub segmenting: Segmenting,
    /// Write the recording with O_DIRECT.
    pub direct: bool,
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
    /// Analyse the stream's ST 2110-21 timing.
    pub analyze: Option<AnalyzeSpec>,
}

/// What the stream is: where it arrives, its format, its rate if known,
/// the only sender taken, and the sender type its SDP declares.
struct Stream {
    listen: SocketAddr,
    format: VideoFormat,
    rate: Option<FrameRate>,
    source: Option<IpAddr>,
    declared: Option<SenderType>,
    /// The SDP's `TROFF`.
    tr_offset: Option<Nanos>,
    /// The SDP's `MAXUDP`.
    max_udp: Option<u32>,
    /// The SDP's multicast TTL.
    ttl: Option<u8>,
    /// The SDP's `a=rtcp` address for the stream.
    rtcp: Option<SocketAddr>,
}

impl Stream {
    /// A stream of `format` at `listen` that no SDP describes.
    fn of_format(listen: SocketAddr, format: VideoFormat, source: Option<IpAddr>) -> Stream {
        Stream {
            listen,
            format,
            rate: None,
            source,
            declared: None,
            tr_offset: None,
            max_udp: None,
            ttl: None,
            rtcp: None,
        }
    }
}

impl RecvArgs {
    /// With --sdp, a --size or --pix-fmt given too must say what the SDP
    /// (`what`) says: silently preferring one would record the wrong
    /// frames.
    fn agrees_with(&self, f: &VideoFormat, what: &str) -> Result<()> {
        if let Some(s) = self.size
            && (s.width, s.height) != (f.width, f.height)
        {
            bail!(
                "--size {s} disagrees with {what}, which says {}x{}: drop --size (the SDP \
                 describes the stream) or fix the SDP",
                f.width,
                f.height
            );
        }
        if let Some(p) = self.pix_fmt
            && p != f.pixel_format
        {
            bail!(
                "--pix-fmt {p} disagrees with {what}, which says {}: drop --pix-fmt (the \
                 SDP describes the stream) or fix the SDP",
                f.pixel_format
            );
        }
        Ok(())
    }

    /// `--source`, if given.
    fn source_flag(&self) -> Result<Option<IpAddr>> {
        self.source
            .as_deref()
            .map(|s| {
                s.parse()
                    .map_err(|_| anyhow!("--source '{s}' is not an IP address"))
            })
            .transpose()
    }

    /// The stream an SDP's `text` describes (`what` names it in errors);
    /// `--source` wins over the SDP's source filter.
    fn sdp_stream(&self, text: &str, what: &str, source: Option<IpAddr>) -> Result<Stream> {
        let sdp = SdpStream::parse(text).map_err(|e| anyhow!("{what}: {e}"))?;
        self.agrees_with(&sdp.format, what)?;
        let listen = SocketAddr::new(sdp.address, sdp.port);
        // It parsed as a stream above, so it parses as a session.
        let rtcp = Session::parse(text).ok().and_then(|s| s.rtcp_of(listen));
        Ok(Stream {
            listen,
            format: sdp.format,
            rate: sdp.rate,
            source: source.or(sdp.source),
            declared: sdp.sender_type,
            tr_offset: sdp.tr_offset,
            max_udp: sdp.max_udp,
            ttl: sdp.ttl,
            rtcp,
        })
    }

    /// Validates the arguments.
    pub(crate) fn config(&self) -> Result<RecvConfig> {
        let source = self.source_flag()?;
        let stream = match (&self.listen, self.sdp.as_slice()) {
            (Some(l), []) => {
                let listen = udp::parse_addr(l, "listen address")?;
                let Some(format) = self.fixed_format()? else {
                    bail!("--listen needs --size and --pix-fmt (or use --sdp FILE)");
                };
                Stream::of_format(listen, format, source)
            }
            (None, [path]) => {
                let what = format!("the SDP '{}'", path.display());
                self.sdp_stream(&read_sdp(path)?, &what, source)?
            }
            _ => bail!("give either --listen HOST:PORT with --size and --pix-fmt, or --sdp FILE"),
        };
        self.finish(stream)
    }

    /// The configuration for the stream an SDP's `text` describes, as if
    /// it were the `--sdp` file (`recv --nmos`: the transport file a
    /// controller staged); `what` names it in errors.
    pub(crate) fn config_for_sdp(&self, text: &str, what: &str) -> Result<RecvConfig> {
        let stream = self.sdp_stream(text, what, self.source_flag()?)?;
        self.finish(stream)
    }

    /// The configuration for a stream of the format `--size` and
    /// `--pix-fmt` fix arriving at `listen` (`recv --nmos` activated
    /// without a transport file); `what` names the missing SDP in the
    /// error when they fix none.
    pub(crate) fn config_for_format(&self, listen: SocketAddr, what: &str) -> Result<RecvConfig> {
        let Some(format) = self.fixed_format()? else {
            bail!(
                "{what}: recv needs the sender's SDP to know the frame format: stage it as \
                 \"transport_file\": {{\"data\": SDP, \"type\": \"application/sdp\"}}, or \
                 start recv with --size and --pix-fmt (and --fps) to fix one format"
            );
        };
        self.finish(Stream::of_format(listen, format, self.source_flag()?))
    }

    /// The format `--size` and `--pix-fmt` fix, if both are given.
    pub(crate) fn fixed_format(&self) -> Result<Option<VideoFormat>> {
        match (self.size, self.pix_fmt) {
            (Some(size), Some(pf)) => cli::video_format(size, pf).map(Some),
            _ => Ok(None),
        }
    }

    /// The configuration of `stream` with every other flag.
    fn finish(&self, stream: Stream) -> Result<RecvConfig> {
        let Stream {
            listen,
            format,
            mut rate,
            source,
            declared,
            tr_offset,
            max_udp,
            ttl,
            rtcp,
        } = stream;
        let tr_offset = self.tr_offset.map(Nanos::from_micros).or(tr_offset);
        if self.fps.is_some() {
            rate = self.fps;
        }
        if let Some(s) = source
            && listen.ip().is_multicast()
        {
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
        let analyze = if self.analyze {
            if declared.is_none() && tr_offset.is_none() {
                // A receiver that knows nothing of the sender reads from
                // TROdefault; a sender that declared a later TRoffset
                // keeps a lead this judge does not count (docs/pacing.md).
                eprintln!(
                    "nagare recv: note: --analyze judges from TROdefault, as no SDP declares the sender's \
                     TRoffset; a W sender that declares one (nagare send does: TROFF= in its SDP) can stall \
                     that much longer without breaking its type: give its SDP (--sdp) or --tr-offset MICROS"
                );
            }
            Some(analyze_spec(format, rate, (declared, tr_offset, max_udp))?)
        } else {
            None
        };
        Ok(RecvConfig {
            listen,
            format,
            rate,
            socket: ReceiveOptions {
                interface: self.interface.clone(),
                // Joined as source-specific multicast; on unicast only a
                // filter.
                source: source.filter(|_| listen.ip().is_multicast()),
                buffer_bytes,
            },
            ttl,
            rtcp,
            source_filter: source,
            follow_ssrc: self.follow_ssrc,
            output: self.output.clone(),
            append: self.append,
            segmenting: self.segmenting()?,
            direct: self.direct,
            frames: self.frames,
            timeout: self.timeout,
            incomplete: self.incomplete,
            buffer_frames: self.buffer_frames,
            checksums: false,
            quiet: self.json,
            analyze,
        })
    }
}

/// The analysis of `recv --analyze`: the raster and rate of the stream,
/// Npackets learned from it.
fn analyze_spec(
    format: VideoFormat,
    rate: Option<FrameRate>,
    (declared, tr_offset, max_udp): (Option<SenderType>, Option<Nanos>, Option<u32>),
) -> Result<AnalyzeSpec> {
    let rate = rate
        .ok_or_else(|| anyhow!("--analyze needs the frame rate: give --fps (like 60000/1001)"))?;
    Ok(AnalyzeSpec {
        shape: StreamShape {
            rate,
            lines: format.height,
            width: Some(format.width),
            format: Some(format.pixel_format),
            scan: Scan::Progressive,
            packets: None,
            tr_offset,
            max_udp,
        },
        declared,
        print_seconds: false,
    })
}

impl RecvArgs {
    /// The recording's segmenting, from --segment-frames/--segment-seconds.
    pub(crate) fn segmenting(&self) -> Result<Segmenting> {
        Ok(match (self.segment_frames, self.segment_seconds) {
            (Some(0), _) => bail!("--segment-frames 0: a segment holds at least one frame"),
            (Some(n), _) => Segmenting::Frames(n),
            (None, Some(d)) if d.is_zero() => {
                bail!("--segment-seconds 0: give a segment length above zero")
            }
            (None, Some(d)) => Segmenting::Every(d),
            (None, None) => Segmenting::None,
        })
    }
}

impl RecvConfig {
    /// How the recording is opened, when there is one.
    pub(super) fn plan(&self) -> Option<Plan> {
        Some(Plan {
            path: self.output.clone()?,
            frame_bytes: self.format.frame_bytes() as u64,
            segmenting: self.segmenting,
            append: self.append,
            pad_partial: self.incomplete == Incomplete::Keep,
            direct: self.direct,
        })
    }
}

/// An SDP file's text, refused past 64 KiB (an SDP is a few KiB).
pub(crate) fn read_sdp(path: &Path) -> Result<String> {
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

/// The stripe flags of `nagare recv`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StripeArgs {
    /// Reassemble whole frames from N stripe streams on consecutive ports
    /// (--listen HOST:PORT is stripe 0; --size is the whole frame), or
    /// from one --sdp per stripe, in stripe order.
    #[arg(long, value_name = "N")]
    pub stripes: Option<usize>,
    /// How the sender split the frame: lines, square or 2si (as `send
    /// --split`).
    #[arg(long, default_value = "lines", value_parser = cli::parse_split)]
    pub split: Rule,
    /// Second leg of the stream (ST 2022-7), HOST:PORT; with --stripes,
    /// stripe k's second leg is on PORT+k. The first copy of every packet
    /// wins. (An SDP with a=group:DUP names both legs itself.)
    #[arg(long, value_name = "HOST:PORT")]
    pub dup: Option<String>,
    /// Receive threads (default: one per stripe, at most one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Receive the stream a `nagare cluster` config describes: its size,
    /// format, rate and split, stripe k on destination k's `to` (and its
    /// `dup` as the second leg).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["listen", "sdp", "stripes", "dup"])]
    pub cluster: Option<PathBuf>,
}
