//! The per-connection machine: requests in, responses and events out.

use std::collections::VecDeque;
use std::net::IpAddr;

use rtsp_types::headers::{self, CSeq, HeaderName, NptRange, NptTime, Range, Transports};
use rtsp_types::{Message, Request, Response, StatusCode, Version};

use super::auth::Guard;
use super::error::{AuthFailure, RefusalKind};
use super::framing::{Frame, Framer, with_star_uri};
use super::target::{Target, content_base};
use super::transport::{self, Context};
use super::{
    Admission, Catalog, CloseReason, Config, Error, Event, Header, Input, Method, PUBLIC,
    SessionEnd, SessionId, Start, State, Transport,
};
use crate::units::Nanos;

/// What the machine counted, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests answered (including refusals).
    pub requests: u64,
    /// Requests refused with a 4xx or 5xx status.
    pub refused: u64,
    /// Interleaved `$` frames from the client (skipped).
    pub interleaved_frames: u64,
    /// Their payload bytes.
    pub interleaved_bytes: u64,
}

/// The one session a connection may hold.
#[derive(Debug)]
struct Session {
    id: SessionId,
    path: String,
    state: State,
    played: bool,
    looping: bool,
    tracks: Vec<(u16, Transport)>,
}

/// A request waiting for the driver's admission ([`Event::Admit`]).
#[derive(Debug)]
struct Admitting {
    cseq: u32,
    asked: Asked,
}

/// What the waiting request does once admitted.
#[derive(Debug)]
enum Asked {
    /// Sets up `track` of `target`'s stream over `transport`.
    Setup {
        target: Target,
        track: u16,
        transport: Transport,
    },
    /// Plays the session's stream from the start again.
    Restart { looping: bool },
}

impl Asked {
    fn method(&self) -> Method {
        match self {
            Asked::Setup { .. } => Method::Setup,
            Asked::Restart { .. } => Method::Play,
        }
    }
}

/// A successful answer before it is written.
#[derive(Debug, Default)]
struct Reply {
    headers: Vec<(HeaderName, String)>,
    session: bool,
    transport: Option<Transports>,
    body: Option<(&'static str, Vec<u8>)>,
}

impl Reply {
    fn header(mut self, name: HeaderName, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    fn with_session(mut self) -> Reply {
        self.session = true;
        self
    }
}

type Req = Request<Vec<u8>>;

/// The RTSP machine of one client connection; `C` answers what is served.
#[derive(Debug)]
pub struct Connection<C> {
    config: Config,
    catalog: C,
    client: IpAddr,
    framer: Framer,
    // Checks every request but OPTIONS when the server needs credentials.
    guard: Option<Guard>,
    seed: u64,
    sessions_made: u64,
    session: Option<Session>,
    // Path and `?loop=1` of the last DESCRIBE: clients drop the query
    // from the SETUP and PLAY URLs they derive from Content-Base.
    described: Option<(String, bool)>,
    last_activity: Nanos,
    // The request waiting for the driver's admission, and the bytes that
    // came behind it (read on only once it is answered, so responses
    // stay in request order).
    admitting: Option<Admitting>,
    held: Vec<u8>,
    transmits: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    closed: bool,
    counters: Counters,
}

impl<C: Catalog> Connection<C> {
    /// A machine for a connection from `client` accepted at `now`;
    /// `session_seed` is random bytes from the driver (session ids derive
    /// from it).
    pub fn new(now: Nanos, config: Config, catalog: C, client: IpAddr, session_seed: u64) -> Self {
        Connection {
            framer: Framer::new(config.limits),
            guard: None,
            config,
            catalog,
            client,
            seed: session_seed,
            sessions_made: 0,
            session: None,
            described: None,
            last_activity: now,
            admitting: None,
            held: Vec::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            closed: false,
            counters: Counters::default(),
        }
    }

