//! AMWA NMOS IS-05 Connection API v1.1, sans-IO: the staging and
//! activation machine of one sender or receiver.
//!
//! A controller PATCHes `/staged` (transport parameters per leg, the
//! peer's id, `master_enable`, a receiver's SDP) and asks for an
//! activation: immediate, at a TAI time, or after a span. The machine
//! checks the body against the schemas and the constraints (400), refuses
//! a PATCH while an activation is scheduled unless it cancels it (423),
//! keeps the schedule on the caller's clock (TAI, as IS-05 writes every
//! time), and hands each due activation to the driver with `"auto"`
//! resolved; the driver starts or stops the stream and says whether that
//! worked ([`Connection::complete`]); only then does `/active` change.
//!
//! Time is TAI ([`TaiTime`]), not [`Nanos`](crate::Nanos): an absolute
//! activation names a TAI instant, and comparing the caller's TAI clock
//! with it directly keeps the schedule exact across the driver's clock.

mod params;
mod transport_file;

use std::collections::VecDeque;

use serde_json::{Map, Value, json};

pub use params::{Constraint, Constraints, DEFAULT_PORT, Leg, Listen, Param, Role};
pub use transport_file::{SDP_TYPE, TransportFile, sender_sdp};

use transport_file::FileError;

use super::id::ResourceId;
use super::version::TaiTime;

/// Largest PATCH body read (a two-leg SDP is well under 4 KiB).
pub const MAX_PATCH: usize = 64 * 1024;

/// How an activation is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// At once, within the PATCH.
    Immediate,
    /// When the TAI clock reaches `requested_time`.
    ScheduledAbsolute,
    /// `requested_time` after the PATCH arrived.
    ScheduledRelative,
}

impl Mode {
    /// The wire name (`activate_immediate`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Immediate => "activate_immediate",
            Mode::ScheduledAbsolute => "activate_scheduled_absolute",
            Mode::ScheduledRelative => "activate_scheduled_relative",
        }
    }

    fn parse(text: &str) -> Option<Mode> {
        [
            Mode::Immediate,
            Mode::ScheduledAbsolute,
            Mode::ScheduledRelative,
        ]
        .into_iter()
        .find(|m| m.name() == text)
    }
}

/// An `activation` object as `/staged` and `/active` show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// The mode, `None` when nothing is scheduled (or was activated).
    pub mode: Option<Mode>,
    /// What the controller asked for.
    pub requested: Option<TaiTime>,
    /// When it happens (scheduled) or happened (done).
    pub at: Option<TaiTime>,
}

impl Timing {
    fn to_json(self) -> Value {
        json!({
            "mode": self.mode.map(Mode::name),
            "requested_time": self.requested.map(|t| t.to_string()),
            "activation_time": self.at.map(|t| t.to_string()),
        })
    }
}

/// A setting of the resource: what `/staged` holds, and, resolved, what
/// `/active` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The connected peer (a sender's `receiver_id`, a receiver's
    /// `sender_id`).
    pub peer: Option<ResourceId>,
    /// Whether the sender sends or the receiver receives.
    pub master_enable: bool,
    /// One entry per leg.
    pub legs: Vec<Leg>,
    /// A receiver's SDP, if one was given.
    pub transport_file: Option<TransportFile>,
}

/// An activation for the driver to carry out, with `"auto"` resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// How it was asked for.
    pub mode: Mode,
    /// The controller's `requested_time`.
    pub requested: Option<TaiTime>,
    /// When a scheduled activation is due (absolute, or relative resolved
    /// against the PATCH's arrival); `None` for an immediate one. With a
    /// [lead](Connection::set_lead) the event comes that much earlier, and
    /// the driver makes the stream begin at this instant.
    pub at: Option<TaiTime>,
    /// What to apply.
    pub setting: Setting,
    /// `/staged` once it is done (unresolved, activation cleared).
    staged: Setting,
}

/// What a PATCH did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patched {
    /// Staged only (`200`).
    Staged,
    /// An activation is scheduled (`202`); it comes from
    /// [`Connection::poll_event`] when due.
    Scheduled,
    /// An immediate activation: carry it out, then call
    /// [`Connection::complete`] for the answer.
    Activate(Box<Activation>),
}

/// What the machine tells the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A scheduled activation is due: start or stop the stream as its
    /// setting says, then call [`Connection::complete`].
    Activate(Box<Activation>),
}

