//! The node as NMOS sees it: its fixed part (id, API endpoint,
//! interfaces) set at start, its paths and push streams read from the
//! catalog and the stream table whenever asked, and the versions kept in
//! one [`Store`] so the Node API and registration agree.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use nagare_api::serve::{StreamInfo, StreamKind, StreamState};
use nagare_proto::nmos::model::{path_ids, stripe_ids, stripe_label};
use nagare_proto::nmos::resource::{Interface, SenderSubscription};
use nagare_proto::nmos::{
    NodeSpec, PathSpec, Resource, ResourceId, Store, StreamSpec, StripeSenderSpec, TaiTime,
};
use nagare_proto::serve::describe::Track;

use crate::cmd::serve::hub::media::{Catalog, Media, StripeOffer};
use crate::cmd::serve::nmos::senders::{self, Senders, Target};
use crate::net::iface::{self, Link};

/// The node's NMOS state.
pub(crate) struct Node {
    spec: NodeSpec,
    store: Mutex<Store>,
    /// IS-05 state of every sender.
    senders: Senders,
    /// The senders' source address (what `"auto"` resolves to).
    source_ip: IpAddr,
    /// The MAC naming the host's clock in the transport files.
    clock_mac: Option<[u8; 6]>,
}

impl Node {
    /// The node with id `id` whose API listens on `http`, needing a token
    /// when `authorization`; senders are bound to `multicast_interface`
    /// (by kernel index) when given.
    pub(crate) fn new(
        id: ResourceId,
        http: SocketAddr,
        authorization: bool,
        multicast_interface: Option<u32>,
    ) -> Node {
        let links = iface::links().unwrap_or_default();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        let host = api_host(http.ip(), &links);
        let interfaces: Vec<Interface> = links
            .iter()
            .filter_map(|l| l.mac().map(|mac| Interface::new(&l.name, mac)))
            .collect();
        let binding = bound_link(&links, http.ip(), multicast_interface)
            .or_else(|| interfaces.first().map(|i| i.name.clone()));
        let source_ip = host.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]));
        Node {
            spec: NodeSpec {
                node_id: id,
                label: hostname.clone().unwrap_or_else(|| "nagare".into()),
                hostname,
                api_host: host,
                api_port: http.port(),
                authorization,
                interfaces,
                bindings: binding.into_iter().collect(),
                paths: Vec::new(),
                streams: Vec::new(),
                connection_api: true,
            },
            store: Mutex::new(Store::default()),
            senders: Senders::default(),
            source_ip,
            clock_mac: (!links.is_empty()).then(|| iface::clock_mac(Some(source_ip), &links).0),
        }
    }

    /// The node id.
    pub(crate) fn id(&self) -> ResourceId {
        self.spec.node_id
    }

    /// The MAC the transport files name the host's clock by.
    pub(crate) fn clock_mac(&self) -> Option<[u8; 6]> {
        self.clock_mac
    }

    /// Runs `f` on every sender's IS-05 state, brought in line with the
    /// catalog and the push streams running now.
    pub(crate) fn connections<R>(
        &self,
        media: &Catalog,
        streams: &[StreamInfo],
        f: impl FnOnce(&mut BTreeMap<ResourceId, senders::Sender>) -> R,
    ) -> R {
        let own = self.senders.streams();
        let mut now: Vec<(ResourceId, Target, Vec<String>)> = Vec::new();
        for m in media.iter() {
            let (_, _, id) = path_ids(self.spec.node_id, &m.name);
            now.push((id, Target::Path(m.name.clone()), Vec::new()));
            let Some(offer) = m.stripes else { continue };
            for index in 0..offer.count {
                let target = Target::Stripe {
                    path: m.name.clone(),
                    index,
                };
                let id = self.stripe_sender(&m.name, offer, index);
                now.push((id, target, Vec::new()));
            }
        }
        now.extend(
            streams
                .iter()
                .filter(|s| s.kind == StreamKind::Push && !own.contains(&s.id))
                .map(|s| {
                    let id = self.spec.node_id.derive(&format!("stream/{}", s.id));
                    (
                        id,
                        Target::Push(s.id, s.source.clone()),
                        s.destinations.clone(),
                    )
                }),
        );
        self.senders.with(&now, self.source_ip, f)
    }

    /// The id of the sender of stripe `index` of `offer`, path `name`'s.
    fn stripe_sender(&self, name: &str, offer: StripeOffer, index: usize) -> ResourceId {
        let label = stripe_label(name, offer.rule, index, offer.count);
        stripe_ids(self.spec.node_id, &label).1
    }

    /// What path `name` plays, if it is served.
    pub(crate) fn track(media: &Catalog, name: &str) -> Option<Track> {
        media.get(name).map(|m| track_of(&m))
    }

    /// What one stripe of path `name` plays, if it offers stripes.
    pub(crate) fn stripe_track(media: &Catalog, name: &str) -> Option<Track> {
        let m = media.get(name)?;
        let (offer, (_, rate)) = (m.stripes?, m.raw_format()?);
        Some(Track::Raw {
            format: offer.format,
            rate,
        })
    }

    /// Every resource as of now, in parent order, with versions that
    /// moved only where something changed since the last call.
    pub(crate) fn resources(&self, media: &Catalog, streams: &[StreamInfo]) -> Vec<Resource> {
        let mut spec = self.spec.clone();
        let subscriptions = self.senders.subscriptions();
        let own = self.senders.streams();
        spec.paths = media
            .iter()
            .map(|m| {
                let (_, _, id) = path_ids(self.spec.node_id, &m.name);
                let stripes = m.stripes.map_or_else(Vec::new, |o| {
                    (0..o.count)
                        .map(|index| StripeSenderSpec {
                            rule: o.rule,
                            count: o.count,
                            index,
                            format: o.format,
                            subscription: subscription(
                                &subscriptions,
                                self.stripe_sender(&m.name, o, index),
                            ),
                        })
                        .collect()
                });
                PathSpec {
                    name: m.name.clone(),
                    track: track_of(m),
                    subscription: subscription(&subscriptions, id),
                    stripes,
                }
            })
            .collect();
        spec.streams = streams
            .iter()
            .filter(|s| s.kind == StreamKind::Push && !own.contains(&s.id))
            .map(|s| StreamSpec {
                id: s.id,
                path: s.source.clone(),
                multicast: s.destinations.iter().any(|d| is_multicast(d)),
                active: s.state == StreamState::Playing,
            })
            .collect();
        let now = TaiTime::from_utc_ns(crate::clock::epoch_ns());
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        store.update(now, spec.resources());
        for s in &subscriptions {
            if let Some(at) = s.activated {
                store.bump(s.sender, at);
            }
        }
        store.all().to_vec()
    }
}

