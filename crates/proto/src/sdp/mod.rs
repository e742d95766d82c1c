//! SDP (RFC 8866): a session model with several media, groups (ST 2022-7's
//! `a=group:DUP`), `a=mid` and source filters (RFC 4570), and the view of
//! one raw video stream in the ST 2110-20 dialect that `send` writes and
//! `recv` reads (nagare's, FFmpeg's and GStreamer's SDP alike).
//!
//! Every value written passes through [`clean`]: a session name comes from
//! a file name, and a newline in it must not become an SDP line of its own.

mod clock;
mod session;
mod stream;

pub use clock::{ClockError, PtpClock, RefClock};
pub use session::{Connection, Group, Media, Origin, Session, SourceFilter};
pub use stream::SdpStream;

use crate::video;

/// Which `a=fmtp` parameter an SDP lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `sampling=`
    Sampling,
    /// `depth=`
    Depth,
    /// `width=`
    Width,
    /// `height=`
    Height,
}

impl Param {
    const fn name(self) -> &'static str {
        match self {
            Param::Sampling => "sampling",
            Param::Depth => "depth",
            Param::Width => "valid width",
            Param::Height => "valid height",
        }
    }
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an SDP cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An `m=` line without a port number.
    #[error("SDP: m=video line has no valid port")]
    BadPort,
    /// An `m=` line without a media type or transport protocol.
    #[error("SDP: m=video line has no transport protocol (like RTP/AVP)")]
    BadProtocol,
    /// An `m=` line without a payload type below 128.
    #[error("SDP: m=video line has no valid payload type")]
    BadPayloadType,
    /// No `m=video` line at all.
    #[error("SDP: no m=video line")]
    NoVideo,
    /// Neither the media nor the session has a `c=` line.
    #[error("SDP: no c= connection line")]
    NoConnection,
    /// A `c=` line without an address.
    #[error("SDP: c= line has no address")]
    NoAddress,
    /// A `c=` address that is not an IP address.
    #[error("SDP: c= address is not an IP address")]
    BadAddress,
    /// A `c=` TTL that is not a number from 0 to 255.
    #[error("SDP: c= TTL is not a number from 0 to 255")]
    BadTtl,
    /// The video's payload type has no `a=rtpmap`.
    #[error("SDP: no a=rtpmap for the video payload type")]
    NoRtpmap,
    /// An encoding other than raw video.
    #[error("SDP: rtpmap is not raw/90000: only uncompressed RFC 4175 video is supported")]
    NotRaw,
    /// The video's payload type has no `a=fmtp`.
    #[error("SDP: no a=fmtp for the video payload type")]
    NoFmtp,
    /// A required `a=fmtp` parameter is missing or does not parse.
    #[error("SDP: fmtp has no {0}=")]
    MissingParam(Param),
    /// A sampling and depth nagare does not carry.
    #[error("SDP: unsupported sampling/depth (supported: YCbCr-4:2:2 depth 8 or 10, RGB depth 8)")]
    UnsupportedSampling,
    /// `interlace` in the fmtp: only progressive video is supported.
    #[error("SDP: interlaced video; only progressive video is supported")]
    Interlaced,
    /// The fmtp's size does not make a valid frame format.
    #[error("SDP: {0}")]
    Format(video::Error),
}

/// Longest text value kept or written (a session name, an attribute).
pub const MAX_TEXT: usize = 256;

/// A text value made safe to write into an SDP line: every control
/// character (CR and LF above all) becomes a space, the value is cut at
/// [`MAX_TEXT`] characters and trailing white space is dropped, exactly
/// as a re-read of the written line would leave it. Idempotent.
pub fn clean(value: &str) -> String {
    let cut: String = value
        .chars()
        .take(MAX_TEXT)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cut.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_removes_line_breaks_and_is_idempotent() {
        assert_eq!(clean("a\r\nc=IN IP4 6.6.6.6\n"), "a  c=IN IP4 6.6.6.6");
        assert_eq!(clean("tab\there\0"), "tab here");
        let long = "x".repeat(300);
        assert_eq!(clean(&long).len(), MAX_TEXT);
        for s in ["a\r\nb ", " \u{3000}x\u{85}", "é\n"] {
            assert_eq!(clean(&clean(s)), clean(s));
        }
    }
}
