//! The resources of a nagare node, built from what it serves: one
//! device; for every path of `nagare serve` a source, a flow and a
//! sender; for every stripe a path offers (`[stripes]` in its sidecar) a
//! flow of the stripe's geometry and a sender, which `nagare cluster`
//! activates over IS-05; for every running push stream one more sender
//! of its path's flow; for `nagare recv --nmos` one receiver of raw
//! video.
//!
//! Ids come from the node id and a name ([`ResourceId::derive`]), so the
//! same path has the same ids on every start; versions are left at zero
//! for [`Store`](super::Store) to set.

use std::collections::BTreeMap;

use super::id::ResourceId;
use super::resource::{
    API_VERSION, Clock, Component, Control, Core, Device, Endpoint, Flow, Interface, Kind, NoCaps,
    Node, NodeApi, Picture, Rational, Receiver, ReceiverCaps, ReceiverSubscription, Resource,
    Sender, SenderSubscription, Source,
};
use super::version::TaiTime;
use crate::serve::describe::Track;
use crate::video::stripe::Rule;
use crate::{FrameRate, PixelFormat, VideoFormat};

/// Device type of a generic media node.
const DEVICE_GENERIC: &str = "urn:x-nmos:device:generic";
/// The format of video sources, flows and receivers.
const FORMAT_VIDEO: &str = "urn:x-nmos:format:video";
/// The one clock: the host's system clock.
const CLOCK: &str = "clk0";
/// RTP to one host.
pub const TRANSPORT_RTP_UCAST: &str = "urn:x-nmos:transport:rtp.ucast";
/// RTP to a multicast group.
pub const TRANSPORT_RTP_MCAST: &str = "urn:x-nmos:transport:rtp.mcast";
/// RTP, either way (what an RTSP path's sender offers).
pub const TRANSPORT_RTP: &str = "urn:x-nmos:transport:rtp";
/// The IS-05 Connection API version served.
pub const CONNECTION_VERSION: &str = "v1.1";
/// The device control type of the IS-05 Connection API v1.1.
pub const CONTROL_CONNECTION: &str = "urn:x-nmos:control:sr-ctrl/v1.1";

/// Everything the node's resources are built from; the driver fills it
/// from its flags, the catalog and the stream table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// The node's id (random once, kept in the state directory).
    pub node_id: ResourceId,
    /// Its label (the host name).
    pub label: String,
    /// The host name, if known.
    pub hostname: Option<String>,
    /// Where the Node API is served (`host`, `port`).
    pub api_host: String,
    /// Its port.
    pub api_port: u16,
    /// Whether the API needs a token.
    pub authorization: bool,
    /// The interfaces, with their MACs.
    pub interfaces: Vec<Interface>,
    /// The interface names senders are bound to.
    pub bindings: Vec<String>,
    /// The paths served.
    pub paths: Vec<PathSpec>,
    /// The running push streams.
    pub streams: Vec<StreamSpec>,
    /// Whether the node serves the IS-05 Connection API (v1.1) beside
    /// the Node API: the device names it in `controls` and each path's
    /// sender its transport file in `manifest_href`.
    pub connection_api: bool,
    /// The receivers (`recv --nmos` has one; serve none).
    pub receivers: Vec<ReceiverSpec>,
    /// What the node is, as its description says (`nagare serve`).
    pub program: &'static str,
}

/// One receiver of raw video over RTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverSpec {
    /// Its name (its label, and what its id is derived from).
    pub name: String,
    /// Its IS-05 state: the sender it was connected to and whether it
    /// is receiving.
    pub subscription: ReceiverSubscription,
    /// The one format it takes without a transport file, when its
    /// operator fixed one (`recv --nmos --size --pix-fmt [--fps]`): its
    /// caps then name exactly that.
    pub fixed: Option<(VideoFormat, Option<FrameRate>)>,
}

