//! The RTSP listener: one thread per client connection drives
//! nagare-proto's `rtsp::Connection` machine (it reads, the machine
//! decides) and a writer thread drains the connection's bounded queue,
//! which carries both responses and interleaved media. The media itself
//! is paced by the pacing threads, never here.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, bounded};
use nagare_api::serve::{Encapsulation, StreamKind};
use nagare_proto::Nanos;
use nagare_proto::rtsp::{
    self, Connection, Event, Input, SessionEnd, Start, StreamInfo, Transport,
};

use crate::clock::Origin;
use crate::cmd::serve::hub::access::Place;
use crate::cmd::serve::hub::reservation::Reservation;
use crate::cmd::serve::hub::server::{Launch, Server};
use crate::cmd::serve::hub::table::StreamId;
use crate::cmd::serve::stream::output::{Output, TcpLink};

/// The catalog the connection machine asks, for one connection: it
/// answers from the server's media and allow-list, and holds the
/// connection's admission reservation between SETUP and PLAY.
struct ConnCatalog {
    server: Arc<Server>,
    admitted: Arc<Mutex<Admitted>>,
}

/// What a connection's session holds of the budget, shared by the
/// catalog (which admits, inside the machine's SETUP and PLAY) and the
/// driver (which launches and stops the stream).
#[derive(Default)]
struct Admitted {
    /// Reserved at SETUP or a restarting PLAY, not yet given to a stream.
    reservation: Option<Reservation>,
    /// The session's running stream.
    stream: Option<StreamId>,
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
        let mut held = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        if held.reservation.is_some() {
            return true;
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
            return true;
        }
        let Some(m) = self.server.media.get(path) else {
            return false;
        };
        let packet_size = nagare_api::serve::Pacing::default().packet_size;
        let demand = match self.server.demand(&m, packet_size, None, 1) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("nagare serve: RTSP SETUP of '{path}' refused: {e}");
                return false;
            }
        };
        match self.server.admit(demand) {
            Ok(r) => {
                held.reservation = Some(r);
                true
            }
            Err(why) => {
                eprintln!("nagare serve: RTSP SETUP of '{path}' refused: {why}");
                false
            }
        }
    }
}

