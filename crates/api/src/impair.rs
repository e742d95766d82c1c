//! `nagare impair --json`: what the relay did.

use nagare_proto::netem::ImpairCounters;
use serde::{Deserialize, Serialize};

/// The relay's counters when it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// What the impairment model did (flattened into this object).
    #[serde(flatten)]
    pub counters: ImpairCounters,
    /// Stream packets dropped by the loss stages (random, Gilbert,
    /// scripted); queue and overflow drops are counted apart.
    pub dropped: u64,
    /// Datagrams relayed back from upstream to the client.
    pub replies: u64,
    /// TCP connections forwarded (`--tcp`).
    pub tcp_connections: u64,
}
