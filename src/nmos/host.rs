//! What a node says of its host: its name, the address its API is
//! reached at, its interfaces with their MACs, the interface its streams
//! are bound to and the MAC naming its clock. Read once at start, the
//! same way for serve's senders and `recv --nmos`'s receiver.

use std::net::{IpAddr, SocketAddr};

use nagare_proto::nmos::resource::Interface;
use nagare_proto::nmos::{NodeSpec, ResourceId};

use crate::net::iface::{self, Link};

/// The host facts of a node.
pub(crate) struct Host {
    /// The node's resources' fixed part: no paths, streams or receivers
    /// yet (the node fills them).
    pub spec: NodeSpec,
    /// The node's own address (the API's, or the first non-loopback
    /// IPv4 for a wildcard one): what `"auto"` resolves to.
    pub address: IpAddr,
    /// The MAC the transport files name the host's clock by.
    pub clock_mac: Option<[u8; 6]>,
}

impl Host {
    /// The host of node `id` (`program` says what it is, e.g. `nagare
    /// serve`) whose API listens on `http`, needing a token when
    /// `authorization`; its streams are bound to `interface` (by kernel
    /// index) when given.
    pub(crate) fn read(
        id: ResourceId,
        program: &'static str,
        http: SocketAddr,
        authorization: bool,
        interface: Option<u32>,
    ) -> Host {
        let links = iface::links().unwrap_or_default();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        let host = api_host(http.ip(), &links);
        let interfaces: Vec<Interface> = links
            .iter()
            .filter_map(|l| l.mac().map(|mac| Interface::new(&l.name, mac)))
            .collect();
        let binding = bound_link(&links, http.ip(), interface)
            .or_else(|| interfaces.first().map(|i| i.name.clone()));
        let address = host.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]));
        Host {
            spec: NodeSpec {
                node_id: id,
                label: hostname.clone().unwrap_or_else(|| "nagare".into()),
                hostname,
                api_host: host,
                api_port: http.port(),
                authorization,
                interfaces,
                bindings: binding.into_iter().collect(),
                paths: Vec::new(),
                streams: Vec::new(),
                connection_api: true,
                receivers: Vec::new(),
                program,
            },
            address,
            clock_mac: (!links.is_empty()).then(|| iface::clock_mac(Some(address), &links).0),
        }
    }
}

/// The host the Node API is reached at: the listen address, or for an
/// unspecified one (every interface) the first non-loopback IPv4.
fn api_host(ip: IpAddr, links: &[Link]) -> String {
    if !ip.is_unspecified() {
        return ip.to_string();
    }
    links
        .iter()
        .filter(|l| !l.loopback)
        .find_map(Link::ipv4)
        .map_or_else(|| "127.0.0.1".into(), |a| a.to_string())
}

/// The interface streams go through: the one asked for, else the one
/// holding the API's address, else the first that is not loopback.
fn bound_link(links: &[Link], ip: IpAddr, asked: Option<u32>) -> Option<String> {
    let by_index = asked.and_then(|i| links.iter().find(|l| l.index == i));
    let by_addr = || links.iter().find(|l| l.addrs.contains(&ip));
    let first = || links.iter().find(|l| !l.loopback && l.mac().is_some());
    by_index
        .or_else(by_addr)
        .or_else(first)
        .map(|l| l.name.clone())
}
