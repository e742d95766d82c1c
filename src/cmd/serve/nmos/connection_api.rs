//! The IS-05 Connection API v1.1 (`/x-nmos/connection/v1.1/`) on serve's
//! HTTP listener: single senders (constraints, staged, active,
//! transportfile, transporttype), bulk staging, and the (empty) receiver
//! collections. Every decision is nagare-proto's `nmos::Connection`;
//! activations run through [`activate::apply`](super::activate::apply), the stream table's
//! push path.

use std::net::IpAddr;

use hyper::Method;
use nagare_proto::nmos::ResourceId;
use nagare_proto::nmos::connection::{ConnectionError, Patched, sender_sdp};
use nagare_proto::nmos::model::{CONNECTION_VERSION, TRANSPORT_RTP};
use nagare_proto::sdp::RefClock;
use serde_json::{Value, json};

use crate::cmd::serve::hub::server::Server;
use crate::cmd::serve::nmos::activate;
use crate::cmd::serve::nmos::node::Node;
use crate::cmd::serve::nmos::reply::{Reply, error, ok};
use crate::cmd::serve::nmos::senders::{Sender, Target, tai_now};

/// One Connection API request (the part after `/x-nmos/connection/`).
pub(crate) struct Request<'a> {
    pub method: &'a Method,
    pub rest: &'a [&'a str],
    pub body: &'a [u8],
    pub client: IpAddr,
}

const READ: &str = "GET, HEAD, OPTIONS";

/// The answer to `req`.
pub(crate) fn answer(server: &Server, req: &Request) -> Reply {
    let read = req.method == Method::GET || req.method == Method::HEAD;
    let rest = req.rest;
    match rest {
        [] if read => ok(json!([format!("{CONNECTION_VERSION}/")])),
        [v, ..] if *v != CONNECTION_VERSION => error(
            404,
            &format!("Connection API version {v} is not served: {CONNECTION_VERSION} is"),
        ),
        [_] if read => ok(json!(["bulk/", "single/"])),
        [_, "single"] if read => ok(json!(["senders/", "receivers/"])),
        [_, "bulk"] if read => ok(json!(["senders/", "receivers/"])),
        [_, "single" | "bulk", "receivers", ..] if read || rest.len() <= 3 => receivers(req),
        [_, "bulk", "senders"] if req.method == Method::POST => bulk(server, req),
        [_, "bulk", "senders"] => not_allowed(rest, "POST, OPTIONS"),
        [_, "single", "senders"] if read => ok(sender_ids(server)),
        [_, "single", "senders", id, tail @ ..] => single(server, req, id, tail),
        _ if !read => not_allowed(rest, READ),
        _ => error(404, &format!("nothing at connection/{}", rest.join("/"))),
    }
}

fn not_allowed(rest: &[&str], allow: &'static str) -> Reply {
    let mut r = error(405, &format!("connection/{} takes {allow}", rest.join("/")));
    r.allow = Some(allow);
    r
}

/// serve has no receivers: the collections are empty, a bulk POST
/// answers 404 for each id it names.
fn receivers(req: &Request) -> Reply {
    match (req.rest, req.method) {
        ([_, "single", "receivers"], _) => ok(json!([])),
        ([_, "bulk", "receivers"], &Method::POST) => {
            let ids = bulk_ids(req.body);
            ok(Value::Array(
                ids.into_iter()
                    .map(|id| json!({"id": id, "code": 404, "error": "serve has no receivers", "debug": null}))
                    .collect(),
            ))
        }
        ([_, "bulk", "receivers"], _) => not_allowed(req.rest, "POST, OPTIONS"),
        _ => error(404, "serve has no receivers"),
    }
}

/// The ids a bulk body names (only those that are UUIDs).
fn bulk_ids(body: &[u8]) -> Vec<String> {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["id"].as_str())
                .filter(|id| ResourceId::parse(id).is_some())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn sender_ids(server: &Server) -> Value {
    let ids = server
        .nmos
        .connections(&server.media, &server.table.infos(), |table| {
            table.keys().map(|id| format!("{id}/")).collect::<Vec<_>>()
        });
    json!(ids)
}

