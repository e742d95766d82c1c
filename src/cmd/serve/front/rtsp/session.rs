//! What one RTSP connection's machine events do to the server: the
//! catalog the machine asks, the admissions it asks for (answered from
//! the server's budget), and the session's stream (set up, played,
//! paused, stopped). The media itself is paced by the pacing threads,
//! never here; an interleaved stream's frames come back through the
//! connection's [`TcpLink`] queue. The client's RTCP (on the session's
//! RTCP socket, or its interleaved RTCP channel) is read into
//! nagare-proto's `rtcp::Feedback` and shown on the stream.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use nagare_api::serve::{Encapsulation, ReaderReport, StreamKind};
use nagare_proto::Nanos;
use nagare_proto::rtcp::{Feedback, VIDEO_CLOCK_RATE};
use nagare_proto::rtsp::{
    self, Admission, Event, PortPair, Refusal, RefusalKind, SessionEnd, SessionId, Start,
    StreamInfo, Transport,
};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::ports::SessionPorts;
use crate::cmd::serve::hub::reservation::Reservation;
use crate::cmd::serve::hub::server::{Launch, Server};
use crate::cmd::serve::hub::table::StreamId;
use crate::cmd::serve::stream::output::{Output, TcpLink};

/// The catalog the connection machine asks, for one connection: it
/// answers from the server's media and allow-list, and binds a UDP
/// session's port pair and draws its SSRC once the SETUP is admitted.
pub(super) struct ConnCatalog {
    server: Arc<Server>,
    /// The client, named in the log lines.
    peer: SocketAddr,
    admitted: Arc<Mutex<Admitted>>,
}

/// What a connection's session holds, shared by the catalog (its ports
/// and SSRC, asked by the machine's SETUP) and the session (which admits,
/// launches and stops the stream).
#[derive(Default)]
struct Admitted {
    /// Reserved at SETUP or a restarting PLAY, not yet given to a stream.
    reservation: Option<Reservation>,
    /// The session's running stream.
    stream: Option<StreamId>,
    /// The server's ports of a UDP unicast session.
    ports: Option<SessionPorts>,
    /// The SSRC its stream carries, drawn at the first SETUP.
    ssrc: Option<u32>,
}

fn lock(admitted: &Mutex<Admitted>) -> std::sync::MutexGuard<'_, Admitted> {
    admitted.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnCatalog {
    pub(super) fn new(server: Arc<Server>, peer: SocketAddr) -> ConnCatalog {
        ConnCatalog {
            server,
            peer,
            admitted: Arc::new(Mutex::new(Admitted::default())),
        }
    }
}

impl rtsp::Catalog for ConnCatalog {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        let m = self.server.media.get(path)?;
        // A file deleted or cut short since the catalog was made is not
        // offered: the player gets 404 rather than a stream that fails.
        if let Err(why) = m.check_readable() {
            let client = self.peer;
            warn!(%client, path, reason = %why, "RTSP request for '{path}' from {client}: {why}");
            return None;
        }
        Some(StreamInfo {
            tracks: 1,
            multicast: m.multicast,
        })
    }

    /// The machine asks for the SDP when it answers a DESCRIBE.
    fn sdp(&self, path: &str) -> Option<String> {
        let id = (crate::clock::epoch_ns() / 1_000_000_000) as u64;
        let sdp = self.server.media.get(path)?.sdp(id);
        let client = self.peer;
        info!(%client, path, "rtsp DESCRIBE of '{path}' from {client}");
        Some(sdp)
    }

    fn destination_allowed(&self, client: IpAddr, destination: IpAddr) -> bool {
        self.server.allow.permits(client, destination)
    }

    fn ssrc(&self, _transport: &Transport) -> Option<u32> {
        let mut held = lock(&self.admitted);
        Some(
            *held
                .ssrc
                .get_or_insert_with(|| getrandom::u32().unwrap_or(0x6e61_6761)),
        )
    }

    fn server_port(&self, transport: &Transport) -> Option<PortPair> {
        let Transport::Udp { destination, ports } = *transport else {
            return None;
        };
        let client_rtcp = SocketAddr::new(destination, ports.rtcp);
        let mut held = lock(&self.admitted);
        // A SETUP again (new client ports) keeps the server's pair.
        if let Some(p) = &held.ports
            && p.rtcp.connect(client_rtcp).is_ok()
        {
            return Some(p.pair);
        }
        match SessionPorts::bind(client_rtcp) {
            Ok(p) => {
                let pair = p.pair;
                held.ports = Some(p);
                Some(pair)
            }
            Err(e) => {
                // The media still flows, from a port of its own, without
                // RTCP.
                warn!(%destination, "no RTP/RTCP port pair for {destination} ({e}); no RTCP");
                None
            }
        }
    }
}

