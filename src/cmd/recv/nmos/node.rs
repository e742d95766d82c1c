//! `recv --nmos` as an NMOS node: one device with one receiver of raw
//! video over RTP, its IS-05 machine (nagare-proto's `nmos::Connection`)
//! and the receive session its activations start and stop. The shared
//! routes (`crate::nmos`) reach it as an [`api::Node`] and its
//! [`Connections`].

use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Result, bail};
use nagare_proto::nmos::connection::{
    Activation, Connection, Constraints, Event, Leg, Listen, Param, Role, Setting,
};
use nagare_proto::nmos::model::{ReceiverSpec, receiver_id};
use nagare_proto::nmos::resource::ReceiverSubscription;
use nagare_proto::nmos::{NodeSpec, Resource, ResourceId, Store};
use nagare_proto::{FrameRate, VideoFormat};
use serde_json::Value;
use tracing::warn;

use super::session::Session;
use crate::engine::recv::{RecvArgs, RecvConfig};
use crate::net::udp::parse_interface;
use crate::nmos::api;
use crate::nmos::connection_api::{self, Connections, Show, Staged};
use crate::nmos::host::Host;
use crate::nmos::reply::{Reply, error};
use crate::nmos::tai_now;

/// The receiver's name: its label, and what its id is derived from.
const RECEIVER: &str = "video";

/// The receiver's IS-05 state and what it receives.
struct State {
    conn: Connection,
    session: Option<Session>,
}

/// The node.
pub(super) struct RecvNode {
    args: RecvArgs,
    spec: NodeSpec,
    receiver: ResourceId,
    /// The one format `--size`, `--pix-fmt` and `--fps` fix, if they do.
    fixed: Option<(VideoFormat, Option<FrameRate>)>,
    state: Mutex<State>,
    store: Mutex<Store>,
}

impl RecvNode {
    /// The node on `host`, receiving as `args` say; `fixed` is the format
    /// (and rate) `--size`, `--pix-fmt` and `--fps` fix, checked by the
    /// caller.
    pub(super) fn new(
        args: RecvArgs,
        host: Host,
        fixed: Option<(VideoFormat, Option<FrameRate>)>,
    ) -> RecvNode {
        let receiver = receiver_id(host.spec.node_id, RECEIVER);
        let legs = usize::from(args.nmos_legs);
        let conn = Connection::new(
            Role::Receiver,
            vec![Constraints::default(); legs],
            (0..legs).map(|k| auto_leg(host.address, k)).collect(),
        );
        let mut spec = host.spec;
        // IS-05: one transport_params entry per interface binding.
        spec.bindings = std::iter::repeat_n(&spec.bindings, legs)
            .flatten()
            .cloned()
            .collect();
        RecvNode {
            args,
            spec,
            receiver,
            fixed,
            state: Mutex::new(State {
                conn,
                session: None,
            }),
            store: Mutex::new(Store::default()),
        }
    }

    /// The node id.
    pub(super) fn id(&self) -> ResourceId {
        self.spec.node_id
    }

