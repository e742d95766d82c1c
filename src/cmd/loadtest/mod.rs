//! `nagare loadtest URL`: how many streams a server carries before frames
//! drop (seed 001). For each stream count it starts that many virtual
//! RTSP clients (or, with an `http://` URL of `nagare serve`'s API, push
//! streams), lets them warm up, measures a window (loss, frames dropped,
//! each stream's packet arrivals against its own schedule, server CPU),
//! stops them, and goes on to the next count until frame drop passes 1 %.
//! Every figure and both ceilings are nagare-proto's (`stats::flow`,
//! `stats::ceiling`); this moves datagrams and prints.

mod clients;
mod flows;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::serve::{LoadReport, LoadStep};
use nagare_proto::Nanos;
use nagare_proto::stats::ceiling::{CLEAN_DEVIATION, Ceiling, MAX_FRAME_DROP, StepFigures};

use crate::cli;
use clients::RtspClient;
use flows::Sink;

/// Command-line arguments of `nagare loadtest`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LoadtestArgs {
    /// rtsp://HOST:PORT/PATH for RTSP clients, or http://HOST:PORT of a
    /// `nagare serve` API for push streams (then --source names the path).
    pub url: String,
    /// Concurrent streams.
    #[arg(long, conflicts_with = "ramp")]
    pub streams: Option<usize>,
    /// FROM:TO:STEP stream counts, stopping once frame drop passes 1 %.
    #[arg(long)]
    pub ramp: Option<String>,
    /// Seconds measured per stream count (after a warm-up).
    #[arg(long, default_value = "5", value_parser = cli::parse_seconds)]
    pub duration: Duration,
    /// Seconds of warm-up before each window.
    #[arg(long, default_value = "1", value_parser = cli::parse_seconds)]
    pub warmup: Duration,
    /// Catalog path for push streams (http:// URL).
    #[arg(long)]
    pub source: Option<String>,
    /// API token of the server (or NAGARE_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// The server's API, to read its CPU from /metrics (RTSP mode).
    #[arg(long)]
    pub metrics: Option<String>,
    /// The server's process id, to read its CPU from /proc (any server).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Receive with real-time (SCHED_FIFO) priority; needs root or
    /// CAP_SYS_NICE.
    #[arg(long)]
    pub realtime: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Draw frame drop and CPU against stream count into this PNG.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
}

/// Where the load comes from.
enum Mode {
    Rtsp(String),
    Push { api: SocketAddr, source: String },
}

/// The streams of one step, to stop afterwards.
enum Running {
    Rtsp(Vec<RtspClient>),
    Push(Vec<u64>),
}

struct Test {
    mode: Mode,
    sink: Sink,
    token: Option<String>,
    cpu: CpuSource,
}

enum CpuSource {
    Api(SocketAddr),
    Pid(u32),
    None,
}

impl CpuSource {
    fn seconds(&self, token: Option<&str>) -> Option<f64> {
        match self {
            CpuSource::Api(a) => clients::server_cpu(*a, token),
            CpuSource::Pid(p) => clients::process_cpu(*p),
            CpuSource::None => None,
        }
    }
}

