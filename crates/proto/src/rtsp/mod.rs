//! RTSP/1.0 (RFC 2326), sans-IO: the server side, and one client
//! ([`Client`], `client.rs`) for tools that play from a server.
//!
//! [`Connection`] is the machine for one client TCP connection: the driver
//! feeds it the bytes it reads ([`Input::Bytes`], split or pipelined any
//! way), writes out what [`Connection::poll_transmit`] returns, acts on
//! [`Connection::poll_event`] (start a UDP flow, pause it, drop it) and
//! calls back with [`Input::Timer`] at [`Connection::poll_timeout`].
//!
//! Message grammar (request line, headers, typed `Transport`, `Session`,
//! `Range`, responses) is the `rtsp-types` crate's: it is maintained, it
//! covers RFC 2326 and 7826, and it serialises responses, so this module
//! holds only what a server decides. What rtsp-types lacks for a server
//! facing the network (incremental framing with limits, skipping
//! interleaved frames without buffering them) is wrapped around it in
//! `framing.rs`, and two inputs on which rtsp-types 0.1.3 panics are
//! screened out before it sees them (`transport.rs`).
//!
//! A server that needs credentials gives each connection a [`Guard`]
//! ([`Connection::with_guard`]): every request but OPTIONS then needs
//! Basic or Digest credentials for the one password (`auth.rs`, with the
//! header parser in `authorization.rs`), or gets `401` with challenges.
//!
//! The machine asks the server what it serves through a [`Catalog`] it
//! owns: the stream at a path, its SDP, whether a foreign `destination=`
//! is allowed. Admission changes the server's state (it reserves from a
//! budget the whole server shares), so it is no catalog question but an
//! event: [`Event::Admit`] holds the SETUP (or restarting PLAY), and every
//! request after it, until the driver answers with [`Input::Admission`].
//! The session state follows RFC 2326
//! Appendix A (Init, Ready, Playing); a connection holds at most one
//! session, and the session ends with the connection.
//!
//! # Polling order
//!
//! After every read (or timer, or close) the driver:
//!
//! 1. feeds it with [`Connection::handle_input`]`(now, ..)`: the bytes
//!    read, [`Input::Timer`] once `now` has reached
//!    [`Connection::poll_timeout`], [`Input::Closed`] when the peer left;
//! 2. writes every [`Connection::poll_transmit`]`(now)` in order (a
//!    failed write is fed back as [`Input::Closed`]);
//! 3. acts on every [`Connection::poll_event`]; an [`Event::Admit`] is
//!    answered with [`Input::Admission`] (the driver asks its stream table
//!    or budget), which queues the held request's response, and those of
//!    the requests behind it, and may queue more events: write the
//!    responses as in 2 before the next event, until no event is left;
//! 4. waits for bytes until [`Connection::poll_timeout`].

mod auth;
mod authorization;
mod client;
mod connection;
mod error;
mod framing;
mod target;
mod transport;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

pub use auth::{Credentials, Guard, NONCE_KEY_LEN, NONCE_LIFETIME, REALM};
pub use authorization::{
    Algorithm, Authorization, DigestAnswer, MAX_PARAMS, Qop, parse_authorization,
};
pub use client::{Client, ClientConfig, ClientError, ClientEvent, ClientInput, MAX_EXPLANATION};
pub use connection::{Connection, Counters};
pub use error::{AuthFailure, Error, Header, Refusal, RefusalKind};
pub use framing::write_interleaved;
pub use target::TRACK_PREFIX;
pub use transport::{MulticastGroup, PortPair, Transport};

use crate::units::Nanos;

/// The methods this server implements, as its `Public` header lists them.
pub const PUBLIC: &str = "OPTIONS, DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN, GET_PARAMETER";

/// Hard limits on what one client may make the machine hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request line plus headers, in bytes.
    pub header_bytes: usize,
    /// Header lines per request.
    pub headers: usize,
    /// Request body (`Content-Length`), in bytes.
    pub body_bytes: usize,
    /// Responses queued and not yet taken by `poll_transmit`: a client
    /// that pipelines more requests than this is cut off.
    pub pending_responses: usize,
}

impl Default for Limits {
    /// 8 KiB of headers in at most 64 lines, 4 KiB of body, 32 pending
    /// responses: far above what FFmpeg, GStreamer or VLC send.
    fn default() -> Limits {
        Limits {
            header_bytes: 8 * 1024,
            headers: 64,
            body_bytes: 4 * 1024,
            pending_responses: 32,
        }
    }
}

/// Settings of the connection machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Input limits.
    pub limits: Limits,
    /// A session with no request (or keep-alive) for this long is reaped;
    /// advertised in whole seconds as `Session: id;timeout=N`.
    pub session_timeout: Nanos,
    /// A connection without a session and no request for this long is
    /// closed.
    pub idle_timeout: Nanos,
    /// The server's RTP/RTCP source ports for UDP unicast, reported as
    /// `server_port` in SETUP responses.
    pub server_port: Option<PortPair>,
}

