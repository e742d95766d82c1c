//! Verdicts that explain themselves: which frames broke a sender type, by
//! which measure and by how much ([`Breach`], kept worst first in a
//! bounded [`BreachLog`] per type), and a verdict in plain words beside
//! the standard's terms ([`Verdict::plain`]).
//!
//! A stream verdict is the worst of its frames, so one bad frame in a
//! thousand makes a whole run "not compliant": the breaches say which
//! frame, when and by how much, so a reader can tell a sender that is
//! always wrong from one that stalled once.

use serde::{Deserialize, Serialize};

use super::analyzer::{Compliance, FrameReport, Verdict, VrxRange};
use super::model::{Limits, ReadSchedule, SenderType};
use crate::units::Nanos;

/// Breaches kept per type: the worst, so memory stays bounded however
/// long a stream runs; [`BreachLog::total`] counts them all.
pub const MAX_BREACHES: usize = 1000;

/// What a frame broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Cinst over CMAX: a burst longer than the receiver's bucket takes.
    Cinst,
    /// VRX below zero: a read found the virtual receiver's buffer empty,
    /// packets came late.
    VrxEmpty,
    /// VRX over VRX_FULL: the buffer overflowed, packets came early.
    VrxFull,
}

impl Measure {
    /// The standard's name of the measure: `Cinst` or `VRX`.
    pub const fn name(self) -> &'static str {
        match self {
            Measure::Cinst => "Cinst",
            Measure::VrxEmpty | Measure::VrxFull => "VRX",
        }
    }
}

/// One frame that broke a sender type's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breach {
    /// The frame's place among the frames judged, from 0.
    pub index: u64,
    /// Its epoch frame N.
    pub epoch_frame: u64,
    /// When its first packet arrived.
    pub first_arrival: Nanos,
    /// The type it was held to.
    pub sender: SenderType,
    /// What broke.
    pub measure: Measure,
    /// The measure's value in the frame, packets (VRX's lowest for
    /// [`Measure::VrxEmpty`], else the peak).
    pub value: i64,
    /// The limit it crossed, packets (0 for an empty buffer).
    pub limit: i64,
    /// By how many packets, always above 0.
    pub margin: i64,
}

impl Breach {
    /// How frame `r` broke `sender`'s limits, if it did: a burst over
    /// CMAX first (no receiver of the type takes it, whatever its buffer
    /// did), else the VRX of the type's read schedule (W: the schedule
    /// that fared better). `None` exactly when [`FrameReport::keeps`].
    pub fn of(limits: &Limits, sender: SenderType, r: &FrameReport) -> Option<Breach> {
        let at = |measure, value: i64, limit: i64, margin| Breach {
            index: r.index,
            epoch_frame: r.epoch_frame,
            first_arrival: r.first_arrival,
            sender,
            measure,
            value,
            limit,
            margin,
        };
        let cmax = signed(limits.cmax(sender));
        let cinst = signed(r.cinst_peak);
        if cinst > cmax {
            return Some(at(Measure::Cinst, cinst, cmax, cinst - cmax));
        }
        let full = signed(limits.vrx_full(sender));
        let ranges: &[VrxRange] = match sender {
            SenderType::N => &[r.vrx_gapped],
            SenderType::NL => &[r.vrx_linear],
            SenderType::W => &[r.vrx_gapped, r.vrx_linear],
        };
        // Packets outside 0..=VRX_FULL.
        let over = |v: &VrxRange| v.min.saturating_neg().max(v.peak.saturating_sub(full));
        let best = ranges.iter().min_by_key(|v| over(v))?;
        if over(best) <= 0 {
            return None;
        }
        Some(if best.min < 0 {
            at(Measure::VrxEmpty, best.min, 0, best.min.saturating_neg())
        } else {
            at(Measure::VrxFull, best.peak, full, best.peak - full)
        })
    }

