//! RTSP/1.0 client side, sans-IO: one session that DESCRIBEs a stream,
//! SETUPs its first track over UDP unicast, PLAYs it from the start,
//! keeps it alive and tears it down.
//!
//! It is the client `nagare loadtest` runs by the thousand against a
//! server under test, so it trusts nothing the server says: replies are
//! framed with the same limits as the server's requests (`framing.rs`),
//! every request has a reply deadline, and a reply to the wrong `CSeq`
//! is an error, not a hang.
//!
//! The driver connects the TCP socket, then loops as for the server
//! machine: feed [`ClientInput::Bytes`] as read, write every
//! [`Client::poll_transmit`], act on [`Client::poll_event`], and wake at
//! [`Client::poll_timeout`] with [`ClientInput::Timer`].

use std::collections::VecDeque;

use rtsp_types::headers::{CONTENT_BASE, CSEQ, SESSION};
use rtsp_types::{Message, Method as RtspMethod, Request, Response, Url, Version};

use super::framing::{Frame, Framer};
use super::{Limits, Method, PortPair};
use crate::sdp::Session;
use crate::units::Nanos;

/// Settings of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// Limits on what the server may make the client hold (a reply's head
    /// and body).
    pub limits: Limits,
    /// The UDP ports the media and its RTCP should go to.
    pub client_port: PortPair,
    /// A request unanswered for this long fails the session.
    pub reply_timeout: Nanos,
    /// Longest time between keep-alives; a shorter session timeout from
    /// the server halves it.
    pub keepalive: Nanos,
    /// The `User-Agent` header.
    pub user_agent: String,
}

impl ClientConfig {
    /// Defaults for a client receiving on `client_port`: 10 s to answer,
    /// a keep-alive every 20 s at most, SDPs of up to 64 KiB.
    pub fn new(client_port: PortPair) -> ClientConfig {
        ClientConfig {
            limits: Limits {
                body_bytes: 64 * 1024,
                ..Limits::default()
            },
            client_port,
            reply_timeout: Nanos::from_secs(10),
            keepalive: Nanos::from_secs(20),
            user_agent: "nagare".to_string(),
        }
    }
}

/// The most of a refusal's body [`ClientError::Refused`] keeps: a server's
/// explanation is a sentence or two, and a hostile one must not make the
/// error (and every log line it goes into) large.
pub const MAX_EXPLANATION: usize = 1024;

/// `: BODY` after a refusal's status when the server explained it.
fn said(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

/// Why a client's session failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The URL given to [`Client::new`] is not an `rtsp://` URL.
    #[error("'{0}' is not an RTSP URL like rtsp://127.0.0.1:8554/clip.ts")]
    BadUrl(String),
    /// The server refused a request.
    #[error("{method} {url}: the server answered {status} {reason}{}", said(.body))]
    Refused {
        /// The request.
        method: Method,
        /// Its URL.
        url: String,
        /// The status code.
        status: u16,
        /// The reason phrase.
        reason: String,
        /// The server's explanation, the reply's body (at most
        /// [`MAX_EXPLANATION`] bytes of it, trimmed).
        body: String,
        /// `Retry-After` in seconds: the server expects the same request
        /// to succeed after that long.
        retry_after: Option<u32>,
    },
    /// No reply within the reply timeout.
    #[error("{method} {url}: no reply within {secs} s")]
    NoReply {
        /// The request.
        method: Method,
        /// Its URL.
        url: String,
        /// The timeout in seconds.
        secs: u64,
    },
    /// The server's bytes are not an RTSP reply to the request sent.
    #[error("not an RTSP reply to {method} (CSeq {cseq}): {what}")]
    Malformed {
        /// The request awaiting its reply.
        method: Method,
        /// Its CSeq.
        cseq: u32,
        /// What was wrong.
        what: String,
    },
    /// The DESCRIBE reply's SDP could not be read.
    #[error("the DESCRIBE reply's SDP: {0}")]
    Sdp(String),
    /// The SETUP reply had no `Session` header.
    #[error("the SETUP reply names no Session")]
    NoSession,
    /// The server closed the connection before the session ended.
    #[error("the server closed the connection")]
    ConnectionClosed,
}

