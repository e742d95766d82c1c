//! The monitor's events gathered into what `analyze` shows: a line per
//! second, the per-frame series the plot draws, and the final report.

use nagare_api::st2110::{
    AnalyzeReport, Bin, BrokenFrame, Range, RasterReport, SecondLine, StreamModel, VerdictReport,
    VrxSummary,
};
use nagare_proto::Nanos;
use nagare_proto::video::st2110_21::{
    Analyzer, Breach, Breaches, FrameReport, Model, Monitor, MonitorEvent, MonitorStats,
    ReadSchedule, SenderType, Spread, Verdict, VrxRange, VrxStats, explained_type,
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
    /// Every frame held to every type's limits.
    breaches: Breaches,
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
            breaches: Breaches::default(),
        }
    }

    /// Broken frames are timed on a sender's timeline whose zero is epoch
    /// time `epoch_base` (send's self-check), not from the first frame.
    pub(crate) fn set_timeline(&mut self, epoch_base: i128) {
        self.timeline = Some(epoch_base);
    }

    /// Holds `r` against every type's limits (proto's rule).
    fn judge(&mut self, r: &FrameReport) {
        if let Some(limits) = self.model.map(|m| m.limits()) {
            self.breaches.record(&limits, r);
        }
    }

    /// Seconds from the timeline's zero to `at`: the sender's timeline for
    /// send's self-check, else the first judged frame.
    fn at_s(&self, at: Nanos) -> f64 {
        match (self.timeline, self.start) {
            (Some(base), _) => (i128::from(at.0) - base) as f64 / 1e9,
            (None, Some(start)) => at.saturating_sub(start).as_secs_f64(),
            (None, None) => 0.0,
        }
    }

    /// The packets' raster against the size given, from the monitor
    /// (analyze and recv --analyze; send's self-check has no packets).
    pub(crate) fn inspect(&mut self, m: &Monitor) {
        let r = m.raster();
        self.report.raster = r.lines.map(|lines| RasterReport {
            lines: Some(lines),
            max_offset: r.max_offset,
            width: r.width,
        });
        self.report.size_mismatch = m.size_mismatch().map(|s| s.to_string());
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
        self.judge(r);
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
        datagram_counts(&mut self.report, stats, other);
        if let Some(a) = analyzer {
            summarise(&mut self.report, a);
            self.explain();
        }
        (self.report, self.points)
    }
}

impl Collector {
    /// The frames that broke the type that explains the verdict.
    fn explain(&mut self) {
        let Some(v) = &self.report.verdict else {
            return;
        };
        let verdict = Verdict {
            compliance: v.compliance,
            schedule: v.schedule,
            cinst_peak: v.cinst_peak,
            vrx: v.vrx,
            limits: match &self.report.model {
                Some(m) => m.limits,
                None => return,
            },
        };
        let Some(kind) = explained_type(self.report.declared, &verdict) else {
            return;
        };
        let log = self.breaches.of(kind);
        self.report.broken_type = Some(kind);
        self.report.broken_total = log.total;
        self.report.broken = log.worst().iter().map(|b| self.broken(b)).collect();
    }

    fn broken(&self, b: &Breach) -> BrokenFrame {
        BrokenFrame {
            index: b.index,
            epoch_frame: b.epoch_frame,
            at_s: self.at_s(b.first_arrival),
            measure: b.measure.name().into(),
            kind: Some(b.measure),
            limit_name: b.limit_name().into(),
            value: b.value,
            limit: b.limit,
            margin: b.margin,
            plain: b.plain(),
            standard: b.standard(),
        }
    }
}

fn datagram_counts(r: &mut AnalyzeReport, stats: MonitorStats, other: u64) {
    r.not_rtp = stats.not_rtp;
    r.not_video = stats.not_video;
    r.foreign = stats.foreign;
    r.other = other;
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
    r.frames_kept = s.kept;
    r.cinst = s.cinst.summary(1.0);
    r.cinst_histogram = bins(s.cinst.bins(1, 200), 1);
    r.vrx_gapped = vrx_summary(&s.vrx_gapped);
    r.vrx_linear = vrx_summary(&s.vrx_linear);
    r.fpt_us = s.fpt.summary(1e3);
    r.fpt_histogram_us = bins(s.fpt.bins(10_000, 30), 1000);
    r.rtp_offset_ticks = range(&s.rtp_offset, 1.0);
    r.latency_us = range(&s.latency, 1e3);
    r.rtp_clock = s.rtp_clock();
    r.grid_lag_us = s.grid_lag().map(|(min, mean, max)| Range {
        min: Some(min / 1000),
        mean: mean / 1e3,
        max: Some((max as f64 / 1e3).round() as i64),
    });
    r.rtp_delta_ticks = range(&s.rtp_delta, 1.0);
    if let Some(v) = s.verdict() {
        r.verdict = Some(VerdictReport {
            compliance: v.compliance,
            schedule: v.schedule,
            cinst_peak: v.cinst_peak,
            vrx: v.vrx,
            text: v.to_string(),
            plain: v.plain(),
        });
    }
    r.declared_met = r.declared.and_then(|t| s.complies_with(t));
}
