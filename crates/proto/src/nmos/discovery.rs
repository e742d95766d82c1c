//! Unicast DNS-SD for the registry (IS-04 "Discovery: Registered
//! Operation"): the queries to send and what the answers mean.
//!
//! A browse asks `PTR _nmos-register._tcp.DOMAIN` for the instances, then
//! `SRV` and `TXT` of each instance, then `A` of each SRV target, unless
//! the server already put them in the answer's additional records. The
//! driver sends [`Discovery::queries`] until it is [`Discovery::complete`]
//! (or out of rounds), feeding each answer to [`Discovery::absorb`]; the
//! registries come out of [`Discovery::registries`] in priority order.
//!
//! The DNS wire format is simple-dns's: a small maintained codec with no
//! dependencies and no I/O of its own, so the parsing stays here,
//! sans-IO and fuzzed (`fuzz_targets/nmos_dns.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use simple_dns::rdata::RData;
use simple_dns::{CLASS, Name, Packet, Question, TYPE};

use super::registration::Registry;
use super::resource::API_VERSION;

/// The service type of IS-04 registries (v1.3 names it `nmos-register`).
pub const SERVICE: &str = "_nmos-register._tcp";

/// What a DNS answer could not be read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a DNS message.
    #[error("not a DNS message: {0}")]
    Malformed(String),
    /// A name that DNS cannot carry.
    #[error("'{0}' is not a DNS name")]
    BadName(String),
}

/// One record type asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ask {
    /// Instances of the service.
    Ptr,
    /// Target and port of an instance.
    Srv,
    /// Attributes of an instance.
    Txt,
    /// IPv4 address of a target.
    A,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Srv {
    target: String,
    port: u16,
}

/// What the answers so far tell (names lower-case, without the final dot).
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    domain: String,
    instances: BTreeSet<String>,
    srv: BTreeMap<String, Srv>,
    txt: BTreeMap<String, BTreeMap<String, String>>,
    addresses: BTreeMap<String, IpAddr>,
    asked: BTreeSet<(String, Ask)>,
}

fn clean(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Discovery {
    /// A browse in `domain` (e.g. `example.com`).
    pub fn new(domain: &str) -> Discovery {
        Discovery {
            domain: clean(domain),
            ..Discovery::default()
        }
    }

    /// The service name browsed (`_nmos-register._tcp.DOMAIN`).
    pub fn service_name(&self) -> String {
        format!("{SERVICE}.{}", self.domain)
    }

    /// The questions still open, each asked once: the PTR first, then the
    /// SRV and TXT of instances and the A of targets not yet answered.
    pub fn queries(&mut self) -> Vec<(String, Ask)> {
        let mut want = vec![(self.service_name(), Ask::Ptr)];
        for i in &self.instances {
            if !self.srv.contains_key(i) {
                want.push((i.clone(), Ask::Srv));
            }
            if !self.txt.contains_key(i) {
                want.push((i.clone(), Ask::Txt));
            }
        }
        for s in self.srv.values() {
            let literal = s.target.parse::<IpAddr>().is_ok();
            if !literal && !self.addresses.contains_key(&s.target) {
                want.push((s.target.clone(), Ask::A));
            }
        }
        want.retain(|q| self.asked.insert(q.clone()));
        want
    }

    /// Whether every instance found has its SRV, TXT and address.
    pub fn complete(&self) -> bool {
        self.instances.iter().all(|i| {
            self.txt.contains_key(i)
                && self.srv.get(i).is_some_and(|s| {
                    s.target.parse::<IpAddr>().is_ok() || self.addresses.contains_key(&s.target)
                })
        })
    }

    /// Takes every PTR, SRV, TXT and A record of one answer, from any
    /// section.
    pub fn absorb(&mut self, answer: &[u8]) -> Result<(), Error> {
        let packet = Packet::parse(answer).map_err(|e| Error::Malformed(e.to_string()))?;
        let service = self.service_name();
        let records = packet
            .answers
            .iter()
            .chain(&packet.additional_records)
            .chain(&packet.name_servers);
        for rr in records {
            let name = clean(&rr.name.to_string());
            match &rr.rdata {
                RData::PTR(p) if name == service => {
                    self.instances.insert(clean(&p.0.to_string()));
                }
                RData::SRV(s) => {
                    let target = clean(&s.target.to_string());
                    self.srv.insert(
                        name,
                        Srv {
                            target,
                            port: s.port,
                        },
                    );
                }
                RData::TXT(t) => {
                    let attrs = t
                        .attributes()
                        .into_iter()
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.unwrap_or_default()))
                        .collect();
                    self.txt.insert(name, attrs);
                }
                RData::A(a) => {
                    self.addresses
                        .insert(name, IpAddr::from(a.address.to_be_bytes()));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The registries found that speak v1.3 over plain HTTP without
    /// authorization, best `pri` first (ties by name, for a stable order).
    pub fn registries(&self) -> Vec<Registry> {
        let mut out: Vec<(u32, String, Registry)> = Vec::new();
        for i in &self.instances {
            let (Some(srv), Some(txt)) = (self.srv.get(i), self.txt.get(i)) else {
                continue;
            };
            let proto = txt.get("api_proto").map_or("http", String::as_str);
            let auth = txt.get("api_auth").is_some_and(|v| v == "true");
            let versions = txt.get("api_ver").map_or("", String::as_str);
            if proto != "http" || auth || !versions.split(',').any(|v| v.trim() == API_VERSION) {
                continue;
            }
            let priority = txt
                .get("pri")
                .and_then(|p| p.parse().ok())
                .unwrap_or(u32::MAX);
            let host = match (
                srv.target.parse::<IpAddr>(),
                self.addresses.get(&srv.target),
            ) {
                (Ok(ip), _) | (_, Some(&ip)) => ip.to_string(),
                _ => continue,
            };
            let base = format!("http://{}", super::model::host_port(&host, srv.port));
            out.push((priority, i.clone(), Registry { base, priority }));
        }
        out.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        out.into_iter().map(|(_, _, r)| r).collect()
    }
}

/// A recursive-desired DNS query for `name`'s `ask` records, with
/// message id `id`.
pub fn query(id: u16, name: &str, ask: Ask) -> Result<Vec<u8>, Error> {
    let qname = Name::new(name).map_err(|_| Error::BadName(name.to_string()))?;
    let qtype = match ask {
        Ask::Ptr => TYPE::PTR,
        Ask::Srv => TYPE::SRV,
        Ask::Txt => TYPE::TXT,
        Ask::A => TYPE::A,
    };
    let mut packet = Packet::new_query(id);
    packet.set_flags(simple_dns::PacketFlag::RECURSION_DESIRED);
    packet
        .questions
        .push(Question::new(qname, qtype.into(), CLASS::IN.into(), false));
    packet
        .build_bytes_vec()
        .map_err(|e| Error::Malformed(e.to_string()))
}
