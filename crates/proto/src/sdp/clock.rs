//! The reference clock of an ST 2110 stream (`a=ts-refclk`, ST 2110-10
//! section 8.2 and RFC 7273): a PTP grandmaster and domain, or the MAC
//! address of the sender's interface when it stamps by its own clock.

use std::fmt;
use std::str::FromStr;

/// A PTP (IEEE 1588-2008) grandmaster clock identity and domain, written
/// `39-A7-94-FF-FE-07-CB-D0:37` (RFC 7273 section 4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PtpClock {
    /// The grandmaster's EUI-64 clock identity.
    pub grandmaster: [u8; 8],
    /// The PTP domain number (0..=127), when given.
    pub domain: Option<u8>,
}

/// Why a PTP clock reference did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The grandmaster identity is not eight hex octets joined by `-`.
    #[error(
        "PTP grandmaster '{0}' is not eight hex octets joined by '-'; give it like 39-A7-94-FF-FE-07-CB-D0"
    )]
    Grandmaster(String),
    /// The domain is not a number from 0 to 127.
    #[error(
        "PTP domain '{0}' is not a number from 0 to 127; give it like 39-A7-94-FF-FE-07-CB-D0:0"
    )]
    Domain(String),
}

/// `n` hex octets joined by `-` (either case).
fn octets<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    let mut parts = text.split('-');
    for o in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *o = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn write_octets(f: &mut fmt::Formatter<'_>, octets: &[u8]) -> fmt::Result {
    for (i, o) in octets.iter().enumerate() {
        if i > 0 {
            f.write_str("-")?;
        }
        write!(f, "{o:02X}")?;
    }
    Ok(())
}

impl FromStr for PtpClock {
    type Err = ClockError;

    /// `GMID` or `GMID:DOMAIN`.
    fn from_str(text: &str) -> Result<PtpClock, ClockError> {
        let (gm, domain) = match text.split_once(':') {
            Some((gm, d)) => (gm, Some(d)),
            None => (text, None),
        };
        let grandmaster = octets::<8>(gm).ok_or_else(|| ClockError::Grandmaster(gm.into()))?;
        let domain = match domain {
            None => None,
            Some(d) => Some(
                d.parse::<u8>()
                    .ok()
                    .filter(|n| *n <= 127 && d.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| ClockError::Domain(d.into()))?,
            ),
        };
        Ok(PtpClock {
            grandmaster,
            domain,
        })
    }
}

impl fmt::Display for PtpClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_octets(f, &self.grandmaster)?;
        match self.domain {
            Some(d) => write!(f, ":{d}"),
            None => Ok(()),
        }
    }
}

/// What the RTP timestamps of a stream are taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefClock {
    /// A PTP grandmaster: `ptp=IEEE1588-2008:GMID[:DOMAIN]`.
    Ptp(PtpClock),
    /// PTP traceable to TAI with no grandmaster named:
    /// `ptp=IEEE1588-2008:traceable`.
    PtpTraceable,
    /// The sender's own clock, named by the MAC address of the interface
    /// it sends from: `localmac=02-FC-00-00-00-01`.
    LocalMac([u8; 6]),
}

impl RefClock {
    /// The clock an `a=ts-refclk:` value names, if it is one of the
    /// ST 2110-10 forms (anything else, such as `local` or `ntp=...`, is
    /// not a clock nagare can describe).
    pub fn parse(value: &str) -> Option<RefClock> {
        let value = value.trim();
        if let Some(mac) = value.strip_prefix("localmac=") {
            return octets::<6>(mac).map(RefClock::LocalMac);
        }
        let ptp = value.strip_prefix("ptp=IEEE1588-2008:")?;
        if ptp == "traceable" {
            return Some(RefClock::PtpTraceable);
        }
        ptp.parse().ok().map(RefClock::Ptp)
    }
}

impl fmt::Display for RefClock {
    /// The `a=ts-refclk:` value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefClock::Ptp(p) => write!(f, "ptp=IEEE1588-2008:{p}"),
            RefClock::PtpTraceable => f.write_str("ptp=IEEE1588-2008:traceable"),
            RefClock::LocalMac(mac) => {
                f.write_str("localmac=")?;
                write_octets(f, mac)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptp_clocks_parse_and_print_in_rfc_7273_form() {
        let p: PtpClock = "39-a7-94-ff-fe-07-cb-d0:37".parse().unwrap();
        assert_eq!(
            p.grandmaster,
            [0x39, 0xa7, 0x94, 0xff, 0xfe, 0x07, 0xcb, 0xd0]
        );
        assert_eq!(p.domain, Some(37));
        assert_eq!(p.to_string(), "39-A7-94-FF-FE-07-CB-D0:37");
        let c = RefClock::Ptp(p);
        assert_eq!(
            c.to_string(),
            "ptp=IEEE1588-2008:39-A7-94-FF-FE-07-CB-D0:37"
        );
        assert_eq!(RefClock::parse(&c.to_string()), Some(c));
        let no_domain: PtpClock = "00-00-00-00-00-00-00-01".parse().unwrap();
        assert_eq!(no_domain.to_string(), "00-00-00-00-00-00-00-01");
    }

    #[test]
    fn bad_clocks_name_the_bad_part() {
        for (text, err) in [
            (
                "39-A7-94-FF-FE-07-CB:1",
                ClockError::Grandmaster("39-A7-94-FF-FE-07-CB".into()),
            ),
            (
                "39:A7:94:FF:FE:07:CB:D0",
                ClockError::Grandmaster("39".into()),
            ),
            (
                "39-A7-94-FF-FE-07-CB-D0-11",
                ClockError::Grandmaster("39-A7-94-FF-FE-07-CB-D0-11".into()),
            ),
            (
                "39-A7-94-FF-FE-07-CB-DX",
                ClockError::Grandmaster("39-A7-94-FF-FE-07-CB-DX".into()),
            ),
            (
                "39-A7-94-FF-FE-07-CB-D0:128",
                ClockError::Domain("128".into()),
            ),
            (
                "39-A7-94-FF-FE-07-CB-D0:+1",
                ClockError::Domain("+1".into()),
            ),
            (
                "39-A7-94-FF-FE-07-CB-D0:",
                ClockError::Domain(String::new()),
            ),
        ] {
            assert_eq!(text.parse::<PtpClock>(), Err(err), "{text}");
        }
    }

    #[test]
    fn ts_refclk_forms() {
        let mac = RefClock::LocalMac([2, 0xfc, 0, 0, 0, 1]);
        assert_eq!(mac.to_string(), "localmac=02-FC-00-00-00-01");
        assert_eq!(RefClock::parse("localmac=02-fc-00-00-00-01"), Some(mac));
        assert_eq!(
            RefClock::parse("ptp=IEEE1588-2008:traceable"),
            Some(RefClock::PtpTraceable)
        );
        for other in [
            "local",
            "ntp=pool.ntp.org",
            "localmac=02-FC",
            "ptp=IEEE1588-2002:x",
            "",
        ] {
            assert_eq!(RefClock::parse(other), None, "{other}");
        }
    }
}
