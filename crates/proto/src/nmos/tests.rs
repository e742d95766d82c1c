//! Simulation tests on virtual time: a scripted registry answers the
//! registrar's requests.

use super::registration::{Config, Event, Input, Method, Registrar, Registry, Request};
use super::*;
use crate::serve::describe::Track;
use crate::{FrameRate, Nanos, PixelFormat, VideoFormat};

fn node_id() -> ResourceId {
    ResourceId::from_random_bytes([7; 16])
}

fn spec(streams: Vec<StreamSpec>) -> NodeSpec {
    NodeSpec {
        node_id: node_id(),
        label: "host".into(),
        hostname: Some("host".into()),
        api_host: "127.0.0.1".into(),
        api_port: 8080,
        authorization: false,
        interfaces: vec![resource::Interface::new("lo", [0; 6])],
        bindings: vec!["lo".into()],
        paths: vec![
            PathSpec {
                name: "bars".into(),
                track: Track::Raw {
                    format: VideoFormat::new(320, 180, PixelFormat::Uyvp).unwrap(),
                    rate: FrameRate::new(25, 1).unwrap(),
                    max_udp: None,
                },
                subscription: idle(),
                stripes: Vec::new(),
                legs: 1,
            },
            PathSpec {
                name: "clip.ts".into(),
                track: Track::Ts,
                subscription: idle(),
                stripes: Vec::new(),
                legs: 1,
            },
        ],
        streams,
        connection_api: false,
        receivers: Vec::new(),
        program: "nagare serve",
    }
}

fn idle() -> resource::SenderSubscription {
    resource::SenderSubscription {
        receiver_id: None,
        active: false,
    }
}

#[test]
fn a_recv_node_is_a_device_with_one_raw_video_receiver() {
    let mut s = spec(vec![]);
    s.paths.clear();
    s.program = "nagare recv";
    let sender = ResourceId::from_random_bytes([9; 16]);
    s.receivers = vec![model::ReceiverSpec {
        name: "video".into(),
        subscription: resource::ReceiverSubscription {
            sender_id: Some(sender),
            active: true,
        },
        fixed: None,
    }];
    let all = s.resources();
    let kinds: Vec<Kind> = all.iter().map(Resource::kind).collect();
    assert_eq!(kinds, [Kind::Node, Kind::Device, Kind::Receiver]);
    let id = model::receiver_id(node_id(), "video");
    let Resource::Device(d) = &all[1] else {
        panic!("a device");
    };
    assert_eq!(d.receivers, [id]);
    assert!(d.senders.is_empty());
    let r = all[2].to_json();
    assert_eq!(r["id"], id.to_string());
    assert_eq!(r["format"], "urn:x-nmos:format:video");
    assert_eq!(r["transport"], "urn:x-nmos:transport:rtp");
    assert_eq!(r["caps"]["media_types"], serde_json::json!(["video/raw"]));
    assert_eq!(r["subscription"]["sender_id"], sender.to_string());
    assert_eq!(r["description"], "a receiver of nagare recv");
    assert_eq!(all[0].to_json()["description"], "nagare recv");
}