    /// The same machine, asking every request but OPTIONS for
    /// credentials that `guard` accepts (see [`super::auth`]); `401` with
    /// the guard's challenges otherwise. OPTIONS stays open: it tells
    /// nothing but the methods, and clients send it before they know a
    /// server wants credentials.
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// What happened at `now`. Input after the machine closed is ignored.
    pub fn handle_input(&mut self, now: Nanos, input: Input<'_>) {
        if self.closed {
            return;
        }
        match input {
            Input::Bytes(bytes) => self.feed(now, bytes),
            Input::KeepAlive => self.last_activity = now,
            Input::Timer => {
                if self.poll_timeout().is_some_and(|t| now >= t) {
                    self.end_session(SessionEnd::TimedOut);
                    self.close(CloseReason::TimedOut);
                }
            }
            Input::Closed => {
                self.end_session(SessionEnd::ConnectionClosed);
                self.close(CloseReason::PeerClosed);
            }
            Input::Admission(verdict) => self.admission(now, verdict),
        }
    }

    /// The next response to write at `now`, whole, in request order.
    /// Responses are due as soon as they are queued, so `now` changes
    /// nothing today; it is the verb set's, as in every machine.
    pub fn poll_transmit(&mut self, _now: Nanos) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// The next thing the driver must act on.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call back with [`Input::Timer`]: the session timeout, or
    /// the idle timeout without a session. `None` once closed.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.closed {
            return None;
        }
        let span = if self.session.is_some() {
            self.config.session_timeout
        } else {
            self.config.idle_timeout
        };
        Some(self.last_activity + span)
    }

    /// The session state.
    pub fn state(&self) -> State {
        self.session.as_ref().map_or(State::Init, |s| s.state)
    }

    /// The session, if one is set up.
    pub fn session(&self) -> Option<SessionId> {
        self.session.as_ref().map(|s| s.id)
    }

    /// Whether the machine asked for the connection to close.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Bytes held for incomplete requests (bounded by the limits), and
    /// behind a request waiting for admission (bounded by
    /// [`Connection::held_limit`]).
    pub fn buffered(&self) -> usize {
        self.framer.buffered() + self.held.len()
    }

    /// Whether a request waits for the driver's [`Input::Admission`].
    pub fn is_admitting(&self) -> bool {
        self.admitting.is_some()
    }

    /// Most bytes held behind a request waiting for admission: as many
    /// whole requests as may wait for their responses. A driver answers
    /// at once and holds one read's worth at most.
    pub fn held_limit(&self) -> usize {
        let l = self.config.limits;
        l.pending_responses
            .saturating_mul(l.header_bytes.saturating_add(l.body_bytes))
    }

    fn feed(&mut self, now: Nanos, mut bytes: &[u8]) {
        if self.admitting.is_some() {
            return self.hold(bytes);
        }
        while !self.closed {
            let taken = self.framer.fill(bytes);
            bytes = &bytes[taken..];
            let mut progressed = taken > 0;
            loop {
                match self.framer.next() {
                    Ok(Some(Frame::Message { .. })) => {
                        let parsed = match Message::<Vec<u8>>::parse(self.framer.message()) {
                            Ok((m, _)) => Ok(m),
                            Err(_) => Err(cseq_of_unparsable(self.framer.message())),
                        };
                        // Digest hashes the URI as the client wrote it,
                        // which the parsed URL may have normalised.
                        let target = match self.guard {
                            Some(_) => request_target(self.framer.message()).map(str::to_owned),
                            None => None,
                        };
                        self.framer.consume();
                        self.on_message(now, parsed, target.as_deref());
                    }
                    Ok(Some(Frame::Interleaved { channel, len })) => {
                        self.counters.interleaved_frames += 1;
                        self.counters.interleaved_bytes += u64::from(len);
                        self.last_activity = now;
                        self.on_interleaved(channel);
                    }
                    Ok(None) => break,
                    Err(e) => self.fail(None, e),
                }
                progressed = true;
                if self.closed {
                    return;
                }
                if self.admitting.is_some() {
                    // What came behind waits for the admission.
                    return self.hold(bytes);
                }
            }
            if bytes.is_empty() {
                return;
            }
            if !progressed {
                // Cannot happen with consistent limits; never spin.
                let limit = self.config.limits.header_bytes;
                self.fail(None, Error::HeaderTooLarge { limit });
            }
        }
    }

    /// Keeps bytes read behind a request that waits for admission.
    fn hold(&mut self, bytes: &[u8]) {
        if self.held.len().saturating_add(bytes.len()) > self.held_limit() {
            let limit = self.config.limits.pending_responses;
            return self.fail(None, Error::TooManyPending { limit });
        }
        self.held.extend_from_slice(bytes);
    }

