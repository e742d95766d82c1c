//! SDP (RFC 8866) for one raw video stream, in the ST 2110-20 dialect
//! (`a=fmtp` with sampling, width, height, exactframerate, depth, ...),
//! written by nagare and read from nagare or FFmpeg's RTP muxer.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::Error;
use crate::video::format::{FrameRate, PixelFormat, VideoFormat};

/// Everything a receiver needs to know about one raw video stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpStream {
    /// Destination (unicast receiver or multicast group).
    pub address: IpAddr,
    /// UDP port.
    pub port: u16,
    /// Multicast TTL from `c=`. RFC 8866 gives one to IPv4 multicast
    /// addresses only, so parsing yields `None` for any other address and
    /// `Some(1)` (what [`SdpStream::to_sdp`] writes for `None`) when an IPv4
    /// multicast `c=` line has no TTL, as FFmpeg's have not.
    pub ttl: Option<u8>,
    /// Sender address from `a=source-filter` (source-specific multicast,
    /// so only read for a multicast address) or, when writing, the sender's
    /// own address.
    pub source: Option<IpAddr>,
    /// RTP payload type.
    pub payload_type: u8,
    /// Frame geometry and pixel format.
    pub format: VideoFormat,
    /// Frame rate, when the SDP states one.
    pub rate: Option<FrameRate>,
    /// Session name (`s=`).
    pub name: String,
}

impl SdpStream {
    /// Writes an ST 2110-20 style SDP that GStreamer and FFmpeg accept.
    /// `session_id` should be unique per sender (an NTP time will do).
    pub fn to_sdp(&self, session_id: u64) -> String {
        let ipver = |a: &IpAddr| if a.is_ipv4() { "IP4" } else { "IP6" };
        let origin = self.source.unwrap_or(self.address);
        let mut s = String::new();
        let _ = writeln!(s, "v=0\r");
        let _ = writeln!(
            s,
            "o=- {session_id} {session_id} IN {} {origin}\r",
            ipver(&origin)
        );
        let _ = writeln!(s, "s={}\r", self.name);
        let _ = writeln!(s, "t=0 0\r");
        let _ = writeln!(s, "m=video {} RTP/AVP {}\r", self.port, self.payload_type);
        let mut c = format!("c=IN {} {}", ipver(&self.address), self.address);
        if self.address.is_multicast() && self.address.is_ipv4() {
            let _ = write!(c, "/{}", self.ttl.unwrap_or(1));
        }
        let _ = writeln!(s, "{c}\r");
        if let (true, Some(src)) = (self.address.is_multicast(), self.source) {
            let _ = writeln!(
                s,
                "a=source-filter: incl IN {} {} {src}\r",
                ipver(&self.address),
                self.address
            );
        }
        let pt = self.payload_type;
        let f = &self.format;
        let _ = writeln!(s, "a=rtpmap:{pt} raw/90000\r");
        let mut fmtp = format!(
            "a=fmtp:{pt} sampling={}; width={}; height={}; ",
            f.pixel_format.sampling(),
            f.width,
            f.height
        );
        if let Some(r) = self.rate {
            let _ = write!(fmtp, "exactframerate={}; ", r.sdp_value());
        }
        let colorimetry = if f.pixel_format == PixelFormat::Rgb24 {
            "SRGB" // nagare's RGB is full-range sRGB
        } else {
            "BT709"
        };
        let _ = write!(
            fmtp,
            "depth={}; TCS=SDR; colorimetry={colorimetry}; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPW",
            f.pixel_format.depth()
        );
        let _ = writeln!(s, "{fmtp}\r");
        let _ = writeln!(s, "a=ts-refclk:local\r");
        let _ = writeln!(s, "a=mediaclk:direct=0\r");
        s
    }

