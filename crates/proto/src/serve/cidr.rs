//! Address blocks of `--allow`: what a block is and what lies in it.
//! Parsing the text is `access`'s, so the refusal stays in one place.

use std::fmt;
use std::net::IpAddr;

/// An address block, `10.0.0.0/8` or `fd00::/64` (a bare address is /32
/// or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `net` with `prefix` bits. The caller has checked that
    /// `prefix` fits the address family.
    pub(super) fn from_parts(net: IpAddr, prefix: u8) -> Cidr {
        Cidr {
            net: canonical(net),
            prefix,
        }
    }

    /// Whether `ip` lies in the block (an IPv4-mapped IPv6 address counts
    /// as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                // checked_shl: a /0 shifts by the full width, which is
                // no mask bits at all rather than an overflow.
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

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps, so a
/// dual-stack socket's peer compares equal to its IPv4 form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
