//! Synthetic transport streams for tests: PAT, PMT and a PES on one PID
//! that carries the PCR, paced at a constant rate.

use super::packet::{PACKET_LEN, Pcr};

/// A payload-carrying packet of `pid` with counter `cc`, an adaptation
/// field when there is a PCR or a discontinuity, and payload bytes `fill`.
pub(crate) fn packet(
    pid: u16,
    cc: u8,
    pcr: Option<Pcr>,
    discontinuity: bool,
    fill: u8,
) -> [u8; 188] {
    let mut p = [fill; PACKET_LEN];
    p[0] = 0x47;
    p[1] = 0x40 | ((pid >> 8) as u8 & 0x1f);
    p[2] = pid as u8;
    let af = pcr.is_some() || discontinuity;
    p[3] = if af { 0x30 } else { 0x10 } | (cc & 0x0f);
    if af {
        let flags = if discontinuity { 0x80 } else { 0 } | if pcr.is_some() { 0x10 } else { 0 };
        p[5] = flags;
        match pcr {
            Some(pcr) => {
                p[4] = 7;
                p[6..12].copy_from_slice(&pcr.to_bytes());
            }
            None => p[4] = 1,
        }
    }
    p
}

/// An adaptation-field-only packet (no payload), with an optional PCR.
pub(crate) fn adaptation_only(pid: u16, cc: u8, pcr: Option<Pcr>) -> [u8; 188] {
    let mut p = [0xff; PACKET_LEN];
    p[0] = 0x47;
    p[1] = (pid >> 8) as u8 & 0x1f;
    p[2] = pid as u8;
    p[3] = 0x20 | (cc & 0x0f);
    p[4] = 183;
    p[5] = if pcr.is_some() { 0x10 } else { 0 };
    if let Some(pcr) = pcr {
        p[6..12].copy_from_slice(&pcr.to_bytes());
    }
    p
}

/// `n` packets of a constant-rate stream: PAT and PMT every 100 packets,
/// otherwise PES on PID 0x100 with a PCR every `pcr_every` packets, whose
/// value follows `bits_per_second` from `pcr_start` (wrapping like a real
/// PCR). `pcr_every == 0` means no PCR at all.
pub(crate) fn stream(n: usize, bits_per_second: u64, pcr_every: usize, pcr_start: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * PACKET_LEN);
    let mut cc = [0u8; 3];
    for i in 0..n {
        let (pid, slot) = match i % 100 {
            0 => (0x0000, 0),
            1 => (0x1000, 1),
            _ => (0x0100, 2),
        };
        let due = pcr_every > 0 && i >= 2 && (i - 2) % pcr_every.max(1) == 0;
        let pcr = (slot == 2 && due).then(|| Pcr(pcr_at(i, bits_per_second, pcr_start)));
        out.extend_from_slice(&packet(pid, cc[slot], pcr, false, i as u8));
        cc[slot] = (cc[slot] + 1) & 0x0f;
    }
    out
}

/// The PCR a constant-rate mux writes into packet `i`.
pub(crate) fn pcr_at(i: usize, bits_per_second: u64, start: u64) -> u64 {
    let ticks = (i as u128) * (PACKET_LEN as u128) * 8 * 27_000_000 / u128::from(bits_per_second);
    ((u128::from(start) + ticks) % u128::from(super::packet::PCR_MODULUS)) as u64
}
