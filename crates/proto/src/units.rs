//! Units as types, so a nanosecond can never be added to a microsecond or a
//! byte count passed where a bit rate is meant.
//!
//! Time in nagare-proto is [`Nanos`]: nanoseconds on the caller's monotonic
//! timeline (a point) or between two points (a span). State machines take
//! `now: Nanos` and answer with `Nanos` deadlines; the driver maps them to
//! its clock, and a simulation simply counts. Media time is [`MediaTime`],
//! the RTP timestamp on the 90 kHz video clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The RTP clock rate of video (RFC 4175 / ST 2110-20), ticks per second.
pub const VIDEO_CLOCK_RATE: u32 = 90_000;

/// The largest UDP payload of an IPv4 datagram, bytes.
pub const MAX_UDP_PAYLOAD: u32 = 65_507;

/// Nanoseconds: a point on a monotonic timeline, or a span between two.
///
/// Arithmetic saturates at zero and `u64::MAX` (584 years), so hostile or
/// confused inputs cannot wrap a deadline into the past.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest value, for "never".
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// From microseconds, saturating.
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us.saturating_mul(1_000))
    }

    /// From milliseconds, saturating.
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// From whole seconds, saturating.
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    /// From fractional seconds; negative, NaN and huge values clamp.
    pub fn from_secs_f64(s: f64) -> Nanos {
        // `as` saturates and maps NaN to 0, which is the clamp wanted here.
        Nanos((s * 1e9) as u64)
    }

    /// The value in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds (truncated).
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Seconds as a float, for reports.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Milliseconds as a float, for reports.
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Microseconds as a float, for reports.
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub const fn saturating_sub(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - other` as a signed count of nanoseconds, saturating at the
    /// bounds of `i64` (292 years either way).
    pub fn signed_sub(self, other: Nanos) -> i64 {
        let d = i128::from(self.0) - i128::from(other.0);
        d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// `self + d`, saturating.
    pub const fn saturating_add(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(d.0))
    }

    /// `self * n`, saturating.
    pub const fn saturating_mul(self, n: u64) -> Nanos {
        Nanos(self.0.saturating_mul(n))
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Nanos> for Duration {
    fn from(n: Nanos) -> Duration {
        Duration::from_nanos(n.0)
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        self.saturating_add(rhs)
    }
}

impl AddAssign for Nanos {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = *self + rhs;
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

impl fmt::Display for Nanos {
    /// In the largest unit that keeps at least one digit before the point.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= 1_000_000_000 {
            write!(f, "{:.3} s", self.as_secs_f64())
        } else if n >= 1_000_000 {
            write!(f, "{:.3} ms", self.as_millis_f64())
        } else if n >= 1_000 {
            write!(f, "{:.1} µs", self.as_micros_f64())
        } else {
            write!(f, "{n} ns")
        }
    }
}

/// Media time: an RTP timestamp on the 90 kHz video clock. It wraps every
/// 13.25 hours, so differences are taken modulo 2^32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MediaTime(pub u32);

impl MediaTime {
    /// `self - earlier` in ticks, the shorter way round the 2^32 circle.
    pub const fn ticks_since(self, earlier: MediaTime) -> i32 {
        self.0.wrapping_sub(earlier.0) as i32
    }

    /// The media time `ticks` after this one.
    pub const fn wrapping_add(self, ticks: u32) -> MediaTime {
        MediaTime(self.0.wrapping_add(ticks))
    }

    /// A span of `ticks` of the 90 kHz clock as nanoseconds (negative
    /// spans clamp to zero).
    pub fn ticks_to_nanos(ticks: i64) -> Nanos {
        let ns = i128::from(ticks.max(0)) * 1_000_000_000 / i128::from(VIDEO_CLOCK_RATE);
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Nanoseconds as a count of 90 kHz ticks (truncated), for clocks that
    /// are compared against RTP timestamps (RFC 3550 jitter).
    pub const fn nanos_to_ticks(ns: Nanos) -> u64 {
        (ns.0 as u128 * VIDEO_CLOCK_RATE as u128 / 1_000_000_000) as u64
    }
}

impl fmt::Display for MediaTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A bit rate in bits per second.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct BitRate(pub u64);

impl BitRate {
    /// The rate of `bytes` over `span` (zero for an empty span): a
    /// measured rate is always bytes over the measured time.
    pub fn of(bytes: ByteSize, span: Nanos) -> BitRate {
        if span.0 == 0 {
            return BitRate(0);
        }
        let bps = u128::from(bytes.0) * 8 * 1_000_000_000 / u128::from(span.0);
        BitRate(u64::try_from(bps).unwrap_or(u64::MAX))
    }

    /// Bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }

    /// Bits per second as a float.
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// The time `bytes` take at this rate (`Nanos::MAX` at rate zero).
    pub fn time_for(self, bytes: ByteSize) -> Nanos {
        if self.0 == 0 {
            return Nanos::MAX;
        }
        let ns = u128::from(bytes.0) * 8 * 1_000_000_000 / u128::from(self.0);
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// Bits per second with two decimals, `12.34 Gbit/s`: how logs, progress
/// lines and refusals print rates (measured ones are fractional), so a
/// refusal and the log beside it agree.
pub fn bitrate_text(bps: f64) -> String {
    let (v, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    format!("{v:.2} {unit}")
}

impl fmt::Display for BitRate {
    /// `3.20 Gbit/s`, `850.0 Mbit/s`, `12.0 kbit/s`, `900 bit/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if b >= 1e9 {
            write!(f, "{:.2} Gbit/s", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{:.1} Mbit/s", b / 1e6)
        } else if b >= 1e3 {
            write!(f, "{:.1} kbit/s", b / 1e3)
        } else {
            write!(f, "{} bit/s", self.0)
        }
    }
}

