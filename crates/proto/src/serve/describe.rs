//! The SDP a DESCRIBE answers with: one media, no address (the client
//! says where in SETUP), `a=control:trackID=0`.

use std::net::IpAddr;

use crate::mpegts::MP2T_PAYLOAD_TYPE;
use crate::rtsp::TRACK_PREFIX;
use crate::sdp::{Connection, Media, RefClock, SdpStream, Session};
use crate::video::st2110_20::DEFAULT_PAYLOAD_TYPE;
use crate::video::st2110_21::{Model, Scan, SenderSchedule, SenderType};
use crate::{FrameRate, VideoFormat};

/// The ST 2110-21 sender type serve's raw flows keep and declare in
/// every SDP they appear in (`TP=`): wide, the type a pacer that sleeps
/// between trains of many flows can hold.
pub const SENDER_TYPE: SenderType = SenderType::W;

/// The schedule a raw flow of `packets` packets per frame of `format`
/// at `rate`, in datagrams of up to `packet_size` bytes, keeps:
/// [`SENDER_TYPE`]'s trains for a sleeping sender, from TROdefault, so
/// the SDPs need no `TROFF=`. Datagrams above the Standard UDP Size Limit
/// count VRX_FULL in packets of the extended one, as a judge that sees
/// them does ([`Model::max_udp_for`](crate::video::st2110_21::Model::max_udp_for)). `None` for a flow no model takes
/// (no packets, an unusable rate), which serve never admits.
pub fn raw_schedule(
    format: VideoFormat,
    rate: FrameRate,
    (packets, packet_size): (usize, usize),
) -> Option<SenderSchedule> {
    let packets = u32::try_from(packets).ok()?;
    let model = Model::new(rate, format.height, Scan::Progressive, packets)
        .and_then(|m| m.for_datagrams(packet_size))
        .ok()?;
    Some(SenderSchedule::for_sleeping_sender(&model, SENDER_TYPE))
}

/// What a path plays, as far as its SDP tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// Raw video (RFC 4175 / ST 2110-20) of this format and rate.
    Raw {
        /// Size and sampling.
        format: VideoFormat,
        /// Frame rate.
        rate: FrameRate,
        /// The UDP size limit its SDP declares (`MAXUDP`, ST 2110-21),
        /// for datagrams above the standard limit
        /// ([`Model::max_udp_for`](crate::video::st2110_21::Model::max_udp_for)); `None` within it.
        max_udp: Option<u32>,
    },
    /// MPEG-TS over RTP (RFC 2250).
    Ts,
}

impl Track {
    /// The stream serve sends of this track as path `name`, to `address`
    /// port `port` from `source`, clocked by `clock`: every SDP serve
    /// writes of a raw track (DESCRIBE's, an IS-05 transport file's)
    /// declares the same format, type and UDP size limit. `None` for TS.
    pub fn raw_stream(
        &self,
        name: &str,
        (address, port, source): (IpAddr, u16, Option<IpAddr>),
        clock: Option<RefClock>,
    ) -> Option<SdpStream> {
        let Track::Raw {
            format,
            rate,
            max_udp,
        } = *self
        else {
            return None;
        };
        Some(SdpStream {
            address,
            port,
            ttl: None,
            source,
            payload_type: DEFAULT_PAYLOAD_TYPE,
            format,
            rate: Some(rate),
            name: name.to_string(),
            clock,
            sender_type: Some(SENDER_TYPE),
            tr_offset: None,
            max_udp,
        })
    }
}

/// The DESCRIBE SDP of path `name` playing `track`, with origin session
/// id `session_id` (the driver passes the time in seconds, so a changed
/// path gets a newer id).
pub fn sdp(name: &str, track: Track, session_id: u64) -> String {
    // 0.0.0.0: RTSP sends where SETUP says, the SDP names no address.
    let unspecified = IpAddr::from([0, 0, 0, 0]);
    // RTSP clients ignore the clock line.
    let raw = track.raw_stream(name, (unspecified, 0, None), None);
    let mut session = match raw {
        Some(stream) => stream.to_session(session_id),
        None => {
            let mut m = Media::new("video", 0, "RTP/AVP", MP2T_PAYLOAD_TYPE);
            m.encoding = Some("MP2T/90000".into());
            Session {
                name: name.to_string(),
                media: vec![m],
                ..Session::default()
            }
        }
    };
    session.connection = Some(Connection {
        address: unspecified,
        ttl: None,
    });
    for m in &mut session.media {
        m.connection = None;
        m.control = Some(format!("{TRACK_PREFIX}0"));
    }
    session.to_sdp()
}