/// Why a PATCH or an activation was refused; [`ConnectionError::status`]
/// is the HTTP status IS-05 gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The body breaks the schema or the constraints (`400`).
    #[error("{0}")]
    Bad(String),
    /// An activation is scheduled (`423`): cancel it first with
    /// `"activation": {"mode": null}`.
    #[error(
        "an activation is scheduled for {0}: PATCH {{\"activation\": {{\"mode\": null}}}} cancels it"
    )]
    Locked(TaiTime),
    /// A receiver's transport file could not be read (`500`, as IS-05
    /// says for an SDP that does not parse).
    #[error("the transport_file cannot be used: {0}")]
    TransportFile(String),
    /// The driver could not carry the activation out (`400`: the
    /// parameters name what the node may not do, e.g. a destination
    /// outside its allow-list).
    #[error("{0}")]
    Refused(String),
}

impl ConnectionError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ConnectionError::Bad(_) | ConnectionError::Refused(_) => 400,
            ConnectionError::Locked(_) => 423,
            ConnectionError::TransportFile(_) => 500,
        }
    }
}

fn bad(message: impl Into<String>) -> ConnectionError {
    ConnectionError::Bad(message.into())
}

/// The staging and activation machine of one sender or receiver.
#[derive(Debug, Clone)]
pub struct Connection {
    role: Role,
    constraints: Vec<Constraints>,
    auto: Vec<Leg>,
    staged: Setting,
    staged_timing: Timing,
    active: Setting,
    active_timing: Timing,
    /// How long before its time an enabling scheduled activation is
    /// handed out, in nanoseconds (see [`Connection::set_lead`]).
    lead_ns: u64,
    events: VecDeque<Event>,
}

impl Connection {
    /// A resource with one leg per entry of `constraints` (two for ST
    /// 2022-7), staged with IS-05's defaults and active with those
    /// resolved by `auto` (the driver's choice for each `"auto"` key, per
    /// leg), `master_enable` false.
    pub fn new(role: Role, constraints: Vec<Constraints>, auto: Vec<Leg>) -> Connection {
        let legs = vec![Leg::defaults(role); constraints.len().max(1)];
        let staged = Setting {
            peer: None,
            master_enable: false,
            legs,
            transport_file: None,
        };
        let mut c = Connection {
            role,
            constraints,
            auto,
            active: staged.clone(),
            staged,
            staged_timing: Timing::default(),
            active_timing: Timing::default(),
            lead_ns: 0,
            events: VecDeque::new(),
        };
        c.active.legs = c.resolve(&c.staged.legs);
        c
    }

    /// Sender or receiver.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Replaces what `"auto"` resolves to (an interface came or went);
    /// takes effect at the next activation.
    pub fn set_auto(&mut self, auto: Vec<Leg>) {
        self.auto = auto;
    }

    /// Hands a scheduled activation that enables the resource
    /// (`master_enable` true) out `lead` before its time, so a driver
    /// whose stream needs time to start (a cluster leg's pacer, which must
    /// hold its first frame before it is due) can make it begin exactly at
    /// the requested instant ([`Activation::at`]); `/active` then names
    /// that instant as the activation time. One that disables is handed
    /// out on time: a sender stops no earlier than asked. Zero (the
    /// default) hands every activation out on time.
    pub fn set_lead(&mut self, lead: crate::Nanos) {
        self.lead_ns = lead.as_nanos();
    }

    /// What is active now.
    pub fn active(&self) -> &Setting {
        &self.active
    }

    /// When the active setting was activated, if it was.
    pub fn activated_at(&self) -> Option<TaiTime> {
        self.active_timing.at
    }

    /// The stream stopped without an activation (it failed, or its
    /// restart did): `/active` says `master_enable` false, as IS-05 asks
    /// of a resource that no longer does what was activated.
    pub fn stopped(&mut self) {
        self.active.master_enable = false;
    }

    /// What is staged now.
    pub fn staged(&self) -> &Setting {
        &self.staged
    }

    /// Sets staged and active to `setting` without a PATCH: a stream the
    /// driver started some other way (its own API) shows as it runs.
    pub fn assume(&mut self, setting: Setting) {
        self.active = setting.clone();
        self.active.legs = self.resolve(&setting.legs);
        self.staged = setting;
    }

    fn resolve(&self, legs: &[Leg]) -> Vec<Leg> {
        legs.iter()
            .enumerate()
            .map(|(k, leg)| match self.auto.get(k) {
                Some(auto) => leg.resolve(auto),
                None => leg.resolve(&Leg::defaults(self.role)),
            })
            .collect()
    }

    /// `/constraints`: one object per leg.
    pub fn constraints_json(&self) -> Value {
        let legs = self.staged.legs.len();
        Value::Array(
            (0..legs)
                .map(|k| {
                    self.constraints
                        .get(k)
                        .cloned()
                        .unwrap_or_default()
                        .to_json(self.role)
                })
                .collect(),
        )
    }

    /// `/staged`.
    pub fn staged_json(&self) -> Value {
        self.setting_json(&self.staged, self.staged_timing)
    }

