//! The host's timing against a stream's ST 2110-21 slack: how late a
//! sleeping real-time thread wakes on each CPU (the timer floor), how
//! long the host stops a CPU kept busy (as a pacer keeps its own), alone
//! and with every CPU busy, and from both the tightest sender type this
//! host holds.

use std::time::Duration;

use anyhow::{Result, anyhow};
use nagare_api::doctor::{Check, CheckKind};
use nagare_proto::Nanos;
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::st2110_21::{Model, Scan, SenderSchedule, SenderType};

use crate::net::placement::{Layout, Role};
use crate::net::stalls::{self, BusyCpu};
use crate::net::wakeup::Wakeups;

/// The stream the sender type is judged for, as `--size`, `--pix-fmt`
/// and `--fps` give it (each `None`: the demo's).
#[derive(Debug, Clone, Copy)]
pub(super) struct Planned {
    pub size: Option<crate::cli::Size>,
    pub pix_fmt: Option<nagare_proto::PixelFormat>,
    pub fps: Option<nagare_proto::FrameRate>,
    pub packet_size: usize,
}

/// The stream the sender type is judged for, and its name in the lines.
struct Stream {
    model: Model,
    what: String,
}

impl Stream {
    /// The planned stream, the demo's where it says nothing.
    fn of(args: Planned) -> Result<Stream> {
        let packet_size = args.packet_size;
        let size = args.size.unwrap_or(crate::cli::Size {
            width: 1920,
            height: 1080,
        });
        let pix = args.pix_fmt.unwrap_or(nagare_proto::PixelFormat::Uyvp);
        let fps = match args.fps {
            Some(f) => f,
            None => nagare_proto::FrameRate::new(60000, 1001).map_err(|e| anyhow!("{e}"))?,
        };
        let format = crate::cli::video_format(size, pix)?;
        let packets = Packetizer::new(format, packet_size, nagare_proto::Ssrc(0))
            .map_err(|e| anyhow!("--packet-size {packet_size}: {e}"))?
            .packets_per_frame();
        let model = Model::new(fps, format.height, Scan::Progressive, packets as u32)
            .map_err(|e| anyhow!("the ST 2110-21 model of this stream: {e}"))?
            .for_datagrams(packet_size)
            .map_err(|e| anyhow!("--packet-size {packet_size}: {e}"))?;
        let what = format!(
            "{}x{} {} at {} fps, {}-byte packets",
            format.width, format.height, format.pixel_format, fps, packet_size
        );
        Ok(Stream { model, what })
    }

    /// How long a sender of type `t` may stall without breaking it.
    fn slack(&self, t: SenderType) -> Duration {
        SenderSchedule::software(&self.model, t)
            .stall_slack()
            .into()
    }
}

