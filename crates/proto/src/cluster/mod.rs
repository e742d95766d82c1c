//! The decisions of `nagare cluster` (seed 000): which serve node sends
//! which stripe of the frame, when a node counts as failed, how a stripe
//! moves between nodes without losing a packet, and what to do about a
//! request a node did not answer in time.
//!
//! [`Controller`] is sans-IO. Its driver carries out every [`Transmit`]
//! (an HTTP call to a node, within the timeout it names) and feeds the
//! answer back: [`Input::Status`] for a poll, [`Input::Done`] when a node
//! did what was asked, [`Input::Unanswered`] when it did not answer in
//! time (it may or may not have done it), [`Input::Refused`] when it said
//! no. What happened comes out of [`Controller::poll_event`].
//!
//! Every sender of a stripe derives SSRC, sequence numbers and timestamps
//! from the epoch and the stripe, so two nodes sending the same stripe
//! send identical packets: the receiver merges them as SMPTE ST 2022-7
//! legs. That makes a move hitless: the new node's leg starts, the
//! controller waits until it is seen sending on two polls in a row, and
//! only then halts the old leg. A hot standby is such a second leg kept
//! running all the time; a cold one is started when the primary fails,
//! and the frames in between are lost (the receiver counts them). Two
//! legs of a stripe go to its two addresses ([`Path`]) whenever it has
//! two, so they cross the network apart.
//!
//! # Nothing left behind
//!
//! A node that answers late may still have done what it was asked. Each
//! leg is asked for with an idempotency key (its label and epoch frame,
//! chosen by the driver once per leg, kept for its retries), so asking
//! again never makes a second stream. A send without an answer is
//! followed up: the node is polled again with twice the patience; if it
//! lists the leg, the leg stands; if not, the send is repeated (same key,
//! twice the patience) up to [`TRIES`] times, then the node has failed.
//! A halt (a move's old leg, every leg on `stop`) is repeated with
//! growing patience until the node confirms it holds no such leg, or,
//! after [`TRIES`] tries, reported as [`Event::NotHalted`] with the
//! stripes the node may still send. The controller remembers, per node,
//! every stripe it asked for or saw there, failed nodes included, so
//! that report names them.
//!
//! # Polling order
//!
//! The driver:
//!
//! 1. feeds the user's request ([`Input::Start`], [`Input::Adopt`],
//!    [`Input::Move`], [`Input::Stop`]) and every node's answer
//!    ([`Input::Status`], [`Input::Done`], [`Input::Unanswered`],
//!    [`Input::Refused`]) with [`Controller::handle_input`]`(now, ..)` as
//!    it comes;
//! 2. carries out every [`Controller::poll_transmit`]`(now)` in order
//!    (sends first, then halts due, then polls due), each HTTP call's
//!    answer going back as in 1 before the next transmit is asked for;
//! 3. reports every [`Controller::poll_event`];
//! 4. sleeps until [`Controller::poll_timeout`] (or a signal) and starts
//!    over. After [`Input::Stop`] it goes on until
//!    [`Controller::is_settled`].

mod error;
pub mod is05;
pub mod label;
mod status;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, VecDeque};

pub use error::Error;
pub use status::{FailedLeg, Listed, NodeStatus, StripeStatus};

use crate::Nanos;

/// SSRC of stripe 0 when the cluster file names none ("na" + 0); stripe
/// k sends SSRC + k. A node's stripe senders (IS-05) use it too unless
/// their path's sidecar names another.
pub const DEFAULT_SSRC: u32 = 0x6e61_0000;

/// How many times a send or a halt is tried before the controller gives
/// up on it (each try with twice the patience of the last).
pub const TRIES: u32 = 3;

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

/// Which of a stripe's two addresses a leg sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Path {
    /// Its `to` address.
    #[default]
    Main,
    /// Its `dup` address, for a second leg.
    Dup,
}

/// The cluster: stripes, nodes and the rules for failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Stripes of the frame.
    pub stripes: usize,
    /// Per stripe: whether it has a second address for a second leg.
    pub dup: Vec<bool>,
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
    /// How long a node may take to answer a first try; each follow-up of
    /// an unanswered request gets twice the last one's.
    pub timeout: Nanos,
}

