//! Carries out the controller's requests over HTTP and feeds the nodes'
//! answers back. Every decision (who sends what, when a node has failed,
//! when a move is done, what to do about a request not answered in time)
//! is nagare-proto's `cluster::Controller`; this only moves requests,
//! answers and time, and keeps which stream on which node is which leg.
//! A node with `api = "nmos"` has its legs started and halted through its
//! stripe senders' IS-05 Connection API ([`super::nmos`]); every node is
//! polled through its stream table, which alone says how much a leg has
//! sent, whether its read-ahead ran dry and why it failed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use nagare_api::cluster::{ClusterLog, HaltedLeg, NodeApi, NotHalted};
use nagare_api::serve::{StreamInfo, StreamState};
use nagare_proto::Nanos;
use nagare_proto::cluster::{
    Controller, Event, Input, Listed, NodeStatus, Path, Request, Transmit, is05,
};
use nagare_proto::nmos::TaiTime;
use nagare_proto::nmos::model::activated_by;

use tracing::{Level, debug, error, info, warn};

use super::client::{Failure, Snapshot};
use super::config::Cluster;
use super::nmos;

/// The controller with its I/O.
pub(super) struct Driver<'a> {
    cluster: &'a Cluster,
    ctl: Controller,
    origin: Instant,
    /// The stream id of each leg made or taken over in this run, by
    /// (node, stripe): a failed stream is this run's failure only if it
    /// is one of these.
    legs: HashMap<(usize, usize), u64>,
    /// The epoch frame each leg was first asked with: its retries carry
    /// the same key.
    frames: HashMap<(usize, usize), u64>,
    /// Per node driven over IS-05: the id of its sender of each stripe,
    /// once read from its Node API.
    stripe_senders: Vec<Option<Vec<Option<String>>>>,
    /// The TAI instant each IS-05 leg was first asked for (`None`: the
    /// next frame the node can make); its retries ask for the same.
    instants: HashMap<(usize, usize), Option<TaiTime>>,
    /// The last snapshot of each node.
    pub snapshots: Vec<Option<Snapshot>>,
    /// The last error of each node.
    pub errors: Vec<Option<String>>,
    /// Epoch frame for the legs of the first start.
    pub epoch_frame: Option<u64>,
    /// What happened.
    pub log: ClusterLog,
    quiet: bool,
}

impl<'a> Driver<'a> {
    /// A driver of `cluster`; `quiet` keeps events off stderr.
    pub(super) fn new(cluster: &'a Cluster, quiet: bool) -> Result<Driver<'a>> {
        let ctl = Controller::new(cluster.plan.clone()).map_err(|e| anyhow!("{e}"))?;
        let n = cluster.clients.len();
        Ok(Driver {
            cluster,
            ctl,
            origin: Instant::now(),
            legs: HashMap::new(),
            frames: HashMap::new(),
            stripe_senders: vec![None; n],
            instants: HashMap::new(),
            snapshots: (0..n).map(|_| None).collect(),
            errors: vec![None; n],
            epoch_frame: None,
            log: ClusterLog::default(),
            quiet,
        })
    }

    /// Now on the controller's timeline.
    pub(super) fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }

    /// Feeds an input.
    pub(super) fn input(&mut self, input: Input) -> Result<()> {
        let now = self.now();
        self.ctl
            .handle_input(now, input)
            .map_err(|e| anyhow!("{e}"))
    }

    /// The controller.
    pub(super) fn controller(&self) -> &Controller {
        &self.ctl
    }

