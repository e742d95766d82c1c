//! Choosing a track's transport from the client's `Transport` list, and
//! writing the chosen one back. rtsp-types parses and writes the header;
//! the decisions (which offers nagare takes, and the destination rule that
//! keeps the server from flooding third parties) are here.

use std::net::IpAddr;

use rtsp_types::headers::transport::{
    RtpLowerTransport, RtpProfile, RtpTransport, RtpTransportParameters, Transport as Offer,
    TransportMode, Transports,
};

use super::{Catalog, Error, StreamInfo};
use crate::rtsp::error::Header;

/// A UDP port pair: RTP on `rtp`, RTCP on `rtcp` (by convention `rtp + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortPair {
    /// RTP port.
    pub rtp: u16,
    /// RTCP port.
    pub rtcp: u16,
}

impl PortPair {
    /// `rtp` and `rtp + 1`, or `None` for port 0 or 65535.
    pub fn from_rtp(rtp: u16) -> Option<PortPair> {
        (rtp != 0).then_some(())?;
        Some(PortPair {
            rtp,
            rtcp: rtp.checked_add(1)?,
        })
    }

    /// Both ports moved up by `2 * track` (one pair per track of a stream).
    pub fn for_track(self, track: u16) -> Option<PortPair> {
        let off = track.checked_mul(2)?;
        Some(PortPair {
            rtp: self.rtp.checked_add(off)?,
            rtcp: self.rtcp.checked_add(off)?,
        })
    }
}

/// A multicast group a stream is published on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MulticastGroup {
    /// The group address.
    pub group: IpAddr,
    /// Ports of track 0; track `n` uses these plus `2n`.
    pub ports: PortPair,
    /// Hop limit of the datagrams.
    pub ttl: u8,
}

/// How one track's media reaches the client, as SETUP negotiated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RTP over UDP to one address: the client's own, or one the
    /// catalog's allow-list admitted.
    Udp {
        /// Where RTP and RTCP go.
        destination: IpAddr,
        /// Client ports.
        ports: PortPair,
    },
    /// RTP and RTCP as `$` frames on this RTSP connection.
    Interleaved {
        /// Channel of RTP.
        rtp: u8,
        /// Channel of RTCP.
        rtcp: u8,
    },
    /// RTP to a multicast group.
    Multicast(MulticastGroup),
}

/// What the choice depends on besides the offers.
pub(crate) struct Context<'a, C: ?Sized> {
    pub(crate) catalog: &'a C,
    pub(crate) client: IpAddr,
    pub(crate) stream: &'a StreamInfo,
    pub(crate) track: u16,
    /// Interleaved channels other tracks of the session use.
    pub(crate) taken: &'a [u8],
}

