//! The sockets under a tree machine: each TCP connection gets a link id,
//! a reader thread that hands in whole framed messages and a writer
//! thread that writes what the machine yields, in order, and reports each
//! write. An accepted connection gets its threads only once its first
//! message (at most [`nagare_proto::tree::MAX_HANDSHAKE_MESSAGE`] bytes)
//! is in: until then one poll(2) thread ([`preauth`]) reads every
//! newcomer's first message into a buffer of that size, and the challenge
//! or a refusal is written straight to the socket, so idle or trickling
//! connections cost a file descriptor and half a kilobyte each, never a
//! thread. Every decision (who is admitted, what a child is sent, when a
//! link is given up) is the machine's; this file only moves bytes and
//! time between it and the kernel.

mod arrival;
mod preauth;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use nagare_proto::Nanos;
use nagare_proto::framing::{self, HEADER_LEN};
use nagare_proto::tree::{Close, DialId, LinkId, LinkInput, Message, Nonce, Role, Transmit};

use arrival::Arrival;

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a write may block before the link is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Kernel send buffer of accepted links (children). Loopback and LAN
/// autotuning grows it to megabytes, which is stale video a lagging
/// child would still have to read before its catch-up; the machine's
/// queue, not the kernel, should hold the backlog. 1 MiB still fills a
/// 1 Gbit/s link with 8 ms of round trip.
const SEND_BUFFER: usize = 1 << 20;

/// Inputs waiting for the machine; readers block when it is full, which
/// pushes back on the sender through TCP.
const INPUT_QUEUE: usize = 4096;

/// Upstream messages read before a test stall starts: past the first
/// frames, so the stall hits a running stream.
const STALL_AFTER: u64 = 30;

enum Order {
    Send(Message),
    Close,
}

struct Open {
    stream: TcpStream,
    writer: Sender<Order>,
    thread: JoinHandle<()>,
}

/// The connections of one machine.
pub(super) struct Links {
    origin: Instant,
    tx: Sender<Arrival>,
    rx: Receiver<Arrival>,
    open: HashMap<LinkId, Open>,
    /// Accepted connections whose first message is not in yet (the
    /// preauth thread reads them; this end writes and closes).
    pending: HashMap<LinkId, TcpStream>,
    /// Inputs made here (writes to pending links), handed in first.
    ready: std::collections::VecDeque<LinkInput>,
    /// The preauth thread, once something was accepted.
    preauth: Option<preauth::Handle>,
    /// Writers finishing a flushed close.
    closing: Vec<JoinHandle<()>>,
    next: u64,
    dial_errors: HashMap<DialId, std::io::Error>,
    /// Test only: one pause of the first parent link's reader.
    stall: Option<Duration>,
}

impl Links {
    /// No connections yet; `stall` (tests only) pauses the reader of the
    /// first link to a parent once, after a few messages.
    pub(super) fn new(stall: Option<Duration>) -> Self {
        let (tx, rx) = bounded(INPUT_QUEUE);
        Links {
            origin: Instant::now(),
            tx,
            rx,
            open: HashMap::new(),
            pending: HashMap::new(),
            ready: std::collections::VecDeque::new(),
            preauth: None,
            closing: Vec::new(),
            next: 0,
            dial_errors: HashMap::new(),
            stall,
        }
    }

