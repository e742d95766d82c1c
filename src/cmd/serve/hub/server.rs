//! What every part of the daemon shares: the catalog, the stream table,
//! the pacers and the reader, the access rules and the server-wide
//! counters; and the two verbs that edit the table (launch and stop a
//! stream), used alike by RTSP sessions, the HTTP API and the config file.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use nagare_api::serve::{Encapsulation, StreamInfo, StreamKind, StreamRequest, StreamState};
use nagare_proto::mpegts::DATAGRAM_LEN;
use nagare_proto::serve::idempotency::Replay;
use nagare_proto::serve::{
    AllowList, Cost, Demand, Error as PolicyError, Token, Work, leg as legs,
};
use nagare_proto::video::{self, Packetizer};
use nagare_proto::{BitRate, Nanos, Ssrc};

use crate::cmd::serve::hub::access::Admission;
use crate::cmd::serve::hub::media::{Catalog, Media};
use crate::cmd::serve::hub::reservation::{Held, Reservation, release};
use crate::cmd::serve::hub::table::{Counters, Entry, StreamId, Table, Tags};
use crate::cmd::serve::stream::output::Output;
use crate::cmd::serve::stream::pacer::{Leg, Pacers, START_LEAD, Start};
use crate::cmd::serve::stream::reader::Reader;
use crate::net::udp::{Interface, parse_interface};

/// Server-wide counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// RTSP connections accepted.
    pub rtsp_connections: AtomicU64,
    /// RTSP sessions open now.
    pub rtsp_sessions: AtomicI64,
    /// RTSP requests answered with 4xx/5xx.
    pub rtsp_refused: AtomicU64,
    /// RTSP connections closed to make room under a cap.
    pub rtsp_evicted: AtomicU64,
    /// RTSP connections closed for leaving their bytes unread.
    pub rtsp_stalled: AtomicU64,
    /// TCP readers dropped for a full write queue.
    pub slow_readers: Arc<AtomicU64>,
    /// API requests refused.
    pub api_refused: AtomicU64,
    /// API connections closed to make room under a cap.
    pub api_evicted: AtomicU64,
}

/// Settings fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// RTSP session timeout.
    pub session_timeout: Duration,
    /// Interleaved packets queued per TCP reader before it is dropped.
    pub write_queue: usize,
    /// Interface for multicast sends.
    pub multicast_interface: Option<Interface>,
    /// Socket send buffer per flow.
    pub send_buffer: usize,
    /// RTSP connections served at once; past it the longest idle is
    /// closed.
    pub max_connections: usize,
    /// RTSP connections from one address at once; past it that
    /// address's longest idle is closed.
    pub max_connections_per_address: usize,
}

/// The daemon's shared state.
pub(crate) struct Server {
    /// Paths.
    pub media: Catalog,
    /// Streams.
    pub table: Table,
    /// Pacing threads.
    pub pacers: Pacers,
    /// Read-ahead thread.
    pub reader: Reader,
    /// Rate budget.
    pub admission: Arc<Admission>,
    /// Destinations clients may name.
    pub allow: AllowList,
    /// API token.
    pub token: Token,
    /// The NMOS node (IS-04 resources and their versions).
    pub nmos: crate::cmd::serve::nmos::Node,
    /// Counters.
    pub stats: Stats,
    /// Settings.
    pub settings: Settings,
    /// When it started.
    pub started: Instant,
    /// Set on SIGTERM / Ctrl-C.
    pub stop: &'static AtomicBool,
    /// Held from an idempotency key's lookup to its stream's insertion:
    /// API requests run on a pool of threads, and two requests with one
    /// key must not both find it unused.
    pub keyed: std::sync::Mutex<()>,
}

/// A stream about to be launched.
pub(crate) struct Launch {
    /// What it plays.
    pub media: Arc<Media>,
    /// Where.
    pub outputs: Vec<Output>,
    /// Push or RTSP.
    pub kind: StreamKind,
    /// Read-ahead priority.
    pub priority: u8,
    /// Loop at the end.
    pub looping: bool,
    /// Raw pacing.
    pub pacing: nagare_api::serve::Pacing,
    /// RTP or UDP.
    pub encapsulation: Encapsulation,
    /// Admitted rate.
    pub reservation: Option<Reservation>,
    /// Cluster leg settings.
    pub leg: Option<Leg>,
    /// The SSRC an RTSP session announced (else drawn by the pacer).
    pub ssrc: Option<u32>,
    /// The request's stripe, SSRC and label, for the table.
    pub tags: Tags,
}

