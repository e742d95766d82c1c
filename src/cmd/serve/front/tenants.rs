//! The connections a front end (RTSP, the HTTP API) holds, under
//! proto's `serve::Roster`: where each one stands for eviction, and how
//! to end an evicted one's task.
//! The accept loop enters newcomers; each connection's task tells the
//! roster when its client talks and whether it holds a session, and
//! gives its place back when it ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nagare_proto::Nanos;
use nagare_proto::lobby::Guest;
use nagare_proto::serve::Roster;
use tokio::task::AbortHandle;

/// The connections held, and how to end each one's task.
pub(crate) struct Tenants {
    roster: Roster,
    tasks: HashMap<Guest, AbortHandle>,
}

/// The tenants, shared by the accept loop and the connection tasks (all
/// on one thread; the lock is never contended).
pub(crate) type Shared = Arc<Mutex<Tenants>>;

fn lock(t: &Shared) -> MutexGuard<'_, Tenants> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tenants {
    /// No connections yet, under `total` and `per_address` caps.
    pub(crate) fn shared(total: usize, per_address: usize) -> Shared {
        Arc::new(Mutex::new(Tenants {
            roster: Roster::new(total, per_address),
            tasks: HashMap::new(),
        }))
    }
}

/// Enters connection `guest` from `from` at `now`, and closes the
/// connections evicted to make room, counting each in `evicted` (they
/// are aborted outside the lock: dropping one gives its place back). An
/// IPv4-mapped IPv6 address counts as its IPv4 address.
pub(crate) fn enter(
    tenants: &Shared,
    now: Nanos,
    guest: Guest,
    from: std::net::IpAddr,
    evicted: &AtomicU64,
) {
    let from = nagare_proto::serve::access::canonical(from);
    let tasks: Vec<AbortHandle> = {
        let mut t = lock(tenants);
        let out = t.roster.enter(now, guest, from);
        out.iter().filter_map(|g| t.tasks.remove(g)).collect()
    };
    for task in tasks {
        evicted.fetch_add(1, Ordering::Relaxed);
        task.abort();
    }
}

/// Keeps the task of connection `guest`, so that it can be evicted.
pub(crate) fn keep(tenants: &Shared, guest: Guest, task: AbortHandle) {
    lock(tenants).tasks.insert(guest, task);
}

/// A connection's place in the roster: tells it what the connection
/// does, and gives the place back when dropped (however it ends).
pub(crate) struct Tenancy {
    pub(crate) tenants: Shared,
    pub(crate) guest: Guest,
}

impl Tenancy {
    /// The client sent bytes at `now`.
    pub(crate) fn touch(&self, now: Nanos) {
        lock(&self.tenants).roster.touch(now, self.guest);
    }

    /// Whether the connection holds a session now.
    pub(crate) fn set_session(&self, open: bool) {
        lock(&self.tenants).roster.set_session(self.guest, open);
    }
}

impl Drop for Tenancy {
    fn drop(&mut self) {
        let mut t = lock(&self.tenants);
        t.roster.leave(self.guest);
        t.tasks.remove(&self.guest);
    }
}
