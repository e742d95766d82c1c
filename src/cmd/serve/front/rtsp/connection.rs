//! One RTSP connection, as a task on the listener's event loop: it feeds
//! nagare-proto's `rtsp::Connection` what the socket reads (or its timer,
//! or the close), writes out the responses, hands the events to its
//! [`Session`], and moves interleaved frames from the pacers' queue to
//! the socket.
//!
//! Nothing here blocks the loop: reads and writes are tried only when
//! the socket is ready, and a client that reads slowly holds only its own
//! bytes. Bounds:
//! - requests are read only while less than [`OUTBOX_LIMIT`] bytes wait
//!   to be written, and media is taken from the queue only then too, so
//!   a client that does not read stops being read, and its queue fills
//!   until the pacers drop it (as a full queue always did);
//! - bytes that make no progress for [`WRITE_STALL`] close the
//!   connection (a client that never reads its responses), counted in
//!   `nagare_rtsp_stalled_total`;
//! - the machine's own timer reaps an idle connection or session;
//! - an idle connection holds no read buffer (reads go through the
//!   loop's stack) and no queue (made at its first interleaved PLAY).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nagare_proto::Nanos;
use nagare_proto::rtsp::{self, Connection, Guard, Input};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::session::{ConnCatalog, Media, Session};
use crate::clock::Origin;
use crate::cmd::serve::front::tenants::Tenancy;
use crate::cmd::serve::hub::server::Server;
use crate::cmd::serve::stream::output::TcpLink;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 4096;
/// Bytes waiting to be written above which nothing more is read or
/// taken from the media queue.
pub(crate) const OUTBOX_LIMIT: usize = 64 * 1024;
/// Longest the bytes owed to a client may wait without any being taken.
pub(crate) const WRITE_STALL: Duration = Duration::from_secs(10);
/// Largest RTCP datagram read from a client: receiver reports are a few
/// dozen bytes; anything longer is cut and then refused as malformed.
const RTCP_MAX: usize = 1500;
/// Longest a closing connection's last responses may take to leave.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// What a connection task starts with.
pub(super) struct Conn {
    pub(super) server: Arc<Server>,
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) origin: Origin,
    pub(super) tenancy: Tenancy,
    pub(super) guard: Option<Guard>,
}

type Machine = Connection<ConnCatalog>;

/// Bytes owed to the client, in order: responses and whole interleaved
/// frames.
#[derive(Default)]
struct Outbox {
    bytes: Vec<u8>,
    /// When the bytes last made progress (or began to wait).
    since: Option<Instant>,
}

impl Outbox {
    fn push(&mut self, bytes: Vec<u8>) {
        if self.bytes.is_empty() {
            self.bytes = bytes;
            self.since = Some(Instant::now());
        } else {
            self.bytes.extend_from_slice(&bytes);
        }
    }

    fn is_full(&self) -> bool {
        self.bytes.len() >= OUTBOX_LIMIT
    }

