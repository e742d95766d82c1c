//! A seeded impairment model in the spirit of Linux netem: loss (random or
//! Gilbert two-state), scripted drops, duplication, reordering, delay with
//! jitter and a rate limit. `nagare impair` drives it with real datagrams;
//! tests drive it in memory with whatever stands for a packet.
//!
//! Loss, duplication and reordering act on RTP datagrams only (the stream
//! under test), with a fixed number of random draws per RTP packet, so the
//! fate of the n-th stream packet depends on the seed alone and not on
//! timing or on other traffic (echo probes, control) that shares the path.
//! Delay, jitter and the rate limit act on every datagram, like a link.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::Error;

/// What to do to the traffic.
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// One-way delay added to every datagram, ns.
    pub delay_ns: u64,
    /// Delay varies uniformly within ± this, ns (netem reorders with
    /// jitter too, when it exceeds the packet spacing).
    pub jitter_ns: u64,
    /// Bottleneck rate in bits per second (whole datagrams), if any.
    pub rate_bps: Option<u64>,
    /// Longest queue behind the rate limit before datagrams are dropped, ns.
    pub queue_ns: u64,
    /// Stream sequence numbers always dropped.
    pub drop_seq: BTreeSet<u64>,
    /// Stream sequence numbers always reordered.
    pub reorder_seq: BTreeSet<u64>,
    /// Stream sequence numbers always duplicated.
    pub duplicate_seq: BTreeSet<u64>,
    /// Seed of the random draws.
    pub seed: u64,
}

