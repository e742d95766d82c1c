//! What one RTSP connection's machine events do to the server: the
//! catalog the machine asks, and the session's stream (set up, played,
//! paused, stopped). The media itself is paced by the pacing threads,
//! never here; an interleaved stream's frames come back through the
//! connection's [`TcpLink`] queue.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use nagare_api::serve::{Encapsulation, StreamKind};
use nagare_proto::rtsp::{self, Event, SessionEnd, Start, StreamInfo, Transport};
use tokio::sync::mpsc;

use crate::cmd::serve::hub::reservation::Reservation;
use crate::cmd::serve::hub::server::{Launch, Server};
use crate::cmd::serve::hub::table::StreamId;
use crate::cmd::serve::stream::output::{Output, TcpLink};

/// The catalog the connection machine asks, for one connection: it
/// answers from the server's media and allow-list, and holds the
/// connection's admission reservation between SETUP and PLAY.
pub(super) struct ConnCatalog {
    server: Arc<Server>,
    reservation: Arc<Mutex<Option<Reservation>>>,
}

impl ConnCatalog {
    pub(super) fn new(server: Arc<Server>) -> ConnCatalog {
        ConnCatalog {
            server,
            reservation: Arc::new(Mutex::new(None)),
        }
    }
}

impl rtsp::Catalog for ConnCatalog {
    fn stream(&self, path: &str) -> Option<StreamInfo> {
        let m = self.server.media.get(path)?;
        Some(StreamInfo {
            tracks: 1,
            multicast: m.multicast,
        })
    }

    fn sdp(&self, path: &str) -> Option<String> {
        let id = (crate::clock::epoch_ns() / 1_000_000_000) as u64;
        Some(self.server.media.get(path)?.sdp(id))
    }

    fn destination_allowed(&self, client: IpAddr, destination: IpAddr) -> bool {
        self.server.allow.permits(client, destination)
    }

    fn admit(&self, path: &str, _transport: &Transport) -> bool {
        let mut held = self.reservation.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_some() {
            return true;
        }
        let Some(m) = self.server.media.get(path) else {
            return false;
        };
        match self.server.admit(&m) {
            Ok(r) => {
                *held = Some(r);
                true
            }
            Err(why) => {
                eprintln!("nagare serve: RTSP SETUP of '{path}' refused: {why}");
                false
            }
        }
    }
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
    reservation: Arc<Mutex<Option<Reservation>>>,
    transport: Option<Transport>,
    stream: Option<StreamId>,
    open: bool,
    /// Made at the first interleaved PLAY, kept for the connection.
    pub(super) media: Option<Media>,
}

impl Session {
    /// The session driver of a connection from `peer` whose machine asks
    /// `catalog`.
    pub(super) fn new(server: Arc<Server>, peer: SocketAddr, catalog: &ConnCatalog) -> Session {
        Session {
            server,
            peer,
            reservation: catalog.reservation.clone(),
            transport: None,
            stream: None,
            open: false,
            media: None,
        }
    }

    /// Whether a session is set up.
    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// Acts on one machine event.
    pub(super) fn event(&mut self, e: Event) {
        match e {
            Event::Setup { transport, .. } => {
                if !self.open {
                    self.open = true;
                    self.server
                        .stats
                        .rtsp_sessions
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.transport = Some(transport);
            }
            Event::Play {
                path,
                start,
                looping,
                ..
            } => self.play(&path, start, looping),
            Event::Pause { .. } => {
                if let Some(id) = self.stream {
                    self.server.pacers.pause(id);
                }
            }
            Event::SessionClosed { reason, .. } => {
                if reason == SessionEnd::TimedOut {
                    eprintln!("nagare serve: RTSP session timed out; its stream stops");
                }
                self.close();
            }
            Event::Refused { .. } => {
                self.server
                    .stats
                    .rtsp_refused
                    .fetch_add(1, Ordering::Relaxed);
            }
            Event::Closed(_) => {}
        }
    }

    fn play(&mut self, path: &str, start: Start, looping: bool) {
        if let Some(id) = self.stream {
            if start == Start::Resume {
                self.server.pacers.resume(id);
                return;
            }
            // PLAY from the start again: a new stream replaces the old.
            self.server.stop_stream(id);
            self.stream = None;
        }
        let (Some(media), Some(transport)) = (self.server.media.get(path), self.transport) else {
            return;
        };
        let output = match self.output(transport) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("nagare serve: RTSP PLAY of '{path}': {e:#}");
                return;
            }
        };
        // SETUP reserved the rate; a PLAY from the start after the first
        // reserves again for the new stream.
        let held = self
            .reservation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let reservation = held.or_else(|| self.server.admit(&media).ok());
        let id = self.server.launch(Launch {
            media,
            outputs: vec![output],
            kind: StreamKind::Rtsp,
            priority: 128,
            looping,
            pacing: nagare_api::serve::Pacing::default(),
            encapsulation: Encapsulation::Rtp,
            reservation,
            leg: None,
            tags: Default::default(),
        });
        self.stream = Some(id);
    }

    /// Where the session's media goes.
    fn output(&mut self, transport: Transport) -> anyhow::Result<Output> {
        let settings = &self.server.settings;
        match transport {
            Transport::Interleaved { rtp, .. } => {
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
                })
            }
            Transport::Udp { destination, ports } => Output::udp(
                SocketAddr::new(destination, ports.rtp),
                None,
                None,
                settings.send_buffer,
            ),
            Transport::Multicast(g) => Output::udp(
                SocketAddr::new(g.group, g.ports.rtp),
                settings.multicast_interface.clone(),
                Some(u32::from(g.ttl)),
                settings.send_buffer,
            ),
        }
    }

    /// Ends the session's stream and gives back what it reserved.
    fn close(&mut self) {
        if let Some(id) = self.stream.take() {
            self.server.stop_stream(id);
        }
        self.reservation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
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
        self.close();
    }
}