    /// The cluster.
    pub(super) fn cluster(&self) -> &'a Cluster {
        self.cluster
    }

    /// Carries out every request due now and reports every event.
    pub(super) fn pump(&mut self) {
        loop {
            let now = self.now();
            let Some(cmd) = self.ctl.poll_transmit(now) else {
                break;
            };
            self.execute(cmd);
        }
        while let Some(e) = self.ctl.poll_event() {
            self.report(&e);
        }
    }

    /// Runs until `done` says so or `limit` passes; false on the limit
    /// or a signal.
    pub(super) fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> bool {
        let end = Instant::now() + limit;
        loop {
            self.pump();
            if done(self) {
                return true;
            }
            if Instant::now() >= end || crate::signal::stopping() {
                return false;
            }
            let until = self.next().min(end);
            crate::signal::wait(until.saturating_duration_since(Instant::now()));
        }
    }

    /// Runs until every request is answered or given up (after a stop).
    /// Signals do not cut it short: the controller bounds every retry, and
    /// a second signal exits at once anyway.
    pub(super) fn settle(&mut self) {
        loop {
            self.pump();
            if self.ctl.is_settled() {
                return;
            }
            let wait = self.next().saturating_duration_since(Instant::now());
            std::thread::sleep(wait.min(Duration::from_secs(1)));
        }
    }

    /// When the controller wants to be called again (at the latest an
    /// hour from now: it has nothing due).
    fn next(&self) -> Instant {
        self.ctl.poll_timeout().map_or_else(
            || Instant::now() + Duration::from_secs(3600),
            |t| self.origin + Duration::from(t),
        )
    }

    /// Polls every node once (for `status`, `move` and `stop`, which take
    /// over legs another process started).
    pub(super) fn poll_all(&mut self) {
        let timeout = self.cluster.plan.timeout;
        for node in 0..self.cluster.clients.len() {
            self.execute(Transmit::Poll { node, timeout });
        }
        while let Some(e) = self.ctl.poll_event() {
            self.report(&e);
        }
    }

    fn execute(&mut self, cmd: Transmit) {
        match cmd {
            Transmit::Poll { node, timeout } => self.poll(node, timeout.into()),
            Transmit::Send {
                node,
                stripe,
                path,
                retry,
                timeout,
            } => self.send(node, stripe, path, retry, timeout.into()),
            Transmit::Halt {
                node,
                stripe,
                timeout,
            } => self.halt(node, stripe, timeout.into()),
        }
    }

    fn poll(&mut self, node: usize, timeout: Duration) {
        if let Err(f) = self.stripe_senders(node, timeout) {
            return self.failure(node, Request::Poll, f);
        }
        let snap = match self.cluster.clients[node].snapshot(timeout) {
            Ok(s) => s,
            Err(f) => return self.failure(node, Request::Poll, f),
        };
        self.errors[node] = None;
        for s in &snap.streams {
            let live = matches!(s.state, StreamState::Playing | StreamState::Ready);
            if let Some(k) = self.ours(node, s)
                && live
            {
                self.legs.insert((node, k), s.id);
            }
        }
        // A leg started over IS-05 carries its sender's label: the
        // controller reads it under the cluster's.
        let labels: Vec<Option<String>> = snap
            .streams
            .iter()
            .map(|s| self.ours(node, s).map(|k| self.cluster.label(k)))
            .collect();
        let table = snap.streams.iter().zip(&labels).map(|(s, label)| {
            let k = self.ours(node, s);
            let mine = k.is_some_and(|k| self.legs.get(&(node, k)) == Some(&s.id));
            let path = k.map_or(Path::Main, |k| {
                self.cluster
                    .path(k, s.destinations.first().map(String::as_str))
            });
            listed(s, label.as_deref(), mine.then_some(()), path)
        });
        let status = NodeStatus::from_table(
            &self.cluster.config.name,
            self.cluster.plan.stripes,
            table,
            Some(snap.clock_offset_ns),
        );
        self.snapshots[node] = Some(snap);
        let _ = self.input(Input::Status { node, status });
    }

    /// The stripe of a stream of this cluster on `node`, in any state:
    /// by its label, or over IS-05 by the stripe sender that started it.
    pub(super) fn ours(&self, node: usize, s: &StreamInfo) -> Option<usize> {
        if !self.is_nmos(node) {
            return self.cluster.stripe_of(s.label.as_deref());
        }
        let id = activated_by(s.label.as_deref()?)?.to_string();
        self.stripe_senders[node]
            .as_ref()?
            .iter()
            .position(|x| x.as_deref() == Some(id.as_str()))
    }

    fn is_nmos(&self, node: usize) -> bool {
        self.cluster.config.nodes[node].api == NodeApi::Nmos
    }

    /// The ids of an IS-05 node's stripe senders, read from its Node API
    /// the first time (nothing for a node driven through serve's API).
    fn stripe_senders(
        &mut self,
        node: usize,
        timeout: Duration,
    ) -> Result<Vec<Option<String>>, Failure> {
        if !self.is_nmos(node) {
            return Ok(Vec::new());
        }
        if let Some(ids) = &self.stripe_senders[node] {
            return Ok(ids.clone());
        }
        let labels: Vec<String> = (0..self.cluster.plan.stripes)
            .map(|k| self.cluster.sender_label(k))
            .collect();
        let ids = nmos::find_senders(&self.cluster.clients[node], &labels, timeout)?;
        self.stripe_senders[node] = Some(ids.clone());
        Ok(ids)
    }

    /// Reports a failed request to the controller (and, once per new
    /// reason, on stderr).
    fn failure(&mut self, node: usize, request: Request, f: Failure) {
        let reason = f.to_string();
        if self.errors[node].as_ref() != Some(&reason) {
            let name = self.cluster.name(node);
            let (kind, line) = ("refusal", format!("node {name}: {reason}"));
            decision(self.quiet, Level::WARN, kind, None, Some(name), &line);
        }
        self.errors[node] = Some(reason.clone());
        let input = match f {
            Failure::Refused { .. } => Input::Refused {
                node,
                request,
                reason,
            },
            Failure::Unanswered(_) => Input::Unanswered {
                node,
                request,
                reason,
            },
        };
        let _ = self.input(input);
    }

    fn send(&mut self, node: usize, k: usize, path: Path, retry: bool, timeout: Duration) {
        if self.is_nmos(node) {
            return self.send_nmos(node, k, path, retry, timeout);
        }
        let frame = match (retry, self.frames.get(&(node, k))) {
            (true, Some(&f)) => f,
            // A later leg asks for the next frame due; serve moves a frame
            // it cannot make any more to the soonest it can.
            _ => self.epoch_frame.unwrap_or_else(|| {
                self.cluster
                    .rate
                    .frame_at_or_after_ns(crate::clock::epoch_ns())
            }),
        };
        self.frames.insert((node, k), frame);
        let req = self.cluster.request(k, path, frame);
        let request = Request::Send { stripe: k };
        match self.cluster.clients[node].create(&req, timeout) {
            Ok(info) => {
                self.legs.insert((node, k), info.id);
                let _ = self.input(Input::Done { node, request });
            }
            Err(f) => self.failure(node, request, f),
        }
    }

    /// Activates `node`'s sender of stripe `k` over IS-05: at the TAI
    /// instant of the first start's epoch frame, else (a failover, a
    /// move's new leg) from the next frame the node can make.
    fn send_nmos(&mut self, node: usize, k: usize, path: Path, retry: bool, timeout: Duration) {
        let at = match (retry, self.instants.get(&(node, k))) {
            (true, Some(&at)) => at,
            _ => self
                .epoch_frame
                .map(|f| is05::frame_time(self.cluster.rate, f)),
        };
        self.instants.insert((node, k), at);
        let request = Request::Send { stripe: k };
        let result = self.stripe_sender(node, k, timeout).and_then(|id| {
            let to = self.cluster.destination(k, path);
            let to: SocketAddr = to.parse().map_err(|_| Failure::Refused {
                code: 0,
                why: format!("destination '{to}' is not ADDR:PORT"),
            })?;
            nmos::enable(&self.cluster.clients[node], &id, to, at, timeout)
        });
        match result {
            Ok(()) => {
                let _ = self.input(Input::Done { node, request });
            }
            Err(f) => self.failure(node, request, f),
        }
    }

    /// The id of `node`'s sender of stripe `k`, or a refusal saying how
    /// to offer it.
    fn stripe_sender(
        &mut self,
        node: usize,
        k: usize,
        timeout: Duration,
    ) -> Result<String, Failure> {
        let ids = self.stripe_senders(node, timeout)?;
        ids.get(k).cloned().flatten().ok_or_else(|| {
            let s = &self.cluster.config.stream;
            Failure::Refused {
                code: 404,
                why: format!(
                    "it has no IS-05 sender '{}': give '{}' a sidecar [stripes] table with \
                     split = \"{}\" and count = {} (docs/nmos.md), or drive it with api = \
                     \"streams\"",
                    self.cluster.sender_label(k),
                    s.source,
                    s.split,
                    s.stripes
                ),
            }
        })
    }

    /// Halts stripe `k` (every stripe: `None`) on an IS-05 node: each of
    /// its stripe senders cancelled and disabled, and the streams they
    /// started logged.
    fn halt_nmos(&mut self, node: usize, k: Option<usize>, timeout: Duration) {
        let request = Request::Halt { stripe: k };
        let cluster = self.cluster;
        let client = &cluster.clients[node];
        let ids = match self.stripe_senders(node, timeout) {
            Ok(ids) => ids,
            Err(f) => return self.failure(node, request, f),
        };
        let streams = match client.list(timeout) {
            Ok(s) => s,
            Err(f) => return self.failure(node, request, f),
        };
        for (stripe, id) in ids.iter().enumerate() {
            let Some(id) = id else { continue };
            if k.is_some_and(|k| k != stripe) {
                continue;
            }
            let listed: Vec<&StreamInfo> = streams
                .iter()
                .filter(|s| self.ours(node, s) == Some(stripe))
                .collect();
            if let Err(f) = nmos::halt(client, id, !listed.is_empty(), timeout) {
                let f = in_context(f, &format!("halting stripe {stripe} (IS-05 sender {id})"));
                return self.failure(node, request, f);
            }
            self.legs.remove(&(node, stripe));
            for s in listed {
                self.log.halted.push(HaltedLeg {
                    node: cluster.name(node).to_string(),
                    stripe,
                    id: s.id,
                    state: state_name(s.state).to_string(),
                });
            }
        }
        let _ = self.input(Input::Done { node, request });
    }

    /// Removes every stream of stripe `k` (every stripe: `None`) of this
    /// cluster from `node`, whatever its state.
    fn halt(&mut self, node: usize, k: Option<usize>, timeout: Duration) {
        if self.is_nmos(node) {
            return self.halt_nmos(node, k, timeout);
        }
        let request = Request::Halt { stripe: k };
        let client = &self.cluster.clients[node];
        let streams = match client.list(timeout) {
            Ok(s) => s,
            Err(f) => return self.failure(node, request, f),
        };
        for s in streams {
            let Some(stripe) = self.ours(node, &s) else {
                continue;
            };
            if k.is_some_and(|k| k != stripe) {
                continue;
            }
            if let Err(f) = client.delete(s.id, timeout) {
                let what = format!("halting stripe {stripe} (stream {})", s.id);
                return self.failure(node, request, in_context(f, &what));
            }
            self.legs.remove(&(node, stripe));
            self.log.halted.push(HaltedLeg {
                node: self.cluster.name(node).to_string(),
                stripe,
                id: s.id,
                state: state_name(s.state).to_string(),
            });
        }
        let _ = self.input(Input::Done { node, request });
    }

    fn report(&mut self, e: &Event) {
        let line = self.describe(e);
        let (kind, level, stripe, node) = match e {
            Event::Sending { stripe, node } => ("sending", Level::INFO, Some(*stripe), Some(*node)),
            Event::SendUnanswered { stripe, node, .. } => {
                ("unanswered", Level::WARN, Some(*stripe), Some(*node))
            }
            Event::NodeFailed { node, .. } => ("node-failed", Level::WARN, None, Some(*node)),
            Event::FailedOver { stripe, to, .. } => {
                ("failover", Level::WARN, Some(*stripe), Some(*to))
            }
            Event::Moved { stripe, to, .. } => ("move", Level::INFO, Some(*stripe), Some(*to)),
            Event::NoStandby { stripe, node } => {
                ("no-standby", Level::WARN, Some(*stripe), Some(*node))
            }
            Event::Orphaned { stripe } => ("orphaned", Level::ERROR, Some(*stripe), None),
            Event::ClockOff { node, .. } => ("clock", Level::WARN, None, Some(*node)),
            Event::NotHalted { node, .. } => ("not-halted", Level::WARN, None, Some(*node)),
        };
        let node = node.map(|i| self.cluster.name(i));
        decision(self.quiet, level, kind, stripe, node, &line);
        self.log.events.push(line);
    }

    /// The line saying what event `e` is, for stderr and the `--json`
    /// log; a failed node and an unconfirmed halt are kept for the log.
    fn describe(&mut self, e: &Event) -> String {
        let n = |i: usize| self.cluster.name(i).to_string();
        match e {
            Event::Sending { stripe, node } => {
                format!("node {}: sending stripe {stripe}", n(*node))
            }
            Event::SendUnanswered {
                stripe,
                node,
                reason,
            } => format!(
                "node {}: no answer to sending stripe {stripe} ({reason}): checking whether it \
                 runs there before asking again",
                n(*node)
            ),
            Event::NodeFailed { node, reason } => {
                self.log.failed.push(n(*node));
                format!("node {}: failed: {reason}", n(*node))
            }
            Event::FailedOver {
                stripe,
                from,
                to,
                hot,
            } => format!(
                "stripe {stripe}: {} failover from node {} to node {}",
                if *hot { "hot" } else { "cold" },
                n(*from),
                n(*to)
            ),
            Event::Moved { stripe, from, to } => {
                format!(
                    "stripe {stripe}: moved from node {} to node {}",
                    n(*from),
                    n(*to)
                )
            }
            Event::NoStandby { stripe, node } => format!(
                "stripe {stripe}: node {} sends it alone now: no hot standby is left for it",
                n(*node)
            ),
            Event::Orphaned { stripe } => format!("stripe {stripe}: no node sends it"),
            Event::ClockOff { node, offset_ns } => format!(
                "node {}: clock off by {:.3} ms (more than a frame)",
                n(*node),
                *offset_ns as f64 / 1e6
            ),
            Event::NotHalted {
                node,
                stripes,
                reason,
            } => {
                self.log.not_halted.push(NotHalted {
                    node: n(*node),
                    stripes: stripes.clone(),
                    reason: reason.clone(),
                });
                format!(
                    "node {}: did not confirm the halt ({reason}): it may still send {}; check \
                     it with `nagare cluster status` and run `nagare cluster stop` again",
                    n(*node),
                    stripe_list(stripes)
                )
            }
        }
    }

    /// Per stripe, the names of its senders now.
    pub(super) fn senders(&self) -> Vec<Vec<String>> {
        (0..self.cluster.plan.stripes)
            .map(|k| {
                self.ctl
                    .senders(k)
                    .into_iter()
                    .map(|n| self.cluster.name(n).to_string())
                    .collect()
            })
            .collect()
    }
}