/// `single/senders/{id}/…`.
fn single(server: &Server, req: &Request, id: &str, tail: &[&str]) -> Reply {
    let Some(id) = ResourceId::parse(id).filter(|p| p.to_string() == id) else {
        return error(404, &format!("no sender with id '{id}'"));
    };
    let read = req.method == Method::GET || req.method == Method::HEAD;
    server
        .nmos
        .connections(&server.media, &server.table.infos(), |table| {
            let Some(sender) = table.get_mut(&id) else {
                return error(404, &format!("no sender with id '{id}'"));
            };
            match tail {
                [] if read => ok(json!([
                    "constraints/",
                    "staged/",
                    "active/",
                    "transportfile/",
                    "transporttype/"
                ])),
                ["constraints"] if read => ok(sender.conn.constraints_json()),
                ["staged"] if read => ok(sender.conn.staged_json()),
                ["staged"] if req.method == Method::PATCH => {
                    match stage(server, id, sender, req.body, req.client) {
                        Ok((status, body)) => {
                            let mut r = ok(body);
                            r.status = status;
                            r
                        }
                        Err(e) => error(e.status(), &e.to_string()),
                    }
                }
                ["staged"] => not_allowed(req.rest, "GET, HEAD, PATCH, OPTIONS"),
                ["active"] if read => ok(sender.conn.active_json()),
                ["transporttype"] if read => ok(json!(TRANSPORT_RTP)),
                ["transportfile"] if read => transport_file(server, sender),
                [] | ["constraints" | "active" | "transporttype" | "transportfile"] => {
                    not_allowed(req.rest, READ)
                }
                _ => error(404, &format!("nothing at {}", tail.join("/"))),
            }
        })
}

/// A PATCH of one sender's `/staged`: the status and body to answer.
fn stage(
    server: &Server,
    id: ResourceId,
    sender: &mut Sender,
    body: &[u8],
    client: IpAddr,
) -> Result<(u16, Value), ConnectionError> {
    match sender.conn.patch(tai_now(), body)? {
        Patched::Staged => Ok((200, sender.conn.staged_json())),
        Patched::Scheduled => {
            sender.client = client;
            Ok((202, sender.conn.staged_json()))
        }
        Patched::Activate(a) => {
            sender.client = client;
            let result = activate::apply(server, id, sender, &a);
            sender.conn.complete(tai_now(), a, result).map(|v| (200, v))
        }
    }
}

/// `POST bulk/senders`: each entry staged as its own PATCH.
fn bulk(server: &Server, req: &Request) -> Reply {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(req.body) else {
        return error(
            400,
            "the body must be a JSON array of {\"id\": SENDER_ID, \"params\": {...}}",
        );
    };
    let mut results = Vec::with_capacity(items.len());
    for item in &items {
        let (Some(text), Some(params)) = (item["id"].as_str(), item.get("params")) else {
            return error(400, "every bulk entry needs an id and params");
        };
        let Some(id) = ResourceId::parse(text).filter(|p| p.to_string() == text) else {
            return error(400, &format!("bulk id '{text}' is not a lower-case UUID"));
        };
        let body = params.to_string();
        let outcome = server
            .nmos
            .connections(&server.media, &server.table.infos(), |table| {
                let sender = table.get_mut(&id)?;
                Some(stage(server, id, sender, body.as_bytes(), req.client))
            });
        results.push(match outcome {
            None => json!({"id": text, "code": 404, "error": format!("no sender with id '{text}'"), "debug": null}),
            Some(Ok((code, _))) => json!({"id": text, "code": code}),
            Some(Err(e)) => {
                json!({"id": text, "code": e.status(), "error": e.to_string(), "debug": null})
            }
        });
    }
    ok(Value::Array(results))
}

/// `transportfile`: the SDP of what the sender's active parameters
/// send, or 404 while they send nowhere.
fn transport_file(server: &Server, sender: &Sender) -> Reply {
    let (path, track) = match &sender.target {
        Target::Path(p) | Target::Push(_, p) => (p, Node::track(&server.media, p)),
        Target::Stripe { path, .. } => (path, Node::stripe_track(&server.media, path)),
    };
    let Some(track) = track else {
        return error(404, &format!("path '{path}' is gone"));
    };
    let clock = server.nmos.clock_mac().map(RefClock::LocalMac);
    let session = sender.conn.activated_at().map_or(1, |t| t.secs);
    match sender_sdp(path, track, &sender.conn.active().legs, clock, session) {
        Some(sdp) => Reply {
            status: 200,
            body: sdp.into_bytes(),
            content_type: "application/sdp",
            allow: None,
        },
        None => error(
            404,
            "the sender has no active destination: activate one through /staged",
        ),
    }
}
