//! `nagare cluster`: one stream striped over several `nagare serve` nodes
//! (seed 000), driven through their HTTP APIs: serve's own, or, for a
//! node with `api = "nmos"`, NMOS IS-05 activations of its stripe senders
//! ([`nmos`]).
//!
//! - `start` asks every primary node to send its stripes, all from the
//!   same epoch frame, so the stripes line up by RTP timestamp without the
//!   nodes talking to each other; then it stays in the foreground polling
//!   the nodes and applies the config's `failover` rule. On SIGINT/SIGTERM
//!   it halts every leg as `stop` does and prints what it halted
//!   (`--leave` leaves them running for a later `status`, `move` or
//!   `stop`).
//! - `status` shows every node's legs, rate, packets, underruns and clock
//!   offset, and names each node that fails to answer.
//! - `move STRIPE NODE` takes over the running legs, starts an identical
//!   second leg on NODE and halts the old one once the new one is seen
//!   sending on two polls in a row: the receiver merges the legs (ST
//!   2022-7), so no frame is lost.
//! - `stop` halts every leg of the cluster, in any state, on every
//!   node, trying a node that does not confirm again with more patience,
//!   and names each node that never confirmed with the stripes it may
//!   still send (exit status 1).
//!
//! The decisions are nagare-proto's `cluster::Controller`; this module
//! moves HTTP requests and time. The HTTP client is `ureq` (sync, no TLS
//! built in): the controller makes a few requests per second from one
//! thread, so an async runtime would buy nothing.

mod client;
mod config;
mod driver;
mod nmos;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use nagare_api::cluster::ClusterLog;
use nagare_proto::cluster::Input;
use tracing::info;

use config::Cluster;
use driver::Driver;

/// How far ahead of now `start` sets the common first frame: time for
/// every node's request to land before it is due.
const START_AHEAD: Duration = Duration::from_millis(600);

/// How long `start` runs without a signal: for ever, in effect.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Longest a `move` may take before it is reported as stuck.
const MOVE_LIMIT: Duration = Duration::from_secs(15);

/// Command-line arguments of `nagare cluster`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClusterArgs {
    /// The cluster file (see docs/cluster.md); before or after the verb.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// The verbs of `nagare cluster`.
#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Action {
    /// Start every stripe on its node and watch the nodes until
    /// SIGINT/SIGTERM (failover as the config says).
    Start {
        /// On SIGINT/SIGTERM, leave the legs running (default: halt them).
        #[arg(long)]
        leave: bool,
    },
    /// Halt every leg of the cluster on every node.
    Stop,
    /// Show every node's legs, rate, counters, clock offset and errors.
    Status,
    /// Move STRIPE to NODE without losing a packet.
    Move {
        /// The stripe, 0-based.
        stripe: usize,
        /// The node's name.
        node: String,
    },
}

/// `nagare cluster`.
pub(crate) fn main(args: ClusterArgs) -> Result<ExitCode> {
    let Some(config) = &args.config else {
        anyhow::bail!(
            "nagare cluster needs --config FILE (the cluster.toml; see docs/cluster.md), before \
             or after the verb"
        );
    };
    let cluster = Cluster::load(config)?;
    match &args.action {
        Action::Start { leave } => start(&cluster, *leave, args.json),
        Action::Stop => stop(&cluster, args.json),
        Action::Status => status::run(&cluster, args.json),
        Action::Move { stripe, node } => move_stripe(&cluster, *stripe, node, args.json),
    }
}

fn start(cluster: &Cluster, leave: bool, json: bool) -> Result<ExitCode> {
    let mut d = Driver::new(cluster, false)?;
    let ahead = crate::clock::epoch_ns() + START_AHEAD.as_nanos();
    let first = cluster.rate.frame_at_or_after_ns(ahead);
    d.epoch_frame = Some(first);
    d.log.epoch_frame = Some(first);
    info!(
        stripes = cluster.plan.stripes,
        nodes = cluster.plan.nodes.len(),
        epoch_frame = first,
        "starting {} stripes on {} nodes at epoch frame {first}",
        cluster.plan.stripes,
        cluster.plan.nodes.len()
    );
    d.input(Input::Start)?;
    // Legs another process starts (a `move`) are taken over too.
    d.input(Input::Adopt)?;
    d.pump();
    // Later legs (failover, standbys) start at the next frame due.
    d.epoch_frame = None;
    d.run_until(FOREVER, |_| false);
    d.log.senders = d.senders();
    if leave {
        info!("stopping; the legs keep running (--leave)");
    } else {
        halt_all(&mut d)?;
    }
    finish(&d, json, Verb::Start)
}

