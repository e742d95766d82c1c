//! The HTTP API on its own thread (tiny_http, synchronous): JSON for the
//! stream table and the catalog, Prometheus text on /metrics, /healthz.
//! Handlers only read the table or ask the server to launch or stop a
//! stream; nothing here touches a packet.

use std::io::Read;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nagare_api::serve::{
    ApiError, Health, PathItem, PathList, PathReader, StreamKind, StreamList, StreamRequest,
};
use serde::Serialize;
use tiny_http::{Header, Method, Request, Response};

use crate::cmd::serve::front::metrics;
use crate::cmd::serve::hub::server::{Refusal, Server};

/// Largest request body read.
const MAX_BODY: u64 = 64 * 1024;

/// An answer before it is written.
struct Reply {
    status: u16,
    body: Vec<u8>,
    content_type: &'static str,
}

impl Reply {
    fn json(status: u16, value: &impl Serialize) -> Reply {
        Reply {
            status,
            body: serde_json::to_vec_pretty(value).unwrap_or_default(),
            content_type: "application/json",
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Reply {
        Reply::json(
            status,
            &ApiError {
                error: message.into(),
            },
        )
    }
}

/// Answers requests until the server stops.
pub(crate) fn serve(server: Arc<Server>, http: tiny_http::Server) {
    while !server.stopping() {
        match http.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(req)) => answer(&server, req),
            Ok(None) => {}
            Err(e) => {
                eprintln!("nagare serve: HTTP accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn answer(server: &Server, mut req: Request) {
    let reply = route(server, &mut req);
    if reply.status >= 400 {
        server.stats.api_refused.fetch_add(1, Ordering::Relaxed);
    }
    // Content-Length rather than chunks, whatever the size: simple
    // clients (shell scripts, monitoring probes) read it more easily.
    let mut response = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_chunked_threshold(usize::MAX);
    if let Ok(h) = Header::from_bytes("Content-Type", reply.content_type) {
        response = response.with_header(h);
    }
    let _ = req.respond(response);
}

fn route(server: &Server, req: &mut Request) -> Reply {
    let url = req.url().to_string();
    let path = url.split('?').next().unwrap_or("");
    let method = req.method().clone();
    if path == "/healthz" && method == Method::Get {
        return health(server);
    }
    let auth = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    if !server.token.admits(auth.as_deref()) {
        let why = if auth.is_some() {
            "wrong token"
        } else {
            "missing token"
        };
        return Reply::error(
            401,
            format!("{why}: send the server's --token as 'Authorization: Bearer TOKEN'"),
        );
    }
    let client = req.remote_addr().map(|a| a.ip());
    match (method, path) {
        (Method::Get, "/metrics") => Reply {
            status: 200,
            body: metrics::render(server).into_bytes(),
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
        },
        (Method::Get, "/v3/paths/list") => Reply::json(200, &paths(server)),
        (Method::Get, "/v1/streams") => Reply::json(
            200,
            &StreamList {
                streams: server.table.infos(),
            },
        ),
        (Method::Post, "/v1/streams") => create(server, req, client),
        (m, p) if p.starts_with("/v1/streams/") => one_stream(server, &m, &p[12..]),
        (_, "/v1/streams" | "/v3/paths/list" | "/metrics") => {
            Reply::error(405, format!("method not allowed on {path}"))
        }
        _ => Reply::error(
            404,
            format!("no such endpoint {path}: see docs/openapi.yaml for the API"),
        ),
    }
}

fn health(server: &Server) -> Reply {
    Reply::json(
        200,
        &Health {
            status: "ok".into(),
            streams: server.table.len(),
            rtsp_sessions: server.stats.rtsp_sessions.load(Ordering::Relaxed).max(0) as u64,
            pacer_load: server.pacers.load(),
            time_ns: u64::try_from(crate::clock::epoch_ns()).unwrap_or(u64::MAX),
        },
    )
}

/// `POST /v1/streams`.
fn create(server: &Server, req: &mut Request, client: Option<IpAddr>) -> Reply {
    let Some(client) = client else {
        return Reply::error(400, "the client's address is unknown");
    };
    let mut body = Vec::new();
    if req
        .as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .is_err()
    {
        return Reply::error(400, "the request body could not be read");
    }
    if body.len() as u64 > MAX_BODY {
        return Reply::error(413, format!("body over {MAX_BODY} bytes"));
    }
    let request: StreamRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Reply::error(
                400,
                format!(
                    "the body is not a stream request ({e}); send JSON like \
                     {{\"source\": \"clip.ts\", \"destinations\": [\"127.0.0.1:5000\"]}}"
                ),
            );
        }
    };
    match server.push(&request, client) {
        Ok(id) => match server.table.get(id) {
            Some(e) => Reply::json(201, &e.info(id)),
            None => Reply::error(500, "the stream vanished as it started"),
        },
        Err(r) => {
            let (status, message) = r.parts();
            if let Refusal::Admission(_) = r {
                eprintln!("nagare serve: refused a push stream: {message}");
            }
            Reply::error(status, message)
        }
    }
}

/// `GET` or `DELETE /v1/streams/{id}`.
fn one_stream(server: &Server, method: &Method, id: &str) -> Reply {
    let Ok(id) = id.parse::<u64>() else {
        return Reply::error(
            404,
            format!("'{id}' is not a stream id; GET /v1/streams lists them"),
        );
    };
    let missing = || Reply::error(404, format!("no stream {id}; GET /v1/streams lists them"));
    match method {
        Method::Get => server
            .table
            .get(id)
            .map_or_else(missing, |e| Reply::json(200, &e.info(id))),
        Method::Delete => server
            .stop_stream(id)
            .map_or_else(missing, |info| Reply::json(200, &info)),
        _ => Reply::error(405, "use GET or DELETE on /v1/streams/{id}"),
    }
}

/// `GET /v3/paths/list`, MediaMTX style.
fn paths(server: &Server) -> PathList {
    let entries = server.table.entries();
    let items: Vec<PathItem> = server
        .media
        .iter()
        .map(|m| {
            let mine = entries.iter().filter(|(_, e)| e.source == m.name);
            let readers = mine
                .clone()
                .map(|(id, e)| PathReader {
                    kind: match e.kind {
                        StreamKind::Rtsp => "rtspSession".into(),
                        StreamKind::Push => "pushStream".into(),
                    },
                    id: id.to_string(),
                })
                .collect();
            PathItem {
                name: m.name.clone(),
                source: m.source(),
                ready: true,
                tracks: vec![m.codec().into()],
                rate_bps: m.rate().bps(),
                bytes_sent: mine
                    .map(|(_, e)| e.counters.bytes.load(Ordering::Relaxed))
                    .sum(),
                readers,
            }
        })
        .collect();
    PathList {
        item_count: items.len(),
        page_count: 1,
        items,
    }
}
