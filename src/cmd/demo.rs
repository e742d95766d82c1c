//! `nagare demo`: a sender and a receiver on loopback, in one process,
//! sending the test pattern and proving the received frames equal the sent
//! ones, frame by frame, by checksum.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use nagare_api::video::{DemoReport, RecvReport, SendReport};
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::video::st2110_21::SenderType;
use nagare_proto::{FrameRate, PixelFormat, VideoFormat};

use crate::cli::{self, Size};
use crate::clock::Pacing;

use crate::engine::recv::{self, RecvConfig};
use crate::engine::send::{self, SendConfig};
use crate::net::placement::{CpuChoice, Placement, Role};
use crate::net::tuning::Realtime;
use crate::net::udp::{ReceiveOptions, SendOptions};
use crate::progress::bitrate;

/// The demo's packet size: a 9000-byte jumbo frame's, as `send`'s
/// `--packet-size` hint gives it. On a 2-vCPU VM a sixth of the packets
/// cost about a quarter of the sending thread's CPU per Gbit (0.30 → 0.08
/// CPU-s at 1080p59.94), and the host stopped the pacer less: 12 of 12
/// runs passed where 1440-byte packets passed 8 of 12, alternated
/// (docs/pacing.md). The ST 2110-21 limits count in packets of the
/// declared size, so the slack a W receiver gives (1/300 s of the
/// stream) stays the same.
const DEMO_PACKET_SIZE: usize = 8800;

/// Command-line arguments of `nagare demo`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DemoArgs {
    /// Frame size.
    #[arg(long, default_value = "1920x1080", value_parser = cli::parse_size)]
    pub size: Size,
    /// Pixel format.
    #[arg(long = "pix-fmt", default_value = "uyvp", value_parser = cli::parse_pix_fmt)]
    pub pix_fmt: PixelFormat,
    /// Frame rate.
    #[arg(long, default_value = "60000/1001", value_parser = cli::parse_rate)]
    pub fps: FrameRate,
    /// Frames to send.
    #[arg(long, default_value_t = 300)]
    pub frames: u64,
    /// UDP payload bytes per packet. Loopback carries ST 2110-10's
    /// Extended UDP Size Limit, so the demo sends what a 9000-byte jumbo
    /// network would (and declares `MAXUDP=8960`); 1440 is the standard
    /// size of a 1500-byte network.
    #[arg(long, default_value_t = DEMO_PACKET_SIZE, value_parser = cli::parse_packet_size)]
    pub packet_size: usize,
    /// How the sender waits between trains (see `nagare send --pacing`).
    #[arg(long, value_enum, default_value_t = Pacing::Precise)]
    pub pacing: Pacing,
    /// Print the verdict and both reports as JSON on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// `nagare demo`.
