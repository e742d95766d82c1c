//! One raw video stream as an SDP describes it, in the ST 2110-20 dialect
//! (`a=fmtp` with sampling, width, height, exactframerate, depth, ...):
//! what `send` writes and `recv` reads.

use std::net::IpAddr;

use super::clock::RefClock;
use super::session::{Connection, Media, Origin, Session, SourceFilter};
use super::{Error, Param};
use crate::units::Nanos;
use crate::video::format::{FrameRate, PixelFormat, VideoFormat};
use crate::video::st2110_21::{Model, SenderType};

/// Everything a receiver needs to know about one raw video stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpStream {
    /// Destination (unicast receiver or multicast group).
    pub address: IpAddr,
    /// UDP port.
    pub port: u16,
    /// Multicast TTL from `c=` (see [`Connection::ttl`]).
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
    /// Session name (`s=`); control characters are written as spaces.
    pub name: String,
    /// `a=ts-refclk`, when it is one of the ST 2110-10 forms (nagare's
    /// old `local` and FFmpeg's absent line read as `None`).
    pub clock: Option<RefClock>,
    /// The ST 2110-21 sender type the fmtp's `TP=` declares.
    pub sender_type: Option<SenderType>,
    /// The TRoffset the fmtp's `TROFF=` declares (ST 2110-21 § 8.2, whole
    /// microseconds), when the sender does not keep TROdefault: a
    /// receiver judging the stream must read from this offset.
    pub tr_offset: Option<Nanos>,
    /// The UDP size limit the fmtp's `MAXUDP=` declares (ST 2110-10:
    /// 8960, the Extended UDP Size Limit), when the datagrams may be
    /// larger than the standard 1460 bytes: a receiver judging the stream
    /// counts VRX_FULL in packets of this size.
    pub max_udp: Option<u32>,
}

impl SdpStream {
    /// Writes an ST 2110-20 style SDP that GStreamer and FFmpeg accept.
    /// `session_id` should be unique per sender (an NTP time will do).
    pub fn to_sdp(&self, session_id: u64) -> String {
        self.to_session(session_id).to_sdp()
    }

    /// The one-media session [`SdpStream::to_sdp`] writes.
    pub fn to_session(&self, session_id: u64) -> Session {
        let mut media = Media::new("video", self.port, "RTP/AVP", self.payload_type);
        media.connection = Some(Connection {
            address: self.address,
            ttl: self.ttl,
        });
        if let (true, Some(src)) = (self.address.is_multicast(), self.source) {
            media.source_filter = Some(SourceFilter {
                destination: Some(self.address),
                sources: vec![src],
            });
        }
        media.encoding = Some("raw/90000".into());
        media.fmtp = Some(self.fmtp());
        media.ts_refclk = self.clock.map(|c| c.to_string());
        media.mediaclk = Some("direct=0".into());
        Session {
            origin: Some(Origin {
                session_id,
                version: session_id,
                address: self.source.unwrap_or(self.address),
            }),
            name: self.name.clone(),
            media: vec![media],
            ..Session::default()
        }
    }

    /// The ST 2110-20 parameters in the standard's order (the session
    /// writer adds the closing "; ").
    fn fmtp(&self) -> String {
        let f = &self.format;
        let rate = self.rate.map_or(String::new(), |r| {
            format!("exactframerate={}; ", r.sdp_value())
        });
        // nagare's RGB is full-range sRGB: BT.709 primaries at full range
        // (ST 2110-20 has no sRGB colorimetry value).
        let range = if f.pixel_format == PixelFormat::Rgb24 {
            "RANGE=FULL; "
        } else {
            ""
        };
        let tp = self
            .sender_type
            .map_or(String::new(), |t| format!("; TP={}", t.sdp_value()));
        let troff = self
            .tr_offset
            .map_or(String::new(), |t| format!("; TROFF={}", t.0 / 1000));
        let max_udp = self
            .max_udp
            .map_or(String::new(), |b| format!("; MAXUDP={b}"));
        format!(
            "sampling={}; width={}; height={}; {rate}depth={}; TCS=SDR; colorimetry=BT709; \
             {range}PM=2110GPM; SSN=ST2110-20:2017{tp}{troff}{max_udp}",
            f.pixel_format.sampling(),
            f.width,
            f.height,
            f.pixel_format.depth()
        )
    }

