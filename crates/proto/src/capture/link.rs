//! From a captured link-layer frame to the UDP datagram inside it:
//! Ethernet (with up to two VLAN tags), Linux cooked capture v1 and v2
//! (`tcpdump -i any`), BSD loopback and raw IP; IPv4 without fragments
//! and IPv6 past its common extension headers. Every length is checked
//! against the bytes actually captured.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// pcap link types (LINKTYPE_* of tcpdump.org) this module reads.
mod linktype {
    pub(super) const NULL: u32 = 0;
    pub(super) const ETHERNET: u32 = 1;
    pub(super) const RAW: u32 = 101;
    pub(super) const LOOP: u32 = 108;
    pub(super) const LINUX_SLL: u32 = 113;
    pub(super) const IPV4: u32 = 228;
    pub(super) const IPV6: u32 = 229;
    pub(super) const LINUX_SLL2: u32 = 276;
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const PROTO_UDP: u8 = 17;

/// One UDP datagram found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// Sender.
    pub source: SocketAddr,
    /// Destination.
    pub destination: SocketAddr,
    /// The UDP payload (cut short if the capture's snap length was).
    pub payload: &'a [u8],
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The UDP datagram a frame of `link` type carries, if any.
pub fn udp_datagram(link: u32, frame: &[u8]) -> Option<UdpDatagram<'_>> {
    match link {
        linktype::ETHERNET => ethernet(frame),
        linktype::NULL | linktype::LOOP => ip(frame.get(4..)?),
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => ip(frame),
        linktype::LINUX_SLL => by_ethertype(u16_at(frame, 14)?, frame.get(16..)?),
        linktype::LINUX_SLL2 => by_ethertype(u16_at(frame, 0)?, frame.get(20..)?),
        _ => None,
    }
}

fn ethernet(frame: &[u8]) -> Option<UdpDatagram<'_>> {
    let mut at = 12;
    let mut ethertype = u16_at(frame, at)?;
    for _ in 0..2 {
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            break;
        }
        at += 4;
        ethertype = u16_at(frame, at)?;
    }
    by_ethertype(ethertype, frame.get(at + 2..)?)
}

fn by_ethertype(ethertype: u16, packet: &[u8]) -> Option<UdpDatagram<'_>> {
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => ip(packet),
        _ => None,
    }
}

/// IPv4 or IPv6 by the version nibble.
fn ip(packet: &[u8]) -> Option<UdpDatagram<'_>> {
    match packet.first()? >> 4 {
        4 => ipv4(packet),
        6 => ipv6(packet),
        _ => None,
    }
}

fn ipv4(p: &[u8]) -> Option<UdpDatagram<'_>> {
    let header = usize::from(p.first()? & 0x0f) * 4;
    let total = usize::from(u16_at(p, 2)?);
    let fragment = u16_at(p, 6)?;
    // Fragments are not reassembled: a later fragment has no UDP header,
    // a first one only part of the datagram.
    if header < 20 || fragment & 0x3fff != 0 || *p.get(9)? != PROTO_UDP {
        return None;
    }
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(p.get(12..16)?).ok()?);
    let dst = Ipv4Addr::from(<[u8; 4]>::try_from(p.get(16..20)?).ok()?);
    // Ethernet pads short frames: the IP length says where the packet ends.
    let body = p.get(header..total.min(p.len()))?;
    udp(IpAddr::V4(src), IpAddr::V4(dst), body)
}

fn ipv6(p: &[u8]) -> Option<UdpDatagram<'_>> {
    let payload_len = usize::from(u16_at(p, 4)?);
    let mut next = *p.get(6)?;
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(p.get(8..24)?).ok()?);
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(p.get(24..40)?).ok()?);
    let end = (40 + payload_len).min(p.len());
    let mut at = 40;
    // Hop-by-hop, routing and destination options, a bounded chain.
    for _ in 0..4 {
        if !matches!(next, 0 | 43 | 60) {
            break;
        }
        next = *p.get(at)?;
        at += (usize::from(*p.get(at + 1)?) + 1) * 8;
    }
    if next != PROTO_UDP {
        return None;
    }
    udp(IpAddr::V6(src), IpAddr::V6(dst), p.get(at..end)?)
}

