//! The fate of each stream packet: lost (random, Gilbert or scripted),
//! duplicated, held back to be overtaken, or passed on.

use std::collections::VecDeque;

use super::{ImpairConfig, ImpairCounters};
use crate::stats::SeqExtender;

/// SplitMix64: small, seedable, good enough for impairment draws.
#[derive(Debug, Clone)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug)]
struct Held<T> {
    packet: T,
    len: usize,
    copies: u8,
    seq: u64,
    // Stream packets forwarded since it was held.
    overtaken: u64,
}

/// Loss, duplication and reordering of stream packets, with a fixed
/// number of draws per packet so the n-th packet's fate depends on the
/// seed alone.
#[derive(Debug)]
pub(super) struct Fate<T> {
    draws: Rng,
    bad: bool,
    in_loss_run: bool,
    seq: SeqExtender,
    first: Option<(u64, u64)>,
    held: VecDeque<Held<T>>,
}

impl<T: Clone> Fate<T> {
    pub(super) fn new(seed: u64) -> Self {
        Fate {
            draws: Rng(seed),
            bad: false,
            in_loss_run: false,
            seq: SeqExtender::default(),
            first: None,
            held: VecDeque::new(),
        }
    }

    pub(super) fn held(&self) -> usize {
        self.held.len()
    }

    /// Decides one stream packet; appends what leaves now to `out`, in
    /// sending order, as `(packet, len)`.
    pub(super) fn push(
        &mut self,
        cfg: &ImpairConfig,
        counters: &mut ImpairCounters,
        packet: T,
        len: usize,
        rtp_seq: u16,
        out: &mut Vec<(T, usize)>,
    ) {
        let ext = self.seq.extend(rtp_seq, None);
        let (first_ext, first_raw) = *self.first.get_or_insert((ext, u64::from(rtp_seq)));
        // Sequence numbers as the sender counts them (assuming it starts
        // below 32768), so `drop_seq` can name them.
        let seq = (ext + first_raw).wrapping_sub(first_ext);
        // Always four draws per stream packet, used or not.
        let (d_loss, d_state, d_dup, d_reorder) = (
            self.draws.unit(),
            self.draws.unit(),
            self.draws.unit(),
            self.draws.unit(),
        );
        if self.lost(cfg, counters, seq, d_loss, d_state) {
            return;
        }
        let copies = if d_dup < cfg.duplicate || cfg.duplicate_seq.contains(&seq) {
            2
        } else {
            1
        };
        if d_reorder < cfg.reorder || cfg.reorder_seq.contains(&seq) {
            self.held.push_back(Held {
                packet,
                len,
                copies,
                seq,
                overtaken: 0,
            });
            return;
        }
        counters.duplicated += u64::from(copies) - 1;
        for _ in 0..copies {
            out.push((packet.clone(), len));
        }
        for h in &mut self.held {
            if seq > h.seq {
                h.overtaken += 1;
            }
        }
        while self
            .held
            .front()
            .is_some_and(|h| h.overtaken >= cfg.reorder_gap)
        {
            if let Some(h) = self.held.pop_front() {
                Self::release(counters, h, out);
            }
        }
    }

    /// Whether packet `seq` is dropped, counting it under its cause.
    fn lost(
        &mut self,
        cfg: &ImpairConfig,
        counters: &mut ImpairCounters,
        seq: u64,
        d_loss: f64,
        d_state: f64,
    ) -> bool {
        let mut drop = None;
        if cfg.drop_seq.contains(&seq) {
            drop = Some(&mut counters.dropped_scripted);
        }
        if let Some((gb, bg)) = cfg.gilbert {
            self.bad = if self.bad {
                d_state >= bg
            } else {
                d_state < gb
            };
            if self.bad && drop.is_none() {
                drop = Some(&mut counters.dropped_gilbert);
            }
        }
        if drop.is_none() && !self.bad && d_loss < cfg.loss {
            drop = Some(&mut counters.dropped_random);
        }
        let Some(counter) = drop else {
            self.in_loss_run = false;
            return false;
        };
        *counter += 1;
        if !self.in_loss_run {
            counters.loss_episodes += 1;
        }
        self.in_loss_run = true;
        true
    }

    /// Lets everything held go, in order (the stream paused or ended): a
    /// held packet that nothing overtook is not counted as reordered.
    pub(super) fn flush(&mut self, counters: &mut ImpairCounters, out: &mut Vec<(T, usize)>) {
        while let Some(h) = self.held.pop_front() {
            Self::release(counters, h, out);
        }
    }

    fn release(counters: &mut ImpairCounters, h: Held<T>, out: &mut Vec<(T, usize)>) {
        if h.overtaken > 0 {
            counters.reordered += 1;
        }
        counters.duplicated += u64::from(h.copies) - 1;
        for _ in 0..h.copies {
            out.push((h.packet.clone(), h.len));
        }
    }
}
