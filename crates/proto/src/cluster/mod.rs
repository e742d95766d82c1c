//! The decisions of `nagare cluster` (seed 000): which serve node sends
//! which stripe of the frame, when a node counts as failed, and how a
//! stripe moves between nodes without losing a packet.
//!
//! [`Controller`] is sans-IO. Its driver polls every node's HTTP API when
//! [`Controller::poll_transmit`] says [`Transmit::Poll`], feeds the answers
//! back as [`Input::Status`] or [`Input::Unreachable`], and carries out
//! [`Transmit::Send`] and [`Transmit::Halt`]. What happened comes out of
//! [`Controller::poll_event`].
//!
//! Every sender of a stripe derives SSRC, sequence numbers and timestamps
//! from the epoch and the stripe, so two nodes sending the same stripe
//! send identical packets: the receiver merges them as SMPTE ST 2022-7
//! legs. That makes a move hitless: the new node's leg starts, the
//! controller waits until it is seen sending on two polls in a row, and
//! only then halts the old leg. A hot standby is such a second leg kept
//! running all the time; a cold one is started when the primary fails,
//! and the frames in between are lost (the receiver counts them).
//!
//! # Polling order
//!
//! The driver:
//!
//! 1. feeds the user's request ([`Input::Start`], [`Input::Adopt`],
//!    [`Input::Move`], [`Input::Stop`]) and every node's answer
//!    ([`Input::Status`], [`Input::Unreachable`], [`Input::Refused`]) with
//!    [`Controller::handle_input`]`(now, ..)` as it comes;
//! 2. carries out every [`Controller::poll_transmit`]`(now)` in order
//!    (queued sends and halts first, then the polls that are due), each
//!    HTTP call's answer going back as in 1;
//! 3. reports every [`Controller::poll_event`];
//! 4. sleeps until [`Controller::poll_timeout`] (or a signal) and starts
//!    over.

mod error;
pub mod label;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

pub use error::Error;

use crate::Nanos;

/// One node of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Name used in reports and by `move`.
    pub name: String,
    /// Stripes it sends from the start (for an alternate: the stripes it
    /// stands by for; empty means any).
    pub stripes: Vec<usize>,
    /// Whether it only steps in when another node fails or on `move`.
    pub alternate: bool,
}

/// What the controller does when a node fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Failover {
    /// Report the failure; stripes stay where they are (`move` by hand).
    #[default]
    Manual,
    /// Start the failed node's stripes on an alternate (frames in the gap
    /// are lost).
    Cold,
    /// Alternates send a second leg of their stripes all along, so a
    /// failure loses nothing; a stripe left with one leg gets a new
    /// standby if an alternate is free.
    Hot,
}

/// The cluster: stripes, nodes and the rules for failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Stripes of the frame.
    pub stripes: usize,
    /// Nodes, primaries and alternates.
    pub nodes: Vec<NodeSpec>,
    /// What to do when a node fails.
    pub failover: Failover,
    /// How often every node is polled.
    pub poll_interval: Nanos,
    /// A node silent this long has failed.
    pub dead_after: Nanos,
    /// Clock offsets beyond this are reported (the receiver's buffer
    /// absorbs skew up to about a frame).
    pub clock_tolerance: Nanos,
}

/// One stripe as a node reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StripeStatus {
    /// The stripe.
    pub stripe: usize,
    /// Packets sent so far.
    pub packets: u64,
    /// Frame slots given up because the node's read-ahead ring was empty.
    pub underruns: u64,
}

/// A node's answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeStatus {
    /// The stripes it is sending.
    pub stripes: Vec<StripeStatus>,
    /// Its clock minus the controller's, when it said its time.
    pub clock_offset_ns: Option<i64>,
}

/// One stream of a node's table, as much as the controller reads of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed<'a> {
    /// Its label (see [`label`]), if it has one.
    pub label: Option<&'a str>,
    /// Whether it is set up or playing (not paused, finished or failed).
    pub live: bool,
    /// Packets sent so far.
    pub packets: u64,
    /// Frame slots given up with an empty read-ahead ring.
    pub underruns: u64,
}

