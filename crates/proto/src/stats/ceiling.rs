//! A load test's ceilings: the most streams whose frame drop stayed
//! within [`MAX_FRAME_DROP`], and the most that stayed clean (no loss,
//! the worst stream's schedule deviation p99 within [`CLEAN_DEVIATION`]),
//! said honestly: a ramp that ended with nothing broken found no limit,
//! and its last count is a floor, not a ceiling.

use std::fmt;

use crate::units::Nanos;

/// Frame drop past which a step is over the ceiling (and a ramp stops).
pub const MAX_FRAME_DROP: f64 = 0.01;

/// The worst stream's schedule deviation p99 a clean step stays within:
/// what a receiver's jitter buffer of a quarter millisecond absorbs.
pub const CLEAN_DEVIATION: Nanos = Nanos::from_micros(250);

/// What one step measured, as the ceilings judge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFigures {
    /// Concurrent streams.
    pub streams: usize,
    /// Frames with a gap over frames seen (1.0 when a stream delivered
    /// nothing).
    pub frame_drop_ratio: f64,
    /// Datagrams lost, all streams.
    pub lost: u64,
    /// The worst stream's p99 deviation from its schedule.
    pub deviation_p99_worst: Nanos,
}

impl StepFigures {
    /// Frame drop past [`MAX_FRAME_DROP`]: the ramp goes no further.
    pub fn over(&self) -> bool {
        self.frame_drop_ratio > MAX_FRAME_DROP
    }

    /// No loss and the worst deviation p99 within [`CLEAN_DEVIATION`].
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.deviation_p99_worst <= CLEAN_DEVIATION
    }
}

/// A ceiling, found or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// The most streams within, before the first count that broke it.
    Found(usize),
    /// Every step was within: the last count is a floor, no limit was
    /// found within the ramp.
    NotReached(usize),
    /// The first step, of this many streams, already broke it.
    Below(usize),
    /// No step was measured.
    Untested,
}

impl Ceiling {
    /// The ceiling of `steps` (in ramp order) by `within`: the count of
    /// the last step before the first that is not within.
    pub fn of(steps: &[StepFigures], within: impl Fn(&StepFigures) -> bool) -> Ceiling {
        let held = steps.iter().take_while(|s| within(s)).count();
        match (held, steps.len()) {
            (_, 0) => Ceiling::Untested,
            (0, _) => Ceiling::Below(steps[0].streams),
            (h, n) if h == n => Ceiling::NotReached(steps[h - 1].streams),
            (h, _) => Ceiling::Found(steps[h - 1].streams),
        }
    }

    /// The frame-drop ceiling: within [`MAX_FRAME_DROP`].
    pub fn frame_drop(steps: &[StepFigures]) -> Ceiling {
        Ceiling::of(steps, |s| !s.over())
    }

    /// The clean ceiling: no loss, deviation within [`CLEAN_DEVIATION`].
    pub fn clean(steps: &[StepFigures]) -> Ceiling {
        Ceiling::of(steps, StepFigures::clean)
    }

    /// The count that held, found or a floor.
    pub const fn count(&self) -> Option<usize> {
        match self {
            Ceiling::Found(n) | Ceiling::NotReached(n) => Some(*n),
            Ceiling::Below(_) | Ceiling::Untested => None,
        }
    }

    /// Whether a step broke it.
    pub const fn found(&self) -> bool {
        matches!(self, Ceiling::Found(_) | Ceiling::Below(_))
    }
}

impl fmt::Display for Ceiling {
    /// `50`, `≥ 50 (no limit found within the ramp)`, `below 10 (the
    /// first step already broke it)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ceiling::Found(n) => write!(f, "{n}"),
            Ceiling::NotReached(n) => write!(f, "≥ {n} (no limit found within the ramp)"),
            Ceiling::Below(n) => write!(f, "below {n} (the first step already broke it)"),
            Ceiling::Untested => f.write_str("none (no step was measured)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(streams: usize, drop: f64, lost: u64, p99_us: u64) -> StepFigures {
        StepFigures {
            streams,
            frame_drop_ratio: drop,
            lost,
            deviation_p99_worst: Nanos::from_micros(p99_us),
        }
    }

    #[test]
    fn a_ramp_that_broke_nothing_found_no_limit() {
        let steps = [
            step(10, 0.0, 0, 20),
            step(30, 0.0, 0, 40),
            step(50, 0.002, 3, 90),
        ];
        let c = Ceiling::frame_drop(&steps);
        assert_eq!(c, Ceiling::NotReached(50));
        assert_eq!(c.to_string(), "≥ 50 (no limit found within the ramp)");
        assert_eq!((c.count(), c.found()), (Some(50), false));
        // The loss at 50 breaks the clean ceiling, which is found.
        let c = Ceiling::clean(&steps);
        assert_eq!(
            (c, c.to_string(), c.found()),
            (Ceiling::Found(30), "30".into(), true)
        );
    }

    #[test]
    fn the_ceiling_is_the_step_before_the_first_that_broke() {
        let steps = [
            step(10, 0.0, 0, 20),
            step(20, 0.005, 0, 300),
            step(30, 0.2, 9, 900),
        ];
        assert_eq!(Ceiling::frame_drop(&steps), Ceiling::Found(20));
        // 300 µs at 20 streams is past the clean 250 µs.
        assert_eq!(Ceiling::clean(&steps), Ceiling::Found(10));
        let first = [step(100, 0.5, 40, 20)];
        let c = Ceiling::frame_drop(&first);
        assert_eq!(c.to_string(), "below 100 (the first step already broke it)");
        assert_eq!((c.count(), c.found()), (None, true));
        assert_eq!(Ceiling::clean(&[]), Ceiling::Untested);
        // Exactly at the limits is within.
        assert!(!step(1, MAX_FRAME_DROP, 0, 250).over());
        assert!(step(1, 0.0, 0, 250).clean());
    }
}