    /// `/active`.
    pub fn active_json(&self) -> Value {
        self.setting_json(&self.active, self.active_timing)
    }

    fn setting_json(&self, s: &Setting, timing: Timing) -> Value {
        let mut out = Map::new();
        let peer = s.peer.map(|id| id.to_string());
        match self.role {
            Role::Sender => out.insert("receiver_id".into(), json!(peer)),
            Role::Receiver => out.insert("sender_id".into(), json!(peer)),
        };
        out.insert("master_enable".into(), json!(s.master_enable));
        out.insert("activation".into(), timing.to_json());
        let legs = s.legs.iter().map(Leg::to_json).collect();
        out.insert("transport_params".into(), Value::Array(legs));
        if self.role == Role::Receiver {
            out.insert(
                "transport_file".into(),
                TransportFile::to_json(s.transport_file.as_ref()),
            );
        }
        Value::Object(out)
    }

    /// A PATCH of `/staged` at TAI time `now`: checked whole before
    /// anything changes.
    pub fn patch(&mut self, now: TaiTime, body: &[u8]) -> Result<Patched, ConnectionError> {
        if body.len() > MAX_PATCH {
            return Err(bad(format!(
                "the body is {} bytes; at most {MAX_PATCH} are read",
                body.len()
            )));
        }
        let value: Value =
            serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON ({e})")))?;
        let Value::Object(fields) = value else {
            return Err(bad("the body must be a JSON object"));
        };
        let activation = match fields.get("activation") {
            Some(a) => Some(parse_activation(a)?),
            None => None,
        };
        let cancels = matches!(activation, Some((None, _)));
        if let (Some(at), false) = (self.scheduled(), cancels) {
            return Err(ConnectionError::Locked(at));
        }
        let staged = self.staged_with(&fields)?;
        let Some((mode, requested)) = activation else {
            self.staged = staged;
            return Ok(Patched::Staged);
        };
        let Some(mode) = mode else {
            self.staged = staged;
            self.staged_timing = Timing::default();
            return Ok(Patched::Staged);
        };
        let at = match (mode, requested) {
            (Mode::Immediate, _) => {
                let a = self.activation(mode, None, None, staged);
                return Ok(Patched::Activate(Box::new(a)));
            }
            (Mode::ScheduledAbsolute, Some(t)) => t,
            (Mode::ScheduledRelative, Some(span)) => now.plus(span),
            (_, None) => {
                return Err(bad(format!(
                    "{} needs a requested_time (TAI seconds:nanoseconds)",
                    mode.name()
                )));
            }
        };
        self.staged = staged;
        self.staged_timing = Timing {
            mode: Some(mode),
            requested,
            at: Some(at),
        };
        Ok(Patched::Scheduled)
    }

    /// When the scheduled activation is due, if one is scheduled.
    fn scheduled(&self) -> Option<TaiTime> {
        self.staged_timing.mode.and(self.staged_timing.at)
    }

    /// The staged setting with the PATCH's fields applied.
    fn staged_with(&self, fields: &Map<String, Value>) -> Result<Setting, ConnectionError> {
        let mut next = self.staged.clone();
        let peer_key = match self.role {
            Role::Sender => "receiver_id",
            Role::Receiver => "sender_id",
        };
        for (key, value) in fields {
            match key.as_str() {
                "activation" => {}
                "master_enable" => {
                    next.master_enable = value.as_bool().ok_or_else(|| {
                        bad(format!("master_enable: {value} is not true or false"))
                    })?
                }
                "transport_params" | "transport_file" if self.role == Role::Receiver => {}
                "transport_params" => {}
                k if k == peer_key => next.peer = parse_peer(k, value)?,
                other => {
                    return Err(bad(format!(
                        "'{other}' is not a field of a {} staged resource",
                        match self.role {
                            Role::Sender => "sender's",
                            Role::Receiver => "receiver's",
                        }
                    )));
                }
            }
        }
        if let Some(file) = fields.get("transport_file") {
            transport_file::apply(file, &mut next.legs, &mut next.transport_file).map_err(|e| {
                match e {
                    FileError::Bad(m) => ConnectionError::Bad(m),
                    FileError::Unreadable(m) => ConnectionError::TransportFile(m),
                }
            })?;
        }
        if let Some(params) = fields.get("transport_params") {
            self.apply_params(params, &mut next.legs)?;
        }
        Ok(next)
    }