impl Server {
    /// Whether the server is stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Reserves `demand`, or says why not.
    pub(crate) fn admit(&self, demand: Demand) -> Result<Reservation, PolicyError> {
        Reservation::take(&self.admission, demand, &self.work())
    }

    /// The pacing and read-ahead threads as admission sees them: their
    /// measured load, and the measured cost of a datagram and of a MiB
    /// read (assumed until measured).
    pub(crate) fn work(&self) -> Work {
        Work {
            pacers: self.pacers.threads(),
            cores: self.pacers.cores(),
            slack: self.pacers.slack(),
            unproven: Demand::default(),
            pacer_load: self.pacers.load(),
            reader_load: self.reader.load(),
            cost: Cost {
                per_packet: self
                    .pacers
                    .cost_per_packet()
                    .unwrap_or(Cost::PRIOR.per_packet),
                per_mib: self.reader.cost_per_mib().unwrap_or(Cost::PRIOR.per_mib),
            },
        }
    }

    /// What a stream of `media` in datagrams of `packet_size` to
    /// `destinations` destinations asks of the server (a cluster leg
    /// sends its stripe only), or why its datagrams cannot be made.
    pub(crate) fn demand(
        &self,
        media: &Media,
        packet_size: usize,
        leg: Option<&Leg>,
        destinations: usize,
    ) -> Result<Demand, video::Error> {
        let copies = destinations.max(1) as f64;
        let read = media.rate().as_f64() / 8.0;
        let (sent_bytes, datagrams) = match media.raw_format() {
            Some((mut format, rate)) => {
                if let Some((stripes, _)) = leg.and_then(|l| l.stripe) {
                    format = stripes.stripe_format();
                }
                let per_frame = Packetizer::new(format, packet_size, Ssrc(0))?
                    .uniform()
                    .packets_per_frame();
                let fps = rate.as_f64();
                (format.frame_bytes() as f64 * fps, per_frame as f64 * fps)
            }
            None => (read, read / DATAGRAM_LEN as f64),
        };
        Ok(Demand {
            rate: BitRate((sent_bytes * 8.0 * copies) as u64),
            packets_per_s: datagrams * copies,
            read_bytes_per_s: read,
            ring: self.reader.ring_bytes(media),
        })
    }

    /// Puts a stream in the table and starts reading and pacing it.
    pub(crate) fn launch(&self, l: Launch) -> StreamId {
        let counters = Arc::new(Counters::default());
        let reservation: Held = Arc::new(std::sync::Mutex::new(l.reservation));
        let entry = Entry {
            kind: l.kind,
            source: l.media.name.clone(),
            destinations: l.outputs.iter().map(Output::label).collect(),
            priority: l.priority,
            rate: l.media.rate(),
            looping: l.looping,
            counters: counters.clone(),
            reservation: reservation.clone(),
            tags: l.tags,
        };
        let id = self.table.insert(entry);
        let first = l.leg.map_or(0, |g| g.first_frame);
        let ring = self.reader.open(
            id,
            l.media.clone(),
            l.looping,
            l.priority,
            counters.clone(),
            first,
        );
        self.pacers.start_flow(Start {
            id,
            media: l.media,
            ring,
            outputs: l.outputs,
            pacing: l.pacing,
            encapsulation: l.encapsulation,
            counters,
            leg: l.leg,
            ssrc: l.ssrc,
            reservation,
        });
        id
    }

    /// Stops stream `id` and takes it out of the table; returns its last
    /// view.
    pub(crate) fn stop_stream(&self, id: StreamId) -> Option<StreamInfo> {
        self.pacers.stop_flow(id);
        self.reader.close(id);
        let e = self.table.remove(id)?;
        release(&e.reservation);
        if matches!(
            e.counters.state(),
            StreamState::Playing | StreamState::Paused | StreamState::Ready
        ) {
            e.counters.set_state(StreamState::Finished);
        }
        Some(e.info(id))
    }

