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
//!   address: past them a connection gets `503` and is closed;
//! - a request head within [`HEAD_TIMEOUT`] and [`MAX_HEAD_BYTES`] (hyper
//!   answers `408` or `431`), at most [`MAX_HEADERS`] header lines;
//! - a body within [`BODY_TIMEOUT`] and [`MAX_BODY`] bytes (`408`, `413`);
//! - a connection lives at most [`CONNECTION_LIFETIME`], however busy,
//!   so a client that pipelines requests and never reads the answers is
//!   dropped; clients reconnect;
//! - running out of file descriptors slows accepting down, never ends it;
//! - on stop, open connections are dropped at once.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::error;

use crate::cmd::serve::front::accept;
use crate::cmd::serve::front::http::{ApiRequest, MAX_BODY, Reply, answer};
use crate::cmd::serve::hub::access::{Place, Places};
use crate::cmd::serve::hub::server::Server;

/// Open connections at most.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Open connections from one client address at most.
pub(crate) const MAX_PER_ADDRESS: usize = 32;
/// Time a client has to send a request's head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (request line and headers) read (hyper's
/// smallest read buffer is 8 KiB).
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header lines in one request.
pub(crate) const MAX_HEADERS: usize = 64;
/// Time a client has to send a request's body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection stays open.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Handler threads at most: the handlers only read the table or start
/// and stop streams, so a few are plenty.
const HANDLER_THREADS: usize = 4;

/// Answers HTTP on `listener` until the server stops.
pub(crate) fn serve(server: Arc<Server>, listener: TcpListener) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(HANDLER_THREADS)
        .thread_name("serve-http-handler")
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            error!("the HTTP API cannot start: {e}");
            return;
        }
    };
    runtime.block_on(accept_loop(&server, listener));
    // Connection tasks still open (a stalled client) are dropped here,
    // not waited for: a stop never waits on a client.
    runtime.shutdown_background();
}

/// Accepts connections and starts one task each, within the caps.
async fn accept_loop(server: &Arc<Server>, listener: TcpListener) {
    let places = Place::caps(MAX_CONNECTIONS, MAX_PER_ADDRESS);
    accept::until_stopped(server, listener, "HTTP", |stream, peer| {
        admit(server, &places, stream, peer)
    })
    .await;
}

/// Starts a connection's task, or turns it away with `503` when a cap is
/// reached.
fn admit(server: &Arc<Server>, places: &Places, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let client = nagare_proto::serve::access::canonical(peer.ip());
    let Some(place) = Place::take(places, client) else {
        server.stats.api_refused.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(turn_away(stream));
        return;
    };
    let server = Arc::clone(server);
    tokio::spawn(async move {
        let _place = place;
        let service = service_fn(move |req| handle(Arc::clone(&server), client, req));
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_buf_size(MAX_HEAD_BYTES)
            .max_headers(MAX_HEADERS);
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        // Errors are the client's (a reset, a bad request hyper already
        // answered); the lifetime bounds a client that never reads.
        let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
    });
}

/// The whole answer to a connection over the caps.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
Content-Length: 68\r\nConnection: close\r\nRetry-After: 1\r\n\r\n\
{\"error\": \"too many connections: close some, or retry in a second\"}\n";

/// Writes [`BUSY`] to a connection over the caps and closes it, all
/// within a second (the client may not read at all). The client's
/// request is read and dropped after the answer: closing with it unread
/// would reset the connection, and the client would lose the answer.
async fn turn_away(mut stream: tokio::net::TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}

/// One request: the body read within its bounds, then the handler on
/// the blocking pool.
async fn handle(
    server: Arc<Server>,
    client: IpAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(reply) => {
            server.stats.api_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(response(reply));
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
    let reply = tokio::task::spawn_blocking(move || answer(&server, &request))
        .await
        .unwrap_or_else(|_| Reply::error(500, "the request handler failed"));
    let mut r = response(reply);
    if cors {
        allow_cross_origin(r.headers_mut());
    }
    Ok(r)
}

/// The CORS headers of the NMOS APIs (IS-04 "APIs: Server Side
/// Implementation Notes").
fn allow_cross_origin(h: &mut hyper::HeaderMap) {
    use hyper::header;
    let pairs = [
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        (
            header::ACCESS_CONTROL_ALLOW_METHODS,
            "GET, PUT, POST, PATCH, HEAD, OPTIONS, DELETE",
        ),
        (
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            "Content-Type, Accept, Authorization",
        ),
        (header::ACCESS_CONTROL_MAX_AGE, "3600"),
    ];
    for (name, value) in pairs {
        h.insert(name, HeaderValue::from_static(value));
    }
}

/// The body, at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`].
async fn read_body(body: Incoming) -> Result<Vec<u8>, Reply> {
    let limit = usize::try_from(MAX_BODY).unwrap_or(usize::MAX);
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, limit).collect()).await {
        Err(_) => Err(Reply::error(
            408,
            format!(
                "the request body did not arrive within {} s",
                BODY_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Reply::error(413, format!("body over {MAX_BODY} bytes")))
        }
        Ok(Err(e)) => Err(Reply::error(
            400,
            format!("the request body could not be read: {e}"),
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes().to_vec()),
    }
}

/// A reply as hyper's response, with a Content-Length (simple clients,
/// shell scripts and monitoring probes, read it more easily than chunks).
fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(reply.body)));
    *r.status_mut() = hyper::StatusCode::from_u16(reply.status)
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if let Some(allow) = reply.allow {
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_says_its_length_and_is_json() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("too many connections")
        );
    }
}