impl Default for Config {
    /// Default limits, 60 s timeouts (RFC 2326's default), no server port.
    fn default() -> Config {
        Config {
            limits: Limits::default(),
            session_timeout: Nanos::from_secs(60),
            idle_timeout: Nanos::from_secs(60),
            server_port: None,
        }
    }
}

/// An RTSP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// OPTIONS.
    Options,
    /// DESCRIBE.
    Describe,
    /// SETUP.
    Setup,
    /// PLAY.
    Play,
    /// PAUSE.
    Pause,
    /// TEARDOWN.
    Teardown,
    /// GET_PARAMETER.
    GetParameter,
    /// SET_PARAMETER.
    SetParameter,
    /// ANNOUNCE.
    Announce,
    /// RECORD.
    Record,
    /// REDIRECT.
    Redirect,
    /// PLAY_NOTIFY (RTSP 2.0).
    PlayNotify,
    /// Anything else.
    Extension,
}

impl From<&rtsp_types::Method> for Method {
    fn from(m: &rtsp_types::Method) -> Method {
        use rtsp_types::Method as M;
        match m {
            M::Options => Method::Options,
            M::Describe => Method::Describe,
            M::Setup => Method::Setup,
            M::Play => Method::Play,
            M::Pause => Method::Pause,
            M::Teardown => Method::Teardown,
            M::GetParameter => Method::GetParameter,
            M::SetParameter => Method::SetParameter,
            M::Announce => Method::Announce,
            M::Record => Method::Record,
            M::Redirect => Method::Redirect,
            M::PlayNotify => Method::PlayNotify,
            M::Extension(_) => Method::Extension,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Options => "OPTIONS",
            Method::Describe => "DESCRIBE",
            Method::Setup => "SETUP",
            Method::Play => "PLAY",
            Method::Pause => "PAUSE",
            Method::Teardown => "TEARDOWN",
            Method::GetParameter => "GET_PARAMETER",
            Method::SetParameter => "SET_PARAMETER",
            Method::Announce => "ANNOUNCE",
            Method::Record => "RECORD",
            Method::Redirect => "REDIRECT",
            Method::PlayNotify => "PLAY_NOTIFY",
            Method::Extension => "an extension method",
        })
    }
}

/// Session state (RFC 2326 Appendix A, server side; no Recording).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No session.
    Init,
    /// Set up, not playing.
    Ready,
    /// Playing.
    Playing,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Init => "Init",
            State::Ready => "Ready",
            State::Playing => "Playing",
        })
    }
}

/// A session identifier, written as 16 hex digits. Made from the seed the
/// driver passes to [`Connection::new`] (random bytes from its entropy
/// source), so ids are unguessable without a random source in proto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What the catalog says about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    /// Media in its SDP, each SETUP-able as `trackID=n` (at least 1).
    pub tracks: u16,
    /// The group it is multicast on, if any.
    pub multicast: Option<MulticastGroup>,
}

/// What the server serves and allows; the connection machine asks it
/// while answering requests. Calls are synchronous and must not block on
/// I/O: the driver answers from its stream table.
pub trait Catalog {
    /// The stream at `path` (percent-decoded, without leading `/`, track
    /// or query), or `None` for 404. `path` comes from the client: look
    /// it up, never use it as a file name.
    fn stream(&self, path: &str) -> Option<StreamInfo>;

    /// The SDP of the stream at `path` for DESCRIBE. Media `n` must carry
    /// `a=control:trackID=n` (see [`TRACK_PREFIX`]); clients resolve it
    /// against the `Content-Base` the machine sends (the URL plus `/`).
    fn sdp(&self, path: &str) -> Option<String>;

    /// Whether media for `client` may go to `destination`, another
    /// address (a SETUP `destination=`). The default refuses: a server
    /// that sends wherever it is told is a flood cannon.
    fn destination_allowed(&self, client: IpAddr, destination: IpAddr) -> bool {
        let _ = (client, destination);
        false
    }

    /// The server's RTP/RTCP port pair for an admitted SETUP of UDP
    /// unicast `transport`, reported as `server_port` (clients send their
    /// receiver reports to its RTCP port); asked once the driver admitted
    /// the SETUP ([`Input::Admission`]).
    /// `None` falls back to [`Config::server_port`].
    fn server_port(&self, transport: &Transport) -> Option<PortPair> {
        let _ = transport;
        None
    }

    /// The SSRC the session's media will carry over `transport`,
    /// announced as `ssrc=` in the SETUP response (RFC 2326 12.39):
    /// GStreamer's `rtspsrc` ends a stream at once on a BYE only from the
    /// SSRC it was told. Asked once the driver admitted the SETUP; `None`
    /// leaves the parameter out.
    fn ssrc(&self, transport: &Transport) -> Option<u32> {
        let _ = transport;
        None
    }
}