/// `nagare loadtest`.
pub(crate) fn main(args: LoadtestArgs) -> Result<ExitCode> {
    let counts = counts(&args)?;
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("NAGARE_TOKEN").ok());
    let mode = if args.url.starts_with("rtsp://") {
        Mode::Rtsp(args.url.clone())
    } else if args.url.starts_with("http://") {
        let source = args.source.clone().ok_or_else(|| {
            anyhow!("an http:// URL makes push streams: name the path with --source")
        })?;
        Mode::Push {
            api: clients::authority(&args.url)?,
            source,
        }
    } else {
        bail!(
            "'{}' is neither rtsp://HOST:PORT/PATH nor http://HOST:PORT (a nagare serve API)",
            args.url
        );
    };
    let cpu = match (&mode, &args.metrics, args.pid) {
        (_, _, Some(pid)) => CpuSource::Pid(pid),
        (_, Some(m), None) => CpuSource::Api(clients::authority(m)?),
        (Mode::Push { api, .. }, None, None) => CpuSource::Api(*api),
        _ => CpuSource::None,
    };
    let server = match &mode {
        Mode::Rtsp(u) => clients::authority(u)?,
        Mode::Push { api, .. } => *api,
    };
    let bind = SocketAddr::new(local_ip_towards(server)?, 0);
    let test = Test {
        mode,
        sink: Sink::open(bind, args.realtime)?,
        token,
        cpu,
    };
    let report = run(&test, &args, &counts)?;
    print(&report, args.json)?;
    if let Some(path) = &args.plot {
        plot::draw(path, &report)?;
        eprintln!("loadtest: plot written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The address this host uses to reach `server` (loopback for loopback).
fn local_ip_towards(server: SocketAddr) -> Result<std::net::IpAddr> {
    let any: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect(server)
        .with_context(|| format!("no route to {server}"))?;
    Ok(s.local_addr()?.ip())
}

fn counts(args: &LoadtestArgs) -> Result<Vec<usize>> {
    if let Some(r) = &args.ramp {
        let parts: Vec<usize> = r
            .split(':')
            .map(|p| p.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| anyhow!("--ramp '{r}' is not FROM:TO:STEP such as 50:500:50"))?;
        let [from, to, step] = parts[..] else {
            bail!("--ramp '{r}' is not FROM:TO:STEP such as 50:500:50");
        };
        if from == 0 || step == 0 || to < from || to > 10_000 {
            bail!("--ramp '{r}': need 1 <= FROM <= TO <= 10000 and STEP >= 1");
        }
        return Ok((from..=to).step_by(step).collect());
    }
    let n = args.streams.unwrap_or(10);
    if n == 0 || n > 10_000 {
        bail!("--streams {n} is out of range: 1..=10000");
    }
    Ok(vec![n])
}

/// What proto's ceilings judge of a step.
fn figures(s: &LoadStep) -> StepFigures {
    StepFigures {
        streams: s.streams,
        frame_drop_ratio: s.frame_drop_ratio,
        lost: s.lost,
        deviation_p99_worst: Nanos((s.jitter_p99_us_worst * 1e3).round() as u64),
    }
}

fn run(test: &Test, args: &LoadtestArgs, counts: &[usize]) -> Result<LoadReport> {
    let stop = crate::signal::stop_flag();
    let mut steps = Vec::new();
    let mut refused = None;
    for &n in counts {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let step = match one_step(test, n, args)? {
            Outcome::Measured(step) => step,
            Outcome::Refused { started, reason } => {
                let why = format!("stream {} of the {n}-stream step: {reason}", started + 1);
                eprintln!("loadtest: the server's admission refused {why}; the ramp ends here");
                refused = Some(why);
                break;
            }
        };
        print_step(&step);
        let over = figures(&step).over();
        steps.push(step);
        if over {
            break;
        }
    }
    let judged: Vec<StepFigures> = steps.iter().map(figures).collect();
    let (ceiling, clean) = (Ceiling::frame_drop(&judged), Ceiling::clean(&judged));
    let saturated = steps.iter().find(|s| figures(s).over()).map(saturated_by);
    Ok(LoadReport {
        url: args.url.clone(),
        steps,
        ceiling: ceiling.count(),
        clean_ceiling: clean.count(),
        saturated,
        limit_found: ceiling.found(),
        ceiling_text: ceiling.to_string(),
        clean_ceiling_text: clean.to_string(),
        refused,
    })
}

/// What a step came to.
enum Outcome {
    /// Every stream ran and was measured.
    Measured(LoadStep),
    /// The server's admission refused one after `started` had started
    /// (they are stopped again).
    Refused { started: usize, reason: String },
}

/// Which resource ran out at a step past the ceiling.
fn saturated_by(s: &LoadStep) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    if s.receiver_kernel_drops > 0 {
        "the receiving socket's buffer (the load generator fell behind)".into()
    } else if s.server_cpu_cores.is_some_and(|c| c >= 0.8 * cores) {
        format!(
            "server CPU ({:.1} of {cores} cores)",
            s.server_cpu_cores.unwrap_or(0.0)
        )
    } else {
        "not CPU-bound: pacing or the loopback path (check the server's late counters)".into()
    }
}

/// Starts `n` streams, measures a window, stops them.
fn one_step(test: &Test, n: usize, args: &LoadtestArgs) -> Result<Outcome> {
    let token = test.token.as_deref();
    let running = match &test.mode {
        Mode::Rtsp(url) => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                match RtspClient::admitted(url, test.sink.addr)? {
                    clients::Admitted::Playing(c) => v.push(*c),
                    clients::Admitted::Refused(reason) => {
                        let started = v.len();
                        v.into_iter().for_each(RtspClient::stop);
                        return Ok(Outcome::Refused { started, reason });
                    }
                }
            }
            Running::Rtsp(v)
        }
        Mode::Push { api, source } => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                match clients::push(*api, source, test.sink.addr, token)? {
                    clients::Push::Started(id) => v.push(id),
                    clients::Push::Refused(reason) => {
                        let started = v.len();
                        v.into_iter()
                            .for_each(|id| clients::unpush(*api, id, token));
                        return Ok(Outcome::Refused { started, reason });
                    }
                }
            }
            Running::Push(v)
        }
    };
    let mut running = running;
    wait_window(&mut running, args.warmup);
    test.sink.reset();
    let drops0 = test.sink.kernel_drops();
    let cpu0 = test.cpu.seconds(token);
    let t0 = Instant::now();
    wait_window(&mut running, args.duration);
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = test.cpu.seconds(token);
    let step = measure(test, n, seconds, cpu0.zip(cpu1), drops0);
    match running {
        Running::Rtsp(v) => v.into_iter().for_each(RtspClient::stop),
        Running::Push(ids) => {
            if let Mode::Push { api, .. } = &test.mode {
                ids.into_iter()
                    .for_each(|id| clients::unpush(*api, id, token));
            }
        }
    }
    Ok(Outcome::Measured(step))
}

