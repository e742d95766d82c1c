//! Registration with an IS-04 registry, on the caller's time.
//!
//! The machine keeps two things: the resources the node wants registered
//! and what it believes the current registry holds (id → version). Its
//! next request is always the first difference: a DELETE of what the
//! registry holds but the node no longer has (children first), else a
//! POST of the first resource in parent order whose version the registry
//! lacks. So the first registration, a re-registration after a 404
//! heartbeat (forget what the registry holds) and a re-POST of a changed
//! resource are the same walk.
//!
//! - Heartbeat: `POST health/nodes/{id}` every 5 s once the node is held.
//! - A 404 heartbeat: the registry lost the node; register everything.
//! - 5xx, no answer within the timeout, or a failed connection: the next
//!   registry in priority order, heartbeat first (a registry of the same
//!   cluster may already hold the node); after the last, start over from
//!   the first after a pause.
//! - A node POST answered 200 on the first registration: the registry
//!   kept an old record; DELETE it and register afresh (IS-04 "Registry
//!   Interactions").
//! - [`Input::Leave`] (a clean stop): DELETE everything the registry
//!   holds, children first and the node last, no heartbeats or POSTs,
//!   and give up on the first failure or after [`Config::leave`], so a
//!   registry that does not answer cannot hold the exit;
//!   [`Registrar::has_left`] says when it is over.
//!
//! Polling order: feed (responses, new resources, registries, the timer)
//! → transmit (at most one request is in flight) → events → wait until
//! `poll_timeout`.

use std::collections::{BTreeMap, VecDeque};

use super::id::ResourceId;
use super::resource::{API_VERSION, Kind, Resource};
use super::version::TaiTime;
use crate::Nanos;

/// Timings of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Between heartbeats (IS-04: 5 s; a registry expires a node after 12 s).
    pub heartbeat: Nanos,
    /// A request unanswered this long counts as a failed registry.
    pub request_timeout: Nanos,
    /// After every registry failed, the pause before starting over.
    pub retry: Nanos,
    /// How long a clean stop may spend deregistering ([`Input::Leave`]).
    pub leave: Nanos,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            heartbeat: Nanos::from_secs(5),
            request_timeout: Nanos::from_secs(3),
            retry: Nanos::from_secs(5),
            leave: Nanos::from_secs(2),
        }
    }
}

/// A registry as discovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// Its base URL, `http://host:port` (the API path is appended).
    pub base: String,
    /// DNS-SD `pri`: lower is preferred.
    pub priority: u32,
}

/// Number of a request, to match its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// POST with a JSON body (or none, for a heartbeat).
    Post,
    /// DELETE.
    Delete,
}

/// What to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Give it back with the answer.
    pub id: RequestId,
    /// Method.
    pub method: Method,
    /// Full URL.
    pub url: String,
    /// JSON body, if any.
    pub body: Option<String>,
}

/// What the driver feeds in.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The registries found (any order; sorted by priority here).
    Discovered(Vec<Registry>),
    /// The node's current resources, versions set ([`Store`](super::Store)).
    Resources(Vec<Resource>),
    /// An HTTP answer.
    Response {
        /// The request answered.
        request: RequestId,
        /// Its status.
        status: u16,
    },
    /// A request that got no answer (connection refused, reset, timeout).
    Failed {
        /// The request.
        request: RequestId,
    },
    /// `now` reached `poll_timeout()`.
    Timer,
    /// The node is stopping cleanly: deregister (children first, the
    /// node last) within [`Config::leave`].
    Leave,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Every resource is registered with this registry.
    Registered {
        /// Its base URL.
        registry: String,
    },
    /// A registry failed; moving to the next.
    FailedOver {
        /// The one that failed.
        from: String,
        /// The next one.
        to: String,
        /// What went wrong.
        reason: String,
    },
    /// The registry answered a heartbeat 404: registering everything again.
    Reregistering {
        /// Its base URL.
        registry: String,
    },
    /// The registry refused a resource (4xx); it is not sent again until
    /// it changes.
    Refused {
        /// Its kind.
        kind: Kind,
        /// Its id.
        id: ResourceId,
        /// The status.
        status: u16,
    },
    /// Every registry failed; starting over after [`Config::retry`].
    Unreachable {
        /// What went wrong last.
        reason: String,
    },
    /// A clean stop is over ([`Input::Leave`]).
    Left {
        /// The registry, if there was one.
        registry: Option<String>,
        /// Resources it still holds (a failure or the time ran out; it
        /// expires them itself).
        remaining: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Heartbeat,
    Post(ResourceId, TaiTime),
    Delete(Kind, ResourceId),
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: RequestId,
    step: Step,
    sent: Nanos,
    deadline: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Heartbeat first, before trusting what the registry holds.
    Probing,
    /// Registering differences and heartbeating.
    Active,
}

