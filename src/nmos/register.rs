//! The registration driver: a thread that feeds nagare-proto's
//! `nmos::Registrar` the registries (`--registry`, or a DNS-SD browse),
//! the node's resources (read again every second, so a started or
//! stopped stream is re-POSTed within one), the HTTP answers and the
//! time, and carries out its requests with ureq. Any node registers
//! this way: it hands over how to read its resources and when to stop.
//! On a clean stop it deregisters (the machine's `Input::Leave`: DELETEs,
//! children first) within the machine's time for it, and
//! [`Registration::finish`] waits for that no longer than
//! [`FINISH_WAIT`], so a hung registry cannot hold the exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::{info, warn};

use nagare_proto::Nanos;
use nagare_proto::nmos::registration::{Config, Event, Input, Method, Registrar, Request};
use nagare_proto::nmos::{Registry, Resource, ResourceId};

use crate::net::udp::Interface;
use crate::nmos::{dns, parse_dns_server, parse_registry_url};

/// How resources are read again for changes.
const REFRESH: Duration = Duration::from_secs(1);
/// How often a DNS-SD browse is repeated: often while it finds nothing
/// (a registry coming up is found within seconds), seldom once it has
/// (a new one of better priority is still noticed).
const REBROWSE_EMPTY: Duration = Duration::from_secs(5);
const REBROWSE: Duration = Duration::from_secs(30);
/// How long a stopping node waits for deregistration at most: the
/// machine's 2 s (`Config::leave`) and a little.
pub(crate) const FINISH_WAIT: Duration = Duration::from_millis(2500);

/// A running registration thread.
pub(crate) struct Registration(std::thread::JoinHandle<()>);

impl Registration {
    /// Waits for the thread to deregister and end (once the node's stop
    /// flag is set), at most [`FINISH_WAIT`]: a request already blocked
    /// on a silent registry is left behind, and the registry expires
    /// the node itself.
    pub(crate) fn finish(self) {
        let end = Instant::now() + FINISH_WAIT;
        while !self.0.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.0.is_finished() {
            let _ = self.0.join();
        } else {
            warn!(
                "NMOS: the registry did not answer the deregistration within {} ms; \
                 it will expire the node",
                FINISH_WAIT.as_millis()
            );
        }
    }
}

/// Where the registries come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// `--registry URL`, in the order given.
    Fixed(Vec<String>),
    /// `--nmos-dns SERVER` and `--nmos-domain DOMAIN`.
    DnsSd {
        /// The DNS server.
        server: SocketAddr,
        /// The browse domain.
        domain: String,
    },
    /// `--nmos-mdns IFACE`: multicast DNS on that interface.
    Mdns(Interface),
}

/// The flags of a node that may register (serve's, `recv --nmos`'s).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct RegistrationArgs {
    /// Where the NMOS node id is kept across restarts (one file per
    /// HTTP port; default: $XDG_STATE_HOME/nagare or
    /// ~/.local/state/nagare). An HTTP port of 0 keeps none.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// NMOS IS-04 registry to register with, e.g. http://10.0.0.5:8235
    /// (repeatable: the next is tried when one fails).
    #[arg(long, value_name = "URL", value_parser = parse_registry_url)]
    pub registry: Vec<String>,
    /// DNS server to browse for NMOS registries with unicast DNS-SD
    /// (_nmos-register._tcp), e.g. 10.0.0.2 or 10.0.0.2:53.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_dns_server, conflicts_with = "registry")]
    pub nmos_dns: Option<SocketAddr>,
    /// DNS-SD browse domain for --nmos-dns (e.g. studio.example.com).
    #[arg(long, value_name = "DOMAIN", requires = "nmos_dns")]
    pub nmos_domain: Option<String>,
    /// Interface (name or address) to browse for NMOS registries on
    /// with multicast DNS (_nmos-register._tcp.local), where the plant
    /// has no unicast DNS-SD.
    #[arg(long, value_name = "IFACE", value_parser = crate::cli::parse_interface, conflicts_with_all = ["registry", "nmos_dns"])]
    pub nmos_mdns: Option<Interface>,
}

