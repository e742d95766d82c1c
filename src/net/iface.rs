//! The network interfaces of this host: names, kernel indexes, addresses,
//! flags and MTU, and `--interface ADDR|NAME` resolved against them.
//!
//! The list comes from `getifaddrs` through nix's safe iterator (it owns
//! and frees the C list); the MTU from sysfs, which needs no ioctl. None of
//! this runs on a per-packet path.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use nix::net::if_::{InterfaceFlags, if_nametoindex};

/// One interface as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// Its name (`lo`, `eth0`).
    pub name: String,
    /// Kernel interface index (0 where the name no longer resolves).
    pub index: u32,
    /// Its IPv4 and IPv6 addresses, in the kernel's order.
    pub addrs: Vec<IpAddr>,
    /// Whether the kernel marks it able to carry multicast (IFF_MULTICAST).
    pub multicast: bool,
    /// Whether it is a loopback interface (IFF_LOOPBACK).
    pub loopback: bool,
}

impl Link {
    /// Its first IPv4 address, if any.
    pub(crate) fn ipv4(&self) -> Option<Ipv4Addr> {
        self.addrs.iter().find_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
    }

    /// Its hardware (MAC) address, from sysfs; `None` for interfaces
    /// without a 6-byte one (tunnels).
    pub(crate) fn mac(&self) -> Option<[u8; 6]> {
        let path = PathBuf::from("/sys/class/net")
            .join(&self.name)
            .join("address");
        parse_mac(std::fs::read_to_string(path).ok()?.trim())
    }

    /// Its MTU in bytes, from sysfs.
    pub(crate) fn mtu(&self) -> io::Result<u32> {
        let path = PathBuf::from("/sys/class/net").join(&self.name).join("mtu");
        let text = std::fs::read_to_string(&path)?;
        text.trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{text:?}")))
    }
}

/// Every interface of this host, each once, with all its addresses; an
/// interface without any address is listed too.
pub(crate) fn links() -> io::Result<Vec<Link>> {
    let mut out: Vec<Link> = Vec::new();
    for entry in nix::ifaddrs::getifaddrs()? {
        let addr = entry.address.as_ref().and_then(|a| {
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        });
        let pos = match out.iter().position(|l| l.name == entry.interface_name) {
            Some(pos) => pos,
            None => {
                out.push(Link {
                    index: if_nametoindex(entry.interface_name.as_str()).unwrap_or(0),
                    name: entry.interface_name,
                    addrs: Vec::new(),
                    multicast: entry.flags.contains(InterfaceFlags::IFF_MULTICAST),
                    loopback: entry.flags.contains(InterfaceFlags::IFF_LOOPBACK),
                });
                out.len() - 1
            }
        };
        out[pos].addrs.extend(addr);
    }
    Ok(out)
}

/// The interface with kernel index `index`, if it exists.
pub(crate) fn find(index: u32) -> io::Result<Option<Link>> {
    Ok(links()?.into_iter().find(|l| l.index == index))
}