/// A request to a node, as its answer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A poll.
    Poll,
    /// A send of the stripe.
    Send {
        /// The stripe.
        stripe: usize,
    },
    /// A halt of the stripe (`None`: of every stripe of the cluster).
    Halt {
        /// The stripe, or every one.
        stripe: Option<usize>,
    },
}

/// What the driver tells the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Start every stripe on its node (and hot standbys).
    Start,
    /// Take over stripes already running (from the nodes' first status),
    /// as `status` and `move` do when `start` ran in another process.
    Adopt,
    /// Halt every leg of the cluster on every node.
    Stop,
    /// A node answered a poll.
    Status {
        /// Node index in the plan.
        node: usize,
        /// What it said.
        status: NodeStatus,
    },
    /// A node did what was asked: a send's leg runs there (made now or by
    /// an earlier try with the same key), or it holds no leg a halt named.
    Done {
        /// Node index.
        node: usize,
        /// The request.
        request: Request,
    },
    /// A node did not answer in time, or not with serve's JSON: it may or
    /// may not have done it.
    Unanswered {
        /// Node index.
        node: usize,
        /// The request.
        request: Request,
        /// What went wrong, for the report.
        reason: String,
    },
    /// A node answered with an error (wrong token, allow-list, admission):
    /// it did not do it.
    Refused {
        /// Node index.
        node: usize,
        /// The request.
        request: Request,
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

/// What the driver must do, each within its `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transmit {
    /// Ask the node for its status (its stream table and clock).
    Poll {
        /// Node index.
        node: usize,
        /// How long it may take.
        timeout: Nanos,
    },
    /// Have the node send the stripe (an identical leg if another node
    /// already does), with the leg's idempotency key.
    Send {
        /// Node index.
        node: usize,
        /// The stripe.
        stripe: usize,
        /// The address it goes to.
        path: Path,
        /// The same leg asked again: keep its key (and epoch frame).
        retry: bool,
        /// How long it may take.
        timeout: Nanos,
    },
    /// Have the node stop and remove every stream of the stripe (`None`:
    /// of every stripe of the cluster), in any state; done when the node
    /// holds none.
    Halt {
        /// Node index.
        node: usize,
        /// The stripe, or every one.
        stripe: Option<usize>,
        /// How long it may take.
        timeout: Nanos,
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
    /// A node did not answer a send in time; it is asked again.
    SendUnanswered {
        /// The stripe.
        stripe: usize,
        /// Node index.
        node: usize,
        /// What went wrong.
        reason: String,
    },
    /// A node failed; the controller no longer counts on its legs.
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
    /// A planned move finished: the new leg runs and the old one halts.
    Moved {
        /// The stripe.
        stripe: usize,
        /// Old node.
        from: usize,
        /// New node.
        to: usize,
    },
    /// After a move under hot failover, a stripe has one leg only.
    NoStandby {
        /// The stripe.
        stripe: usize,
        /// Its only sender.
        node: usize,
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
    /// A halt was given up: the node did not confirm, so it may still
    /// send these stripes.
    NotHalted {
        /// Node index.
        node: usize,
        /// The stripes it may still hold (ascending).
        stripes: Vec<usize>,
        /// The last answer, or why there was none.
        reason: String,
    },
}

/// Where the request for a leg stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    /// Sent; no answer yet.
    Sent,
    /// The node said it runs (or the leg was found running).
    Made,
    /// The send went unanswered: waiting for the node's next status to
    /// tell whether it holds the leg.
    Checking {
        /// Why the send went unanswered.
        reason: String,
    },
}

/// One node sending one stripe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leg {
    node: usize,
    path: Path,
    asked: Asked,
    /// Sends of it so far.
    tries: u32,
    /// Packets at the last poll, once seen.
    packets: Option<u64>,
    underruns: u64,
    /// Polls in a row that showed it sending more.
    growing: u32,
}

