//! The session model: what an SDP says, parsed leniently (unknown lines
//! and attributes are skipped, as RFC 8866 asks) and written in a fixed
//! order with every value [`clean`]ed.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::{Error, clean};
use crate::video::FrameRate;

/// The `o=` line: who made the session description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// Session id (an NTP time will do).
    pub session_id: u64,
    /// Version of this description.
    pub version: u64,
    /// Address of the originating host.
    pub address: IpAddr,
}

/// A `c=` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// Unicast destination or multicast group.
    pub address: IpAddr,
    /// Multicast TTL. RFC 8866 gives one to IPv4 multicast addresses only,
    /// so parsing yields `None` for any other address and `Some(1)` (what
    /// the writer puts for `None`) when an IPv4 multicast `c=` line has no
    /// TTL, as FFmpeg's have not.
    pub ttl: Option<u8>,
}

/// An `a=source-filter: incl` line (RFC 4570): the only senders a
/// source-specific multicast receiver accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFilter {
    /// The destination the filter applies to (`None` for `*`).
    pub destination: Option<IpAddr>,
    /// Accepted sources.
    pub sources: Vec<IpAddr>,
}

/// An `a=group:` line: media bound together by their `a=mid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Semantics: `DUP` for ST 2022-7 redundant streams.
    pub semantics: String,
    /// The `a=mid` identifications of the grouped media.
    pub mids: Vec<String>,
}

/// One `m=` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// Media type: `video`, `audio`, ...
    pub kind: String,
    /// Transport port.
    pub port: u16,
    /// Transport protocol, `RTP/AVP` for nagare.
    pub protocol: String,
    /// The first payload type listed (the one nagare uses).
    pub payload_type: u8,
    /// The media's own `c=` line.
    pub connection: Option<Connection>,
    /// `a=source-filter` of this media.
    pub source_filter: Option<SourceFilter>,
    /// `a=mid`.
    pub mid: Option<String>,
    /// `a=rtpmap` encoding of the payload type (`raw/90000`).
    pub encoding: Option<String>,
    /// `a=fmtp` parameters of the payload type.
    pub fmtp: Option<String>,
    /// `a=framerate`.
    pub framerate: Option<FrameRate>,
    /// `a=ts-refclk` (ST 2110-10).
    pub ts_refclk: Option<String>,
    /// `a=mediaclk` (ST 2110-10).
    pub mediaclk: Option<String>,
    /// `a=control` (RFC 2326 C.1.1): the URL an RTSP client SETUPs this
    /// media with, relative to the session's Content-Base.
    pub control: Option<String>,
    /// `a=rtcp` (RFC 3605): the RTCP port, where it is not the RTP
    /// port + 1.
    pub rtcp_port: Option<u16>,
    /// The address of `a=rtcp`'s long form (`a=rtcp:PORT IN IP4 ADDR`),
    /// where RTCP is not on the media's own address.
    pub rtcp_address: Option<IpAddr>,
}

impl Media {
    /// A media section with nothing but its `m=` line.
    pub fn new(kind: &str, port: u16, protocol: &str, payload_type: u8) -> Media {
        Media {
            kind: kind.to_string(),
            port,
            protocol: protocol.to_string(),
            payload_type,
            connection: None,
            source_filter: None,
            mid: None,
            encoding: None,
            fmtp: None,
            framerate: None,
            ts_refclk: None,
            mediaclk: None,
            control: None,
            rtcp_port: None,
            rtcp_address: None,
        }
    }
}

/// A whole session description.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Session {
    /// `o=`, if it parsed.
    pub origin: Option<Origin>,
    /// `s=` (at most 256 characters, no control characters).
    pub name: String,
    /// Session-level `c=`, the default of every media.
    pub connection: Option<Connection>,
    /// Session-level `a=source-filter`.
    pub source_filter: Option<SourceFilter>,
    /// `a=group` lines.
    pub groups: Vec<Group>,
    /// The media, in order.
    pub media: Vec<Media>,
}