    /// The limit's name in the standard: `CMAX_NL`, `VRX_FULL_W`, or `0`
    /// for an empty buffer.
    pub const fn limit_name(&self) -> &'static str {
        match (self.measure, self.sender) {
            (Measure::Cinst, SenderType::N) => "CMAX_N",
            (Measure::Cinst, SenderType::NL) => "CMAX_NL",
            (Measure::Cinst, SenderType::W) => "CMAX_W",
            (Measure::VrxEmpty, _) => "0",
            (Measure::VrxFull, SenderType::W) => "VRX_FULL_W",
            (Measure::VrxFull, _) => "VRX_FULL_N",
        }
    }

    /// In the standard's terms: `Cinst 11 > CMAX_NL 4 by 7`,
    /// `VRX -4 < 0 by 4`.
    pub fn standard(&self) -> String {
        match self.measure {
            Measure::VrxEmpty => format!("VRX {} < 0 by {}", self.value, self.margin),
            m => format!(
                "{} {} > {} {} by {}",
                m.name(),
                self.value,
                self.limit_name(),
                self.limit,
                self.margin
            ),
        }
    }

    /// In plain words: `a burst of 12 packets at once, where a narrow
    /// linear (NL) receiver takes 5`.
    pub fn plain(&self) -> String {
        let who = self.sender.plain();
        match self.measure {
            Measure::Cinst => format!(
                "a burst of {} packets at once, where a {who} receiver takes {}",
                self.value + 1,
                self.limit + 1
            ),
            Measure::VrxEmpty => format!(
                "{} late: a {who} receiver reading on time found its buffer empty",
                packets(self.margin)
            ),
            Measure::VrxFull => format!(
                "{} early: a {who} receiver's buffer of {} overflowed",
                packets(self.margin),
                packets(self.limit)
            ),
        }
    }
}

/// `1 packet`, `2 packets`.
fn packets(n: i64) -> String {
    if n == 1 {
        "1 packet".into()
    } else {
        format!("{n} packets")
    }
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The frames that broke one sender type: all counted, the
/// [`MAX_BREACHES`] worst kept, worst first (largest margin, then the
/// earlier frame).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BreachLog {
    /// Every frame that broke the type.
    pub total: u64,
    worst: Vec<Breach>,
}

impl BreachLog {
    /// Counts `b`, keeping it if it is among the worst.
    pub fn record(&mut self, b: Breach) {
        self.total += 1;
        let at = self.worst.partition_point(|k| {
            (k.margin, std::cmp::Reverse(k.index)) >= (b.margin, std::cmp::Reverse(b.index))
        });
        if at < MAX_BREACHES {
            self.worst.insert(at, b);
            self.worst.truncate(MAX_BREACHES);
        }
    }

    /// The worst breaches, worst first.
    pub fn worst(&self) -> &[Breach] {
        &self.worst
    }
}

/// The breaches of every sender type, so the one that explains the
/// verdict can be chosen once the run is over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breaches {
    logs: [BreachLog; 3],
}

impl Breaches {
    /// Records frame `r` against every type's limits.
    pub fn record(&mut self, limits: &Limits, r: &FrameReport) {
        for (sender, log) in SenderType::ALL.into_iter().zip(&mut self.logs) {
            if let Some(b) = Breach::of(limits, sender, r) {
                log.record(b);
            }
        }
    }

    /// The frames that broke `sender`.
    pub fn of(&self, sender: SenderType) -> &BreachLog {
        let i = match sender {
            SenderType::N => 0,
            SenderType::NL => 1,
            SenderType::W => 2,
        };
        &self.logs[i]
    }
}

/// The type whose broken frames explain a verdict: the declared one when
/// the SDP (or `--tp`) names one; else the next type the stream missed,
/// the narrow type of its schedule for a W stream and W for a stream that
/// is not compliant. `None` for a narrow stream with nothing declared:
/// no frame broke what it is judged.
pub fn explained_type(declared: Option<SenderType>, verdict: &Verdict) -> Option<SenderType> {
    declared.or(match verdict.compliance {
        Compliance::Narrow | Compliance::NarrowLinear => None,
        Compliance::Wide => Some(match verdict.schedule {
            ReadSchedule::Gapped => SenderType::N,
            ReadSchedule::Linear => SenderType::NL,
        }),
        Compliance::NotCompliant => Some(SenderType::W),
    })
}

impl Compliance {
    /// The class in plain words: `narrow gapped (N)`, `not compliant
    /// with any ST 2110-21 type`.
    pub const fn plain(self) -> &'static str {
        match self {
            Compliance::Narrow => SenderType::N.plain(),
            Compliance::NarrowLinear => SenderType::NL.plain(),
            Compliance::Wide => SenderType::W.plain(),
            Compliance::NotCompliant => "not compliant with any ST 2110-21 type",
        }
    }
}

impl Verdict {
    /// The verdict in plain words, one sentence per measure: what the
    /// bursts were and what a receiver takes, then what the virtual
    /// receiver's buffer did. [`Verdict`]'s `Display` says the same in
    /// the standard's terms.
    pub fn plain(&self) -> Vec<String> {
        vec![
            format!(
                "{}, judged by a receiver that {}",
                self.compliance.plain(),
                self.schedule.plain()
            ),
            self.plain_cinst(),
            self.plain_vrx(),
        ]
    }

