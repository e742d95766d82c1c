//! The node as NMOS sees it: its fixed part (id, API endpoint,
//! interfaces) set at start, its paths and push streams read from the
//! catalog and the stream table whenever asked, and the versions kept in
//! one [`Store`] so the Node API and registration agree.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use nagare_api::serve::{StreamInfo, StreamKind, StreamState};
use nagare_proto::nmos::model::{path_ids, stripe_ids, stripe_label};
use nagare_proto::nmos::resource::SenderSubscription;
use nagare_proto::nmos::{
    NodeSpec, PathSpec, Resource, ResourceId, Store, StreamSpec, StripeSenderSpec, TaiTime,
};
use nagare_proto::serve::describe::Track;
use nagare_proto::video::st2110_21::Model;

use crate::cmd::serve::hub::media::{Catalog, Media, StripeOffer};
use crate::cmd::serve::nmos::senders::{self, Senders, Target};
use crate::nmos::host::Host;

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
    /// (by kernel index) when given; each path's sender offers
    /// `path_legs` legs (2: an ST 2022-7 pair).
    pub(crate) fn new(
        id: ResourceId,
        http: SocketAddr,
        authorization: bool,
        multicast_interface: Option<u32>,
        path_legs: usize,
    ) -> Node {
        let host = Host::read(id, "nagare serve", http, authorization, multicast_interface);
        Node {
            spec: host.spec,
            store: Mutex::new(Store::default()),
            senders: Senders::new(path_legs),
            source_ip: host.address,
            clock_mac: host.clock_mac,
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
            max_udp: offer.packet_size.and_then(Model::max_udp_for),
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
                    legs: self.senders.path_legs(),
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
        Some((format, rate)) => Track::Raw {
            format,
            rate,
            max_udp: None,
        },
        None => Track::Ts,
    }
}

fn is_multicast(destination: &str) -> bool {
    destination
        .parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().is_multicast())
}