fn stop(cluster: &Cluster, json: bool) -> Result<ExitCode> {
    let mut d = Driver::new(cluster, false)?;
    d.input(Input::Adopt)?;
    d.poll_all();
    d.log.senders = d.senders();
    halt_all(&mut d)?;
    finish(&d, json, Verb::Stop)
}

/// Halts every leg of the cluster on every node, and waits until each
/// node confirmed or was given up.
fn halt_all(d: &mut Driver<'_>) -> Result<()> {
    info!(
        cluster = %d.cluster().config.name,
        "halting every leg of '{}' on {} nodes",
        d.cluster().config.name,
        d.cluster().plan.nodes.len()
    );
    d.input(Input::Stop)?;
    d.settle();
    Ok(())
}

fn move_stripe(cluster: &Cluster, stripe: usize, node: &str, json: bool) -> Result<ExitCode> {
    let to = cluster.node(node)?;
    // The starting picture is taken over quietly; only changes are news.
    let mut d = Driver::new(cluster, false)?;
    d.input(Input::Adopt)?;
    d.poll_all();
    let before = d.senders();
    if let Err(e) = d.input(Input::Move { stripe, to }) {
        bail!("cannot move stripe {stripe} to node {node}: {e}");
    }
    let done = d.run_until(MOVE_LIMIT, |d| {
        !d.controller().is_moving() && d.controller().is_settled()
    });
    let moved = d
        .log
        .events
        .iter()
        .any(|e| e.starts_with("stripe") && e.contains("moved"));
    if !done || !moved {
        finish(&d, json, Verb::Move { stripe, before })?;
        bail!(
            "the move of stripe {stripe} to node {node} did not finish (see the events above); \
             check the node with `nagare cluster status`"
        );
    }
    finish(&d, json, Verb::Move { stripe, before })
}

/// Which verb's report [`finish`] prints.
enum Verb {
    Start,
    Stop,
    /// A move of `stripe`, whose senders were `before` it.
    Move {
        stripe: usize,
        before: Vec<Vec<String>>,
    },
}

/// Prints what happened: the log as JSON, or in words on stdout. Exit
/// status 1 when a node did not confirm a halt, or (but for `stop`, whose
/// job is only the halts) when a node failed.
fn finish(d: &Driver<'_>, json: bool, verb: Verb) -> Result<ExitCode> {
    let mut log = d.log.clone();
    if log.senders.is_empty() {
        log.senders = d.senders();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&log)?);
    } else {
        print_text(&d.cluster().config.name, &log, &d.senders(), &verb);
    }
    let failed = !log.failed.is_empty() && !matches!(verb, Verb::Stop);
    Ok(if failed || !log.not_halted.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(name: &str, log: &ClusterLog, now: &[Vec<String>], verb: &Verb) {
    match verb {
        Verb::Move { stripe, before } => {
            let was = before.get(*stripe).map_or(String::new(), |s| names(s));
            let is = now.get(*stripe).map_or(String::new(), |s| names(s));
            println!("stripe {stripe}: sent by {is} (was {was})");
            return;
        }
        Verb::Start => {
            println!("cluster {name}: stopped");
            for (k, s) in log.senders.iter().enumerate() {
                println!("stripe {k}: was sent by {}", names(s));
            }
        }
        Verb::Stop => println!("cluster {name}: stopped"),
    }
    for f in &log.failed {
        let why = log
            .events
            .iter()
            .find_map(|e| e.strip_prefix(&format!("node {f}: failed: ")))
            .unwrap_or("see above");
        println!("node {f}: failed: {why}");
    }
    for h in &log.halted {
        println!(
            "node {}: halted stripe {} (stream {}, {})",
            h.node, h.stripe, h.id, h.state
        );
    }
    if log.halted.is_empty() && log.not_halted.is_empty() {
        println!("no node held a leg of {name}");
    }
    for n in &log.not_halted {
        println!(
            "node {}: NOT CONFIRMED ({}): it may still send {}",
            n.node,
            n.reason,
            driver::stripe_list(&n.stripes)
        );
    }
}

fn names(s: &[String]) -> String {
    if s.is_empty() {
        "nobody".into()
    } else {
        s.join(", ")
    }
}
