//! A receiver's `transport_file`: the sender's SDP, read with proto's
//! `sdp` module into the receiver's transport parameters (group, source,
//! port per leg; the legs of an `a=group:DUP` in order), which
//! `transport_params` in the same PATCH may then override, as IS-05 says.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::params::{Leg, Param};
use crate::mpegts::MP2T_PAYLOAD_TYPE;
use crate::sdp::{Connection, Group, Media, Origin, RefClock, SdpStream, Session, SourceFilter};
use crate::serve::describe::Track;

/// The only transport file type nagare reads.
pub const SDP_TYPE: &str = "application/sdp";

/// A transport file as staged (`data` and `type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFile {
    /// The SDP text.
    pub data: String,
    /// `application/sdp`.
    pub kind: String,
}

impl TransportFile {
    /// `transport_file` as `/staged` and `/active` show it; none is
    /// `{"data": null, "type": null}`.
    pub fn to_json(file: Option<&TransportFile>) -> Value {
        match file {
            Some(f) => json!({ "data": f.data, "type": f.kind }),
            None => json!({ "data": null, "type": null }),
        }
    }
}

/// Why a PATCH's `transport_file` was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FileError {
    /// It breaks the schema or names another type (`400`).
    Bad(String),
    /// Its SDP cannot be read (`500`).
    Unreadable(String),
}

fn bad(message: impl Into<String>) -> FileError {
    FileError::Bad(message.into())
}

/// Applies a PATCH's `transport_file` to a receiver's `legs` and `file`:
/// `data` null clears it; an SDP sets every leg it names and disables
/// the others.
pub(super) fn apply(
    value: &Value,
    legs: &mut [Leg],
    file: &mut Option<TransportFile>,
) -> Result<(), FileError> {
    let Value::Object(fields) = value else {
        return Err(bad("transport_file must be an object with data and type"));
    };
    if let Some(other) = fields.keys().find(|k| *k != "data" && *k != "type") {
        return Err(bad(format!(
            "'{other}' is not a field of transport_file: data and type are"
        )));
    }
    let (Some(data), Some(kind)) = (fields.get("data"), fields.get("type")) else {
        return Err(bad("transport_file needs both data and type"));
    };
    let data = match data {
        Value::Null => {
            *file = None;
            return Ok(());
        }
        Value::String(s) => s,
        other => return Err(bad(format!("transport_file data {other} is not a string"))),
    };
    if kind.as_str() != Some(SDP_TYPE) {
        return Err(bad(format!(
            "transport_file type {kind} is not supported: give \"{SDP_TYPE}\""
        )));
    }
    let streams = SdpStream::parse_legs(data).map_err(|e| FileError::Unreadable(e.to_string()))?;
    for (k, leg) in legs.iter_mut().enumerate() {
        match streams.get(k) {
            Some(s) => fill(leg, s),
            None => leg.set("rtp_enabled", Param::Flag(false)),
        }
    }
    *file = Some(TransportFile {
        data: data.clone(),
        kind: SDP_TYPE.into(),
    });
    Ok(())
}

/// One leg from one SDP media: a multicast group is joined (from its
/// source, under source-specific multicast); a unicast address is the
/// receiver's own interface.
fn fill(leg: &mut Leg, s: &SdpStream) {
    let ip = |a: Option<IpAddr>| a.map_or(Param::Null, Param::Ip);
    if s.address.is_multicast() {
        leg.set("multicast_ip", Param::Ip(s.address));
        leg.set("source_ip", ip(s.source));
    } else {
        leg.set("multicast_ip", Param::Null);
        leg.set("source_ip", Param::Null);
        leg.set("interface_ip", Param::Ip(s.address));
    }
    leg.set("destination_port", Param::Port(s.port));
    leg.set("rtp_enabled", Param::Flag(true));
}

/// A sender's transport file: the SDP nagare writes for a stream of
/// `track` named `name`, sent as the active `legs` say (destination,
/// port, source), clocked by `clock`; two enabled legs are an ST 2022-7
/// pair (`a=group:DUP`). `None` while no leg is enabled with a
/// destination, which IS-05 answers with 404.
pub fn sender_sdp(
    name: &str,
    track: Track,
    legs: &[Leg],
    clock: Option<RefClock>,
    session_id: u64,
) -> Option<String> {
    let enabled: Vec<(IpAddr, u16, Option<IpAddr>)> = legs
        .iter()
        .filter(|l| l.enabled())
        .filter_map(|l| {
            let dest = l.ip("destination_ip").filter(|ip| !ip.is_unspecified())?;
            Some((dest, l.port("destination_port")?, l.ip("source_ip")))
        })
        .collect();
    let mut media = Vec::new();
    let mut session = None;
    for (address, port, source) in &enabled {
        let one = match track.raw_stream(name, (*address, *port, *source), clock) {
            Some(stream) => stream.to_session(session_id),
            None => ts_session(name, *address, *port, *source, session_id),
        };
        media.extend(one.media.iter().cloned());
        session.get_or_insert(one);
    }
    let mut session = session?;
    if media.len() > 1 {
        for (k, m) in media.iter_mut().enumerate() {
            m.mid = Some(if k == 0 { "primary" } else { "secondary" }.into());
        }
        session.groups = vec![Group {
            semantics: "DUP".into(),
            mids: media.iter().filter_map(|m| m.mid.clone()).collect(),
        }];
    }
    session.media = media;
    Some(session.to_sdp())
}

/// MPEG-TS over RTP (RFC 2250) to one destination.
fn ts_session(
    name: &str,
    address: IpAddr,
    port: u16,
    source: Option<IpAddr>,
    session_id: u64,
) -> Session {
    let mut m = Media::new("video", port, "RTP/AVP", MP2T_PAYLOAD_TYPE);
    m.encoding = Some("MP2T/90000".into());
    m.connection = Some(Connection { address, ttl: None });
    if let (true, Some(src)) = (address.is_multicast(), source) {
        m.source_filter = Some(SourceFilter {
            destination: Some(address),
            sources: vec![src],
        });
    }
    Session {
        origin: Some(Origin {
            session_id,
            version: session_id,
            address: source.unwrap_or(address),
        }),
        name: name.to_string(),
        media: vec![m],
        ..Session::default()
    }
}