    /// Parses the first video stream of an SDP.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let session = Session::parse(text)?;
        let media = session
            .media
            .iter()
            .find(|m| m.kind == "video")
            .ok_or(Error::NoVideo)?;
        SdpStream::from_media(&session, media)
    }

    /// The legs of the first video stream of an SDP: the media an
    /// `a=group:DUP` names (SMPTE ST 2022-7: the same stream on two
    /// paths), in the group's order, or the first video alone when no
    /// group names two video media.
    pub fn parse_legs(text: &str) -> Result<Vec<Self>, Error> {
        let session = Session::parse(text)?;
        let dup = session
            .groups
            .iter()
            .find(|g| g.semantics.eq_ignore_ascii_case("DUP"));
        let named: Vec<&Media> = dup
            .map(|g| {
                g.mids
                    .iter()
                    .filter_map(|id| {
                        session
                            .media
                            .iter()
                            .find(|m| m.kind == "video" && m.mid.as_ref() == Some(id))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if named.len() >= 2 {
            return named
                .into_iter()
                .map(|m| SdpStream::from_media(&session, m))
                .collect();
        }
        SdpStream::parse(text).map(|s| vec![s])
    }

    /// The raw video stream one media section of `session` describes.
    pub fn from_media(session: &Session, media: &Media) -> Result<Self, Error> {
        let encoding = media.encoding.as_deref();
        if encoding.is_some_and(|e| !e.to_ascii_lowercase().starts_with("raw/90000")) {
            return Err(Error::NotRaw);
        }
        let c = media
            .connection
            .or(session.connection)
            .ok_or(Error::NoConnection)?;
        encoding.ok_or(Error::NoRtpmap)?;
        let fmtp = media.fmtp.as_deref().ok_or(Error::NoFmtp)?;
        let Fmtp {
            format,
            rate,
            sender_type,
            tr_offset,
            max_udp,
        } = parse_fmtp(fmtp)?;
        let filter = media
            .source_filter
            .as_ref()
            .or(session.source_filter.as_ref());
        Ok(SdpStream {
            address: c.address,
            port: media.port,
            ttl: c.ttl,
            // The writer puts a source filter only for multicast, and SSM
            // means nothing for unicast.
            source: filter
                .and_then(|f| f.sources.first().copied())
                .filter(|_| c.address.is_multicast()),
            payload_type: media.payload_type,
            format,
            rate: rate.or(media.framerate),
            name: session.name.clone(),
            clock: media.ts_refclk.as_deref().and_then(RefClock::parse),
            sender_type,
            tr_offset,
            max_udp,
        })
    }
}

/// What nagare reads of an `a=fmtp` line.
struct Fmtp {
    format: VideoFormat,
    rate: Option<FrameRate>,
    sender_type: Option<SenderType>,
    tr_offset: Option<Nanos>,
    max_udp: Option<u32>,
}

/// The longest `TROFF` read: a TRoffset is shorter than a frame, and no
/// frame rate nagare takes is below 1 fps.
const MAX_TROFF_MICROS: u64 = 1_000_000;

/// The format, frame rate, sender type and TRoffset of an ST 2110-20
/// `a=fmtp` parameter list (FFmpeg's and GStreamer's spacing too). A
/// `TP`, `TROFF` or `MAXUDP` that is not one the standard allows reads as
/// absent,
/// as if the sender had not declared it.
fn parse_fmtp(fmtp: &str) -> Result<Fmtp, Error> {
    let mut sampling = None;
    let (mut width, mut height, mut depth) = (None, None, None);
    let (mut rate, mut sender_type, mut tr_offset, mut max_udp) = (None, None, None, None);
    for param in fmtp.split(';') {
        let (k, v) = param.split_once('=').unwrap_or((param, ""));
        let (k, v) = (k.trim(), v.trim());
        match k.to_ascii_lowercase().as_str() {
            "sampling" => sampling = Some(v),
            "width" => width = v.parse::<u32>().ok(),
            "height" => height = v.parse::<u32>().ok(),
            "depth" => depth = v.parse::<u32>().ok(),
            "exactframerate" => rate = v.parse::<FrameRate>().ok(),
            "tp" => sender_type = SenderType::from_sdp(v),
            "troff" => {
                tr_offset = v
                    .parse::<u64>()
                    .ok()
                    .filter(|&us| us <= MAX_TROFF_MICROS)
                    .map(Nanos::from_micros)
            }
            "maxudp" => {
                max_udp = v
                    .parse::<u32>()
                    .ok()
                    .filter(|&b| Model::declarable_max_udp(b))
            }
            "interlace" => return Err(Error::Interlaced),
            _ => {}
        }
    }
    let sampling = sampling.ok_or(Error::MissingParam(Param::Sampling))?;
    let depth = depth.ok_or(Error::MissingParam(Param::Depth))?;
    let pixel_format =
        PixelFormat::from_sampling(sampling, depth).ok_or(Error::UnsupportedSampling)?;
    let format = VideoFormat::new(
        width.ok_or(Error::MissingParam(Param::Width))?,
        height.ok_or(Error::MissingParam(Param::Height))?,
        pixel_format,
    )
    .map_err(Error::Format)?;
    Ok(Fmtp {
        format,
        rate,
        sender_type,
        tr_offset,
        max_udp,
    })
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
            clock: Some(RefClock::LocalMac([2, 0xfc, 0, 0, 0, 1])),
            sender_type: Some(SenderType::N),
            tr_offset: None,
            max_udp: None,
        }
    }

    #[test]
    fn maxudp_is_written_after_the_type_and_read_back() {
        let mut s = stream();
        s.sender_type = Some(SenderType::W);
        s.max_udp = Some(8960);
        let text = s.to_sdp(1);
        assert!(text.contains("; TP=2110TPW; MAXUDP=8960; \r\n"), "{text}");
        assert_eq!(SdpStream::parse(&text).unwrap(), s);
        for bad in ["1460", "0", "x", "", "65508"] {
            let t = text.replace("MAXUDP=8960", &format!("MAXUDP={bad}"));
            assert_eq!(SdpStream::parse(&t).unwrap().max_udp, None, "{bad}");
        }
    }

    #[test]
    fn troff_is_written_in_whole_microseconds_and_read_back() {
        let mut s = stream();
        s.sender_type = Some(SenderType::W);
        s.tr_offset = Some(Nanos::from_micros(1_813));
        let text = s.to_sdp(1);
        assert!(text.contains("; TP=2110TPW; TROFF=1813; \r\n"), "{text}");
        assert_eq!(SdpStream::parse(&text).unwrap(), s);
        for bad in ["-5", "1.5", "x", "", "1000001", "99999999999999999999"] {
            let t = text.replace("TROFF=1813", &format!("TROFF={bad}"));
            assert_eq!(SdpStream::parse(&t).unwrap().tr_offset, None, "{bad}");
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
    fn a_dup_group_gives_both_legs_in_its_order() {
        let mut session = stream().to_session(1);
        let mut b = session.media[0].clone();
        b.port = 6004;
        b.mid = Some("b".into());
        session.media[0].mid = Some("a".into());
        session.media.push(b);
        session.groups.push(super::super::Group {
            semantics: "DUP".into(),
            mids: vec!["b".into(), "a".into()],
        });
        let legs = SdpStream::parse_legs(&session.to_sdp()).unwrap();
        assert_eq!(
            legs.iter().map(|l| l.port).collect::<Vec<_>>(),
            [6004, 5004]
        );
        // Without the group, the first video is the one stream.
        session.groups.clear();
        let one = SdpStream::parse_legs(&session.to_sdp()).unwrap();
        assert_eq!((one.len(), one[0].port), (1, 5004));
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
            assert_eq!(SdpStream::parse(&with_c_line(c)), Err(Error::BadTtl), "{c}");
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
    fn text_nagare_writes_is_unchanged() {
        let text = stream().to_sdp(42);
        let want = "v=0\r\no=- 42 42 IN IP4 192.0.2.1\r\ns=test\r\nt=0 0\r\n\
            m=video 5004 RTP/AVP 96\r\nc=IN IP4 239.1.2.3/8\r\n\
            a=source-filter: incl IN IP4 239.1.2.3 192.0.2.1\r\n\
            a=rtpmap:96 raw/90000\r\n\
            a=fmtp:96 sampling=YCbCr-4:2:2; width=1920; height=1080; exactframerate=60000/1001; \
            depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPN; \r\n\
            a=ts-refclk:localmac=02-FC-00-00-00-01\r\na=mediaclk:direct=0\r\n";
        assert_eq!(text, want);
    }

    #[test]
    fn rgb_is_bt709_full_range_and_ptp_clocks_round_trip() {
        let mut s = stream();
        s.format = VideoFormat::new(64, 48, PixelFormat::Rgb24).unwrap();
        s.clock = Some(RefClock::Ptp(
            "08-00-11-FF-FE-22-33-44:127".parse().unwrap(),
        ));
        s.sender_type = Some(SenderType::W);
        let text = s.to_sdp(7);
        assert!(
            text.contains(
                "a=fmtp:96 sampling=RGB; width=64; height=48; exactframerate=60000/1001; depth=8; \
                 TCS=SDR; colorimetry=BT709; RANGE=FULL; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPW; \r\n"
            ),
            "{text}"
        );
        assert!(text.contains("a=ts-refclk:ptp=IEEE1588-2008:08-00-11-FF-FE-22-33-44:127\r\n"));
        assert_eq!(SdpStream::parse(&text).unwrap(), s);
    }

    #[test]
    fn nagares_old_sdp_still_reads() {
        // What nagare wrote before ST 2110-10 clocks and the closing "; ".
        let old = "v=0\r\no=- 42 42 IN IP4 192.0.2.1\r\ns=test\r\nt=0 0\r\n\
            m=video 5004 RTP/AVP 96\r\nc=IN IP4 239.1.2.3/8\r\n\
            a=source-filter: incl IN IP4 239.1.2.3 192.0.2.1\r\n\
            a=rtpmap:96 raw/90000\r\n\
            a=fmtp:96 sampling=YCbCr-4:2:2; width=1920; height=1080; exactframerate=60000/1001; \
            depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; TP=2110TPW\r\n\
            a=ts-refclk:local\r\na=mediaclk:direct=0\r\n";
        let s = SdpStream::parse(old).unwrap();
        assert_eq!(
            s,
            SdpStream {
                clock: None,
                sender_type: Some(SenderType::W),
                ..stream()
            }
        );
    }

    #[test]
    fn gstreamer_style() {
        // GStreamer writes its caps without spaces and with its own
        // colorimetry names.
        let text = "v=0\r\no=- 1188340656180883 1 IN IP4 127.0.0.1\r\ns=Session streamed with GStreamer\r\n\
            t=0 0\r\nm=video 5000 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 RAW/90000\r\n\
            a=fmtp:96 sampling=YCbCr-4:2:2;width=320;height=240;depth=10;colorimetry=BT709-2;\
            exactframerate=25\r\na=framerate:25\r\n";
        let s = SdpStream::parse(text).unwrap();
        assert_eq!(
            s.format,
            VideoFormat::new(320, 240, PixelFormat::Uyvp).unwrap()
        );
        assert_eq!(s.rate, Some(FrameRate::new(25, 1).unwrap()));
        assert_eq!((s.clock, s.sender_type), (None, None));
    }

    #[test]
    fn a_file_name_with_a_newline_injects_no_sdp_line() {
        // The session name comes from the input's file name, which may hold
        // any byte but NUL and '/'.
        let mut s = stream();
        s.name = "nagare clip\r\nc=IN IP4 203.0.113.9\r\nm=video 9 RTP/AVP 96\n.yuv".into();
        let text = s.to_sdp(1);
        assert_eq!(
            text.lines().filter(|l| l.starts_with("c=")).count(),
            1,
            "{text}"
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with("m=")).count(),
            1,
            "{text}"
        );
        let back = SdpStream::parse(&text).unwrap();
        assert_eq!(back.address, s.address);
        assert_eq!(
            back.name,
            "nagare clip  c=IN IP4 203.0.113.9  m=video 9 RTP/AVP 96 .yuv"
        );
        // What was read is written back identically.
        assert_eq!(SdpStream::parse(&back.to_sdp(1)).unwrap(), back);
    }

    #[test]
    fn refusals() {
        assert_eq!(SdpStream::parse(""), Err(Error::NoVideo));
        let h264 = "m=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 H264/90000\r\n";
        assert_eq!(SdpStream::parse(h264), Err(Error::NotRaw));
        let bad = "m=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 raw/90000\r\na=fmtp:96 sampling=YCbCr-4:2:0; width=8; height=8; depth=8\r\n";
        assert_eq!(SdpStream::parse(bad), Err(Error::UnsupportedSampling));
        let nofmtp = "m=video 5004 RTP/AVP 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 raw/90000\r\n";
        assert_eq!(SdpStream::parse(nofmtp), Err(Error::NoFmtp));
        let nowidth = format!("{nofmtp}a=fmtp:96 sampling=RGB; depth=8; height=2\r\n");
        assert_eq!(
            SdpStream::parse(&nowidth),
            Err(Error::MissingParam(Param::Width))
        );
    }
}
