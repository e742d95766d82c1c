//! Wall-clock time as RTCP writes it, and the tie between a stream's RTP
//! clock and the wall clock.

use crate::units::MediaTime;

/// Seconds from the NTP era 0 (1900-01-01) to the Unix epoch.
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// Wall-clock time: nanoseconds since the Unix epoch on the system clock,
/// read by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WallTime(pub u64);

/// A 64-bit NTP timestamp (RFC 3550 §4): seconds since 1900 in the high
/// 32 bits, the fraction of a second in the low 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NtpTime(pub u64);

impl NtpTime {
    /// The NTP timestamp of `wall`.
    pub fn from_wall(wall: WallTime) -> NtpTime {
        let secs = wall.0 / 1_000_000_000 + NTP_UNIX_OFFSET_S;
        let nanos = wall.0 % 1_000_000_000;
        let frac = (nanos << 32) / 1_000_000_000;
        NtpTime((secs << 32) | frac)
    }

    /// Back to wall-clock time (to the nanosecond, rounded down).
    pub fn to_wall(self) -> WallTime {
        let secs = (self.0 >> 32).saturating_sub(NTP_UNIX_OFFSET_S);
        let nanos = ((self.0 & 0xffff_ffff) * 1_000_000_000) >> 32;
        WallTime(secs * 1_000_000_000 + nanos)
    }

    /// The middle 32 bits, as receiver reports echo them (LSR).
    pub fn middle(self) -> u32 {
        (self.0 >> 16) as u32
    }
}

/// One instant known on both clocks: RTP time `rtp` is wall-clock time
/// `wall`. For raw video that is a frame's start on the epoch grid and
/// its timestamp; for MPEG-TS a datagram's departure and its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// Wall-clock time of the instant.
    pub wall: WallTime,
    /// RTP time of the same instant.
    pub rtp: MediaTime,
}

impl Anchor {
    /// The RTP time at `wall` on a clock of `rate` Hz, counted from this
    /// anchor either way (modulo 2^32, as RTP time is).
    pub fn rtp_at(&self, wall: WallTime, rate: u32) -> MediaTime {
        let delta = i128::from(wall.0) - i128::from(self.wall.0);
        let ticks = delta * i128::from(rate) / 1_000_000_000;
        MediaTime(self.rtp.0.wrapping_add(ticks as u32))
    }
}
