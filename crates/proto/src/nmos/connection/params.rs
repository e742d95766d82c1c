//! IS-05 transport parameters of the RTP transport: one leg's values, the
//! keys a sender or a receiver has and what each takes, constraints, and
//! the checks a PATCH passes (the schemas' types, then the constraints).
//!
//! nagare carries the core RTP keys only (no FEC, no RTCP, no `ext_`):
//! a key it does not have is refused as the schemas'
//! `additionalProperties: false` refuses it, so a controller never
//! believes it set something nagare ignores.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde_json::{Map, Value, json};

/// Whether the resource sends or receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A sender (`/single/senders/{id}`).
    Sender,
    /// A receiver (`/single/receivers/{id}`).
    Receiver,
}

/// One transport parameter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `"auto"`: the node chooses (resolved in `/active`).
    Auto,
    /// An IP address.
    Ip(IpAddr),
    /// A UDP port.
    Port(u16),
    /// `rtp_enabled`.
    Flag(bool),
    /// `null` (a receiver's unset source or group).
    Null,
}

impl Param {
    fn to_json(self) -> Value {
        match self {
            Param::Auto => json!("auto"),
            Param::Ip(ip) => json!(ip.to_string()),
            Param::Port(p) => json!(p),
            Param::Flag(b) => json!(b),
            Param::Null => Value::Null,
        }
    }
}

/// What values a key takes (the schemas' types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    /// An address; `"auto"` and `null` where the schema allows them.
    Ip { auto: bool, null: bool },
    /// A port from `min` (or `"auto"`).
    Port { min: u16 },
    /// A boolean.
    Flag,
}

const SENDER_KEYS: [(&str, Type); 5] = [
    (
        "source_ip",
        Type::Ip {
            auto: true,
            null: false,
        },
    ),
    (
        "destination_ip",
        Type::Ip {
            auto: true,
            null: false,
        },
    ),
    ("source_port", Type::Port { min: 0 }),
    ("destination_port", Type::Port { min: 1 }),
    ("rtp_enabled", Type::Flag),
];

const RECEIVER_KEYS: [(&str, Type); 5] = [
    (
        "source_ip",
        Type::Ip {
            auto: false,
            null: true,
        },
    ),
    (
        "multicast_ip",
        Type::Ip {
            auto: false,
            null: true,
        },
    ),
    (
        "interface_ip",
        Type::Ip {
            auto: true,
            null: false,
        },
    ),
    ("destination_port", Type::Port { min: 1 }),
    ("rtp_enabled", Type::Flag),
];

impl Role {
    fn keys(self) -> &'static [(&'static str, Type)] {
        match self {
            Role::Sender => &SENDER_KEYS,
            Role::Receiver => &RECEIVER_KEYS,
        }
    }

    fn key(self, name: &str) -> Option<(&'static str, Type)> {
        self.keys().iter().copied().find(|(k, _)| *k == name)
    }
}

/// The RTP port IS-05 suggests for `"auto"` (RFC 3551's default).
pub const DEFAULT_PORT: u16 = 5004;

/// One leg's transport parameters (ST 2022-7 has two legs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leg(BTreeMap<&'static str, Param>);