    /// The driver's answer to [`Event::Admit`]: the waiting request gets
    /// its response, then the requests held behind it are read.
    fn admission(&mut self, now: Nanos, verdict: Admission) {
        let Some(Admitting { cseq, asked }) = self.admitting.take() else {
            return;
        };
        let method = asked.method();
        let answered = match (verdict, asked) {
            (Admission::Refused(r), _) => Err((Error::NotAdmitted(r.kind), r.reason)),
            (
                Admission::Admitted,
                Asked::Setup {
                    target,
                    track,
                    transport,
                },
            ) => Ok(self.finish_setup(target, track, transport)),
            (Admission::Admitted, Asked::Restart { looping }) => self
                .start_play(true, looping)
                .map_err(|e| (e, String::new())),
        };
        match answered {
            Ok(reply) => self.answer(cseq, reply),
            // A refusal's reason is the driver's, in the response's body.
            Err((e, reason)) => {
                let extra = match e {
                    Error::NotAdmitted(RefusalKind::Busy { retry_after_secs }) => {
                        vec![(headers::RETRY_AFTER, retry_after_secs.to_string())]
                    }
                    _ => Vec::new(),
                };
                self.refuse_saying(Some(cseq), Some(method), e, extra, reason);
            }
        }
        let held = std::mem::take(&mut self.held);
        self.feed(now, &held);
    }

    /// Hands on a kept interleaved frame that came on the RTCP channel of
    /// one of the session's tracks (the client's receiver reports);
    /// frames on other channels are only counted.
    fn on_interleaved(&mut self, channel: u8) {
        let Some(s) = &self.session else {
            return;
        };
        let track = s.tracks.iter().find_map(|(t, tr)| match *tr {
            Transport::Interleaved { rtcp, .. } if rtcp == channel => Some(*t),
            _ => None,
        });
        if let (Some(track), Some(data)) = (track, self.framer.interleaved_payload()) {
            self.events.push_back(Event::Rtcp {
                session: s.id,
                track,
                data: data.to_vec(),
            });
        }
    }

    /// A framed message, or the CSeq of one rtsp-types could not read.
    fn on_message(
        &mut self,
        now: Nanos,
        message: Result<Message<Vec<u8>>, Option<u32>>,
        target: Option<&str>,
    ) {
        if self.transmits.len() >= self.config.limits.pending_responses {
            let limit = self.config.limits.pending_responses;
            let cseq = match &message {
                Ok(Message::Request(req)) => req.typed_header::<CSeq>().ok().flatten().map(|c| *c),
                Ok(_) => None,
                Err(cseq) => *cseq,
            };
            return self.fail(cseq, Error::TooManyPending { limit });
        }
        match message {
            Ok(Message::Request(req)) => self.on_request(now, &req, target),
            // Clients answer no requests of ours; their responses and data
            // messages carry nothing for the server.
            Ok(Message::Response(_) | Message::Data(_)) => {}
            Err(cseq) => {
                self.last_activity = now;
                self.counters.requests += 1;
                self.refuse(cseq, None, Error::BadUri, Vec::new());
            }
        }
    }

    fn on_request(&mut self, now: Nanos, req: &Req, target: Option<&str>) {
        self.counters.requests += 1;
        self.last_activity = now;
        let method = Method::from(req.method());
        let cseq = match req.typed_header::<CSeq>() {
            Ok(Some(c)) => *c,
            Ok(None) => return self.refuse(None, Some(method), Error::MissingCSeq, Vec::new()),
            Err(_) => {
                let e = Error::InvalidHeader(Header::CSeq);
                return self.refuse(None, Some(method), e, Vec::new());
            }
        };
        if req.version() != Version::V1_0 {
            return self.refuse(
                Some(cseq),
                Some(method),
                Error::UnsupportedVersion,
                Vec::new(),
            );
        }
        // Echoed in `Unsupported`: rtsp-types lets a bare CR or LF into a
        // header value, which must not reach a response line.
        let required = [headers::REQUIRE, headers::PROXY_REQUIRE]
            .iter()
            .find_map(|h| req.header(h))
            .map(|v| {
                v.as_str()
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect::<String>()
            });
        if let Some(options) = required {
            let extra = vec![(headers::UNSUPPORTED, options)];
            return self.refuse(Some(cseq), Some(method), Error::OptionNotSupported, extra);
        }
        if let Err(why) = self.authorize(now, method, req, target) {
            return self.refuse_unauthorized(now, cseq, method, why);
        }
        match self.dispatch(cseq, method, req) {
            Ok(Some(reply)) => self.answer(cseq, reply),
            // Answered once the driver admits it (Input::Admission).
            Ok(None) => {}
            Err(e) => {
                let extra = match e {
                    Error::MethodNotAllowed(_) => vec![(headers::ALLOW, PUBLIC.to_owned())],
                    _ => Vec::new(),
                };
                self.refuse(Some(cseq), Some(method), e, extra);
            }
        }
    }

