//! `cluster.toml` read, checked and turned into the controller's plan and
//! one API client per node.

use std::net::SocketAddr;

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::cluster::{ClusterConfig, FailoverMode};
use nagare_api::serve::{Pacing, StreamRequest, StripeSpec};
use nagare_proto::cluster::{DEFAULT_SSRC, Failover, NodeSpec, Path, Plan, label};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::stripe::Stripes;
use nagare_proto::{FrameRate, Nanos, Ssrc};

use super::client::NodeClient;
use crate::cli;

/// Longest first-try timeout: its third try waits four times as long,
/// and `stop` should not sit for minutes on a node that never answers.
const MAX_TIMEOUT_MS: u64 = 30_000;

/// A checked cluster.
pub(super) struct Cluster {
    /// The file as written.
    pub config: ClusterConfig,
    /// Frame rate of the stream.
    pub rate: FrameRate,
    /// The controller's plan.
    pub plan: Plan,
    /// One client per node, in config order.
    pub clients: Vec<NodeClient>,
}

impl Cluster {
    /// Reads and checks `path`.
    pub(super) fn load(path: &std::path::Path) -> Result<Cluster> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --config '{}'", path.display()))?;
        let config: ClusterConfig = toml::from_str(&text).with_context(|| {
            format!(
                "--config '{}' does not parse: it needs [stream], one [[destination]] per stripe \
                 and [[node]] tables (see docs/cluster.md)",
                path.display()
            )
        })?;
        Cluster::new(config).with_context(|| format!("in --config '{}'", path.display()))
    }

    /// Checks `config`.
    pub(super) fn new(config: ClusterConfig) -> Result<Cluster> {
        let s = &config.stream;
        let format = cli::parse_format(&s.size, &s.pix_fmt)?;
        let rate = cli::parse_rate(&s.fps)?;
        let stripes = Stripes::new(format, s.split, s.stripes).map_err(|e| {
            anyhow!(
                "split {} with {} stripes does not fit {}: {e}",
                s.split,
                s.stripes,
                s.size
            )
        })?;
        check_values(&config, &stripes)?;
        if config.destinations.len() != s.stripes {
            bail!(
                "{} [[destination]] tables for {} stripes: give one per stripe, in stripe order",
                config.destinations.len(),
                s.stripes
            );
        }
        for (k, d) in config.destinations.iter().enumerate() {
            for a in std::iter::once(&d.to).chain(&d.dup) {
                let addr: SocketAddr = a.parse().map_err(|_| {
                    anyhow!("destination {k}: '{a}' is not HOST:PORT such as 239.1.0.1:5000")
                })?;
                if addr.ip().is_multicast() && d.interface.is_none() {
                    bail!("destination {k}: multicast {a} needs interface = \"ADDR or NAME\"");
                }
            }
        }
        for n in &config.nodes {
            if !n.url.starts_with("http://") {
                bail!(
                    "node '{}': url '{}' must be http://HOST:PORT (serve's --http)",
                    n.name,
                    n.url
                );
            }
        }
        if config.poll_ms == 0 || config.dead_after_ms < config.poll_ms {
            bail!(
                "poll_ms {} and dead_after_ms {}: poll at least once before a node counts as dead",
                config.poll_ms,
                config.dead_after_ms
            );
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&config.timeout_ms) {
            bail!(
                "timeout_ms {}: give 1 to {MAX_TIMEOUT_MS} ms (a request not answered in time \
                 is followed up with twice the time, up to three tries)",
                config.timeout_ms
            );
        }
        let plan = plan(&config, rate);
        nagare_proto::cluster::Controller::new(plan.clone()).map_err(|e| anyhow!("{e}"))?;
        let clients = config
            .nodes
            .iter()
            .map(|n| NodeClient::new(&n.url, n.token.clone()))
            .collect();
        Ok(Cluster {
            config,
            rate,
            plan,
            clients,
        })
    }

    /// The node index of `name`, or which names there are.
    pub(super) fn node(&self, name: &str) -> Result<usize> {
        self.config
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.config.nodes.iter().map(|n| n.name.as_str()).collect();
                anyhow!(
                    "no node '{name}' in the config: nodes are {}",
                    names.join(", ")
                )
            })
    }

    /// Node names, by index.
    pub(super) fn name(&self, node: usize) -> &str {
        &self.config.nodes[node].name
    }

    /// The label of stripe `k`'s legs on every node.
    pub(super) fn label(&self, k: usize) -> String {
        label::label(&self.config.name, k)
    }

    /// The label of a node's IS-05 sender of stripe `k` of the stream.
    pub(super) fn sender_label(&self, k: usize) -> String {
        let s = &self.config.stream;
        nagare_proto::nmos::model::stripe_label(&s.source, s.split, k, s.stripes)
    }

    /// Which stripe a node's stream with `label` is, if it is ours.
    pub(super) fn stripe_of(&self, label: Option<&str>) -> Option<usize> {
        label::stripe_of(&self.config.name, self.config.stream.stripes, label?)
    }

    /// Where a leg of stripe `k` on `path` sends.
    pub(super) fn destination(&self, k: usize, path: Path) -> &str {
        let d = &self.config.destinations[k];
        match (path, &d.dup) {
            (Path::Dup, Some(dup)) => dup,
            _ => &d.to,
        }
    }

    /// The path of a leg of stripe `k` sending to `dest`.
    pub(super) fn path(&self, k: usize, dest: Option<&str>) -> Path {
        let dup = self
            .config
            .destinations
            .get(k)
            .and_then(|d| d.dup.as_deref());
        if dest.is_some() && dest == dup {
            Path::Dup
        } else {
            Path::Main
        }
    }

    /// The request that makes a node send stripe `k` on `path`, starting
    /// at `epoch_frame` (or the next frame due), keyed by both.
    pub(super) fn request(&self, k: usize, path: Path, epoch_frame: u64) -> StreamRequest {
        let s = &self.config.stream;
        let mut pacing = Pacing::default();
        if let Some(p) = s.packet_size {
            pacing.packet_size = p;
        }
        StreamRequest {
            source: s.source.clone(),
            destinations: vec![self.destination(k, path).to_string()],
            encapsulation: Default::default(),
            pacing,
            priority: 200,
            looping: true,
            interface: self.config.destinations[k].interface.clone(),
            ttl: self.config.destinations[k].ttl,
            stripe: Some(StripeSpec {
                split: s.split,
                count: s.stripes,
                index: k,
            }),
            ssrc: Some(s.ssrc.unwrap_or(DEFAULT_SSRC).wrapping_add(k as u32)),
            label: Some(self.label(k)),
            epoch_frame: Some(epoch_frame),
            idempotency_key: Some(label::key(&self.config.name, k, epoch_frame)),
        }
    }
}