    /// Validates a push request from `client` and launches it; a request
    /// whose idempotency key names a stream the same request made answers
    /// with that stream instead.
    pub(crate) fn push(&self, req: &StreamRequest, client: IpAddr) -> Result<Pushed, Refusal> {
        let Some(key) = &req.idempotency_key else {
            return self.push_new(req, client).map(Pushed::Started);
        };
        let _one_at_a_time = self.keyed.lock().unwrap_or_else(|e| e.into_inner());
        match self.table.replay(key, req) {
            Ok(Replay::Existing(id)) => return Ok(Pushed::Replayed(id)),
            Ok(Replay::New) => {}
            Err(e @ PolicyError::KeyReused { .. }) => return Err(Refusal::Conflict(e)),
            Err(e) => return Err(Refusal::Leg(e)),
        }
        self.push_new(req, client).map(Pushed::Started)
    }

    fn push_new(&self, req: &StreamRequest, client: IpAddr) -> Result<StreamId, Refusal> {
        let media = self.media.get(&req.source).ok_or_else(|| {
            Refusal::NotFound(format!(
                "no media '{}': GET /v3/paths/list lists the paths",
                req.source
            ))
        })?;
        media
            .check_readable()
            .map_err(|e| Refusal::Unplayable(format!("the stream cannot start: {e}")))?;
        if req.encapsulation == Encapsulation::Udp && !media.is_ts() {
            return Err(Refusal::Bad(
                "encapsulation \"udp\" is for MPEG-TS sources; raw video goes over RTP".into(),
            ));
        }
        let dests = self.destinations(req, client)?;
        let interface = match &req.interface {
            Some(i) => Some(parse_interface(i).map_err(|e| Refusal::Bad(format!("{e:#}")))?),
            None => self.settings.multicast_interface.clone(),
        };
        let mut outputs = Vec::with_capacity(dests.len());
        for d in dests {
            if d.ip().is_multicast() && interface.is_none() {
                return Err(Refusal::Bad(format!(
                    "multicast destination {d} needs an interface: give \"interface\" or start \
                     the server with --multicast-interface"
                )));
            }
            let o = Output::udp(d, interface.clone(), req.ttl, self.settings.send_buffer)
                .map_err(|e| Refusal::Bad(format!("{e:#}")))?;
            outputs.push(o);
        }
        let leg = self.leg(req, &media).map_err(Refusal::Leg)?;
        let demand = self
            .demand(&media, req.pacing.packet_size, leg.as_ref(), outputs.len())
            .map_err(|e| {
                Refusal::Bad(format!(
                    "pacing.packet_size {} cannot carry '{}': {e}",
                    req.pacing.packet_size, req.source
                ))
            })?;
        let reservation = self.admit(demand).map_err(Refusal::Admission)?;
        Ok(self.launch(Launch {
            media,
            outputs,
            kind: StreamKind::Push,
            priority: req.priority,
            looping: req.looping,
            pacing: req.pacing,
            encapsulation: req.encapsulation,
            reservation: Some(reservation),
            leg,
            ssrc: None,
            tags: Tags {
                stripe: req.stripe,
                ssrc: req.ssrc,
                label: req.label.clone(),
                keyed: req
                    .idempotency_key
                    .clone()
                    .map(|k| (k, Arc::new(req.clone()))),
            },
        }))
    }

    /// The cluster leg a request asks for (stripe, SSRC or start frame),
    /// checked against its media, or why not.
    fn leg(&self, req: &StreamRequest, media: &Media) -> Result<Option<Leg>, PolicyError> {
        if req.stripe.is_none() && req.ssrc.is_none() && req.epoch_frame.is_none() {
            return Ok(None);
        }
        let Some((format, rate)) = media.raw_format() else {
            return Err(PolicyError::LegOnTs {
                path: req.source.clone(),
            });
        };
        let stripe = req
            .stripe
            .map(|s| legs::stripe(format, s.split, s.count, s.index))
            .transpose()?;
        let now = Nanos(u64::try_from(crate::clock::epoch_ns()).unwrap_or(u64::MAX));
        let first_frame = legs::first_frame(rate, req.epoch_frame, now, Nanos::from(START_LEAD))?;
        Ok(Some(Leg {
            stripe,
            ssrc: req.ssrc,
            first_frame,
        }))
    }