impl Leg {
    /// IS-05's suggested defaults: a sender's addresses and ports
    /// `"auto"`; a receiver's source and group `null`, its interface and
    /// port `"auto"`; RTP enabled.
    pub fn defaults(role: Role) -> Leg {
        let map = role
            .keys()
            .iter()
            .map(|&(k, t)| {
                let v = match t {
                    Type::Ip { auto: false, .. } => Param::Null,
                    Type::Flag => Param::Flag(true),
                    _ => Param::Auto,
                };
                (k, v)
            })
            .collect();
        Leg(map)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<Param> {
        self.0.get(key).copied()
    }

    /// The address `key` holds, if it holds one.
    pub fn ip(&self, key: &str) -> Option<IpAddr> {
        match self.get(key) {
            Some(Param::Ip(ip)) => Some(ip),
            _ => None,
        }
    }

    /// The port `key` holds, if it holds one.
    pub fn port(&self, key: &str) -> Option<u16> {
        match self.get(key) {
            Some(Param::Port(p)) => Some(p),
            _ => None,
        }
    }

    /// Whether `rtp_enabled` is true.
    pub fn enabled(&self) -> bool {
        self.get("rtp_enabled") == Some(Param::Flag(true))
    }

    /// Sets `key` (a key the leg has; others are ignored, so a driver
    /// cannot grow the schema).
    pub fn set(&mut self, key: &str, value: Param) {
        if let Some(slot) = self.0.get_mut(key) {
            *slot = value;
        }
    }

    /// The leg with every `"auto"` replaced by what `auto` says for that
    /// key (the driver's choices: its interface address, a port); a key
    /// `auto` has no value for becomes the port 5004 or the unspecified
    /// address, so `/active` never holds `"auto"`.
    pub fn resolve(&self, auto: &Leg) -> Leg {
        let map = self
            .0
            .iter()
            .map(|(&k, &v)| {
                let resolved = match (v, auto.get(k)) {
                    (Param::Auto, Some(a)) if a != Param::Auto => a,
                    (Param::Auto, _) if k.ends_with("_port") => Param::Port(DEFAULT_PORT),
                    (Param::Auto, _) => Param::Ip(IpAddr::from([0, 0, 0, 0])),
                    (v, _) => v,
                };
                (k, resolved)
            })
            .collect();
        Leg(map)
    }

    /// Where a receiver's leg (resolved, as an activation hands it over)
    /// takes its stream: `None` while it is disabled or has no port.
    pub fn listen(&self) -> Option<Listen> {
        if !self.enabled() {
            return None;
        }
        let port = self.port("destination_port")?;
        let interface = self.ip("interface_ip").filter(|ip| !ip.is_unspecified());
        let source = self.ip("source_ip");
        match self.ip("multicast_ip") {
            // A group is joined on the interface, from the source (SSM).
            Some(group) => Some(Listen {
                address: SocketAddr::new(group, port),
                source,
                interface,
            }),
            // Unicast arrives at the interface's own address; a source
            // only filters.
            None => Some(Listen {
                address: SocketAddr::new(interface.unwrap_or(IpAddr::from([0, 0, 0, 0])), port),
                source,
                interface: None,
            }),
        }
    }

    /// The leg as JSON (`transport_params[]`).
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.to_json()))
                .collect(),
        )
    }

    /// Applies one `transport_params[]` entry of a PATCH: every key must
    /// be the role's, of the schema's type and within `limits`; nothing
    /// changes unless all are.
    pub fn apply(&mut self, role: Role, patch: &Value, limits: &Constraints) -> Result<(), String> {
        let Value::Object(fields) = patch else {
            return Err("a transport_params entry must be an object".into());
        };
        let mut next = self.clone();
        for (name, value) in fields {
            let (key, ty) = role.key(name).ok_or_else(|| {
                format!(
                    "'{name}' is not a transport parameter of this {}: {} are",
                    role_name(role),
                    role.keys()
                        .iter()
                        .map(|(k, _)| *k)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            let param = typed(key, ty, value)?;
            limits.check(key, param)?;
            next.0.insert(key, param);
        }
        *self = next;
        Ok(())
    }
}

/// Where a receiver's leg listens ([`Leg::listen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// What is bound: the multicast group, else the interface's own
    /// address (unspecified when `"auto"` named none), with the port.
    pub address: SocketAddr,
    /// Only this sender is taken: the source of source-specific
    /// multicast, or a filter on unicast.
    pub source: Option<IpAddr>,
    /// The interface a group is joined on, when one is named.
    pub interface: Option<IpAddr>,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Sender => "sender",
        Role::Receiver => "receiver",
    }
}