/// Where the parser is: which section an attribute belongs to.
enum Section {
    Session,
    Media,
    /// A media section whose `m=` line nagare cannot read (not video).
    Skipped,
}

fn ip_version(a: &IpAddr) -> &'static str {
    if a.is_ipv4() { "IP4" } else { "IP6" }
}

impl Session {
    /// Parses an SDP. Malformed `c=` lines and `m=video` lines are errors;
    /// unknown lines, attributes and unreadable non-video media are skipped.
    pub fn parse(text: &str) -> Result<Session, Error> {
        let mut s = Session::default();
        let mut section = Section::Session;
        for line in text.lines() {
            let line = line.trim_end_matches('\r').trim();
            let Some((kind, value)) = line.split_once('=') else {
                continue;
            };
            match (kind, &section) {
                ("s", _) => s.name = clean(value),
                ("o", Section::Session) => s.origin = parse_origin(value),
                ("m", _) => match parse_media(value) {
                    Ok(m) => {
                        s.media.push(m);
                        section = Section::Media;
                    }
                    Err(e) if value.starts_with("video") => return Err(e),
                    Err(_) => section = Section::Skipped,
                },
                ("c", _) => {
                    let c = parse_connection(value)?;
                    match (&section, s.media.last_mut()) {
                        (Section::Session, _) => s.connection = Some(c),
                        (Section::Media, Some(m)) => m.connection = Some(c),
                        _ => {}
                    }
                }
                ("a", Section::Session) => s.session_attribute(value),
                ("a", Section::Media) => {
                    if let Some(m) = s.media.last_mut() {
                        media_attribute(m, value);
                    }
                }
                _ => {}
            }
        }
        Ok(s)
    }

    /// Where the RTCP of the media received on `rtp` goes, as its
    /// `a=rtcp` (RFC 3605) says: that port, on the line's address or else
    /// `rtp`'s. `None` when the SDP names none for it (RTCP is then on
    /// the RTP port + 1, RFC 3550 §11). The media is the one on `rtp`'s
    /// port and address (its own `c=` or the session's); one that names
    /// no address matches on the port alone.
    pub fn rtcp_of(&self, rtp: SocketAddr) -> Option<SocketAddr> {
        let m = self.media.iter().find(|m| {
            let at = m.connection.or(self.connection).map(|c| c.address);
            m.port == rtp.port() && at.is_none_or(|a| a == rtp.ip())
        })?;
        let port = m.rtcp_port?;
        Some(SocketAddr::new(m.rtcp_address.unwrap_or(rtp.ip()), port))
    }

    fn session_attribute(&mut self, value: &str) {
        if let Some(rest) = value.strip_prefix("group:") {
            let mut it = rest.split_whitespace();
            let semantics = it.next().map(token).unwrap_or_default();
            if !semantics.is_empty() {
                // A mid of control characters only cleans to nothing and
                // could not be written back as a token.
                let mids = it.take(16).map(token).filter(|m| !m.is_empty());
                self.groups.push(Group {
                    semantics,
                    mids: mids.collect(),
                });
            }
        } else if let Some(rest) = value.strip_prefix("source-filter:") {
            self.source_filter = parse_source_filter(rest).or(self.source_filter.take());
        }
    }

    /// The SDP text: `v o s t`, then each media's `m c a=source-filter
    /// a=mid a=rtcp a=rtpmap a=fmtp a=framerate a=ts-refclk a=mediaclk a=control`.
    pub fn to_sdp(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "v=0\r");
        if let Some(o) = &self.origin {
            let _ = writeln!(
                s,
                "o=- {} {} IN {} {}\r",
                o.session_id,
                o.version,
                ip_version(&o.address),
                o.address
            );
        }
        let _ = writeln!(s, "s={}\r", clean(&self.name));
        if let Some(c) = &self.connection {
            write_connection(&mut s, c);
        }
        let _ = writeln!(s, "t=0 0\r");
        for g in &self.groups {
            let mids: Vec<String> = g.mids.iter().map(|m| token(m)).collect();
            let _ = writeln!(s, "a=group:{} {}\r", token(&g.semantics), mids.join(" "));
        }
        if let Some(f) = &self.source_filter {
            write_source_filter(&mut s, f);
        }
        for m in &self.media {
            write_media(&mut s, m);
        }
        s
    }
}