    /// Writes what the socket takes now; an error means the connection
    /// is gone.
    fn write_now(&mut self, stream: &TcpStream) -> std::io::Result<()> {
        while !self.bytes.is_empty() {
            match stream.try_write(&self.bytes) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.bytes.drain(..n);
                    self.since = Some(Instant::now());
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // An idle connection keeps no buffer.
        self.bytes = Vec::new();
        self.since = None;
        Ok(())
    }

    /// When waiting bytes count as stalled.
    fn stall_at(&self) -> Option<Instant> {
        self.since.map(|t| t + WRITE_STALL)
    }
}

/// What woke the connection.
enum Wake {
    Readable,
    Writable,
    Frame(Vec<u8>),
    /// A datagram on the session's RTCP socket (`None`: an error, such
    /// as the ICMP refusal of a report sent to a closed port).
    Rtcp(Option<Vec<u8>>),
    Timer,
    Stalled,
    Gone,
}

/// Serves one connection until it closes (or the task is dropped: an
/// eviction or the server's stop; the session then ends as it drops).
pub(super) async fn run(c: Conn) {
    let Conn {
        server,
        mut stream,
        peer,
        origin,
        tenancy,
        guard,
    } = c;
    let _ = stream.set_nodelay(true);
    info!(client = %peer, "rtsp connection from {peer}");
    let catalog = ConnCatalog::new(server.clone(), peer);
    let mut session = Session::new(server.clone(), peer, &catalog);
    let config = rtsp::Config {
        session_timeout: Nanos::from(server.settings.session_timeout),
        idle_timeout: Nanos::from(server.settings.session_timeout),
        ..rtsp::Config::default()
    };
    let seed = getrandom::u64().unwrap_or(0x6e61_6761_7265);
    let mut machine = Connection::new(origin.elapsed(), config, catalog, peer.ip(), seed);
    if let Some(g) = guard {
        machine = machine.with_guard(g);
    }
    let mut out = Outbox::default();
    loop {
        pump(&mut machine, &mut session, &mut out, origin.elapsed());
        tenancy.set_session(session.is_open());
        if machine.is_closed() {
            break;
        }
        let mut wake = match out.write_now(&stream) {
            Ok(()) => wait(&stream, &machine, &mut session, &out, &origin).await,
            Err(_) => Wake::Gone,
        };
        let now = origin.elapsed();
        if let Wake::Readable = wake {
            wake = read_now(&stream, &mut machine, now, &tenancy);
        }
        match wake {
            Wake::Readable | Wake::Writable => {}
            Wake::Frame(frame) => take_frames(&mut out, frame, session.media.as_mut()),
            Wake::Rtcp(Some(data)) => {
                // A report from the client keeps its session alive.
                machine.handle_input(now, Input::KeepAlive);
                session.rtcp(now, &data);
            }
            Wake::Rtcp(None) => {}
            Wake::Timer => machine.handle_input(now, Input::Timer),
            Wake::Stalled => {
                server.stats.rtsp_stalled.fetch_add(1, Ordering::Relaxed);
                machine.handle_input(now, Input::Closed);
            }
            Wake::Gone => machine.handle_input(now, Input::Closed),
        }
        // A socket that is always ready (a client that never stops
        // sending) would keep the loop here: every so many turns this
        // task yields to the other connections.
        tokio::task::coop::consume_budget().await;
    }
    let dropped = session.media.as_ref().is_some_and(|m| m.link.is_dropped());
    if !dropped && !out.bytes.is_empty() {
        let _ = tokio::time::timeout(CLOSE_FLUSH, stream.write_all(&out.bytes)).await;
    }
    let _ = tokio::time::timeout(CLOSE_FLUSH, stream.shutdown()).await;
    debug!(client = %peer, "rtsp connection from {peer} closed");
}

/// Moves the machine's responses to the outbox and hands its events to
/// the session, in the machine's polling order: an admission the session
/// answers goes back into the machine, and the responses that answer
/// queues (the admitted request's, and those held behind it) go out
/// before the next event.
fn pump(machine: &mut Machine, session: &mut Session, out: &mut Outbox, now: Nanos) {
    loop {
        while let Some(bytes) = machine.poll_transmit(now) {
            out.push(bytes);
        }
        let Some(e) = machine.poll_event() else {
            return;
        };
        if let Some(verdict) = session.event(e, now) {
            machine.handle_input(now, Input::Admission(verdict));
        }
    }
}

/// Waits for the socket, the media queue, the machine's deadline, a
/// stall or a dropped reader, whichever comes first.
async fn wait(
    stream: &TcpStream,
    machine: &Machine,
    session: &mut Session,
    out: &Outbox,
    origin: &Origin,
) -> Wake {
    let deadline = machine.poll_timeout().map(|t| origin.instant(t));
    let stall = out.stall_at();
    let (frames, link) = match session.media.as_mut() {
        Some(Media { link, frames }) => (Some(frames), Some(&**link)),
        None => (None, None),
    };
    let room = !out.is_full();
    let rtcp = session.rtcp_in.as_ref();
    tokio::select! {
        biased;
        () = until_dropped(link) => Wake::Gone,
        r = stream.writable(), if !out.bytes.is_empty() => match r {
            Ok(()) => Wake::Writable,
            Err(_) => Wake::Gone,
        },
        r = stream.readable(), if room => match r {
            Ok(()) => Wake::Readable,
            Err(_) => Wake::Gone,
        },
        f = next_frame(frames), if room => f.map_or(Wake::Gone, Wake::Frame),
        r = next_rtcp(rtcp) => Wake::Rtcp(r),
        () = sleep_until(deadline) => Wake::Timer,
        () = sleep_until(stall) => Wake::Stalled,
    }
}

async fn until_dropped(link: Option<&TcpLink>) {
    match link {
        Some(l) => l.until_dropped().await,
        None => std::future::pending().await,
    }
}

async fn next_frame(frames: Option<&mut mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match frames {
        Some(f) => f.recv().await,
        None => std::future::pending().await,
    }
}

/// The next datagram on the session's RTCP socket.
async fn next_rtcp(sock: Option<&tokio::net::UdpSocket>) -> Option<Vec<u8>> {
    let Some(s) = sock else {
        return std::future::pending().await;
    };
    let mut buf = [0u8; RTCP_MAX];
    match s.recv(&mut buf).await {
        Ok(n) => Some(buf[..n].to_vec()),
        Err(_) => None,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Reads what the socket holds into the machine, through a buffer on the
/// loop's stack (so no idle connection keeps one).
fn read_now(stream: &TcpStream, machine: &mut Machine, now: Nanos, tenancy: &Tenancy) -> Wake {
    let mut buf = [0u8; READ_CHUNK];
    match stream.try_read(&mut buf) {
        Ok(0) => Wake::Gone,
        Ok(n) => {
            tenancy.touch(now);
            machine.handle_input(now, Input::Bytes(&buf[..n]));
            Wake::Readable
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
            Wake::Readable
        }
        Err(_) => Wake::Gone,
    }
}

/// Moves `first` and whatever else the queue holds, up to the outbox's
/// limit, into the outbox.
fn take_frames(out: &mut Outbox, first: Vec<u8>, media: Option<&mut Media>) {
    out.push(first);
    let Some(m) = media else {
        return;
    };
    while !out.is_full() {
        match m.frames.try_recv() {
            Ok(f) => out.push(f),
            Err(_) => break,
        }
    }
}
