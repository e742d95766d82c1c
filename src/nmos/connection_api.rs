//! The routes of the IS-05 Connection API v1.1
//! (`/x-nmos/connection/v1.1/`), single and bulk, for senders and
//! receivers alike. A node hands its resources over as [`Connections`]:
//! serve's senders (their activations start and stop push streams),
//! `recv --nmos`'s receiver (its activations start and stop receiving).
//! Every decision is nagare-proto's `nmos::Connection`; this module only
//! turns paths into calls and answers into replies.

use std::net::IpAddr;

use hyper::Method;
use nagare_proto::nmos::ResourceId;
use nagare_proto::nmos::connection::{Activation, Connection, ConnectionError, Patched, Role};
use nagare_proto::nmos::model::{CONNECTION_VERSION, TRANSPORT_RTP};
use serde_json::{Value, json};

use crate::nmos::reply::{Reply, error, ok};
use crate::nmos::tai_now;

/// One Connection API request (the part after `/x-nmos/connection/`).
pub(crate) struct Request<'a> {
    pub method: &'a Method,
    pub rest: &'a [&'a str],
    pub body: &'a [u8],
    /// The client: a sender's activation sends where this client's push
    /// request could.
    pub client: IpAddr,
}

/// How the routes show a resource: one of its machine's JSON views.
pub(crate) type Show<'a> = &'a mut dyn FnMut(&Connection) -> Value;

/// A PATCH carried out: the status and body to answer, or the refusal;
/// `None` when there is no such resource.
pub(crate) type Staged = Option<Result<(u16, Value), ConnectionError>>;

/// A node's IS-05 resources, as the routes reach them.
pub(crate) trait Connections {
    /// The ids of its senders or of its receivers.
    fn ids(&self, role: Role) -> Vec<ResourceId>;
    /// `show` of resource `id`'s machine; `None` when there is no such
    /// resource.
    fn read(&self, role: Role, id: ResourceId, show: Show<'_>) -> Option<Value>;
    /// A PATCH of resource `id`'s `/staged` by `client`, carried out (an
    /// immediate activation applied).
    fn stage(&self, role: Role, id: ResourceId, body: &[u8], client: IpAddr) -> Staged;
    /// Sender `id`'s `transportfile`.
    fn transport_file(&self, id: ResourceId) -> Reply;
}

const READ: &str = "GET, HEAD, OPTIONS";

/// The answer to `req`.
pub(crate) fn answer(node: &dyn Connections, req: &Request) -> Reply {
    let read = req.method == Method::GET || req.method == Method::HEAD;
    let rest = req.rest;
    match rest {
        [] if read => ok(json!([format!("{CONNECTION_VERSION}/")])),
        [v, ..] if *v != CONNECTION_VERSION => error(
            404,
            &format!("Connection API version {v} is not served: {CONNECTION_VERSION} is"),
        ),
        [_] if read => ok(json!(["bulk/", "single/"])),
        [_, "single" | "bulk"] if read => ok(json!(["senders/", "receivers/"])),
        [_, "bulk", plural] => match (role(plural), req.method) {
            (Some(r), &Method::POST) => bulk(node, r, req),
            (Some(_), _) => not_allowed(rest, "POST, OPTIONS"),
            (None, _) => nothing(rest),
        },
        [_, "single", plural] if read => match role(plural) {
            Some(r) => {
                let ids: Vec<String> = node.ids(r).iter().map(|id| format!("{id}/")).collect();
                ok(json!(ids))
            }
            None => nothing(rest),
        },
        [_, "single", plural, id, tail @ ..] => match role(plural) {
            Some(r) => single(node, r, req, id, tail),
            None => nothing(rest),
        },
        _ if !read => not_allowed(rest, READ),
        _ => nothing(rest),
    }
}

fn role(plural: &str) -> Option<Role> {
    match plural {
        "senders" => Some(Role::Sender),
        "receivers" => Some(Role::Receiver),
        _ => None,
    }
}

fn name(role: Role) -> &'static str {
    match role {
        Role::Sender => "sender",
        Role::Receiver => "receiver",
    }
}

