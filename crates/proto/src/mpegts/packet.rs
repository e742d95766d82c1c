//! The 188-byte transport packet (ISO/IEC 13818-1 2.4.3.2) as a checked
//! view, smoltcp style: `new_checked` validates once, then no accessor can
//! read out of bounds, whatever bytes came from the file or the network.

use std::fmt;

use super::Error;

/// Bytes in a transport packet.
pub const PACKET_LEN: usize = 188;
/// The first byte of every packet.
pub const SYNC_BYTE: u8 = 0x47;
/// The PCR clock: 27 MHz.
pub const PCR_HZ: u64 = 27_000_000;
/// PCR values wrap at 2^33 * 300 ticks (about 26.5 hours).
pub const PCR_MODULUS: u64 = (1 << 33) * 300;

/// A 13-bit packet identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pid(pub u16);

impl Pid {
    /// The program association table.
    pub const PAT: Pid = Pid(0);
    /// Null (stuffing) packets.
    pub const NULL: Pid = Pid(0x1fff);
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

/// A program clock reference: ticks of the 27 MHz clock, modulo
/// [`PCR_MODULUS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pcr(pub u64);

impl Pcr {
    /// From the 33-bit base (90 kHz) and 9-bit extension (0..300).
    pub fn from_parts(base: u64, extension: u16) -> Pcr {
        Pcr(((base & ((1 << 33) - 1)) * 300 + u64::from(extension & 0x1ff)) % PCR_MODULUS)
    }

    /// The 90 kHz base.
    pub fn base(self) -> u64 {
        self.0 / 300
    }

    /// The 27 MHz extension.
    pub fn extension(self) -> u16 {
        (self.0 % 300) as u16
    }

    /// Ticks from `earlier` to `self` going forward round the wrap.
    pub fn ticks_since(self, earlier: Pcr) -> u64 {
        (self.0 % PCR_MODULUS + PCR_MODULUS - earlier.0 % PCR_MODULUS) % PCR_MODULUS
    }

    /// The six bytes of the adaptation field's PCR.
    pub fn to_bytes(self) -> [u8; 6] {
        let base = self.base();
        let ext = self.extension();
        [
            (base >> 25) as u8,
            (base >> 17) as u8,
            (base >> 9) as u8,
            (base >> 1) as u8,
            ((base & 1) << 7) as u8 | 0x7e | (ext >> 8) as u8,
            ext as u8,
        ]
    }

    fn from_bytes(b: &[u8; 6]) -> Pcr {
        let base = (u64::from(b[0]) << 25)
            | (u64::from(b[1]) << 17)
            | (u64::from(b[2]) << 9)
            | (u64::from(b[3]) << 1)
            | (u64::from(b[4]) >> 7);
        let ext = (u16::from(b[4] & 1) << 8) | u16::from(b[5]);
        Pcr::from_parts(base, ext)
    }
}

/// A validated view of one transport packet (the first 188 bytes of the
/// buffer).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    pub(super) const AF_LEN: usize = 4;
    pub(super) const AF_FLAGS: usize = 5;
    pub(super) const PCR: std::ops::Range<usize> = 6..12;
}