impl RegistrationArgs {
    /// Where the registries come from, if registration is asked for.
    pub(crate) fn source(&self) -> Option<Source> {
        match (&self.nmos_dns, self.registry.is_empty()) {
            (Some(dns), _) => Some(Source::DnsSd {
                server: *dns,
                domain: self.nmos_domain.clone().unwrap_or_else(|| "local".into()),
            }),
            (None, false) => Some(Source::Fixed(self.registry.clone())),
            (None, true) => self.nmos_mdns.clone().map(Source::Mdns),
        }
    }

    /// The state directory: `--state-dir`, else the default.
    pub(crate) fn state_dir(&self) -> Option<PathBuf> {
        self.state_dir
            .clone()
            .or_else(crate::nmos::identity::default_state_dir)
    }
}

/// Starts registering node `node` on a thread named `thread` when the
/// flags ask for it: `resources` reads the node's resources, `stopping`
/// ends it.
pub(crate) fn start(
    args: &RegistrationArgs,
    node: ResourceId,
    thread: &str,
    stopping: impl Fn() -> bool + Send + 'static,
    resources: impl Fn() -> Vec<Resource> + Send + 'static,
) -> std::io::Result<Option<Registration>> {
    let Some(source) = args.source() else {
        return Ok(None);
    };
    let from = match &source {
        Source::Fixed(urls) => urls.join(", then "),
        Source::DnsSd { server, domain } => {
            format!("the registries DNS-SD finds in {domain} at {server}")
        }
        Source::Mdns(i) => format!("the registries multicast DNS finds on {}", i.label),
    };
    info!(%node, "NMOS node {node} registering with {from}");
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || run(&stopping, &resources, &source))
        .map(|t| Some(Registration(t)))
}

/// Registers the node until `stopping`, then deregisters it.
fn run(stopping: &dyn Fn() -> bool, resources: &dyn Fn() -> Vec<Resource>, source: &Source) {
    let origin = Instant::now();
    let now = || Nanos(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let config = Config::default();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_nanos(config.request_timeout.0))
        .build();
    let mut reg = Registrar::new(config);
    let mut next_refresh = Instant::now();
    let mut next_browse = Instant::now();
    let mut said_empty = false;
    while !stopping() {
        if Instant::now() >= next_browse {
            next_browse = Instant::now() + REBROWSE_EMPTY;
            if let Some(list) = registries(source, &mut said_empty) {
                next_browse = Instant::now() + REBROWSE;
                reg.handle_input(now(), Input::Discovered(list));
            }
        }
        if Instant::now() >= next_refresh {
            next_refresh = Instant::now() + REFRESH;
            reg.handle_input(now(), Input::Resources(resources()));
        }
        if reg.poll_timeout().is_some_and(|t| now() >= t) {
            reg.handle_input(now(), Input::Timer);
        }
        while let Some(req) = reg.poll_transmit(now()) {
            let answer = send(&agent, &req, reg.request_budget(now()));
            reg.handle_input(now(), answer);
        }
        while let Some(e) = reg.poll_event() {
            if let Event::Unreachable { .. } = e {
                // Every registry failed: browse again at once.
                next_browse = Instant::now();
            }
            report(&e);
        }
        let wake = reg.poll_timeout().map_or(REFRESH, |t| {
            Duration::from_nanos(t.0.saturating_sub(now().0))
        });
        // Short sleeps: the stop flag is looked at every 50 ms.
        std::thread::sleep(wake.min(REFRESH).min(Duration::from_millis(50)));
    }
    leave(&agent, &mut reg, &now);
}

/// Deregisters: the machine's DELETEs, each waiting no longer than the
/// stop's time left, until it says it has left.
fn leave(agent: &ureq::Agent, reg: &mut Registrar, now: &dyn Fn() -> Nanos) {
    reg.handle_input(now(), Input::Leave);
    while !reg.has_left() {
        if reg.poll_timeout().is_some_and(|t| now() >= t) {
            reg.handle_input(now(), Input::Timer);
        }
        while let Some(req) = reg.poll_transmit(now()) {
            let answer = send(agent, &req, reg.request_budget(now()));
            reg.handle_input(now(), answer);
        }
        while let Some(e) = reg.poll_event() {
            report(&e);
        }
        let wake = reg.poll_timeout().map_or(Duration::ZERO, |t| {
            Duration::from_nanos(t.0.saturating_sub(now().0))
        });
        std::thread::sleep(wake.min(Duration::from_millis(10)));
    }
    while let Some(e) = reg.poll_event() {
        report(&e);
    }
}

