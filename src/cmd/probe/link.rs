//! The driver of a [`Session`], the same for client and server: it reads
//! the control connection (on a thread, so UDP reception never waits on
//! TCP) and the test-stream socket, feeds both to the session with the
//! time, writes and sends what the session asks, and runs the paced
//! stream on its own thread when told to. Every decision is the session's.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use nagare_proto::Nanos;
use nagare_proto::probe::{Event, Input, Refusal, Results, SenderReport, Session, Transmit};
use socket2::Socket;

use super::stream::send_stream;
use crate::net::udp;

/// Longest wait for the socket between looks at the control connection
/// and the interrupt flag.
const POLL: Duration = Duration::from_millis(10);
/// Longest a control write may block (a peer that stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How a session ended.
pub(super) enum Outcome {
    /// Client: the test's results.
    Results(Box<Results>),
    /// Server: the test is over.
    Finished,
    /// The server refused the test (the client was told).
    Refused {
        /// Why.
        reason: Refusal,
        /// The server's protocol version.
        version: u32,
        /// The server's explanation.
        message: String,
    },
    /// The peer gave up with this message.
    Aborted(String),
    /// The session failed.
    Failed(nagare_proto::probe::Error),
}

/// What the control reader thread hands over.
enum ControlRead {
    Bytes(Vec<u8>),
    Closed,
    Failed(std::io::Error),
}

/// The sockets, threads and clock of one session.
pub(super) struct Link {
    origin: Instant,
    conn: TcpStream,
    control: Receiver<ControlRead>,
    /// Receiving (and echoing) on a duplicate of the test-stream socket.
    udp: Option<udp::Receiver>,
    /// What the stream thread sends on.
    stream_sock: Option<UdpSocket>,
    drops_base: u32,
    stream: Option<(JoinHandle<Vec<SenderReport>>, Arc<AtomicBool>)>,
    outcome: Option<Outcome>,
}

impl Link {
    /// A link over the control connection `conn` and, unless the session
    /// only talks on `conn`, the test-stream socket `udp`.
    pub(super) fn new(conn: TcpStream, udp: Option<&UdpSocket>) -> Result<Link> {
        Link::with_prefix(conn, udp, Vec::new())
    }

    /// Like [`Link::new`], for a connection whose first `prefix` bytes were
    /// already read (a server reads the hello before it commits a thread
    /// and the test slot to a client).
    pub(super) fn with_prefix(
        conn: TcpStream,
        udp: Option<&UdpSocket>,
        prefix: Vec<u8>,
    ) -> Result<Link> {
        conn.set_nodelay(true)?;
        conn.set_write_timeout(Some(WRITE_TIMEOUT))?;
        // The hello's deadline set a read timeout; the session keeps time
        // from here.
        conn.set_read_timeout(None)?;
        let control = spawn_reader(conn.try_clone()?, prefix);
        let (udp, stream_sock) = match udp {
            Some(sock) => {
                let dup = sock
                    .try_clone()
                    .context("duplicating the test-stream socket for the receiver")?;
                let mut rx = udp::Receiver::from_socket(Socket::from(dup), Vec::new())?;
                rx.enable_timestamps();
                (Some(rx), Some(sock.try_clone()?))
            }
            None => (None, None),
        };
        // The socket may have served earlier tests: count from here.
        let drops_base = udp.as_ref().and_then(|rx| rx.drops_now()).unwrap_or(0);
        Ok(Link {
            origin: Instant::now(),
            conn,
            control,
            udp,
            stream_sock,
            drops_base,
            stream: None,
            outcome: None,
        })
    }

