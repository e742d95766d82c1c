//! IS-05 for serve's senders: one nagare-proto `nmos::Connection` per
//! sender the Node API lists, and the carrying out of its activations
//! through the stream table, exactly as `POST /v1/streams` does (the
//! same destination allow-list and admission, so IS-05 never sends where
//! the HTTP API would not). A path's sender starts a looping push stream
//! of its path to the activated destination; `master_enable` false stops
//! it. A push stream made through `/v1/streams` shows as it runs, and
//! stays controlled there.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use nagare_api::serve::StreamRequest;
use nagare_proto::nmos::connection::{
    Activation, Constraint, Constraints, Event, Leg, Param, Role, Setting,
};
use nagare_proto::nmos::{Connection, ResourceId, TaiTime};
use tracing::{info, warn};

use crate::cmd::serve::hub::server::{Pushed, Server, stopped};
use crate::cmd::serve::hub::table::StreamId;

/// How often the scheduler looks for a due activation at most (it sleeps
/// until the next one is due, but wakes this often for the stop flag).
const SCHEDULER_TICK: Duration = Duration::from_millis(20);

/// What a sender sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A path of the catalog, by name.
    Path(String),
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

/// Every sender's IS-05 state, by sender id.
#[derive(Default)]
pub(crate) struct Senders {
    table: Mutex<BTreeMap<ResourceId, Sender>>,
}

/// The current time in TAI, as IS-05 times are written.
pub(crate) fn tai_now() -> TaiTime {
    TaiTime::from_utc_ns(crate::clock::epoch_ns())
}

/// What `"auto"` means on this node: the sender's address is the node's;
/// its destination a multicast group of the administratively scoped
/// range named by the sender id, so two senders never share one; port
/// 5004.
fn auto_leg(id: ResourceId, source: IpAddr) -> Leg {
    let text = id.to_string();
    let hash = text
        .bytes()
        .fold(0u16, |h, b| h.rotate_left(5) ^ u16::from(b));
    let [hi, lo] = hash.to_be_bytes();
    let mut auto = Leg::defaults(Role::Sender);
    auto.set("source_ip", Param::Ip(source));
    auto.set(
        "destination_ip",
        Param::Ip(IpAddr::from([239, 255, hi, lo])),
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

/// A fresh sender machine: one leg, its source address the node's.
fn new_connection(id: ResourceId, source: IpAddr) -> Connection {
    let limits = Constraints::default().with(
        Role::Sender,
        "source_ip",
        Constraint {
            allowed: Some(vec![Param::Ip(source)]),
            ..Constraint::default()
        },
    );
    Connection::new(Role::Sender, vec![limits], vec![auto_leg(id, source)])
}

impl Senders {
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
                let mut conn = new_connection(*id, source);
                if let Target::Push(..) = target {
                    conn.assume(running(&conn, destinations));
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

    /// The IS-05 state of path senders: (sender id, receiver id,
    /// master_enable).
    pub(crate) fn subscriptions(&self) -> Vec<(ResourceId, Option<ResourceId>, bool)> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table
            .iter()
            .filter(|(_, s)| matches!(s.target, Target::Path(_)))
            .map(|(id, s)| (*id, s.conn.active().peer, s.conn.active().master_enable))
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

/// Carries out `activation` for sender `id`: the old stream stops (IS-05
/// re-applies on every activation), a new one starts when
/// `master_enable` is true. The reason when it cannot.
pub(crate) fn apply(
    server: &Server,
    id: ResourceId,
    sender: &mut Sender,
    activation: &Activation,
) -> Result<(), String> {
    let path = match &sender.target {
        Target::Path(p) => p.clone(),
        Target::Push(stream, _) => {
            return Err(format!(
                "sender {id} is push stream {stream}, made through /v1/streams: stop or \
                 change it there, or connect its path's sender instead"
            ));
        }
    };
    if let Some(old) = sender.stream.take() {
        if let Some(info) = server.stop_stream(old) {
            stopped(&info, &format!("an IS-05 activation of sender {id}"));
        }
    }
    let setting = &activation.setting;
    let destinations: Vec<String> = setting
        .legs
        .iter()
        .filter(|l| l.enabled())
        .filter_map(|l| {
            Some(
                std::net::SocketAddr::new(l.ip("destination_ip")?, l.port("destination_port")?)
                    .to_string(),
            )
        })
        .collect();
    if !setting.master_enable || destinations.is_empty() {
        return Ok(());
    }
    // Built as a client's JSON is, so it takes every default a push
    // request takes.
    let request: StreamRequest = serde_json::from_value(serde_json::json!({
        "source": path,
        "destinations": destinations,
        "loop": true,
        "label": format!("NMOS sender {id}"),
    }))
    .map_err(|e| format!("building the push request: {e}"))?;
    match server.push(&request, sender.client) {
        Ok(Pushed::Started(stream) | Pushed::Replayed(stream)) => {
            sender.stream = Some(stream);
            info!(
                stream, %id, path = %path,
                "IS-05: sender {id} sends '{path}' to {} (stream {stream})",
                destinations.join(", ")
            );
            Ok(())
        }
        Err(refusal) => {
            // The old stream is gone too: /active must say so.
            sender.conn.stopped();
            Err(refusal.parts().1)
        }
    }
}

/// Carries out every scheduled activation when due, until the server
/// stops.
pub(crate) fn run_scheduler(server: std::sync::Arc<Server>) {
    while !server.stopping() {
        let now = tai_now();
        let next = server.nmos.connections(&server.media, &server.table.infos(), |table| {
            let mut next: Option<TaiTime> = None;
            for (id, sender) in table.iter_mut() {
                sender.conn.handle_timeout(now);
                while let Some(Event::Activate(a)) = sender.conn.poll_event() {
                    let result = apply(&server, *id, sender, &a);
                    if let Err(e) = sender.conn.complete(tai_now(), a, result) {
                        warn!(%id, "IS-05: the scheduled activation of sender {id} failed: {e}");
                    }
                }
                next = match (next, sender.conn.poll_timeout()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            next
        });
        let wait = next.map_or(SCHEDULER_TICK, |t| {
            let ns = tai_now().nanos_until(t);
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        });
        std::thread::sleep(wait.min(SCHEDULER_TICK));
    }
}