fn udp(src: IpAddr, dst: IpAddr, b: &[u8]) -> Option<UdpDatagram<'_>> {
    let len = usize::from(u16_at(b, 4)?);
    if len < 8 {
        return None;
    }
    Some(UdpDatagram {
        source: SocketAddr::new(src, u16_at(b, 0)?),
        destination: SocketAddr::new(dst, u16_at(b, 2)?),
        payload: b.get(8..len.min(b.len()))?,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet frame with an IPv4/UDP datagram of `payload` from
    /// 10.0.0.1:5000 to `dst` (checksums left zero: nothing checks them).
    pub(crate) fn ethernet_udp(dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let IpAddr::V4(d) = dst.ip() else {
            panic!("IPv4 only")
        };
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let total = (20 + 8 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, PROTO_UDP, 0, 0]);
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[10, 0, 0, 1]);
        f.extend_from_slice(&d.octets());
        f.extend_from_slice(&5000u16.to_be_bytes());
        f.extend_from_slice(&dst.port().to_be_bytes());
        f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn ethernet_vlan_sll_and_raw_frames() {
        let dst: SocketAddr = "239.1.1.1:5004".parse().unwrap();
        let f = ethernet_udp(dst, b"hello");
        let d = udp_datagram(linktype::ETHERNET, &f).unwrap();
        assert_eq!((d.destination, d.payload), (dst, &b"hello"[..]));
        assert_eq!(d.source, "10.0.0.1:5000".parse().unwrap());
        // Ethernet padding after the IP packet is not payload.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0xee; 20]);
        assert_eq!(
            udp_datagram(linktype::ETHERNET, &padded).unwrap().payload,
            b"hello"
        );
        // One VLAN tag.
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(udp_datagram(linktype::ETHERNET, &tagged), Some(d));
        // Raw IP, BSD loopback and Linux cooked captures of the same packet.
        let ip = &f[14..];
        assert_eq!(udp_datagram(linktype::RAW, ip), Some(d));
        let null: Vec<u8> = [2, 0, 0, 0].iter().chain(ip).copied().collect();
        assert_eq!(udp_datagram(linktype::NULL, &null), Some(d));
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.extend_from_slice(ip);
        assert_eq!(udp_datagram(linktype::LINUX_SLL, &sll), Some(d));
        let mut sll2 = ETHERTYPE_IPV4.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(ip);
        assert_eq!(udp_datagram(linktype::LINUX_SLL2, &sll2), Some(d));
    }

    #[test]
    fn ipv6_past_a_destination_option() {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 60, 64];
        p.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"ff15::9".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&[PROTO_UDP, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[0x13, 0x88, 0x13, 0x8c, 0, 11, 0, 0, 1, 2, 3]);
        let len = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
        let d = udp_datagram(linktype::IPV6, &p).unwrap();
        assert_eq!(d.destination, "[ff15::9]:5004".parse().unwrap());
        assert_eq!(d.payload, [1, 2, 3]);
    }

    #[test]
    fn fragments_tcp_and_truncations_are_not_datagrams() {
        let dst: SocketAddr = "127.0.0.1:5004".parse().unwrap();
        let f = ethernet_udp(dst, b"abc");
        let mut frag = f.clone();
        frag[20] = 0x20; // more fragments
        assert_eq!(udp_datagram(linktype::ETHERNET, &frag), None);
        let mut tcp = f.clone();
        tcp[23] = 6;
        assert_eq!(udp_datagram(linktype::ETHERNET, &tcp), None);
        for cut in 0..42 {
            assert_eq!(udp_datagram(linktype::ETHERNET, &f[..cut]), None, "{cut}");
        }
        // A snap length inside the payload keeps what was captured.
        assert_eq!(
            udp_datagram(linktype::ETHERNET, &f[..43]).unwrap().payload,
            b"a"
        );
        assert_eq!(udp_datagram(999, &f), None);
    }
}
