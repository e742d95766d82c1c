//! What a node's answer to a poll says about this cluster: which stripes
//! it sends, which of its legs failed and why, and which stripes it holds
//! any stream of at all.

use super::{Path, label};

/// One stripe as a node reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StripeStatus {
    /// The stripe.
    pub stripe: usize,
    /// Packets sent so far.
    pub packets: u64,
    /// Frame slots given up because the node's read-ahead ring was empty.
    pub underruns: u64,
    /// Which of the stripe's addresses it sends to.
    pub path: Path,
}

/// A leg the node reports failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedLeg {
    /// The stripe.
    pub stripe: usize,
    /// The node's reason.
    pub reason: String,
}

/// A node's answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeStatus {
    /// The stripes it is sending.
    pub stripes: Vec<StripeStatus>,
    /// Its legs that failed, with the node's reason.
    pub failed: Vec<FailedLeg>,
    /// Every stripe it has a stream of, in any state (ascending, once
    /// each): what `stop` must remove there.
    pub held: Vec<usize>,
    /// Its clock minus the controller's, when it said its time.
    pub clock_offset_ns: Option<i64>,
}

/// One stream of a node's table, as much as the controller reads of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed<'a> {
    /// Its label (see [`label`]), if it has one.
    pub label: Option<&'a str>,
    /// Whether it is set up or playing (not paused, finished or failed).
    pub live: bool,
    /// The node's reason when it failed. A driver passes it only for a
    /// leg it made or took over in this run: an old run's failed entry
    /// left in the table is no failure of this one.
    pub failure: Option<&'a str>,
    /// Packets sent so far.
    pub packets: u64,
    /// Frame slots given up with an empty read-ahead ring.
    pub underruns: u64,
    /// Which of the stripe's addresses it sends to.
    pub path: Path,
}

impl NodeStatus {
    /// What a node's stream `table` says about cluster `name` of `stripes`
    /// stripes: every live stream of one of its stripes that has sent a
    /// packet (one waiting for its first frame is not sending yet), in
    /// table order; every failed one with its reason; every stripe with
    /// any stream. Streams of anybody else are ignored.
    pub fn from_table<'a>(
        name: &str,
        stripes: usize,
        table: impl IntoIterator<Item = Listed<'a>>,
        clock_offset_ns: Option<i64>,
    ) -> NodeStatus {
        let mut status = NodeStatus {
            clock_offset_ns,
            ..NodeStatus::default()
        };
        for s in table {
            let Some(stripe) = s.label.and_then(|l| label::stripe_of(name, stripes, l)) else {
                continue;
            };
            if let Err(at) = status.held.binary_search(&stripe) {
                status.held.insert(at, stripe);
            }
            if let Some(reason) = s.failure {
                status.failed.push(FailedLeg {
                    stripe,
                    reason: reason.to_string(),
                });
            } else if s.live && s.packets > 0 {
                status.stripes.push(StripeStatus {
                    stripe,
                    packets: s.packets,
                    underruns: s.underruns,
                    path: s.path,
                });
            }
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(
        label: &'static str,
        live: bool,
        failure: Option<&'static str>,
        packets: u64,
    ) -> Listed<'static> {
        Listed {
            label: Some(label),
            live,
            failure,
            packets,
            underruns: 0,
            path: Path::Main,
        }
    }

    #[test]
    fn a_table_says_what_is_sent_what_failed_and_what_is_held() {
        let table = [
            listed("wall/stripe 2", true, None, 10),
            listed("wall/stripe 0", true, None, 0),
            listed("wall/stripe 1", false, Some("opening 'clip.yuv': gone"), 0),
            listed("wall/stripe 3", false, None, 50),
            listed("other/stripe 1", true, None, 10),
            Listed {
                label: None,
                ..listed("", true, None, 10)
            },
        ];
        let s = NodeStatus::from_table("wall", 4, table, Some(-5));
        assert_eq!(s.stripes.len(), 1);
        assert_eq!((s.stripes[0].stripe, s.stripes[0].packets), (2, 10));
        assert_eq!(
            s.failed,
            vec![FailedLeg {
                stripe: 1,
                reason: "opening 'clip.yuv': gone".into()
            }]
        );
        assert_eq!(s.held, vec![0, 1, 2, 3]);
        assert_eq!(s.clock_offset_ns, Some(-5));
    }
}
