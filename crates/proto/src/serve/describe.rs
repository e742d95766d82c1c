//! The SDP a DESCRIBE answers with: one media, no address (the client
//! says where in SETUP), `a=control:trackID=0`.

use std::net::IpAddr;

use crate::mpegts::MP2T_PAYLOAD_TYPE;
use crate::rtsp::TRACK_PREFIX;
use crate::sdp::{Connection, Media, SdpStream, Session};
use crate::video::st2110_20::DEFAULT_PAYLOAD_TYPE;
use crate::{FrameRate, VideoFormat};

/// What a path plays, as far as its SDP tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// Raw video (RFC 4175 / ST 2110-20) of this format and rate.
    Raw {
        /// Size and sampling.
        format: VideoFormat,
        /// Frame rate.
        rate: FrameRate,
    },
    /// MPEG-TS over RTP (RFC 2250).
    Ts,
}

/// The DESCRIBE SDP of path `name` playing `track`, with origin session
/// id `session_id` (the driver passes the time in seconds, so a changed
/// path gets a newer id).
pub fn sdp(name: &str, track: Track, session_id: u64) -> String {
    // 0.0.0.0: RTSP sends where SETUP says, the SDP names no address.
    let unspecified = IpAddr::from([0, 0, 0, 0]);
    let mut session = match track {
        Track::Raw { format, rate } => SdpStream {
            address: unspecified,
            port: 0,
            ttl: None,
            source: None,
            payload_type: DEFAULT_PAYLOAD_TYPE,
            format,
            rate: Some(rate),
            name: name.to_string(),
            // The serve pacer's shape is not yet one of the 2110-21
            // types, and RTSP clients ignore the clock line.
            clock: None,
            sender_type: None,
            tr_offset: None,
        }
        .to_session(session_id),
        Track::Ts => {
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