#[test]
fn a_receiver_fixed_to_one_format_says_exactly_that_in_its_caps() {
    let mut s = spec(vec![]);
    s.paths.clear();
    let format = VideoFormat {
        width: 1920,
        height: 1080,
        pixel_format: PixelFormat::Uyvp,
    };
    let rate = FrameRate { num: 25, den: 1 };
    s.receivers = vec![model::ReceiverSpec {
        name: "video".into(),
        subscription: resource::ReceiverSubscription {
            sender_id: None,
            active: false,
        },
        fixed: Some((format, Some(rate))),
    }];
    let all = s.resources();
    let r = all.last().map(Resource::to_json).unwrap_or_default();
    let sets = &r["caps"]["constraint_sets"];
    assert_eq!(sets.as_array().map(Vec::len), Some(1), "{r}");
    let set = &sets[0];
    let one = |cap: &str| set[format!("urn:x-nmos:cap:format:{cap}")]["enum"].clone();
    assert_eq!(one("frame_width"), serde_json::json!([1920]));
    assert_eq!(one("frame_height"), serde_json::json!([1080]));
    assert_eq!(one("color_sampling"), serde_json::json!(["YCbCr-4:2:2"]));
    assert_eq!(one("component_depth"), serde_json::json!([10]));
    assert_eq!(one("interlace_mode"), serde_json::json!(["progressive"]));
    assert_eq!(
        set["urn:x-nmos:cap:meta:label"],
        "1920x1080 progressive YCbCr-4:2:2, 10 bit, 25 fps, fixed by the operator"
    );
    assert_eq!(set["urn:x-nmos:cap:meta:enabled"], true);
    assert_eq!(
        one("grain_rate"),
        serde_json::json!([{"numerator": 25, "denominator": 1}])
    );
    // Without a rate, none is claimed.
    s.receivers[0].fixed = Some((format, None));
    let r = s
        .resources()
        .last()
        .map(Resource::to_json)
        .unwrap_or_default();
    assert!(
        r["caps"]["constraint_sets"][0]
            .get("urn:x-nmos:cap:format:grain_rate")
            .is_none()
    );
}

#[test]
fn the_connection_api_shows_in_the_device_and_the_path_senders() {
    let mut s = spec(vec![]);
    s.connection_api = true;
    let peer = ResourceId::from_random_bytes([9; 16]);
    s.paths[0].subscription = resource::SenderSubscription {
        receiver_id: Some(peer),
        active: true,
    };
    let all = s.resources();
    let Some(Resource::Device(d)) = all.iter().find(|r| r.kind() == Kind::Device) else {
        panic!("a device");
    };
    assert_eq!(d.controls[0].kind, "urn:x-nmos:control:sr-ctrl/v1.1");
    assert_eq!(
        d.controls[0].href,
        "http://127.0.0.1:8080/x-nmos/connection/v1.1/"
    );
    let (_, _, bars) = model::path_ids(node_id(), "bars");
    let Some(Resource::Sender(sender)) = all.iter().find(|r| r.id() == bars) else {
        panic!("bars' sender");
    };
    assert_eq!(sender.subscription.receiver_id, Some(peer));
    assert!(sender.subscription.active);
    assert_eq!(
        sender.manifest_href.as_deref(),
        Some(
            format!(
                "http://127.0.0.1:8080/x-nmos/connection/v1.1/single/senders/{bars}/transportfile"
            )
            .as_str()
        )
    );
}

#[test]
fn a_two_leg_path_sender_is_bound_to_an_interface_per_leg() {
    let mut s = spec(vec![]);
    s.paths[0].legs = 2;
    let all = s.resources();
    let bindings = |name: &str| {
        let (_, _, id) = model::path_ids(node_id(), name);
        match all.iter().find(|r| r.id() == id) {
            Some(Resource::Sender(sender)) => sender.interface_bindings.clone(),
            _ => panic!("{name}'s sender"),
        }
    };
    // IS-05: one interface binding per transport_params entry.
    assert_eq!(bindings("bars"), ["lo", "lo"]);
    assert_eq!(bindings("clip.ts"), ["lo"]);
}

