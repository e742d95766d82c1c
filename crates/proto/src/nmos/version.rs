//! Resource versions: TAI timestamps written `seconds:nanoseconds`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// TAI was 37 s ahead of UTC since 2017-01-01 and no leap second has been
/// announced since; the driver's clock is UTC (the system clock), and
/// PTP-locked hosts keep UTC there too.
pub const TAI_MINUS_UTC_SECS: u64 = 37;

/// A TAI instant, as IS-04 versions and IS-05 activation times are
/// written (`1700000037:500000000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TaiTime {
    /// Whole seconds since the PTP (TAI) epoch, 1970-01-01 TAI.
    pub secs: u64,
    /// Nanoseconds past `secs` (below 10⁹).
    pub nanos: u32,
}

impl TaiTime {
    /// The TAI instant of `utc_ns` nanoseconds after the Unix epoch (UTC).
    pub fn from_utc_ns(utc_ns: u128) -> TaiTime {
        let secs = u64::try_from(utc_ns / 1_000_000_000).unwrap_or(u64::MAX);
        TaiTime {
            secs: secs.saturating_add(TAI_MINUS_UTC_SECS),
            nanos: (utc_ns % 1_000_000_000) as u32,
        }
    }

    /// One nanosecond later: a version that must differ from this one.
    pub fn next(self) -> TaiTime {
        if self.nanos >= 999_999_999 {
            TaiTime {
                secs: self.secs.saturating_add(1),
                nanos: 0,
            }
        } else {
            TaiTime {
                secs: self.secs,
                nanos: self.nanos + 1,
            }
        }
    }

    /// This instant plus a span written the same way (IS-05's relative
    /// `requested_time`), saturating.
    pub fn plus(self, span: TaiTime) -> TaiTime {
        let nanos = u64::from(self.nanos) + u64::from(span.nanos);
        TaiTime {
            secs: self
                .secs
                .saturating_add(span.secs)
                .saturating_add(nanos / 1_000_000_000),
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }

    /// The Unix-epoch (UTC) nanoseconds of this instant: the inverse of
    /// [`TaiTime::from_utc_ns`] (zero before the epoch).
    pub fn to_utc_ns(self) -> u128 {
        let secs = self.secs.saturating_sub(TAI_MINUS_UTC_SECS);
        u128::from(secs) * 1_000_000_000 + u128::from(self.nanos)
    }

    /// This instant less `nanos` nanoseconds, saturating at the epoch.
    pub fn minus_nanos(self, nanos: u64) -> TaiTime {
        let at = u128::from(self.secs) * 1_000_000_000 + u128::from(self.nanos);
        let at = at.saturating_sub(u128::from(nanos));
        TaiTime {
            secs: u64::try_from(at / 1_000_000_000).unwrap_or(u64::MAX),
            nanos: (at % 1_000_000_000) as u32,
        }
    }

    /// Nanoseconds from `self` until `later` (zero when it is not later).
    pub fn nanos_until(self, later: TaiTime) -> u128 {
        let at = |t: TaiTime| u128::from(t.secs) * 1_000_000_000 + u128::from(t.nanos);
        at(later).saturating_sub(at(self))
    }

    /// Parses `seconds:nanoseconds`.
    pub fn parse(text: &str) -> Option<TaiTime> {
        let (s, n) = text.split_once(':')?;
        let nanos: u32 = n.parse().ok()?;
        (nanos < 1_000_000_000).then_some(TaiTime {
            secs: s.parse().ok()?,
            nanos,
        })
    }
}

impl fmt::Display for TaiTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.secs, self.nanos)
    }
}

impl Serialize for TaiTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaiTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        TaiTime::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("'{text}' is not seconds:nanoseconds")))
    }
}