/// One path of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSpec {
    /// Its name (the RTSP path).
    pub name: String,
    /// What it plays.
    pub track: Track,
    /// Its sender's IS-05 state: the receiver it was connected to and
    /// whether it is sending.
    pub subscription: SenderSubscription,
    /// One sender per stripe it offers (empty: none).
    pub stripes: Vec<StripeSenderSpec>,
    /// The legs its own sender offers: 1, or 2 for an ST 2022-7 pair
    /// (IS-05 wants one interface binding per `transport_params` entry).
    pub legs: usize,
}

/// The sender of one stripe of a path: stripe `index` of `count` by
/// `rule`, with a flow of the stripe's own geometry. IS-05 cannot create
/// senders, so a node offers one per stripe a cluster may ask of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeSenderSpec {
    /// How the frame is split.
    pub rule: Rule,
    /// Stripes per frame.
    pub count: usize,
    /// This stripe, 0-based.
    pub index: usize,
    /// The stripe's geometry (what its flow and transport file say).
    pub format: VideoFormat,
    /// Its IS-05 state, as a path sender's.
    pub subscription: SenderSubscription,
}

/// The label of the sender (and flow) of stripe `index` of `count` by
/// `rule` of path `name`: `clip.yuv stripe 1/4 2si`. `nagare cluster`
/// finds a node's stripe senders by it, so it names everything the
/// packets depend on that IS-05 does not carry.
pub fn stripe_label(name: &str, rule: Rule, index: usize, count: usize) -> String {
    format!("{name} stripe {index}/{count} {rule}")
}

/// The ids of the flow and sender of a stripe labelled `label` (see
/// [`stripe_label`]); a path name holds no `/`, so none is a path's.
pub fn stripe_ids(node: ResourceId, label: &str) -> (ResourceId, ResourceId) {
    (
        node.derive(&format!("flow/{label}")),
        node.derive(&format!("sender/{label}")),
    )
}

/// One running push stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// The stream's number in the table.
    pub id: u64,
    /// The path it plays (a [`PathSpec::name`]).
    pub path: String,
    /// Whether it sends to a multicast group.
    pub multicast: bool,
    /// Whether it is sending now.
    pub active: bool,
}

fn core(id: ResourceId, label: &str, description: &str) -> Core {
    Core {
        id,
        version: TaiTime::default(),
        label: label.to_string(),
        description: description.to_string(),
        tags: BTreeMap::new(),
    }
}

/// The ids of path `name`'s source, flow and sender.
pub fn path_ids(node: ResourceId, name: &str) -> (ResourceId, ResourceId, ResourceId) {
    (
        node.derive(&format!("source/{name}")),
        node.derive(&format!("flow/{name}")),
        node.derive(&format!("sender/{name}")),
    )
}

/// The label of the stream an IS-05 activation of sender `id` starts in
/// serve's stream table (`GET /v1/streams`).
pub fn activation_label(id: ResourceId) -> String {
    format!("NMOS sender {id}")
}

/// The sender whose IS-05 activation started a stream labelled `label`
/// (see [`activation_label`]); `None` for any other stream.
pub fn activated_by(label: &str) -> Option<ResourceId> {
    let id = label.strip_prefix("NMOS sender ")?;
    ResourceId::parse(id).filter(|p| p.to_string() == id)
}

/// The id of receiver `name`.
pub fn receiver_id(node: ResourceId, name: &str) -> ResourceId {
    node.derive(&format!("receiver/{name}"))
}

/// The id of the node's one device.
pub fn device_id(node: ResourceId) -> ResourceId {
    node.derive("device")
}

