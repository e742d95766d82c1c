//! The HTTP API's routes: JSON for the stream table and the catalog,
//! Prometheus text on /metrics, /healthz. Handlers only read the table or
//! ask the server to launch or stop a stream; nothing here touches a
//! packet or a socket (the connections are `listener`'s).

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use hyper::Method;
use nagare_api::serve::{
    ApiError, Health, PathItem, PathList, PathReader, StreamKind, StreamList, StreamRequest,
};
use serde::Serialize;
use tracing::{info, warn};

use crate::cmd::serve::front::metrics;
use crate::cmd::serve::hub::media::Media;
use crate::cmd::serve::hub::server::{Pushed, Server, stopped};
use crate::cmd::serve::hub::table::{Entry, StreamId};
use crate::cmd::serve::nmos::connection_api::Serve;
use crate::nmos::api as nmos;

/// One request as the routes see it: the listener has read the body
/// within its bounds.
pub(crate) struct ApiRequest {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The Authorization header, when it is text.
    pub authorization: Option<String>,
    /// The client's address (IPv4-mapped IPv6 as IPv4).
    pub client: IpAddr,
    pub body: Vec<u8>,
}

/// An answer before it is written.
pub(crate) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    /// The methods a 405 names in its `Allow` header (RFC 9110 §15.5.6).
    pub allow: Option<&'static str>,
    /// Seconds a 503 asks the client to wait (`Retry-After`, RFC 9110
    /// §10.2.3), when time alone lifts the refusal.
    pub retry_after: Option<u64>,
}

impl Reply {
    fn json(status: u16, value: &impl Serialize) -> Reply {
        Reply {
            status,
            body: serde_json::to_vec_pretty(value).unwrap_or_default(),
            content_type: "application/json",
            allow: None,
            retry_after: None,
        }
    }

    /// `405 Method Not Allowed` on `path`, naming the methods it takes.
    fn not_allowed(path: &str, allow: &'static str) -> Reply {
        Reply {
            allow: Some(allow),
            ..Reply::error(405, format!("method not allowed on {path}: use {allow}"))
        }
    }

    pub(crate) fn error(status: u16, message: impl Into<String>) -> Reply {
        Reply::json(
            status,
            &ApiError {
                error: message.into(),
            },
        )
    }
}

/// The answer to `req`, counted as refused when it is an error.
pub(crate) fn answer(server: &Server, req: &ApiRequest) -> Reply {
    let reply = route(server, req);
    if reply.status >= 400 {
        server.stats.api_refused.fetch_add(1, Ordering::Relaxed);
    }
    reply
}