/// The registries to use; `said_empty` keeps an empty browse said once
/// until one is found.
fn registries(source: &Source, said_empty: &mut bool) -> Option<Vec<Registry>> {
    match source {
        Source::Fixed(urls) => Some(
            urls.iter()
                .enumerate()
                .map(|(k, u)| Registry {
                    base: u.trim_end_matches('/').to_string(),
                    priority: k as u32,
                })
                .collect(),
        ),
        Source::DnsSd { server, domain } => found(
            dns::browse(*server, domain),
            &format!("_nmos-register._tcp.{domain} at --nmos-dns {server}"),
            said_empty,
        ),
        Source::Mdns(i) => found(
            dns::browse_mdns(i),
            &format!("_nmos-register._tcp.local by mDNS on {}", i.label),
            said_empty,
        ),
    }
}

/// A browse's registries, if it found any; `said_empty` as above.
fn found(
    browse: Result<Vec<Registry>>,
    where_: &str,
    said_empty: &mut bool,
) -> Option<Vec<Registry>> {
    match browse {
        Ok(list) if list.is_empty() => {
            if std::mem::replace(said_empty, true) {
                return None;
            }
            warn!(
                "NMOS: no v1.3 HTTP registry under {where_}; browsing again every {} s",
                REBROWSE_EMPTY.as_secs()
            );
            None
        }
        Ok(list) => {
            *said_empty = false;
            Some(list)
        }
        Err(e) => {
            warn!("NMOS: DNS-SD browse failed: {e:#}");
            None
        }
    }
}

/// Carries out one request, waiting at most `budget` for the answer;
/// the answer as the registrar's input.
fn send(agent: &ureq::Agent, req: &Request, budget: Nanos) -> Input {
    // Never 0, which ureq would read as no limit.
    let timeout = Duration::from_nanos(budget.0).max(Duration::from_millis(1));
    let result = match (req.method, &req.body) {
        (Method::Post, Some(body)) => agent
            .post(&req.url)
            .timeout(timeout)
            .set("Content-Type", "application/json")
            .send_string(body),
        // A heartbeat has no body, but says so (`Content-Length: 0`).
        (Method::Post, None) => agent.post(&req.url).timeout(timeout).send_bytes(&[]),
        (Method::Delete, _) => agent.delete(&req.url).timeout(timeout).call(),
    };
    match result {
        Ok(r) => Input::Response {
            request: req.id,
            status: r.status(),
        },
        Err(ureq::Error::Status(status, _)) => Input::Response {
            request: req.id,
            status,
        },
        Err(ureq::Error::Transport(_)) => Input::Failed { request: req.id },
    }
}

fn report(e: &Event) {
    match e {
        Event::Registered { registry } => {
            info!(%registry, "NMOS: registered with {registry}");
        }
        Event::FailedOver { from, to, reason } => {
            warn!(%from, %to, %reason, "NMOS: registry {from} failed ({reason}); moving to {to}");
        }
        Event::Reregistering { registry } => {
            warn!(%registry, "NMOS: {registry} lost the node; registering again");
        }
        Event::Refused { kind, id, status } => {
            warn!(
                %id, status,
                "NMOS: the registry refused {} {id} ({status})",
                kind.name()
            );
        }
        Event::Unreachable { reason } => {
            warn!(%reason, "NMOS: no registry answers (last: {reason}); trying again");
        }
        Event::Left {
            registry: Some(registry),
            remaining: 0,
        } => info!(%registry, "NMOS: deregistered from {registry}"),
        Event::Left {
            registry: Some(registry),
            remaining,
        } => warn!(
            %registry, remaining,
            "NMOS: deregistering from {registry} stopped with {remaining} resources left; \
             it will expire them"
        ),
        Event::Left { registry: None, .. } => {}
    }
}
