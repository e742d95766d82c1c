//! serve's side of the NMOS APIs: its senders as the Connection API's
//! [`Connections`] (an activation starts or stops a push stream through
//! [`activate::apply`]), its resources as the Node API's [`api::Node`].
//! The routes are the shared `crate::nmos` ones; serve has no receivers.

use std::net::IpAddr;

use nagare_proto::nmos::connection::{ConnectionError, Role, sender_sdp};
use nagare_proto::nmos::{Resource, ResourceId};
use nagare_proto::sdp::RefClock;
use serde_json::Value;

use crate::cmd::serve::hub::server::Server;
use crate::cmd::serve::nmos::activate;
use crate::cmd::serve::nmos::node::Node;
use crate::cmd::serve::nmos::senders::{Sender, Target};
use crate::nmos::api;
use crate::nmos::connection_api::{self, Connections, Show, Staged};
use crate::nmos::reply::{Reply, error};

/// serve as an NMOS node, for one request.
pub(crate) struct Serve<'a>(pub &'a Server);

impl api::Node for Serve<'_> {
    fn resources(&self) -> Vec<Resource> {
        let server = self.0;
        server.nmos.resources(&server.media, &server.table.infos())
    }

    fn connections(&self) -> &dyn Connections {
        self
    }
}

impl Connections for Serve<'_> {
    fn ids(&self, role: Role) -> Vec<ResourceId> {
        if role == Role::Receiver {
            return Vec::new();
        }
        let server = self.0;
        server
            .nmos
            .connections(&server.media, &server.table.infos(), |table| {
                table.keys().copied().collect()
            })
    }

    fn read(&self, role: Role, id: ResourceId, show: Show<'_>) -> Option<Value> {
        let server = self.0;
        (role == Role::Sender).then_some(())?;
        server
            .nmos
            .connections(&server.media, &server.table.infos(), |table| {
                table.get(&id).map(|s| show(&s.conn))
            })
    }

    fn stage(&self, role: Role, id: ResourceId, body: &[u8], client: IpAddr) -> Staged {
        let server = self.0;
        (role == Role::Sender).then_some(())?;
        server
            .nmos
            .connections(&server.media, &server.table.infos(), |table| {
                let sender = table.get_mut(&id)?;
                Some(stage(server, id, sender, body, client))
            })
    }

    fn transport_file(&self, id: ResourceId) -> Reply {
        let server = self.0;
        server
            .nmos
            .connections(&server.media, &server.table.infos(), |table| {
                match table.get(&id) {
                    Some(sender) => transport_file(server, sender),
                    None => error(404, &format!("no sender with id '{id}'")),
                }
            })
    }
}

/// A PATCH of one sender's `/staged`: the status and body to answer.
/// The client is kept for the activation it asks for (now or
/// scheduled): its destinations are checked as that client's push
/// request would be.
fn stage(
    server: &Server,
    id: ResourceId,
    sender: &mut Sender,
    body: &[u8],
    client: IpAddr,
) -> Result<(u16, Value), ConnectionError> {
    let answer = connection_api::stage(
        sender,
        |s| &mut s.conn,
        body,
        |s, a| {
            s.client = client;
            activate::apply(server, id, s, a)
        },
    );
    if matches!(answer, Ok((202, _))) {
        sender.client = client;
    }
    answer
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