    /// Now, on the session's clock.
    pub(super) fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }

    /// Runs `session` to its end; `interrupt` (Ctrl-C) is handed to it once
    /// set. `on_event` sees every event but the final one, after the link
    /// acted on it (for logging).
    pub(super) fn run(
        &mut self,
        session: &mut Session,
        interrupt: Option<&AtomicBool>,
        mut on_event: impl FnMut(&Event, &Session),
    ) -> Result<Outcome> {
        let mut interrupted = false;
        loop {
            self.flush(session, &mut on_event)?;
            if let Some(o) = self.outcome.take() {
                return Ok(o);
            }
            if !interrupted && interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                interrupted = true;
                session.handle_input(self.now(), Input::Interrupt);
            }
            self.stream_finished(session)?;
            self.read_control(session)?;
            let until = session
                .poll_timeout()
                .map(|t| self.origin + Duration::from(t));
            self.receive(session, until)?;
            session.handle_input(self.now(), Input::Timer);
        }
    }

    /// Acts on every event and sends everything queued, events first (a
    /// server discards stale datagrams before its welcome leaves).
    fn flush(
        &mut self,
        s: &mut Session,
        on_event: &mut impl FnMut(&Event, &Session),
    ) -> Result<()> {
        loop {
            while let Some(e) = s.poll_event() {
                // After acting: the log line of an accepted test comes
                // once stale datagrams are gone.
                if let Some(e) = self.act(e)? {
                    on_event(&e, s);
                }
            }
            match s.poll_transmit(self.now()) {
                Some(Transmit::Control(frame)) => self
                    .conn
                    .write_all(&frame)
                    .context("sending a control message to the peer")?,
                Some(Transmit::Datagram { to, payload }) => {
                    if let Some(rx) = &self.udp {
                        // A lost echo is the path's loss; nothing to retry.
                        let _ = rx.send_to(&payload, Some(to));
                    }
                }
                None => return Ok(()),
            }
        }
    }

    /// Acts on `e`; gives back the events that do not end the session.
    fn act(&mut self, e: Event) -> Result<Option<Event>> {
        let outcome = match e {
            Event::Accepted { .. } => {
                self.discard_stale();
                return Ok(Some(e));
            }
            Event::StartStream(plan) => {
                let sock = self
                    .stream_sock
                    .as_ref()
                    .context("no test-stream socket")?
                    .try_clone()?;
                let stop = Arc::new(AtomicBool::new(false));
                let flag = stop.clone();
                let thread = std::thread::spawn(move || send_stream(&sock, &plan, &flag));
                self.stream = Some((thread, stop));
                return Ok(Some(e));
            }
            Event::Interval { .. } => return Ok(Some(e)),
            Event::StopStream => {
                if let Some((_, stop)) = &self.stream {
                    stop.store(true, Ordering::Relaxed);
                }
                return Ok(Some(e));
            }
            Event::Results(r) => Outcome::Results(r),
            Event::Finished => Outcome::Finished,
            Event::Refused {
                reason,
                version,
                message,
            } => Outcome::Refused {
                reason,
                version,
                message,
            },
            Event::Aborted { message } => Outcome::Aborted(message),
            Event::Failed(e) => Outcome::Failed(e),
        };
        self.outcome = Some(outcome);
        Ok(None)
    }

    /// Datagrams that arrived before the test was accepted belong to no test.
    fn discard_stale(&mut self) {
        let Some(rx) = &mut self.udp else { return };
        if rx.set_wait(Duration::from_micros(1)).is_ok() {
            while matches!(rx.recv_batch(|_| {}), Ok(n) if n > 0) {}
        }
        // A receive only follows a wait that found a datagram; this bound
        // is a safety net.
        let _ = rx.set_wait(POLL);
    }

    fn stream_finished(&mut self, s: &mut Session) -> Result<()> {
        if !self.stream.as_ref().is_some_and(|(t, _)| t.is_finished()) {
            return Ok(());
        }
        let Some((thread, _)) = self.stream.take() else {
            return Ok(());
        };
        let report = thread
            .join()
            .map_err(|_| anyhow!("the sending thread panicked"))?;
        s.handle_input(self.now(), Input::StreamFinished(report));
        Ok(())
    }

    fn read_control(&mut self, s: &mut Session) -> Result<()> {
        while let Ok(r) = self.control.try_recv() {
            self.control_input(s, r)?;
        }
        Ok(())
    }

    fn control_input(&mut self, s: &mut Session, r: ControlRead) -> Result<()> {
        match r {
            ControlRead::Bytes(b) => s.handle_input(self.now(), Input::Control(&b)),
            ControlRead::Closed => s.handle_input(self.now(), Input::ControlClosed),
            ControlRead::Failed(e) => return Err(e).context("reading the control connection"),
        }
        Ok(())
    }

    /// Waits up to [`POLL`] (or until `until`) for datagrams and hands
    /// them to the session; without a test-stream socket, waits on the
    /// control connection instead.
    fn receive(&mut self, s: &mut Session, until: Option<Instant>) -> Result<()> {
        let now = Instant::now();
        let wait = until
            .map_or(POLL, |u| u.saturating_duration_since(now))
            .clamp(Duration::from_micros(100), POLL);
        let Some(rx) = &mut self.udp else {
            return match self.control.recv_timeout(wait) {
                Ok(r) => self.control_input(s, r),
                Err(RecvTimeoutError::Timeout) => Ok(()),
                Err(RecvTimeoutError::Disconnected) => Ok(()),
            };
        };
        // ppoll ends the wait on time; the socket timeout would round it
        // up to the kernel's tick and send echo requests late.
        let ready = rx
            .readable_within(wait)
            .context("waiting for the test stream")?;
        let origin = self.origin;
        let got = if !ready {
            Ok(0)
        } else {
            rx.recv_batch(|d| {
                let Some(from) = d.from else { return };
                let at = Nanos::from(d.at.saturating_duration_since(origin));
                for payload in d.segments() {
                    s.handle_input(at, Input::Datagram { from, payload });
                }
            })
        };
        match got {
            // ICMP errors from earlier sends surface here; not ours to act on.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("receiving the test stream"),
            Ok(_) => {}
        }
        let drops = rx.drops_now().unwrap_or(rx.kernel_drops);
        let drops = u64::from(drops.wrapping_sub(self.drops_base));
        s.handle_input(self.now(), Input::ReceiverDrops(drops));
        Ok(())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Stop a stream still running, and close the connection for real
        // (the reader thread holds a duplicate of it).
        if let Some((thread, stop)) = self.stream.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
        let _ = self.conn.shutdown(Shutdown::Both);
    }
}

/// Reads the control connection on its own thread until it ends.
fn spawn_reader(mut conn: TcpStream, prefix: Vec<u8>) -> Receiver<ControlRead> {
    let (tx, rx) = crossbeam_channel::bounded(64);
    if !prefix.is_empty() {
        let _ = tx.try_send(ControlRead::Bytes(prefix));
    }
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let msg = match conn.read(&mut buf) {
                Ok(0) => ControlRead::Closed,
                Ok(n) => ControlRead::Bytes(buf[..n].to_vec()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // A peer that closes with data unread resets instead.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => ControlRead::Closed,
                Err(e) => ControlRead::Failed(e),
            };
            let last = !matches!(msg, ControlRead::Bytes(_));
            if tx.send(msg).is_err() || last {
                return;
            }
        }
    });
    rx
}