/// Waits out the window, keeping RTSP sessions alive when their client
/// machines say a keep-alive is due (half the server's session timeout).
fn wait_window(running: &mut Running, window: Duration) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
        if let Running::Rtsp(v) = running {
            for c in v.iter_mut() {
                // A session the server dropped shows in the measurement.
                let _ = c.tend();
            }
        }
    }
}

fn measure(test: &Test, n: usize, seconds: f64, cpu: Option<(f64, f64)>, drops0: u64) -> LoadStep {
    let flows = test.sink.lock();
    let (mut packets, mut lost, mut frames, mut dropped, mut bytes) = (0, 0, 0, 0, 0);
    let mut p99s: Vec<f64> = Vec::with_capacity(flows.len());
    let (mut first, mut last): (Option<Nanos>, Option<Nanos>) = (None, None);
    let mut lossy = 0;
    for f in flows.values() {
        packets += f.packets();
        bytes += f.bytes();
        lost += f.lost();
        frames += f.frames();
        dropped += f.frames_dropped();
        lossy += usize::from(f.lost() > 0);
        p99s.push(f.deviation().quantile(0.99) as f64 / 1000.0);
        if let Some((a, b)) = f.span() {
            first = Some(first.map_or(a, |x| x.min(a)));
            last = Some(last.map_or(b, |x| x.max(b)));
        }
    }
    p99s.sort_by(f64::total_cmp);
    let span = match (first, last) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => 0.0,
    };
    let cores = cpu.map(|(a, b)| (b - a) / seconds.max(1e-9));
    LoadStep {
        streams: n,
        streams_received: flows.len(),
        seconds,
        packets,
        lost,
        loss_ratio: lost as f64 / (packets + lost).max(1) as f64,
        frames_dropped: dropped,
        frames,
        frame_drop_ratio: if flows.len() < n {
            1.0
        } else {
            dropped as f64 / frames.max(1) as f64
        },
        streams_with_loss: lossy,
        jitter_p99_us_worst: p99s.last().copied().unwrap_or(0.0),
        jitter_p99_us_median: p99s.get(p99s.len() / 2).copied().unwrap_or(0.0),
        rate_bps: if span > 0.0 {
            bytes as f64 * 8.0 / span
        } else {
            0.0
        },
        server_cpu_cores: cores,
        cpu_per_stream_pct: cores.map(|c| c * 100.0 / n as f64),
        receiver_kernel_drops: test.sink.kernel_drops().saturating_sub(drops0),
    }
}

