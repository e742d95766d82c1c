//! The monitor's events gathered into what `analyze` shows: a line per
//! second, the per-frame series the plot draws, and the final report.

use nagare_api::st2110::{
    AnalyzeReport, Bin, BrokenFrame, Range, SecondLine, StreamModel, VerdictReport, VrxSummary,
};
use nagare_proto::Nanos;
use nagare_proto::video::st2110_21::{
    Analyzer, FrameReport, Limits, Model, MonitorEvent, MonitorStats, ReadSchedule, SenderType,
    Spread, Verdict, VrxRange, VrxStats,
};

/// Frames kept for the plot; past this, every other point is dropped and
/// the keeping stride doubles, so a long run costs bounded memory.
const MAX_POINTS: usize = 20_000;

/// One frame, as the plot draws it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FramePoint {
    /// Seconds since the first frame.
    pub t: f64,
    /// Highest Cinst of its packets.
    pub cinst_peak: u64,
    /// VRX of the gapped receiver.
    pub vrx_gapped: VrxRange,
    /// VRX of the linear receiver.
    pub vrx_linear: VrxRange,
}

/// The frames of the second being gathered.
struct Second {
    index: u64,
    frames: u64,
    cinst_peak: u64,
    gapped: VrxRange,
    linear: VrxRange,
    fpt_max: Nanos,
    lost: u64,
}

/// Gathers events (see the module docs).
pub(crate) struct Collector {
    report: AnalyzeReport,
    model: Option<Model>,
    start: Option<Nanos>,
    second: Option<Second>,
    /// Per-frame series for the plot, every `stride`-th frame.
    pub points: Vec<FramePoint>,
    stride: u64,
    seen: u64,
    /// Where `at_s` of a broken frame counts from (`None`: the first frame).
    timeline: Option<i128>,
}

fn widen(a: &mut VrxRange, b: VrxRange) {
    a.min = a.min.min(b.min);
    a.peak = a.peak.max(b.peak);
}

impl Collector {
    /// A collector for a report about `source`.
    pub(crate) fn new(source: String, declared: Option<SenderType>) -> Collector {
        Collector {
            report: AnalyzeReport {
                source,
                declared,
                ..AnalyzeReport::default()
            },
            model: None,
            start: None,
            second: None,
            points: Vec::new(),
            stride: 1,
            seen: 0,
            timeline: None,
        }
    }

    /// Broken frames are timed on a sender's timeline whose zero is epoch
    /// time `epoch_base` (send's self-check), not from the first frame.
    pub(crate) fn set_timeline(&mut self, epoch_base: i128) {
        self.timeline = Some(epoch_base);
    }

    /// Notes `r` if it broke the declared type (W when none was declared).
    fn judge(&mut self, r: &FrameReport, since: Nanos) {
        let Some(limits) = self.model.map(|m| m.limits()) else {
            return;
        };
        let kind = self.report.declared.unwrap_or(SenderType::W);
        let Some(broken) = broken_frame(&limits, kind, r) else {
            return;
        };
        let at_s = match self.timeline {
            Some(base) => (i128::from(r.first_arrival.0) - base) as f64 / 1e9,
            None => since.as_secs_f64(),
        };
        self.report.broken_total += 1;
        let list = &mut self.report.broken;
        let at = list.partition_point(|b| b.margin >= broken.margin);
        if at < AnalyzeReport::MAX_BROKEN {
            list.insert(at, BrokenFrame { at_s, ..broken });
            list.truncate(AnalyzeReport::MAX_BROKEN);
        }
    }

    /// Takes one event; returns the line of a second that just ended.
    pub(crate) fn event(&mut self, e: MonitorEvent) -> Option<SecondLine> {
        match e {
            MonitorEvent::Stream { ssrc } => self.report.ssrc = Some(ssrc.0),
            MonitorEvent::Model(m) => {
                self.model = Some(m);
                self.report.model = Some(stream_model(&m));
            }
            MonitorEvent::Frame(r) => return self.frame(&r),
            MonitorEvent::Failed(e) => self.report.error = Some(e.to_string()),
        }
        None
    }

