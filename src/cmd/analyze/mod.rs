//! `nagare analyze`: the ST 2110-21 analysis of EBU LIST, live on a
//! socket (through the receive engine that `recv` runs, with kernel receive stamps) or
//! from a pcap/pcapng capture. Every judgement is nagare-proto's
//! `st2110_21::Monitor`; this driver moves datagrams and times to it and
//! shows what it found.

pub(crate) mod capture;
pub(crate) mod plot;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::st2110::AnalyzeReport;
use nagare_proto::Nanos;
use nagare_proto::sdp::SdpStream;
use nagare_proto::video::st2110_21::{Compliance, Monitor, Scan, SenderType, StreamShape};
use nagare_proto::{FrameRate, PixelFormat};

use crate::cli::{self, Size};
use crate::engine::recv::{self, RecvArgs};
use crate::net::udp::Interface;

use crate::analysis::collect::{Collector, FramePoint};
use crate::analysis::output;

/// Command-line arguments of `nagare analyze`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AnalyzeArgs {
    /// Read this pcap or pcapng capture (tcpdump -w, Wireshark) instead of
    /// listening.
    #[arg(long, conflicts_with = "capture")]
    pub pcap: Option<PathBuf>,
    /// The capture, as a plain argument: `nagare analyze cap.pcap` is
    /// `nagare analyze --pcap cap.pcap`.
    #[arg(value_name = "CAPTURE")]
    pub capture: Option<PathBuf>,
    /// Listen live on HOST:PORT (needs --size, --pix-fmt and --fps).
    #[arg(long, conflicts_with_all = ["pcap", "capture", "sdp"])]
    pub listen: Option<String>,
    /// The stream's SDP: address, port, format, rate and declared sender
    /// type (TP=). Live, it says where to listen; with --pcap, which
    /// datagrams are the stream.
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// In a capture, the stream's UDP destination port (default: the
    /// SDP's address and port, else the first RTP stream in the file).
    #[arg(long)]
    pub port: Option<u16>,
    /// Frame size WIDTHxHEIGHT (without an SDP).
    #[arg(long, value_parser = cli::parse_size)]
    pub size: Option<Size>,
    /// Pixel format (live without an SDP): uyvy422, uyvp, rgb24.
    #[arg(long = "pix-fmt", value_parser = cli::parse_pix_fmt)]
    pub pix_fmt: Option<PixelFormat>,
    /// Frame rate (without an SDP, or to override it).
    #[arg(long, value_parser = cli::parse_rate)]
    pub fps: Option<FrameRate>,
    /// Packets of one frame (default: learned from the stream).
    #[arg(long)]
    pub packets: Option<u32>,
    /// The sender type to hold the stream to: n, nl or w (default: the
    /// SDP's TP=).
    #[arg(long = "tp", value_parser = cli::parse_sender_type)]
    pub sender_type: Option<SenderType>,
    /// The TRoffset to judge from, in microseconds (default: the SDP's
    /// TROFF, else TROdefault). A wide nagare sender declares one (see
    /// `send --tr-offset`).
    #[arg(long, value_name = "MICROS")]
    pub tr_offset: Option<u64>,
    /// Multicast interface (live), by address or name.
    #[arg(long, value_parser = cli::parse_interface)]
    pub interface: Option<Interface>,
    /// Source address for source-specific multicast (live).
    #[arg(long)]
    pub source: Option<String>,
    /// Stop after N frames (live).
    #[arg(long)]
    pub frames: Option<u64>,
    /// Stop after this long without a packet (live; default 5 s).
    #[arg(long, value_parser = cli::parse_seconds)]
    pub timeout: Option<Duration>,
    /// Draw Cinst and VRX against their limits over time, and the FPT
    /// distribution, into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also print the Cinst and FPT histograms, and a capture's line per
    /// second: set by the global `-v`/`--verbose`.
    #[arg(skip)]
    pub verbose: bool,
}

/// What the analysis needs to know of the stream, from the SDP and flags.
struct Stream {
    shape: StreamShape,
    declared: Option<SenderType>,
    sdp: Option<SdpStream>,
}

fn read_sdp(path: &PathBuf) -> Result<SdpStream> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read SDP file '{}'", path.display()))?;
    SdpStream::parse(&text).map_err(|e| anyhow!("SDP file '{}': {e}", path.display()))
}

impl AnalyzeArgs {
    fn stream(&self) -> Result<Stream> {
        let sdp = self.sdp.as_ref().map(read_sdp).transpose()?;
        let (width, lines) = match (&sdp, self.size) {
            (_, Some(s)) => (s.width, s.height),
            (Some(s), None) => (s.format.width, s.format.height),
            (None, None) => bail!("give the frame size (--size 1920x1080) or the stream's --sdp"),
        };
        let format = self.pix_fmt.or(sdp.as_ref().map(|s| s.format.pixel_format));
        let rate = self
            .fps
            .or(sdp.as_ref().and_then(|s| s.rate))
            .ok_or_else(|| anyhow!("the frame rate is not known: give --fps (like 60000/1001)"))?;
        Ok(Stream {
            shape: StreamShape {
                rate,
                lines,
                width: Some(width),
                format,
                scan: Scan::Progressive,
                packets: self.packets,
                tr_offset: self
                    .tr_offset
                    .map(Nanos::from_micros)
                    .or(sdp.as_ref().and_then(|s| s.tr_offset)),
                max_udp: sdp.as_ref().and_then(|s| s.max_udp),
            },
            declared: self
                .sender_type
                .or(sdp.as_ref().and_then(|s| s.sender_type)),
            sdp,
        })
    }

