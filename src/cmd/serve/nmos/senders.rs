//! IS-05 state of serve's senders: one nagare-proto `nmos::Connection`
//! per sender the Node API lists (a path's, or a push stream's made
//! through `/v1/streams`, which shows as it runs and stays controlled
//! there), with what `"auto"` means on this node. [`activate`] carries
//! the activations out.
//!
//! [`activate`]: super::activate

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use nagare_proto::nmos::connection::{Constraint, Constraints, Leg, Param, Role, Setting};
use nagare_proto::nmos::{Connection, ResourceId, TaiTime};

use crate::cmd::serve::hub::table::StreamId;

/// How long before its instant a stripe sender's scheduled activation is
/// carried out: the pacer's start lead (100 ms), the room a leg's first
/// frame needs beyond it (`serve::leg::LEG_MARGIN`), the scheduler's
/// tick, and as much again for a busy host. Its stream waits for its
/// first frame, so it starts sending exactly at the instant.
pub(crate) const STRIPE_LEAD: Duration = Duration::from_millis(250);

/// What a sender sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A path of the catalog, by name.
    Path(String),
    /// Stripe `index` of a path that offers stripes (`[stripes]` in its
    /// sidecar): a `nagare cluster` leg.
    Stripe {
        /// The path.
        path: String,
        /// The stripe.
        index: usize,
    },
    /// A push stream made through `/v1/streams`, and its path.
    Push(StreamId, String),
}

/// One sender's IS-05 state.
pub(crate) struct Sender {
    pub conn: Connection,
    pub target: Target,
    /// The stream its last activation started.
    pub stream: Option<StreamId>,
    /// The client whose PATCH asked for the pending activation: its
    /// destinations are checked as that client's push request would be.
    pub client: IpAddr,
}

/// What IS-04 shows of a path sender's IS-05 state.
pub(crate) struct Subscription {
    pub sender: ResourceId,
    pub receiver: Option<ResourceId>,
    pub enabled: bool,
    pub activated: Option<TaiTime>,
}

/// Every sender's IS-05 state, by sender id.
pub(crate) struct Senders {
    table: Mutex<BTreeMap<ResourceId, Sender>>,
    /// The legs a path's sender offers (`serve --nmos-legs`).
    path_legs: usize,
}

pub(crate) use crate::nmos::tai_now;

/// What `"auto"` means for leg `k` (0-based) on this node: the sender's
/// address is the node's; its destination a multicast group of the
/// administratively scoped range named by the sender id, so two senders
/// never share one (239.255.X.Y; a second leg's 239.254.X.Y); port 5004.
fn auto_leg(id: ResourceId, source: IpAddr, k: usize) -> Leg {
    let text = id.to_string();
    let hash = text
        .bytes()
        .fold(0u16, |h, b| h.rotate_left(5) ^ u16::from(b));
    let [hi, lo] = hash.to_be_bytes();
    let mut auto = Leg::defaults(Role::Sender);
    auto.set("source_ip", Param::Ip(source));
    auto.set(
        "destination_ip",
        Param::Ip(IpAddr::from([239, 255 - (k as u8), hi, lo])),
    );
    auto.set(
        "source_port",
        Param::Port(nagare_proto::nmos::connection::DEFAULT_PORT),
    );
    auto.set(
        "destination_port",
        Param::Port(nagare_proto::nmos::connection::DEFAULT_PORT),
    );
    auto
}

/// A fresh sender machine of `legs` legs, its source address the node's.
fn new_connection(id: ResourceId, source: IpAddr, legs: usize) -> Connection {
    let limits = Constraints::default().with(
        Role::Sender,
        "source_ip",
        Constraint {
            allowed: Some(vec![Param::Ip(source)]),
            ..Constraint::default()
        },
    );
    Connection::new(
        Role::Sender,
        vec![limits; legs],
        (0..legs).map(|k| auto_leg(id, source, k)).collect(),
    )
}

impl Senders {
    /// No senders yet; a path's offers `path_legs` legs.
    pub(crate) fn new(path_legs: usize) -> Senders {
        Senders {
            table: Mutex::default(),
            path_legs,
        }
    }

    /// The legs a path's sender offers.
    pub(crate) fn path_legs(&self) -> usize {
        self.path_legs
    }

    /// Runs `f` on the table after bringing it in line with `senders`
    /// (every sender the Node API lists now, with what it sends): new
    /// ones get a machine, gone ones are dropped, a push stream's shows
    /// the destination it runs to.
    pub(crate) fn with<R>(
        &self,
        senders: &[(ResourceId, Target, Vec<String>)],
        source: IpAddr,
        f: impl FnOnce(&mut BTreeMap<ResourceId, Sender>) -> R,
    ) -> R {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.retain(|id, _| senders.iter().any(|(s, _, _)| s == id));
        for (id, target, destinations) in senders {
            table.entry(*id).or_insert_with(|| {
                let legs = match target {
                    Target::Path(_) => self.path_legs,
                    Target::Stripe { .. } | Target::Push(..) => 1,
                };
                let mut conn = new_connection(*id, source, legs);
                match target {
                    Target::Push(..) => conn.assume(running(&conn, destinations)),
                    // Its stream must hold its first frame before the
                    // activation's instant.
                    Target::Stripe { .. } => conn.set_lead(STRIPE_LEAD.into()),
                    Target::Path(_) => {}
                }
                Sender {
                    conn,
                    target: target.clone(),
                    stream: None,
                    client: IpAddr::from([127, 0, 0, 1]),
                }
            });
        }
        f(&mut table)
    }

    /// The streams IS-05 activations started (they show as their path's
    /// sender, not as senders of their own).
    pub(crate) fn streams(&self) -> Vec<StreamId> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.values().filter_map(|s| s.stream).collect()
    }

    /// The IS-05 state of path and stripe senders: (sender id, receiver id,
    /// master_enable, when last activated).
    pub(crate) fn subscriptions(&self) -> Vec<Subscription> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table
            .iter()
            .filter(|(_, s)| matches!(s.target, Target::Path(_) | Target::Stripe { .. }))
            .map(|(id, s)| Subscription {
                sender: *id,
                receiver: s.conn.active().peer,
                enabled: s.conn.active().master_enable,
                activated: s.conn.activated_at(),
            })
            .collect()
    }
}

/// The setting of a push stream running to `destinations`.
fn running(conn: &Connection, destinations: &[String]) -> Setting {
    let mut setting = conn.staged().clone();
    setting.master_enable = true;
    if let Some(addr) = destinations
        .first()
        .and_then(|d| d.parse::<std::net::SocketAddr>().ok())
    {
        setting.legs[0].set("destination_ip", Param::Ip(addr.ip()));
        setting.legs[0].set("destination_port", Param::Port(addr.port()));
    }
    setting
}