/// `02:fc:00:00:00:01` as bytes.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = text.split(':');
    for o in &mut out {
        *o = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The MAC address that names this host's clock in an SDP's
/// `a=ts-refclk:localmac=` (ST 2110-10 8.2), for a stream sent from
/// `local`: the sending interface's, except that loopback's is all zeros
/// and names nothing, so a stream sent over loopback (which never leaves
/// the host) takes the first other interface's, preferring one with an
/// address. The second value says
/// which interface it came from when that is not the sending one.
pub(crate) fn clock_mac(local: Option<IpAddr>, links: &[Link]) -> ([u8; 6], Option<String>) {
    let real = |l: &Link| l.mac().filter(|m| m.iter().any(|b| *b != 0));
    let sending = local.and_then(|ip| links.iter().find(|l| l.addrs.contains(&ip)));
    if let Some(mac) = sending.and_then(real) {
        return (mac, None);
    }
    // An interface with an address (the host's network card) before
    // address-less ones (ifb, bridges' ports).
    let mut others: Vec<&Link> = links.iter().filter(|l| !l.loopback).collect();
    others.sort_by_key(|l| l.addrs.is_empty());
    match others
        .into_iter()
        .find_map(|l| real(l).map(|m| (m, l.name.clone())))
    {
        Some((mac, name)) => (mac, Some(name)),
        None => ([0; 6], None),
    }
}

/// A network interface named by address or by name.
#[derive(Debug, Clone)]
pub(crate) struct Interface {
    /// What the user typed, for messages.
    pub label: String,
    /// Kernel interface index.
    pub index: u32,
    /// Its first IPv4 address, if any.
    pub ipv4: Option<Ipv4Addr>,
}

/// Resolves `--interface ADDR|NAME` against the machine's interfaces.
/// Usable as a clap `value_parser`.
pub(crate) fn parse_interface(text: &str) -> Result<Interface> {
    let links = links().context("listing network interfaces")?;
    resolve(text, &links)
}

/// [`parse_interface`] against a given list (pure, for tests).
fn resolve(text: &str, links: &[Link]) -> Result<Interface> {
    let known = || {
        links
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Ok(ip) = text.parse::<IpAddr>() {
        let link = links
            .iter()
            .find(|l| l.addrs.contains(&ip))
            .ok_or_else(|| {
                anyhow!(
                    "no interface has the address {ip}: give an address of this machine or an \
                     interface name ({})",
                    known()
                )
            })?;
        return Ok(Interface {
            label: text.to_string(),
            index: link.index,
            ipv4: match ip {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => link.ipv4(),
            },
        });
    }
    let link = links
        .iter()
        .find(|l| l.name == text)
        .ok_or_else(|| anyhow!("no interface named '{text}' (known: {})", known()))?;
    Ok(Interface {
        label: text.to_string(),
        index: link.index,
        ipv4: link.ipv4(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<Link> {
        vec![
            Link {
                name: "lo".into(),
                index: 1,
                addrs: vec![IpAddr::from([127, 0, 0, 1]), "::1".parse().unwrap()],
                multicast: false,
                loopback: true,
            },
            Link {
                name: "v0".into(),
                index: 7,
                addrs: vec!["fd00::1".parse().unwrap()],
                multicast: true,
                loopback: false,
            },
        ]
    }

    #[test]
    fn resolves_by_name_and_by_address() {
        let i = resolve("lo", &host()).unwrap();
        assert_eq!((i.index, i.ipv4), (1, Some(Ipv4Addr::LOCALHOST)));
        let i = resolve("::1", &host()).unwrap();
        assert_eq!((i.index, i.ipv4), (1, Some(Ipv4Addr::LOCALHOST)));
        let i = resolve("fd00::1", &host()).unwrap();
        assert_eq!((i.index, i.ipv4, i.label.as_str()), (7, None, "fd00::1"));
    }

    #[test]
    fn unknown_names_and_addresses_list_the_known_ones() {
        let e = resolve("eth9", &host()).unwrap_err().to_string();
        assert_eq!(e, "no interface named 'eth9' (known: lo, v0)");
        let e = resolve("10.9.9.9", &host()).unwrap_err().to_string();
        assert!(e.contains("no interface has the address 10.9.9.9"), "{e}");
        assert!(e.contains("(lo, v0)"), "{e}");
    }

    #[test]
    fn macs_parse_from_sysfs_text() {
        assert_eq!(parse_mac("02:fc:00:00:00:01"), Some([2, 0xfc, 0, 0, 0, 1]));
        assert_eq!(parse_mac("02:fc:00:00:00"), None);
        assert_eq!(parse_mac("02:fc:00:00:00:01:02"), None);
        assert_eq!(parse_mac(""), None);
    }

    #[test]
    fn loopback_streams_name_the_clock_by_another_interface() {
        let links = links().unwrap();
        let lo = Some(IpAddr::from([127, 0, 0, 1]));
        let (mac, from) = clock_mac(lo, &links);
        let real = |l: &&Link| !l.loopback && l.mac().is_some_and(|m| m != [0; 6]);
        let other = (links.iter().filter(|l| !l.addrs.is_empty()).find(real))
            .or_else(|| links.iter().find(real));
        match other {
            Some(l) => assert_eq!(
                (mac, from.as_deref()),
                (l.mac().unwrap(), Some(l.name.as_str()))
            ),
            None => assert_eq!((mac, from), ([0; 6], None)),
        }
    }

    #[test]
    fn this_host_has_a_loopback_with_its_address_and_mtu() {
        let links = links().unwrap();
        let lo = links.iter().find(|l| l.loopback).expect("a loopback link");
        assert_eq!(find(lo.index).unwrap().as_ref(), Some(lo));
        assert!(lo.addrs.contains(&IpAddr::from([127, 0, 0, 1])), "{lo:?}");
        assert!(lo.mtu().unwrap() >= 1280, "{:?}", lo.mtu());
    }
}
