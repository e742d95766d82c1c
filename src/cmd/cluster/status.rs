//! `nagare cluster status`: two polls of every node a poll interval apart
//! (rates are bytes over the measured time between them), the clock
//! offset of each, and every failure named by node.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use nagare_api::cluster::{ClusterStatus, LegStatus, NodeReport};
use nagare_api::serve::StreamState;
use nagare_proto::cluster::Input;

use super::client::Snapshot;
use super::config::Cluster;
use super::driver::Driver;

/// Prints the status; exit status 1 when a node did not answer.
pub(super) fn run(cluster: &Cluster, json: bool) -> Result<ExitCode> {
    let mut d = Driver::new(cluster, true)?;
    d.input(Input::Adopt)?;
    d.poll_all();
    let first: Vec<Option<Snapshot>> = std::mem::take(&mut d.snapshots);
    d.snapshots = (0..first.len()).map(|_| None).collect();
    crate::signal::wait(Duration::from_millis(cluster.config.poll_ms));
    d.poll_all();
    let tolerance = cluster.plan.clock_tolerance.as_nanos();
    let nodes: Vec<NodeReport> = (0..first.len())
        .map(|n| node_report(cluster, &d, n, first[n].as_ref(), tolerance))
        .collect();
    let status = ClusterStatus {
        name: cluster.config.name.clone(),
        senders: d.senders(),
        nodes,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_text(&status);
    }
    Ok(if status.nodes.iter().all(|n| n.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn node_report(
    cluster: &Cluster,
    d: &Driver<'_>,
    n: usize,
    before: Option<&Snapshot>,
    tolerance: u64,
) -> NodeReport {
    let spec = &cluster.config.nodes[n];
    let now = d.snapshots[n].as_ref();
    let mut legs = Vec::new();
    for s in now.map_or(&[][..], |s| &s.streams[..]) {
        let Some(k) = d.ours(n, s) else {
            continue;
        };
        let rate_bps = before
            .and_then(|b| {
                let old = b.streams.iter().find(|o| o.id == s.id)?;
                let secs = (now?.at_ns.saturating_sub(b.at_ns)) as f64 / 1e9;
                let bytes = s.counters.bytes.saturating_sub(old.counters.bytes);
                (secs > 0.0).then(|| (bytes as f64 * 8.0 / secs) as u64)
            })
            .unwrap_or(0);
        legs.push(LegStatus {
            stripe: k,
            id: s.id,
            destination: s.destinations.join(","),
            packets: s.counters.packets,
            rate_bps,
            underruns: s.counters.underruns,
            late: s.counters.late,
            ring_fill: s.counters.ring_fill,
            error: (s.state == StreamState::Failed).then(|| {
                s.error
                    .clone()
                    .unwrap_or_else(|| "failed; the node gave no reason".into())
            }),
        });
    }
    let offset = now.map(|s| s.clock_offset_ns);
    NodeReport {
        name: spec.name.clone(),
        url: spec.url.clone(),
        ok: d.errors[n].is_none() && now.is_some(),
        error: d.errors[n].clone(),
        clock_offset_ns: offset,
        clock_warning: offset.is_some_and(|o| o.unsigned_abs() > tolerance),
        rate_bps: legs.iter().map(|l| l.rate_bps).sum(),
        legs,
    }
}

fn print_text(s: &ClusterStatus) {
    println!("cluster {}", s.name);
    for n in &s.nodes {
        if let Some(e) = &n.error {
            println!("node {}: {e}", n.name);
            continue;
        }
        let offset = n.clock_offset_ns.unwrap_or(0) as f64 / 1e6;
        let warn = if n.clock_warning {
            "  WARNING: clock off by more than a frame"
        } else {
            ""
        };
        println!(
            "node {}: {} legs, {:.1} Mbit/s, clock offset {offset:+.3} ms{warn}",
            n.name,
            n.legs.len(),
            n.rate_bps as f64 / 1e6
        );
        for l in &n.legs {
            if let Some(e) = &l.error {
                println!(
                    "  stripe {} (stream {}) to {}: FAILED: {e}",
                    l.stripe, l.id, l.destination
                );
                continue;
            }
            println!(
                "  stripe {} (stream {}) to {}: {:.1} Mbit/s, packets {}, underruns {}, late {}, ring {}",
                l.stripe,
                l.id,
                l.destination,
                l.rate_bps as f64 / 1e6,
                l.packets,
                l.underruns,
                l.late,
                l.ring_fill
            );
        }
    }
    for (k, senders) in s.senders.iter().enumerate() {
        let who = if senders.is_empty() {
            "nobody".to_string()
        } else {
            senders.join(", ")
        };
        println!("stripe {k}: {who}");
    }
}
