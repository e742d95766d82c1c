//! The sockets under a tree machine: each TCP connection gets a link id,
//! a reader thread that hands in whole framed messages and a writer
//! thread that writes what the machine yields, in order, and reports each
//! write. Every decision (who is admitted, what a child is sent, when a
//! link is given up) is the machine's; this file only moves bytes and
//! time between it and the kernel.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use nagare_proto::Nanos;
use nagare_proto::framing::{self, HEADER_LEN};
use nagare_proto::tree::{
    Close, DialId, LinkId, LinkInput, MAX_HANDSHAKE_MESSAGE, Message, Nonce, Role, Transmit,
};

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

enum Arrival {
    Accepted(TcpStream, SocketAddr),
    Dialed(DialId, Role, std::io::Result<TcpStream>),
    Link(LinkInput),
}

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
pub struct Links {
    origin: Instant,
    tx: Sender<Arrival>,
    rx: Receiver<Arrival>,
    open: HashMap<LinkId, Open>,
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
    pub fn new(stall: Option<Duration>) -> Self {
        let (tx, rx) = bounded(INPUT_QUEUE);
        Links {
            origin: Instant::now(),
            tx,
            rx,
            open: HashMap::new(),
            closing: Vec::new(),
            next: 0,
            dial_errors: HashMap::new(),
            stall,
        }
    }

    /// The machine's clock: nanoseconds since these links were made.
    pub fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }

    /// The instant a machine time stands for.
    pub fn instant(&self, at: Nanos) -> Instant {
        self.origin + Duration::from_nanos(at.as_nanos())
    }

    /// Accepts connections on `listener` from now on.
    pub fn listen(&self, listener: TcpListener) -> anyhow::Result<()> {
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
    pub fn next(&mut self, deadline: Option<Nanos>) -> anyhow::Result<Option<LinkInput>> {
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
                let link = self.register(stream, true, None)?;
                Some(LinkInput::Accepted {
                    link,
                    from,
                    nonce,
                    seed,
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
    pub fn apply(&mut self, t: Transmit) {
        match t {
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
    pub fn dial_error(&self, dial: DialId) -> Option<&std::io::Error> {
        self.dial_errors.get(&dial)
    }

    /// Waits (at most `limit`) for links closed with a flush to finish
    /// writing, so the last messages (the end of the stream) go out
    /// before the process exits.
    pub fn finish(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        for t in self.closing.drain(..) {
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn register(
        &mut self,
        stream: TcpStream,
        accepted: bool,
        stall: Option<Duration>,
    ) -> anyhow::Result<LinkId> {
        let link = LinkId(self.next);
        self.next += 1;
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
        // Before it has proved itself, a newcomer may send one message of
        // handshake size: a hostile length prefix allocates nothing.
        let first_max = accepted.then_some(MAX_HANDSHAKE_MESSAGE);
        std::thread::Builder::new()
            .name(format!("read-{}", link.0))
            .spawn(move || read_loop(reader, link, &tx, stall, first_max))?;
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
        Ok(link)
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
/// (by the framing's limit, and over `max` bytes) before allocating.
fn read_message(stream: &mut impl Read, max: usize) -> anyhow::Result<Vec<u8>> {
    let mut header = [0u8; HEADER_LEN];
    stream.read_exact(&mut header)?;
    let len = framing::body_len(header)?;
    if len > max {
        anyhow::bail!("a {len}-byte message before the handshake (at most {max})");
    }
    let mut msg = vec![0u8; HEADER_LEN + len];
    msg[..HEADER_LEN].copy_from_slice(&header);
    stream.read_exact(&mut msg[HEADER_LEN..])?;
    Ok(msg)
}

fn read_loop(
    mut stream: TcpStream,
    link: LinkId,
    tx: &Sender<Arrival>,
    stall: Option<Duration>,
    first_max: Option<usize>,
) {
    let mut stall = stall;
    let mut read = 0u64;
    loop {
        if read == STALL_AFTER {
            if let Some(d) = stall.take() {
                std::thread::sleep(d);
            }
        }
        let max = if read == 0 { first_max } else { None };
        read += 1;
        let input = match read_message(&mut stream, max.unwrap_or(usize::MAX)) {
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