/// A value read or written where SDP expects one token: cleaned, and
/// spaces (which would split it) replaced. Idempotent.
fn token(value: &str) -> String {
    clean(value).replace(' ', "_")
}

fn write_connection(s: &mut String, c: &Connection) {
    let _ = write!(s, "c=IN {} {}", ip_version(&c.address), c.address);
    if c.address.is_multicast() && c.address.is_ipv4() {
        let _ = write!(s, "/{}", c.ttl.unwrap_or(1));
    }
    let _ = writeln!(s, "\r");
}

fn write_source_filter(s: &mut String, f: &SourceFilter) {
    let Some(first) = f.sources.first() else {
        return;
    };
    let dest = f.destination;
    let dest_text = dest.map_or("*".to_string(), |d| d.to_string());
    let _ = write!(
        s,
        "a=source-filter: incl IN {} {dest_text}",
        ip_version(dest.as_ref().unwrap_or(first))
    );
    for src in &f.sources {
        let _ = write!(s, " {src}");
    }
    let _ = writeln!(s, "\r");
}

fn write_media(s: &mut String, m: &Media) {
    let pt = m.payload_type;
    let _ = writeln!(
        s,
        "m={} {} {} {pt}\r",
        token(&m.kind),
        m.port,
        token(&m.protocol)
    );
    if let Some(c) = &m.connection {
        write_connection(s, c);
    }
    if let Some(f) = &m.source_filter {
        write_source_filter(s, f);
    }
    if let Some(mid) = &m.mid {
        let _ = writeln!(s, "a=mid:{}\r", token(mid));
    }
    if let Some(p) = m.rtcp_port {
        let _ = match m.rtcp_address {
            Some(a) => writeln!(s, "a=rtcp:{p} IN {} {a}\r", ip_version(&a)),
            None => writeln!(s, "a=rtcp:{p}\r"),
        };
    }
    if let Some(e) = &m.encoding {
        let _ = writeln!(s, "a=rtpmap:{pt} {}\r", clean(e));
    }
    if let Some(f) = &m.fmtp {
        // ST 2110-20 ends every parameter with "; ", the last one too;
        // strict parsers (sdpoker --whitespace) insist.
        let f = fmtp_value(f);
        let sep = if f.is_empty() { "" } else { "; " };
        let _ = writeln!(s, "a=fmtp:{pt} {f}{sep}\r");
    }
    if let Some(r) = m.framerate {
        let _ = writeln!(s, "a=framerate:{}\r", r.sdp_value());
    }
    if let Some(r) = &m.ts_refclk {
        let _ = writeln!(s, "a=ts-refclk:{}\r", clean(r));
    }
    if let Some(c) = &m.mediaclk {
        let _ = writeln!(s, "a=mediaclk:{}\r", clean(c));
    }
    if let Some(c) = &m.control {
        let _ = writeln!(s, "a=control:{}\r", token(c));
    }
}

