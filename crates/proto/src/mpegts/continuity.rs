//! Continuity counter checking per PID (ISO/IEC 13818-1 2.4.3.3).
//!
//! The counter advances by one (mod 16) on every packet of a PID that
//! carries a payload and stays put on adaptation-only packets. A packet may
//! be sent twice in a row (a duplicate, same counter) but not three times.
//! A set discontinuity_indicator allows any value. Null packets (PID
//! 0x1fff) carry no meaningful counter. A duplicate is recognised by its
//! counter alone, as analysers do: comparing contents would mean keeping
//! the last packet of every PID.

use super::{Packet, Pid};

/// What one packet did to its PID's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// The first packet of its PID.
    First,
    /// The expected counter.
    Ok,
    /// A permitted duplicate of the previous packet.
    Duplicate,
    /// Any counter, permitted by the discontinuity indicator.
    Discontinuity,
    /// Null packet or transport error: not checked.
    Unchecked,
    /// A counter error: packets were lost, reordered or tripled.
    Error {
        /// The PID.
        pid: Pid,
        /// The counter expected.
        expected: u8,
        /// The counter found.
        found: u8,
    },
}

/// What the checker counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContinuityCounters {
    /// Packets checked.
    pub packets: u64,
    /// Counter errors.
    pub errors: u64,
    /// Permitted duplicates.
    pub duplicates: u64,
    /// Signalled discontinuities.
    pub discontinuities: u64,
}

const SEEN: u8 = 0x80;
const WAS_DUPLICATE: u8 = 0x40;

/// Per-PID continuity state for all 8192 PIDs in one fixed 8 KiB table,
/// so no input can make it grow.
#[derive(Debug, Clone)]
pub struct ContinuityChecker {
    // Per PID: SEEN, WAS_DUPLICATE, and the last counter in the low bits.
    state: Box<[u8]>,
    counters: ContinuityCounters,
}

impl Default for ContinuityChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl ContinuityChecker {
    /// A checker that has seen nothing.
    pub fn new() -> ContinuityChecker {
        ContinuityChecker {
            state: vec![0u8; 8192].into_boxed_slice(),
            counters: ContinuityCounters::default(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> ContinuityCounters {
        self.counters
    }

    /// Checks one packet.
    pub fn check<T: AsRef<[u8]>>(&mut self, packet: &Packet<T>) -> Continuity {
        let pid = packet.pid();
        if pid == Pid::NULL || packet.transport_error() {
            return Continuity::Unchecked;
        }
        self.counters.packets += 1;
        let cc = packet.continuity_counter();
        let slot = &mut self.state[usize::from(pid.0 & 0x1fff)];
        let prev = *slot;
        *slot = SEEN | cc;
        if prev & SEEN == 0 {
            return Continuity::First;
        }
        if packet.discontinuity() {
            self.counters.discontinuities += 1;
            return Continuity::Discontinuity;
        }
        let last = prev & 0x0f;
        if !packet.has_payload() {
            if cc == last {
                return Continuity::Ok;
            }
            self.counters.errors += 1;
            let expected = last;
            return Continuity::Error {
                pid,
                expected,
                found: cc,
            };
        }
        let expected = (last + 1) & 0x0f;
        if cc == expected {
            return Continuity::Ok;
        }
        if cc == last && prev & WAS_DUPLICATE == 0 {
            *slot |= WAS_DUPLICATE;
            self.counters.duplicates += 1;
            return Continuity::Duplicate;
        }
        self.counters.errors += 1;
        Continuity::Error {
            pid,
            expected,
            found: cc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpegts::synth;

    fn run(packets: &[[u8; 188]]) -> (Vec<Continuity>, ContinuityCounters) {
        let mut c = ContinuityChecker::new();
        let out = packets
            .iter()
            .map(|p| c.check(&Packet::new_checked(&p[..]).unwrap()))
            .collect();
        (out, c.counters())
    }

    #[test]
    fn counters_advance_wrap_and_allow_one_duplicate() {
        let p = |cc| synth::packet(0x100, cc, None, false, 0);
        let (out, n) = run(&[p(14), p(15), p(0), p(0), p(1), p(1), p(1), p(3)]);
        use Continuity::*;
        let pid = Pid(0x100);
        assert_eq!(
            out,
            [
                First,
                Ok,
                Ok,
                Duplicate,
                Ok,
                Duplicate,
                Error {
                    pid,
                    expected: 2,
                    found: 1
                },
                Error {
                    pid,
                    expected: 2,
                    found: 3
                },
            ]
        );
        assert_eq!((n.packets, n.errors, n.duplicates), (8, 2, 2));
    }

    #[test]
    fn pids_are_independent_and_null_packets_unchecked() {
        let a = |cc| synth::packet(0x100, cc, None, false, 0);
        let b = |cc| synth::packet(0x101, cc, None, false, 0);
        let null = synth::packet(0x1fff, 7, None, false, 0);
        let (out, n) = run(&[a(0), b(9), null, a(1), null, b(10)]);
        assert_eq!(out[2], Continuity::Unchecked);
        assert_eq!(out[3], Continuity::Ok);
        assert_eq!(out[5], Continuity::Ok);
        assert_eq!((n.packets, n.errors), (4, 0));
    }

    #[test]
    fn adaptation_only_packets_keep_the_counter_and_discontinuity_resets() {
        let payload = synth::packet(0x100, 4, None, false, 0);
        let af_only = synth::adaptation_only(0x100, 4, None);
        let jump = synth::packet(0x100, 11, Some(super::super::Pcr(0)), true, 0);
        let next = synth::packet(0x100, 12, None, false, 0);
        let bad_af = synth::adaptation_only(0x100, 5, None);
        let (out, n) = run(&[payload, af_only, jump, next, bad_af]);
        assert_eq!(out[1], Continuity::Ok);
        assert_eq!(out[2], Continuity::Discontinuity);
        assert_eq!(out[3], Continuity::Ok);
        assert_eq!(
            out[4],
            Continuity::Error {
                pid: Pid(0x100),
                expected: 12,
                found: 5
            }
        );
        assert_eq!((n.errors, n.discontinuities), (1, 1));
    }
}