    /// The machine's clock: nanoseconds since these links were made.
    pub(super) fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }

    /// The instant a machine time stands for.
    pub(super) fn instant(&self, at: Nanos) -> Instant {
        self.origin + Duration::from_nanos(at.as_nanos())
    }

    /// Accepts connections on `listener` from now on.
    pub(super) fn listen(&self, listener: TcpListener) -> anyhow::Result<()> {
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    let Ok(s) = stream else { continue };
                    let Ok(from) = s.peer_addr() else { continue };
                    if tx.send(Arrival::Accepted(s, from)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(())
    }

    /// The next input, waiting at most until `deadline` (`None`: the
    /// deadline passed first).
    pub(super) fn next(&mut self, deadline: Option<Nanos>) -> anyhow::Result<Option<LinkInput>> {
        if let Some(input) = self.ready.pop_front() {
            return Ok(Some(input));
        }
        loop {
            let arrival = match deadline {
                Some(d) => match self.rx.recv_deadline(self.instant(d)) {
                    Ok(a) => a,
                    Err(_) => return Ok(None),
                },
                // `self` holds a sender too, so this only ends on input.
                None => self
                    .rx
                    .recv()
                    .map_err(|_| anyhow!("every connection thread has stopped"))?,
            };
            if let Some(input) = self.arrive(arrival)? {
                return Ok(Some(input));
            }
        }
    }

    fn arrive(&mut self, arrival: Arrival) -> anyhow::Result<Option<LinkInput>> {
        Ok(match arrival {
            Arrival::Accepted(stream, from) => {
                let nonce: Nonce = random()?;
                let seed = random()?;
                let Some(link) = self.park(stream)? else {
                    return Ok(None);
                };
                Some(LinkInput::Accepted {
                    link,
                    from,
                    nonce,
                    seed,
                })
            }
            Arrival::First(link, msg, stream) => {
                // Closed here meanwhile (refused, evicted, timed out).
                if self.pending.remove(&link).is_none() {
                    return Ok(None);
                }
                stream.set_nonblocking(false)?;
                self.register_as(link, stream, true, None)?;
                Some(LinkInput::Received {
                    link,
                    msg: Arc::from(msg),
                })
            }
            Arrival::Dialed(dial, role, Ok(stream)) => {
                let stall = if role == Role::Attach {
                    self.stall.take()
                } else {
                    None
                };
                let link = self.register(stream, false, stall)?;
                let seed = random()?;
                Some(LinkInput::Connected { dial, link, seed })
            }
            Arrival::Dialed(dial, _, Err(e)) => {
                self.dial_errors.insert(dial, e);
                Some(LinkInput::ConnectFailed { dial })
            }
            // What comes from links already closed here is stale.
            Arrival::Link(input) => match input {
                LinkInput::Closed { link } if self.pending.remove(&link).is_some() => {
                    Some(LinkInput::Closed { link })
                }
                LinkInput::Closed { link } => self.open.remove(&link).map(|o| {
                    let _ = o.stream.shutdown(Shutdown::Both);
                    LinkInput::Closed { link }
                }),
                LinkInput::Received { link, .. } | LinkInput::Sent { link }
                    if !self.open.contains_key(&link) =>
                {
                    None
                }
                other => Some(other),
            },
        })
    }

    /// Does what the machine asked.
    pub(super) fn apply(&mut self, t: Transmit) {
        match t {
            Transmit::Send { link, msg } if self.pending.contains_key(&link) => {
                self.write_pending(link, &msg);
            }
            Transmit::Close { link, .. } if self.pending.contains_key(&link) => {
                // The preauth thread sees the shutdown and lets it go.
                if let Some(s) = self.pending.remove(&link) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            Transmit::Send { link, msg } => {
                if let Some(o) = self.open.get(&link) {
                    let _ = o.writer.send(Order::Send(msg));
                }
            }
            Transmit::Connect { dial, addr, role } => {
                let tx = self.tx.clone();
                let spawned = std::thread::Builder::new()
                    .name("dial".into())
                    .spawn(move || {
                        let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT);
                        let _ = tx.send(Arrival::Dialed(dial, role, s));
                    });
                if let Err(e) = spawned {
                    self.dial_errors.insert(dial, e);
                    let _ = self
                        .tx
                        .try_send(Arrival::Link(LinkInput::ConnectFailed { dial }));
                }
            }
            Transmit::Close { link, how } => {
                let Some(o) = self.open.remove(&link) else {
                    return;
                };
                match how {
                    Close::Flush => {
                        let _ = o.writer.send(Order::Close);
                        self.closing.push(o.thread);
                    }
                    Close::Abort => {
                        let _ = o.stream.shutdown(Shutdown::Both);
                    }
                }
            }
        }
    }

    /// Why dial `dial` failed, for the user.
    pub(super) fn dial_error(&self, dial: DialId) -> Option<&std::io::Error> {
        self.dial_errors.get(&dial)
    }

    /// Waits (at most `limit`) for links closed with a flush to finish
    /// writing, so the last messages (the end of the stream) go out
    /// before the process exits.
    pub(super) fn finish(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        for t in self.closing.drain(..) {
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Hands a newly accepted connection to the preauth thread; `None`
    /// if it failed already.
    fn park(&mut self, stream: TcpStream) -> anyhow::Result<Option<LinkId>> {
        let link = LinkId(self.next);
        self.next += 1;
        let kept = match stream.try_clone() {
            Ok(k) => k,
            Err(_) => return Ok(None),
        };
        if stream.set_nonblocking(true).is_err() {
            return Ok(None);
        }
        let handle = match self.preauth.take() {
            Some(h) => h,
            None => preauth::start(self.tx.clone())?,
        };
        let handle = self.preauth.insert(handle);
        handle.add(link, stream);
        self.pending.insert(link, kept);
        Ok(Some(link))
    }

    /// Writes a challenge or a refusal to a connection that has not sent
    /// its first message: a few dozen bytes into an empty socket buffer,
    /// so the write does not block (if it cannot be written whole the
    /// link is closed).
    fn write_pending(&mut self, link: LinkId, msg: &[u8]) {
        let Some(s) = self.pending.get_mut(&link) else {
            return;
        };
        let input = match s.write(msg) {
            Ok(n) if n == msg.len() => LinkInput::Sent { link },
            _ => {
                let _ = s.shutdown(Shutdown::Both);
                self.pending.remove(&link);
                LinkInput::Closed { link }
            }
        };
        self.ready.push_back(input);
    }

    fn register(
        &mut self,
        stream: TcpStream,
        accepted: bool,
        stall: Option<Duration>,
    ) -> anyhow::Result<LinkId> {
        let link = LinkId(self.next);
        self.next += 1;
        self.register_as(link, stream, accepted, stall)?;
        Ok(link)
    }

    fn register_as(
        &mut self,
        link: LinkId,
        stream: TcpStream,
        accepted: bool,
        stall: Option<Duration>,
    ) -> anyhow::Result<()> {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        if accepted {
            // A smaller buffer only costs throughput on long fat links;
            // the link still works with the kernel's default.
            let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
        }
        let reader = stream.try_clone().context("cloning a connection")?;
        let writer = stream.try_clone().context("cloning a connection")?;
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name(format!("read-{}", link.0))
            .spawn(move || read_loop(reader, link, &tx, stall))?;
        let (wtx, wrx) = unbounded();
        let tx = self.tx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("write-{}", link.0))
            .spawn(move || write_loop(writer, link, &wrx, &tx))?;
        self.open.insert(
            link,
            Open {
                stream,
                writer: wtx,
                thread,
            },
        );
        Ok(())
    }
}

/// 32 bytes from the system's random source: a challenge, or the seed
/// of a link's encryption keys.
fn random() -> anyhow::Result<[u8; 32]> {
    let mut bytes = [0; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("the system's random source failed ({e})"))?;
    Ok(bytes)
}

/// Reads one framed message (header included), refusing oversized ones
/// (by the framing's limit) before allocating.
fn read_message(stream: &mut impl Read) -> anyhow::Result<Vec<u8>> {
    let mut header = [0u8; HEADER_LEN];
    stream.read_exact(&mut header)?;
    let len = framing::body_len(header)?;
    let mut msg = vec![0u8; HEADER_LEN + len];
    msg[..HEADER_LEN].copy_from_slice(&header);
    stream.read_exact(&mut msg[HEADER_LEN..])?;
    Ok(msg)
}

fn read_loop(mut stream: TcpStream, link: LinkId, tx: &Sender<Arrival>, stall: Option<Duration>) {
    let mut stall = stall;
    let mut read = 0u64;
    loop {
        if read == STALL_AFTER {
            if let Some(d) = stall.take() {
                std::thread::sleep(d);
            }
        }
        read += 1;
        let input = match read_message(&mut stream) {
            Ok(m) => LinkInput::Received {
                link,
                msg: Arc::from(m),
            },
            // A hostile length ends here too, before anything is allocated.
            Err(_) => LinkInput::Closed { link },
        };
        let closed = matches!(input, LinkInput::Closed { .. });
        if tx.send(Arrival::Link(input)).is_err() || closed {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn write_loop(mut stream: TcpStream, link: LinkId, rx: &Receiver<Order>, tx: &Sender<Arrival>) {
    // A dropped sender (the link was aborted or closed) ends the loop too.
    while let Ok(Order::Send(msg)) = rx.recv() {
        let input = match stream.write_all(&msg) {
            Ok(()) => LinkInput::Sent { link },
            Err(_) => LinkInput::Closed { link },
        };
        let failed = matches!(input, LinkInput::Closed { .. });
        if tx.send(Arrival::Link(input)).is_err() || failed {
            break;
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
}