/// Says why admission refused `client`'s SETUP of `path`.
fn refused(client: SocketAddr, path: &str, why: &dyn std::fmt::Display) {
    warn!(%client, path, reason = %why, "RTSP SETUP of '{path}' from {client} refused: {why}");
}

/// The interleaved media of a connection: the link the pacers write to
/// and the queue's end the connection's task reads.
pub(super) struct Media {
    pub(super) link: Arc<TcpLink>,
    pub(super) frames: mpsc::Receiver<Vec<u8>>,
}

/// The one session of a connection, as the driver tracks it. Dropping
/// it (the connection closed, was evicted, or the server stops) stops
/// its stream and gives back what it reserved.
pub(super) struct Session {
    server: Arc<Server>,
    peer: SocketAddr,
    admitted: Arc<Mutex<Admitted>>,
    transport: Option<Transport>,
    open: bool,
    /// The session's id and path once SETUP made it, for the log lines.
    named: Option<(SessionId, String)>,
    /// Made at the first interleaved PLAY, kept for the connection.
    pub(super) media: Option<Media>,
    /// The session's RTCP socket, as the event loop reads it (UDP).
    pub(super) rtcp_in: Option<tokio::net::UdpSocket>,
    /// What the client's RTCP said.
    feedback: Feedback,
    /// The client's output, as the stream table names it.
    reader: String,
}

impl Session {
    /// The session driver of a connection from `peer` whose machine asks
    /// `catalog`.
    pub(super) fn new(server: Arc<Server>, peer: SocketAddr, catalog: &ConnCatalog) -> Session {
        Session {
            server,
            peer,
            admitted: catalog.admitted.clone(),
            transport: None,
            open: false,
            named: None,
            media: None,
            rtcp_in: None,
            feedback: Feedback::new(),
            reader: String::new(),
        }
    }