/// The registration machine of one node.
#[derive(Debug)]
pub struct Registrar {
    config: Config,
    registries: Vec<Registry>,
    current: usize,
    phase: Phase,
    wanted: Vec<Resource>,
    /// What the current registry holds, as far as the node knows.
    held: BTreeMap<ResourceId, (Kind, TaiTime)>,
    /// Versions the registry refused (4xx): not sent again.
    refused: BTreeMap<ResourceId, TaiTime>,
    /// The node POST of a fresh registration is not yet answered.
    fresh: bool,
    /// The registry kept an old node record: DELETE it first.
    clear_node: bool,
    /// `Registered` was said for the current registry.
    announced: bool,
    in_flight: Option<InFlight>,
    next_heartbeat: Option<Nanos>,
    resume_at: Option<Nanos>,
    next_id: u64,
    events: VecDeque<Event>,
    /// Deregistering ([`Input::Leave`]): until when.
    leaving: Option<Nanos>,
    /// The clean stop is over.
    left: bool,
}

impl Registrar {
    /// A machine with no registry and no resources yet.
    pub fn new(config: Config) -> Registrar {
        Registrar {
            config,
            registries: Vec::new(),
            current: 0,
            phase: Phase::Active,
            wanted: Vec::new(),
            held: BTreeMap::new(),
            refused: BTreeMap::new(),
            fresh: true,
            clear_node: false,
            announced: false,
            in_flight: None,
            next_heartbeat: None,
            resume_at: None,
            next_id: 0,
            events: VecDeque::new(),
            leaving: None,
            left: false,
        }
    }

    /// Takes one input.
    pub fn handle_input(&mut self, now: Nanos, input: Input) {
        match input {
            // A stopping node keeps its registry and resources as they were.
            Input::Discovered(_) | Input::Resources(_) if self.leaving.is_some() => {}
            Input::Discovered(list) => self.discovered(list),
            Input::Resources(mut list) => {
                list.sort_by_key(Resource::kind);
                self.wanted = list;
            }
            Input::Response { request, status } => {
                if let Some(f) = self.take_in_flight(request) {
                    self.answered(now, f, status);
                }
            }
            Input::Failed { request } => {
                if self.take_in_flight(request).is_some() {
                    self.fail_over(now, "no answer (connection failed)".into());
                }
            }
            Input::Leave => self.leave(now),
            Input::Timer if self.leaving.is_some_and(|t| now >= t) => self.finish_leaving(),
            Input::Timer => {
                if let Some(f) = self.in_flight.filter(|f| now >= f.deadline) {
                    self.in_flight = None;
                    let waited = f.deadline.0.saturating_sub(f.sent.0) / 1_000_000;
                    self.fail_over(now, format!("no answer within {waited} ms"));
                }
            }
        }
        self.announce();
    }