impl ImpairConfig {
    /// Checks probabilities and sizes.
    pub fn validate(&self) -> Result<(), Error> {
        let p = |v: f64, what| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::Impairment(what))
            }
        };
        p(self.loss, "loss probability (0..=1)")?;
        p(self.reorder, "reorder probability (0..=1)")?;
        p(self.duplicate, "duplicate probability (0..=1)")?;
        if let Some((gb, bg)) = self.gilbert {
            p(gb, "gilbert good-to-bad probability (0..=1)")?;
            p(bg, "gilbert bad-to-good probability (0..=1)")?;
        }
        if self.reorder_gap == 0 || self.reorder_gap > 1000 {
            return Err(Error::Impairment("reorder gap (1..=1000)"));
        }
        if self.jitter_ns > self.delay_ns {
            return Err(Error::Impairment("jitter (at most the delay)"));
        }
        if self.rate_bps == Some(0) {
            return Err(Error::Impairment("rate (above 0)"));
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
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let bad = Error::Impairment("sequence list (like 5,10-14,100)");
        let a: u64 = a.trim().parse().map_err(|_| bad)?;
        let b: u64 = b.trim().parse().map_err(|_| bad)?;
        if b < a {
            return Err(bad);
        }
        total = total.saturating_add(b - a).saturating_add(1);
        if total > MAX_SEQ_LIST {
            return Err(Error::Impairment("sequence list (at most 1000000 numbers)"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

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

/// SplitMix64: small, seedable, good enough for impairment draws.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
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

/// The impairment model; `T` is whatever stands for a datagram.
#[derive(Debug)]
pub struct Impairment<T> {
    cfg: ImpairConfig,
    fate: Rng,
    timing: Rng,
    bad: bool,
    in_loss_run: bool,
    seq: crate::stats::SeqExtender,
    first: Option<(u64, u64)>,
    held: VecDeque<Held<T>>,
    link_free_ns: u64,
    counters: ImpairCounters,
}

impl<T: Clone> Impairment<T> {
    /// A model of `cfg` (validate it first).
    pub fn new(cfg: ImpairConfig) -> Self {
        let seed = cfg.seed;
        Impairment {
            cfg,
            fate: Rng(seed),
            timing: Rng(seed ^ 0x005e_ed0f_7141_e000),
            bad: false,
            in_loss_run: false,
            seq: crate::stats::SeqExtender::default(),
            first: None,
            held: VecDeque::new(),
            link_free_ns: 0,
            counters: ImpairCounters::default(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> ImpairCounters {
        self.counters
    }

    /// Datagrams held for reordering.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// One datagram of `len` bytes arrives at `now_ns`; `rtp_seq` is its
    /// RTP sequence number when it is a stream packet. Appends to `out`
    /// every datagram to send, with its departure time, in sending order.
    pub fn push(
        &mut self,
        now_ns: u64,
        packet: T,
        len: usize,
        rtp_seq: Option<u16>,
        out: &mut Vec<(u64, T)>,
    ) {
        self.counters.received += 1;
        let Some(raw) = rtp_seq else {
            self.emit(now_ns, packet, len, out);
            return;
        };
        self.counters.stream += 1;
        let ext = self.seq.extend(raw, None);
        let (first_ext, first_raw) = *self.first.get_or_insert((ext, u64::from(raw)));
        // Sequence numbers as the sender counts them (assuming it starts
        // below 32768), so `drop_seq` can name them.
        let seq = (ext + first_raw).wrapping_sub(first_ext);
        // Always four draws per stream packet, used or not.
        let (d_loss, d_state, d_dup, d_reorder) = (
            self.fate.unit(),
            self.fate.unit(),
            self.fate.unit(),
            self.fate.unit(),
        );
        let mut drop = None;
        if self.cfg.drop_seq.contains(&seq) {
            drop = Some(&mut self.counters.dropped_scripted);
        }
        if let Some((gb, bg)) = self.cfg.gilbert {
            self.bad = if self.bad {
                d_state >= bg
            } else {
                d_state < gb
            };
            if self.bad && drop.is_none() {
                drop = Some(&mut self.counters.dropped_gilbert);
            }
        }
        if drop.is_none() && !self.bad && d_loss < self.cfg.loss {
            drop = Some(&mut self.counters.dropped_random);
        }
        if let Some(counter) = drop {
            *counter += 1;
            if !self.in_loss_run {
                self.counters.loss_episodes += 1;
            }
            self.in_loss_run = true;
            return;
        }
        self.in_loss_run = false;
        let copies = if d_dup < self.cfg.duplicate || self.cfg.duplicate_seq.contains(&seq) {
            2
        } else {
            1
        };
        if d_reorder < self.cfg.reorder || self.cfg.reorder_seq.contains(&seq) {
            self.held.push_back(Held {
                packet,
                len,
                copies,
                seq,
                overtaken: 0,
            });
            return;
        }
        for _ in 0..copies {
            self.emit(now_ns, packet.clone(), len, out);
        }
        self.counters.duplicated += u64::from(copies) - 1;
        for h in &mut self.held {
            if seq > h.seq {
                h.overtaken += 1;
            }
        }
        while self
            .held
            .front()
            .is_some_and(|h| h.overtaken >= self.cfg.reorder_gap)
        {
            if let Some(h) = self.held.pop_front() {
                self.release(now_ns, h, out);
            }
        }
    }

    /// Sends everything still held (end of stream, or the stream paused):
    /// a held packet that nothing overtook goes out in order.
    pub fn flush(&mut self, now_ns: u64, out: &mut Vec<(u64, T)>) {
        while let Some(h) = self.held.pop_front() {
            self.release(now_ns, h, out);
        }
    }

    fn release(&mut self, now_ns: u64, h: Held<T>, out: &mut Vec<(u64, T)>) {
        if h.overtaken > 0 {
            self.counters.reordered += 1;
        }
        self.counters.duplicated += u64::from(h.copies) - 1;
        for _ in 0..h.copies {
            self.emit(now_ns, h.packet.clone(), h.len, out);
        }
    }

    fn emit(&mut self, now_ns: u64, packet: T, len: usize, out: &mut Vec<(u64, T)>) {
        let mut at = now_ns;
        if let Some(rate) = self.cfg.rate_bps {
            let start = self.link_free_ns.max(now_ns);
            if start - now_ns > self.cfg.queue_ns {
                self.counters.dropped_queue += 1;
                return;
            }
            let tx = (len as u128 * 8 * 1_000_000_000 / u128::from(rate)) as u64;
            self.link_free_ns = start + tx;
            at = self.link_free_ns;
        }
        let j = self.cfg.jitter_ns as f64;
        let jitter = if j > 0.0 {
            ((self.timing.unit() * 2.0 - 1.0) * j) as i64
        } else {
            0
        };
        at = (at + self.cfg.delay_ns).saturating_add_signed(jitter);
        self.counters.forwarded += 1;
        out.push((at, packet));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::TestParams;
    use crate::probe::analysis::{Arrival, analyze};

    fn run(cfg: ImpairConfig, n: u64) -> (Vec<(u64, u64)>, ImpairCounters) {
        cfg.validate().unwrap();
        let mut m = Impairment::new(cfg);
        let mut out = Vec::new();
        for s in 0..n {
            m.push(s * 10_000, s, 1000, Some(s as u16), &mut out);
        }
        m.flush(n * 10_000, &mut out);
        (out, m.counters())
    }

    fn report(out: &[(u64, u64)], n: u64) -> crate::probe::analysis::ReceiverReport {
        // 100 000 packets a second for at least a second: the schedule must
        // hold all n packets,
        // since analyze never counts more sent than the schedule holds.
        let p = TestParams {
            rate_bps: 800_000_000,
            duration_ms: n.div_ceil(100).max(1000),
            packet_size: 1000,
            fps: None,
            reverse: false,
            records: false,
            playout_us: 1_000_000,
            burst_threshold: 5,
            burst_us: crate::probe::DEFAULT_BURST_US,
            interval_ms: 1000,
        };
        let s = p.validate().unwrap();
        // Delivered in departure order (stable for ties).
        let mut sorted: Vec<(usize, &(u64, u64))> = out.iter().enumerate().collect();
        sorted.sort_by_key(|(i, (at, _))| (*at, *i));
        let a: Vec<Arrival> = sorted
            .iter()
            .map(|(_, (at, seq))| Arrival {
                seq: *seq,
                send_ns: seq * 10_000,
                recv_ns: *at,
            })
            .collect();
        analyze(&a, n, &p, &s)
    }

    fn cfg() -> ImpairConfig {
        ImpairConfig {
            reorder_gap: 3,
            queue_ns: 100_000_000,
            seed: 1,
            ..ImpairConfig::default()
        }
    }

    #[test]
    fn scripted_drops_reorders_duplicates_are_exact() {
        let c = ImpairConfig {
            drop_seq: parse_seq_list("10, 20-25, 40-44,70").unwrap(),
            reorder_seq: parse_seq_list("50,80").unwrap(),
            duplicate_seq: parse_seq_list("60,61").unwrap(),
            ..cfg()
        };
        let (out, k) = run(c, 100);
        assert_eq!(k.dropped_scripted, 13);
        assert_eq!(k.loss_episodes, 4);
        assert_eq!((k.reordered, k.duplicated), (2, 2));
        let r = report(&out, 100);
        assert_eq!(r.lost, 13);
        assert_eq!(r.loss_episodes, 4);
        assert_eq!(r.burst_losses, 2); // 20-25 and 40-44
        assert_eq!(
            (r.reordered, r.order_errors, r.reorder_max_extent),
            (2, 2, 3)
        );
        assert_eq!(r.duplicates, 2);
        // 16-bit wrap: scripted numbers past 65535 still match.
        let c = ImpairConfig {
            drop_seq: parse_seq_list("70000").unwrap(),
            ..cfg()
        };
        let (_, k) = run(c, 70_010);
        assert_eq!(k.dropped_scripted, 1);
    }

    #[test]
    fn one_percent_loss_over_100k_packets() {
        // Binomial: sd = sqrt(1e5 × 0.01 × 0.99) ≈ 31.5 packets; 4 sd.
        for seed in [1, 2, 3] {
            let (out, k) = run(
                ImpairConfig {
                    loss: 0.01,
                    seed,
                    ..cfg()
                },
                100_000,
            );
            let r = report(&out, 100_000);
            assert_eq!(r.lost, k.dropped());
            assert_eq!(r.loss_episodes, k.loss_episodes);
            assert!(
                (r.lost as i64 - 1000).abs() < 126,
                "seed {seed}: {}",
                r.lost
            );
        }
    }

    #[test]
    fn random_mix_is_counted_exactly() {
        let mix = ImpairConfig {
            loss: 0.02,
            duplicate: 0.01,
            reorder: 0.01,
            gilbert: Some((0.001, 0.3)),
            seed: 42,
            ..cfg()
        };
        let (out, k) = run(mix.clone(), 50_000);
        let r = report(&out, 50_000);
        assert_eq!(r.lost, k.dropped());
        assert_eq!(r.loss_episodes, k.loss_episodes);
        assert_eq!(r.duplicates, k.duplicated);
        assert_eq!(r.reordered, k.reordered);
        assert!(k.dropped_gilbert > 0 && k.reordered > 0 && k.duplicated > 0);
        // Same seed, same fate.
        let again = run(mix, 50_000);
        assert_eq!(again.1, k);
    }

    #[test]
    fn gilbert_mean_burst_length() {
        let (out, k) = run(
            ImpairConfig {
                gilbert: Some((0.01, 0.25)),
                ..cfg()
            },
            200_000,
        );
        let r = report(&out, 200_000);
        // Mean bad-state run 1/0.25 = 4; stationary loss 0.01/0.26 ≈ 3.85%.
        assert!(
            (r.loss_episode_mean - 4.0).abs() < 0.3,
            "{}",
            r.loss_episode_mean
        );
        assert!((r.loss_rate - 0.0385).abs() < 0.004, "{}", r.loss_rate);
        assert_eq!(r.lost, k.dropped_gilbert);
    }

    #[test]
    fn delay_and_jitter_give_the_matching_pdv() {
        // 5 ms ± 1 ms uniform: PDV = D − Dmin spans 0..2 ms, median 1 ms.
        let (out, _) = run(
            ImpairConfig {
                delay_ns: 5_000_000,
                jitter_ns: 1_000_000,
                ..cfg()
            },
            100_000,
        );
        let r = report(&out, 100_000);
        assert!((r.pdv_ms.p50 - 1.0).abs() < 0.02, "{:?}", r.pdv_ms);
        assert!((r.pdv_ms.p99 - 1.98).abs() < 0.02, "{:?}", r.pdv_ms);
        assert!(r.pdv_ms.max <= 2.0 && r.pdv_ms.max > 1.99, "{:?}", r.pdv_ms);
        // Jitter larger than the 10 us spacing reorders, as netem does.
        assert!(r.reordered > 0);
        assert_eq!(r.lost, 0);
    }

    #[test]
    fn rate_limit_queues_then_drops() {
        // 1000-byte packets every 10 us = 800 Mbit/s into a 400 Mbit/s link
        // with a 1 ms queue: about half get through.
        let (out, k) = run(
            ImpairConfig {
                rate_bps: Some(400_000_000),
                queue_ns: 1_000_000,
                ..cfg()
            },
            10_000,
        );
        assert!(k.dropped_queue > 4900 && k.dropped_queue < 5100, "{k:?}");
        let last = out.iter().map(|(at, _)| *at).max().unwrap();
        assert!(last <= 10_000 * 10_000 + 1_000_000 + 20_000);
    }

    #[test]
    fn non_stream_datagrams_are_only_delayed() {
        let mut m: Impairment<u8> = Impairment::new(ImpairConfig {
            loss: 1.0,
            delay_ns: 7,
            ..cfg()
        });
        let mut out = Vec::new();
        m.push(100, 1, 10, None, &mut out);
        m.push(100, 2, 10, Some(0), &mut out);
        assert_eq!(out, vec![(107, 1)]);
    }

    #[test]
    fn bad_configs_and_lists() {
        assert!(ImpairConfig { loss: 1.5, ..cfg() }.validate().is_err());
        assert!(
            ImpairConfig {
                jitter_ns: 2,
                delay_ns: 1,
                ..cfg()
            }
            .validate()
            .is_err()
        );
        assert!(parse_seq_list("5-3").is_err());
        assert!(parse_seq_list("x").is_err());
        assert!(parse_seq_list("0-99999999999").is_err());
        assert_eq!(parse_seq_list("").unwrap().len(), 0);
    }

    #[test]
    fn seq_list_of_every_u64_is_refused_not_overflowed() {
        // Found by the seq_list fuzz target: b - a + 1 overflowed.
        assert!(parse_seq_list("0-18446744073709551615").is_err());
        let top = parse_seq_list("18446744073709551615-18446744073709551615").unwrap();
        assert_eq!(top.into_iter().collect::<Vec<_>>(), [u64::MAX]);
    }
}