/// The controller's view of the config.
/// The values a node would refuse, or would take and then misbehave on,
/// refused here with the value and the range: a packet size the stripe's
/// packetizer refuses, SSRCs that wrap across the stripes (stripe k
/// sends SSRC + k), a TTL past 255, a cluster name that would not read
/// back as its legs' label, a node URL with user information (tokens go
/// in `token`, never into a URL that ends up in logs).
fn check_values(config: &ClusterConfig, stripes: &Stripes) -> Result<()> {
    let s = &config.stream;
    if let Some(p) = s.packet_size {
        Packetizer::new(stripes.stripe_format(), p, Ssrc(0))
            .map_err(|e| anyhow!("packet_size {p}: {e}"))?;
    }
    let first = s.ssrc.unwrap_or(DEFAULT_SSRC);
    let stripes_n = u32::try_from(s.stripes).unwrap_or(u32::MAX);
    if first.checked_add(stripes_n.saturating_sub(1)).is_none() {
        bail!(
            "ssrc {first:#010x}: stripe k sends ssrc + k, so {} stripes need an ssrc of at most \
             {:#010x}",
            s.stripes,
            u32::MAX - stripes_n.saturating_sub(1)
        );
    }
    for (k, d) in config.destinations.iter().enumerate() {
        if let Some(ttl) = d.ttl
            && !(1..=255).contains(&ttl)
        {
            bail!("destination {k}: ttl {ttl} is out of range: 1..=255");
        }
    }
    let name_ok = !config.name.is_empty()
        && config.name.len() <= 64
        && config
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !config.name.contains("..");
    if !name_ok {
        bail!(
            "name '{}': use 1 to 64 letters, digits, '-', '_' or '.' (no '..'); it labels the \
             legs on every node",
            config.name
        );
    }
    for n in &config.nodes {
        let authority = n
            .url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("");
        if authority.contains('@') {
            bail!(
                "node '{}': url '{}' carries user information; give the token as token = \"...\"",
                n.name,
                n.url
            );
        }
    }
    Ok(())
}

