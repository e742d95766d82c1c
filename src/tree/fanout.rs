//! Relaying to children: one bounded queue and one writer thread per
//! child, so a slow child never holds up the relay or its siblings.
//!
//! When a child's queue passes its limit the queue is emptied and the
//! child is marked lagging; at the next frame start it gets a catch-up
//! built from the relay's own canvas (the tiles changed since the last
//! frame its writer handed to the socket), never an ever-growing backlog.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use nagare_proto::screen::Canvas;
use nagare_proto::tree::PeerId;
use nagare_proto::tree_wire::Kind;

/// A framed message shared by every child it goes to.
pub type Message = Arc<[u8]>;

/// Queue bytes above which a child counts as lagging.
const LAG_LIMIT: usize = 8 << 20;

/// A child gets its catch-up only once its queue has drained this far.
const RESUME_BELOW: usize = 1 << 20;

/// How long a write may block before the child is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct QueueState {
    msgs: VecDeque<Message>,
    bytes: usize,
    /// Last frame whose end the writer took off the queue: what the child
    /// will hold if the rest of the queue is thrown away.
    handed_version: Option<u64>,
    closing: bool,
    dead: bool,
}

struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A writer that panicked leaves the state consistent (every
        // update is one assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChildState {
    /// Receives frames as they arrive; holds `version` once queued ones land.
    Live,
    /// Must be caught up from this version before it gets frames again.
    Lagging(Option<u64>),
}

struct Child {
    peer: PeerId,
    queue: Arc<Queue>,
    stream: TcpStream,
    writer: Option<JoinHandle<()>>,
    state: ChildState,
    version: Option<u64>,
    in_frame: bool,
}

/// The children of one relay.
#[derive(Default)]
pub struct Fanout {
    children: Vec<Child>,
    /// Times a child's queue was thrown away because it lagged.
    pub lag_drops: u64,
    /// Catch-up frames sent.
    pub refreshes: u64,
}

fn frame_end_number(msg: &[u8]) -> Option<u64> {
    if msg.get(4) == Some(&(Kind::FrameEnd as u8)) {
        msg.get(5..13)?.try_into().ok().map(u64::from_be_bytes)
    } else {
        None
    }
}

fn write_loop(mut stream: TcpStream, queue: Arc<Queue>) {
    loop {
        let msg = {
            let mut q = queue.lock();
            loop {
                if let Some(m) = q.msgs.pop_front() {
                    q.bytes -= m.len();
                    if let Some(n) = frame_end_number(&m) {
                        q.handed_version = Some(n);
                    }
                    break m;
                }
                if q.closing || q.dead {
                    drop(q);
                    let _ = stream.flush();
                    let _ = stream.shutdown(Shutdown::Write);
                    return;
                }
                q = queue
                    .ready
                    .wait_timeout(q, Duration::from_millis(500))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if stream.write_all(&msg).is_err() {
            let mut q = queue.lock();
            q.dead = true;
            q.msgs.clear();
            q.bytes = 0;
            return;
        }
    }
}

impl Fanout {
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
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                handed_version: version,
                ..QueueState::default()
            }),
            ready: Condvar::new(),
        });
        let writer_stream = stream.try_clone()?;
        let q = queue.clone();
        let writer = std::thread::Builder::new()
            .name(format!("child-{}", peer.0))
            .spawn(move || write_loop(writer_stream, q))?;
        // A child re-attaching under the same id replaces its old link.
        self.remove(peer);
        self.children.push(Child {
            peer,
            queue,
            stream,
            writer: Some(writer),
            state: ChildState::Lagging(version),
            version,
            in_frame: false,
        });
        Ok(())
    }

    /// Drops a child's link.
    pub fn remove(&mut self, peer: PeerId) {
        self.children.retain_mut(|c| {
            if c.peer == peer {
                let _ = c.stream.shutdown(Shutdown::Both);
                c.queue.lock().dead = true;
                c.queue.ready.notify_all();
                false
            } else {
                true
            }
        });
    }

    fn push(c: &mut Child, msg: &Message, lag_drops: &mut u64) {
        let mut q = c.queue.lock();
        if q.dead {
            return;
        }
        q.msgs.push_back(msg.clone());
        q.bytes += msg.len();
        if q.bytes > LAG_LIMIT {
            q.msgs.clear();
            q.bytes = 0;
            c.state = ChildState::Lagging(q.handed_version);
            c.in_frame = false;
            *lag_drops += 1;
        }
        drop(q);
        c.queue.ready.notify_one();
    }

    /// Called before a frame starts, while `canvas` holds the previous
    /// whole frame: drops dead children and catches up lagging ones whose
    /// queues have drained.
    pub fn catch_up(&mut self, canvas: &Canvas) {
        self.children.retain(|c| !c.queue.lock().dead);
        let Some(held) = canvas.version() else {
            return;
        };
        for c in &mut self.children {
            let ChildState::Lagging(since) = c.state else {
                continue;
            };
            if c.queue.lock().bytes > RESUME_BELOW {
                continue;
            }
            let drops = self.lag_drops;
            if since != Some(held) {
                let Ok(frame) = canvas.refresh(since) else {
                    continue;
                };
                for m in frame.messages {
                    Self::push(c, &Message::from(m), &mut self.lag_drops);
                }
                self.refreshes += 1;
            }
            if self.lag_drops == drops {
                c.state = ChildState::Live;
                c.version = Some(held);
            }
        }
    }

    /// Forwards a frame start to children that hold its base.
    pub fn frame_start(&mut self, base: Option<u64>, msg: &Message) {
        for c in &mut self.children {
            if c.state != ChildState::Live {
                // A key frame applies to anything: no need to wait for a
                // catch-up (this is how a tree starts).
                if base.is_some() || c.queue.lock().bytes > RESUME_BELOW {
                    continue;
                }
                c.state = ChildState::Live;
            }
            if base.is_some() && base != c.version {
                c.state = ChildState::Lagging(c.version);
                continue;
            }
            c.in_frame = true;
            Self::push(c, msg, &mut self.lag_drops);
        }
    }

    /// Forwards a chunk of the open frame.
    pub fn tiles(&mut self, msg: &Message) {
        for c in &mut self.children {
            if c.state == ChildState::Live && c.in_frame {
                Self::push(c, msg, &mut self.lag_drops);
            }
        }
    }

    /// Forwards the end of frame `number`.
    pub fn frame_end(&mut self, number: u64, msg: &Message) {
        for c in &mut self.children {
            if c.state == ChildState::Live && c.in_frame {
                Self::push(c, msg, &mut self.lag_drops);
                if c.state == ChildState::Live {
                    c.version = Some(number);
                }
                c.in_frame = false;
            }
        }
    }

    /// Sends `msg` (the end of the stream) to every child, lets the
    /// writers drain and waits for them (each write is bounded by the
    /// write timeout).
    pub fn finish(&mut self, msg: &Message) {
        for c in &mut self.children {
            let mut q = c.queue.lock();
            q.msgs.push_back(msg.clone());
            q.bytes += msg.len();
            q.closing = true;
            drop(q);
            c.queue.ready.notify_one();
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
            c.queue.lock().dead = true;
            c.queue.ready.notify_all();
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}