fn media_attribute(m: &mut Media, value: &str) {
    let for_pt = |rest: &str| -> Option<String> {
        let (p, v) = rest.split_once(' ').unwrap_or((rest, ""));
        (p.trim().parse::<u8>().ok() == Some(m.payload_type)).then(|| clean(v).trim().to_string())
    };
    if let Some(rest) = value.strip_prefix("rtpmap:") {
        m.encoding = for_pt(rest).or(m.encoding.take());
    } else if let Some(rest) = value.strip_prefix("fmtp:") {
        m.fmtp = for_pt(rest).map(|f| fmtp_value(&f)).or(m.fmtp.take());
    } else if let Some(rest) = value.strip_prefix("source-filter:") {
        m.source_filter = parse_source_filter(rest).or(m.source_filter.take());
    } else if let Some(rest) = value.strip_prefix("framerate:") {
        m.framerate = rest.trim().parse::<FrameRate>().ok();
    } else if let Some(rest) = value.strip_prefix("mid:") {
        m.mid = Some(token(rest.trim()));
    } else if let Some(rest) = value.strip_prefix("ts-refclk:") {
        m.ts_refclk = Some(clean(rest));
    } else if let Some(rest) = value.strip_prefix("mediaclk:") {
        m.mediaclk = Some(clean(rest));
    } else if let Some(rest) = value.strip_prefix("control:") {
        m.control = Some(token(rest.trim()));
    } else if let Some(rest) = value.strip_prefix("rtcp:") {
        // `a=rtcp:PORT [IN IP4 ADDRESS]`; an address that does not
        // parse leaves the media's own.
        let mut it = rest.split_whitespace();
        m.rtcp_port = it.next().and_then(|p| p.parse().ok());
        m.rtcp_address = match (it.next(), it.next(), it.next()) {
            (Some("IN"), Some(_), Some(a)) if m.rtcp_port.is_some() => a.parse().ok(),
            _ => None,
        };
    }
}

/// An fmtp parameter list without its closing separators: read with or
/// without ST 2110-20's trailing "; ", kept without, written with.
fn fmtp_value(value: &str) -> String {
    clean(value)
        .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
        .trim_start()
        .to_string()
}

fn parse_origin(value: &str) -> Option<Origin> {
    let f: Vec<&str> = value.split_whitespace().take(6).collect();
    match f[..] {
        [_, id, version, "IN", _, address] => Some(Origin {
            session_id: id.parse().ok()?,
            version: version.parse().ok()?,
            address: address.parse().ok()?,
        }),
        _ => None,
    }
}

fn parse_media(value: &str) -> Result<Media, Error> {
    let mut it = value.split_whitespace();
    let kind = token(it.next().unwrap_or_default());
    let port = it
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .ok_or(Error::BadPort)?;
    let protocol = token(it.next().unwrap_or_default());
    if kind.is_empty() || protocol.is_empty() {
        return Err(Error::BadProtocol);
    }
    let payload_type = it
        .next()
        .and_then(|p| p.parse().ok())
        .filter(|pt: &u8| *pt < 128)
        .ok_or(Error::BadPayloadType)?;
    Ok(Media::new(&kind, port, &protocol, payload_type))
}

/// `incl IN IP4 <destination> <source>...`; exclusion filters are not
/// kept (nagare joins with an include list only).
fn parse_source_filter(rest: &str) -> Option<SourceFilter> {
    let mut it = rest.split_whitespace();
    if it.next() != Some("incl") {
        return None;
    }
    let (_net, _ver, dest) = (it.next(), it.next(), it.next()?);
    let sources: Vec<IpAddr> = it.take(16).map_while(|a| a.parse().ok()).collect();
    (!sources.is_empty()).then(|| SourceFilter {
        destination: dest.parse().ok(),
        sources,
    })
}