#[test]
fn each_stripe_a_path_offers_is_a_flow_of_its_own_geometry_and_a_sender() {
    use crate::video::stripe::{Rule, Stripes};
    let mut s = spec(vec![]);
    s.connection_api = true;
    let Track::Raw { format, .. } = s.paths[0].track else {
        panic!("bars is raw");
    };
    let stripes = Stripes::new(format, Rule::Lines, 2).unwrap();
    s.paths[0].stripes = (0..2)
        .map(|index| StripeSenderSpec {
            rule: Rule::Lines,
            count: 2,
            index,
            format: stripes.stripe_format(),
            subscription: idle(),
        })
        .collect();
    let all = s.resources();
    let (_, whole, _) = model::path_ids(node_id(), "bars");
    for k in 0..2 {
        let label = model::stripe_label("bars", Rule::Lines, k, 2);
        assert_eq!(label, format!("bars stripe {k}/2 lines"));
        let (flow, sender) = model::stripe_ids(node_id(), &label);
        let Some(Resource::Flow(f)) = all.iter().find(|r| r.id() == flow) else {
            panic!("{label}'s flow");
        };
        assert_eq!(f.parents, vec![whole]);
        let picture = f.picture.as_ref().unwrap();
        assert_eq!((picture.frame_width, picture.frame_height), (320, 90));
        let Some(Resource::Sender(snd)) = all.iter().find(|r| r.id() == sender) else {
            panic!("{label}'s sender");
        };
        assert_eq!(snd.flow_id, Some(flow));
        assert!(
            snd.manifest_href
                .as_deref()
                .unwrap()
                .ends_with("/transportfile")
        );
    }
    // node, device, 2 sources, 4 flows, 4 senders; the device lists them.
    assert_eq!(all.len(), 12);
    let Some(Resource::Device(d)) = all.iter().find(|r| r.kind() == Kind::Device) else {
        panic!("a device");
    };
    assert_eq!(d.senders.len(), 4);
    // The stream an activation starts names its sender.
    let id = ResourceId::from_random_bytes([3; 16]);
    assert_eq!(model::activated_by(&model::activation_label(id)), Some(id));
    assert_eq!(model::activated_by("wall/stripe 1"), None);
}

fn store_at(secs: u64, streams: Vec<StreamSpec>) -> Store {
    let mut s = Store::default();
    s.update(TaiTime { secs, nanos: 0 }, spec(streams).resources());
    s
}

#[test]
fn ids_are_stable_and_distinct() {
    let a = spec(vec![]).resources();
    let b = spec(vec![]).resources();
    let ids: Vec<_> = a.iter().map(Resource::id).collect();
    assert_eq!(ids, b.iter().map(Resource::id).collect::<Vec<_>>());
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    // node, device, 2 sources, 2 flows, 2 senders
    assert_eq!(ids.len(), 8);
    let text = ids[1].to_string();
    assert_eq!(text.as_bytes()[14], b'5', "{text} is a v5 UUID");
    assert_eq!(ResourceId::parse(&text), Some(ids[1]));
}

#[test]
fn tai_is_utc_plus_37_s() {
    let t = TaiTime::from_utc_ns(1_700_000_000_123_456_789);
    assert_eq!(t.to_string(), "1700000037:123456789");
    assert_eq!(TaiTime::parse("1700000037:123456789"), Some(t));
    assert_eq!(TaiTime::parse("1:1000000000"), None);
    assert!(t.next() > t);
}

#[test]
fn raw_flow_says_geometry_and_components() {
    let all = spec(vec![]).resources();
    let flow = all
        .iter()
        .find(|r| r.kind() == Kind::Flow && r.core().label == "bars")
        .unwrap()
        .to_json();
    assert_eq!(flow["media_type"], "video/raw");
    assert_eq!(flow["frame_width"], 320);
    assert_eq!(flow["interlace_mode"], "progressive");
    assert_eq!(flow["colorspace"], "BT709");
    assert_eq!(flow["components"][1]["name"], "Cb");
    assert_eq!(flow["components"][1]["width"], 160);
    assert_eq!(flow["components"][0]["bit_depth"], 10);
    assert_eq!(flow["grain_rate"]["numerator"], 25);
    let ts = all
        .iter()
        .find(|r| r.kind() == Kind::Flow && r.core().label == "clip.ts")
        .unwrap()
        .to_json();
    assert_eq!(ts["media_type"], "video/MP2T");
    assert_eq!(ts["format"], "urn:x-nmos:format:mux");
    assert!(ts.get("frame_width").is_none());
}

