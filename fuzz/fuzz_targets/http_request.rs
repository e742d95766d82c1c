//! serve's HTTP API front: hyper's HTTP/1 server built exactly as serve's
//! listener builds it, with serve's bounds
//! (`nagare_proto::serve::api_limits`), fed the input as the bytes one
//! client sends before it closes its side.
//!
//! Input: the client's bytes (up to a few MiB).
//! Invariants: no panic; the connection ends within 5 s of the client's
//! last byte (no hang); every answer is a status line of a known code;
//! no request reaches the service with more than `MAX_HEADERS` header
//! lines or a body over `MAX_BODY` bytes (past them: `431`, `413`); what
//! the client reads back is bounded by what it sent.

#![no_main]

use std::cell::RefCell;
use std::convert::Infallible;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use libfuzzer_sys::fuzz_target;
use nagare_proto::serve::api_limits::{HEAD_TIMEOUT, MAX_BODY, MAX_HEAD_BYTES, MAX_HEADERS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest one input may keep the connection open after its last byte.
const DEADLINE: Duration = Duration::from_secs(5);

/// The service: reads the body within `MAX_BODY` as serve does, checks
/// what reached it, answers with the body's length.
async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    assert!(
        parts.headers.len() <= MAX_HEADERS,
        "{} header lines reached the service",
        parts.headers.len()
    );
    let limit = usize::try_from(MAX_BODY).unwrap_or(usize::MAX);
    let status = match Limited::new(body, limit).collect().await {
        Ok(b) => {
            let len = b.to_bytes().len();
            assert!(len as u64 <= MAX_BODY, "a body of {len} bytes was read");
            StatusCode::OK
        }
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => StatusCode::PAYLOAD_TOO_LARGE,
        Err(_) => StatusCode::BAD_REQUEST,
    };
    let mut r = Response::new(Full::new(Bytes::from(parts.uri.path().len().to_string())));
    *r.status_mut() = status;
    Ok(r)
}

/// Every status line in what the client read is `HTTP/1.x NNN` of a
/// code hyper or the service gives.
fn check_answers(read: &[u8]) {
    let text = String::from_utf8_lossy(read);
    for line in text.split("\r\n").filter(|l| l.starts_with("HTTP/")) {
        let code: u16 = line
            .get(9..12)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        assert!(
            [200, 400, 408, 413, 414, 431, 500, 501, 505].contains(&code),
            "{line:?}"
        );
    }
}

thread_local! {
    static RUNTIME: RefCell<tokio::runtime::Runtime> = RefCell::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    );
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 4 << 20 {
        return;
    }
    RUNTIME.with(|rt| {
        rt.borrow().block_on(async {
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_nanos(HEAD_TIMEOUT.as_nanos()))
                .max_buf_size(MAX_HEAD_BYTES)
                .max_headers(MAX_HEADERS);
            let conn = builder.serve_connection(TokioIo::new(server), service_fn(answer));
            let talk = async {
                let (mut rx, mut tx) = tokio::io::split(&mut client);
                let send = async {
                    let _ = tx.write_all(data).await;
                    let _ = tx.shutdown().await;
                };
                let mut read = Vec::new();
                let recv = rx.read_to_end(&mut read);
                let (_, _) = tokio::join!(send, recv);
                read
            };
            let both = async { tokio::join!(conn, talk) };
            let (_, read) = tokio::time::timeout(DEADLINE, both)
                .await
                .expect("the connection outlived its client's bytes");
            // Each answer is a few hundred bytes; one per request at most.
            assert!(read.len() <= 512 * (data.len() / 16 + 1), "{}", read.len());
            check_answers(&read);
        })
    });
});