fn print_step(s: &LoadStep) {
    let cpu = s
        .cpu_per_stream_pct
        .map_or("-".into(), |c| format!("{c:.2}%"));
    eprintln!(
        "loadtest: {:>5} streams ({} received): loss {:.4}%, frames dropped {:.3}% ({}/{}), \
         off schedule p99 worst {:.0} µs median {:.0} µs, {}, CPU per stream {cpu}, receiver drops {}",
        s.streams,
        s.streams_received,
        s.loss_ratio * 100.0,
        s.frame_drop_ratio * 100.0,
        s.frames_dropped,
        s.frames,
        s.jitter_p99_us_worst,
        s.jitter_p99_us_median,
        crate::progress::bitrate(s.rate_bps),
        s.receiver_kernel_drops
    );
}

fn print(r: &LoadReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    }
    eprintln!(
        "loadtest: ceiling (frame drop <= {:.0}%) {}; clean (no loss, off schedule p99 <= {:.0} µs) {}{}",
        MAX_FRAME_DROP * 100.0,
        r.ceiling_text,
        CLEAN_DEVIATION.as_micros_f64(),
        r.clean_ceiling_text,
        r.saturated
            .as_ref()
            .map_or(String::new(), |s| format!("; ran out: {s}"))
            + &r.refused.as_ref().map_or(String::new(), |why| {
                format!("; the server's admission ended the ramp, refusing {why}")
            })
    );
    Ok(())
}

mod plot {
    //! `--plot`: frame drop against the 1 % ceiling, each step's worst and
    //! median schedule deviation against the clean 250 µs, and server CPU,
    //! over stream count.
    use std::path::Path;

    use anyhow::Result;
    use nagare_api::serve::LoadReport;
    use nagare_proto::stats::ceiling::{CLEAN_DEVIATION, MAX_FRAME_DROP};

    use crate::plot::{Figure, Panel, Series, write_png};

    /// Draws the report's steps.
    pub(super) fn draw(path: &Path, r: &LoadReport) -> Result<()> {
        write_png(path, &figure(r))
    }

    fn figure(r: &LoadReport) -> Figure {
        let at = |f: &dyn Fn(&nagare_api::serve::LoadStep) -> Option<f64>| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .filter_map(|s| Some((s.streams as f64, f(s)?)))
                .collect()
        };
        let (x0, x1) = match (r.steps.first(), r.steps.last()) {
            (Some(a), Some(b)) => (a.streams as f64, b.streams as f64),
            _ => (0.0, 1.0),
        };
        let drop = Panel {
            y_label: "frames dropped (%)".into(),
            series: vec![
                Series::solid("frame drop", 0, at(&|s| Some(s.frame_drop_ratio * 100.0))),
                Series::target("ceiling: 1 %", x0, x1, MAX_FRAME_DROP * 100.0),
            ],
        };
        let clean = CLEAN_DEVIATION.as_micros_f64();
        let deviation = Panel {
            y_label: "off schedule, p99 (µs)".into(),
            series: vec![
                Series::solid("worst stream", 1, at(&|s| Some(s.jitter_p99_us_worst))),
                Series::solid("median stream", 3, at(&|s| Some(s.jitter_p99_us_median))),
                Series::target(&format!("clean: {clean:.0} µs"), x0, x1, clean),
            ],
        };
        let cpu = Panel {
            y_label: "server CPU (% of a core)".into(),
            series: vec![Series::solid(
                "server CPU",
                2,
                at(&|s| s.server_cpu_cores.map(|c| c * 100.0)),
            )],
        };
        Figure {
            title: format!("nagare loadtest: {}", r.url),
            subtitle: format!(
                "ceiling (frame drop <= 1 %) {}; clean (no loss, off schedule p99 <= {clean:.0} µs) {}",
                r.ceiling_text, r.clean_ceiling_text
            ),
            x_label: "concurrent streams".into(),
            panels: vec![drop, deviation, cpu],
        }
    }
}