    /// Whether a session is set up.
    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// Acts on one machine event that came at `now`; an admission asked
    /// for is answered, for the machine's `Input::Admission`.
    pub(super) fn event(&mut self, e: Event, now: Nanos) -> Option<Admission> {
        match e {
            Event::Admit { path, .. } => return Some(self.admit(&path)),
            Event::Setup {
                session,
                path,
                track,
                transport,
            } => {
                self.said_setup(session, &path, track, transport);
                self.named = Some((session, path));
                if !self.open {
                    self.open = true;
                    self.server
                        .stats
                        .rtsp_sessions
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.transport = Some(transport);
                self.listen_rtcp();
            }
            Event::Rtcp { data, .. } => self.rtcp(now, &data),
            Event::Play {
                session,
                path,
                start,
                looping,
            } => {
                self.play(&path, start, looping);
                self.said_play(session, &path, start, looping);
            }
            Event::Pause { session } => {
                info!(%session, "rtsp session {session}: PAUSE");
                if let Some(id) = lock(&self.admitted).stream {
                    self.server.pacers.pause(id);
                }
            }
            Event::SessionClosed { reason, .. } => {
                let why = match reason {
                    SessionEnd::Teardown => "TEARDOWN",
                    SessionEnd::TimedOut => "timed out (no request or keep-alive); reaped",
                    SessionEnd::ConnectionClosed => "connection closed",
                };
                self.close(why);
            }
            Event::Refused { method, error } => {
                let client = self.peer;
                // Debug: a 401 before the credentials is part of Digest.
                debug!(
                    %client, ?method, %error,
                    "rtsp request from {client} refused: {error}"
                );
                self.server
                    .stats
                    .rtsp_refused
                    .fetch_add(1, Ordering::Relaxed);
            }
            Event::Closed(_) => {}
        }
        None
    }

    /// Answers the machine's `Event::Admit` for a stream of `path`: a
    /// reservation already held (another SETUP of the session), the
    /// running stream's carried over to a PLAY from the start again, or
    /// a new one from the server's budget.
    fn admit(&self, path: &str) -> Admission {
        let mut held = lock(&self.admitted);
        if held.reservation.is_some() {
            return Admission::Admitted;
        }
        // A PLAY from the start again: the new stream takes over the
        // running one's reservation, so the budget is never free between
        // the two for another client to take.
        if let Some(e) = held.stream.and_then(|id| self.server.table.get(id))
            && let Some(r) = e
                .reservation
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        {
            held.reservation = Some(r);
            return Admission::Admitted;
        }
        let Some(m) = self.server.media.get(path) else {
            let why = format!("'{path}' is no longer offered; DESCRIBE the server's paths again");
            refused(self.peer, path, &why);
            return Admission::Refused(Refusal::new(RefusalKind::Gone, why));
        };
        let packet_size = nagare_api::serve::Pacing::default().packet_size;
        let demand = match self.server.demand(&m, packet_size, None, 1) {
            Ok(d) => d,
            Err(e) => {
                let why = format!("'{path}' cannot be sent in {packet_size}-byte packets: {e}");
                refused(self.peer, path, &why);
                return Admission::Refused(Refusal::new(RefusalKind::Unplayable, why));
            }
        };
        match self.server.admit(demand) {
            Ok(r) => {
                held.reservation = Some(r);
                Admission::Admitted
            }
            Err(why) => {
                refused(self.peer, path, &why);
                Admission::Refused(why.rtsp_refusal())
            }
        }
    }

    /// Logs a SETUP: the session, its path, client and transport.
    fn said_setup(&self, session: SessionId, path: &str, track: u16, transport: Transport) {
        let client = self.peer;
        let route = Route(transport);
        info!(
            %session, path, %client, track, transport = %route,
            "rtsp session {session}: SETUP of '{path}' track {track} for {client}, {route}"
        );
    }

    /// Logs a PLAY, with the stream it runs (its id in the API).
    fn said_play(&self, session: SessionId, path: &str, start: Start, looping: bool) {
        let stream = lock(&self.admitted).stream;
        let from = match start {
            Start::Beginning => "from the start",
            Start::Resume => "resumed",
        };
        info!(
            %session, path, stream, looping,
            "rtsp session {session}: PLAY of '{path}' ({from}{}); stream {}",
            if looping { ", looping" } else { "" },
            stream.map_or_else(|| "not started".into(), |id| id.to_string()),
        );
    }

    /// Reads the session's RTCP socket on the event loop, once it has one.
    fn listen_rtcp(&mut self) {
        if self.rtcp_in.is_some() {
            return;
        }
        let sock = match &lock(&self.admitted).ports {
            Some(p) => p.rtcp.try_clone(),
            None => return,
        };
        match sock.and_then(tokio::net::UdpSocket::from_std) {
            Ok(s) => self.rtcp_in = Some(s),
            Err(e) => {
                let client = self.peer;
                warn!(%client, "RTCP from {client} is not read ({e})");
            }
        }
    }

    /// Takes one RTCP compound from the client, and shows what it said on
    /// the session's stream.
    pub(super) fn rtcp(&mut self, now: Nanos, data: &[u8]) {
        self.feedback.handle_input(now, data);
        let Some(latest) = self.feedback.latest() else {
            return;
        };
        let Some(e) = lock(&self.admitted)
            .stream
            .and_then(|id| self.server.table.get(id))
        else {
            return;
        };
        let c = self.feedback.counters();
        let b = latest.block;
        e.counters.set_reader(ReaderReport {
            reader: self.reader.clone(),
            ssrc: latest.reader.0,
            reports: c.reports,
            malformed: c.malformed,
            fraction_lost: b.fraction_lost,
            cumulative_lost: b.cumulative_lost,
            highest_seq: b.highest_seq,
            jitter: b.jitter,
            jitter_us: u64::from(b.jitter) * 1_000_000 / u64::from(VIDEO_CLOCK_RATE),
        });
    }

    fn play(&mut self, path: &str, start: Start, looping: bool) {
        let running = lock(&self.admitted).stream;
        if let Some(id) = running {
            if start == Start::Resume {
                self.server.pacers.resume(id);
                return;
            }
            // PLAY from the start again: a new stream replaces the old
            // (whose reservation the machine's admission carried over).
            self.server.stop_stream(id);
            lock(&self.admitted).stream = None;
        }
        let (Some(media), Some(transport)) = (self.server.media.get(path), self.transport) else {
            return;
        };
        let output = match self.output(transport) {
            Ok(o) => {
                self.reader = o.label();
                o
            }
            Err(e) => {
                warn!(path, client = %self.peer, "RTSP PLAY of '{path}': {e:#}");
                return;
            }
        };
        // SETUP reserved, and so did a PLAY from the start again: no
        // stream runs without its reservation.
        let Some(reservation) = lock(&self.admitted).reservation.take() else {
            warn!(path, client = %self.peer, "RTSP PLAY of '{path}' has no admission; not started");
            return;
        };
        let id = self.server.launch(Launch {
            media,
            outputs: vec![output],
            kind: StreamKind::Rtsp,
            priority: 128,
            looping,
            pacing: nagare_api::serve::Pacing::default(),
            encapsulation: Encapsulation::Rtp,
            reservation: Some(reservation),
            leg: None,
            ssrc: lock(&self.admitted).ssrc,
            tags: Default::default(),
        });
        lock(&self.admitted).stream = Some(id);
    }

    /// Where the session's media goes.
    fn output(&mut self, transport: Transport) -> anyhow::Result<Output> {
        let settings = &self.server.settings;
        match transport {
            Transport::Interleaved { rtp, rtcp } => {
                let media = self.media.get_or_insert_with(|| {
                    let (link, frames) = TcpLink::new(
                        settings.write_queue.max(16),
                        self.peer,
                        self.server.stats.slow_readers.clone(),
                    );
                    Media { link, frames }
                });
                Ok(Output::Tcp {
                    link: media.link.clone(),
                    channel: rtp,
                    rtcp: Some(rtcp),
                })
            }
            Transport::Udp { destination, ports } => {
                let dest = SocketAddr::new(destination, ports.rtp);
                let pair = lock(&self.admitted)
                    .ports
                    .as_ref()
                    .map(|p| Ok::<_, std::io::Error>((p.rtp.try_clone()?, p.rtcp.clone())));
                match pair {
                    Some(Ok((rtp, rtcp))) => {
                        Output::udp_session(rtp, dest, rtcp, settings.send_buffer)
                    }
                    _ => Output::udp(dest, None, None, settings.send_buffer),
                }
            }
            Transport::Multicast(g) => Output::udp(
                SocketAddr::new(g.group, g.ports.rtp),
                settings.multicast_interface.clone(),
                Some(u32::from(g.ttl)),
                settings.send_buffer,
            ),
        }
    }

    /// Ends the session's stream and gives back what it reserved; `why`
    /// it ended goes in the log line.
    fn close(&mut self, why: &str) {
        let (stream, reservation, ports) = {
            let mut a = lock(&self.admitted);
            (a.stream.take(), a.reservation.take(), a.ports.take())
        };
        drop(ports);
        self.rtcp_in = None;
        let last = stream.and_then(|id| self.server.stop_stream(id));
        drop(reservation);
        if let Some((session, path)) = self.named.take() {
            let (packets, bytes) = last.map_or((0, 0), |i| (i.counters.packets, i.counters.bytes));
            let client = self.peer;
            info!(
                %session, %path, %client, stream, packets, bytes, reason = why,
                "rtsp session {session} of '{path}' for {client} ended: {why}; \
                 sent {packets} packets, {bytes} bytes"
            );
        }
        if std::mem::take(&mut self.open) {
            self.server
                .stats
                .rtsp_sessions
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.transport = None;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close("connection dropped (evicted, or the server stops)");
    }
}

/// A transport as the log lines say it.
struct Route(Transport);

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Transport::Udp { destination, ports } => write!(
                f,
                "RTP/UDP to {destination} ports {}-{}",
                ports.rtp, ports.rtcp
            ),
            Transport::Interleaved { rtp, rtcp } => {
                write!(f, "RTP/TCP interleaved channels {rtp}-{rtcp}")
            }
            Transport::Multicast(g) => write!(
                f,
                "RTP multicast to {} ports {}-{} ttl {}",
                g.group, g.ports.rtp, g.ports.rtcp, g.ttl
            ),
        }
    }
}