    /// `transport_params`: one object per leg, each applied whole or not
    /// at all.
    fn apply_params(&self, params: &Value, legs: &mut [Leg]) -> Result<(), ConnectionError> {
        let Value::Array(entries) = params else {
            return Err(bad("transport_params must be an array, one object per leg"));
        };
        if entries.len() != legs.len() {
            return Err(bad(format!(
                "transport_params has {} entries; this resource has {} leg(s)",
                entries.len(),
                legs.len()
            )));
        }
        for (k, (leg, entry)) in legs.iter_mut().zip(entries).enumerate() {
            let limits = self.constraints.get(k).cloned().unwrap_or_default();
            leg.apply(self.role, entry, &limits)
                .map_err(|e| bad(format!("transport_params[{k}]: {e}")))?;
        }
        Ok(())
    }

    fn activation(
        &self,
        mode: Mode,
        requested: Option<TaiTime>,
        at: Option<TaiTime>,
        staged: Setting,
    ) -> Activation {
        let mut setting = staged.clone();
        setting.legs = self.resolve(&staged.legs);
        Activation {
            mode,
            requested,
            at,
            setting,
            staged,
        }
    }

    /// Advances the clock to `now`: a scheduled activation that is due
    /// becomes an [`Event::Activate`] (one whose time had already passed
    /// when it was asked for is due at once; one that enables is due its
    /// [lead](Connection::set_lead) early).
    pub fn handle_timeout(&mut self, now: TaiTime) {
        let Some(due) = self.due() else {
            return;
        };
        if now < due {
            return;
        }
        let timing = std::mem::take(&mut self.staged_timing);
        let mode = timing.mode.unwrap_or(Mode::ScheduledAbsolute);
        let a = self.activation(mode, timing.requested, timing.at, self.staged.clone());
        self.events.push_back(Event::Activate(Box::new(a)));
    }

    /// When the scheduled activation is handed out: its time, less the
    /// lead for one that enables.
    fn due(&self) -> Option<TaiTime> {
        let at = self.scheduled()?;
        Some(if self.staged.master_enable {
            at.minus_nanos(self.lead_ns)
        } else {
            at
        })
    }

    /// When [`Connection::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<TaiTime> {
        self.due()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The driver carried `activation` out at `now` (or could not, with
    /// the reason): on success `/active` takes its setting and the answer
    /// is the PATCH's body (`/staged` with the activation's times); on
    /// failure nothing active changes.
    pub fn complete(
        &mut self,
        now: TaiTime,
        activation: Box<Activation>,
        result: Result<(), String>,
    ) -> Result<Value, ConnectionError> {
        if let Err(reason) = result {
            return Err(ConnectionError::Refused(reason));
        }
        // An activation handed out early happens at its time.
        let at = activation.at.map_or(now, |t| t.max(now));
        let timing = Timing {
            mode: Some(activation.mode),
            requested: activation.requested,
            at: Some(at),
        };
        let Activation {
            setting, staged, ..
        } = *activation;
        self.staged = staged;
        self.staged_timing = Timing::default();
        self.active = setting;
        self.active_timing = timing;
        Ok(self.setting_json(&self.staged, timing))
    }
}

/// `activation`: its mode (`None` for null, which cancels) and
/// `requested_time`.
fn parse_activation(value: &Value) -> Result<(Option<Mode>, Option<TaiTime>), ConnectionError> {
    let Value::Object(fields) = value else {
        return Err(bad(
            "activation must be an object with mode and requested_time",
        ));
    };
    if let Some(other) = fields
        .keys()
        .find(|k| *k != "mode" && *k != "requested_time")
    {
        return Err(bad(format!(
            "'{other}' is not a field of activation: mode and requested_time are"
        )));
    }
    let mode = match fields.get("mode") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Mode::parse(s).ok_or_else(|| {
            bad(format!(
                "activation mode '{s}' is not activate_immediate, activate_scheduled_absolute, \
                 activate_scheduled_relative or null"
            ))
        })?),
        Some(other) => return Err(bad(format!("activation mode {other} is not a string"))),
        None => return Err(bad("activation needs a mode (null cancels)")),
    };
    let requested = match fields.get("requested_time") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(TaiTime::parse(s).ok_or_else(|| {
            bad(format!(
                "requested_time '{s}' is not seconds:nanoseconds (nanoseconds below 10^9)"
            ))
        })?),
        Some(other) => return Err(bad(format!("requested_time {other} is not a string"))),
    };
    Ok((mode, requested))
}

/// A `receiver_id` or `sender_id`: null or a UUID.
fn parse_peer(key: &str, value: &Value) -> Result<Option<ResourceId>, ConnectionError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => ResourceId::parse(s)
            .filter(|id| id.to_string() == *s)
            .map(Some)
            .ok_or_else(|| bad(format!("{key}: '{s}' is not a lower-case UUID"))),
        other => Err(bad(format!("{key}: {other} is not a UUID or null"))),
    }
}

#[cfg(test)]
mod tests;