#[test]
fn versions_move_only_on_change() {
    let mut s = store_at(100, vec![]);
    let before: Vec<_> = s.all().iter().map(|r| r.core().version).collect();
    assert!(!s.update(
        TaiTime {
            secs: 200,
            nanos: 0
        },
        spec(vec![]).resources()
    ));
    let same: Vec<_> = s.all().iter().map(|r| r.core().version).collect();
    assert_eq!(before, same);
    let stream = StreamSpec {
        id: 1,
        path: "bars".into(),
        multicast: true,
        active: true,
    };
    assert!(s.update(
        TaiTime {
            secs: 300,
            nanos: 0
        },
        spec(vec![stream]).resources()
    ));
    let device = s.of_kind(Kind::Device).next().unwrap();
    assert_eq!(
        device.core().version.secs,
        300,
        "the device lists the new sender"
    );
    let node = s.node().unwrap();
    assert_eq!(node.core().version.secs, 100, "the node did not change");
    assert_eq!(s.of_kind(Kind::Sender).count(), 3);
}

/// A registry the test scripts: answers by URL.
struct World {
    now: Nanos,
    reg: Registrar,
    log: Vec<(String, Method, String)>,
}

impl World {
    fn new(registries: &[&str], store: &Store) -> World {
        let mut reg = Registrar::new(Config::default());
        reg.handle_input(Nanos::ZERO, Input::Resources(store.all().to_vec()));
        let list = registries
            .iter()
            .enumerate()
            .map(|(k, b)| Registry {
                base: b.to_string(),
                priority: k as u32 * 10,
            })
            .collect();
        reg.handle_input(Nanos::ZERO, Input::Discovered(list));
        World {
            now: Nanos::ZERO,
            reg,
            log: Vec::new(),
        }
    }

    /// Runs until `until`, answering each request with `answer` (None:
    /// no answer, so it times out); returns the events.
    fn run(&mut self, until: Nanos, mut answer: impl FnMut(&Request) -> Option<u16>) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            while let Some(req) = self.reg.poll_transmit(self.now) {
                let what = what(&req);
                self.log.push((host(&req.url), req.method, what));
                if let Some(status) = answer(&req) {
                    let input = Input::Response {
                        request: req.id,
                        status,
                    };
                    self.reg.handle_input(self.now, input);
                }
            }
            events.extend(std::iter::from_fn(|| self.reg.poll_event()));
            match self.reg.poll_timeout() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.reg.handle_input(self.now, Input::Timer);
                }
                _ => break,
            }
        }
        self.now = until;
        events
    }
}

fn host(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_string()
}

/// `node`, `flow`, `heartbeat`, `delete devices`: what a request is.
fn what(req: &Request) -> String {
    if req.url.contains("/health/nodes/") {
        return "heartbeat".into();
    }
    if req.method == Method::Delete {
        return format!("delete {}", req.url.rsplit('/').nth(1).unwrap_or_default());
    }
    let body: serde_json::Value = serde_json::from_str(req.body.as_deref().unwrap()).unwrap();
    body["type"].as_str().unwrap().to_string()
}

fn ok_post(req: &Request) -> Option<u16> {
    Some(if req.method == Method::Post && req.body.is_some() {
        201
    } else {
        200
    })
}

#[test]
fn registers_in_parent_order_then_heartbeats_every_5_s() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    let events = w.run(Nanos::from_secs(16), ok_post);
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "node",
            "device",
            "source",
            "source",
            "flow",
            "flow",
            "sender",
            "sender",
            "heartbeat",
            "heartbeat",
            "heartbeat"
        ]
    );
    assert_eq!(
        events,
        [Event::Registered {
            registry: "http://a:80".into()
        }]
    );
    assert!(w.reg.is_registered());
}