/// Why a bit rate did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BitRateError {
    /// A suffix other than k, M, G or T.
    #[error("unknown suffix {0:?}; use k, M or G (like 3.2G)")]
    Suffix(char),
    /// Not a number before the suffix.
    #[error("not a number; write it like 6M, 3.2G or 100k")]
    NotANumber,
    /// Zero, negative or above 1000 Tbit/s.
    #[error("out of range: 1 bit/s to 1000T; write it like 6M, 3.2G or 100k")]
    OutOfRange,
}

impl FromStr for BitRate {
    type Err = BitRateError;

    /// `3.2G`, `500M`, `100k`, `6m` or `6000000` (bits/s; the suffixes k,
    /// M, G and T are decimal and case-insensitive: `6m` is 6 Mbit/s).
    fn from_str(text: &str) -> Result<BitRate, BitRateError> {
        let t = text.trim();
        let (num, mult) = match t.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() => {
                let m = match c.to_ascii_lowercase() {
                    'k' => 1e3,
                    'm' => 1e6,
                    'g' => 1e9,
                    't' => 1e12,
                    _ => return Err(BitRateError::Suffix(c)),
                };
                (&t[..i], m)
            }
            _ => (t, 1.0),
        };
        let v: f64 = num.parse().map_err(|_| BitRateError::NotANumber)?;
        let bps = v * mult;
        if !bps.is_finite() || !(1.0..=1e15).contains(&bps) {
            return Err(BitRateError::OutOfRange);
        }
        Ok(BitRate(bps.round() as u64))
    }
}

/// A size in bytes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The count of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// From a `usize` length.
    pub const fn of_len(len: usize) -> ByteSize {
        ByteSize(len as u64)
    }
}