impl<C: Catalog + ?Sized> Catalog for &C {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        (**self).stream(path)
    }
    fn sdp(&self, path: &str) -> Option<String> {
        (**self).sdp(path)
    }
    fn destination_allowed(&self, client: IpAddr, destination: IpAddr) -> bool {
        (**self).destination_allowed(client, destination)
    }
    fn server_port(&self, transport: &Transport) -> Option<PortPair> {
        (**self).server_port(transport)
    }
    fn ssrc(&self, transport: &Transport) -> Option<u32> {
        (**self).ssrc(transport)
    }
}

impl<C: Catalog + ?Sized> Catalog for Arc<C> {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        (**self).stream(path)
    }
    fn sdp(&self, path: &str) -> Option<String> {
        (**self).sdp(path)
    }
    fn destination_allowed(&self, client: IpAddr, destination: IpAddr) -> bool {
        (**self).destination_allowed(client, destination)
    }
    fn server_port(&self, transport: &Transport) -> Option<PortPair> {
        (**self).server_port(transport)
    }
}

/// What the driver hands the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<'a> {
    /// Bytes read from the client's TCP connection, in order, cut anywhere.
    Bytes(&'a [u8]),
    /// A sign of life from the client outside this connection (its RTCP
    /// receiver reports on UDP): keeps the session alive.
    KeepAlive,
    /// The deadline of [`Connection::poll_timeout`] has passed.
    Timer,
    /// The client closed the connection, or it broke.
    Closed,
    /// The driver's answer to the pending [`Event::Admit`]. Ignored when
    /// no admission is pending.
    Admission(Admission),
}

/// The driver's verdict on a stream the machine asked to admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The stream may start: the driver reserved what it needs.
    Admitted,
    /// It may not: the request gets the status of the refusal's kind
    /// (453 Not Enough Bandwidth when a budget is spent) and its reason
    /// as a `text/plain` body.
    Refused(Refusal),
}

/// Where PLAY starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the beginning of the stream (first PLAY, or `Range: npt=0-`).
    Beginning,
    /// From where PAUSE stopped it.
    Resume,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// TEARDOWN.
    Teardown,
    /// No request or keep-alive within the session timeout.
    TimedOut,
    /// The connection closed.
    ConnectionClosed,
}

/// Why the machine wants the connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed it.
    PeerClosed,
    /// Idle past the timeout.
    TimedOut,
    /// The client broke the protocol or a limit (it got the response to
    /// that first).
    Protocol(Error),
}

/// What the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// May a stream of `path` start over `transport`? Asked once per
    /// SETUP that would otherwise succeed, and again for a PLAY from the
    /// start of a session that has played (`restart`: a new stream
    /// replaces the old, whose reservation the driver may carry over).
    /// The request, and every one after it, waits until the driver
    /// answers with [`Input::Admission`].
    Admit {
        /// The stream.
        path: String,
        /// Where its media would go.
        transport: Transport,
        /// A PLAY from the start of a session that played.
        restart: bool,
    },
    /// A track was set up (or its transport changed): prepare to send
    /// `path`'s track `track` over `transport`, but send nothing yet.
    Setup {
        /// The session.
        session: SessionId,
        /// The stream.
        path: String,
        /// The track of the stream.
        track: u16,
        /// Where its media goes.
        transport: Transport,
    },
    /// Start (or restart, or resume) sending every track of the session,
    /// after writing out the PLAY response.
    Play {
        /// The session.
        session: SessionId,
        /// The stream.
        path: String,
        /// From the beginning or from the pause point.
        start: Start,
        /// Loop at the end (`?loop=1` on the DESCRIBE, SETUP or PLAY URL).
        looping: bool,
    },
    /// Stop sending; keep the position for a later PLAY.
    Pause {
        /// The session.
        session: SessionId,
    },
    /// The session is gone: stop its flows and release what SETUP
    /// reserved.
    SessionClosed {
        /// The session.
        session: SessionId,
        /// Why.
        reason: SessionEnd,
    },
    /// A request got an error response (for logs and metrics).
    Refused {
        /// The request's method (`None` when the request could not be
        /// read that far).
        method: Option<Method>,
        /// What was wrong.
        error: Error,
    },
    /// Write out the pending transmits, then close the connection.
    Closed(CloseReason),
    /// RTCP the client sent on a track's interleaved RTCP channel (its
    /// receiver reports over TCP), whole, for the driver to read.
    Rtcp {
        /// The session.
        session: SessionId,
        /// The track whose RTCP channel it came on.
        track: u16,
        /// The compound packet.
        data: Vec<u8>,
    },
}

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod tests;