/// What the driver hands the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientInput<'a> {
    /// Bytes read from the server, in order, cut anywhere.
    Bytes(&'a [u8]),
    /// The deadline of [`Client::poll_timeout`] has passed.
    Timer,
    /// The server closed the connection, or it broke.
    Closed,
}

/// What the driver must know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// PLAY was answered: the media flows to the client ports.
    Playing {
        /// The session id the server gave.
        session: String,
        /// The SDP the DESCRIBE reply carried.
        sdp: String,
        /// The URL that was SETUP.
        track: String,
    },
    /// The session failed; the driver closes the connection.
    Failed(ClientError),
    /// TEARDOWN was answered (or the server closed the connection after
    /// it): the session is over.
    Closed,
}

/// The request awaiting its reply.
#[derive(Debug, Clone)]
struct Pending {
    method: Method,
    url: String,
    cseq: u32,
    deadline: Nanos,
}

/// One RTSP client session.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    url: Url,
    framer: Framer,
    cseq: u32,
    pending: Option<Pending>,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<ClientEvent>,
    sdp: String,
    track: Option<Url>,
    session: Option<String>,
    keepalive_every: Nanos,
    next_keepalive: Option<Nanos>,
    /// Failed or torn down: nothing more is sent.
    over: bool,
}

impl Client {
    /// A client for the stream at `url`; its DESCRIBE is the first
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn new(now: Nanos, url: &str, config: ClientConfig) -> Result<Client, ClientError> {
        let parsed = rtsp_url(url).ok_or_else(|| ClientError::BadUrl(url.to_string()))?;
        let mut c = Client {
            framer: Framer::new(config.limits),
            keepalive_every: config.keepalive,
            config,
            url: parsed.clone(),
            cseq: 0,
            pending: None,
            out: VecDeque::new(),
            events: VecDeque::new(),
            sdp: String::new(),
            track: None,
            session: None,
            next_keepalive: None,
            over: false,
        };
        c.request(now, Method::Describe, &parsed);
        Ok(c)
    }

    /// Feeds the client.
    pub fn handle_input(&mut self, now: Nanos, input: ClientInput<'_>) {
        if self.over {
            return;
        }
        match input {
            ClientInput::Bytes(bytes) => self.read(now, bytes),
            ClientInput::Timer => self.timer(now),
            ClientInput::Closed => {
                let teardown = matches!(&self.pending, Some(p) if p.method == Method::Teardown);
                self.end(if teardown {
                    ClientEvent::Closed
                } else {
                    ClientEvent::Failed(ClientError::ConnectionClosed)
                });
            }
        }
    }

    /// Ends the session: TEARDOWN if one was set up (its reply then gives
    /// [`ClientEvent::Closed`]), else [`ClientEvent::Closed`] at once.
    pub fn close(&mut self, now: Nanos) {
        if self.over {
            return;
        }
        match self.session {
            Some(_) => {
                let url = self.url.clone();
                self.next_keepalive = None;
                self.request(now, Method::Teardown, &url);
            }
            None => self.end(ClientEvent::Closed),
        }
    }