    /// The `recv` arguments of a live analysis, parsed as `recv` parses
    /// its command line (so every other flag keeps recv's default).
    fn recv_args(&self) -> Result<RecvArgs> {
        #[derive(clap::Parser)]
        struct Recv {
            #[command(flatten)]
            args: RecvArgs,
        }
        let mut argv: Vec<String> = vec!["recv".into(), "--json".into()];
        let mut flag = |name: &str, value: String| argv.extend([format!("--{name}"), value]);
        if let Some(l) = &self.listen {
            flag("listen", l.clone());
        }
        if let Some(s) = &self.sdp {
            flag("sdp", s.display().to_string());
        }
        if let Some(s) = self.size {
            flag("size", format!("{}x{}", s.width, s.height));
        }
        if let Some(p) = self.pix_fmt {
            flag("pix-fmt", p.to_string());
        }
        if let Some(r) = self.fps {
            flag("fps", r.sdp_value());
        }
        if let Some(i) = &self.interface {
            flag("interface", i.label.clone());
        }
        if let Some(s) = &self.source {
            flag("source", s.clone());
        }
        if let Some(n) = self.frames {
            flag("frames", n.to_string());
        }
        let timeout = self.timeout.unwrap_or(Duration::from_secs(5));
        flag("timeout", format!("{}ms", timeout.as_millis().max(1)));
        use clap::Parser as _;
        Recv::try_parse_from(argv)
            .map(|r| r.args)
            .map_err(|e| anyhow!("{e}"))
    }
}

fn print_second(shown: bool) -> impl FnMut(&nagare_api::st2110::SecondLine) {
    move |l| {
        if shown {
            eprintln!("{}", output::second(l));
        }
    }
}

/// Analyses a capture file.
fn from_capture(
    args: &AnalyzeArgs,
    path: &std::path::Path,
    s: Stream,
) -> Result<(AnalyzeReport, Vec<FramePoint>)> {
    let filter = match (args.port, &s.sdp) {
        (Some(p), _) => capture::Filter::Port(p),
        (None, Some(sdp)) => {
            capture::Filter::Destination(std::net::SocketAddr::new(sdp.address, sdp.port))
        }
        (None, None) => capture::Filter::First,
    };
    let mut monitor = Monitor::new(s.shape);
    let mut collector = Collector::new(format!("pcap {}", path.display()), s.declared);
    let other = capture::run(
        path,
        filter,
        &mut monitor,
        &mut collector,
        &mut print_second(args.verbose && !args.json),
        crate::signal::stop_flag(),
    )?;
    collector.inspect(&monitor);
    Ok(collector.finish(monitor.analyzer(), monitor.stats(), other))
}

/// Analyses a live stream through the receive engine that `recv` runs.
fn live(args: &AnalyzeArgs, s: Stream) -> Result<(AnalyzeReport, Vec<FramePoint>)> {
    if args.sdp.is_none() && (args.size.is_none() || args.pix_fmt.is_none()) {
        bail!("--listen needs --size, --pix-fmt and --fps (or give --sdp FILE)");
    }
    let mut cfg = args.recv_args()?.config()?;
    cfg.analyze = Some(recv::AnalyzeSpec {
        shape: s.shape,
        declared: s.declared,
        print_seconds: !args.json,
    });
    let bound = recv::Bound::open(&cfg)?;
    for n in bound.notices() {
        eprintln!("nagare analyze: note: {n}");
    }
    if let Some(a) = bound.local_addr() {
        eprintln!("nagare analyze: listening on {a}");
    }
    let (report, points) = recv::run_analyzed(&cfg, bound, crate::signal::stop_flag())?;
    report
        .analysis
        .map(|a| (a, points))
        .context("the receive path returned no analysis")
}

/// `nagare analyze`.
pub(crate) fn main(mut args: AnalyzeArgs) -> Result<ExitCode> {
    if args.pcap.is_none() {
        args.pcap = args.capture.take();
    }
    if args.port.is_some() && args.pcap.is_none() {
        bail!(
            "--port picks a stream in a capture: give the capture (nagare analyze CAPTURE --port N)"
        );
    }
    let stream = args.stream()?;
    let (report, points) = match &args.pcap {
        Some(path) => from_capture(&args, path, stream)?,
        None if args.listen.is_some() || args.sdp.is_some() => live(&args, stream)?,
        None => bail!(
            "give a capture (--pcap FILE) or a live stream (--listen HOST:PORT or --sdp FILE)"
        ),
    };
    if let Some(path) = &args.plot {
        plot::draw(path, &report, &points)
            .with_context(|| format!("drawing the plot '{}'", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        eprint!("{}", output::summary(&report, args.verbose));
    }
    Ok(exit_code(&report))
}

/// 0 when the stream complies (with its declared type, if any); 1 when
/// it does not, or nothing could be judged.
pub(crate) fn exit_code(r: &AnalyzeReport) -> ExitCode {
    let ok = match (r.declared_met, &r.verdict) {
        (Some(met), _) => met,
        (None, Some(v)) => v.compliance != Compliance::NotCompliant,
        (None, None) => false,
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