impl fmt::Display for ByteSize {
    /// Binary units: `512 B`, `1.5 KiB`, `20.0 MiB`, `3.00 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if self.0 >= 1 << 30 {
            write!(f, "{:.2} GiB", b / f64::from(1u32 << 30))
        } else if self.0 >= 1 << 20 {
            write!(f, "{:.1} MiB", b / f64::from(1u32 << 20))
        } else if self.0 >= 1 << 10 {
            write!(f, "{:.1} KiB", b / 1024.0)
        } else {
            write!(f, "{} B", self.0)
        }
    }
}

/// Why a size text such as `512M` does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    /// Not a number before the suffix.
    #[error("not a number of bytes: write it like 512M, 4G or 65536")]
    NotANumber,
    /// A suffix other than K, M, G or T.
    #[error("unknown suffix '{0}': use K, M, G or T (powers of 1024), e.g. 512M or 4G")]
    Suffix(char),
    /// Zero, negative or past 2^63 bytes.
    #[error("out of range: 1 byte to 8 EiB; write it like 512M or 4G")]
    OutOfRange,
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    /// `4G`, `512M`, `1.5g`, `64K` or `65536` (bytes; the suffixes K, M,
    /// G and T are powers of 1024, case-insensitive, with an optional
    /// `iB` or `B`: `4GiB`, `4GB` and `4g` are all 4 × 2^30).
    fn from_str(text: &str) -> Result<ByteSize, ByteSizeError> {
        let t = text.trim();
        let t = t
            .strip_suffix("iB")
            .or_else(|| t.strip_suffix('B'))
            .unwrap_or(t);
        let (num, shift) = match t.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() => {
                let shift = match c.to_ascii_lowercase() {
                    'k' => 10,
                    'm' => 20,
                    'g' => 30,
                    't' => 40,
                    _ => return Err(ByteSizeError::Suffix(c)),
                };
                (&t[..i], shift)
            }
            _ => (t, 0),
        };
        let v: f64 = num.trim().parse().map_err(|_| ByteSizeError::NotANumber)?;
        let bytes = v * (1u64 << shift) as f64;
        if !bytes.is_finite() || !(1.0..=9.2e18).contains(&bytes) {
            return Err(ByteSizeError::OutOfRange);
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

/// An RTP synchronization source identifier (RFC 3550).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Ssrc(pub u32);

impl fmt::Display for Ssrc {
    /// Hexadecimal, as Wireshark shows it: `0x1a2b3c4d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// An extended RTP sequence number: the 16-bit wire value unwrapped onto a
/// 64-bit counter that never wraps (see [`crate::stats::SeqExtender`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ExtSeq(pub u64);

impl ExtSeq {
    /// The 16-bit sequence number carried in the RTP header.
    pub const fn wire(self) -> u16 {
        self.0 as u16
    }

    /// The 32-bit value RFC 4175 carries as ESN (high half) and sequence
    /// number (low half).
    pub const fn wire32(self) -> u32 {
        self.0 as u32
    }

    /// The number `n` after this one.
    pub const fn add(self, n: u64) -> ExtSeq {
        ExtSeq(self.0.wrapping_add(n))
    }
}

impl fmt::Display for ExtSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_in_powers_of_1024() {
        let p = |t: &str| t.parse::<ByteSize>();
        assert_eq!(p("4G"), Ok(ByteSize(4 << 30)));
        assert_eq!(p("4GiB"), Ok(ByteSize(4 << 30)));
        assert_eq!(p(" 512m "), Ok(ByteSize(512 << 20)));
        assert_eq!(p("1.5k"), Ok(ByteSize(1536)));
        assert_eq!(p("65536"), Ok(ByteSize(65536)));
        assert_eq!(p("4X"), Err(ByteSizeError::Suffix('X')));
        assert_eq!(p("G"), Err(ByteSizeError::NotANumber));
        assert_eq!(p("0"), Err(ByteSizeError::OutOfRange));
        assert_eq!(p("-1M"), Err(ByteSizeError::OutOfRange));
        assert_eq!(p("1e30T"), Err(ByteSizeError::OutOfRange));
        assert_eq!(p("NaNk"), Err(ByteSizeError::OutOfRange));
    }

    #[test]
    fn nanos_saturate_instead_of_wrapping() {
        assert_eq!(Nanos(5) - Nanos(9), Nanos::ZERO);
        assert_eq!(Nanos::MAX + Nanos(1), Nanos::MAX);
        assert_eq!(Nanos(5).signed_sub(Nanos(9)), -4);
        assert_eq!(Nanos::MAX.signed_sub(Nanos::ZERO), i64::MAX);
        assert_eq!(Nanos::from_secs_f64(-1.0), Nanos::ZERO);
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos::ZERO);
        assert_eq!(Nanos::from_secs_f64(1e30), Nanos::MAX);
        assert_eq!(Nanos::from(Duration::from_micros(3)), Nanos(3_000));
    }

    #[test]
    fn nanos_display_picks_a_unit() {
        assert_eq!(Nanos(999).to_string(), "999 ns");
        assert_eq!(Nanos(27_400).to_string(), "27.4 µs");
        assert_eq!(Nanos(4_100_000).to_string(), "4.100 ms");
        assert_eq!(Nanos::from_secs(2).to_string(), "2.000 s");
    }

    #[test]
    fn media_time_differences_wrap() {
        assert_eq!(MediaTime(10).ticks_since(MediaTime(u32::MAX - 4)), 15);
        assert_eq!(MediaTime(u32::MAX - 4).ticks_since(MediaTime(10)), -15);
        assert_eq!(MediaTime::ticks_to_nanos(90_000), Nanos::from_secs(1));
        assert_eq!(MediaTime::ticks_to_nanos(-5), Nanos::ZERO);
        assert_eq!(MediaTime::nanos_to_ticks(Nanos::from_millis(10)), 900);
    }

    #[test]
    fn bit_rates_parse_and_print() {
        assert_eq!("3.2G".parse(), Ok(BitRate(3_200_000_000)));
        assert_eq!("100k".parse(), Ok(BitRate(100_000)));
        assert_eq!("6m".parse(), Ok(BitRate(6_000_000)));
        assert_eq!("6000000".parse(), Ok(BitRate(6_000_000)));
        assert_eq!("3x".parse::<BitRate>(), Err(BitRateError::Suffix('x')));
        assert_eq!("fast".parse::<BitRate>(), Err(BitRateError::NotANumber));
        assert_eq!("0".parse::<BitRate>(), Err(BitRateError::OutOfRange));
        assert_eq!("-1".parse::<BitRate>(), Err(BitRateError::OutOfRange));
        assert_eq!("1e400".parse::<BitRate>(), Err(BitRateError::OutOfRange));
        assert_eq!("".parse::<BitRate>(), Err(BitRateError::NotANumber));
        assert_eq!(BitRate(3_190_000_000).to_string(), "3.19 Gbit/s");
        assert_eq!(BitRate(6_000_000).to_string(), "6.0 Mbit/s");
    }

    #[test]
    fn rates_are_bytes_over_measured_time() {
        // 400 MB in 1 s is 3.2 Gbit/s; an empty span is no rate, not infinity.
        assert_eq!(
            BitRate::of(ByteSize(400_000_000), Nanos::from_secs(1)),
            BitRate(3_200_000_000)
        );
        assert_eq!(BitRate::of(ByteSize(1), Nanos::ZERO), BitRate(0));
        assert_eq!(
            BitRate(8_000).time_for(ByteSize(1_000)),
            Nanos::from_secs(1)
        );
    }

    #[test]
    fn identifiers_print_like_wireshark() {
        assert_eq!(Ssrc(0x1a2b).to_string(), "0x00001a2b");
        assert_eq!(ExtSeq(0x1_0002_0003).wire(), 3);
        assert_eq!(ExtSeq(0x1_0002_0003).wire32(), 0x0002_0003);
        assert_eq!(ByteSize(20 << 20).to_string(), "20.0 MiB");
    }
}