    /// The next request to write.
    pub fn poll_transmit(&mut self, _now: Nanos) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// The next thing the driver must know.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// When to call back with [`ClientInput::Timer`]: a reply's deadline
    /// or the next keep-alive.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.over {
            return None;
        }
        match &self.pending {
            Some(p) => Some(p.deadline),
            None => self.next_keepalive,
        }
    }

    /// The session id, once SETUP was answered.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Whether a request awaits its reply.
    pub fn is_waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the session failed or was torn down.
    pub fn is_over(&self) -> bool {
        self.over
    }

    fn end(&mut self, event: ClientEvent) {
        self.over = true;
        self.pending = None;
        self.next_keepalive = None;
        self.events.push_back(event);
    }

    fn timer(&mut self, now: Nanos) {
        if let Some(p) = &self.pending {
            if now >= p.deadline {
                let e = ClientError::NoReply {
                    method: p.method,
                    url: p.url.clone(),
                    secs: self.config.reply_timeout.as_secs_f64().ceil() as u64,
                };
                self.end(ClientEvent::Failed(e));
            }
            return;
        }
        if self.next_keepalive.is_some_and(|t| now >= t) {
            let url = self.url.clone();
            self.request(now, Method::GetParameter, &url);
        }
    }

    /// Queues one request; at most one is outstanding at a time.
    fn request(&mut self, now: Nanos, method: Method, url: &Url) {
        self.cseq = self.cseq.wrapping_add(1);
        let mut b = Request::builder(rtsp_method(method), Version::V1_0)
            .request_uri(url.clone())
            .header(CSEQ, self.cseq.to_string())
            .header(
                rtsp_types::headers::USER_AGENT,
                self.config.user_agent.as_str(),
            );
        if let Some(s) = &self.session {
            b = b.header(SESSION, s.as_str());
        }
        b = match method {
            Method::Describe => b.header(rtsp_types::headers::ACCEPT, "application/sdp"),
            Method::Setup => {
                let PortPair { rtp, rtcp } = self.config.client_port;
                let t = format!("RTP/AVP;unicast;client_port={rtp}-{rtcp}");
                b.header(rtsp_types::headers::TRANSPORT, t)
            }
            Method::Play => b.header(rtsp_types::headers::RANGE, "npt=0-"),
            _ => b,
        };
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = b.empty().write(&mut bytes);
        self.out.push_back(bytes);
        self.pending = Some(Pending {
            method,
            url: url.to_string(),
            cseq: self.cseq,
            deadline: now.saturating_add(self.config.reply_timeout),
        });
    }

    fn read(&mut self, now: Nanos, mut bytes: &[u8]) {
        while !self.over {
            let n = self.framer.fill(bytes);
            bytes = &bytes[n..];
            loop {
                match self.framer.next() {
                    Ok(None) => break,
                    // Interleaved data is not asked for; skipped.
                    Ok(Some(Frame::Interleaved { .. })) => {}
                    Ok(Some(Frame::Message { .. })) => {
                        let reply = parse_reply(self.framer.message());
                        self.framer.consume();
                        self.reply(now, reply);
                        if self.over {
                            return;
                        }
                    }
                    Err(e) => return self.malformed(e.to_string()),
                }
            }
            if bytes.is_empty() {
                return;
            }
            if n == 0 {
                // Nothing taken and nothing framed: a reply past the limits.
                return self.malformed("a reply larger than the client's limits".into());
            }
        }
    }

    fn malformed(&mut self, what: String) {
        let (method, cseq) = self
            .pending
            .as_ref()
            .map_or((Method::Options, 0), |p| (p.method, p.cseq));
        self.end(ClientEvent::Failed(ClientError::Malformed {
            method,
            cseq,
            what,
        }));
    }

    /// One reply: checks it answers the pending request, then takes the
    /// next step.
    fn reply(&mut self, now: Nanos, reply: Result<Response<Vec<u8>>, String>) {
        let reply = match reply {
            Ok(r) => r,
            Err(what) => return self.malformed(what),
        };
        let Some(p) = self.pending.clone() else {
            return self.malformed("a reply to no request".into());
        };
        // A server cannot answer what it has not been sent: the bytes of a
        // read may hold a reply and then more, and a reply matching the
        // request just queued would set two requests in flight at once.
        if !self.out.is_empty() {
            return self.malformed(format!(
                "a reply to {} (CSeq {}) before it was sent",
                p.method, p.cseq
            ));
        }
        let cseq = reply
            .header(&CSEQ)
            .and_then(|v| v.as_str().trim().parse::<u32>().ok());
        if cseq != Some(p.cseq) {
            return self.malformed(format!("CSeq {cseq:?} where {} was sent", p.cseq));
        }
        let status = u16::from(reply.status());
        if status != 200 {
            let body = String::from_utf8_lossy(reply.body());
            let body = body.trim();
            let cut = (0..=MAX_EXPLANATION.min(body.len()))
                .rev()
                .find(|&i| body.is_char_boundary(i))
                .unwrap_or(0);
            let e = ClientError::Refused {
                method: p.method,
                url: p.url,
                status,
                reason: reply.reason_phrase().to_string(),
                body: body[..cut].to_string(),
                retry_after: reply
                    .header(&rtsp_types::headers::RETRY_AFTER)
                    .and_then(|v| v.as_str().trim().parse().ok()),
            };
            return self.end(ClientEvent::Failed(e));
        }
        self.pending = None;
        match p.method {
            Method::Describe => self.described(now, &reply),
            Method::Setup => self.set_up(now, &reply),
            Method::Play => self.playing(now),
            Method::Teardown => self.end(ClientEvent::Closed),
            _ => self.next_keepalive = Some(now.saturating_add(self.keepalive_every)),
        }
    }

    fn described(&mut self, now: Nanos, reply: &Response<Vec<u8>>) {
        self.sdp = String::from_utf8_lossy(reply.body()).into_owned();
        let control = match Session::parse(&self.sdp) {
            Ok(s) => s.media.first().and_then(|m| m.control.clone()),
            Err(e) => return self.end(ClientEvent::Failed(ClientError::Sdp(e.to_string()))),
        };
        let base = reply
            .header(&CONTENT_BASE)
            .and_then(|v| rtsp_url(v.as_str().trim()));
        let track = track_url(base.as_ref().unwrap_or(&self.url), control.as_deref());
        let Some(track) = track.filter(is_rtsp) else {
            let e = format!("a=control {control:?} names no rtsp:// URL");
            return self.end(ClientEvent::Failed(ClientError::Sdp(e)));
        };
        self.request(now, Method::Setup, &track);
        self.track = Some(track);
    }

    fn set_up(&mut self, now: Nanos, reply: &Response<Vec<u8>>) {
        let Some(value) = reply.header(&SESSION).map(|v| v.as_str().to_string()) else {
            return self.end(ClientEvent::Failed(ClientError::NoSession));
        };
        let mut parts = value.split(';');
        let id = parts.next().unwrap_or("").trim().to_string();
        if id.is_empty() {
            return self.end(ClientEvent::Failed(ClientError::NoSession));
        }
        // `timeout=N` seconds: keep alive at half of it, never less than 1 s.
        let timeout = parts
            .filter_map(|p| p.trim().strip_prefix("timeout="))
            .find_map(|t| t.trim().parse::<u64>().ok());
        if let Some(t) = timeout {
            let half = Nanos::from_secs(t.max(2) / 2);
            self.keepalive_every = self.keepalive_every.min(half);
        }
        self.session = Some(id);
        let url = self.url.clone();
        self.request(now, Method::Play, &url);
    }

    fn playing(&mut self, now: Nanos) {
        self.next_keepalive = Some(now.saturating_add(self.keepalive_every));
        self.events.push_back(ClientEvent::Playing {
            session: self.session.clone().unwrap_or_default(),
            sdp: self.sdp.clone(),
            track: self.track.as_ref().map(Url::to_string).unwrap_or_default(),
        });
    }
}