/// What IS-04 shows of sender `id`'s IS-05 state. A parked sender
/// (master_enable false) names no receiver, as IS-05's interaction with
/// IS-04 says.
fn subscription(all: &[senders::Subscription], id: ResourceId) -> SenderSubscription {
    let state = all.iter().find(|s| s.sender == id);
    let active = state.is_some_and(|s| s.enabled);
    SenderSubscription {
        receiver_id: state.filter(|_| active).and_then(|s| s.receiver),
        active,
    }
}

fn track_of(m: &Media) -> Track {
    match m.raw_format() {
        Some((format, rate)) => Track::Raw { format, rate },
        None => Track::Ts,
    }
}

fn is_multicast(destination: &str) -> bool {
    destination
        .parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().is_multicast())
}

/// The host the Node API is reached at: the listen address, or for an
/// unspecified one (every interface) the first non-loopback IPv4.
fn api_host(ip: IpAddr, links: &[Link]) -> String {
    if !ip.is_unspecified() {
        return ip.to_string();
    }
    links
        .iter()
        .filter(|l| !l.loopback)
        .find_map(Link::ipv4)
        .map_or_else(|| "127.0.0.1".into(), |a| a.to_string())
}

/// The interface senders send from: `--multicast-interface`, else the
/// one holding the API's address, else the first that is not loopback.
fn bound_link(links: &[Link], ip: IpAddr, multicast: Option<u32>) -> Option<String> {
    let by_index = multicast.and_then(|i| links.iter().find(|l| l.index == i));
    let by_addr = || links.iter().find(|l| l.addrs.contains(&ip));
    let first = || links.iter().find(|l| !l.loopback && l.mac().is_some());
    by_index
        .or_else(by_addr)
        .or_else(first)
        .map(|l| l.name.clone())
}
