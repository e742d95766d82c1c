//! The one thread that reads every accepted connection's first message
//! (its join or attach request) before the connection is given threads of
//! its own: poll(2) over all newcomers, each read into a buffer of at most
//! [`MAX_HANDSHAKE_MESSAGE`] bytes plus the length prefix. A prefix that
//! announces more, an end of file or an error drops the newcomer; the
//! machine's handshake deadline and pending caps bound how many wait.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use crossbeam_channel::{Receiver, Sender, TryRecvError, unbounded};
use nagare_proto::framing::{self, HEADER_LEN};
use nagare_proto::tree::{LinkId, LinkInput, MAX_HANDSHAKE_MESSAGE};

use super::arrival::Arrival;

/// Hands newcomers to the preauth thread.
pub(super) struct Handle {
    tx: Sender<(LinkId, TcpStream)>,
    /// Wakes the thread from poll(2) when a newcomer is added.
    waker: UnixStream,
}

impl Handle {
    /// Reads `stream`'s first message from now on (it is non-blocking).
    pub(super) fn add(&mut self, link: LinkId, stream: TcpStream) {
        if self.tx.send((link, stream)).is_ok() {
            // A full waker pipe already has a wake-up pending.
            let _ = self.waker.write(&[1]);
        }
    }
}

/// Starts the thread; what it reads goes to `out`.
pub(super) fn start(out: Sender<Arrival>) -> anyhow::Result<Handle> {
    let (waker, wake) = UnixStream::pair()?;
    waker.set_nonblocking(true)?;
    wake.set_nonblocking(true)?;
    let (tx, rx) = unbounded();
    std::thread::Builder::new()
        .name("preauth".into())
        .spawn(move || run(&rx, &wake, &out))?;
    Ok(Handle { tx, waker })
}

/// A connection whose first message is on its way.
struct Newcomer {
    link: LinkId,
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes wanted: the prefix, then the whole message.
    want: usize,
}

enum Step {
    More,
    Done(Vec<u8>),
    Gone,
}

impl Newcomer {
    /// Reads what is there, never past the first message (the encrypted
    /// link's handshake may follow it in the same segment).
    fn step(&mut self) -> Step {
        let mut tmp = [0u8; HEADER_LEN + MAX_HANDSHAKE_MESSAGE];
        loop {
            let have = self.buf.len();
            if have == self.want {
                if self.want > HEADER_LEN {
                    return Step::Done(std::mem::take(&mut self.buf));
                }
                let header = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
                match framing::body_len(header) {
                    Ok(len) if len <= MAX_HANDSHAKE_MESSAGE => self.want = HEADER_LEN + len,
                    // A hostile length: nothing is allocated for it.
                    _ => return Step::Gone,
                }
                continue;
            }
            match self.stream.read(&mut tmp[..self.want - have]) {
                Ok(0) => return Step::Gone,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::More,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Step::Gone,
            }
        }
    }
}

fn run(rx: &Receiver<(LinkId, TcpStream)>, wake: &UnixStream, out: &Sender<Arrival>) {
    let mut conns: Vec<Newcomer> = Vec::new();
    loop {
        loop {
            match rx.try_recv() {
                Ok((link, stream)) => conns.push(Newcomer {
                    link,
                    stream,
                    buf: Vec::new(),
                    want: HEADER_LEN,
                }),
                Err(TryRecvError::Empty) => break,
                // The links are gone: the process is ending.
                Err(TryRecvError::Disconnected) => return,
            }
        }
        let Some(ready) = wait(wake, &conns) else {
            return;
        };
        for i in (0..conns.len()).rev() {
            if !ready[i] {
                continue;
            }
            let arrival = match conns[i].step() {
                Step::More => continue,
                Step::Done(msg) => {
                    let c = conns.swap_remove(i);
                    Arrival::First(c.link, msg, c.stream)
                }
                Step::Gone => {
                    let c = conns.swap_remove(i);
                    Arrival::Link(LinkInput::Closed { link: c.link })
                }
            };
            if out.send(arrival).is_err() {
                return;
            }
        }
    }
}

/// Waits until the waker or a newcomer is readable (or closed); which
/// newcomers are. `None` if poll(2) itself fails.
fn wait(wake: &UnixStream, conns: &[Newcomer]) -> Option<Vec<bool>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds: Vec<PollFd> = std::iter::once(wake.as_fd())
        .chain(conns.iter().map(|c| c.stream.as_fd()))
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    match poll(&mut fds, PollTimeout::NONE) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(_) => return None,
    }
    let ready: Vec<bool> = fds
        .iter()
        .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
        .collect();
    if ready[0] {
        let mut b = [0u8; 64];
        while matches!((&*wake).read(&mut b), Ok(n) if n > 0) {}
    }
    Some(ready[1..].to_vec())
}