    /// Whether the request's credentials pass the guard (all do without
    /// one, and OPTIONS always does).
    fn authorize(
        &self,
        now: Nanos,
        method: Method,
        req: &Req,
        target: Option<&str>,
    ) -> Result<(), AuthFailure> {
        let Some(guard) = &self.guard else {
            return Ok(());
        };
        if method == Method::Options {
            return Ok(());
        }
        let written: &str = req.method().into();
        let authorization = req.header(&headers::AUTHORIZATION).map(|v| v.as_str());
        guard.check(now, written, target.unwrap_or(""), authorization)
    }

    /// `401` with the guard's challenges, one `WWW-Authenticate` line
    /// each (clients read them line by line; rtsp-types holds one value
    /// per header name, so the lines are added to its output).
    fn refuse_unauthorized(&mut self, now: Nanos, cseq: u32, method: Method, why: AuthFailure) {
        self.refuse(
            Some(cseq),
            Some(method),
            Error::Unauthorized(why),
            Vec::new(),
        );
        let Some(guard) = &self.guard else {
            return;
        };
        let challenges = guard.challenges(now, why == AuthFailure::StaleNonce);
        if let Some(response) = self.transmits.back_mut() {
            add_header_lines(response, "WWW-Authenticate", &challenges);
        }
    }

    /// The request's answer, or `None` for one that waits for admission.
    fn dispatch(&mut self, cseq: u32, method: Method, req: &Req) -> Result<Option<Reply>, Error> {
        match method {
            Method::Options => self.options(req).map(Some),
            Method::Describe => self.describe(req).map(Some),
            Method::Setup => self.setup(cseq, req),
            Method::Play => self.play(cseq, req),
            Method::Pause => self.pause(req).map(Some),
            Method::Teardown => self.teardown(req).map(Some),
            Method::GetParameter => self.get_parameter(req).map(Some),
            Method::SetParameter
            | Method::Announce
            | Method::Record
            | Method::Redirect
            | Method::PlayNotify => Err(Error::MethodNotAllowed(method)),
            Method::Extension => Err(Error::NotImplemented),
        }
    }

    fn options(&mut self, req: &Req) -> Result<Reply, Error> {
        let reply = Reply::default().header(headers::PUBLIC, PUBLIC);
        Ok(match self.named_session(req)? {
            true => reply.with_session(),
            false => reply,
        })
    }

    fn get_parameter(&mut self, req: &Req) -> Result<Reply, Error> {
        // No parameters to report: an empty 200 is the keep-alive answer.
        Ok(match self.named_session(req)? {
            true => Reply::default().with_session(),
            false => Reply::default(),
        })
    }

    fn describe(&mut self, req: &Req) -> Result<Reply, Error> {
        let url = req.request_uri().ok_or(Error::BadUri)?;
        let target = Target::parse(url)?;
        self.catalog.stream(&target.path).ok_or(Error::NotFound)?;
        if let Some(accept) = req.header(&headers::ACCEPT) {
            let a = accept.as_str().to_ascii_lowercase();
            if !(a.contains("application/sdp") || a.contains("*/*") || a.contains("application/*"))
            {
                return Err(Error::NotAcceptable);
            }
        }
        let sdp = self.catalog.sdp(&target.path).ok_or(Error::NotFound)?;
        self.described = Some((target.path, target.looping));
        Ok(Reply {
            body: Some(("application/sdp", sdp.into_bytes())),
            ..Reply::default()
        }
        .header(headers::CONTENT_BASE, content_base(url)))
    }