    fn plain_cinst(&self) -> String {
        let narrow = match self.schedule {
            ReadSchedule::Gapped => SenderType::N,
            ReadSchedule::Linear => SenderType::NL,
        };
        let (cmax, wide) = (self.limits.cmax(narrow), self.limits.cmax_w);
        let peak = self.cinst_peak;
        let name = match narrow {
            SenderType::NL => "CMAX_NL",
            _ => "CMAX_N",
        };
        if peak <= cmax {
            format!(
                "bursts: at most {} packets at once (Cinst {peak}), which a {} receiver takes ({name} {cmax})",
                peak + 1,
                narrow.plain()
            )
        } else if peak <= wide {
            format!(
                "the sender's bursts were too long for a narrow receiver: {} packets at once (Cinst {peak}), where a {} receiver takes {} ({name} {cmax}); a wide (W) receiver takes them (CMAX_W {wide})",
                peak + 1,
                narrow.plain(),
                cmax + 1
            )
        } else {
            format!(
                "the sender's bursts were too long for any receiver: {} packets at once (Cinst {peak}), where even a wide (W) receiver takes only {} (CMAX_W {wide})",
                peak + 1,
                wide + 1
            )
        }
    }

    fn plain_vrx(&self) -> String {
        let VrxRange { min, peak } = self.vrx;
        let full_n = signed(self.limits.vrx_full_n);
        let full_w = signed(self.limits.vrx_full_w);
        let mut parts = Vec::new();
        if min < 0 {
            parts.push(format!(
                "packets came late: the receiver's buffer ran dry, {} short at worst (VRX min {min} < 0)",
                packets(min.saturating_neg())
            ));
        }
        if peak > full_w {
            parts.push(format!(
                "packets came too early: even a wide receiver's buffer of {full_w} packets overflowed, by {} (VRX peak {peak} > VRX_FULL_W {full_w})",
                peak - full_w
            ));
        } else if peak > full_n {
            parts.push(format!(
                "packets came early: a narrow receiver's buffer of {} overflowed, by {}; a wide receiver's {full_w} holds them (VRX peak {peak} > VRX_FULL_N {full_n})",
                packets(full_n),
                peak - full_n
            ));
        }
        if parts.is_empty() {
            format!(
                "the receiver's buffer never ran dry and held at most {peak} packets, within a narrow receiver's {full_n} (VRX {min}..{peak})"
            )
        } else {
            parts.join("; ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{ByteSize, MediaTime};

    #[test]
    fn one_packet_is_singular() {
        assert_eq!(packets(1), "1 packet");
        assert_eq!(packets(0), "0 packets");
        assert_eq!(packets(19), "19 packets");
    }

    const LIMITS: Limits = Limits {
        cmax_n: 4,
        cmax_nl: 4,
        cmax_w: 16,
        vrx_full_n: 8,
        vrx_full_w: 720,
    };

    fn frame(index: u64, cinst: u64, gapped: (i64, i64), linear: (i64, i64)) -> FrameReport {
        let vrx = |(min, peak)| VrxRange { min, peak };
        FrameReport {
            index,
            rtp_timestamp: MediaTime(0),
            epoch_frame: 1000 + index,
            first_arrival: Nanos(index * 20_000_000),
            packets: 960,
            bytes: ByteSize(0),
            complete: true,
            cinst_peak: cinst,
            vrx_gapped: vrx(gapped),
            vrx_linear: vrx(linear),
            fpt: Nanos::ZERO,
            to_tpr0: 0,
            rtp_offset: 0,
            latency: 0,
            rtp_delta: None,
            lost: 0,
            seq_errors: 0,
            verdict: Verdict::judge(LIMITS, cinst, vrx(gapped), vrx(linear)),
        }
    }

    #[test]
    fn a_breach_is_none_exactly_when_the_frame_keeps_the_type() {
        let frames = [
            frame(0, 3, (0, 2), (0, 40)),
            frame(1, 11, (0, 2), (0, 2)),
            frame(2, 3, (-4, 2), (0, 30)),
            frame(3, 20, (-1, 900), (-2, 800)),
            frame(4, 16, (0, 720), (5, 721)),
        ];
        for f in &frames {
            for t in SenderType::ALL {
                assert_eq!(
                    Breach::of(&LIMITS, t, f).is_none(),
                    f.keeps(&LIMITS, t),
                    "frame {} type {t}",
                    f.index
                );
            }
        }
    }

    #[test]
    fn breaches_name_measure_limit_and_margin() {
        let b = Breach::of(&LIMITS, SenderType::NL, &frame(7, 11, (0, 2), (-4, 2))).unwrap();
        assert_eq!((b.index, b.epoch_frame), (7, 1007));
        assert_eq!(
            (b.measure, b.value, b.limit, b.margin),
            (Measure::Cinst, 11, 4, 7)
        );
        assert_eq!(b.standard(), "Cinst 11 > CMAX_NL 4 by 7");
        assert_eq!(
            b.plain(),
            "a burst of 12 packets at once, where a narrow linear (NL) receiver takes 5"
        );
        // Within CMAX_NL, the linear receiver ran dry.
        let b = Breach::of(&LIMITS, SenderType::NL, &frame(2, 3, (0, 2), (-4, 2))).unwrap();
        assert_eq!(b.standard(), "VRX -4 < 0 by 4");
        assert_eq!(
            b.plain(),
            "4 packets late: a narrow linear (NL) receiver reading on time found its buffer empty"
        );
        // W takes the better schedule: gapped overflows by 30, linear by 2.
        let b = Breach::of(&LIMITS, SenderType::W, &frame(3, 3, (0, 750), (0, 722))).unwrap();
        assert_eq!(b.standard(), "VRX 722 > VRX_FULL_W 720 by 2");
        assert_eq!(
            b.plain(),
            "2 packets early: a wide (W) receiver's buffer of 720 packets overflowed"
        );
    }

    #[test]
    fn the_log_keeps_the_worst_first_and_counts_all() {
        let mut log = BreachLog::default();
        for i in 0..(MAX_BREACHES as u64 + 500) {
            // Margins cycle 1..=7; frame 1300 is the one worst.
            let cinst = if i == 1300 { 16 } else { 5 + i % 7 };
            let b = Breach::of(&LIMITS, SenderType::N, &frame(i, cinst, (0, 0), (0, 0)));
            log.record(b.unwrap());
        }
        assert_eq!(log.total, MAX_BREACHES as u64 + 500);
        let w = log.worst();
        assert_eq!(w.len(), MAX_BREACHES);
        assert_eq!((w[0].index, w[0].margin), (1300, 12));
        // Then margin 7 (cinst 11, i % 7 == 6) from the earliest frame.
        assert_eq!((w[1].index, w[1].margin), (6, 7));
        assert!(w.windows(2).all(|p| p[0].margin >= p[1].margin));
    }

    #[test]
    fn the_explained_type_is_the_declared_or_the_next_one_missed() {
        let v = |cinst, linear| Verdict::judge(LIMITS, cinst, VrxRange { min: 0, peak: 0 }, linear);
        let ok = VrxRange { min: 0, peak: 0 };
        assert_eq!(explained_type(None, &v(0, ok)), None);
        assert_eq!(
            explained_type(Some(SenderType::N), &v(0, ok)),
            Some(SenderType::N)
        );
        assert_eq!(explained_type(None, &v(9, ok)), Some(SenderType::N));
        assert_eq!(explained_type(None, &v(40, ok)), Some(SenderType::W));
        let mut b = Breaches::default();
        b.record(&LIMITS, &frame(0, 9, (0, 0), (0, 0)));
        assert_eq!(b.of(SenderType::N).total, 1);
        assert_eq!(b.of(SenderType::NL).total, 1);
        assert_eq!(b.of(SenderType::W).total, 0);
    }

    #[test]
    fn a_verdict_reads_in_plain_words() {
        let v = Verdict::judge(
            LIMITS,
            11,
            VrxRange { min: -6, peak: 3 },
            VrxRange { min: -4, peak: 2 },
        );
        assert_eq!(
            v.plain(),
            [
                "not compliant with any ST 2110-21 type, judged by a receiver that reads a packet every TRS evenly over the whole frame",
                "the sender's bursts were too long for a narrow receiver: 12 packets at once (Cinst 11), where a narrow linear (NL) receiver takes 5 (CMAX_NL 4); a wide (W) receiver takes them (CMAX_W 16)",
                "packets came late: the receiver's buffer ran dry, 4 packets short at worst (VRX min -4 < 0)",
            ]
        );
        let v = Verdict::judge(
            LIMITS,
            2,
            VrxRange { min: 0, peak: 5 },
            VrxRange { min: 0, peak: 50 },
        );
        assert_eq!(
            v.plain()[1..],
            [
                "bursts: at most 3 packets at once (Cinst 2), which a narrow gapped (N) receiver takes (CMAX_N 4)",
                "the receiver's buffer never ran dry and held at most 5 packets, within a narrow receiver's 8 (VRX 0..5)",
            ]
        );
        let v = Verdict::judge(
            LIMITS,
            30,
            VrxRange { min: 0, peak: 900 },
            VrxRange { min: 0, peak: 100 },
        );
        assert_eq!(
            v.plain()[1..],
            [
                "the sender's bursts were too long for any receiver: 31 packets at once (Cinst 30), where even a wide (W) receiver takes only 17 (CMAX_W 16)",
                "packets came early: a narrow receiver's buffer of 8 packets overflowed, by 92; a wide receiver's 720 holds them (VRX peak 100 > VRX_FULL_N 8)",
            ]
        );
    }
}