    /// The request's destinations, each allowed for `client`.
    fn destinations(
        &self,
        req: &StreamRequest,
        client: IpAddr,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        if req.destinations.is_empty() || req.destinations.len() > 64 {
            return Err(Refusal::Bad(format!(
                "{} destinations: give 1 to 64 HOST:PORT",
                req.destinations.len()
            )));
        }
        let mut out = Vec::with_capacity(req.destinations.len());
        for text in &req.destinations {
            let d = parse_destination(text).map_err(|e| Refusal::Bad(format!("{e:#}")))?;
            self.allow
                .check(client, d.ip())
                .map_err(Refusal::Forbidden)?;
            out.push(d);
        }
        Ok(out)
    }

    /// Stops every stream (SIGTERM) and returns their final views.
    pub(crate) fn stop_all(&self) -> Vec<StreamInfo> {
        let ids: Vec<StreamId> = self.table.entries().into_iter().map(|(id, _)| id).collect();
        ids.into_iter()
            .filter_map(|id| self.stop_stream(id))
            .collect()
    }
}

/// What a push request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Started stream `id` (`201`).
    Started(StreamId),
    /// Its idempotency key named stream `id`, made by the same request
    /// (`200`).
    Replayed(StreamId),
}

impl Pushed {
    /// The stream.
    pub(crate) fn id(self) -> StreamId {
        match self {
            Pushed::Started(id) | Pushed::Replayed(id) => id,
        }
    }
}

/// Why a push request was refused (mapped to an HTTP status).
#[derive(Debug)]
pub(crate) enum Refusal {
    /// 400: a request the driver could not read.
    Bad(String),
    /// 400: a leg the policy refuses.
    Leg(PolicyError),
    /// 403: a destination outside the allow-list.
    Forbidden(PolicyError),
    /// 404.
    NotFound(String),
    /// 409: an idempotency key another request made a stream with.
    Conflict(PolicyError),
    /// 503: over the rate, memory or load budget.
    Admission(PolicyError),
    /// 500: the path's file is gone or shorter than listed.
    Unplayable(String),
}

impl Refusal {
    /// Status and message.
    pub(crate) fn parts(&self) -> (u16, String) {
        match self {
            Refusal::Bad(m) => (400, m.clone()),
            Refusal::Leg(e) => (400, e.to_string()),
            Refusal::Forbidden(e) => (403, e.to_string()),
            Refusal::NotFound(m) => (404, m.clone()),
            Refusal::Conflict(e) => (409, e.to_string()),
            Refusal::Admission(e) => (503, e.to_string()),
            Refusal::Unplayable(m) => (500, m.clone()),
        }
    }

    /// Seconds a client should wait before asking again, for a refusal
    /// that time alone lifts (the HTTP `Retry-After` header).
    pub(crate) fn retry_after(&self) -> Option<u64> {
        match self {
            Refusal::Admission(e) => e.retry_after().map(|t| t.as_secs_f64().ceil() as u64),
            _ => None,
        }
    }
}

/// `ADDR:PORT` with a literal address (no name lookups from requests).
fn parse_destination(text: &str) -> Result<SocketAddr> {
    let a: SocketAddr = text.trim().parse().map_err(|_| {
        anyhow!("destination '{text}' is not ADDR:PORT such as 127.0.0.1:5000 or [::1]:5000")
    })?;
    if a.port() == 0 {
        bail!("destination '{text}' has port 0: give the receiver's port");
    }
    if a.ip().is_unspecified() {
        bail!("destination '{text}' is the unspecified address: give the receiver's address");
    }
    Ok(a)
}

/// Says that stream `info` stopped, `why`, with its last counters.
pub(crate) fn stopped(info: &StreamInfo, why: &str) {
    let c = &info.counters;
    tracing::info!(
        stream = info.id,
        kind = ?info.kind,
        source = %info.source,
        state = ?info.state,
        packets = c.packets,
        bytes = c.bytes,
        late = c.late,
        underruns = c.underruns,
        send_errors = c.send_errors,
        reason = why,
        "stream {} ({:?}) of '{}' stopped: {why}; sent {} packets, {} bytes",
        info.id,
        info.kind,
        info.source,
        c.packets,
        c.bytes
    );
}
