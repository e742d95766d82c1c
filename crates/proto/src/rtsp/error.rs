//! Why the RTSP machine refused a request or closed a connection.

use std::net::IpAddr;

use thiserror::Error;

use super::{Method, State};

/// A header the machine reads and found unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `CSeq`: must be a decimal number below 2^32.
    CSeq,
    /// `Session`: must name the session.
    Session,
    /// `Transport`: must parse as an RTSP/1.0 transport list.
    Transport,
    /// `Range`: must be an NPT range such as `npt=0-`.
    Range,
}

impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Header::CSeq => "CSeq",
            Header::Session => "Session",
            Header::Transport => "Transport",
            Header::Range => "Range",
        })
    }
}

/// Why a request's credentials did not pass ([`super::Guard::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AuthFailure {
    /// No `Authorization` header.
    #[error(
        "no credentials: this server needs them; play rtsp://USER:TOKEN@HOST:PORT/NAME \
         (any user name, the server's --token as password)"
    )]
    Missing,
    /// An `Authorization` header that does not parse.
    #[error("the Authorization header does not parse as Basic or Digest credentials")]
    Malformed,
    /// A scheme other than Basic and Digest.
    #[error("the Authorization header's scheme is neither Basic nor Digest")]
    UnsupportedScheme,
    /// A Digest algorithm other than MD5 and SHA-256.
    #[error("Digest algorithm not offered: use MD5 or SHA-256")]
    UnsupportedAlgorithm,
    /// A Digest `qop` other than `auth`.
    #[error("Digest qop not offered: use qop=auth or none")]
    UnsupportedQop,
    /// A Digest answer for another realm.
    #[error("Digest answer for another realm; this server's is \"nagare\"")]
    WrongRealm,
    /// A nonce this connection did not issue.
    #[error("Digest nonce not issued on this connection; answer the latest challenge")]
    ForeignNonce,
    /// A Digest `uri` other than the request's.
    #[error("Digest uri differs from the request URI")]
    UriMismatch,
    /// A wrong password (or a Digest response that does not match).
    #[error("wrong credentials: the password is the server's --token")]
    WrongCredentials,
    /// A right answer to a nonce that expired: retry with the new one.
    #[error("Digest nonce expired; retry with the new one")]
    StaleNonce,
}

/// What kind of refusal the driver's admission gave ([`Refusal`]); it
/// fixes the response's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// Over the server's rate, memory or load budget: 453 Not Enough
    /// Bandwidth.
    Capacity,
    /// Busy for a moment only (streams admitted just before are not yet
    /// measured): 503 Service Unavailable with `Retry-After` (RFC 7826
    /// §18.44), after which the same request may fit.
    Busy {
        /// Seconds to wait before asking again.
        retry_after_secs: u32,
    },
    /// The server's policy forbids the stream (a destination outside its
    /// allow-list): 403 Forbidden, for no capacity would help.
    Forbidden,
    /// The stream's path went away since DESCRIBE: 404 Not Found.
    Gone,
    /// The server cannot send the path's media as set up: 500.
    Unplayable,
}

impl std::fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalKind::Capacity => "not enough capacity on this server for another session",
            RefusalKind::Busy { .. } => "the server is busy measuring new sessions: retry shortly",
            RefusalKind::Forbidden => "the server's policy forbids this stream",
            RefusalKind::Gone => "the stream is no longer offered",
            RefusalKind::Unplayable => "the server cannot send this stream",
        })
    }
}

/// Why the driver refused a stream ([`super::Admission::Refused`]): the
/// kind fixes the status, and the reason, which names the value and the
/// limit as the driver's policy wrote it, is the response's `text/plain`
/// body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal, for the status.
    pub kind: RefusalKind,
    /// The reason in words, for the client.
    pub reason: String,
}

impl Refusal {
    /// A refusal of `kind` saying `reason`.
    pub fn new(kind: RefusalKind, reason: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            reason: reason.into(),
        }
    }
}