/// `stripe 0, 1` or `no stripe we know of`.
pub(super) fn stripe_list(stripes: &[usize]) -> String {
    if stripes.is_empty() {
        return "no stripe this controller knows of".into();
    }
    let k: Vec<String> = stripes.iter().map(usize::to_string).collect();
    format!("stripe {}", k.join(", "))
}

/// `f` with `what` was being done said first.
fn in_context(f: Failure, what: &str) -> Failure {
    match f {
        Failure::Refused { code, why } => Failure::Refused {
            code,
            why: format!("{what}: {why}"),
        },
        Failure::Unanswered(why) => Failure::Unanswered(format!("{what}: {why}")),
    }
}

/// What the controller reads of one stream of a node's table, under
/// `label` (the cluster's label of its stripe, if it is a leg); `mine`
/// when it is a leg of this run (only then is its failure news).
fn listed<'a>(
    s: &'a StreamInfo,
    label: Option<&'a str>,
    mine: Option<()>,
    path: Path,
) -> Listed<'a> {
    let failed = s.state == StreamState::Failed;
    Listed {
        label,
        live: matches!(s.state, StreamState::Playing | StreamState::Ready),
        failure: mine
            .filter(|_| failed)
            .map(|_| s.error.as_deref().unwrap_or("the node gave no reason")),
        packets: s.counters.packets,
        underruns: s.counters.underruns,
        path,
    }
}

/// The API's name of a stream state.
fn state_name(state: StreamState) -> &'static str {
    match state {
        StreamState::Ready => "ready",
        StreamState::Playing => "playing",
        StreamState::Paused => "paused",
        StreamState::Finished => "finished",
        StreamState::Failed => "failed",
    }
}

/// Logs one decision of the controller (`kind`: failover, move, refusal,
/// clock …) at `level`, or at debug level when the command's output is
/// something else (`cluster status` prints its table, not events).
fn decision(
    quiet: bool,
    level: Level,
    kind: &str,
    stripe: Option<usize>,
    node: Option<&str>,
    line: &str,
) {
    if quiet {
        debug!(decision = kind, stripe, node, "{line}");
        return;
    }
    match level {
        Level::ERROR => error!(decision = kind, stripe, node, "{line}"),
        Level::WARN => warn!(decision = kind, stripe, node, "{line}"),
        _ => info!(decision = kind, stripe, node, "{line}"),
    }
}