fn parse_connection(value: &str) -> Result<Connection, Error> {
    let mut it = value.split_whitespace();
    let (_net, _ver, addr) = (it.next(), it.next(), it.next());
    let addr = addr.ok_or(Error::NoAddress)?;
    let mut parts = addr.split('/');
    let address: IpAddr = parts
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or(Error::BadAddress)?;
    // For IPv6 the number after the slash counts addresses; unicast has none.
    let ttl = match address {
        IpAddr::V4(v4) if v4.is_multicast() => match parts.next() {
            None => Some(1),
            Some(t) => Some(t.parse().map_err(|_| Error::BadTtl)?),
        },
        _ => None,
    };
    Ok(Connection { address, ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUP: &str = "v=0\r\no=- 1 2 IN IP4 192.0.2.1\r\ns=2022-7 pair\r\nt=0 0\r\n\
        a=group:DUP primary secondary\r\n\
        m=video 5004 RTP/AVP 96\r\nc=IN IP4 239.1.1.1/32\r\n\
        a=source-filter: incl IN IP4 239.1.1.1 192.0.2.1\r\na=mid:primary\r\n\
        a=rtpmap:96 raw/90000\r\na=fmtp:96 sampling=RGB; width=8; height=8; depth=8\r\n\
        m=audio x RTP/AVP 97\r\na=mid:ignored\r\n\
        m=video 5006 RTP/AVP 96\r\nc=IN IP4 239.2.1.1/32\r\n\
        a=source-filter: incl IN IP4 239.2.1.1 192.0.2.2\r\na=mid:secondary\r\n\
        a=rtpmap:96 raw/90000\r\na=fmtp:96 sampling=RGB; width=8; height=8; depth=8\r\n";

    #[test]
    fn a_2022_7_pair_parses_into_two_media_and_a_group() {
        let s = Session::parse(DUP).unwrap();
        assert_eq!(s.name, "2022-7 pair");
        assert_eq!(s.groups[0].semantics, "DUP");
        assert_eq!(s.groups[0].mids, ["primary", "secondary"]);
        assert_eq!(s.media.len(), 2, "the unreadable audio section is skipped");
        let (a, b) = (&s.media[0], &s.media[1]);
        assert_eq!(
            (a.mid.as_deref(), b.mid.as_deref()),
            (Some("primary"), Some("secondary"))
        );
        assert_eq!((a.port, b.port), (5004, 5006));
        assert_eq!(b.connection.unwrap().ttl, Some(32));
        assert_eq!(
            b.source_filter.as_ref().unwrap().sources,
            ["192.0.2.2".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(s.origin.unwrap().version, 2);
        // Written and read again, nothing changes.
        assert_eq!(Session::parse(&s.to_sdp()).unwrap(), s);
    }

    #[test]
    fn an_rtcp_port_is_written_and_read_back() {
        let mut s = Session::parse(DUP).unwrap();
        s.media[0].rtcp_port = Some(5012);
        let text = s.to_sdp();
        assert!(text.contains("a=mid:primary\r\na=rtcp:5012\r\n"), "{text}");
        let again = Session::parse(&text).unwrap();
        assert_eq!(
            (again.media[0].rtcp_port, again.media[1].rtcp_port),
            (Some(5012), None)
        );
        // RFC 3605's long form names an address too; the port is kept.
        let long = DUP.replace(
            "a=mid:secondary",
            "a=mid:secondary\r\na=rtcp:53020 IN IP4 192.0.2.2",
        );
        let long = Session::parse(&long).unwrap();
        let m = &long.media[1];
        assert_eq!(
            (m.rtcp_port, m.rtcp_address),
            (Some(53020), Some("192.0.2.2".parse().unwrap()))
        );
        // The long form is written back as it was read.
        assert!(long.to_sdp().contains("a=rtcp:53020 IN IP4 192.0.2.2\r\n"));
        assert_eq!(Session::parse(&long.to_sdp()).unwrap(), long);
    }

    #[test]
    fn rtcp_of_names_the_port_and_address_of_the_media_on_an_rtp_address() {
        let text = DUP
            .replace("a=mid:primary", "a=mid:primary\r\na=rtcp:5012")
            .replace(
                "a=mid:secondary",
                "a=mid:secondary\r\na=rtcp:53020 IN IP4 239.3.1.1",
            );
        let s = Session::parse(&text).unwrap();
        let at = |a: &str| s.rtcp_of(a.parse().unwrap());
        // The short form: the port on the RTP address.
        assert_eq!(
            at("239.1.1.1:5004"),
            Some("239.1.1.1:5012".parse().unwrap())
        );
        // The long form: its own address.
        assert_eq!(
            at("239.2.1.1:5006"),
            Some("239.3.1.1:53020".parse().unwrap())
        );
        // Another address on the port, or a port no media is on: none.
        assert_eq!(at("239.9.9.9:5004"), None);
        assert_eq!(at("239.1.1.1:5008"), None);
        // The first media's RTCP, where its a=rtcp line is `line`.
        let primary = |line: &str| {
            let text = DUP.replace("a=mid:primary", &format!("a=mid:primary{line}"));
            Session::parse(&text)
                .unwrap()
                .rtcp_of("239.1.1.1:5004".parse().unwrap())
        };
        // A media without a=rtcp names none: port + 1 is the caller's.
        assert_eq!(primary(""), None);
        // An unreadable port is no a=rtcp, and a bad address the media's.
        assert_eq!(primary("\r\na=rtcp:x IN IP4 1.2.3.4"), None);
        assert_eq!(
            primary("\r\na=rtcp:7 IN IP4 nowhere"),
            Some("239.1.1.1:7".parse().unwrap())
        );
    }

    #[test]
    fn written_values_cannot_inject_lines() {
        let mut s = Session::parse(DUP).unwrap();
        s.name = "clip\r\nc=IN IP4 6.6.6.6\r\na=mid:x".into();
        s.media[0].mid = Some("a\nm=video 1 RTP/AVP 1".into());
        s.groups[0].mids[1] = "b c".into();
        let text = s.to_sdp();
        assert!(!text.contains("\nc=IN IP4 6.6.6.6"), "{text}");
        assert!(!text.contains("\nm=video 1 "), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("m=")).count(), 2);
        assert!(text.contains("a=group:DUP primary b_c\r\n"), "{text}");
        let again = Session::parse(&text).unwrap();
        assert_eq!(again.name, "clip  c=IN IP4 6.6.6.6  a=mid:x");
        assert_eq!(again.media.len(), 2);
    }

    #[test]
    fn whatever_parses_is_written_and_read_back_unchanged() {
        let nasty = "s=\u{1}lead\u{7f}\r\no=- 1 1 IN IP6 ::1\r\nc=IN IP4 239.0.0.1\r\n\
            a=group:D\u{1}UP a\u{2} b\r\na=source-filter: incl IN IP4 * 192.0.2.9\r\n\
            m=vid\u{3}eo 9/2 RTP/AVP 5 6\r\na=mid: x y \r\na=rtpmap:5 \u{1}raw/90000\r\n\
            a=fmtp:5  a=b;\u{0}c \r\na=framerate:29.97\r\na=ts-refclk: ptp\r\n";
        let s = Session::parse(nasty).unwrap();
        assert_eq!(s.media[0].mid.as_deref(), Some("x_y"));
        assert_eq!(s.groups[0].semantics, "D_UP");
        let text = s.to_sdp();
        assert_eq!(Session::parse(&text).unwrap(), s, "{text}");
    }

    #[test]
    fn broken_lines_are_refused_or_skipped() {
        assert_eq!(Session::parse("m=video x RTP/AVP 96"), Err(Error::BadPort));
        assert_eq!(
            Session::parse("m=video 5 RTP/AVP 200"),
            Err(Error::BadPayloadType)
        );
        assert_eq!(Session::parse("c=IN IP4"), Err(Error::NoAddress));
        assert_eq!(Session::parse("c=IN IP4 host"), Err(Error::BadAddress));
        assert_eq!(Session::parse("c=IN IP4 239.1.1.1/300"), Err(Error::BadTtl));
        let s = Session::parse("o=junk\r\na=group:\r\nm=audio 5 RTP/AVP x\r\n").unwrap();
        assert_eq!(s, Session::default());
        // Found by fuzz target sdp: a protocol of control characters
        // cleaned to nothing, was written as a blank, and the re-read line
        // took the payload type for the protocol.
        assert_eq!(
            Session::parse("m=video 5004 \u{0} 96"),
            Err(Error::BadProtocol)
        );
        let s = Session::parse("a=group:DUP \u{1} b\r\nm=vid[o 5004 \u{0}\u{0} 0 0\r\n").unwrap();
        assert!(s.media.is_empty());
        assert_eq!(s.groups[0].mids, ["b"]);
        assert_eq!(Session::parse(&s.to_sdp()).unwrap(), s);
    }
}