    /// The receiver's id.
    pub(super) fn receiver(&self) -> ResourceId {
        self.receiver
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every resource as of now, versions moved where something changed
    /// (and on every activation, as IS-05 asks).
    pub(super) fn resources(&self) -> Vec<Resource> {
        let (active, activated) = {
            let st = self.lock();
            (st.conn.active().clone(), st.conn.activated_at())
        };
        let mut spec = self.spec.clone();
        // A receiver not receiving names no sender.
        spec.receivers = vec![ReceiverSpec {
            name: RECEIVER.into(),
            subscription: ReceiverSubscription {
                sender_id: active.peer.filter(|_| active.master_enable),
                active: active.master_enable,
            },
            fixed: self.fixed,
        }];
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        store.update(tai_now(), spec.resources());
        if let Some(at) = activated {
            store.bump(self.receiver, at);
        }
        store.all().to_vec()
    }

    /// Runs scheduled activations when due, and notices a session that
    /// ended by itself (`/active` then says `master_enable` false).
    pub(super) fn tick(&self) {
        let mut st = self.lock();
        st.conn.handle_timeout(tai_now());
        while let Some(Event::Activate(a)) = st.conn.poll_event() {
            let result = self.apply(&mut st, &a);
            if let Err(e) = st.conn.complete(tai_now(), a, result) {
                warn!("IS-05: the scheduled activation of the receiver failed: {e}");
            }
        }
        if st.session.as_ref().is_some_and(Session::ended) {
            finish(st.session.take());
            st.conn.stopped();
        }
    }

    /// How long until the next scheduled activation is due (none:
    /// nothing is scheduled).
    pub(super) fn next_due(&self) -> Option<Duration> {
        let due = self.lock().conn.poll_timeout()?;
        let ns = tai_now().nanos_until(due);
        Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    /// Stops receiving (the process is stopping).
    pub(super) fn shut_down(&self) {
        finish(self.lock().session.take());
    }

    /// Carries out `activation`: the session running stops (IS-05
    /// re-applies on every activation), a new one starts when
    /// `master_enable` is true and the leg is enabled. The reason when
    /// it cannot.
    fn apply(&self, st: &mut State, activation: &Activation) -> Result<(), String> {
        let stopped = st.session.is_some();
        finish(st.session.take());
        let setting = &activation.setting;
        let listens: Vec<Listen> = setting.legs.iter().filter_map(Leg::listen).collect();
        if !setting.master_enable || listens.is_empty() {
            return Ok(());
        }
        let start = match listens[..] {
            [one] => self
                .config(setting, one)
                .and_then(|cfg| Session::start(cfg, &self.args)),
            _ => transport_file(setting)
                .and_then(|text| Session::start_legs(text, &listens, &self.args)),
        };
        match start {
            Ok(s) => {
                st.session = Some(s);
                Ok(())
            }
            Err(e) => {
                // The old receive is gone too: /active must say so.
                if stopped {
                    st.conn.stopped();
                }
                Err(format!("{e:#}"))
            }
        }
    }

    /// What `recv --sdp` would do with the staged transport file, where
    /// the activated parameters say.
    fn config(&self, setting: &Setting, listen: Listen) -> Result<RecvConfig> {
        let what = "the staged transport_file";
        let mut cfg = match &setting.transport_file {
            Some(file) => self.args.config_for_sdp(&file.data, what)?,
            None => self
                .args
                .config_for_format(listen.address, "no transport_file is staged")?,
        };
        cfg.listen = listen.address;
        cfg.source_filter = listen.source.or(cfg.source_filter);
        let multicast = listen.address.ip().is_multicast();
        cfg.socket.source = cfg.source_filter.filter(|_| multicast);
        if let (None, Some(ip)) = (&cfg.socket.interface, listen.interface) {
            cfg.socket.interface = Some(parse_interface(&ip.to_string())?);
        }
        Ok(cfg)
    }
}

/// What the receiver leg `k` (0-based) takes for `"auto"`: the node's
/// own address, and RFC 3551's port (the second leg the next even one,
/// so two unicast legs on one address do not collide).
fn auto_leg(address: IpAddr, k: usize) -> Leg {
    let port = nagare_proto::nmos::connection::DEFAULT_PORT + 2 * k as u16;
    let mut auto = Leg::defaults(Role::Receiver);
    auto.set("interface_ip", Param::Ip(address));
    auto.set("destination_port", Param::Port(port));
    auto
}

/// The staged SDP, which says the frame format.
fn transport_file(setting: &Setting) -> Result<&str> {
    match &setting.transport_file {
        Some(file) => Ok(&file.data),
        None => bail!(
            "recv needs the sender's SDP to know the frame format: stage it as \
             \"transport_file\": {{\"data\": SDP, \"type\": \"application/sdp\"}}"
        ),
    }
}

/// Stops `session` if there is one, saying why the receive failed.
fn finish(session: Option<Session>) {
    if let Some(Err(e)) = session.map(Session::stop) {
        eprintln!("nagare recv: error: {e:#}");
    }
}

impl api::Node for RecvNode {
    fn resources(&self) -> Vec<Resource> {
        RecvNode::resources(self)
    }

    fn connections(&self) -> &dyn Connections {
        self
    }
}

impl Connections for RecvNode {
    fn ids(&self, role: Role) -> Vec<ResourceId> {
        match role {
            Role::Receiver => vec![self.receiver],
            Role::Sender => Vec::new(),
        }
    }

    fn read(&self, role: Role, id: ResourceId, show: Show<'_>) -> Option<Value> {
        (role == Role::Receiver && id == self.receiver).then(|| show(&self.lock().conn))
    }

    fn stage(&self, role: Role, id: ResourceId, body: &[u8], _client: IpAddr) -> Staged {
        (role == Role::Receiver && id == self.receiver).then_some(())?;
        let mut st = self.lock();
        Some(connection_api::stage(
            &mut *st,
            |s| &mut s.conn,
            body,
            |s, a| self.apply(s, a),
        ))
    }

    fn transport_file(&self, id: ResourceId) -> Reply {
        error(
            404,
            &format!("no sender with id '{id}': recv has no senders"),
        )
    }
}