/// `value` as a parameter of type `ty`, or why it is not one.
fn typed(key: &str, ty: Type, value: &Value) -> Result<Param, String> {
    let bad = || format!("{key}: {value} is not {}", expected(ty));
    match (ty, value) {
        (Type::Ip { null: true, .. }, Value::Null) => Ok(Param::Null),
        (Type::Ip { auto: true, .. } | Type::Port { .. }, Value::String(s)) if s == "auto" => {
            Ok(Param::Auto)
        }
        (Type::Ip { .. }, Value::String(s)) => s.parse().map(Param::Ip).map_err(|_| bad()),
        (Type::Port { min }, Value::Number(n)) => n
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p >= min)
            .map(Param::Port)
            .ok_or_else(bad),
        (Type::Flag, Value::Bool(b)) => Ok(Param::Flag(*b)),
        _ => Err(bad()),
    }
}

fn expected(ty: Type) -> &'static str {
    match ty {
        Type::Ip {
            auto: true,
            null: false,
        } => "an IP address or \"auto\"",
        Type::Ip { null: true, .. } => "an IP address or null",
        Type::Ip { .. } => "an IP address",
        Type::Port { min: 0 } => "a port from 0 to 65535 or \"auto\"",
        Type::Port { .. } => "a port from 1 to 65535 or \"auto\"",
        Type::Flag => "true or false",
    }
}

/// What one key may hold beyond its type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Constraint {
    /// The only values allowed (`enum`), e.g. the interface addresses.
    pub allowed: Option<Vec<Param>>,
    /// Lowest port.
    pub minimum: Option<u16>,
    /// Highest port.
    pub maximum: Option<u16>,
}

/// One leg's constraints: a key without an entry is constrained by its
/// type alone (`{}` in `/constraints`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Constraints(pub BTreeMap<&'static str, Constraint>);

impl Constraints {
    /// Constrains `key`, a key of `role` (others are ignored).
    pub fn with(mut self, role: Role, key: &str, c: Constraint) -> Constraints {
        if let Some((k, _)) = role.key(key) {
            self.0.insert(k, c);
        }
        self
    }

    /// Whether `value` is allowed for `key`; `"auto"` always is (IS-05:
    /// constraints do not list it, the node resolves it within them).
    fn check(&self, key: &str, value: Param) -> Result<(), String> {
        let Some(c) = self.0.get(key) else {
            return Ok(());
        };
        if value == Param::Auto {
            return Ok(());
        }
        if let Some(allowed) = &c.allowed {
            if !allowed.contains(&value) {
                let list: Vec<String> = allowed.iter().map(|p| p.to_json().to_string()).collect();
                return Err(format!(
                    "{key}: {} is not allowed here; the constraints allow {}",
                    value.to_json(),
                    list.join(", ")
                ));
            }
        }
        if let Param::Port(p) = value {
            let low = c.minimum.unwrap_or(0);
            let high = c.maximum.unwrap_or(u16::MAX);
            if !(low..=high).contains(&p) {
                return Err(format!("{key}: {p} is outside {low} to {high}"));
            }
        }
        Ok(())
    }

    /// The leg's entry in `/constraints`: every key of `role`.
    pub fn to_json(&self, role: Role) -> Value {
        let mut out = Map::new();
        for (k, _) in role.keys() {
            let mut c = Map::new();
            if let Some(limit) = self.0.get(k) {
                if let Some(allowed) = &limit.allowed {
                    let list = allowed.iter().map(|p| p.to_json()).collect();
                    c.insert("enum".into(), Value::Array(list));
                }
                if let Some(min) = limit.minimum {
                    c.insert("minimum".into(), json!(min));
                }
                if let Some(max) = limit.maximum {
                    c.insert("maximum".into(), json!(max));
                }
            }
            out.insert((*k).to_string(), Value::Object(c));
        }
        Value::Object(out)
    }
}