fn plan(c: &ClusterConfig, rate: FrameRate) -> Plan {
    let ms = |v: u64| Nanos(v.saturating_mul(1_000_000));
    Plan {
        stripes: c.stream.stripes,
        dup: c.destinations.iter().map(|d| d.dup.is_some()).collect(),
        nodes: c
            .nodes
            .iter()
            .map(|n| NodeSpec {
                name: n.name.clone(),
                stripes: n.stripes.clone(),
                alternate: n.alternate,
            })
            .collect(),
        failover: match c.failover {
            FailoverMode::Manual => Failover::Manual,
            FailoverMode::Cold => Failover::Cold,
            FailoverMode::Hot => Failover::Hot,
        },
        poll_interval: ms(c.poll_ms),
        dead_after: ms(c.dead_after_ms),
        // A receiver buffers about a frame; a node whose clock is off by
        // more starts its stripes a frame early or late.
        clock_tolerance: Nanos::from_secs_f64(1.0 / rate.as_f64()),
        timeout: ms(c.timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name = \"wall\"\nfailover = \"manual\"\npoll_ms = 100\ndead_after_ms = 1000\n\
        [stream]\nsource = \"clip.yuv\"\nsize = \"256x128\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n\
        split = \"lines\"\nstripes = 2\npacket_size = 1200\n\
        [[destination]]\nto = \"127.0.0.1:5000\"\n[[destination]]\nto = \"127.0.0.1:5002\"\n\
        [[node]]\nname = \"a\"\nurl = \"http://127.0.0.1:8080\"\nstripes = [0, 1]\n";

    fn check(text: &str) -> Result<Cluster> {
        Cluster::new(toml::from_str(text).expect("parses"))
    }

    #[test]
    fn values_out_of_range_are_refused_with_the_value() {
        if let Err(e) = check(GOOD) {
            panic!("{e:#}");
        }
        for (from, to, want) in [
            ("packet_size = 1200", "packet_size = 0", "packet_size 0"),
            (
                "packet_size = 1200",
                "packet_size = 70000",
                "packet_size 70000",
            ),
            (
                "stripes = 2\n",
                "stripes = 2\nssrc = 4294967295\n",
                "ssrc 0xffffffff",
            ),
            (
                "to = \"127.0.0.1:5000\"",
                "to = \"127.0.0.1:5000\"\nttl = 100000",
                "ttl 100000",
            ),
            ("name = \"wall\"", "name = \"t/../x\"", "name 't/../x'"),
            (
                "dead_after_ms = 1000\n",
                "dead_after_ms = 1000\ntimeout_ms = 0\n",
                "timeout_ms 0: give 1 to 30000 ms",
            ),
            (
                "http://127.0.0.1:8080",
                "http://user:pw@127.0.0.1:8080",
                "user information",
            ),
        ] {
            let bad = GOOD.replacen(from, to, 1);
            assert_ne!(bad, GOOD, "{from}");
            let err = format!(
                "{:#}",
                check(&bad).err().unwrap_or_else(|| panic!("{to} taken"))
            );
            assert!(err.contains(want), "{to}: {err}");
        }
    }
}