    /// Parses the first video stream of an SDP.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut session_c: Option<(IpAddr, Option<u8>)> = None;
        let mut media_c: Option<(IpAddr, Option<u8>)> = None;
        let mut media: Option<(u16, u8)> = None;
        let mut in_video = false;
        let mut seen_video = false;
        let mut rtpmap_ok = false;
        let mut fmtp: Option<&str> = None;
        let mut source = None;
        let mut name = String::new();
        let mut framerate_attr = None;
        for line in text.lines() {
            let line = line.trim_end_matches('\r').trim();
            let Some((kind, value)) = line.split_once('=') else {
                continue;
            };
            match kind {
                "s" => {
                    // At most 256 characters; trimmed again after the cut, as
                    // a re-read of the written line would be.
                    let end = value
                        .char_indices()
                        .nth(256)
                        .map_or(value.len(), |(i, _)| i);
                    name = value[..end].trim_end().to_string();
                }
                "m" => {
                    in_video = false;
                    if seen_video {
                        continue;
                    }
                    let mut it = value.split_whitespace();
                    if it.next() != Some("video") {
                        continue;
                    }
                    let port = it
                        .next()
                        .and_then(|p| p.split('/').next())
                        .and_then(|p| p.parse().ok())
                        .ok_or(Error::Sdp("m=video line has no valid port"))?;
                    let _proto = it.next();
                    let pt = it
                        .next()
                        .and_then(|p| p.parse().ok())
                        .filter(|pt: &u8| *pt < 128)
                        .ok_or(Error::Sdp("m=video line has no valid payload type"))?;
                    media = Some((port, pt));
                    in_video = true;
                    seen_video = true;
                }
                "c" => {
                    let c = parse_connection(value)?;
                    if in_video {
                        media_c = Some(c);
                    } else if !seen_video {
                        session_c = Some(c);
                    }
                }
                "a" if in_video => {
                    let pt = media.map_or(0, |m| m.1);
                    if let Some(rest) = value.strip_prefix("rtpmap:") {
                        let (p, enc) = rest.split_once(' ').unwrap_or((rest, ""));
                        if p.trim().parse::<u8>().ok() == Some(pt) {
                            let enc = enc.trim();
                            if !enc.to_ascii_lowercase().starts_with("raw/90000") {
                                return Err(Error::Sdp(
                                    "rtpmap is not raw/90000: only uncompressed RFC 4175 video is supported",
                                ));
                            }
                            rtpmap_ok = true;
                        }
                    } else if let Some(rest) = value.strip_prefix("fmtp:") {
                        let (p, params) = rest.split_once(' ').unwrap_or((rest, ""));
                        if p.trim().parse::<u8>().ok() == Some(pt) {
                            fmtp = Some(params);
                        }
                    } else if let Some(rest) = value.strip_prefix("source-filter:") {
                        // incl IN IP4 <dest> <src>...
                        let parts: Vec<&str> = rest.split_whitespace().take(5).collect();
                        if parts.len() == 5 && parts[0] == "incl" {
                            source = parts[4].parse().ok();
                        }
                    } else if let Some(rest) = value.strip_prefix("framerate:") {
                        framerate_attr = rest.trim().parse::<FrameRate>().ok();
                    }
                }
                _ => {}
            }
        }
        let (port, payload_type) = media.ok_or(Error::Sdp("no m=video line"))?;
        let (address, ttl) = media_c
            .or(session_c)
            .ok_or(Error::Sdp("no c= connection line"))?;
        if !rtpmap_ok {
            return Err(Error::Sdp("no a=rtpmap for the video payload type"));
        }
        let fmtp = fmtp.ok_or(Error::Sdp("no a=fmtp for the video payload type"))?;
        let mut sampling = None;
        let (mut width, mut height, mut depth) = (None, None, None);
        let mut rate = None;
        for param in fmtp.split(';') {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            let (k, v) = (k.trim(), v.trim());
            match k.to_ascii_lowercase().as_str() {
                "sampling" => sampling = Some(v),
                "width" => width = v.parse::<u32>().ok(),
                "height" => height = v.parse::<u32>().ok(),
                "depth" => depth = v.parse::<u32>().ok(),
                "exactframerate" => rate = v.parse::<FrameRate>().ok(),
                "interlace" => return Err(Error::Interlaced),
                _ => {}
            }
        }
        let sampling = sampling.ok_or(Error::Sdp("fmtp has no sampling="))?;
        let depth = depth.ok_or(Error::Sdp("fmtp has no depth="))?;
        let pixel_format = PixelFormat::from_sampling(sampling, depth).ok_or(Error::Sdp(
            "unsupported sampling/depth (supported: YCbCr-4:2:2 depth 8 or 10, RGB depth 8)",
        ))?;
        let format = VideoFormat::new(
            width.ok_or(Error::Sdp("fmtp has no valid width="))?,
            height.ok_or(Error::Sdp("fmtp has no valid height="))?,
            pixel_format,
        )?;
        Ok(SdpStream {
            address,
            port,
            ttl,
            // to_sdp writes a source filter only for multicast, and SSM means
            // nothing for unicast.
            source: source.filter(|_| address.is_multicast()),
            payload_type,
            format,
            rate: rate.or(framerate_attr),
            name,
        })
    }
}