    /// The next request to send, if one is due.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Request> {
        if self.in_flight.is_some() || self.registries.is_empty() || self.left {
            return None;
        }
        if let Some(at) = self.resume_at {
            if now < at {
                return None;
            }
            self.resume_at = None;
            self.phase = Phase::Probing;
        }
        let node = self.node_id()?;
        let step = self.next_step(now, node)?;
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let mut deadline = Nanos(now.0.saturating_add(self.config.request_timeout.0));
        if let Some(end) = self.leaving {
            deadline = deadline.min(end);
        }
        self.in_flight = Some(InFlight {
            id,
            step,
            sent: now,
            deadline,
        });
        Some(self.request(id, step, node))
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call again at the latest (with [`Input::Timer`] once
    /// reached, then `poll_transmit`).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.left {
            return None;
        }
        if let Some(f) = self.in_flight {
            return Some(f.deadline);
        }
        if self.leaving.is_some() {
            return self.leaving;
        }
        self.resume_at.or(self.next_heartbeat)
    }

    /// Whether a clean stop ([`Input::Leave`]) is over: everything
    /// deregistered, or a failure or the time ended it.
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// How long a request may wait for its answer now: the request
    /// timeout, or what is left of a clean stop's time (a driver that
    /// blocks on a request bounds it by this).
    pub fn request_budget(&self, now: Nanos) -> Nanos {
        match self.leaving {
            Some(end) => Nanos(
                end.0
                    .saturating_sub(now.0)
                    .min(self.config.request_timeout.0),
            ),
            None => self.config.request_timeout,
        }
    }

    /// The registry in use, if any.
    pub fn registry(&self) -> Option<&str> {
        self.registries.get(self.current).map(|r| r.base.as_str())
    }

    /// Whether the current registry holds every resource as it is now.
    pub fn is_registered(&self) -> bool {
        self.phase == Phase::Active && self.resume_at.is_none() && self.pending().is_none()
    }

    fn node_id(&self) -> Option<ResourceId> {
        self.wanted
            .iter()
            .find(|r| r.kind() == Kind::Node)
            .map(Resource::id)
    }

    fn discovered(&mut self, mut list: Vec<Registry>) {
        list.sort_by_key(|r| r.priority);
        let current = self.registry().map(str::to_string);
        self.registries = list;
        match current.and_then(|c| self.registries.iter().position(|r| r.base == c)) {
            Some(k) => self.current = k,
            None => {
                // A new registry (or the first): start over at the best,
                // heartbeat first unless nothing was ever registered.
                self.current = 0;
                self.in_flight = None;
                self.announced = false;
                self.phase = if self.held.is_empty() {
                    Phase::Active
                } else {
                    Phase::Probing
                };
            }
        }
    }

    fn take_in_flight(&mut self, request: RequestId) -> Option<InFlight> {
        // An answer to anything but the request in flight (one that timed
        // out, or went to a registry since left) is stale.
        let f = self.in_flight.filter(|f| f.id == request)?;
        self.in_flight = None;
        Some(f)
    }

    /// The first difference between what is wanted and what is held.
    fn pending(&self) -> Option<Step> {
        if self.clear_node {
            return self.node_id().map(|n| Step::Delete(Kind::Node, n));
        }
        let gone = self
            .held
            .iter()
            .filter(|(id, _)| !self.wanted.iter().any(|r| r.id() == **id))
            .max_by_key(|(_, (kind, _))| *kind);
        if let Some((id, (kind, _))) = gone {
            return Some(Step::Delete(*kind, *id));
        }
        self.wanted.iter().find_map(|r| {
            let (id, version) = (r.id(), r.core().version);
            let held = self.held.get(&id).map(|h| h.1);
            let refused = self.refused.get(&id) == Some(&version);
            (held != Some(version) && !refused).then_some(Step::Post(id, version))
        })
    }

    fn next_step(&self, now: Nanos, node: ResourceId) -> Option<Step> {
        if self.leaving.is_some() {
            // Children first: receivers and senders, flows, sources,
            // devices, the node last.
            return self
                .held
                .iter()
                .max_by_key(|(_, (kind, _))| *kind)
                .map(|(id, (kind, _))| Step::Delete(*kind, *id));
        }
        if self.phase == Phase::Probing {
            return Some(Step::Heartbeat);
        }
        let due = self.next_heartbeat.is_some_and(|t| now >= t);
        if due && self.held.contains_key(&node) {
            return Some(Step::Heartbeat);
        }
        self.pending()
    }

    fn request(&self, id: RequestId, step: Step, node: ResourceId) -> Request {
        let base = self.registries[self.current].base.trim_end_matches('/');
        let api = format!("{base}/x-nmos/registration/{API_VERSION}");
        let (method, url, body) = match step {
            Step::Heartbeat => (Method::Post, format!("{api}/health/nodes/{node}"), None),
            Step::Post(rid, _) => {
                let body = self
                    .wanted
                    .iter()
                    .find(|r| r.id() == rid)
                    .map(Resource::registration_body);
                (Method::Post, format!("{api}/resource"), body)
            }
            Step::Delete(kind, rid) => (
                Method::Delete,
                format!("{api}/resource/{}/{rid}", kind.plural()),
                None,
            ),
        };
        Request {
            id,
            method,
            url,
            body,
        }
    }

    fn answered(&mut self, now: Nanos, f: InFlight, status: u16) {
        if self.leaving.is_some() {
            return self.answered_leaving(f, status);
        }
        if status >= 500 {
            return self.fail_over(now, format!("answered {status}"));
        }
        match f.step {
            Step::Heartbeat => self.heartbeat_answered(now, f, status),
            Step::Post(id, version) => self.post_answered(now, id, version, status),
            Step::Delete(_, id) if (200..300).contains(&status) || status == 404 => {
                if self.clear_node {
                    // The node's DELETE takes its children with it.
                    self.clear_node = false;
                    self.held.clear();
                } else {
                    self.held.remove(&id);
                }
            }
            Step::Delete(..) => self.fail_over(now, format!("answered a DELETE with {status}")),
        }
    }

    fn heartbeat_answered(&mut self, now: Nanos, f: InFlight, status: u16) {
        match status {
            200..=299 => {
                self.phase = Phase::Active;
                self.next_heartbeat = Some(Nanos(f.sent.0 + self.config.heartbeat.0));
            }
            404 => {
                self.events.push_back(Event::Reregistering {
                    registry: self.registry().unwrap_or_default().to_string(),
                });
                self.start_fresh();
            }
            _ => self.fail_over(now, format!("answered a heartbeat with {status}")),
        }
    }

    fn post_answered(&mut self, now: Nanos, id: ResourceId, version: TaiTime, status: u16) {
        let is_node = Some(id) == self.node_id();
        match status {
            200 if is_node && self.fresh => {
                // An old record of this node survived: clear it and its
                // children, then register afresh (expecting 201).
                self.fresh = false;
                self.clear_node = true;
            }
            200 | 201 => {
                if let Some(r) = self.wanted.iter().find(|r| r.id() == id) {
                    self.held.insert(id, (r.kind(), version));
                }
                if is_node {
                    self.fresh = false;
                    self.next_heartbeat
                        .get_or_insert(Nanos(now.0 + self.config.heartbeat.0));
                }
            }
            _ => {
                let kind = self
                    .wanted
                    .iter()
                    .find(|r| r.id() == id)
                    .map(Resource::kind);
                if let Some(kind) = kind {
                    self.events.push_back(Event::Refused { kind, id, status });
                }
                self.refused.insert(id, version);
            }
        }
    }

    /// Starts a clean stop: what is in flight is still answered, then
    /// DELETEs only.
    fn leave(&mut self, now: Nanos) {
        if self.leaving.is_some() || self.left {
            return;
        }
        self.leaving = Some(Nanos(now.0.saturating_add(self.config.leave.0)));
        self.clear_node = false;
        // Unreachable registries (waiting to start over) get nothing.
        if self.registries.is_empty() || self.resume_at.is_some() {
            self.held.clear();
        }
        self.done_leaving();
    }

    fn answered_leaving(&mut self, f: InFlight, status: u16) {
        match (f.step, status) {
            (Step::Delete(_, id), 200..=299 | 404) => {
                self.held.remove(&id);
            }
            // A registry refusing a DELETE will not take the others.
            (Step::Delete(..), _) => return self.finish_leaving(),
            // A POST answered as the stop began: it is held, so deleted.
            (Step::Post(id, version), 200..=299) => {
                if let Some(r) = self.wanted.iter().find(|r| r.id() == id) {
                    self.held.insert(id, (r.kind(), version));
                }
            }
            _ => {}
        }
        self.done_leaving();
    }

    /// Ends the clean stop once nothing is held and nothing in flight.
    fn done_leaving(&mut self) {
        if self.held.is_empty() && self.in_flight.is_none() {
            self.finish_leaving();
        }
    }

    fn finish_leaving(&mut self) {
        if self.left {
            return;
        }
        self.left = true;
        self.in_flight = None;
        self.events.push_back(Event::Left {
            registry: self.registry().map(str::to_string),
            remaining: self.held.len(),
        });
    }

    fn start_fresh(&mut self) {
        self.phase = Phase::Active;
        self.held.clear();
        self.refused.clear();
        self.fresh = true;
        self.clear_node = false;
        self.announced = false;
        self.next_heartbeat = None;
    }

    fn fail_over(&mut self, now: Nanos, reason: String) {
        if self.leaving.is_some() {
            // No other registry while stopping: this one expires the rest.
            return self.finish_leaving();
        }
        self.in_flight = None;
        self.announced = false;
        self.next_heartbeat = None;
        let Some(from) = self.registry().map(str::to_string) else {
            return;
        };
        self.phase = Phase::Probing;
        if self.current + 1 < self.registries.len() {
            self.current += 1;
            let to = self.registries[self.current].base.clone();
            self.events
                .push_back(Event::FailedOver { from, to, reason });
        } else {
            self.current = 0;
            self.resume_at = Some(Nanos(now.0 + self.config.retry.0));
            self.events.push_back(Event::Unreachable {
                reason: format!("{from} {reason}"),
            });
        }
    }

    fn announce(&mut self) {
        if self.leaving.is_some() {
            return;
        }
        if !self.announced && self.in_flight.is_none() && self.held_node() && self.is_registered() {
            self.announced = true;
            if let Some(r) = self.registries.get(self.current) {
                self.events.push_back(Event::Registered {
                    registry: r.base.clone(),
                });
            }
        }
    }

    fn held_node(&self) -> bool {
        self.node_id().is_some_and(|n| self.held.contains_key(&n))
    }
}