/// Everything the RTSP machine refuses; each maps to one status code
/// ([`Error::status`]) and some end the connection
/// ([`Error::closes_connection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The request line and headers did not end within the limit.
    #[error("header section longer than {limit} bytes; the connection is closed")]
    HeaderTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// More header lines than allowed.
    #[error("{count} header lines, more than the limit of {limit}; the connection is closed")]
    TooManyHeaders {
        /// Lines in the request.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// `Content-Length` above the body limit.
    #[error("body of {length} bytes, more than the limit of {limit}; the connection is closed")]
    BodyTooLarge {
        /// The announced length.
        length: usize,
        /// The limit.
        limit: usize,
    },
    /// The client sent more requests than the driver has taken responses.
    #[error("more than {limit} requests waiting for their responses; the connection is closed")]
    TooManyPending {
        /// The limit.
        limit: usize,
    },
    /// Not an RTSP request: bad request line, header syntax or
    /// `Content-Length`. Where the next request starts is then unknown.
    #[error(
        "not an RTSP request (request line, header syntax or Content-Length); the connection is closed"
    )]
    Malformed,
    /// The request URI is not an absolute `rtsp://` URL.
    #[error("request URI is not an absolute URL like rtsp://host:8554/name")]
    BadUri,
    /// No `CSeq` header.
    #[error("no CSeq header; every RTSP request needs one")]
    MissingCSeq,
    /// A header that does not parse.
    #[error("{0} header does not parse")]
    InvalidHeader(Header),
    /// RTSP/2.0 (or another version): this server speaks RTSP/1.0.
    #[error("only RTSP/1.0 is supported")]
    UnsupportedVersion,
    /// A method RTSP knows that this server does not offer.
    #[error(
        "{0} is not allowed here; allowed: OPTIONS, DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN, GET_PARAMETER"
    )]
    MethodNotAllowed(Method),
    /// An extension method.
    #[error(
        "unknown method; this server implements OPTIONS, DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN, GET_PARAMETER"
    )]
    NotImplemented,
    /// No stream at the request's path.
    #[error("no stream at that path")]
    NotFound,
    /// The stream has fewer tracks than the URL names.
    #[error("track {track} does not exist; the stream has {tracks}")]
    TrackNotFound {
        /// The track asked for.
        track: u16,
        /// Tracks the stream has.
        tracks: u16,
    },
    /// DESCRIBE with an `Accept` header that excludes SDP.
    #[error("the client does not accept application/sdp, the only description offered")]
    NotAcceptable,
    /// A `Session` header naming no session of this connection, or none
    /// where one is required.
    #[error("session not found on this connection")]
    SessionNotFound,
    /// The method is not valid in the session's state (RFC 2326 A.1).
    #[error("{method} is not valid in state {state}")]
    MethodNotValidInState {
        /// The method.
        method: Method,
        /// The session state.
        state: State,
    },
    /// SETUP of another path inside an existing session.
    #[error("a session plays one stream; TEARDOWN first or use a new connection")]
    OtherStream,
    /// SETUP without a `Session` header while this connection has one.
    #[error("this connection already has a session; send its Session header")]
    SessionExists,
    /// No transport in the list that this server can use.
    #[error(
        "no usable transport; offer RTP/AVP over UDP (client_port), TCP (interleaved) or multicast"
    )]
    UnsupportedTransport,
    /// UDP unicast without `client_port`.
    #[error("UDP transport without client_port")]
    MissingClientPort,
    /// A client port of 0, or an RTP port of 65535 with no RTCP port after it.
    #[error("client port {port} is not usable")]
    BadClientPort {
        /// The port.
        port: u16,
    },
    /// Multicast asked for, but the stream has no multicast group.
    #[error("this stream has no multicast group; use unicast UDP or TCP")]
    MulticastUnavailable,
    /// Interleaved channel already used by another track, or 255 for RTP
    /// (no room for RTCP).
    #[error("interleaved channel {channel} is taken or out of range")]
    ChannelInUse {
        /// The channel.
        channel: u8,
    },
    /// `destination=` names an address that is not the client's own and
    /// that the allow-list does not admit.
    #[error(
        "destination {destination} is not the client's own address {client} and is not allowed"
    )]
    DestinationForbidden {
        /// The client's address.
        client: IpAddr,
        /// The destination asked for.
        destination: IpAddr,
    },
    /// `destination=` is a host name, not an address.
    #[error("destination must be an IP address, not a host name")]
    DestinationNotAddress,
    /// Credentials missing or wrong where the server needs them.
    #[error("unauthorized: {0}")]
    Unauthorized(AuthFailure),
    /// The server's admission refused the stream (its reason went to the
    /// client in the response's body).
    #[error("stream not admitted: {0}")]
    NotAdmitted(RefusalKind),
    /// PLAY from a position other than the start.
    #[error("seeking to {start_ms} ms is not supported; play from npt=0")]
    SeekUnsupported {
        /// The start asked for, in milliseconds.
        start_ms: u64,
    },
    /// A `Require` header: this server supports no extensions.
    #[error("Require names an option this server does not support")]
    OptionNotSupported,
    /// A packet too long for an interleaved `$` frame, whose length field
    /// has 16 bits. Raised on the server's own output, never by a client.
    #[error(
        "a packet of {len} bytes does not fit an interleaved frame (at most 65535); \
         play over UDP or use smaller packets"
    )]
    InterleavedTooLong {
        /// The packet's length.
        len: usize,
    },
}

