//! The fate of each stream packet: lost (random, Gilbert or scripted),
//! duplicated, held back to be overtaken, or passed on.

use std::collections::VecDeque;

use super::ImpairConfig;
use super::counters::ImpairCounters;
use crate::stats::SeqExtender;
use crate::units::Ssrc;

/// Streams whose packets are numbered at once; the one heard longest ago
/// makes room (and starts from 0 again if it comes back).
const STREAMS: usize = 16;

/// One stream's numbering: sequence numbers as its sender counts them,
/// and packet indices from its first packet.
#[derive(Debug)]
struct Numbering {
    ssrc: Option<Ssrc>,
    ext: SeqExtender,
    /// Extended and wire sequence number of its first packet.
    first: (u64, u64),
    /// Stream packets seen by the fate when it last had one.
    heard: u64,
}

/// SplitMix64: small, seedable, good enough for impairment draws.
#[derive(Debug, Clone)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let z = crate::splitmix::splitmix64(self.0);
        self.0 = self.0.wrapping_add(crate::splitmix::GAMMA);
        z
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
    streams: Vec<Numbering>,
    packets: u64,
    held: VecDeque<Held<T>>,
}

impl<T: Clone> Fate<T> {
    pub(super) fn new(seed: u64) -> Self {
        Fate {
            draws: Rng(seed),
            bad: false,
            in_loss_run: false,
            streams: Vec::new(),
            packets: 0,
            held: VecDeque::new(),
        }
    }

    pub(super) fn held(&self) -> usize {
        self.held.len()
    }

    /// Numbers one packet of stream `ssrc`: its sequence number as the
    /// sender counts it (the wire number, extended past 65535, as `nagare
    /// send` prints the first one) and its index from the stream's first
    /// packet (0).
    fn number(&mut self, ssrc: Option<Ssrc>, rtp_seq: u16) -> (u64, u64) {
        self.packets += 1;
        let k = match self.streams.iter().position(|n| n.ssrc == ssrc) {
            Some(k) => k,
            None => {
                if self.streams.len() == STREAMS
                    && let Some(old) = (0..STREAMS).min_by_key(|&k| self.streams[k].heard)
                {
                    self.streams.swap_remove(old);
                }
                let mut ext = SeqExtender::default();
                let first = ext.extend(rtp_seq, None);
                self.streams.push(Numbering {
                    ssrc,
                    ext,
                    first: (first, u64::from(rtp_seq)),
                    heard: 0,
                });
                self.streams.len() - 1
            }
        };
        let n = &mut self.streams[k];
        n.heard = self.packets;
        let ext = n.ext.extend(rtp_seq, None);
        let nth = ext.wrapping_sub(n.first.0);
        (n.first.1.wrapping_add(nth), nth)
    }

    /// Decides one stream packet; appends what leaves now to `out`, in
    /// sending order, as `(packet, len)`.
    pub(super) fn push(
        &mut self,
        cfg: &ImpairConfig,
        counters: &mut ImpairCounters,
        packet: T,
        len: usize,
        id: (Option<Ssrc>, u16),
        out: &mut Vec<(T, usize)>,
    ) {
        let (seq, nth) = self.number(id.0, id.1);
        let scripted = |abs: &std::collections::BTreeSet<u64>,
                        nths: &std::collections::BTreeSet<u64>| {
            abs.contains(&seq) || nths.contains(&nth)
        };
        // Always four draws per stream packet, used or not.
        let (d_loss, d_state, d_dup, d_reorder) = (
            self.draws.unit(),
            self.draws.unit(),
            self.draws.unit(),
            self.draws.unit(),
        );
        let drop = scripted(&cfg.drop_seq, &cfg.drop_nth);
        if self.lost(cfg, counters, drop, d_loss, d_state) {
            return;
        }
        let copies = if d_dup < cfg.duplicate || scripted(&cfg.duplicate_seq, &cfg.duplicate_nth) {
            2
        } else {
            1
        };
        if d_reorder < cfg.reorder || scripted(&cfg.reorder_seq, &cfg.reorder_nth) {
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

    /// Whether the packet (`scripted` to drop or not) is dropped,
    /// counting it under its cause.
    fn lost(
        &mut self,
        cfg: &ImpairConfig,
        counters: &mut ImpairCounters,
        scripted: bool,
        d_loss: f64,
        d_state: f64,
    ) -> bool {
        let mut drop = None;
        if scripted {
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
