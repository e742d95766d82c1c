//! Who may make the server send where: the destination allow-list, the
//! API token, and admission against `--max-rate` and the pacing budget.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Result, anyhow, bail};
use nagare_proto::BitRate;
use subtle::ConstantTimeEq;

use crate::progress::bitrate;

/// An address block, `10.0.0.0/8` or `fd00::/64` (a bare address is /32
/// or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in the block (an IPv4-mapped IPv6 address counts
    /// as its IPv4 address).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Parses `--allow` values.
pub(crate) fn parse_cidr(text: &str) -> Result<Cidr> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let net: IpAddr = addr.trim().parse().map_err(|_| {
        anyhow!("--allow '{text}' is not an address block such as 127.0.0.0/8 or fd00::/64")
    })?;
    let max = if net.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => p
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&p| p <= max)
            .ok_or_else(|| anyhow!("--allow '{text}': prefix length must be 0..={max}"))?,
    };
    Ok(Cidr {
        net: canonical(net),
        prefix,
    })
}

/// Destinations a client may name: its own address, always; others only
/// inside `--allow`. So nobody can turn the server on a third party.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowList {
    blocks: Vec<Cidr>,
}

impl AllowList {
    /// The `--allow` blocks.
    pub(crate) fn new(blocks: Vec<Cidr>) -> AllowList {
        AllowList { blocks }
    }

    /// Whether `client` may have media sent to `destination`.
    pub(crate) fn permits(&self, client: IpAddr, destination: IpAddr) -> bool {
        canonical(client) == canonical(destination)
            || self.blocks.iter().any(|b| b.contains(destination))
    }

    /// The refusal text for a destination outside the list.
    pub(crate) fn refusal(&self, client: IpAddr, destination: IpAddr) -> String {
        let allowed = if self.blocks.is_empty() {
            "none".to_string()
        } else {
            self.blocks
                .iter()
                .map(Cidr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "destination {destination} is neither your own address ({client}) nor inside --allow \
             ({allowed}); start the server with --allow {destination}/32 to permit it"
        )
    }
}

/// The API token; `None` when the API is bound to loopback and no token
/// was given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Token(Option<Vec<u8>>);

impl Token {
    /// `token` as given, required when `http` is not loopback.
    pub(crate) fn new(token: Option<String>, http_is_loopback: bool) -> Result<Token> {
        match token {
            Some(t) if t.len() < 8 => {
                bail!("--token is {} characters: use at least 8 (random)", t.len())
            }
            Some(t) => Ok(Token(Some(t.into_bytes()))),
            None if http_is_loopback => Ok(Token(None)),
            None => bail!(
                "the HTTP API is not bound to loopback, so it needs --token TOKEN (or NAGARE_TOKEN); \
                 or bind it with --http 127.0.0.1:8080"
            ),
        }
    }

    /// Whether an `Authorization` header value passes: `Bearer TOKEN`,
    /// compared in constant time.
    pub(crate) fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(want) = &self.0 else {
            return true;
        };
        let given = authorization
            .and_then(|v| v.trim().strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("");
        bool::from(given.as_bytes().ct_eq(want))
    }
}

/// The rate budget of `--max-rate` and the pacing threads' load limit.
#[derive(Debug)]
pub(crate) struct Admission {
    max_rate: Option<BitRate>,
    max_load: f64,
    reserved: AtomicU64,
}

impl Admission {
    /// A budget of `max_rate` (none: unlimited) and a pacing load limit.
    pub(crate) fn new(max_rate: Option<BitRate>, max_load: f64) -> Admission {
        Admission {
            max_rate,
            max_load,
            reserved: AtomicU64::new(0),
        }
    }

    /// Reserves `rate` for a new stream, or says why not. `load` is the
    /// busiest pacing thread's share of time spent working.
    pub(crate) fn reserve(&self, rate: BitRate, load: f64) -> Result<(), String> {
        if load > self.max_load {
            return Err(format!(
                "the pacing threads are {:.0}% busy (limit {:.0}%): another stream would make \
                 every stream late; stop a stream or add cores",
                load * 100.0,
                self.max_load * 100.0
            ));
        }
        let mut now = self.reserved.load(Ordering::Relaxed);
        loop {
            let after = now.saturating_add(rate.bps());
            if let Some(max) = self.max_rate
                && after > max.bps()
            {
                return Err(format!(
                    "a stream of {} on top of the {} in use would exceed --max-rate {}",
                    bitrate(rate.as_f64()),
                    bitrate(now as f64),
                    bitrate(max.as_f64())
                ));
            }
            match self
                .reserved
                .compare_exchange(now, after, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => now = seen,
            }
        }
    }

    /// Gives back what [`Admission::reserve`] took.
    pub(crate) fn release(&self, rate: BitRate) {
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |r| {
                Some(r.saturating_sub(rate.bps()))
            });
    }

    /// Rate reserved now.
    pub(crate) fn reserved(&self) -> BitRate {
        BitRate(self.reserved.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_own_address() {
        let b = parse_cidr("10.1.0.0/16").unwrap();
        assert!(b.contains("10.1.200.3".parse().unwrap()));
        assert!(!b.contains("10.2.0.1".parse().unwrap()));
        assert!(
            parse_cidr("::/0")
                .unwrap()
                .contains("fd00::1".parse().unwrap())
        );
        assert!(
            parse_cidr("0.0.0.0/0")
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("nope").is_err());
        let list = AllowList::new(vec![parse_cidr("239.0.0.0/8").unwrap()]);
        let me: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(list.permits(me, me));
        assert!(list.permits(me, "::ffff:127.0.0.1".parse().unwrap()));
        assert!(list.permits(me, "239.1.1.1".parse().unwrap()));
        assert!(!list.permits(me, "127.0.0.2".parse().unwrap()));
    }

    #[test]
    fn token_and_admission() {
        let t = Token::new(Some("s3cret-token".into()), false).unwrap();
        assert!(t.admits(Some("Bearer s3cret-token")));
        assert!(!t.admits(Some("Bearer s3cret-tokeN")));
        assert!(!t.admits(None));
        assert!(Token::new(None, false).is_err());
        assert!(Token::new(None, true).unwrap().admits(None));
        let a = Admission::new(Some(BitRate(10_000_000)), 0.9);
        assert!(a.reserve(BitRate(6_000_000), 0.1).is_ok());
        let e = a.reserve(BitRate(6_000_000), 0.1).unwrap_err();
        assert!(e.contains("--max-rate"), "{e}");
        assert!(a.reserve(BitRate(1), 0.95).unwrap_err().contains("busy"));
        a.release(BitRate(6_000_000));
        assert!(a.reserve(BitRate(6_000_000), 0.1).is_ok());
    }
}