impl Error {
    /// The RTSP status code the client gets for this error.
    pub fn status(self) -> u16 {
        match self {
            Error::HeaderTooLarge { .. }
            | Error::TooManyHeaders { .. }
            | Error::TooManyPending { .. }
            | Error::Malformed
            | Error::BadUri
            | Error::MissingCSeq
            | Error::InvalidHeader(_) => 400,
            Error::Unauthorized(_) => 401,
            Error::DestinationForbidden { .. }
            | Error::DestinationNotAddress
            | Error::NotAdmitted(RefusalKind::Forbidden) => 403,
            Error::NotFound
            | Error::TrackNotFound { .. }
            | Error::NotAdmitted(RefusalKind::Gone) => 404,
            Error::MethodNotAllowed(_) => 405,
            Error::NotAcceptable => 406,
            Error::BodyTooLarge { .. } => 413,
            Error::NotAdmitted(RefusalKind::Capacity) => 453,
            Error::NotAdmitted(RefusalKind::Busy { .. }) => 503,
            Error::SessionNotFound => 454,
            Error::MethodNotValidInState { .. } | Error::OtherStream | Error::SessionExists => 455,
            Error::SeekUnsupported { .. } => 457,
            Error::UnsupportedTransport
            | Error::MissingClientPort
            | Error::BadClientPort { .. }
            | Error::MulticastUnavailable
            | Error::ChannelInUse { .. } => 461,
            Error::InterleavedTooLong { .. } | Error::NotAdmitted(RefusalKind::Unplayable) => 500,
            Error::NotImplemented => 501,
            Error::UnsupportedVersion => 505,
            Error::OptionNotSupported => 551,
        }
    }

    /// Whether the connection closes after the response: the byte stream
    /// can no longer be cut into requests, or the client floods.
    pub fn closes_connection(self) -> bool {
        matches!(
            self,
            Error::HeaderTooLarge { .. }
                | Error::TooManyHeaders { .. }
                | Error::BodyTooLarge { .. }
                | Error::TooManyPending { .. }
                | Error::Malformed
        )
    }

    /// The reason phrase of the response: the standard one, except where
    /// a limit makes a plain 400 uninformative.
    pub(crate) fn reason(self) -> Option<&'static str> {
        match self {
            Error::HeaderTooLarge { .. } => Some("Header Section Too Large"),
            Error::TooManyHeaders { .. } => Some("Too Many Headers"),
            Error::TooManyPending { .. } => Some("Too Many Pipelined Requests"),
            _ => None,
        }
    }
}
