//! The IS-04 v1.3 resources as serde types: what the Node API answers and
//! what registration POSTs. Field names and URNs are the schemas'
//! (`APIs/schemas/*.json` of AMWA IS-04 v1.3); an optional field the
//! schemas allow to be absent is left out rather than sent as `null`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::id::ResourceId;
use super::version::TaiTime;

/// The Node API and Registration API version nagare speaks.
pub const API_VERSION: &str = "v1.3";

/// The six kinds of resource, in parent order: a registry refuses a child
/// whose parent it does not hold, so registration POSTs in this order and
/// DELETEs in the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The node itself.
    Node,
    /// A device of the node.
    Device,
    /// A source of a device.
    Source,
    /// A flow of a source.
    Flow,
    /// A sender of a flow.
    Sender,
    /// A receiver of a device.
    Receiver,
}

impl Kind {
    /// Every kind, in parent order.
    pub const ALL: [Kind; 6] = [
        Kind::Node,
        Kind::Device,
        Kind::Source,
        Kind::Flow,
        Kind::Sender,
        Kind::Receiver,
    ];

    /// The singular name (`"node"`), as the Registration API's `type`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Device => "device",
            Kind::Source => "source",
            Kind::Flow => "flow",
            Kind::Sender => "sender",
            Kind::Receiver => "receiver",
        }
    }

    /// The plural path segment (`"nodes"`) of the APIs' collections.
    pub const fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Device => "devices",
            Kind::Source => "sources",
            Kind::Flow => "flows",
            Kind::Sender => "senders",
            Kind::Receiver => "receivers",
        }
    }
}

/// What every resource has (`resource_core.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// Its id.
    pub id: ResourceId,
    /// When it last changed.
    pub version: TaiTime,
    /// A short name.
    pub label: String,
    /// A longer text.
    pub description: String,
    /// Free-form tags; nagare sets none.
    pub tags: BTreeMap<String, Vec<String>>,
}

/// An empty `caps` object (capabilities "not yet defined").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoCaps {}

/// A rational rate (`grain_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rational {
    /// Numerator.
    pub numerator: u32,
    /// Denominator.
    pub denominator: u32,
}

/// The node (`node.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// The Node API's base URL (deprecated but required).
    pub href: String,
    /// The host's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Versions and endpoints of the Node API.
    pub api: NodeApi,
    /// Capabilities: none defined.
    pub caps: NoCaps,
    /// Services besides the Node API: none yet.
    pub services: Vec<Service>,
    /// The clocks its sources may name.
    pub clocks: Vec<Clock>,
    /// Its network interfaces.
    pub interfaces: Vec<Interface>,
}

/// `node.api`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeApi {
    /// API versions served (`["v1.3"]`).
    pub versions: Vec<String>,
    /// Where it is served.
    pub endpoints: Vec<Endpoint>,
}

/// One place the Node API is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// IP address or host name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `http` (nagare serves no TLS).
    pub protocol: String,
    /// Whether the endpoint needs a token.
    pub authorization: bool,
}

/// A service of the node (`node.services[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    /// Its URL.
    pub href: String,
    /// Its type URN.
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether it needs a token.
    pub authorization: bool,
}

/// A clock (`clock_internal.json`): nagare's streams are timed by the
/// host's system clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clock {
    /// `clk0`, `clk1`, …
    pub name: String,
    /// `internal`.
    pub ref_type: String,
}

/// A network interface (`node.interfaces[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// The chassis id as LLDP would tell it; `None` (null) where none is
    /// sent, as on virtual machines.
    pub chassis_id: Option<String>,
    /// The interface's MAC, `aa-bb-cc-dd-ee-ff`.
    pub port_id: String,
    /// Its name (`eth0`), as senders' `interface_bindings` name it.
    pub name: String,
}

impl Interface {
    /// An interface named `name` with hardware address `mac`.
    pub fn new(name: &str, mac: [u8; 6]) -> Interface {
        Interface {
            chassis_id: None,
            port_id: mac_text(mac),
            name: name.to_string(),
        }
    }
}

/// A MAC written the NMOS way: lower-case hex pairs joined by `-`.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join("-")
}

/// A device (`device.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// Device type URN.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its node.
    pub node_id: ResourceId,
    /// Its senders (deprecated but required).
    pub senders: Vec<ResourceId>,
    /// Its receivers (deprecated but required).
    pub receivers: Vec<ResourceId>,
    /// Control endpoints (IS-05 goes here once served).
    pub controls: Vec<Control>,
}

/// A control endpoint of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    /// Its URL.
    pub href: String,
    /// Its type URN.
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether it needs a token.
    pub authorization: bool,
}

/// A source (`source_generic.json`: video or mux).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// Frames per second, for video.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grain_rate: Option<Rational>,
    /// Capabilities: none defined.
    pub caps: NoCaps,
    /// Its device.
    pub device_id: ResourceId,
    /// Sources it was made from: none.
    pub parents: Vec<ResourceId>,
    /// The clock of the node it is timed by.
    pub clock_name: Option<String>,
    /// `urn:x-nmos:format:video` or `urn:x-nmos:format:mux`.
    pub format: String,
}

/// A flow (`flow_video_raw.json` or `flow_mux.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// Frames per second, for video.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grain_rate: Option<Rational>,
    /// Its source.
    pub source_id: ResourceId,
    /// Its device.
    pub device_id: ResourceId,
    /// Flows it was made from: none.
    pub parents: Vec<ResourceId>,
    /// Format URN.
    pub format: String,
    /// `video/raw` or `video/MP2T`.
    pub media_type: String,
    /// Picture geometry and sampling, for raw video.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub picture: Option<Picture>,
}