/// The URL to SETUP: the first media's `a=control` resolved against the
/// base (RFC 2326 C.1.1). `*` or none means the base itself. A base
/// without a trailing `/` gets one, so `trackID=0` names a child of the
/// stream, as servers mean it (nagare says `trackID=0`, GStreamer
/// `stream=0`). `None` when the control does not resolve.
fn track_url(base: &Url, control: Option<&str>) -> Option<Url> {
    match control {
        None | Some("*") => Some(base.clone()),
        Some(c) => {
            let mut dir = base.clone();
            dir.set_query(None);
            if !dir.path().ends_with('/') {
                let p = format!("{}/", dir.path());
                dir.set_path(&p);
            }
            dir.join(c).ok()
        }
    }
}

/// `text` as an `rtsp://` or `rtsps://` URL with a host; anything else a
/// server says (a mangled header, another scheme) is not followed.
fn rtsp_url(text: &str) -> Option<Url> {
    Url::parse(text).ok().filter(is_rtsp)
}

fn is_rtsp(u: &Url) -> bool {
    matches!(u.scheme(), "rtsp" | "rtsps") && u.has_host()
}

/// A framed message as a reply.
fn parse_reply(bytes: &[u8]) -> Result<Response<Vec<u8>>, String> {
    match Message::<Vec<u8>>::parse(bytes) {
        Ok((Message::Response(r), _)) => Ok(r),
        Ok(_) => Err("a request or data where a reply was due".into()),
        Err(e) => Err(format!("{e:?}")),
    }
}

fn rtsp_method(m: Method) -> RtspMethod {
    match m {
        Method::Describe => RtspMethod::Describe,
        Method::Setup => RtspMethod::Setup,
        Method::Play => RtspMethod::Play,
        Method::Teardown => RtspMethod::Teardown,
        Method::GetParameter => RtspMethod::GetParameter,
        Method::Pause => RtspMethod::Pause,
        _ => RtspMethod::Options,
    }
}