    /// Checks a SETUP and asks the driver to admit it.
    fn setup(&mut self, cseq: u32, req: &Req) -> Result<Option<Reply>, Error> {
        let target = Target::parse(req.request_uri().ok_or(Error::BadUri)?)?;
        let existing = self.named_session(req)?;
        if !existing && self.session.is_some() {
            return Err(Error::SessionExists);
        }
        if self.session.as_ref().is_some_and(|s| s.path != target.path) {
            return Err(Error::OtherStream);
        }
        let stream = self.catalog.stream(&target.path).ok_or(Error::NotFound)?;
        // A SETUP of the stream URL itself (VLC's SAT>IP client does that)
        // means its first track.
        let track = target.track.unwrap_or(0);
        if track >= stream.tracks {
            let tracks = stream.tracks;
            return Err(Error::TrackNotFound { track, tracks });
        }
        let offers = req
            .header(&headers::TRANSPORT)
            .ok_or(Error::UnsupportedTransport)?;
        let taken = self.channels_in_use(track);
        let ctx = Context {
            catalog: &self.catalog,
            client: self.client,
            stream: &stream,
            track,
            taken: &taken,
        };
        let chosen = transport::choose(offers.as_str(), &ctx)?;
        self.ask_admission(
            cseq,
            target.path.clone(),
            chosen,
            Asked::Setup {
                target,
                track,
                transport: chosen,
            },
        );
        Ok(None)
    }

    /// Holds request `cseq` until the driver admits a stream of `path`
    /// over `transport` for what it `asked`.
    fn ask_admission(&mut self, cseq: u32, path: String, transport: Transport, asked: Asked) {
        self.events.push_back(Event::Admit {
            path,
            transport,
            restart: matches!(asked, Asked::Restart { .. }),
        });
        self.admitting = Some(Admitting { cseq, asked });
    }

    /// An admitted SETUP: the session records it, and the answer names
    /// the transport, the server's ports and the SSRC.
    fn finish_setup(&mut self, target: Target, track: u16, chosen: Transport) -> Reply {
        let server_port = match chosen {
            Transport::Udp { .. } => self.catalog.server_port(&chosen),
            _ => None,
        };
        let ssrc = self.catalog.ssrc(&chosen);
        self.commit_setup(target, track, chosen);
        Reply {
            transport: Some(transport::reply(
                &chosen,
                server_port.or(self.config.server_port),
                ssrc,
            )),
            ..Reply::default()
        }
        .with_session()
    }