#[test]
fn a_404_heartbeat_registers_everything_again() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    let mut lost = true;
    let events = w.run(Nanos::from_secs(6), |req| {
        if req.url.contains("/health/") && std::mem::take(&mut lost) {
            Some(404)
        } else {
            ok_post(req)
        }
    });
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(kinds[0], "heartbeat");
    assert_eq!(&kinds[1..3], ["node", "device"]);
    assert_eq!(kinds.len(), 9);
    assert!(matches!(events[0], Event::Reregistering { .. }));
    assert!(matches!(events.last(), Some(Event::Registered { .. })));
}

#[test]
fn a_failing_registry_fails_over_to_the_next_heartbeat_first() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80", "http://b:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    // a answers 500 from now on; b holds the node already (a cluster).
    let events = w.run(Nanos::from_secs(12), |req| {
        if host(&req.url) == "a:80" {
            Some(503)
        } else {
            ok_post(req)
        }
    });
    let seen: Vec<(&str, &str)> = w.log.iter().map(|l| (l.0.as_str(), l.2.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("a:80", "heartbeat"),
            ("b:80", "heartbeat"),
            ("b:80", "heartbeat")
        ]
    );
    assert!(
        matches!(&events[0], Event::FailedOver { from, to, .. } if from == "http://a:80" && to == "http://b:80")
    );
    assert_eq!(w.reg.registry(), Some("http://b:80"));
}

#[test]
fn a_silent_registry_times_out_and_the_next_registers_all() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80", "http://b:80"], &store);
    // a never answers; b knows nothing of the node (404 heartbeat).
    let events = w.run(Nanos::from_secs(10), |req| match host(&req.url).as_str() {
        "a:80" => None,
        _ if req.url.contains("/health/") && !w_registered(req) => Some(404),
        _ => ok_post(req),
    });
    assert_eq!(w.log[0], ("a:80".into(), Method::Post, "node".into()));
    assert_eq!(w.log[1].0, "b:80");
    assert_eq!(w.log[1].2, "heartbeat");
    assert_eq!(w.log[2].2, "node");
    assert!(matches!(&events[0], Event::FailedOver { reason, .. } if reason.contains("no answer")));
    assert!(events.contains(&Event::Registered {
        registry: "http://b:80".into()
    }));
    assert!(w.reg.is_registered());
}

#[test]
fn a_clean_stop_deletes_children_first_and_the_node_last() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    w.reg.handle_input(w.now, Input::Leave);
    let events = w.run(Nanos::from_secs(30), |req| {
        Some(if req.method == Method::Delete {
            204
        } else {
            200
        })
    });
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    // No heartbeat, no POST: DELETEs only, the node last.
    assert_eq!(
        kinds,
        [
            "delete senders",
            "delete senders",
            "delete flows",
            "delete flows",
            "delete sources",
            "delete sources",
            "delete devices",
            "delete nodes"
        ]
    );
    assert_eq!(
        events,
        [Event::Left {
            registry: Some("http://a:80".into()),
            remaining: 0
        }]
    );
    assert!(w.reg.has_left());
    assert_eq!(w.reg.poll_timeout(), None);
}

#[test]
fn a_silent_registry_cannot_hold_a_clean_stop_past_its_time() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    let stop = w.now;
    w.reg.handle_input(stop, Input::Leave);
    // The registry hangs: the first DELETE may wait only the stop's 2 s,
    // not the 3 s of a request.
    assert_eq!(w.reg.request_budget(stop), Nanos::from_secs(2));
    let events = w.run(Nanos::from_secs(30), |_| None);
    assert_eq!(w.log.len(), 1, "{:?}", w.log);
    assert_eq!(w.log[0].2, "delete senders");
    assert_eq!(
        events,
        [Event::Left {
            registry: Some("http://a:80".into()),
            remaining: 8
        }]
    );
    assert!(w.reg.has_left());
    // Over at stop + 2 s, not a nanosecond before.
    let mut again = World::new(&["http://a:80"], &store);
    again.run(Nanos::from_secs(1), ok_post);
    again.reg.handle_input(again.now, Input::Leave);
    again.run(Nanos::from_secs(3) - Nanos(1), |_| None);
    assert!(!again.reg.has_left());
    again.run(Nanos::from_secs(3), |_| None);
    assert!(again.reg.has_left());
}

