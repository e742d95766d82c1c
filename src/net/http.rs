//! What every HTTP listener of the binary does the same way on hyper:
//! the connection's limits (head size, header count, head timeout), the
//! body read within its bounds, a reply turned into a response with a
//! Content-Length, and the CORS headers of the NMOS APIs. serve's API
//! listener and the NMOS API of `recv --nmos` both use it.

use std::future::Future;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::{HeaderMap, Response};
use hyper_util::rt::TokioTimer;
use tokio::runtime::Runtime;

use nagare_proto::serve::api_limits::{self as limits, MAX_BODY, MAX_HEAD_BYTES, MAX_HEADERS};

/// Time a client has to send a request's head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_nanos(limits::HEAD_TIMEOUT.as_nanos());
/// Time a client has to send a request's body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_nanos(limits::BODY_TIMEOUT.as_nanos());
/// Longest a connection stays open.
pub(crate) const CONNECTION_LIFETIME: Duration =
    Duration::from_nanos(limits::CONNECTION_LIFETIME.as_nanos());

/// A single-threaded tokio runtime for a listener, with up to
/// `handlers` blocking threads named `name` for the request handlers.
/// Build it before the listener is announced: it takes descriptors (its
/// poller), which a process out of them after the announcement (clients
/// holding every one) could no longer get.
pub(crate) fn runtime(name: &str, handlers: usize) -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(handlers)
        .thread_name(name)
        .build()
}

/// Runs `accept_loop` on `runtime` (the caller's thread is its event
/// loop). Connection tasks still open when it returns (a stalled client)
/// are dropped, not waited for: a stop never waits on a client.
pub(crate) fn run(runtime: Runtime, accept_loop: impl Future<Output = ()>) {
    runtime.block_on(accept_loop);
    runtime.shutdown_background();
}

/// hyper's HTTP/1 connection settings with the limits: a head within
/// [`HEAD_TIMEOUT`] and `MAX_HEAD_BYTES` (hyper answers `408` or `431`),
/// at most `MAX_HEADERS` header lines.
pub(crate) fn connection_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    builder
}

/// The body, at most `MAX_BODY` bytes within [`BODY_TIMEOUT`]; else the
/// status (`408`, `413`, `400`) and why.
pub(crate) async fn read_body(body: Incoming) -> Result<Vec<u8>, (u16, String)> {
    let limit = usize::try_from(MAX_BODY).unwrap_or(usize::MAX);
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, limit).collect()).await {
        Err(_) => Err((
            408,
            format!(
                "the request body did not arrive within {} s",
                BODY_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err((413, format!("body over {MAX_BODY} bytes")))
        }
        Ok(Err(e)) => Err((400, format!("the request body could not be read: {e}"))),
        Ok(Ok(collected)) => Ok(collected.to_bytes().to_vec()),
    }
}

/// A reply as hyper's response, with a Content-Length (simple clients,
/// shell scripts and monitoring probes, read it more easily than chunks)
/// and the methods a `405` (or `OPTIONS`) names in `Allow`.
pub(crate) fn response(
    status: u16,
    body: Vec<u8>,
    content_type: &'static str,
    allow: Option<&'static str>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(allow) = allow {
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    }
    r
}

/// The CORS headers of the NMOS APIs (IS-04 "APIs: Server Side
/// Implementation Notes"): browser controllers read them from another
/// origin.
pub(crate) fn allow_cross_origin(h: &mut HeaderMap) {
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