/// Accepts connections until the server stops.
pub(crate) fn listen(server: Arc<Server>, listener: TcpListener) {
    if listener.set_nonblocking(true).is_err() {
        eprintln!("nagare serve: cannot poll the RTSP listener; RTSP is off");
        return;
    }
    let places = Place::caps(
        server.settings.max_connections,
        server.settings.max_connections_per_address,
    );
    while !server.stopping() {
        match listener.accept() {
            Ok((stream, peer)) => {
                server
                    .stats
                    .rtsp_connections
                    .fetch_add(1, Ordering::Relaxed);
                // Two threads per connection: their number is capped, in
                // all and per address, so a flood of connections cannot
                // exhaust the host and one address cannot shut every other
                // client out by holding connections open.
                let Some(place) = Place::take(&places, peer.ip()) else {
                    server.stats.rtsp_refused.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                };
                let s = server.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("serve-rtsp".into())
                        .spawn(move || {
                            connection(s, stream, peer);
                            drop(place);
                        });
                if let Err(e) = spawned {
                    eprintln!("nagare serve: cannot start a thread for {peer}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                eprintln!("nagare serve: RTSP accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Writes queued buffers to the socket until the queue closes or the
/// socket breaks.
fn writer(mut stream: TcpStream, queue: Receiver<Vec<u8>>) {
    for buf in queue.iter() {
        if stream.write_all(&buf).is_err() {
            break;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// The one session of a connection, as the driver tracks it.
#[derive(Default)]
struct Session {
    transport: Option<Transport>,
    open: bool,
}

/// One client connection, from accept to close.
fn connection(server: Arc<Server>, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let (Ok(write_half), Ok(shut_half)) = (stream.try_clone(), stream.try_clone()) else {
        return;
    };
    let (tx, rx) = bounded(server.settings.write_queue.max(16));
    let link = Arc::new(TcpLink::new(
        tx,
        shut_half,
        server.stats.slow_readers.clone(),
    ));
    let writer_thread = std::thread::Builder::new()
        .name("serve-rtsp-write".into())
        .spawn(move || writer(write_half, rx));
    let origin = Origin::now();
    let admitted = Arc::new(Mutex::new(Admitted::default()));
    let config = rtsp::Config {
        session_timeout: Nanos::from(server.settings.session_timeout),
        idle_timeout: Nanos::from(server.settings.session_timeout),
        ..rtsp::Config::default()
    };
    let catalog = ConnCatalog {
        server: server.clone(),
        admitted: admitted.clone(),
    };
    let seed =
        (u64::from(getrandom::u32().unwrap_or(1)) << 32) | u64::from(getrandom::u32().unwrap_or(7));
    let mut machine = Connection::new(Nanos::ZERO, config, catalog, peer.ip(), seed);
    let mut driver = Driver {
        server: &server,
        link: &link,
        admitted: &admitted,
        session: Session::default(),
    };
    read_loop(&mut driver, &mut machine, stream, &origin);
    driver.close_session();
    drop(link);
    if let Ok(t) = writer_thread {
        let _ = t.join();
    }
}

/// Feeds the machine what the socket reads (or a timer, or the close)
/// and acts on what it says, until it closes.
fn read_loop(
    d: &mut Driver<'_>,
    machine: &mut Connection<ConnCatalog>,
    mut stream: TcpStream,
    origin: &Origin,
) {
    let mut buf = vec![0u8; 4096];
    loop {
        d.pump(machine, origin.elapsed());
        if machine.is_closed() || d.server.stopping() {
            return;
        }
        let now = origin.elapsed();
        let wait = machine
            .poll_timeout()
            .map_or(Nanos::from_secs(1), |t| t.saturating_sub(now))
            .as_nanos()
            .clamp(1_000_000, 1_000_000_000);
        let _ = stream.set_read_timeout(Some(Duration::from_nanos(wait)));
        let input = match stream.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Some(0),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => None,
        };
        let now = origin.elapsed();
        match input {
            _ if d.link.is_dropped() => machine.handle_input(now, Input::Closed),
            None => machine.handle_input(now, Input::Closed),
            Some(0) => machine.handle_input(now, Input::Timer),
            Some(n) => machine.handle_input(now, Input::Bytes(&buf[..n])),
        }
    }
}

/// What a connection's events do to the server.
struct Driver<'a> {
    server: &'a Arc<Server>,
    link: &'a Arc<TcpLink>,
    admitted: &'a Arc<Mutex<Admitted>>,
    session: Session,
}

impl Driver<'_> {
    /// Queues the machine's responses and acts on its events.
    fn pump(&mut self, machine: &mut Connection<ConnCatalog>, now: Nanos) {
        while let Some(bytes) = machine.poll_transmit(now) {
            if !self.link.respond(bytes) {
                machine.handle_input(now, Input::Closed);
            }
        }
        while let Some(e) = machine.poll_event() {
            self.event(e);
        }
        // Responses the events produced (none today), and a close.
        while let Some(bytes) = machine.poll_transmit(now) {
            let _ = self.link.respond(bytes);
        }
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Setup { transport, .. } => {
                if !self.session.open {
                    self.session.open = true;
                    self.server
                        .stats
                        .rtsp_sessions
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.session.transport = Some(transport);
            }
            Event::Play {
                path,
                start,
                looping,
                ..
            } => self.play(&path, start, looping),
            Event::Pause { .. } => {
                if let Some(id) = self.admitted().stream {
                    self.server.pacers.pause(id);
                }
            }
            Event::SessionClosed { reason, .. } => {
                if reason == SessionEnd::TimedOut {
                    eprintln!("nagare serve: RTSP session timed out; its stream stops");
                }
                self.close_session();
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

    fn admitted(&self) -> std::sync::MutexGuard<'_, Admitted> {
        self.admitted.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn play(&mut self, path: &str, start: Start, looping: bool) {
        let running = self.admitted().stream;
        if let Some(id) = running {
            if start == Start::Resume {
                self.server.pacers.resume(id);
                return;
            }
            // PLAY from the start again: a new stream replaces the old
            // (whose reservation the machine's admission carried over).
            self.server.stop_stream(id);
            self.admitted().stream = None;
        }
        let (Some(media), Some(transport)) = (self.server.media.get(path), self.session.transport)
        else {
            return;
        };
        let output = match transport {
            Transport::Interleaved { rtp, .. } => Ok(Output::Tcp {
                link: self.link.clone(),
                channel: rtp,
            }),
            Transport::Udp { destination, ports } => Output::udp(
                SocketAddr::new(destination, ports.rtp),
                None,
                None,
                self.server.settings.send_buffer,
            ),
            Transport::Multicast(g) => Output::udp(
                SocketAddr::new(g.group, g.ports.rtp),
                self.server.settings.multicast_interface.clone(),
                Some(u32::from(g.ttl)),
                self.server.settings.send_buffer,
            ),
        };
        let output = match output {
            Ok(o) => o,
            Err(e) => {
                eprintln!("nagare serve: RTSP PLAY of '{path}': {e:#}");
                return;
            }
        };
        // SETUP reserved, and so did a PLAY from the start again: no
        // stream runs without its reservation.
        let Some(reservation) = self.admitted().reservation.take() else {
            eprintln!("nagare serve: RTSP PLAY of '{path}' has no admission; not started");
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
            tags: Default::default(),
        });
        self.admitted().stream = Some(id);
    }

    /// Ends the session's stream and gives back what it reserved.
    fn close_session(&mut self) {
        let (stream, reservation) = {
            let mut a = self.admitted();
            (a.stream.take(), a.reservation.take())
        };
        if let Some(id) = stream {
            self.server.stop_stream(id);
        }
        drop(reservation);
        if std::mem::take(&mut self.session.open) {
            self.server
                .stats
                .rtsp_sessions
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.session.transport = None;
    }
}
