//! The NMOS APIs' entry (`/x-nmos/`: OPTIONS, the token, the Connection
//! API handed to [`connection_api`]) and the IS-04 Node API v1.3
//! (`/x-nmos/node/v1.3/`), read-only: self, devices, sources, flows,
//! senders, receivers, each collection and each resource by id, with and
//! without the trailing slash. Errors have the NMOS form (`{"code",
//! "error", "debug"}`); every answer under `/x-nmos/` carries CORS
//! headers (the listener adds them) and `OPTIONS` answers any of it, as
//! browser controllers need.
//!
//! The token rule is the node's API's: with a `--token`, the Node API
//! wants it too (and the node's endpoint says `authorization: true`); on
//! loopback without one it is open. A registry never reads the Node API
//! (the node POSTs to it), so only controllers need the token.

use std::net::IpAddr;

use hyper::Method;
use nagare_proto::nmos::resource::API_VERSION;
use nagare_proto::nmos::{Kind, Resource};
use nagare_proto::serve::Token;
use serde_json::{Value, json};

use crate::nmos::connection_api::{self, Connections};
use crate::nmos::reply::{Reply, error, ok};

/// The prefix every NMOS API is served under.
pub(crate) const PREFIX: &str = "/x-nmos";

/// One request under [`PREFIX`]: the listener has read the body.
pub(crate) struct Request<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    pub body: &'a [u8],
    /// The client's address: an IS-05 activation's destinations are
    /// checked as this client's push request would be.
    pub client: IpAddr,
}

/// What a node serves the APIs from.
pub(crate) trait Node {
    /// Every resource as of now, in parent order, with versions.
    fn resources(&self) -> Vec<Resource>;
    /// Its IS-05 senders and receivers.
    fn connections(&self) -> &dyn Connections;
}

/// The answer to `req` for `node`, whose API wants `token`.
pub(crate) fn answer(node: &dyn Node, token: &Token, req: &Request) -> Reply {
    let (method, path) = (req.method, req.path);
    if method == Method::OPTIONS {
        return Reply {
            status: 200,
            body: Vec::new(),
            content_type: "text/plain",
            allow: Some("GET, HEAD, PATCH, POST, OPTIONS"),
        };
    }
    if !token.admits(req.authorization) {
        return error(
            401,
            "missing or wrong token: send the node's --token as 'Authorization: Bearer TOKEN'",
        );
    }
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.split('/').skip(2).collect();
    if let ["connection", rest @ ..] = segments.as_slice() {
        let request = connection_api::Request {
            method,
            rest,
            body: req.body,
            client: req.client,
        };
        return connection_api::answer(node.connections(), &request);
    }
    if method == Method::PUT
        && let ["node", _, "receivers", id, "target"] = segments.as_slice()
    {
        // IS-04 v1.3 keeps this deprecated call; 501 is its answer for a
        // node that connects receivers through IS-05 only.
        return error(
            501,
            &format!(
                "IS-04's receiver target is not implemented: connect receiver {id} through \
                 IS-05, PATCH /x-nmos/connection/v1.1/single/receivers/{id}/staged"
            ),
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut reply = error(405, &format!("{path} is read-only: use GET"));
        reply.allow = Some("GET, HEAD, OPTIONS");
        return reply;
    }
    match segments.as_slice() {
        [] => ok(json!(["node/", "connection/"])),
        ["node"] => ok(json!([format!("{API_VERSION}/")])),
        ["node", v, rest @ ..] if *v == API_VERSION => resources(node, rest),
        ["node", v, ..] => error(
            404,
            &format!("Node API version {v} is not served: {API_VERSION} is"),
        ),
        _ => error(
            404,
            &format!("no NMOS API at {path}: /x-nmos/node/ and /x-nmos/connection/ are"),
        ),
    }
}

fn resources(node: &dyn Node, rest: &[&str]) -> Reply {
    if rest.is_empty() {
        let base: Vec<String> = [
            "self",
            "sources",
            "flows",
            "devices",
            "senders",
            "receivers",
        ]
        .iter()
        .map(|s| format!("{s}/"))
        .collect();
        return ok(json!(base));
    }
    let all = node.resources();
    if rest == ["self"] {
        return match all.iter().find(|r| r.kind() == Kind::Node) {
            Some(node) => ok(node.to_json()),
            None => error(500, "the node resource is missing"),
        };
    }
    let Some(kind) = Kind::ALL
        .into_iter()
        .find(|k| *k != Kind::Node && k.plural() == rest[0])
    else {
        return error(404, &format!("no collection '{}' in the Node API", rest[0]));
    };
    let of_kind = all.iter().filter(|r| r.kind() == kind);
    match rest {
        [_] => ok(Value::Array(of_kind.map(Resource::to_json).collect())),
        [_, id] => match all
            .iter()
            .find(|r| r.kind() == kind && r.id().to_string() == *id)
        {
            Some(r) => ok(r.to_json()),
            None => error(404, &format!("no {} with id '{id}'", kind.name())),
        },
        _ => error(404, &format!("nothing at {}", rest.join("/"))),
    }
}