const DISCONTINUITY: u8 = 0x80;
const RANDOM_ACCESS: u8 = 0x40;
const PCR_FLAG: u8 = 0x10;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks length, sync byte, adaptation field control, and that the
    /// adaptation field (and its PCR, if flagged) fits the packet.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::PacketTooShort { len: b.len() });
        }
        if b[0] != SYNC_BYTE {
            return Err(Error::SyncByte { found: b[0] });
        }
        let control = (b[3] >> 4) & 3;
        if control == 0 {
            let pid = u16::from_be_bytes([b[1] & 0x1f, b[2]]);
            return Err(Error::ReservedAdaptationControl { pid });
        }
        if control & 2 != 0 {
            let length = b[field::AF_LEN];
            // With a payload at least one payload byte must remain.
            let max = if control == 3 { 182 } else { 183 };
            if length > max {
                return Err(Error::AdaptationLength { length, max });
            }
            if length > 0 && b[field::AF_FLAGS] & PCR_FLAG != 0 && length < 7 {
                return Err(Error::PcrOutsideAdaptation { length });
            }
        }
        Ok(Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        &self.buffer.as_ref()[..PACKET_LEN]
    }

    /// transport_error_indicator: the demodulator could not correct it.
    pub fn transport_error(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }

    /// payload_unit_start_indicator: a PES packet or section starts here.
    pub fn payload_unit_start(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }

    /// The packet identifier.
    pub fn pid(&self) -> Pid {
        Pid(u16::from_be_bytes([self.b()[1] & 0x1f, self.b()[2]]))
    }

    /// transport_scrambling_control (0 = clear).
    pub fn scrambling(&self) -> u8 {
        self.b()[3] >> 6
    }

    /// Whether an adaptation field is present.
    pub fn has_adaptation(&self) -> bool {
        self.b()[3] & 0x20 != 0
    }

    /// Whether a payload is present (only then does the counter advance).
    pub fn has_payload(&self) -> bool {
        self.b()[3] & 0x10 != 0
    }

    /// The 4-bit continuity counter.
    pub fn continuity_counter(&self) -> u8 {
        self.b()[3] & 0x0f
    }

    /// The adaptation field's flags byte, if the field has one.
    fn af_flags(&self) -> Option<u8> {
        (self.has_adaptation() && self.b()[field::AF_LEN] > 0).then(|| self.b()[field::AF_FLAGS])
    }

    /// discontinuity_indicator: the counter (and, on the PCR PID, the
    /// time base) is allowed to jump at this packet.
    pub fn discontinuity(&self) -> bool {
        self.af_flags().is_some_and(|f| f & DISCONTINUITY != 0)
    }

    /// random_access_indicator.
    pub fn random_access(&self) -> bool {
        self.af_flags().is_some_and(|f| f & RANDOM_ACCESS != 0)
    }

    /// The program clock reference, if this packet carries one.
    pub fn pcr(&self) -> Option<Pcr> {
        let flags = self.af_flags()?;
        if flags & PCR_FLAG == 0 {
            return None;
        }
        let mut bytes = [0u8; 6];
        bytes.copy_from_slice(&self.b()[field::PCR]);
        Some(Pcr::from_bytes(&bytes))
    }

    /// The payload (empty without one).
    pub fn payload(&self) -> &[u8] {
        if !self.has_payload() {
            return &[];
        }
        let start = if self.has_adaptation() {
            field::AF_FLAGS + usize::from(self.b()[field::AF_LEN])
        } else {
            field::AF_LEN
        };
        &self.b()[start.min(PACKET_LEN)..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Rewrites the continuity counter (low 4 bits of `cc`).
    pub fn set_continuity_counter(&mut self, cc: u8) {
        let b = &mut self.buffer.as_mut()[3];
        *b = (*b & 0xf0) | (cc & 0x0f);
    }

    /// Sets the discontinuity indicator; `false` (and nothing written)
    /// when the packet has no adaptation field flags to carry it.
    pub fn set_discontinuity(&mut self) -> bool {
        if self.af_flags().is_none() {
            return false;
        }
        self.buffer.as_mut()[field::AF_FLAGS] |= DISCONTINUITY;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpegts::synth;

    #[test]
    fn fields_read_back() {
        let p = synth::packet(
            0x100,
            5,
            Some(Pcr::from_parts(123_456_789, 299)),
            true,
            0xaa,
        );
        let v = Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.pid(), Pid(0x100));
        assert_eq!(v.continuity_counter(), 5);
        assert!(v.has_adaptation() && v.has_payload() && v.payload_unit_start());
        assert!(v.discontinuity());
        assert!(!v.random_access() && !v.transport_error());
        assert_eq!(v.scrambling(), 0);
        assert_eq!(v.pcr(), Some(Pcr::from_parts(123_456_789, 299)));
        assert_eq!(v.payload().len(), 188 - 4 - 8);
        assert!(v.payload().iter().all(|b| *b == 0xaa));

        let p = synth::packet(0x1fff, 15, None, false, 0xff);
        let v = Packet::new_checked(&p[..]).unwrap();
        assert_eq!(
            (v.pid(), v.pcr(), v.payload().len()),
            (Pid::NULL, None, 184)
        );
    }

    #[test]
    fn pcr_bytes_round_trip_and_wrap() {
        for pcr in [0, 1, 299, 300, PCR_MODULUS - 1, 27_000_000 * 3600] {
            let p = Pcr(pcr);
            assert_eq!(Pcr::from_bytes(&p.to_bytes()), p);
        }
        assert_eq!(Pcr(5).ticks_since(Pcr(PCR_MODULUS - 5)), 10);
        assert_eq!(Pcr(10).ticks_since(Pcr(4)), 6);
        assert_eq!(Pcr::from_parts(1, 0), Pcr(300));
    }

    #[test]
    fn bad_packets_are_refused() {
        let good = synth::packet(0x100, 0, Some(Pcr(0)), false, 0);
        assert_eq!(
            Packet::new_checked(&good[..187]).unwrap_err(),
            Error::PacketTooShort { len: 187 }
        );
        let mut p = good;
        p[0] = 0x48;
        assert_eq!(
            Packet::new_checked(&p[..]).unwrap_err(),
            Error::SyncByte { found: 0x48 }
        );
        let mut p = good;
        p[3] &= 0xcf;
        assert_eq!(
            Packet::new_checked(&p[..]).unwrap_err(),
            Error::ReservedAdaptationControl { pid: 0x100 }
        );
        let mut p = good;
        p[4] = 183;
        assert_eq!(
            Packet::new_checked(&p[..]).unwrap_err(),
            Error::AdaptationLength {
                length: 183,
                max: 182
            }
        );
        let mut p = good;
        p[4] = 3;
        assert_eq!(
            Packet::new_checked(&p[..]).unwrap_err(),
            Error::PcrOutsideAdaptation { length: 3 }
        );
    }

    #[test]
    fn continuity_counter_can_be_rewritten() {
        let mut p = synth::packet(0x100, 3, None, false, 0);
        let mut v = Packet::new_checked(&mut p[..]).unwrap();
        v.set_continuity_counter(0x1c);
        assert_eq!(v.continuity_counter(), 0xc);
        assert_eq!(v.pid(), Pid(0x100));
    }

    proptest::proptest! {
        /// Any bytes: the view refuses or reads, never panics, and what it
        /// reads stays inside the packet.
        #[test]
        fn parsing_never_panics(
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            sync in proptest::prelude::any::<bool>(),
        ) {
            if sync && !bytes.is_empty() {
                bytes[0] = SYNC_BYTE;
            }
            let mut checker = crate::mpegts::ContinuityChecker::new();
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let header = 4 + usize::from(p.has_adaptation()) * (1 + usize::from(bytes[4]));
                proptest::prop_assert!(p.payload().len() <= PACKET_LEN - header.min(PACKET_LEN));
                proptest::prop_assert!(p.pid().0 < 0x2000);
                proptest::prop_assert!(p.continuity_counter() < 16);
                proptest::prop_assert!(p.pcr().is_none_or(|pcr| pcr.0 < PCR_MODULUS));
                let _ = (p.discontinuity(), p.random_access(), p.scrambling(), p.transport_error());
                let _ = checker.check(&p);
            }
        }
    }
}