impl NodeStatus {
    /// What a node's stream `table` says about cluster `name` of `stripes`
    /// stripes: every live stream of one of its stripes that has sent a
    /// packet (one waiting for its first frame is not sending yet), in
    /// table order. Streams of anybody else are ignored.
    pub fn from_table<'a>(
        name: &str,
        stripes: usize,
        table: impl IntoIterator<Item = Listed<'a>>,
        clock_offset_ns: Option<i64>,
    ) -> NodeStatus {
        let stripes = table
            .into_iter()
            .filter(|s| s.live && s.packets > 0)
            .filter_map(|s| {
                Some(StripeStatus {
                    stripe: label::stripe_of(name, stripes, s.label?)?,
                    packets: s.packets,
                    underruns: s.underruns,
                })
            })
            .collect();
        NodeStatus {
            stripes,
            clock_offset_ns,
        }
    }
}

/// What the driver tells the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Start every stripe on its node (and hot standbys).
    Start,
    /// Take over stripes already running (from the nodes' first status),
    /// as `status` and `move` do when `start` ran in another process.
    Adopt,
    /// Halt every leg.
    Stop,
    /// A node answered a poll.
    Status {
        /// Node index in the plan.
        node: usize,
        /// What it said.
        status: NodeStatus,
    },
    /// A node did not answer a poll, or answered with an error.
    Unreachable {
        /// Node index.
        node: usize,
        /// What went wrong, for the report.
        reason: String,
    },
    /// A `Send` or `Halt` was refused by the node (wrong token, allow-list,
    /// admission): the node has failed for this cluster.
    Refused {
        /// Node index.
        node: usize,
        /// What the node said.
        reason: String,
    },
    /// Move a stripe to another node, hitlessly.
    Move {
        /// The stripe.
        stripe: usize,
        /// Destination node index.
        to: usize,
    },
}

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// Ask the node for its status.
    Poll {
        /// Node index.
        node: usize,
    },
    /// Have the node send the stripe (an identical leg if another node
    /// already does).
    Send {
        /// Node index.
        node: usize,
        /// The stripe.
        stripe: usize,
    },
    /// Have the node stop sending the stripe.
    Halt {
        /// Node index.
        node: usize,
        /// The stripe.
        stripe: usize,
    },
}

/// What happened, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A node was seen sending a stripe for the first time.
    Sending {
        /// The stripe.
        stripe: usize,
        /// Node index.
        node: usize,
    },
    /// A node failed; its legs are gone.
    NodeFailed {
        /// Node index.
        node: usize,
        /// Why, in words.
        reason: String,
    },
    /// A stripe was started on an alternate after its node failed.
    FailedOver {
        /// The stripe.
        stripe: usize,
        /// The failed node.
        from: usize,
        /// The alternate.
        to: usize,
        /// Whether a standby leg was already running (no loss).
        hot: bool,
    },
    /// A planned move finished: the new leg runs and the old one halted.
    Moved {
        /// The stripe.
        stripe: usize,
        /// Old node.
        from: usize,
        /// New node.
        to: usize,
    },
    /// A stripe has no leg left: nobody sends it.
    Orphaned {
        /// The stripe.
        stripe: usize,
    },
    /// A node's clock is off by more than the tolerance.
    ClockOff {
        /// Node index.
        node: usize,
        /// Its offset, nanoseconds (positive: ahead).
        offset_ns: i64,
    },
}

/// One node sending one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Leg {
    node: usize,
    /// Packets at the last poll, once seen.
    packets: Option<u64>,
    underruns: u64,
    /// Polls in a row that showed it sending more.
    growing: u32,
}