impl NodeSpec {
    /// Every resource, in parent order (node, device, sources, flows,
    /// senders, receivers), versions unset.
    pub fn resources(&self) -> Vec<Resource> {
        let device = device_id(self.node_id);
        let mut sources = Vec::new();
        let mut flows = Vec::new();
        let mut senders = Vec::new();
        for p in &self.paths {
            let (source, flow, sender) = path_ids(self.node_id, &p.name);
            sources.push(Resource::Source(self.source(source, device, p)));
            flows.push(Resource::Flow(flow_of(flow, source, device, p)));
            let mut s = self.sender(
                core(sender, &p.name, "an RTSP path of nagare serve"),
                flow,
                device,
                TRANSPORT_RTP,
                p.subscription.active,
            );
            s.subscription.receiver_id = p.subscription.receiver_id;
            s.interface_bindings = std::iter::repeat_n(&self.bindings, p.legs)
                .flatten()
                .cloned()
                .collect();
            s.manifest_href = self.connection_api.then(|| {
                format!(
                    "{}single/senders/{sender}/transportfile",
                    self.connection_base()
                )
            });
            senders.push(Resource::Sender(s));
            for st in &p.stripes {
                let (f, s) = self.stripe(p, st, source, flow, device);
                flows.push(f);
                senders.push(s);
            }
        }
        for s in &self.streams {
            let Some(p) = self.paths.iter().find(|p| p.name == s.path) else {
                continue;
            };
            let (_, flow, _) = path_ids(self.node_id, &p.name);
            let id = self.node_id.derive(&format!("stream/{}", s.id));
            let transport = if s.multicast {
                TRANSPORT_RTP_MCAST
            } else {
                TRANSPORT_RTP_UCAST
            };
            let label = format!("stream {} ({})", s.id, p.name);
            let c = core(id, &label, "a push stream of nagare serve");
            senders.push(Resource::Sender(
                self.sender(c, flow, device, transport, s.active),
            ));
        }
        let receivers: Vec<Resource> = self
            .receivers
            .iter()
            .map(|r| Resource::Receiver(self.receiver(device, r)))
            .collect();
        let mut out = vec![
            Resource::Node(self.node()),
            self.device(device, &senders, &receivers),
        ];
        out.extend(sources);
        out.extend(flows);
        out.extend(senders);
        out.extend(receivers);
        out
    }

    /// The flow and sender of stripe `st` of path `p`, whose source and
    /// whole flow are `source` and `whole`.
    fn stripe(
        &self,
        p: &PathSpec,
        st: &StripeSenderSpec,
        source: ResourceId,
        whole: ResourceId,
        device: ResourceId,
    ) -> (Resource, Resource) {
        let label = stripe_label(&p.name, st.rule, st.index, st.count);
        let (flow_id, sender_id) = stripe_ids(self.node_id, &label);
        let stripe = PathSpec {
            name: label.clone(),
            track: match p.track {
                // The flow says nothing of the packet size; a stripe's
                // transport file declares its MAXUDP.
                Track::Raw { rate, .. } => Track::Raw {
                    format: st.format,
                    rate,
                    max_udp: None,
                },
                Track::Ts => Track::Ts,
            },
            subscription: st.subscription.clone(),
            stripes: Vec::new(),
            legs: 1,
        };
        let mut flow = flow_of(flow_id, source, device, &stripe);
        flow.core.description = "a stripe of a path of nagare serve".into();
        flow.parents = vec![whole];
        let mut s = self.sender(
            core(
                sender_id,
                &label,
                "a stripe of a path of nagare serve, for nagare cluster",
            ),
            flow_id,
            device,
            TRANSPORT_RTP,
            st.subscription.active,
        );
        s.subscription.receiver_id = st.subscription.receiver_id;
        s.manifest_href = self.connection_api.then(|| {
            format!(
                "{}single/senders/{sender_id}/transportfile",
                self.connection_base()
            )
        });
        (Resource::Flow(flow), Resource::Sender(s))
    }

    /// The Connection API's base URL (`…/x-nmos/connection/v1.1/`).
    pub fn connection_base(&self) -> String {
        format!(
            "http://{}/x-nmos/connection/{CONNECTION_VERSION}/",
            host_port(&self.api_host, self.api_port)
        )
    }

