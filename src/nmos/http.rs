//! The HTTP listener of a node that has no API of its own besides NMOS
//! (`recv --nmos`; serve answers NMOS on its own listener): hyper on a
//! single-threaded tokio runtime on the caller's thread, one task per
//! connection with the limits of `net::http` (head size and timeout,
//! body size and timeout, a connection's lifetime), at most
//! [`MAX_CONNECTIONS`] open (a newcomer past them is closed at once: a
//! controller or two and a registry's checks need a handful), handlers
//! on a small blocking pool. Only `/x-nmos/` is served, every answer
//! with the NMOS CORS headers.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::AUTHORIZATION;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::net::accept;
use crate::net::http::{
    CONNECTION_LIFETIME, allow_cross_origin, connection_builder, read_body, response, run, runtime,
};
use crate::nmos::api::{self, PREFIX};
use crate::nmos::reply::{Reply, error};

/// Connections open at most.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Handler threads at most.
const HANDLER_THREADS: usize = 2;

/// What answers a request under `/x-nmos/`.
pub(crate) type Handler = dyn Fn(&api::Request) -> Reply + Send + Sync;

/// Answers HTTP on `listener` with `handler` until `stopping`.
pub(crate) fn serve(listener: TcpListener, stopping: impl Fn() -> bool, handler: Arc<Handler>) {
    let open = Arc::new(AtomicUsize::new(0));
    let accepting = accept::until_stopped(stopping, listener, "HTTP", |stream, peer| {
        admit(&handler, &open, stream, peer);
    });
    match runtime("nmos-http-handler", HANDLER_THREADS) {
        Ok(r) => run(r, accepting),
        Err(e) => tracing::error!("the NMOS API cannot start: {e}"),
    }
}

/// Starts the connection's task, unless [`MAX_CONNECTIONS`] are open.
fn admit(
    handler: &Arc<Handler>,
    open: &Arc<AtomicUsize>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
        open.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let client = nagare_proto::serve::access::canonical(peer.ip());
    let (handler, open) = (Arc::clone(handler), Arc::clone(open));
    tokio::spawn(async move {
        let service = service_fn(move |req| handle(Arc::clone(&handler), client, req));
        let conn = connection_builder().serve_connection(TokioIo::new(stream), service);
        // Errors are the client's; the lifetime bounds one that never
        // reads.
        let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        open.fetch_sub(1, Ordering::Relaxed);
    });
}

/// One request: the body read within its bounds, then the handler on
/// the blocking pool.
async fn handle(
    handler: Arc<Handler>,
    client: IpAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let reply = match read_body(body).await {
        Err((status, why)) => error(status, &why),
        Ok(body) => {
            let path = parts.uri.path().to_string();
            let authorization = parts
                .headers
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let method = parts.method;
            tokio::task::spawn_blocking(move || {
                if path != PREFIX && !path.starts_with("/x-nmos/") {
                    return error(
                        404,
                        &format!("nothing at {path}: the NMOS APIs are under /x-nmos/"),
                    );
                }
                handler(&api::Request {
                    method: &method,
                    path: &path,
                    authorization: authorization.as_deref(),
                    body: &body,
                    client,
                })
            })
            .await
            .unwrap_or_else(|_| error(500, "the request handler failed"))
        }
    };
    let mut r = response(reply.status, reply.body, reply.content_type, reply.allow);
    allow_cross_origin(r.headers_mut());
    Ok(r)
}
