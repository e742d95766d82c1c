//! What the impairment model did, counted (shared by the machine and
//! the per-packet fate, so it lives in a leaf of its own).

use serde::{Deserialize, Serialize};

/// What the model did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImpairCounters {
    /// Datagrams that came in.
    pub received: u64,
    /// Of those, RTP stream packets (subject to loss/dup/reorder).
    pub stream: u64,
    /// Datagrams sent on (copies included).
    pub forwarded: u64,
    /// Dropped by random loss.
    pub dropped_random: u64,
    /// Dropped in the Gilbert bad state.
    pub dropped_gilbert: u64,
    /// Dropped by `drop_seq`.
    pub dropped_scripted: u64,
    /// Dropped because the rate-limit queue was full.
    pub dropped_queue: u64,
    /// Dropped because the bytes waiting to depart reached the queue cap.
    #[serde(default)]
    pub dropped_overflow: u64,
    /// Maximal runs of consecutive dropped stream packets.
    pub loss_episodes: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Held packets sent after at least one later stream packet.
    pub reordered: u64,
}

impl ImpairCounters {
    /// All drops of stream packets by the loss stages (queue drops are
    /// counted separately: they also hit non-stream datagrams).
    pub fn dropped(&self) -> u64 {
        self.dropped_random + self.dropped_gilbert + self.dropped_scripted
    }
}