fn parse_connection(value: &str) -> Result<(IpAddr, Option<u8>), Error> {
    let mut it = value.split_whitespace();
    let (_net, _ver, addr) = (it.next(), it.next(), it.next());
    let addr = addr.ok_or(Error::Sdp("c= line has no address"))?;
    let mut parts = addr.split('/');
    let ip: IpAddr = parts
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or(Error::Sdp("c= address is not an IP address"))?;
    // For IPv6 the number after the slash counts addresses; unicast has none.
    let ttl = match ip {
        IpAddr::V4(v4) if v4.is_multicast() => match parts.next() {
            None => Some(1),
            Some(t) => Some(
                t.parse()
                    .map_err(|_| Error::Sdp("c= TTL is not a number from 0 to 255"))?,
            ),
        },
        _ => None,
    };
    Ok((ip, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> SdpStream {
        SdpStream {
            address: "239.1.2.3".parse().unwrap(),
            port: 5004,
            ttl: Some(8),
            source: Some("192.0.2.1".parse().unwrap()),
            payload_type: 96,
            format: VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap(),
            rate: Some(FrameRate::new(60000, 1001).unwrap()),
            name: "test".into(),
        }
    }

    #[test]
    fn round_trip() {
        let s = stream();
        let text = s.to_sdp(42);
        assert!(text.contains("exactframerate=60000/1001"), "{text}");
        assert!(text.contains("c=IN IP4 239.1.2.3/8"));
        assert!(text.contains("a=mediaclk:direct=0"));
        assert_eq!(SdpStream::parse(&text).unwrap(), s);
    }

    #[test]
    fn ffmpeg_style() {
        let text = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\na=tool:libavformat\r\nm=video 5004 RTP/AVP 96\r\na=rtpmap:96 raw/90000\r\na=fmtp:96 sampling=YCbCr-4:2:2; width=320; height=240; depth=8\r\n";
        let s = SdpStream::parse(text).unwrap();
        assert_eq!(s.port, 5004);
        assert_eq!(
            s.format,
            VideoFormat::new(320, 240, PixelFormat::Uyvy422).unwrap()
        );
        assert_eq!(s.rate, None);
    }

    fn with_c_line(c: &str) -> String {
        format!(
            "m=video 5004 RTP/AVP 96\r\n{c}\r\na=rtpmap:96 raw/90000\r\n\
             a=fmtp:96 sampling=RGB; width=8; height=8; depth=8\r\n"
        )
    }

    #[test]
    fn ttl_only_for_ipv4_multicast_and_round_trips() {
        // Found by fuzz target sdp: `c=IN IP4 239.1.2.3/8-` parsed with no
        // TTL, to_sdp wrote the default `/1`, and the re-read SDP differed.
        for (c, ttl) in [
            ("c=IN IP4 239.1.2.3/8", Some(8)),
            ("c=IN IP4 239.1.2.3", Some(1)),
            ("c=IN IP4 192.0.2.7/8", None),
            ("c=IN IP6 ff15::1/3", None),
            ("c=IN IP6 2001:db8::1", None),
        ] {
            let s = SdpStream::parse(&with_c_line(c)).unwrap();
            assert_eq!(s.ttl, ttl, "{c}");
            assert_eq!(SdpStream::parse(&s.to_sdp(1)).unwrap(), s, "{c}");
        }
        for c in ["c=IN IP4 239.1.2.3/8-", "c=IN IP4 239.1.2.3/256"] {
            assert_eq!(
                SdpStream::parse(&with_c_line(c)),
                Err(Error::Sdp("c= TTL is not a number from 0 to 255")),
                "{c}"
            );
        }
    }

    #[test]
    fn source_filter_only_for_multicast() {
        // Found by fuzz target sdp: a source filter on a unicast address was
        // read into `source`, which to_sdp writes only into o= for unicast,
        // so the re-read SDP lost it.
        let filter = "a=source-filter: incl IN IP6 * 2001:db8::1";
        for (c, source) in [
            ("c=IN IP6 ff15::1234", Some("2001:db8::1".parse().unwrap())),
            ("c=IN IP6 bf15::1234", None),
            ("c=IN IP4 192.0.2.7", None),
        ] {
            let s = SdpStream::parse(&format!("{}{filter}\r\n", with_c_line(c))).unwrap();
            assert_eq!(s.source, source, "{c}");
            assert_eq!(SdpStream::parse(&s.to_sdp(1)).unwrap(), s, "{c}");
        }
    }

    #[test]
    fn long_session_name_is_cut_without_trailing_space() {
        // Found by fuzz target sdp: cutting the name at 256 characters can
        // end it in a space, which the re-read of the written s= line trims.
        let name = format!("{} tail", "é".repeat(255));
        let text = format!("s={name}\r\n{}", with_c_line("c=IN IP4 192.0.2.7"));
        let s = SdpStream::parse(&text).unwrap();
        assert_eq!(s.name, "é".repeat(255));
        assert_eq!(SdpStream::parse(&s.to_sdp(1)).unwrap(), s);
    }

    #[test]
    fn refusals() {
        assert!(SdpStream::parse("").is_err());
        let h264 = "m=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 H264/90000\r\n";
        assert!(SdpStream::parse(h264).is_err());
        let bad = "m=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 raw/90000\r\na=fmtp:96 sampling=YCbCr-4:2:0; width=8; height=8; depth=8\r\n";
        assert!(SdpStream::parse(bad).is_err());
    }
}