impl Leg {
    fn new(node: usize) -> Leg {
        Leg {
            node,
            packets: None,
            underruns: 0,
            growing: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Stripe {
    legs: Vec<Leg>,
    /// A move under way: (from, to).
    moving: Option<(usize, usize)>,
    /// Set when its last known leg vanished: which nodes have answered a
    /// poll since. Another process (a `move`) may have started a leg this
    /// controller has not seen yet, so "no node sends it" waits until
    /// every live node has answered without it.
    unconfirmed: Option<Vec<bool>>,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    failed: bool,
    last_seen: Nanos,
    next_poll: Nanos,
    clock_off: bool,
}

/// The controller machine. See the module documentation.
#[derive(Debug)]
pub struct Controller {
    plan: Plan,
    nodes: Vec<Node>,
    stripes: Vec<Stripe>,
    adopting: bool,
    running: bool,
    commands: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Controller {
    /// A controller for `plan`, checked: every stripe has exactly one
    /// primary, node names are unique and stripes are in range.
    pub fn new(plan: Plan) -> Result<Controller, Error> {
        plan_check(&plan)?;
        let nodes = vec![
            Node {
                failed: false,
                last_seen: Nanos::ZERO,
                next_poll: Nanos::ZERO,
                clock_off: false,
            };
            plan.nodes.len()
        ];
        Ok(Controller {
            stripes: vec![Stripe::default(); plan.stripes],
            plan,
            nodes,
            adopting: false,
            running: false,
            commands: VecDeque::new(),
            events: VecDeque::new(),
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The nodes sending `stripe` now (first: the oldest leg).
    pub fn senders(&self, stripe: usize) -> Vec<usize> {
        self.stripes
            .get(stripe)
            .map_or(Vec::new(), |s| s.legs.iter().map(|l| l.node).collect())
    }

    /// Whether a node has been declared failed.
    pub fn is_failed(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|n| n.failed)
    }

    /// Whether a move is still under way.
    pub fn is_moving(&self) -> bool {
        self.stripes.iter().any(|s| s.moving.is_some())
    }

    /// Feeds one input at `now`.
    pub fn handle_input(&mut self, now: Nanos, input: Input) -> Result<(), Error> {
        match input {
            Input::Start => self.start(now),
            Input::Adopt => {
                self.adopting = true;
                self.running = true;
                self.arm_polls(now);
            }
            Input::Stop => self.stop(),
            Input::Status { node, status } => self.status(now, self.node(node)?, &status),
            Input::Unreachable { node, reason } => {
                let node = self.node(node)?;
                if now.saturating_sub(self.nodes[node].last_seen) >= self.plan.dead_after {
                    self.fail(now, node, format!("no answer: {reason}"));
                }
            }
            Input::Refused { node, reason } => {
                let node = self.node(node)?;
                self.fail(now, node, format!("refused: {reason}"));
            }
            Input::Move { stripe, to } => self.move_stripe(stripe, to)?,
        }
        Ok(())
    }

    /// The next command due at `now`: queued sends and halts first, then
    /// polls whose time has come.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(c) = self.commands.pop_front() {
            return Some(c);
        }
        if !self.running {
            return None;
        }
        let interval = self.plan.poll_interval;
        let node = (0..self.nodes.len())
            .filter(|&n| !self.nodes[n].failed && self.nodes[n].next_poll <= now)
            .min_by_key(|&n| self.nodes[n].next_poll)?;
        self.nodes[node].next_poll = now + interval;
        Some(Transmit::Poll { node })
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the next poll is due (`None` when stopped).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if !self.commands.is_empty() {
            return Some(Nanos::ZERO);
        }
        if !self.running {
            return None;
        }
        self.nodes
            .iter()
            .filter(|n| !n.failed)
            .map(|n| n.next_poll)
            .min()
    }

    fn node(&self, node: usize) -> Result<usize, Error> {
        if node < self.nodes.len() {
            Ok(node)
        } else {
            Err(Error::NoSuchNode { node })
        }
    }

    fn arm_polls(&mut self, now: Nanos) {
        for n in &mut self.nodes {
            n.last_seen = now;
            n.next_poll = now;
        }
    }

    fn start(&mut self, now: Nanos) {
        self.running = true;
        self.arm_polls(now);
        for (node, spec) in self.plan.nodes.iter().enumerate() {
            let standby = spec.alternate && self.plan.failover == Failover::Hot;
            if spec.alternate && !standby {
                continue;
            }
            for &stripe in &spec.stripes {
                self.stripes[stripe].legs.push(Leg::new(node));
                self.commands.push_back(Transmit::Send { node, stripe });
            }
        }
    }

    fn stop(&mut self) {
        for (stripe, s) in self.stripes.iter_mut().enumerate() {
            for leg in s.legs.drain(..) {
                self.commands.push_back(Transmit::Halt {
                    node: leg.node,
                    stripe,
                });
            }
            s.moving = None;
            s.unconfirmed = None;
        }
        self.running = false;
    }

    fn move_stripe(&mut self, stripe: usize, to: usize) -> Result<(), Error> {
        let to = self.node(to)?;
        let s = self
            .stripes
            .get(stripe)
            .ok_or(Error::NoSuchStripe { stripe })?;
        let from = s.legs.first().ok_or(Error::NotSent { stripe })?.node;
        if self.nodes[to].failed {
            return Err(Error::NodeFailed { node: to });
        }
        if s.legs.iter().any(|l| l.node == to) {
            return Err(Error::AlreadySending { stripe, node: to });
        }
        let s = &mut self.stripes[stripe];
        s.legs.push(Leg::new(to));
        s.moving = Some((from, to));
        self.commands.push_back(Transmit::Send { node: to, stripe });
        Ok(())
    }

    fn status(&mut self, now: Nanos, node: usize, status: &NodeStatus) {
        if self.nodes[node].failed {
            return;
        }
        self.nodes[node].last_seen = now;
        self.clock(node, status.clock_offset_ns);
        if self.adopting {
            self.adopt(node, status);
        }
        for stripe in 0..self.stripes.len() {
            let Some(pos) = self.stripes[stripe]
                .legs
                .iter()
                .position(|l| l.node == node)
            else {
                continue;
            };
            let seen = status.stripes.iter().find(|s| s.stripe == stripe);
            if let Err(reason) = self.observe(stripe, pos, seen) {
                self.fail(now, node, reason);
                return;
            }
        }
        self.confirm_orphans(Some((node, status)));
    }

    /// Updates one leg from its node's report; an error names why the
    /// node has failed.
    fn observe(
        &mut self,
        stripe: usize,
        pos: usize,
        seen: Option<&StripeStatus>,
    ) -> Result<(), String> {
        let leg = &mut self.stripes[stripe].legs[pos];
        let Some(seen) = seen else {
            // Not (yet) listed: a just-started leg may not show; a leg
            // that was running and vanished was stopped elsewhere.
            if leg.packets.is_some() {
                let s = &mut self.stripes[stripe];
                s.legs.remove(pos);
                if s.legs.is_empty() {
                    s.unconfirmed = Some(vec![false; self.nodes.len()]);
                }
            }
            return Ok(());
        };
        if leg.packets.is_some() && seen.underruns > leg.underruns {
            return Err(format!(
                "its read-ahead ran dry on stripe {stripe}: {} underruns",
                seen.underruns - leg.underruns
            ));
        }
        match leg.packets {
            None => {
                let node = leg.node;
                self.events.push_back(Event::Sending { stripe, node });
            }
            Some(p) if seen.packets > p => leg.growing += 1,
            Some(_) => leg.growing = 0,
        }
        leg.packets = Some(seen.packets);
        leg.underruns = seen.underruns;
        self.finish_move(stripe);
        Ok(())
    }

    /// Halts the old leg of a move once the new one has been seen sending
    /// more on two polls in a row.
    fn finish_move(&mut self, stripe: usize) {
        let s = &mut self.stripes[stripe];
        let Some((from, to)) = s.moving else {
            return;
        };
        if !s.legs.iter().any(|l| l.node == to && l.growing >= 2) {
            return;
        }
        s.legs.retain(|l| l.node != from);
        s.moving = None;
        self.commands
            .push_back(Transmit::Halt { node: from, stripe });
        self.events.push_back(Event::Moved { stripe, from, to });
    }

    /// Reports the stripes whose last leg vanished and that no live node
    /// has since been seen sending; `answered` is the node (and its
    /// status) that just answered a poll, None after a node failed.
    fn confirm_orphans(&mut self, answered: Option<(usize, &NodeStatus)>) {
        for (stripe, s) in self.stripes.iter_mut().enumerate() {
            let Some(heard) = s.unconfirmed.as_mut() else {
                continue;
            };
            if let Some((node, status)) = answered {
                if status.stripes.iter().any(|x| x.stripe == stripe) {
                    // Somebody sends it (adopted as a leg when adopting).
                    s.unconfirmed = None;
                    continue;
                }
                heard[node] = true;
            }
            if !s.legs.is_empty() {
                s.unconfirmed = None;
                continue;
            }
            let nodes = &self.nodes;
            if heard.iter().zip(nodes).all(|(&h, n)| h || n.failed) {
                s.unconfirmed = None;
                self.events.push_back(Event::Orphaned { stripe });
            }
        }
    }

    fn adopt(&mut self, node: usize, status: &NodeStatus) {
        for seen in &status.stripes {
            if let Some(s) = self.stripes.get_mut(seen.stripe)
                && !s.legs.iter().any(|l| l.node == node)
            {
                s.legs.push(Leg::new(node));
            }
        }
    }

    fn clock(&mut self, node: usize, offset: Option<i64>) {
        let Some(offset_ns) = offset else { return };
        let off = offset_ns.unsigned_abs() > self.plan.clock_tolerance.0;
        if off && !self.nodes[node].clock_off {
            self.events.push_back(Event::ClockOff { node, offset_ns });
        }
        self.nodes[node].clock_off = off;
    }

    fn fail(&mut self, now: Nanos, node: usize, reason: String) {
        if self.nodes[node].failed {
            return;
        }
        self.nodes[node].failed = true;
        self.events.push_back(Event::NodeFailed { node, reason });
        for stripe in 0..self.stripes.len() {
            let s = &mut self.stripes[stripe];
            let Some(pos) = s.legs.iter().position(|l| l.node == node) else {
                continue;
            };
            s.legs.remove(pos);
            if s.moving.is_some_and(|(f, t)| f == node || t == node) {
                s.moving = None;
            }
            self.replace(now, stripe, node);
        }
        // A stripe waiting only for this node's answer is orphaned now.
        self.confirm_orphans(None);
    }

    /// After `from` dropped out of `stripe`: promote a running standby, or
    /// start an alternate, as the failover rule says.
    fn replace(&mut self, _now: Nanos, stripe: usize, from: usize) {
        let hot = !self.stripes[stripe].legs.is_empty();
        if hot {
            let to = self.stripes[stripe].legs[0].node;
            self.events.push_back(Event::FailedOver {
                stripe,
                from,
                to,
                hot: true,
            });
        }
        let wanted = match self.plan.failover {
            Failover::Manual => false,
            Failover::Cold => !hot,
            Failover::Hot => self.stripes[stripe].legs.len() < 2,
        };
        match (wanted, self.free_alternate(stripe)) {
            (true, Some(to)) => {
                self.stripes[stripe].legs.push(Leg::new(to));
                self.commands.push_back(Transmit::Send { node: to, stripe });
                if !hot {
                    self.events.push_back(Event::FailedOver {
                        stripe,
                        from,
                        to,
                        hot: false,
                    });
                }
            }
            _ if !hot => self.events.push_back(Event::Orphaned { stripe }),
            _ => {}
        }
    }

    /// A live alternate that stands by for `stripe` (or for any) and does
    /// not send it yet; the least loaded first.
    fn free_alternate(&self, stripe: usize) -> Option<usize> {
        let load = |n: usize| {
            self.stripes
                .iter()
                .filter(|s| s.legs.iter().any(|l| l.node == n))
                .count()
        };
        (0..self.nodes.len())
            .filter(|&n| {
                let spec = &self.plan.nodes[n];
                spec.alternate
                    && !self.nodes[n].failed
                    && (spec.stripes.is_empty() || spec.stripes.contains(&stripe))
                    && !self.stripes[stripe].legs.iter().any(|l| l.node == n)
            })
            .min_by_key(|&n| load(n))
    }
}

/// Checks a plan: stripes in range, unique names, one primary per stripe.
fn plan_check(plan: &Plan) -> Result<(), Error> {
    if plan.stripes == 0 || plan.stripes > 64 {
        return Err(Error::StripeCount {
            stripes: plan.stripes,
        });
    }
    for (i, n) in plan.nodes.iter().enumerate() {
        if plan.nodes[..i].iter().any(|m| m.name == n.name) {
            return Err(Error::DuplicateNode {
                name: n.name.clone(),
            });
        }
        if let Some(&stripe) = n.stripes.iter().find(|&&s| s >= plan.stripes) {
            return Err(Error::NoSuchStripe { stripe });
        }
    }
    for stripe in 0..plan.stripes {
        let primaries = plan
            .nodes
            .iter()
            .filter(|n| !n.alternate && n.stripes.contains(&stripe))
            .count();
        if primaries != 1 {
            return Err(Error::Primaries { stripe, primaries });
        }
    }
    if plan.poll_interval == Nanos::ZERO {
        return Err(Error::PollInterval);
    }
    Ok(())
}