    fn frame(&mut self, r: &FrameReport) -> Option<SecondLine> {
        let start = *self.start.get_or_insert(r.first_arrival);
        let since = r.first_arrival.saturating_sub(start);
        let index = since.0 / 1_000_000_000;
        self.point(since, r);
        self.judge(r, since);
        let ended = match &self.second {
            Some(s) if s.index != index => self.close_second(),
            _ => None,
        };
        let s = self.second.get_or_insert(Second {
            index,
            frames: 0,
            cinst_peak: 0,
            gapped: r.vrx_gapped,
            linear: r.vrx_linear,
            fpt_max: Nanos::ZERO,
            lost: 0,
        });
        s.frames += 1;
        s.cinst_peak = s.cinst_peak.max(r.cinst_peak);
        widen(&mut s.gapped, r.vrx_gapped);
        widen(&mut s.linear, r.vrx_linear);
        s.fpt_max = s.fpt_max.max(r.fpt);
        s.lost += r.lost;
        ended
    }

    fn point(&mut self, since: Nanos, r: &FrameReport) {
        self.seen += 1;
        if (self.seen - 1) % self.stride != 0 {
            return;
        }
        self.points.push(FramePoint {
            t: since.as_secs_f64(),
            cinst_peak: r.cinst_peak,
            vrx_gapped: r.vrx_gapped,
            vrx_linear: r.vrx_linear,
        });
        if self.points.len() >= MAX_POINTS {
            let kept: Vec<FramePoint> = self.points.iter().step_by(2).copied().collect();
            self.points = kept;
            self.stride *= 2;
        }
    }

    /// Ends the second being gathered, returning its line.
    pub(crate) fn close_second(&mut self) -> Option<SecondLine> {
        let s = self.second.take()?;
        let limits = self.model?.limits();
        let verdict = Verdict::judge(limits, s.cinst_peak, s.gapped, s.linear);
        let line = SecondLine {
            second: s.index,
            frames: s.frames,
            cinst_peak: s.cinst_peak,
            vrx_gapped: s.gapped,
            vrx_linear: s.linear,
            fpt_max_us: s.fpt_max.0 as f64 / 1e3,
            lost: s.lost,
            compliance: verdict.compliance,
        };
        if self.report.seconds.len() < AnalyzeReport::MAX_SECONDS {
            self.report.seconds.push(line.clone());
        }
        Some(line)
    }

    /// The final report, from the analyser's summary and the datagram
    /// counters.
    pub(crate) fn finish(
        mut self,
        analyzer: Option<&Analyzer>,
        stats: MonitorStats,
        other: u64,
    ) -> (AnalyzeReport, Vec<FramePoint>) {
        self.close_second();
        let mut r = self.report;
        r.not_rtp = stats.not_rtp;
        r.foreign = stats.foreign;
        r.other = other;
        if let Some(a) = analyzer {
            summarise(&mut r, a);
        }
        (r, self.points)
    }
}

fn stream_model(m: &Model) -> StreamModel {
    StreamModel {
        packets: m.packets(),
        rate: m.rate().sdp_value(),
        lines: m.lines(),
        trs_ns: m.trs(ReadSchedule::Gapped).as_f64(),
        trs_linear_ns: m.trs(ReadSchedule::Linear).as_f64(),
        tr_offset_ns: m.tr_offset().as_f64(),
        drain_ns: m.drain_period().as_f64(),
        limits: m.limits(),
    }
}

fn vrx_summary(v: &VrxStats) -> VrxSummary {
    VrxSummary {
        range: v.range,
        underflows: v.underflows,
        quantiles: v.values.summary(1.0),
    }
}