    fn node(&self) -> Node {
        let base = format!("http://{}/", host_port(&self.api_host, self.api_port));
        Node {
            core: core(self.node_id, &self.label, self.program),
            href: base,
            hostname: self.hostname.clone(),
            api: NodeApi {
                versions: vec![API_VERSION.to_string()],
                endpoints: vec![Endpoint {
                    host: self.api_host.clone(),
                    port: self.api_port,
                    protocol: "http".into(),
                    authorization: self.authorization,
                }],
            },
            caps: NoCaps {},
            services: Vec::new(),
            clocks: vec![Clock {
                name: CLOCK.into(),
                ref_type: "internal".into(),
            }],
            interfaces: self.interfaces.clone(),
        }
    }

    fn device(&self, id: ResourceId, senders: &[Resource], receivers: &[Resource]) -> Resource {
        let description = format!("the streams of {}", self.program);
        Resource::Device(Device {
            core: core(id, &self.label, &description),
            kind: DEVICE_GENERIC.into(),
            node_id: self.node_id,
            senders: senders.iter().map(Resource::id).collect(),
            receivers: receivers.iter().map(Resource::id).collect(),
            controls: if self.connection_api {
                vec![Control {
                    href: self.connection_base(),
                    kind: CONTROL_CONNECTION.into(),
                    authorization: self.authorization,
                }]
            } else {
                Vec::new()
            },
        })
    }

    fn source(&self, id: ResourceId, device: ResourceId, p: &PathSpec) -> Source {
        let (format, grain_rate) = match p.track {
            Track::Raw { rate, .. } => (FORMAT_VIDEO, Some(rational(rate))),
            Track::Ts => ("urn:x-nmos:format:mux", None),
        };
        Source {
            core: core(id, &p.name, "a path of nagare serve"),
            grain_rate,
            caps: NoCaps {},
            device_id: device,
            parents: Vec::new(),
            clock_name: Some(CLOCK.into()),
            format: format.into(),
        }
    }

    fn sender(
        &self,
        core: Core,
        flow: ResourceId,
        device: ResourceId,
        transport: &str,
        active: bool,
    ) -> Sender {
        Sender {
            core,
            caps: NoCaps {},
            flow_id: Some(flow),
            transport: transport.into(),
            device_id: device,
            // A path's sender sets its IS-05 transportfile; a push
            // stream's SDP is its requester's.
            manifest_href: None,
            interface_bindings: self.bindings.clone(),
            subscription: SenderSubscription {
                receiver_id: None,
                active,
            },
        }
    }
}

impl NodeSpec {
    fn receiver(&self, device: ResourceId, r: &ReceiverSpec) -> Receiver {
        let id = receiver_id(self.node_id, &r.name);
        let description = format!("a receiver of {}", self.program);
        Receiver {
            core: core(id, &r.name, &description),
            device_id: device,
            transport: TRANSPORT_RTP.into(),
            interface_bindings: self.bindings.clone(),
            subscription: r.subscription.clone(),
            format: FORMAT_VIDEO.into(),
            caps: match r.fixed {
                Some((format, rate)) => fixed_video_caps(format, rate),
                None => raw_video_caps(),
            },
        }
    }
}

/// What a raw video receiver of nagare takes: `video/raw`, progressive,
/// 4:2:2 at 8 or 10 bits (`uyvy422`, `uyvp`) or RGB at 8 (`rgb24`), as
/// BCP-004-01 constraint sets, each labelled and enabled.
pub fn raw_video_caps() -> ReceiverCaps {
    let set = |sampling: &str, depths: &[u32]| {
        let bits: Vec<String> = depths.iter().map(u32::to_string).collect();
        serde_json::json!({
            "urn:x-nmos:cap:meta:label":
                format!("progressive {sampling}, {} bit", bits.join(" or ")),
            "urn:x-nmos:cap:meta:enabled": true,
            "urn:x-nmos:cap:format:media_type": {"enum": ["video/raw"]},
            "urn:x-nmos:cap:format:interlace_mode": {"enum": ["progressive"]},
            "urn:x-nmos:cap:format:color_sampling": {"enum": [sampling]},
            "urn:x-nmos:cap:format:component_depth": {"enum": depths},
        })
    };
    ReceiverCaps {
        media_types: vec!["video/raw".into()],
        constraint_sets: vec![set("YCbCr-4:2:2", &[8, 10]), set("RGB", &[8])],
        // The sets are fixed in the program and never change while any
        // node runs, so their version is the TAI epoch: a controller
        // comparing versions never sees a change, which is the truth.
        version: Some("0:0".into()),
    }
}

