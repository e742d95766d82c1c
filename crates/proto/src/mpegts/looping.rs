//! Joining the passes of a looped file into one valid stream.
//!
//! Sent again from its first packet, a file's continuity counters jump
//! back (a receiver counts lost packets) and so does its PCR. Restamping
//! the counters per PID so that each pass continues the last one, and
//! flagging the first PCR of each new pass as a discontinuity (ISO/IEC
//! 13818-1 2.4.3.5: a new time base), makes the loop legal; the PES
//! timestamps that jump with the PCR are what that flag announces.

use super::{Error, Packet, Pid};

const SEEN: u8 = 0x80;
const THIS_PASS: u8 = 0x40;

/// Rewrites packets of a looped file in place (see the module docs). The
/// first pass goes out unchanged.
#[derive(Debug, Clone)]
pub struct LoopStamper {
    // Per PID: SEEN (any pass), THIS_PASS, last counter sent.
    state: Box<[u8]>,
    // Per PID: what this pass adds to the file's counter.
    offset: Box<[u8]>,
    pass: u64,
    pcr_flagged: bool,
}

impl Default for LoopStamper {
    fn default() -> Self {
        Self::new()
    }
}

impl LoopStamper {
    /// A stamper for the first pass.
    pub fn new() -> LoopStamper {
        LoopStamper {
            state: vec![0u8; 8192].into_boxed_slice(),
            offset: vec![0u8; 8192].into_boxed_slice(),
            pass: 0,
            pcr_flagged: false,
        }
    }

    /// The file starts over from its first packet.
    pub fn next_pass(&mut self) {
        self.pass += 1;
        self.pcr_flagged = false;
        for s in self.state.iter_mut() {
            *s &= !THIS_PASS;
        }
    }

    /// Passes begun after the first.
    pub fn loops(&self) -> u64 {
        self.pass
    }

    /// Restamps one packet of the current pass, in file order. A packet
    /// that does not parse is left alone and reported.
    pub fn stamp(&mut self, packet: &mut [u8]) -> Result<(), Error> {
        let mut p = Packet::new_checked(packet)?;
        let pid = p.pid();
        if pid == Pid::NULL {
            return Ok(());
        }
        let i = usize::from(pid.0 & 0x1fff);
        let cc = p.continuity_counter();
        if self.state[i] & THIS_PASS == 0 {
            // The PID's first packet in this pass continues the last pass
            // (the counter advances only with a payload).
            self.offset[i] = if self.state[i] & SEEN != 0 {
                let last = self.state[i] & 0x0f;
                let want = (last + u8::from(p.has_payload())) & 0x0f;
                want.wrapping_sub(cc) & 0x0f
            } else {
                0
            };
        }
        let out = (cc + self.offset[i]) & 0x0f;
        p.set_continuity_counter(out);
        if self.pass > 0 && !self.pcr_flagged && p.pcr().is_some() {
            self.pcr_flagged = p.set_discontinuity();
        }
        self.state[i] = SEEN | THIS_PASS | out;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpegts::{Continuity, ContinuityChecker, PACKET_LEN, synth};

    #[test]
    fn three_passes_have_no_continuity_errors() {
        // 250 packets: PAT/PMT/PES counters end mid-cycle, so a plain
        // loop would jump on every PID.
        let file = synth::stream(250, 6_000_000, 20, 0);
        let mut stamper = LoopStamper::new();
        let mut checker = ContinuityChecker::new();
        let mut flagged = Vec::new();
        for pass in 0..3 {
            if pass > 0 {
                stamper.next_pass();
            }
            let mut copy = file.clone();
            for (i, p) in copy.chunks_mut(PACKET_LEN).enumerate() {
                stamper.stamp(p).unwrap();
                let view = Packet::new_checked(&*p).unwrap();
                let c = checker.check(&view);
                if view.discontinuity() {
                    flagged.push((pass, i));
                    assert_eq!(c, Continuity::Discontinuity);
                }
            }
        }
        assert_eq!(checker.counters().errors, 0);
        // Only the first PCR of passes 2 and 3.
        assert_eq!(flagged, [(1, 2), (2, 2)]);
        assert_eq!(stamper.loops(), 2);

        // Without the stamper the same loop is full of errors.
        let mut checker = ContinuityChecker::new();
        for _ in 0..2 {
            for p in file.chunks(PACKET_LEN) {
                checker.check(&Packet::new_checked(p).unwrap());
            }
        }
        assert_eq!(checker.counters().errors, 3);
    }

    #[test]
    fn the_first_pass_is_unchanged_and_junk_is_reported() {
        let file = synth::stream(50, 6_000_000, 20, 0);
        let mut copy = file.clone();
        let mut stamper = LoopStamper::new();
        for p in copy.chunks_mut(PACKET_LEN) {
            stamper.stamp(p).unwrap();
        }
        assert_eq!(copy, file);
        let mut junk = [0u8; PACKET_LEN];
        assert_eq!(stamper.stamp(&mut junk), Err(Error::SyncByte { found: 0 }));
    }
}