#[test]
fn a_failing_delete_or_nothing_registered_ends_a_clean_stop_at_once() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    w.reg.handle_input(w.now, Input::Leave);
    let events = w.run(Nanos::from_secs(30), |_| Some(503));
    assert_eq!(w.log.len(), 1);
    assert!(matches!(events[..], [Event::Left { remaining: 8, .. }]));
    // A node that never registered has nothing to delete.
    let mut fresh = Registrar::new(Config::default());
    fresh.handle_input(Nanos::ZERO, Input::Resources(store.all().to_vec()));
    fresh.handle_input(Nanos::ZERO, Input::Leave);
    assert!(fresh.has_left());
    assert_eq!(fresh.poll_transmit(Nanos::ZERO), None);
}

/// The scripted registry b: its first heartbeat is a 404 (it never saw
/// the node), later ones are fine.
fn w_registered(_req: &Request) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SEEN: AtomicBool = AtomicBool::new(false);
    SEEN.swap(true, Ordering::Relaxed)
}

#[test]
fn every_registry_failing_waits_and_starts_over() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80", "http://b:80"], &store);
    let events = w.run(Nanos::from_secs(4), |_| Some(500));
    assert!(matches!(events.last(), Some(Event::Unreachable { .. })));
    let n = w.log.len();
    assert_eq!(n, 2, "one try at each: {:?}", w.log);
    let events = w.run(Nanos::from_secs(6), ok_post);
    // After the pause: a, heartbeat first; it answers 200 (no node
    // known there would be 404); then what it lacks is POSTed.
    assert_eq!(w.log[n], ("a:80".into(), Method::Post, "heartbeat".into()));
    assert!(events.contains(&Event::Registered {
        registry: "http://a:80".into()
    }));
}

#[test]
fn a_changed_resource_is_posted_again_and_a_gone_one_deleted() {
    let mut store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    w.run(Nanos::from_secs(1), ok_post);
    w.log.clear();
    let stream = StreamSpec {
        id: 4,
        path: "bars".into(),
        multicast: false,
        active: true,
    };
    store.update(
        TaiTime {
            secs: 200,
            nanos: 0,
        },
        spec(vec![stream]).resources(),
    );
    w.reg
        .handle_input(w.now, Input::Resources(store.all().to_vec()));
    w.run(Nanos::from_secs(2), ok_post);
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(kinds, ["device", "sender"]);
    w.log.clear();
    store.update(
        TaiTime {
            secs: 300,
            nanos: 0,
        },
        spec(vec![]).resources(),
    );
    w.reg
        .handle_input(w.now, Input::Resources(store.all().to_vec()));
    w.run(Nanos::from_secs(3), ok_post);
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(kinds, ["delete senders", "device"]);
}

#[test]
fn an_old_node_record_is_deleted_before_registering() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    let mut first = true;
    w.run(Nanos::from_secs(1), |req| {
        if req.body.as_deref().is_some_and(|b| b.contains("\"node\"")) && std::mem::take(&mut first)
        {
            Some(200)
        } else {
            ok_post(req)
        }
    });
    let kinds: Vec<&str> = w.log.iter().map(|l| l.2.as_str()).collect();
    assert_eq!(&kinds[..4], ["node", "delete nodes", "node", "device"]);
}

#[test]
fn a_refused_resource_is_not_retried_until_it_changes() {
    let store = store_at(100, vec![]);
    let mut w = World::new(&["http://a:80"], &store);
    let events = w.run(Nanos::from_secs(1), |req| {
        if req.body.as_deref().is_some_and(|b| b.contains("\"flow\"")) {
            Some(400)
        } else {
            ok_post(req)
        }
    });
    let flows = w.log.iter().filter(|l| l.2 == "flow").count();
    assert_eq!(flows, 2);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(
                e,
                Event::Refused {
                    kind: Kind::Flow,
                    status: 400,
                    ..
                }
            ))
            .count(),
        2
    );
}