/// The timing checks for the `planned` stream, each sample `span` long.
pub(super) fn checks(planned: Planned, span: Duration) -> Result<Vec<Check>> {
    let stream = Stream::of(planned)?;
    let layout = Layout::of_process();
    let period = Duration::from_micros(200);
    let floor = crate::net::wakeup::sample(layout.allowed(), period, span)?;
    // The CPU a sender's pacer takes by the placement rule; on one CPU,
    // that one.
    let pacer = layout
        .cpus(Role::Pacer { index: 0 })
        .first()
        .or(layout.allowed().last())
        .copied()
        .unwrap_or(0);
    let alone = stalls::probe(&[pacer], span)?;
    let together = match layout.allowed().len() {
        0 | 1 => None,
        _ => Some(stalls::probe(layout.allowed(), span)?),
    };
    let w = stream.slack(SenderType::W);
    let mut checks: Vec<Check> = floor
        .iter()
        .map(|f| floor_check(f, &stream, w, span))
        .collect();
    checks.extend(alone.iter().map(|b| alone_check(b, &stream, w)));
    checks.extend(
        together
            .as_deref()
            .map(|all| together_check(all, &stream, w)),
    );
    checks.push(type_check(&floor, &alone[0], &stream));
    Ok(checks)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One CPU's timer floor against W's `slack`.
fn floor_check(w: &Wakeups, stream: &Stream, slack: Duration, span: Duration) -> Check {
    let ok = w.p999 < slack;
    Check {
        kind: CheckKind::TimerFloor,
        name: format!(
            "timer wake-up on CPU {} ({:.0} s, every 200 µs, {})",
            w.cpu,
            span.as_secs_f64(),
            if w.realtime {
                "SCHED_FIFO"
            } else {
                "normal priority"
            }
        ),
        current: format!(
            "p99 {:.0} µs, p99.9 {:.0} µs, max {:.0} µs",
            us(w.p99),
            us(w.p999),
            us(w.max)
        ),
        needed: format!(
            "p99.9 below W's slack, {:.0} µs, for {}",
            us(slack),
            stream.what
        ),
        ok,
        fix: (!ok).then(|| {
            format!(
                "CPU {} wakes too late for any sender type: stop what else runs there, \
                 ask for dedicated vCPUs, or pace as root (SCHED_FIFO)",
                w.cpu
            )
        }),
    }
}

/// What one CPU met: "3 stalls over 1 ms (longest 5.7 ms), 1 over W's
/// slack; the guest's own 0".
fn stall_summary(b: &BusyCpu, slack: Duration) -> String {
    format!(
        "{} host stalls over {:.0} ms (longest {:.1} ms), {} longer than W's slack; \
         {} of the guest's own",
        b.host().count(),
        ms(stalls::MIN_STALL),
        ms(b.longest_host()),
        b.host_longer_than(slack),
        b.guest_count()
    )
}

/// The pacer's CPU kept busy while the others idle: what a sender with
/// its CPU held awake meets.
fn alone_check(b: &BusyCpu, stream: &Stream, slack: Duration) -> Check {
    let over = b.host_longer_than(slack);
    Check {
        kind: CheckKind::BusyStalls,
        name: format!(
            "CPU {} kept busy alone, as a pacer keeps it ({:.0} s, any other CPU idle)",
            b.cpu,
            b.span.as_secs_f64()
        ),
        current: stall_summary(b, slack),
        needed: format!(
            "no stall longer than W's slack, {:.0} µs, for {}{}",
            us(slack),
            stream.what,
            if b.span < Duration::from_secs(60) {
                " (sample longer, --timer-seconds 60, to see rarer ones)"
            } else {
                ""
            }
        ),
        ok: over == 0,
        fix: (over > 0).then(|| {
            format!(
                "the host did not run this vCPU for longer than a W receiver's buffer {over} \
                 time(s) in {:.0} s, and each breaks W in a frame whatever the sender does: \
                 ask for dedicated (pinned, not overcommitted) vCPUs",
                b.span.as_secs_f64()
            )
        }),
    }
}

/// Every CPU kept busy at once: what a sender meets beside a busy
/// receiver (an 8K stripe receiver on the same host).
fn together_check(all: &[BusyCpu], stream: &Stream, slack: Duration) -> Check {
    let over: usize = all.iter().map(|b| b.host_longer_than(slack)).sum();
    let both = stalls::stopped_together(all, slack);
    let per_cpu: Vec<String> = all
        .iter()
        .map(|b| format!("CPU {}: {}", b.cpu, stall_summary(b, slack)))
        .collect();
    let span = all.first().map_or(Duration::ZERO, |b| b.span);
    Check {
        kind: CheckKind::BusyStalls,
        name: format!(
            "all {} CPUs kept busy at once ({:.0} s)",
            all.len(),
            span.as_secs_f64()
        ),
        current: format!(
            "{}; every CPU stopped at once {both} time(s)",
            per_cpu.join("; ")
        ),
        needed: format!(
            "no stall longer than W's slack, {:.0} µs, for {}",
            us(slack),
            stream.what
        ),
        ok: over == 0,
        fix: (over > 0).then(|| {
            "with every vCPU busy this host stops one for longer than a W receiver's \
             buffer: leave a CPU idle beside a multi-gigabit sender (no receiver or \
             other load on the same host), or ask for dedicated vCPUs"
                .to_string()
        }),
    }
}

/// The tightest type whose slack passes both the worst p99.9 wake-up
/// and every host stall the pacer's busy CPU met.
fn type_check(floor: &[Wakeups], alone: &BusyCpu, stream: &Stream) -> Check {
    let worst = floor.iter().map(|w| w.p999).max().unwrap_or_default();
    let by_timer = SenderSchedule::tightest_holdable(&stream.model, Nanos::from(worst));
    let held = [SenderType::N, SenderType::NL, SenderType::W]
        .into_iter()
        .find(|&t| stream.slack(t) > worst && alone.host_longer_than(stream.slack(t)) == 0);
    let longest = ms(alone.longest_host());
    let current = match (held, by_timer) {
        (Some(t), _) => format!(
            "{t} (worst p99.9 wake-up {:.0} µs; longest stall of the pacer's busy CPU \
             {longest:.1} ms)",
            us(worst)
        ),
        (None, None) => format!("none (worst p99.9 wake-up {:.0} µs)", us(worst)),
        (None, Some(t)) => format!(
            "none: {t} by the wake-ups (worst p99.9 {:.0} µs), but the host stopped the \
             pacer's busy CPU longer than W's slack {} time(s) in {:.0} s (longest \
             {longest:.1} ms)",
            us(worst),
            alone.host_longer_than(stream.slack(SenderType::W)),
            alone.span.as_secs_f64(),
        ),
    };
    Check {
        kind: CheckKind::SenderType,
        name: format!(
            "tightest ST 2110-21 sender type this host holds for {}",
            stream.what
        ),
        current,
        needed: format!(
            "a type whose slack passes the p99.9 wake-up and every stall of the pacer's \
             busy CPU: N {:.0} µs, NL {:.0} µs, W {:.0} µs",
            us(stream.slack(SenderType::N)),
            us(stream.slack(SenderType::NL)),
            us(stream.slack(SenderType::W))
        ),
        ok: held.is_some(),
        fix: None,
    }
}