fn route(server: &Server, req: &ApiRequest) -> Reply {
    let path = req.path.as_str();
    let method = &req.method;
    // NMOS answers in its own error form, with its own OPTIONS.
    if path == nmos::PREFIX || path.starts_with("/x-nmos/") {
        let r = nmos::answer(
            &Serve(server),
            &server.token,
            &nmos::Request {
                method,
                path,
                authorization: req.authorization.as_deref(),
                body: &req.body,
                client: req.client,
            },
        );
        return Reply {
            status: r.status,
            body: r.body,
            content_type: r.content_type,
            allow: r.allow,
            retry_after: None,
        };
    }
    match (method, path) {
        (&Method::GET, "/healthz") => return health(server),
        (&Method::GET, "/") => return Reply::json(200, &index()),
        (_, "/healthz" | "/") => return Reply::not_allowed(path, "GET"),
        _ => {}
    }
    let auth = req.authorization.as_deref();
    if !server.token.admits(auth) {
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
    match (method, path) {
        (&Method::GET, "/metrics") => Reply {
            status: 200,
            body: metrics::render(server).into_bytes(),
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            allow: None,
            retry_after: None,
        },
        (&Method::GET, "/v3/paths/list") => Reply::json(200, &paths(server)),
        (&Method::GET, p) if p.starts_with(PATH_GET) => one_path(server, &p[PATH_GET.len()..]),
        (_, p) if p.starts_with(PATH_GET) => Reply::not_allowed(path, "GET"),
        (&Method::GET, "/v1/streams") => Reply::json(
            200,
            &StreamList {
                streams: server.table.infos(),
            },
        ),
        (&Method::POST, "/v1/streams") => create(server, &req.body, req.client),
        (m, p) if p.starts_with("/v1/streams/") => one_stream(server, m, &p[12..], req.client),
        (_, "/v1/streams") => Reply::not_allowed(path, "GET, POST"),
        (_, "/v3/paths/list" | "/metrics") => Reply::not_allowed(path, "GET"),
        _ => Reply::error(
            404,
            format!("no such endpoint {path}: GET / lists them, docs/openapi.yaml describes them"),
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
fn create(server: &Server, body: &[u8], client: IpAddr) -> Reply {
    let request: StreamRequest = match serde_json::from_slice(body) {
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
        Ok(pushed) => {
            let id = pushed.id();
            let status = match pushed {
                Pushed::Started(_) => 201,
                Pushed::Replayed(_) => 200,
            };
            created(&request, pushed, client);
            match server.table.get(id) {
                Some(e) => Reply::json(status, &e.info(id)),
                None => Reply::error(500, "the stream vanished as it started"),
            }
        }
        Err(r) => {
            let (status, message) = r.parts();
            let source = &request.source;
            warn!(
                status, %client, %source, reason = %message,
                "refused a push stream of '{source}' from {client} ({status}): {message}"
            );
            Reply {
                retry_after: r.retry_after(),
                ..Reply::error(status, message)
            }
        }
    }
}

/// Says what a push request made.
fn created(request: &StreamRequest, pushed: Pushed, client: IpAddr) {
    let (source, destinations) = (&request.source, request.destinations.join(", "));
    match pushed {
        Pushed::Started(id) => info!(
            stream = id, %source, %destinations, %client,
            "stream {id} created: '{source}' to {destinations}, for {client}"
        ),
        Pushed::Replayed(id) => info!(
            stream = id, %source, %client,
            "stream {id}: the same request again from {client} (its idempotency key); \
             nothing new started"
        ),
    }
}

/// `GET` or `DELETE /v1/streams/{id}`.
fn one_stream(server: &Server, method: &Method, id: &str, client: IpAddr) -> Reply {
    let Ok(id) = id.parse::<u64>() else {
        return Reply::error(
            404,
            format!("'{id}' is not a stream id; GET /v1/streams lists them"),
        );
    };
    let missing = || Reply::error(404, format!("no stream {id}; GET /v1/streams lists them"));
    match *method {
        Method::GET => server
            .table
            .get(id)
            .map_or_else(missing, |e| Reply::json(200, &e.info(id))),
        Method::DELETE => server.stop_stream(id).map_or_else(missing, |info| {
            stopped(&info, &format!("DELETE from {client}"));
            Reply::json(200, &info)
        }),
        _ => Reply::not_allowed("/v1/streams/{id}", "GET, DELETE"),
    }
}

/// MediaMTX's one-path query: `GET /v3/paths/get/{name}`.
const PATH_GET: &str = "/v3/paths/get/";

/// What `GET /` answers: every endpoint, so a newcomer with curl finds
/// the rest.
#[derive(Serialize)]
struct Index {
    service: &'static str,
    version: &'static str,
    endpoints: Vec<Endpoint>,
    spec: &'static str,
}

#[derive(Serialize)]
struct Endpoint {
    method: &'static str,
    path: &'static str,
    what: &'static str,
}

fn index() -> Index {
    let e = |method, path, what| Endpoint { method, path, what };
    Index {
        service: "nagare serve",
        version: crate::version::VERSION,
        endpoints: vec![
            e("GET", "/healthz", "liveness and load (no token needed)"),
            e("GET", "/v3/paths/list", "every path (MediaMTX style)"),
            e("GET", "/v3/paths/get/{name}", "one path (MediaMTX style)"),
            e("GET", "/v1/streams", "every stream, push or RTSP"),
            e("POST", "/v1/streams", "push a path to destinations"),
            e("GET", "/v1/streams/{id}", "one stream and its counters"),
            e("DELETE", "/v1/streams/{id}", "stop a stream"),
            e("GET", "/metrics", "OpenMetrics text for Prometheus"),
            e(
                "GET",
                "/x-nmos/node/v1.3/",
                "the NMOS IS-04 Node API (docs/nmos.md)",
            ),
            e(
                "GET",
                "/x-nmos/connection/v1.1/",
                "the NMOS IS-05 Connection API (docs/nmos.md)",
            ),
        ],
        spec: "docs/openapi.yaml",
    }
}

/// `GET /v3/paths/get/{name}`.
fn one_path(server: &Server, name: &str) -> Reply {
    let entries = server.table.entries();
    match server.media.get(name) {
        Some(m) => Reply::json(200, &path_item(&m, &entries)),
        None => Reply::error(
            404,
            format!("no path '{name}'; GET /v3/paths/list lists them"),
        ),
    }
}

/// `GET /v3/paths/list`, MediaMTX style.
fn paths(server: &Server) -> PathList {
    let entries = server.table.entries();
    let items: Vec<PathItem> = server
        .media
        .iter()
        .map(|m| path_item(m, &entries))
        .collect();
    PathList {
        item_count: items.len(),
        page_count: 1,
        items,
    }
}

/// One path as MediaMTX shows it, with the streams reading it.
fn path_item(m: &Media, entries: &[(StreamId, Entry)]) -> PathItem {
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
}
