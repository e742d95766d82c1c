//! The HTTP listener: connections, limits and timeouts, so that no client
//! can stall another or the server.
//!
//! hyper (HTTP/1.1 and 1.0) on a single-threaded tokio runtime that lives
//! on the API thread alone; the pacing threads never see it. Each
//! connection is its own task, so a client that sends slowly, or reads
//! its answers slowly, holds up only itself. The handlers (`http::answer`)
//! are synchronous and run on a small blocking pool.
//!
//! Bounds, each answered the way HTTP says:
//! - at most [`MAX_CONNECTIONS`] connections, [`MAX_PER_ADDRESS`] from one
//!   address: past them the newcomer is served and the connection idle
//!   the longest (from that address, or at all) is closed, as RTSP does
//!   (proto's `serve::Roster`). Idle is since its last answer, or since
//!   it connected if it never finished a request, so a client trickling
//!   its head gives way first; one whose request is being answered gives
//!   way last. A flood of idle connections thus rotates through the
//!   places, and a client that talks gets in;
//! - a request head within `HEAD_TIMEOUT` and `MAX_HEAD_BYTES` (hyper
//!   answers `408` or `431`), at most `MAX_HEADERS` header lines
//!   (`net::http`, shared with `recv --nmos`);
//! - a body within `BODY_TIMEOUT` and `MAX_BODY` bytes (`408`, `413`);
//! - a connection lives at most `CONNECTION_LIFETIME`, however busy,
//!   so a client that pipelines requests and never reads the answers is
//!   dropped; clients reconnect;
//! - running out of file descriptors slows accepting down, never ends it;
//! - on stop, open connections are dropped at once.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::AUTHORIZATION;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use nagare_proto::lobby::Guest;
use nagare_proto::serve::api_limits::{MAX_CONNECTIONS, MAX_PER_ADDRESS};

use crate::clock::Origin;
use crate::cmd::serve::front::http::{ApiRequest, Reply, answer};
use crate::cmd::serve::front::tenants::{self, Shared, Tenancy, Tenants};
use crate::cmd::serve::hub::server::Server;
use tokio::runtime::Runtime;

use crate::net::accept;
use crate::net::http::{
    CONNECTION_LIFETIME, allow_cross_origin, connection_builder, read_body, response, run,
};
/// Handler threads at most: the handlers only read the table or start
/// and stop streams, so a few are plenty.
const HANDLER_THREADS: usize = 4;

/// Answers HTTP on `listener` until the server stops.
pub(crate) fn serve(server: Arc<Server>, listener: TcpListener, runtime: Runtime) {
    run(runtime, accept_loop(&server, listener));
}

/// The API's event loop, built before serve announces its address.
pub(crate) fn runtime() -> std::io::Result<Runtime> {
    crate::net::http::runtime("serve-http-handler", HANDLER_THREADS)
}

/// Accepts connections and starts one task each, within the caps.
async fn accept_loop(server: &Arc<Server>, listener: TcpListener) {
    let tenants = Tenants::shared(MAX_CONNECTIONS, MAX_PER_ADDRESS);
    let origin = Origin::now();
    let mut next: Guest = 0;
    accept::until_stopped(
        || server.stopping(),
        listener,
        "HTTP",
        |stream, peer| {
            next += 1;
            admit(server, &tenants, origin, next, stream, peer)
        },
    )
    .await;
}

/// Starts connection `guest`'s task, closing the connections the caps
/// evict to make room for it.
fn admit(
    server: &Arc<Server>,
    tenants: &Shared,
    origin: Origin,
    guest: Guest,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let client = nagare_proto::serve::access::canonical(peer.ip());
    let evicted = &server.stats.api_evicted;
    tenants::enter(tenants, origin.elapsed(), guest, client, evicted);
    let tenancy = Arc::new(Tenancy {
        tenants: tenants.clone(),
        guest,
    });
    let server = Arc::clone(server);
    let task = tokio::spawn(async move {
        let service = service_fn(move |req| {
            handle(
                Arc::clone(&server),
                client,
                Arc::clone(&tenancy),
                origin,
                req,
            )
        });
        let conn = connection_builder().serve_connection(TokioIo::new(stream), service);
        // Errors are the client's (a reset, a bad request hyper already
        // answered); the lifetime bounds a client that never reads.
        let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
    });
    // The task cannot run (and end) before its handle is kept: the loop
    // has one thread, and it is here.
    tenants::keep(tenants, guest, task.abort_handle());
}

/// One request: the body read within its bounds, then the handler on
/// the blocking pool.
async fn handle(
    server: Arc<Server>,
    client: IpAddr,
    tenancy: Arc<Tenancy>,
    origin: Origin,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err((status, why)) => {
            server.stats.api_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(reply_response(Reply::error(status, why)));
        }
    };
    // Browser controllers read the NMOS APIs from another origin; the
    // rest of the API stays same-origin.
    let cors = parts.uri.path().starts_with("/x-nmos");
    let request = ApiRequest {
        method: parts.method,
        path: parts.uri.path().to_string(),
        authorization: parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        client,
        body,
    };
    // Whole and being answered: this connection gives way last, and is
    // idle again from its answer on.
    tenancy.set_session(true);
    let reply = tokio::task::spawn_blocking(move || answer(&server, &request))
        .await
        .unwrap_or_else(|_| Reply::error(500, "the request handler failed"));
    tenancy.set_session(false);
    tenancy.touch(origin.elapsed());
    let mut r = reply_response(reply);
    if cors {
        allow_cross_origin(r.headers_mut());
    }
    Ok(r)
}

fn reply_response(r: Reply) -> Response<Full<Bytes>> {
    let retry_after = r.retry_after;
    let mut resp = response(r.status, r.body, r.content_type, r.allow);
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(hyper::header::RETRY_AFTER, secs.into());
    }
    resp
}