pub(crate) fn main(args: DemoArgs) -> Result<ExitCode> {
    let format = cli::video_format(args.size, args.pix_fmt)?;
    let rate = args.fps;
    let recv_cfg = RecvConfig {
        listen: "127.0.0.1:0".parse().map_err(|e| anyhow!("{e}"))?,
        format,
        rate: Some(rate),
        socket: ReceiveOptions {
            interface: None,
            source: None,
            buffer_bytes: (format.frame_bytes() * 4).clamp(16 << 20, 512 << 20),
        },
        ttl: None,
        rtcp: None,
        source_filter: None,
        follow_ssrc: false,
        output: None,
        append: false,
        direct: false,
        segmenting: recv::Segmenting::None,
        frames: Some(args.frames),
        timeout: Some(Duration::from_secs(5)),
        incomplete: Incomplete::Drop,
        buffer_frames: 8,
        checksums: true,
        quiet: true,
        analyze: None,
    };
    let bound = recv::Bound::open(&recv_cfg)?;
    let dest = bound
        .local_addr()
        .context("the receiver socket has no address")?;
    let send_cfg = send_config(&args, format, rate, dest);
    let payload = format.frame_bytes() as f64 * 8.0 * rate.as_f64();
    eprintln!(
        "demo: {} frames of {}x{} {} at {} fps ({} of video) from pattern:bars to {dest}",
        args.frames,
        format.width,
        format.height,
        format.pixel_format,
        rate,
        bitrate(payload)
    );
    let stop = crate::signal::stop_flag();
    // Sender and receiver apart: the pacer gets the highest CPU to
    // itself, the receiver and every other thread the rest (see
    // net::placement); the receiver thread is spawned from the helper CPUs.
    let placement = Placement::new(CpuChoice::Auto);
    placement.apply(Role::Helper { pacers: 1 })?;
    let (sent, received) = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            placement.apply(Role::Receive { index: 0 })?;
            recv::run(&recv_cfg, bound, stop)
        });
        let sent = send::run(&send_cfg, stop);
        if sent.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let received = receiver
            .join()
            .map_err(|_| anyhow!("the receiver thread panicked"))
            .and_then(|r| r);
        (sent, received)
    });
    let report = verdict(args.frames, sent?, received?);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_verdict(&report);
    }
    Ok(if report.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The sender half of the demo: the test pattern, paced, to `dest`.
fn send_config(
    args: &DemoArgs,
    format: VideoFormat,
    rate: FrameRate,
    dest: std::net::SocketAddr,
) -> SendConfig {
    SendConfig {
        input: "pattern:bars".into(),
        dest,
        format,
        rate,
        packet_size: args.packet_size,
        frames: Some(args.frames),
        looping: false,
        socket: SendOptions {
            interface: None,
            ttl: None,
            buffer_bytes: 8 << 20,
        },
        sdp: None,
        ptp: None,
        buffer_frames: 8,
        sender_type: SenderType::W,
        train: None,
        tr_offset: crate::cli::TrOffsetChoice::Auto,
        pacing: args.pacing,
        gso: true,
        read_delay: Duration::ZERO,
        checksums: true,
        quiet: args.json,
        cpu: CpuChoice::Auto,
        realtime: Realtime::Auto,
        striping: send::Striping::default(),
        stripes: 1,
        direct: false,
        rtcp: true,
    }
}

/// Compares every received frame's checksum with the sent one's.
fn verdict(frames: u64, sent: SendReport, received: RecvReport) -> DemoReport {
    let mut identical = 0u64;
    let mut differing = Vec::new();
    let sent_sums: std::collections::HashMap<u64, u64> = sent.checksums.iter().copied().collect();
    for (index, sum) in &received.checksums {
        match sent_sums.get(index) {
            Some(s) if s == sum => identical += 1,
            _ => differing.push(*index),
        }
    }
    // The stream must also keep to the ST 2110-21 type it declares.
    let paced = sent
        .st2110_21
        .as_ref()
        .and_then(|a| a.declared_met)
        .unwrap_or(false);
    // A slot passed over is a gap a receiver shows, even if every frame
    // sent arrived whole.
    let pass = identical == frames
        && differing.is_empty()
        && sent.frames_sent == frames
        && sent.slipped == 0
        && paced;
    DemoReport {
        frames,
        identical,
        differing,
        pass,
        sent,
        received,
    }
}

fn print_verdict(r: &DemoReport) {
    send::print_summary(&r.sent);
    recv::print_summary(&r.received);
    eprintln!(
        "demo: {} of {} frames received byte-identical (xxh3 of every frame compared){}",
        r.identical,
        r.frames,
        if r.differing.is_empty() {
            String::new()
        } else {
            format!("; differing frames: {:?}", r.differing)
        }
    );
    let paced = r.sent.st2110_21.as_ref().and_then(|a| a.declared_met) == Some(true);
    eprintln!(
        "demo: {}",
        if r.pass {
            "PASS: every frame sent arrived complete and identical, paced as the declared ST 2110-21 type"
        } else if r.sent.slipped > 0 {
            "FAIL: a host stall put the sender past its ST 2110-21 slack, and it passed over frame slots to be back on time (see above)"
        } else if !paced && r.identical == r.frames {
            "FAIL: every frame arrived identical, but the pacing broke the declared ST 2110-21 type (see above)"
        } else {
            "FAIL: see the counters above"
        }
    );
}
