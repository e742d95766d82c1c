//! The registration driver: a thread that feeds nagare-proto's
//! `nmos::Registrar` the registries (`--registry`, or a DNS-SD browse),
//! the node's resources (read again every second, so a started or
//! stopped push stream is re-POSTed within one), the HTTP answers and
//! the time, and carries out its requests with ureq.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

use nagare_proto::Nanos;
use nagare_proto::nmos::Registry;
use nagare_proto::nmos::registration::{Config, Event, Input, Method, Registrar, Request};

use crate::cmd::serve::hub::server::Server;
use crate::cmd::serve::nmos::dns;

/// How resources are read again for changes.
const REFRESH: Duration = Duration::from_secs(1);
/// How often a DNS-SD browse is repeated: often while it finds nothing
/// (a registry coming up is found within seconds), seldom once it has
/// (a new one of better priority is still noticed).
const REBROWSE_EMPTY: Duration = Duration::from_secs(5);
const REBROWSE: Duration = Duration::from_secs(30);

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
}

/// Registers the node until the server stops.
pub(crate) fn run(server: Arc<Server>, source: Source) {
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
    while !server.stopping() {
        if Instant::now() >= next_browse {
            next_browse = Instant::now() + REBROWSE_EMPTY;
            if let Some(list) = registries(&source, &mut said_empty) {
                next_browse = Instant::now() + REBROWSE;
                reg.handle_input(now(), Input::Discovered(list));
            }
        }
        if Instant::now() >= next_refresh {
            next_refresh = Instant::now() + REFRESH;
            let all = server.nmos.resources(&server.media, &server.table.infos());
            reg.handle_input(now(), Input::Resources(all));
        }
        if reg.poll_timeout().is_some_and(|t| now() >= t) {
            reg.handle_input(now(), Input::Timer);
        }
        while let Some(req) = reg.poll_transmit(now()) {
            let answer = send(&agent, &req);
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
        Source::DnsSd { server, domain } => match dns::browse(*server, domain) {
            Ok(list) if list.is_empty() => {
                if std::mem::replace(said_empty, true) {
                    return None;
                }
                warn!(
                    "NMOS: no v1.3 HTTP registry under _nmos-register._tcp.{domain} \
                     at --nmos-dns {server}; browsing again every {} s",
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
        },
    }
}

/// Carries out one request; the answer as the registrar's input.
fn send(agent: &ureq::Agent, req: &Request) -> Input {
    let result = match (req.method, &req.body) {
        (Method::Post, Some(body)) => agent
            .post(&req.url)
            .set("Content-Type", "application/json")
            .send_string(body),
        // A heartbeat has no body, but says so (`Content-Length: 0`).
        (Method::Post, None) => agent.post(&req.url).send_bytes(&[]),
        (Method::Delete, _) => agent.delete(&req.url).call(),
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
    }
}