#[test]
fn dns_sd_answers_name_registries_in_priority_order() {
    use simple_dns::rdata::{A, PTR, RData, SRV, TXT};
    use simple_dns::{CLASS, Name, Packet, ResourceRecord};
    let mut d = discovery::Discovery::new("example.com.");
    let q = d.queries();
    assert_eq!(
        q,
        [(
            "_nmos-register._tcp.example.com".into(),
            discovery::Ask::Ptr
        )]
    );
    assert!(discovery::query(1, &q[0].0, q[0].1).is_ok());
    let mut p = Packet::new_reply(1);
    let svc = Name::new_unchecked("_nmos-register._tcp.example.com");
    for (inst, host, port, pri, ver, addr) in [
        (
            "r1._nmos-register._tcp.example.com",
            "r1.example.com",
            8010,
            "20",
            "v1.2,v1.3",
            1,
        ),
        (
            "r2._nmos-register._tcp.example.com",
            "r2.example.com",
            8020,
            "10",
            "v1.3",
            2,
        ),
        (
            "r3._nmos-register._tcp.example.com",
            "r3.example.com",
            8030,
            "5",
            "v1.2",
            3,
        ),
    ] {
        let name = Name::new_unchecked(inst);
        p.answers.push(ResourceRecord::new(
            svc.clone(),
            CLASS::IN,
            60,
            RData::PTR(PTR(name.clone())),
        ));
        let srv = SRV {
            priority: 0,
            weight: 0,
            port,
            target: Name::new_unchecked(host),
        };
        p.additional_records.push(ResourceRecord::new(
            name.clone(),
            CLASS::IN,
            60,
            RData::SRV(srv),
        ));
        let (ver, pri) = (format!("api_ver={ver}"), format!("pri={pri}"));
        let txt = TXT::new()
            .with_string("api_proto=http")
            .unwrap()
            .with_string(&ver)
            .unwrap()
            .with_string(&pri)
            .unwrap();
        p.additional_records.push(ResourceRecord::new(
            name,
            CLASS::IN,
            60,
            RData::TXT(txt.into_owned()),
        ));
        let a = A {
            address: u32::from(std::net::Ipv4Addr::new(127, 0, 0, addr)),
        };
        p.additional_records.push(ResourceRecord::new(
            Name::new_unchecked(host),
            CLASS::IN,
            60,
            RData::A(a),
        ));
    }
    d.absorb(&p.build_bytes_vec().unwrap()).unwrap();
    assert!(d.complete());
    assert!(d.queries().is_empty());
    let r = d.registries();
    let bases: Vec<&str> = r.iter().map(|r| r.base.as_str()).collect();
    assert_eq!(bases, ["http://127.0.0.2:8020", "http://127.0.0.1:8010"]);
    assert!(d.absorb(b"\x00\x01garbage").is_err());
}

#[test]
fn an_activation_moves_a_version_even_when_nothing_changed() {
    let mut store = store_at(10, vec![]);
    let (_, _, bars) = model::path_ids(node_id(), "bars");
    let version = |s: &Store| s.get(bars).unwrap().core().version;
    assert_eq!(version(&store).secs, 10);
    assert!(store.bump(bars, TaiTime { secs: 12, nanos: 0 }));
    assert_eq!(version(&store).secs, 12);
    assert!(
        !store.bump(bars, TaiTime { secs: 11, nanos: 0 }),
        "never back"
    );
    store.update(TaiTime { secs: 13, nanos: 0 }, spec(vec![]).resources());
    assert_eq!(version(&store).secs, 12, "unchanged content keeps it");
}