fn range(s: &Spread, scale: f64) -> Range {
    let at = |v: Option<i64>| v.map(|v| (v as f64 / scale).round() as i64);
    Range {
        min: at(s.min()),
        mean: s.mean() / scale,
        max: at(s.max()),
    }
}

fn bins(v: Vec<(u64, u64)>, scale: u64) -> Vec<Bin> {
    let i = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    v.into_iter().map(|(lo, n)| [i(lo / scale), i(n)]).collect()
}

/// Copies the analyser's summary into the report.
/// How frame `r` broke sender type `kind`, if it did: a burst over CMAX
/// first (it breaks every receiver), else the VRX of the read schedule
/// that fared better.
fn broken_frame(limits: &Limits, kind: SenderType, r: &FrameReport) -> Option<BrokenFrame> {
    let cmax = limits.cmax(kind);
    if r.cinst_peak > cmax {
        let (value, limit) = (r.cinst_peak as i64, cmax as i64);
        return Some(BrokenFrame {
            epoch_frame: r.epoch_frame,
            measure: "Cinst".into(),
            value,
            limit,
            margin: value - limit,
            plain: format!(
                "a burst of {} packets at once where a {} receiver takes {}",
                value + 1,
                kind.name(),
                limit + 1
            ),
            ..BrokenFrame::default()
        });
    }
    let full = limits.vrx_full(kind) as i64;
    let ranges: &[VrxRange] = match kind {
        SenderType::N => &[r.vrx_gapped],
        SenderType::NL => &[r.vrx_linear],
        SenderType::W => &[r.vrx_gapped, r.vrx_linear],
    };
    // Packets outside 0..=VRX_FULL in the better schedule.
    let over = |v: &VrxRange| (-v.min).max(v.peak - full).max(0);
    let best = ranges.iter().min_by_key(|v| over(v))?;
    if over(best) == 0 {
        return None;
    }
    let (value, limit, plain) = if best.min < 0 {
        (
            best.min,
            0,
            format!(
                "packets came {} too late for a receiver reading on time: its buffer ran dry",
                -best.min
            ),
        )
    } else {
        (
            best.peak,
            full,
            format!(
                "{} packets came too early: the receiver's buffer of {full} overflowed",
                best.peak - full
            ),
        )
    };
    Some(BrokenFrame {
        epoch_frame: r.epoch_frame,
        measure: "VRX".into(),
        value,
        limit,
        margin: over(best),
        plain,
        ..BrokenFrame::default()
    })
}

fn summarise(r: &mut AnalyzeReport, a: &Analyzer) {
    let s = a.summary();
    r.frames = s.frames;
    r.incomplete_frames = s.incomplete_frames;
    r.packets = s.packets;
    r.bytes = s.bytes.0;
    r.lost = s.lost;
    r.seq_errors = s.seq_errors;
    r.backwards = s.backwards;
    r.frame_verdicts = s.frame_verdicts;
    r.cinst = s.cinst.summary(1.0);
    r.cinst_histogram = bins(s.cinst.bins(1, 200), 1);
    r.vrx_gapped = vrx_summary(&s.vrx_gapped);
    r.vrx_linear = vrx_summary(&s.vrx_linear);
    r.fpt_us = s.fpt.summary(1e3);
    r.fpt_histogram_us = bins(s.fpt.bins(10_000, 30), 1000);
    r.rtp_offset_ticks = range(&s.rtp_offset, 1.0);
    r.latency_us = range(&s.latency, 1e3);
    r.rtp_delta_ticks = range(&s.rtp_delta, 1.0);
    if let Some(v) = s.verdict() {
        r.verdict = Some(VerdictReport {
            compliance: v.compliance,
            schedule: v.schedule,
            cinst_peak: v.cinst_peak,
            vrx: v.vrx,
            text: v.to_string(),
        });
    }
    r.declared_met = r.declared.and_then(|t| s.complies_with(t));
}