/// What a receiver fixed to one `format` (and frame `rate`, if given)
/// takes: one BCP-004-01 constraint set naming its size, sampling,
/// depth and rate, so a controller sees it cannot take anything else.
pub fn fixed_video_caps(format: VideoFormat, rate: Option<FrameRate>) -> ReceiverCaps {
    let pf = format.pixel_format;
    let label = format!(
        "{}x{} progressive {}, {} bit{}, fixed by the operator",
        format.width,
        format.height,
        pf.sampling(),
        pf.depth(),
        rate.map_or(String::new(), |r| format!(", {r} fps")),
    );
    let mut set = serde_json::json!({
        "urn:x-nmos:cap:meta:label": label,
        "urn:x-nmos:cap:meta:enabled": true,
        "urn:x-nmos:cap:format:media_type": {"enum": ["video/raw"]},
        "urn:x-nmos:cap:format:interlace_mode": {"enum": ["progressive"]},
        "urn:x-nmos:cap:format:frame_width": {"enum": [format.width]},
        "urn:x-nmos:cap:format:frame_height": {"enum": [format.height]},
        "urn:x-nmos:cap:format:color_sampling": {"enum": [pf.sampling()]},
        "urn:x-nmos:cap:format:component_depth": {"enum": [pf.depth()]},
    });
    if let Some(r) = rate {
        set["urn:x-nmos:cap:format:grain_rate"] =
            serde_json::json!({"enum": [{"numerator": r.num, "denominator": r.den}]});
    }
    ReceiverCaps {
        media_types: vec!["video/raw".into()],
        constraint_sets: vec![set],
        // Fixed for the life of the process, as in `raw_video_caps`.
        version: Some("0:0".into()),
    }
}

fn flow_of(id: ResourceId, source: ResourceId, device: ResourceId, p: &PathSpec) -> Flow {
    let (format, media_type, grain_rate, picture) = match p.track {
        Track::Raw { format, rate, .. } => (
            FORMAT_VIDEO,
            "video/raw",
            Some(rational(rate)),
            Some(picture(format)),
        ),
        Track::Ts => ("urn:x-nmos:format:mux", "video/MP2T", None, None),
    };
    Flow {
        core: core(id, &p.name, "a path of nagare serve"),
        grain_rate,
        source_id: source,
        device_id: device,
        parents: Vec::new(),
        format: format.into(),
        media_type: media_type.into(),
        picture,
    }
}

fn rational(rate: FrameRate) -> Rational {
    Rational {
        numerator: rate.num,
        denominator: rate.den,
    }
}

/// Geometry and sampling as the SDP nagare writes says them: progressive,
/// BT.709, SDR.
pub fn picture(format: VideoFormat) -> Picture {
    let (w, h, depth) = (format.width, format.height, format.pixel_format.depth());
    let c = |name: &str, width| Component {
        name: name.into(),
        width,
        height: h,
        bit_depth: depth,
    };
    let components = match format.pixel_format {
        PixelFormat::Uyvy422 | PixelFormat::Uyvp => vec![c("Y", w), c("Cb", w / 2), c("Cr", w / 2)],
        PixelFormat::Rgb24 => vec![c("R", w), c("G", w), c("B", w)],
    };
    Picture {
        frame_width: w,
        frame_height: h,
        interlace_mode: "progressive".into(),
        colorspace: "BT709".into(),
        transfer_characteristic: "SDR".into(),
        components,
    }
}

/// `host:port`, with brackets around an IPv6 address.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The resources of `kind` in `all`.
pub fn of_kind(all: &[Resource], kind: Kind) -> impl Iterator<Item = &Resource> {
    all.iter().filter(move |r| r.kind() == kind)
}
