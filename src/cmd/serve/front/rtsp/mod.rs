//! The RTSP listener: every client connection on one event loop, a
//! single-threaded tokio runtime on the listener's own thread (as the
//! HTTP API has its own). One task per connection drives nagare-proto's
//! `rtsp::Connection` machine ([`connection`]) and acts on its events
//! ([`session`]); the media is paced by the pacing threads, never here.
//! So an idle connection costs a task, a socket and a few hundred bytes
//! of state, and no thread: tens of thousands fit in a few tens of MB.
//!
//! Caps, in all (`--max-connections`) and per client address
//! (`--max-connections-per-address`), are kept by proto's
//! `serve::Roster`: when one is reached the newcomer is served and the
//! connection idle the longest (from that address, or at all; those
//! holding a session last) is closed, so connections held open by one
//! client cannot shut another out.
//!
//! Where the server needs credentials (`--rtsp` off loopback, or
//! `--rtsp-auth`), each connection's machine gets a `rtsp::Guard` with a
//! nonce key of its own.

mod connection;
mod ports;
mod session;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::cmd::serve::front::tenants::{self, Shared, Tenancy, Tenants};
use nagare_proto::lobby::Guest;
use nagare_proto::rtsp::{Credentials, Guard, NONCE_KEY_LEN};
use tracing::error;

use crate::clock::Origin;
use crate::cmd::serve::hub::server::Server;
use crate::net::accept;

/// Serves RTSP on `listener` until the server stops; `credentials` are
/// what clients must give, if anything.
pub(crate) fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    credentials: Option<Arc<Credentials>>,
    runtime: tokio::runtime::Runtime,
) {
    runtime.block_on(accept_loop(&server, listener, credentials));
    // Connection tasks still open are dropped here (their sessions end as
    // they drop), not waited for: a stop never waits on a client.
    runtime.shutdown_background();
}

/// RTSP's event loop, built before serve announces its address.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}

/// Accepts connections and starts one task each, within the caps.
async fn accept_loop(
    server: &Arc<Server>,
    listener: TcpListener,
    credentials: Option<Arc<Credentials>>,
) {
    let tenants = Tenants::shared(
        server.settings.max_connections,
        server.settings.max_connections_per_address,
    );
    let origin = Origin::now();
    let mut next: Guest = 0;
    accept::until_stopped(
        || server.stopping(),
        listener,
        "RTSP",
        |stream, peer| {
            next += 1;
            match guard(credentials.as_ref()) {
                Ok(g) => admit(server, &tenants, origin, next, stream, peer, g),
                Err(e) => error!(client = %peer, "no nonce key for {peer} ({e}); closed"),
            }
        },
    )
    .await;
}

/// A connection's guard, with a nonce key drawn for it alone.
fn guard(credentials: Option<&Arc<Credentials>>) -> Result<Option<Guard>, getrandom::Error> {
    let Some(c) = credentials else {
        return Ok(None);
    };
    let mut key = [0u8; NONCE_KEY_LEN];
    getrandom::fill(&mut key)?;
    Ok(Some(Guard::new(c.clone(), key)))
}

/// Enters the connection in the roster, closes whom the roster evicts
/// for it, and starts its task.
fn admit(
    server: &Arc<Server>,
    tenants: &Shared,
    origin: Origin,
    guest: Guest,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    guard: Option<Guard>,
) {
    let stats = &server.stats;
    stats.rtsp_connections.fetch_add(1, Ordering::Relaxed);
    // Each evicted task is dropped: its socket closes and its session, if
    // any, ends.
    tenants::enter(
        tenants,
        origin.elapsed(),
        guest,
        peer.ip(),
        &stats.rtsp_evicted,
    );
    let conn = connection::Conn {
        server: server.clone(),
        stream,
        peer,
        origin,
        tenancy: Tenancy {
            tenants: tenants.clone(),
            guest,
        },
        guard,
    };
    // The task cannot run (and end) before its handle is kept: the loop
    // has one thread, and it is here.
    let task = tokio::spawn(connection::run(conn));
    tenants::keep(tenants, guest, task.abort_handle());
}