/// What a raw video flow says of its pictures (`flow_video.json`,
/// `flow_video_raw.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Picture {
    /// Width in pixels.
    pub frame_width: u32,
    /// Height in pixels.
    pub frame_height: u32,
    /// `progressive` (nagare sends no interlaced video).
    pub interlace_mode: String,
    /// `BT709`, as the SDP's `colorimetry`.
    pub colorspace: String,
    /// `SDR`, as the SDP's `TCS`.
    pub transfer_characteristic: String,
    /// The components and their sampling.
    pub components: Vec<Component>,
}

/// One component of a raw video flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// `Y`, `Cb`, `Cr`, `R`, `G`, `B`.
    pub name: String,
    /// Samples per line.
    pub width: u32,
    /// Lines.
    pub height: u32,
    /// Bits per sample.
    pub bit_depth: u32,
}

/// A sender (`sender.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// Capabilities: none defined.
    pub caps: NoCaps,
    /// The flow it sends.
    pub flow_id: Option<ResourceId>,
    /// Transport URN.
    pub transport: String,
    /// Its device.
    pub device_id: ResourceId,
    /// Where its SDP is fetched, if over HTTP.
    pub manifest_href: Option<String>,
    /// The node interfaces it sends from, by name.
    pub interface_bindings: Vec<String>,
    /// Whether it is sending, and to which receiver.
    pub subscription: SenderSubscription,
}

/// `sender.subscription`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SenderSubscription {
    /// The receiver it was connected to by IS-05, if any.
    pub receiver_id: Option<ResourceId>,
    /// Whether it is sending.
    pub active: bool,
}

/// A receiver (`receiver_video.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receiver {
    /// Id, version, label.
    #[serde(flatten)]
    pub core: Core,
    /// Its device.
    pub device_id: ResourceId,
    /// Transport URN.
    pub transport: String,
    /// The node interfaces it listens on, by name.
    pub interface_bindings: Vec<String>,
    /// Whether it receives, and from which sender.
    pub subscription: ReceiverSubscription,
    /// Format URN.
    pub format: String,
    /// The media types it takes.
    pub caps: ReceiverCaps,
}

/// `receiver.subscription`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiverSubscription {
    /// The sender it was connected to by IS-05, if any.
    pub sender_id: Option<ResourceId>,
    /// Whether it is receiving.
    pub active: bool,
}

/// `receiver.caps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiverCaps {
    /// Media types taken (`video/raw`).
    pub media_types: Vec<String>,
    /// What else it takes, as BCP-004-01 constraint sets (each one
    /// object of `urn:x-nmos:cap:…` keys; any set satisfied is enough).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraint_sets: Vec<serde_json::Value>,
    /// When the constraint sets last changed (TAI `seconds:nanoseconds`),
    /// which BCP-004-01 requires beside them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Any one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// The node.
    Node(Node),
    /// A device.
    Device(Device),
    /// A source.
    Source(Source),
    /// A flow.
    Flow(Flow),
    /// A sender.
    Sender(Sender),
    /// A receiver.
    Receiver(Receiver),
}

impl Resource {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Resource::Node(_) => Kind::Node,
            Resource::Device(_) => Kind::Device,
            Resource::Source(_) => Kind::Source,
            Resource::Flow(_) => Kind::Flow,
            Resource::Sender(_) => Kind::Sender,
            Resource::Receiver(_) => Kind::Receiver,
        }
    }

    /// Its id, version and label.
    pub fn core(&self) -> &Core {
        match self {
            Resource::Node(r) => &r.core,
            Resource::Device(r) => &r.core,
            Resource::Source(r) => &r.core,
            Resource::Flow(r) => &r.core,
            Resource::Sender(r) => &r.core,
            Resource::Receiver(r) => &r.core,
        }
    }

    /// The same, to set the version.
    pub fn core_mut(&mut self) -> &mut Core {
        match self {
            Resource::Node(r) => &mut r.core,
            Resource::Device(r) => &mut r.core,
            Resource::Source(r) => &mut r.core,
            Resource::Flow(r) => &mut r.core,
            Resource::Sender(r) => &mut r.core,
            Resource::Receiver(r) => &mut r.core,
        }
    }

    /// Its id.
    pub fn id(&self) -> ResourceId {
        self.core().id
    }

    /// The resource as JSON (what the Node API answers for it).
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Resource::Node(r) => serde_json::to_value(r),
            Resource::Device(r) => serde_json::to_value(r),
            Resource::Source(r) => serde_json::to_value(r),
            Resource::Flow(r) => serde_json::to_value(r),
            Resource::Sender(r) => serde_json::to_value(r),
            Resource::Receiver(r) => serde_json::to_value(r),
        };
        // Plain structs of strings and numbers always serialise.
        value.unwrap_or(serde_json::Value::Null)
    }

    /// The Registration API's POST body: `{"type": "flow", "data": {…}}`.
    pub fn registration_body(&self) -> String {
        serde_json::json!({ "type": self.kind().name(), "data": self.to_json() }).to_string()
    }

    /// Whether it equals `other` but for the version.
    pub fn same_content(&self, other: &Resource) -> bool {
        let mut a = self.clone();
        a.core_mut().version = other.core().version;
        &a == other
    }
}
