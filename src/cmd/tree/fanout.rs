//! Relaying to children: one bounded queue and one writer thread per
//! child, so a slow child never holds up the relay or its siblings.
//!
//! What each child gets — live chunks, nothing while it lags, a catch-up
//! from the relay's canvas once it drained — is decided by
//! [`nagare_proto::tree::relay::ChildQueue`], which is tested on virtual time;
//! this file only adds the mutex, the condition variable, the socket and
//! the thread.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use nagare_proto::screen::Canvas;
use nagare_proto::tree::PeerId;
use nagare_proto::tree::relay::{ChildQueue, Chunk, Limits, Next, Offer};

/// A framed message shared by every child it goes to.
pub type Message = Arc<[u8]>;

/// How long a write may block before the child is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Kernel send buffer per child. Loopback and LAN autotuning grows it to
/// megabytes, which is stale video a lagging child would still have to
/// read before its catch-up; the queue, not the kernel, should hold the
/// backlog. 1 MiB still fills a 1 Gbit/s link with 8 ms of round trip.
const SEND_BUFFER: usize = 1 << 20;

struct Link {
    queue: Mutex<ChildQueue<Message>>,
    ready: Condvar,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, ChildQueue<Message>> {
        // Every update of the queue happens inside one method call that
        // does not panic half way, so a poisoned lock is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Child {
    peer: PeerId,
    link: Arc<Link>,
    stream: TcpStream,
    writer: Option<JoinHandle<()>>,
}

/// The children of one relay.
#[derive(Default)]
pub struct Fanout {
    children: Vec<Child>,
    limits: Limits,
    /// Times a child's backlog was thrown away because it lagged.
    pub lag_drops: u64,
    /// Catch-up frames sent.
    pub refreshes: u64,
}

fn write_loop(mut stream: TcpStream, link: Arc<Link>) {
    loop {
        let next = {
            let mut q = link.lock();
            loop {
                match q.pop() {
                    Next::Wait => {
                        q = link
                            .ready
                            .wait_timeout(q, Duration::from_millis(500))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    next => break next,
                }
            }
        };
        match next {
            Next::Send(msg) => {
                if stream.write_all(&msg).is_err() {
                    link.lock().fail();
                    return;
                }
            }
            Next::Wait | Next::Close => {
                let _ = stream.flush();
                let _ = stream.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}

impl Fanout {
    /// A fanout whose children queue at most `limits`.
    pub fn new(limits: Limits) -> Self {
        Fanout {
            children: Vec::new(),
            limits,
            lag_drops: 0,
            refreshes: 0,
        }
    }

    /// Adds a child that was already welcomed; it holds `version` and is
    /// caught up at the next frame start.
    pub fn add(
        &mut self,
        peer: PeerId,
        stream: TcpStream,
        version: Option<u64>,
    ) -> std::io::Result<()> {
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        stream.set_nodelay(true)?;
        // A smaller buffer only costs throughput on long fat links; the
        // link still works with the kernel's default.
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
        let link = Arc::new(Link {
            queue: Mutex::new(ChildQueue::new(version, self.limits)),
            ready: Condvar::new(),
        });
        let writer_stream = stream.try_clone()?;
        let l = link.clone();
        let writer = std::thread::Builder::new()
            .name(format!("child-{}", peer.0))
            .spawn(move || write_loop(writer_stream, l))?;
        // A child re-attaching under the same id replaces its old link.
        self.remove(peer);
        self.children.push(Child {
            peer,
            link,
            stream,
            writer: Some(writer),
        });
        Ok(())
    }

    /// Drops a child's link.
    pub fn remove(&mut self, peer: PeerId) {
        self.children.retain_mut(|c| {
            if c.peer == peer {
                let _ = c.stream.shutdown(Shutdown::Both);
                c.link.lock().fail();
                c.link.ready.notify_all();
                false
            } else {
                true
            }
        });
    }

    /// Called before a frame starts, while `canvas` holds the previous
    /// whole frame: drops dead children and catches up lagging ones whose
    /// queues have drained.
    pub fn catch_up(&mut self, canvas: &Canvas) {
        self.children.retain(|c| !c.link.lock().is_dead());
        for c in &self.children {
            if c.link.lock().catch_up(canvas) {
                self.refreshes += 1;
                c.link.ready.notify_one();
            }
        }
    }

    /// Offers one chunk of the relayed stream to every child.
    pub fn offer(&mut self, chunk: Chunk, msg: &Message) {
        for c in &self.children {
            match c.link.lock().offer(chunk, msg.clone()) {
                Offer::Queued => c.link.ready.notify_one(),
                Offer::Dropped => self.lag_drops += 1,
                Offer::Skipped => {}
            }
        }
    }

    /// Sends `msg` (the end of the stream) to every child, lets the
    /// writers drain and waits for them (each write is bounded by the
    /// write timeout).
    pub fn finish(&mut self, msg: &Message) {
        for c in &self.children {
            c.link.lock().close(msg.clone());
            c.link.ready.notify_one();
        }
        for c in &mut self.children {
            if let Some(w) = c.writer.take() {
                let _ = w.join();
            }
        }
        self.children.clear();
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        for c in &self.children {
            c.link.lock().fail();
            c.link.ready.notify_all();
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}