/// The first offer in `header` that nagare can serve, in the client's
/// order of preference. When none fits, a refused destination wins over
/// other reasons (the client should learn that it was refused), then the
/// reason for the client's first offer.
pub(crate) fn choose<C: Catalog + ?Sized>(
    header: &str,
    ctx: &Context<'_, C>,
) -> Result<Transport, Error> {
    let offers = parse(header)?;
    let mut first_error = None;
    let mut forbidden = None;
    for offer in offers.iter() {
        match accept(offer, ctx) {
            Ok(t) => return Ok(t),
            Err(e @ (Error::DestinationForbidden { .. } | Error::DestinationNotAddress)) => {
                forbidden.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(forbidden
        .or(first_error)
        .unwrap_or(Error::UnsupportedTransport))
}

/// Parses the header with rtsp-types, after screening out the inputs on
/// which rtsp-types 0.1.3 panics: a backslash inside `dest_addr` or
/// `src_addr` (RTSP 2.0 parameters an RTSP/1.0 server refuses anyway) and
/// a lone `"` as the last parameter value (`mode="`). Neither appears in
/// a valid RTSP/1.0 transport, so nothing usable is lost.
fn parse(header: &str) -> Result<Transports, Error> {
    if header.contains('\\') || header.contains("dest_addr") || header.contains("src_addr") {
        return Err(Error::UnsupportedTransport);
    }
    let tail = header.trim_end();
    if let Some(before) = tail.strip_suffix('"') {
        if before.trim_end_matches([' ', '\t']).ends_with('=') {
            return Err(Error::InvalidHeader(Header::Transport));
        }
    }
    // rtsp-types reads typed headers out of a message only.
    let carrier =
        rtsp_types::Request::builder(rtsp_types::Method::Setup, rtsp_types::Version::V1_0)
            .header(rtsp_types::headers::TRANSPORT, header)
            .empty();
    match carrier.typed_header::<Transports>() {
        Ok(Some(t)) => Ok(t),
        _ => Err(Error::InvalidHeader(Header::Transport)),
    }
}

/// One offer: RTP/AVP only, for playing, over UDP, TCP or multicast.
fn accept<C: Catalog + ?Sized>(offer: &Offer, ctx: &Context<'_, C>) -> Result<Transport, Error> {
    let Offer::Rtp(rtp) = offer else {
        return Err(Error::UnsupportedTransport);
    };
    if rtp.profile != RtpProfile::Avp {
        return Err(Error::UnsupportedTransport);
    }
    let p = &rtp.params;
    if !p.mode.is_empty() && !p.mode.contains(&TransportMode::Play) {
        return Err(Error::UnsupportedTransport);
    }
    match &rtp.lower_transport {
        Some(RtpLowerTransport::Tcp) if !p.multicast => interleaved(p, ctx),
        None | Some(RtpLowerTransport::Udp) => {
            // RFC 2326 makes multicast the default; clients that want
            // unicast say so or name their ports.
            if p.multicast || (!p.unicast && p.client_port.is_none()) {
                multicast(p, ctx)
            } else {
                unicast(p, ctx)
            }
        }
        _ => Err(Error::UnsupportedTransport),
    }
}

fn interleaved<C: Catalog + ?Sized>(
    p: &RtpTransportParameters,
    ctx: &Context<'_, C>,
) -> Result<Transport, Error> {
    let (rtp, rtcp) = match p.interleaved {
        Some((rtp, Some(rtcp))) => (rtp, rtcp),
        Some((rtp, None)) => (
            rtp,
            rtp.checked_add(1)
                .ok_or(Error::ChannelInUse { channel: rtp })?,
        ),
        // The client left the choice to the server: the lowest free pair.
        None => (0..=253u8)
            .step_by(2)
            .map(|c| (c, c + 1))
            .find(|(a, b)| !ctx.taken.contains(a) && !ctx.taken.contains(b))
            .ok_or(Error::ChannelInUse { channel: 254 })?,
    };
    for channel in [rtp, rtcp] {
        if ctx.taken.contains(&channel) {
            return Err(Error::ChannelInUse { channel });
        }
    }
    if rtp == rtcp {
        return Err(Error::ChannelInUse { channel: rtcp });
    }
    Ok(Transport::Interleaved { rtp, rtcp })
}

fn unicast<C: Catalog + ?Sized>(
    p: &RtpTransportParameters,
    ctx: &Context<'_, C>,
) -> Result<Transport, Error> {
    let (rtp, rtcp) = p.client_port.ok_or(Error::MissingClientPort)?;
    let ports = match rtcp {
        Some(rtcp) if rtp != 0 && rtcp != 0 => PortPair { rtp, rtcp },
        Some(_) => return Err(Error::BadClientPort { port: 0 }),
        None => PortPair::from_rtp(rtp).ok_or(Error::BadClientPort { port: rtp })?,
    };
    let destination = match &p.destination {
        None => ctx.client,
        Some(text) => allowed_destination(text, ctx)?,
    };
    Ok(Transport::Udp { destination, ports })
}

fn multicast<C: Catalog + ?Sized>(
    p: &RtpTransportParameters,
    ctx: &Context<'_, C>,
) -> Result<Transport, Error> {
    let ours = ctx.stream.multicast.ok_or(Error::MulticastUnavailable)?;
    let ports = ours
        .ports
        .for_track(ctx.track)
        .ok_or(Error::MulticastUnavailable)?;
    let mut group = MulticastGroup { ports, ..ours };
    if let Some(text) = &p.destination {
        let asked = allowed_destination(text, ctx)?;
        if asked != ours.group {
            // A group the client picked: honoured only because the
            // allow-list admitted it, with the client's ports if given.
            group.group = asked;
            if let Some((rtp, rtcp)) = p.port {
                let pair = match rtcp {
                    Some(rtcp) => PortPair { rtp, rtcp },
                    None => PortPair::from_rtp(rtp).ok_or(Error::BadClientPort { port: rtp })?,
                };
                group.ports = pair;
            }
        }
    }
    if let Some(ttl) = p.ttl {
        group.ttl = group.ttl.min(ttl);
    }
    Ok(Transport::Multicast(group))
}

/// `destination=` must be an address, and the client's own unless the
/// catalog's allow-list admits it: otherwise anyone could aim the
/// server's bandwidth at a third party.
fn allowed_destination<C: Catalog + ?Sized>(
    text: &str,
    ctx: &Context<'_, C>,
) -> Result<IpAddr, Error> {
    let bare = text.trim().trim_start_matches('[').trim_end_matches(']');
    let destination: IpAddr = bare.parse().map_err(|_| Error::DestinationNotAddress)?;
    let same = destination == ctx.client
        || match (destination, ctx.client) {
            (IpAddr::V6(d), IpAddr::V4(c)) => d.to_ipv4_mapped() == Some(c),
            (IpAddr::V4(d), IpAddr::V6(c)) => c.to_ipv4_mapped() == Some(d),
            _ => false,
        };
    if same
        || (ctx.stream.multicast.map(|m| m.group) == Some(destination)
            && destination.is_multicast())
        || ctx.catalog.destination_allowed(ctx.client, destination)
    {
        Ok(destination)
    } else {
        Err(Error::DestinationForbidden {
            client: ctx.client,
            destination,
        })
    }
}

/// The `Transport` header of the SETUP response; `server` is the server's
/// RTP/RTCP source port pair for UDP unicast, and `ssrc` the media's SSRC,
/// if the driver named them.
pub(crate) fn reply(t: &Transport, server: Option<PortPair>, ssrc: Option<u32>) -> Transports {
    let mut params = RtpTransportParameters {
        ssrc: ssrc.into_iter().collect(),
        ..RtpTransportParameters::default()
    };
    let mut lower = None;
    match *t {
        // No `destination=` here even when the client named one:
        // GStreamer sends its RTCP to a unicast reply's destination, which
        // would be the client itself.
        Transport::Udp { ports, .. } => {
            params.unicast = true;
            params.client_port = Some((ports.rtp, Some(ports.rtcp)));
            params.server_port = server.map(|s| (s.rtp, Some(s.rtcp)));
        }
        Transport::Interleaved { rtp, rtcp } => {
            lower = Some(RtpLowerTransport::Tcp);
            params.unicast = true;
            params.interleaved = Some((rtp, Some(rtcp)));
        }
        Transport::Multicast(g) => {
            params.multicast = true;
            params.destination = Some(g.group.to_string());
            params.port = Some((g.ports.rtp, Some(g.ports.rtcp)));
            params.ttl = Some(g.ttl);
        }
    }
    vec![Offer::Rtp(RtpTransport {
        profile: RtpProfile::Avp,
        lower_transport: lower,
        params,
    })]
    .into()
}