fn nothing(rest: &[&str]) -> Reply {
    error(404, &format!("nothing at connection/{}", rest.join("/")))
}

fn not_allowed(rest: &[&str], allow: &'static str) -> Reply {
    let mut r = error(405, &format!("connection/{} takes {allow}", rest.join("/")));
    r.allow = Some(allow);
    r
}

/// `single/{senders,receivers}/{id}/…`.
fn single(node: &dyn Connections, role: Role, req: &Request, id: &str, tail: &[&str]) -> Reply {
    let missing = || error(404, &format!("no {} with id '{id}'", name(role)));
    let Some(id) = ResourceId::parse(id).filter(|p| p.to_string() == id) else {
        return missing();
    };
    if !node.ids(role).contains(&id) {
        return missing();
    }
    let read = req.method == Method::GET || req.method == Method::HEAD;
    let sender = role == Role::Sender;
    let shown =
        |f: &mut dyn FnMut(&Connection) -> Value| node.read(role, id, f).map_or_else(missing, ok);
    match tail {
        [] if read => {
            let mut list = vec!["constraints/", "staged/", "active/"];
            if sender {
                list.push("transportfile/");
            }
            list.push("transporttype/");
            ok(json!(list))
        }
        ["constraints"] if read => shown(&mut |c| c.constraints_json()),
        ["staged"] if read => shown(&mut |c| c.staged_json()),
        ["staged"] if req.method == Method::PATCH => {
            match node.stage(role, id, req.body, req.client) {
                None => missing(),
                Some(Ok((status, body))) => {
                    let mut r = ok(body);
                    r.status = status;
                    r
                }
                Some(Err(e)) => error(e.status(), &e.to_string()),
            }
        }
        ["staged"] => not_allowed(req.rest, "GET, HEAD, PATCH, OPTIONS"),
        ["active"] if read => shown(&mut |c| c.active_json()),
        ["transporttype"] if read => ok(json!(TRANSPORT_RTP)),
        ["transportfile"] if read && sender => node.transport_file(id),
        [] | ["constraints" | "active" | "transporttype"] => not_allowed(req.rest, READ),
        ["transportfile"] if sender => not_allowed(req.rest, READ),
        _ => error(404, &format!("nothing at {}", tail.join("/"))),
    }
}

/// `POST bulk/{senders,receivers}`: each entry staged as its own PATCH.
fn bulk(node: &dyn Connections, role: Role, req: &Request) -> Reply {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(req.body) else {
        return error(
            400,
            &format!(
                "the body must be a JSON array of {{\"id\": {}_ID, \"params\": {{...}}}}",
                name(role).to_uppercase()
            ),
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
        results.push(match node.stage(role, id, body.as_bytes(), req.client) {
            None => json!({"id": text, "code": 404,
                "error": format!("no {} with id '{text}'", name(role)), "debug": null}),
            Some(Ok((code, _))) => json!({"id": text, "code": code}),
            Some(Err(e)) => {
                json!({"id": text, "code": e.status(), "error": e.to_string(), "debug": null})
            }
        });
    }
    ok(Value::Array(results))
}

/// A PATCH of `resource`'s `/staged` (its machine reached through
/// `conn`), an immediate activation carried out by `apply` before the
/// answer: the status (`200`, or `202` for a scheduled one) and body.
pub(crate) fn stage<T>(
    resource: &mut T,
    conn: fn(&mut T) -> &mut Connection,
    body: &[u8],
    apply: impl FnOnce(&mut T, &Activation) -> Result<(), String>,
) -> Result<(u16, Value), ConnectionError> {
    match conn(resource).patch(tai_now(), body)? {
        Patched::Staged => Ok((200, conn(resource).staged_json())),
        Patched::Scheduled => Ok((202, conn(resource).staged_json())),
        Patched::Activate(a) => {
            let result = apply(resource, &a);
            conn(resource)
                .complete(tai_now(), a, result)
                .map(|v| (200, v))
        }
    }
}