impl Leg {
    fn new(node: usize, path: Path) -> Leg {
        Leg {
            node,
            path,
            asked: Asked::Sent,
            tries: 1,
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

#[derive(Debug, Clone)]
struct Node {
    failed: bool,
    /// Whether it has answered a poll (legs adopted then are the
    /// starting picture, not news).
    answered: bool,
    last_seen: Nanos,
    next_poll: Nanos,
    /// Its next poll's timeout is the plan's doubled this many times (a
    /// follow-up of an unanswered send).
    patience: u32,
    clock_off: bool,
    /// Stripes it may hold a stream of: asked for or seen there, and not
    /// halted since.
    held: BTreeSet<usize>,
}

/// A halt not yet confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Halt {
    node: usize,
    stripe: Option<usize>,
    /// Tries so far.
    tries: u32,
    due: Nanos,
    in_flight: bool,
}

/// The controller machine. See the module documentation.
#[derive(Debug)]
pub struct Controller {
    plan: Plan,
    nodes: Vec<Node>,
    stripes: Vec<Stripe>,
    adopting: bool,
    running: bool,
    sends: VecDeque<Transmit>,
    halts: Vec<Halt>,
    events: VecDeque<Event>,
}

impl Controller {
    /// A controller for `plan`, checked: every stripe has exactly one
    /// primary, node names are unique and stripes are in range.
    pub fn new(plan: Plan) -> Result<Controller, Error> {
        plan_check(&plan)?;
        let node = Node {
            failed: false,
            answered: false,
            last_seen: Nanos::ZERO,
            next_poll: Nanos::ZERO,
            patience: 0,
            clock_off: false,
            held: BTreeSet::new(),
        };
        Ok(Controller {
            stripes: vec![Stripe::default(); plan.stripes],
            nodes: vec![node; plan.nodes.len()],
            plan,
            adopting: false,
            running: false,
            sends: VecDeque::new(),
            halts: Vec::new(),
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

    /// Whether every request has been answered or given up: no send or
    /// halt waits, no unanswered send is being followed up.
    pub fn is_settled(&self) -> bool {
        self.sends.is_empty()
            && self.halts.is_empty()
            && self
                .stripes
                .iter()
                .flat_map(|s| &s.legs)
                .all(|l| l.asked == Asked::Made)
    }

    /// The stripes `node` may still hold a stream of (ascending): asked
    /// for or seen there, and not halted since.
    pub fn held(&self, node: usize) -> Vec<usize> {
        self.nodes
            .get(node)
            .map_or(Vec::new(), |n| n.held.iter().copied().collect())
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
            Input::Stop => self.stop(now),
            Input::Status { node, status } => self.status(now, self.node(node)?, &status),
            Input::Done { node, request } => self.done(now, self.node(node)?, request),
            Input::Unanswered {
                node,
                request,
                reason,
            } => self.unanswered(now, self.node(node)?, request, reason),
            Input::Refused {
                node,
                request,
                reason,
            } => self.refused(now, self.node(node)?, request, reason),
            Input::Move { stripe, to } => self.move_stripe(stripe, to)?,
        }
        Ok(())
    }

    /// The next request due at `now`: sends first, then halts due, then
    /// polls due.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(t) = self.sends.pop_front() {
            return Some(t);
        }
        if let Some(h) = self
            .halts
            .iter_mut()
            .filter(|h| !h.in_flight && h.due <= now)
            .min_by_key(|h| h.due)
        {
            h.in_flight = true;
            return Some(Transmit::Halt {
                node: h.node,
                stripe: h.stripe,
                timeout: patience(self.plan.timeout, h.tries),
            });
        }
        if !self.running {
            return None;
        }
        let node = (0..self.nodes.len())
            .filter(|&n| !self.nodes[n].failed && self.nodes[n].next_poll <= now)
            .min_by_key(|&n| self.nodes[n].next_poll)?;
        let n = &mut self.nodes[node];
        n.next_poll = now + self.plan.poll_interval;
        Some(Transmit::Poll {
            node,
            timeout: patience(self.plan.timeout, n.patience),
        })
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the next request is due (`None`: nothing left to do).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if !self.sends.is_empty() {
            return Some(Nanos::ZERO);
        }
        let halts = self.halts.iter().filter(|h| !h.in_flight).map(|h| h.due);
        let polls = self
            .nodes
            .iter()
            .filter(|n| self.running && !n.failed)
            .map(|n| n.next_poll);
        halts.chain(polls).min()
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
        for node in 0..self.plan.nodes.len() {
            let spec = &self.plan.nodes[node];
            let standby = spec.alternate && self.plan.failover == Failover::Hot;
            if spec.alternate && !standby {
                continue;
            }
            for stripe in spec.stripes.clone() {
                self.add_leg(stripe, node, None);
            }
        }
    }

    /// Asks `node` for a new leg of `stripe`, on the address left free
    /// (the one of the leg it will replace, `replacing`, if both are
    /// taken).
    fn add_leg(&mut self, stripe: usize, node: usize, replacing: Option<usize>) {
        let path = self.free_path(stripe, replacing);
        self.stripes[stripe].legs.push(Leg::new(node, path));
        self.nodes[node].held.insert(stripe);
        self.sends.push_back(Transmit::Send {
            node,
            stripe,
            path,
            retry: false,
            timeout: self.plan.timeout,
        });
    }

    /// The address for a new leg of `stripe`: `to` unless a leg uses it,
    /// then `dup` if the stripe has one and no leg uses it, else that of
    /// the leg on `replacing` (a move keeps the two legs apart).
    fn free_path(&self, stripe: usize, replacing: Option<usize>) -> Path {
        if !self.plan.dup[stripe] {
            return Path::Main;
        }
        let legs = &self.stripes[stripe].legs;
        let used = |p: Path| legs.iter().any(|l| l.path == p);
        if !used(Path::Main) {
            return Path::Main;
        }
        if !used(Path::Dup) {
            return Path::Dup;
        }
        replacing
            .and_then(|n| legs.iter().find(|l| l.node == n))
            .map_or(Path::Main, |l| l.path)
    }

    fn stop(&mut self, now: Nanos) {
        // Nothing more is asked for; every node is cleared, failed ones
        // too (a node that stopped answering may still be sending).
        self.sends.clear();
        self.halts.clear();
        for s in &mut self.stripes {
            s.legs.clear();
            s.moving = None;
            s.unconfirmed = None;
        }
        for node in 0..self.nodes.len() {
            self.halt(now, node, None);
        }
        self.running = false;
    }

    /// Queues a halt of `stripe` (or all) on `node`, due now.
    fn halt(&mut self, now: Nanos, node: usize, stripe: Option<usize>) {
        self.halts.push(Halt {
            node,
            stripe,
            tries: 0,
            due: now,
            in_flight: false,
        });
    }

    fn move_stripe(&mut self, stripe: usize, to: usize) -> Result<(), Error> {
        let to = self.node(to)?;
        let name = || self.plan.nodes[to].name.clone();
        let s = self
            .stripes
            .get(stripe)
            .ok_or(Error::NoSuchStripe { stripe })?;
        if s.legs.is_empty() {
            return Err(Error::NotSent { stripe });
        }
        if self.nodes[to].failed {
            return Err(Error::NodeFailed { node: name() });
        }
        let Some(from) = s.legs.iter().map(|l| l.node).find(|&n| n != to) else {
            return Err(Error::AlreadySending {
                stripe,
                node: name(),
            });
        };
        if !s.legs.iter().any(|l| l.node == to) {
            // A node already sending it (a hot standby) takes over as it
            // is; any other gets a new leg first.
            self.add_leg(stripe, to, Some(from));
        }
        self.stripes[stripe].moving = Some((from, to));
        Ok(())
    }

    fn status(&mut self, now: Nanos, node: usize, status: &NodeStatus) {
        let n = &mut self.nodes[node];
        n.patience = 0;
        if n.failed {
            return;
        }
        n.last_seen = now;
        n.held = status.held.iter().copied().collect();
        self.keep_asked(node);
        self.clock(node, status.clock_offset_ns);
        if self.adopting {
            self.adopt(node, status);
        }
        self.nodes[node].answered = true;
        if let Some(f) = status.failed.iter().find(|f| self.has_leg(f.stripe, node)) {
            let reason = format!("its leg of stripe {} failed: {}", f.stripe, f.reason);
            self.fail(now, node, reason);
            return;
        }
        for stripe in 0..self.stripes.len() {
            let Some(pos) = self.leg_of(stripe, node) else {
                continue;
            };
            let seen = status.stripes.iter().find(|s| s.stripe == stripe);
            if let Err(reason) = self.observe(stripe, pos, seen, status) {
                self.fail(now, node, reason);
                return;
            }
        }
        self.confirm_orphans(Some((node, status)));
    }

    /// Keeps in `node`'s ledger the stripes asked of it and not yet
    /// listed (a send in flight or unanswered may still land).
    fn keep_asked(&mut self, node: usize) {
        for (stripe, s) in self.stripes.iter().enumerate() {
            if s.legs
                .iter()
                .any(|l| l.node == node && l.asked != Asked::Made)
            {
                self.nodes[node].held.insert(stripe);
            }
        }
    }

    fn leg_of(&self, stripe: usize, node: usize) -> Option<usize> {
        self.stripes[stripe]
            .legs
            .iter()
            .position(|l| l.node == node)
    }

    fn has_leg(&self, stripe: usize, node: usize) -> bool {
        self.stripes
            .get(stripe)
            .is_some_and(|s| s.legs.iter().any(|l| l.node == node))
    }

    /// Updates one leg from its node's report; an error names why the
    /// node has failed.
    fn observe(
        &mut self,
        stripe: usize,
        pos: usize,
        seen: Option<&StripeStatus>,
        status: &NodeStatus,
    ) -> Result<(), String> {
        let leg = &mut self.stripes[stripe].legs[pos];
        if let Asked::Checking { reason } = &leg.asked {
            // The follow-up of an unanswered send: listed means made.
            if status.held.contains(&stripe) {
                leg.asked = Asked::Made;
            } else if leg.tries >= TRIES {
                return Err(format!(
                    "no answer to {TRIES} requests to send stripe {stripe}: {reason}"
                ));
            } else {
                leg.asked = Asked::Sent;
                leg.tries += 1;
                let (node, path, tries) = (leg.node, leg.path, leg.tries);
                self.sends.push_back(Transmit::Send {
                    node,
                    stripe,
                    path,
                    retry: true,
                    timeout: patience(self.plan.timeout, tries - 1),
                });
                return Ok(());
            }
        }
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
        self.halts.push(Halt {
            node: from,
            stripe: Some(stripe),
            tries: 0,
            due: Nanos::ZERO,
            in_flight: false,
        });
        self.events.push_back(Event::Moved { stripe, from, to });
        let legs = &self.stripes[stripe].legs;
        if self.plan.failover == Failover::Hot && legs.len() == 1 {
            let node = legs[0].node;
            self.events.push_back(Event::NoStandby { stripe, node });
        }
    }

    fn done(&mut self, now: Nanos, node: usize, request: Request) {
        match request {
            Request::Poll => {}
            Request::Send { stripe } => {
                self.nodes[node].held.insert(stripe);
                if let Some(pos) = self
                    .stripes
                    .get(stripe)
                    .and_then(|_| self.leg_of(stripe, node))
                {
                    self.stripes[stripe].legs[pos].asked = Asked::Made;
                } else if !self.running {
                    // Made after a stop: it must not stay.
                    self.halt(now, node, Some(stripe));
                }
            }
            Request::Halt { stripe } => {
                let Some(at) = self.in_flight_halt(node, stripe) else {
                    return;
                };
                self.halts.remove(at);
                let held = &mut self.nodes[node].held;
                match stripe {
                    Some(k) => {
                        held.remove(&k);
                    }
                    None => held.clear(),
                }
            }
        }
    }

    fn in_flight_halt(&self, node: usize, stripe: Option<usize>) -> Option<usize> {
        self.halts
            .iter()
            .position(|h| h.in_flight && h.node == node && h.stripe == stripe)
    }

    fn unanswered(&mut self, now: Nanos, node: usize, request: Request, reason: String) {
        match request {
            Request::Poll => {
                if now.saturating_sub(self.nodes[node].last_seen) >= self.plan.dead_after {
                    self.fail(now, node, format!("no answer: {reason}"));
                } else if self.checking(node) {
                    // A follow-up poll went unanswered too: more patience.
                    let n = &mut self.nodes[node];
                    n.patience = (n.patience + 1).min(TRIES);
                    n.next_poll = now;
                }
            }
            Request::Send { stripe } => {
                let Some(pos) = self
                    .stripes
                    .get(stripe)
                    .and_then(|_| self.leg_of(stripe, node))
                else {
                    return;
                };
                let leg = &mut self.stripes[stripe].legs[pos];
                leg.asked = Asked::Checking {
                    reason: reason.clone(),
                };
                let tries = leg.tries;
                self.events.push_back(Event::SendUnanswered {
                    stripe,
                    node,
                    reason,
                });
                let n = &mut self.nodes[node];
                n.patience = tries;
                n.next_poll = now;
            }
            Request::Halt { stripe } => self.halt_missed(now, node, stripe, reason, true),
        }
    }

    fn checking(&self, node: usize) -> bool {
        self.stripes
            .iter()
            .flat_map(|s| &s.legs)
            .any(|l| l.node == node && matches!(l.asked, Asked::Checking { .. }))
    }

    /// A halt that did not get its confirmation: tried again later with
    /// more patience (`again`), or given up.
    fn halt_missed(
        &mut self,
        now: Nanos,
        node: usize,
        stripe: Option<usize>,
        reason: String,
        again: bool,
    ) {
        let Some(at) = self.in_flight_halt(node, stripe) else {
            return;
        };
        let h = &mut self.halts[at];
        h.tries += 1;
        h.in_flight = false;
        h.due = now + self.plan.poll_interval;
        if again && h.tries < TRIES {
            return;
        }
        self.halts.remove(at);
        let stripes = match stripe {
            Some(k) => vec![k],
            None => self.held(node),
        };
        self.events.push_back(Event::NotHalted {
            node,
            stripes,
            reason,
        });
    }

    fn refused(&mut self, now: Nanos, node: usize, request: Request, reason: String) {
        match request {
            Request::Halt { stripe } => self.halt_missed(now, node, stripe, reason, false),
            Request::Send { stripe } => {
                // Refused: nothing was made there.
                self.nodes[node].held.remove(&stripe);
                self.fail(now, node, format!("refused: {reason}"));
            }
            Request::Poll => self.fail(now, node, format!("refused: {reason}")),
        }
    }

    fn adopt(&mut self, node: usize, status: &NodeStatus) {
        // What a node runs when it first answers is the starting picture;
        // a leg appearing later (another process's move) is news.
        let news = self.nodes[node].answered;
        for seen in &status.stripes {
            if let Some(s) = self.stripes.get_mut(seen.stripe)
                && !s.legs.iter().any(|l| l.node == node)
            {
                let mut leg = Leg::new(node, seen.path);
                leg.asked = Asked::Made;
                if !news {
                    leg.packets = Some(seen.packets);
                    leg.underruns = seen.underruns;
                }
                s.legs.push(leg);
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
        self.nodes[node].patience = 0;
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
                self.add_leg(stripe, to, None);
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

/// The timeout of a request tried `tries` times before: the plan's,
/// doubled each time.
fn patience(timeout: Nanos, tries: u32) -> Nanos {
    Nanos(timeout.0.saturating_mul(1 << tries.min(TRIES)))
}

/// Checks a plan: stripes in range, unique names, one primary per stripe.
fn plan_check(plan: &Plan) -> Result<(), Error> {
    if plan.stripes == 0 || plan.stripes > 64 {
        return Err(Error::StripeCount {
            stripes: plan.stripes,
        });
    }
    if plan.dup.len() != plan.stripes {
        return Err(Error::DupCount {
            given: plan.dup.len(),
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
    if plan.timeout == Nanos::ZERO {
        return Err(Error::Timeout);
    }
    Ok(())
}
