//! What to do to the traffic, and the sequence-list syntax of scripts.

use std::collections::BTreeSet;

use crate::units::{BitRate, ByteSize, Nanos};

/// Why an impairment configuration or script was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum Error {
    /// A probability outside 0..=1.
    #[error("{what} probability {value} is outside 0..=1")]
    Probability {
        /// Which probability.
        what: Probability,
        /// The value given.
        value: f64,
    },
    /// A reorder gap of 0 or above 1000.
    #[error("reorder gap {0} is out of range 1..=1000")]
    ReorderGap(u64),
    /// Jitter larger than the delay it varies (a datagram cannot leave
    /// before it arrived).
    #[error("jitter {jitter} exceeds the delay {delay}; give a jitter at most the delay")]
    JitterAboveDelay {
        /// Jitter given.
        jitter: Nanos,
        /// Delay given.
        delay: Nanos,
    },
    /// A bottleneck rate of zero.
    #[error("a rate limit of 0 bit/s passes nothing; give a rate above 0")]
    ZeroRate,
    /// A queue cap too small to hold one datagram.
    #[error("queue limit {0} cannot hold one 64 KiB datagram; give at least 64 KiB")]
    QueueLimit(ByteSize),
    /// An item of a sequence list that is not `N` or `A-B` with `A <= B`.
    #[error("sequence list item {item} is not N or A-B with A <= B (like 5,10-14,100)")]
    SeqListItem {
        /// 1-based position of the bad item in the list.
        item: usize,
    },
    /// A sequence list naming more than [`MAX_SEQ_LIST`] numbers.
    #[error("sequence list names more than {MAX_SEQ_LIST} numbers")]
    SeqListTooLong,
}

/// The probabilities of an [`ImpairConfig`], to name them in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probability {
    /// Random loss.
    Loss,
    /// Reordering.
    Reorder,
    /// Duplication.
    Duplicate,
    /// Gilbert good-to-bad transition.
    GilbertGoodToBad,
    /// Gilbert bad-to-good transition.
    GilbertBadToGood,
}

impl std::fmt::Display for Probability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Probability::Loss => "loss",
            Probability::Reorder => "reorder",
            Probability::Duplicate => "duplicate",
            Probability::GilbertGoodToBad => "gilbert good-to-bad",
            Probability::GilbertBadToGood => "gilbert bad-to-good",
        })
    }
}

/// Default cap on the bytes held in the delay queue: a 2 s delay at
/// 1 Gbit/s would otherwise hold 250 MB.
pub const DEFAULT_QUEUE_LIMIT: ByteSize = ByteSize(64 << 20);

/// What to do to the traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairConfig {
    /// Probability that a stream packet is lost (in the good state).
    pub loss: f64,
    /// Gilbert model `(p_good_to_bad, p_bad_to_good)`: every packet in the
    /// bad state is lost; the mean loss run is `1 / p_bad_to_good`.
    pub gilbert: Option<(f64, f64)>,
    /// Probability that a stream packet is held back and sent after
    /// `reorder_gap` later ones.
    pub reorder: f64,
    /// How many later stream packets overtake a reordered one.
    pub reorder_gap: u64,
    /// Probability that a stream packet is sent twice.
    pub duplicate: f64,
    /// One-way delay added to every datagram.
    pub delay: Nanos,
    /// Delay varies uniformly within ± this (netem reorders with jitter
    /// too, when it exceeds the packet spacing).
    pub jitter: Nanos,
    /// Bottleneck rate (whole datagrams), if any.
    pub rate: Option<BitRate>,
    /// Longest queue behind the rate limit before datagrams are dropped.
    pub queue: Nanos,
    /// Most bytes waiting to depart (delay queue and rate queue together);
    /// datagrams beyond it are dropped and counted, so no delay at any
    /// rate can grow memory without bound.
    pub queue_limit: ByteSize,
    /// Stream sequence numbers always dropped.
    pub drop_seq: BTreeSet<u64>,
    /// Stream sequence numbers always reordered.
    pub reorder_seq: BTreeSet<u64>,
    /// Stream sequence numbers always duplicated.
    pub duplicate_seq: BTreeSet<u64>,
    /// Packets always dropped, by index from each stream's first packet
    /// (0), whatever sequence number its sender started at.
    pub drop_nth: BTreeSet<u64>,
    /// Packets always reordered, by index from each stream's first.
    pub reorder_nth: BTreeSet<u64>,
    /// Packets always duplicated, by index from each stream's first.
    pub duplicate_nth: BTreeSet<u64>,
    /// Seed of the random draws.
    pub seed: u64,
}

impl Default for ImpairConfig {
    /// Nothing impaired: no loss, no delay, a 100 ms rate queue, the
    /// default queue cap, reorder gap 3, seed 1.
    fn default() -> Self {
        ImpairConfig {
            loss: 0.0,
            gilbert: None,
            reorder: 0.0,
            reorder_gap: 3,
            duplicate: 0.0,
            delay: Nanos::ZERO,
            jitter: Nanos::ZERO,
            rate: None,
            queue: Nanos::from_millis(100),
            queue_limit: DEFAULT_QUEUE_LIMIT,
            drop_seq: BTreeSet::new(),
            reorder_seq: BTreeSet::new(),
            duplicate_seq: BTreeSet::new(),
            drop_nth: BTreeSet::new(),
            reorder_nth: BTreeSet::new(),
            duplicate_nth: BTreeSet::new(),
            seed: 1,
        }
    }
}

impl ImpairConfig {
    /// Checks probabilities, gaps and sizes.
    pub fn validate(&self) -> Result<(), Error> {
        let p = |value: f64, what| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(Error::Probability { what, value })
            }
        };
        p(self.loss, Probability::Loss)?;
        p(self.reorder, Probability::Reorder)?;
        p(self.duplicate, Probability::Duplicate)?;
        if let Some((gb, bg)) = self.gilbert {
            p(gb, Probability::GilbertGoodToBad)?;
            p(bg, Probability::GilbertBadToGood)?;
        }
        if self.reorder_gap == 0 || self.reorder_gap > 1000 {
            return Err(Error::ReorderGap(self.reorder_gap));
        }
        if self.jitter > self.delay {
            return Err(Error::JitterAboveDelay {
                jitter: self.jitter,
                delay: self.delay,
            });
        }
        if self.rate == Some(BitRate(0)) {
            return Err(Error::ZeroRate);
        }
        if self.queue_limit < ByteSize(65_536) {
            return Err(Error::QueueLimit(self.queue_limit));
        }
        Ok(())
    }
}

/// Most sequence numbers one list may name (keeps parsing bounded).
pub const MAX_SEQ_LIST: u64 = 1_000_000;

/// Parses `5,10-14,100` into a set of sequence numbers.
pub fn parse_seq_list(s: &str) -> Result<BTreeSet<u64>, Error> {
    let mut out = BTreeSet::new();
    let mut total = 0u64;
    let items = s.split(',').map(str::trim).filter(|p| !p.is_empty());
    for (i, part) in items.enumerate() {
        let bad = Error::SeqListItem { item: i + 1 };
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u64 = a.trim().parse().map_err(|_| bad)?;
        let b: u64 = b.trim().parse().map_err(|_| bad)?;
        if b < a {
            return Err(bad);
        }
        total = total.saturating_add(b - a).saturating_add(1);
        if total > MAX_SEQ_LIST {
            return Err(Error::SeqListTooLong);
        }
        out.extend(a..=b);
    }
    Ok(out)
}
