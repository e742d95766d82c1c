//! Carries out the controller's commands over HTTP and feeds the nodes'
//! answers back. Every decision (who sends what, when a node has failed,
//! when a move is done) is nagare-proto's `cluster::Controller`; this only
//! moves requests, answers and time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use nagare_api::cluster::ClusterLog;
use nagare_api::serve::{StreamInfo, StreamState};
use nagare_proto::Nanos;
use nagare_proto::cluster::{Controller, Event, Input, Listed, NodeStatus, Transmit};

use super::client::{Failure, Snapshot};
use super::config::Cluster;

/// One running leg the driver knows of: the node's stream id and where it
/// sends.
#[derive(Debug, Clone)]
struct Leg {
    id: u64,
    dest: String,
}

/// The controller with its I/O.
pub(super) struct Driver<'a> {
    cluster: &'a Cluster,
    ctl: Controller,
    origin: Instant,
    legs: HashMap<(usize, usize), Leg>,
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

    /// Carries out every command due now and reports every event.
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

    /// Runs until `done` says so or `limit` passes; false on the limit.
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
            self.wait(end);
        }
    }

    /// Sleeps until the next poll is due (or `end`, or a signal).
    fn wait(&self, end: Instant) {
        let next = self
            .ctl
            .poll_timeout()
            .map_or(end, |t| self.origin + Duration::from(t));
        let until = next.min(end);
        crate::signal::wait(until.saturating_duration_since(Instant::now()));
    }

    /// Polls every node once (for `status`, `move` and `stop`, which take
    /// over legs another process started).
    pub(super) fn poll_all(&mut self) {
        for node in 0..self.cluster.clients.len() {
            self.execute(Transmit::Poll { node });
        }
        while let Some(e) = self.ctl.poll_event() {
            self.report(&e);
        }
    }

    fn execute(&mut self, cmd: Transmit) {
        match cmd {
            Transmit::Poll { node } => self.poll(node),
            Transmit::Send { node, stripe } => self.send(node, stripe),
            Transmit::Halt { node, stripe } => self.halt(node, stripe),
        }
    }

    fn poll(&mut self, node: usize) {
        let snap = match self.cluster.clients[node].snapshot() {
            Ok(s) => s,
            Err(f) => return self.failure(node, f),
        };
        self.errors[node] = None;
        self.legs.retain(|&(n, _), _| n != node);
        for s in &snap.streams {
            let Some(k) = self.ours(s) else { continue };
            let dest = s.destinations.first().cloned().unwrap_or_default();
            self.legs.insert((node, k), Leg { id: s.id, dest });
        }
        let status = NodeStatus::from_table(
            &self.cluster.config.name,
            self.cluster.plan.stripes,
            snap.streams.iter().map(listed),
            Some(snap.clock_offset_ns),
        );
        self.snapshots[node] = Some(snap);
        let _ = self.input(Input::Status { node, status });
    }

    /// The stripe of a playing stream of this cluster.
    fn ours(&self, s: &StreamInfo) -> Option<usize> {
        if !listed(s).live {
            return None;
        }
        self.cluster.stripe_of(s.label.as_deref())
    }

    fn failure(&mut self, node: usize, f: Failure) {
        let reason = f.to_string();
        if !self.quiet && self.errors[node].as_ref() != Some(&reason) {
            eprintln!("nagare cluster: node {}: {reason}", self.cluster.name(node));
        }
        self.errors[node] = Some(reason.clone());
        let input = match f {
            Failure::Refused(_) => Input::Refused { node, reason },
            Failure::Unreachable(_) => Input::Unreachable { node, reason },
        };
        let _ = self.input(input);
    }

    /// The address a new leg of stripe `k` goes to: the stripe's `dup`
    /// address when another leg already uses `to`.
    fn destination(&self, k: usize) -> String {
        let d = &self.cluster.config.destinations[k];
        let taken = self
            .legs
            .iter()
            .any(|(&(_, s), l)| s == k && l.dest == d.to);
        match (&d.dup, taken) {
            (Some(dup), true) => dup.clone(),
            _ => d.to.clone(),
        }
    }

    fn send(&mut self, node: usize, k: usize) {
        let dest = self.destination(k);
        let req = self.cluster.request(k, &dest, self.epoch_frame);
        match self.cluster.clients[node].create(&req) {
            Ok(info) => {
                self.legs.insert((node, k), Leg { id: info.id, dest });
            }
            Err(f) => self.failure(node, f),
        }
    }

    fn halt(&mut self, node: usize, k: usize) {
        let Some(leg) = self.legs.remove(&(node, k)) else {
            return;
        };
        if let Err(f) = self.cluster.clients[node].delete(leg.id) {
            let reason = format!("halting stripe {k} (stream {}): {f}", leg.id);
            if !self.quiet {
                eprintln!("nagare cluster: node {}: {reason}", self.cluster.name(node));
            }
            self.errors[node] = Some(reason);
        }
    }

    fn report(&mut self, e: &Event) {
        let n = |i: usize| self.cluster.name(i).to_string();
        let line = match e {
            Event::Sending { stripe, node } => {
                format!("node {}: sending stripe {stripe}", n(*node))
            }
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
            Event::Orphaned { stripe } => format!("stripe {stripe}: no node sends it"),
            Event::ClockOff { node, offset_ns } => format!(
                "node {}: clock off by {:.3} ms (more than a frame)",
                n(*node),
                *offset_ns as f64 / 1e6
            ),
        };
        if !self.quiet {
            eprintln!("nagare cluster: {line}");
        }
        self.log.events.push(line);
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

/// What the controller reads of one stream of a node's table.
fn listed(s: &StreamInfo) -> Listed<'_> {
    Listed {
        label: s.label.as_deref(),
        live: matches!(s.state, StreamState::Playing | StreamState::Ready),
        packets: s.counters.packets,
        underruns: s.counters.underruns,
    }
}
