//! NMOS IS-04 and IS-05 drivers shared by every nagare node (`serve`'s
//! senders, `recv --nmos`'s receiver): the node id kept in the state
//! directory ([`identity`]), the host's facts a node names ([`host`]),
//! the `/x-nmos/` entry and the Node API ([`api`]), the Connection API's
//! routes ([`connection_api`]) over a node's [`Connections`], the answer
//! form ([`reply`]), a small HTTP listener for a process that has no
//! other ([`http`]), and registration with a registry found by
//! `--registry` or unicast DNS-SD ([`register`], [`dns`]). Every decision
//! is nagare-proto's `nmos`; these modules read files, the clock and the
//! interfaces, and move HTTP and DNS bytes.
//!
//! [`Connections`]: connection_api::Connections

pub(crate) mod api;
pub(crate) mod connection_api;
pub(crate) mod dns;
pub(crate) mod host;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod register;
pub(crate) mod reply;

use std::net::{IpAddr, SocketAddr};

use anyhow::{Result, anyhow, bail};
use nagare_proto::nmos::TaiTime;

/// The current time in TAI, as IS-05 times and IS-04 versions are
/// written.
pub(crate) fn tai_now() -> TaiTime {
    TaiTime::from_utc_ns(crate::clock::epoch_ns())
}

/// `--registry URL`: `http://HOST:PORT` (the Registration API path is
/// appended), kept without a trailing slash.
pub(crate) fn parse_registry_url(text: &str) -> Result<String> {
    let t = text.trim().trim_end_matches('/');
    let Some(rest) = t.strip_prefix("http://") else {
        if t.starts_with("https://") {
            bail!(
                "--registry '{text}': nagare speaks plain HTTP to registries; give http://HOST:PORT"
            );
        }
        bail!("--registry '{text}' is not a URL: give http://HOST:PORT, e.g. http://10.0.0.5:8235");
    };
    if rest.is_empty() || (rest.contains('/') && !rest.ends_with("/x-nmos")) {
        bail!("--registry '{text}': give the registry's base, http://HOST:PORT, without a path");
    }
    Ok(t.trim_end_matches("/x-nmos").to_string())
}

/// `--nmos-dns ADDR[:PORT]`, port 53 by default.
pub(crate) fn parse_dns_server(text: &str) -> Result<SocketAddr> {
    let t = text.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    t.trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| {
            anyhow!(
                "--nmos-dns '{text}': give the DNS server's address, e.g. 10.0.0.2 or 10.0.0.2:5353"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_urls_and_dns_servers_parse() {
        assert_eq!(
            parse_registry_url("http://127.0.0.1:8235/").unwrap(),
            "http://127.0.0.1:8235"
        );
        assert_eq!(
            parse_registry_url("http://r:80/x-nmos").unwrap(),
            "http://r:80"
        );
        assert!(
            parse_registry_url("https://r")
                .unwrap_err()
                .to_string()
                .contains("plain HTTP")
        );
        assert!(parse_registry_url("r:80").is_err());
        assert!(parse_registry_url("http://r:80/a/b").is_err());
        assert_eq!(parse_dns_server("10.0.0.2").unwrap().port(), 53);
        assert_eq!(parse_dns_server("127.0.0.1:5353").unwrap().port(), 5353);
        assert!(parse_dns_server("dns.example").is_err());
    }
}