    /// Interleaved channels of the session's tracks other than `track`.
    fn channels_in_use(&self, track: u16) -> Vec<u8> {
        let tracks = self.session.iter().flat_map(|s| s.tracks.iter());
        tracks
            .filter(|(t, _)| *t != track)
            .filter_map(|(_, t)| match *t {
                Transport::Interleaved { rtp, rtcp } => Some([rtp, rtcp]),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Records an accepted SETUP in the session (making one if needed)
    /// and tells the driver.
    fn commit_setup(&mut self, target: Target, track: u16, transport: Transport) {
        if self.session.is_none() {
            let described_loop = self
                .described
                .as_ref()
                .is_some_and(|(p, l)| *l && *p == target.path);
            let id = SessionId(self.seed.wrapping_add(self.sessions_made));
            self.sessions_made += 1;
            self.session = Some(Session {
                id,
                path: target.path.clone(),
                state: State::Ready,
                played: false,
                looping: target.looping || described_loop,
                tracks: Vec::new(),
            });
        }
        let Some(s) = self.session.as_mut() else {
            return;
        };
        s.looping |= target.looping;
        match s.tracks.iter_mut().find(|(t, _)| *t == track) {
            Some(entry) => entry.1 = transport,
            None => s.tracks.push((track, transport)),
        }
        self.events.push_back(Event::Setup {
            session: s.id,
            path: s.path.clone(),
            track,
            transport,
        });
    }

    fn play(&mut self, cseq: u32, req: &Req) -> Result<Option<Reply>, Error> {
        self.require_session(req, Method::Play)?;
        let from_start = match req.typed_header::<Range>() {
            Ok(range) => start_of(range)?,
            Err(_) => return Err(Error::InvalidHeader(Header::Range)),
        };
        let looping = req
            .request_uri()
            .and_then(|u| Target::parse(u).ok())
            .is_some_and(|t| t.looping);
        let Some(s) = self.session.as_ref() else {
            return Err(Error::SessionNotFound);
        };
        // A PLAY from the start of a session that played already starts
        // a new stream: the driver admits it again (453 if the budget is
        // gone), and may carry the old stream's reservation over.
        if s.played
            && from_start
            && let Some(&(_, transport)) = s.tracks.first()
        {
            let path = s.path.clone();
            self.ask_admission(cseq, path, transport, Asked::Restart { looping });
            return Ok(None);
        }
        self.start_play(from_start, looping).map(Some)
    }

    /// Plays the session: from the start, or resumed from a pause.
    fn start_play(&mut self, from_start: bool, looping: bool) -> Result<Reply, Error> {
        let Some(s) = self.session.as_mut() else {
            return Err(Error::SessionNotFound);
        };
        s.looping |= looping;
        let start = if !s.played || from_start {
            Start::Beginning
        } else {
            Start::Resume
        };
        // PLAY while playing only matters when it restarts the stream.
        if s.state == State::Ready || from_start {
            s.state = State::Playing;
            s.played = true;
            self.events.push_back(Event::Play {
                session: s.id,
                path: s.path.clone(),
                start,
                looping: s.looping,
            });
        }
        let reply = Reply::default().with_session();
        Ok(match start {
            Start::Beginning => reply.header(headers::RANGE, "npt=0.000-"),
            Start::Resume => reply,
        })
    }

    fn pause(&mut self, req: &Req) -> Result<Reply, Error> {
        self.require_session(req, Method::Pause)?;
        let Some(s) = self.session.as_mut() else {
            return Err(Error::SessionNotFound);
        };
        if s.state != State::Playing {
            let state = s.state;
            return Err(Error::MethodNotValidInState {
                method: Method::Pause,
                state,
            });
        }
        s.state = State::Ready;
        self.events.push_back(Event::Pause { session: s.id });
        Ok(Reply::default().with_session())
    }

    fn teardown(&mut self, req: &Req) -> Result<Reply, Error> {
        // TEARDOWN in Init stays in Init (RFC 2326 A.1).
        if self.session.is_none() && req.header(&headers::SESSION).is_none() {
            return Ok(Reply::default());
        }
        self.require_session(req, Method::Teardown)?;
        self.end_session(SessionEnd::Teardown);
        Ok(Reply::default())
    }

    /// Whether the request names this connection's session: `Ok(false)`
    /// without a `Session` header, an error if it names another.
    fn named_session(&self, req: &Req) -> Result<bool, Error> {
        let Some(value) = req.header(&headers::SESSION) else {
            return Ok(false);
        };
        let id = value.as_str().split(';').next().unwrap_or("").trim();
        match &self.session {
            Some(s) if id.eq_ignore_ascii_case(&s.id.to_string()) => Ok(true),
            _ => Err(Error::SessionNotFound),
        }
    }

    /// PLAY, PAUSE and TEARDOWN need the session named.
    fn require_session(&self, req: &Req, method: Method) -> Result<(), Error> {
        match self.named_session(req)? {
            true => Ok(()),
            false if self.session.is_none() => Err(Error::MethodNotValidInState {
                method,
                state: State::Init,
            }),
            false => Err(Error::SessionNotFound),
        }
    }

    fn end_session(&mut self, reason: SessionEnd) {
        if let Some(s) = self.session.take() {
            self.events.push_back(Event::SessionClosed {
                session: s.id,
                reason,
            });
        }
    }

    fn close(&mut self, reason: CloseReason) {
        if !self.closed {
            self.closed = true;
            self.events.push_back(Event::Closed(reason));
        }
    }

    /// A refusal after which the stream cannot go on.
    fn fail(&mut self, cseq: Option<u32>, e: Error) {
        self.counters.requests += 1;
        self.refuse(cseq, None, e, Vec::new());
        self.close(CloseReason::Protocol(e));
    }

    fn answer(&mut self, cseq: u32, reply: Reply) {
        let mut b = Response::builder(Version::V1_0, StatusCode::Ok)
            .header(headers::CSEQ, cseq.to_string())
            .header(headers::SERVER, "nagare");
        for (name, value) in reply.headers {
            b = b.header(name, value);
        }
        if let (true, Some(s)) = (reply.session, &self.session) {
            let secs = (self.config.session_timeout.as_nanos() / 1_000_000_000).max(1);
            b = b.typed_header(&headers::Session::with_timeout(s.id.to_string(), secs));
        }
        if let Some(t) = &reply.transport {
            b = b.typed_header(t);
        }
        let response = match reply.body {
            Some((content_type, body)) => b.header(headers::CONTENT_TYPE, content_type).build(body),
            None => b.build(Vec::new()),
        };
        self.push(&response);
    }

    fn refuse(
        &mut self,
        cseq: Option<u32>,
        method: Option<Method>,
        e: Error,
        extra: Vec<(HeaderName, String)>,
    ) {
        self.refuse_saying(cseq, method, e, extra, String::new());
    }

    /// Refuses with `reason` as the response's `text/plain` body (none
    /// when empty): the driver's words on why it refused a stream.
    fn refuse_saying(
        &mut self,
        cseq: Option<u32>,
        method: Option<Method>,
        e: Error,
        extra: Vec<(HeaderName, String)>,
        reason: String,
    ) {
        self.counters.refused += 1;
        let mut b = Response::builder(Version::V1_0, StatusCode::from(e.status()));
        if let Some(reason) = e.reason() {
            b = b.reason_phrase(reason);
        }
        if let Some(c) = cseq {
            b = b.header(headers::CSEQ, c.to_string());
        }
        b = b.header(headers::SERVER, "nagare");
        for (name, value) in extra {
            b = b.header(name, value);
        }
        let response = if reason.is_empty() {
            b.build(Vec::new())
        } else {
            b.header(headers::CONTENT_TYPE, "text/plain; charset=utf-8")
                .build(format!("{reason}\n").into_bytes())
        };
        self.push(&response);
        self.events.push_back(Event::Refused { method, error: e });
    }

    fn push(&mut self, response: &Response<Vec<u8>>) {
        let mut out = Vec::with_capacity(256);
        // Writing into a Vec cannot fail.
        if response.write(&mut out).is_ok() {
            self.transmits.push_back(out);
        }
    }
}

/// Whether PLAY's `Range` asks for the start: `None` or `npt=now-` keep
/// the position, `npt=0-` (any spelling of zero) restarts, anything else
/// is a seek nagare does not do.
fn start_of(range: Option<Range>) -> Result<bool, Error> {
    let from = match range {
        None => return Ok(false),
        Some(Range::Npt(NptRange::From(t) | NptRange::FromTo(t, _))) => t,
        Some(_) => return Err(Error::InvalidHeader(Header::Range)),
    };
    let nanos = match from {
        NptTime::Now => return Ok(false),
        NptTime::Seconds(s, ns) => u128::from(s) * 1_000_000_000 + u128::from(ns.unwrap_or(0)),
        NptTime::Hms(h, m, s, ns) => {
            let secs = u128::from(h) * 3600 + u128::from(m) * 60 + u128::from(s);
            secs * 1_000_000_000 + u128::from(ns.unwrap_or(0))
        }
    };
    if nanos == 0 {
        Ok(true)
    } else {
        let start_ms = u64::try_from(nanos / 1_000_000).unwrap_or(u64::MAX);
        Err(Error::SeekUnsupported { start_ms })
    }
}

/// The request URI of a message as written: the second word of its
/// first line.
fn request_target(message: &[u8]) -> Option<&str> {
    let line = message.split(|&b| b == b'\r' || b == b'\n').next()?;
    let uri = line.split(|&b| b == b' ').nth(1)?;
    std::str::from_utf8(uri).ok()
}

/// Adds `name: value` lines to a serialised response, after its other
/// headers. `values` are the machine's own, free of line breaks.
fn add_header_lines(response: &mut Vec<u8>, name: &str, values: &[String]) {
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let mut lines = Vec::new();
    for v in values {
        lines.extend_from_slice(b"\r\n");
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(v.as_bytes());
    }
    response.splice(end..end, lines);
}

/// The CSeq of a message rtsp-types refused only for its URI, so that the
/// 400 still reaches the right request.
fn cseq_of_unparsable(message: &[u8]) -> Option<u32> {
    let probe = with_star_uri(message)?;
    match Message::<Vec<u8>>::parse(&probe) {
        Ok((Message::Request(req), _)) => req.typed_header::<CSeq>().ok()?.map(|c| *c),
        _ => None,
    }
}
