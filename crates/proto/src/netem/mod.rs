//! A seeded impairment model in the spirit of Linux netem: loss (random or
//! Gilbert two-state), scripted drops, duplication, reordering, delay with
//! jitter and a rate limit. [`Netem`] is a sans-IO machine that owns its
//! delay queue: `nagare impair` feeds it real datagrams and sends what it
//! releases; simulations feed it whatever stands for a packet on virtual
//! time.
//!
//! Loss, duplication and reordering act on RTP datagrams only (the stream
//! under test), with a fixed number of random draws per RTP packet, so the
//! fate of the n-th stream packet depends on the seed alone and not on
//! timing or on other traffic (echo probes, control) that shares the path.
//! Delay, jitter, the rate limit and the queue cap act on every datagram,
//! like a link.
//!
//! # Polling order
//!
//! The driver sends every [`Netem::poll_transmit`]`(now)` (the datagrams
//! whose time has come), waits for a datagram until
//! [`Netem::poll_timeout`], and feeds each one it reads to
//! [`Netem::handle_input`]`(now, ..)`. Netem has no events: what it did
//! is in its counters.

mod config;
mod counters;
mod fate;

use std::cmp::Ordering;
use std::collections::BinaryHeap;

pub use config::{
    DEFAULT_QUEUE_LIMIT, Error, ImpairConfig, MAX_SEQ_LIST, Probability, parse_seq_list,
};
pub use counters::ImpairCounters;
use fate::{Fate, Rng};

use crate::units::{ByteSize, Nanos, Ssrc};

/// Held (reordered) packets leave when the stream pauses this long, so a
/// stream's last packets are never held forever.
pub const FLUSH_IDLE: Nanos = Nanos::from_millis(50);

/// The RTP sequence number of `datagram` when it belongs to the stream
/// under test (a valid RTP version 2 packet), for
/// [`Netem::handle_input`]; `None` for everything else on the path
/// (probe echoes, control traffic), which is only delayed.
pub fn stream_seq(datagram: &[u8]) -> Option<u16> {
    stream_packet(datagram).map(|(_, seq)| seq)
}

/// The SSRC and RTP sequence number of `datagram` when it is a valid RTP
/// packet, for [`Netem::handle_rtp`].
pub fn stream_packet(datagram: &[u8]) -> Option<(Ssrc, u16)> {
    crate::rtp::RtpPacket::new_checked(datagram)
        .ok()
        .map(|p| (Ssrc(p.ssrc()), p.sequence_number()))
}

/// A datagram waiting for its departure time.
#[derive(Debug)]
struct Departure<T> {
    at: Nanos,
    // Arrival order breaks ties, so equal times keep their order.
    order: u64,
    len: usize,
    packet: T,
}

impl<T> PartialEq for Departure<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl<T> Eq for Departure<T> {}

impl<T> PartialOrd for Departure<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Departure<T> {
    // Reversed: BinaryHeap is a max-heap and the earliest must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// The impairment machine; `T` is whatever stands for a datagram.
///
/// `handle_input` takes each arriving datagram, `poll_transmit` hands out
/// those whose departure time has come (earliest first), `poll_timeout`
/// says when to call again.
#[derive(Debug)]
pub struct Netem<T> {
    cfg: ImpairConfig,
    fate: Fate<T>,
    timing: Rng,
    link_free: Nanos,
    queue: BinaryHeap<Departure<T>>,
    order: u64,
    queued: u64,
    last_stream: Nanos,
    counters: ImpairCounters,
    released: Vec<(T, usize)>,
}

impl<T: Clone> Netem<T> {
    /// A machine for `cfg` (validate it first).
    pub fn new(cfg: ImpairConfig) -> Self {
        let seed = cfg.seed;
        Netem {
            cfg,
            fate: Fate::new(seed),
            timing: Rng(seed ^ 0x005e_ed0f_7141_e000),
            link_free: Nanos::ZERO,
            queue: BinaryHeap::new(),
            order: 0,
            queued: 0,
            last_stream: Nanos::ZERO,
            counters: ImpairCounters::default(),
            released: Vec::new(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> ImpairCounters {
        self.counters
    }

    /// Stream packets held back to be overtaken.
    pub fn held(&self) -> usize {
        self.fate.held()
    }

    /// Bytes waiting for their departure time.
    pub fn queued(&self) -> ByteSize {
        ByteSize(self.queued)
    }

    /// One datagram of `len` bytes arrives at `now`; `rtp_seq` is its RTP
    /// sequence number when it belongs to the stream under test.
    pub fn handle_input(&mut self, now: Nanos, packet: T, len: usize, rtp_seq: Option<u16>) {
        self.handle(now, packet, len, rtp_seq.map(|q| (None, q)));
    }

    /// Like [`Netem::handle_input`], for datagrams of several RTP streams:
    /// each SSRC is numbered on its own, so `drop_nth` counts from each
    /// stream's first packet.
    pub fn handle_rtp(&mut self, now: Nanos, packet: T, len: usize, rtp: Option<(Ssrc, u16)>) {
        self.handle(now, packet, len, rtp.map(|(s, q)| (Some(s), q)));
    }

    fn handle(&mut self, now: Nanos, packet: T, len: usize, id: Option<(Option<Ssrc>, u16)>) {
        self.counters.received += 1;
        let Some(id) = id else {
            self.depart(now, packet, len);
            return;
        };
        self.counters.stream += 1;
        self.last_stream = now;
        let mut released = std::mem::take(&mut self.released);
        self.fate.push(
            &self.cfg,
            &mut self.counters,
            packet,
            len,
            id,
            &mut released,
        );
        for (p, l) in released.drain(..) {
            self.depart(now, p, l);
        }
        self.released = released;
    }

    /// The next datagram due at `now`, earliest first; `None` when none
    /// is due yet (see [`Netem::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<T> {
        if self.fate.held() > 0 && now >= self.last_stream.saturating_add(FLUSH_IDLE) {
            self.flush(now);
        }
        if self.queue.peek()?.at > now {
            return None;
        }
        let d = self.queue.pop()?;
        self.queued -= d.len as u64;
        Some(d.packet)
    }

    /// When something next becomes due: a departure, or the moment held
    /// packets are let go because the stream paused.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let departure = self.queue.peek().map(|d| d.at);
        let idle = (self.fate.held() > 0).then(|| self.last_stream.saturating_add(FLUSH_IDLE));
        match (departure, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The stream ended: held packets leave now, in order, through the
    /// link (they still take the delay).
    pub fn flush(&mut self, now: Nanos) {
        let mut released = std::mem::take(&mut self.released);
        self.fate.flush(&mut self.counters, &mut released);
        for (p, l) in released.drain(..) {
            self.depart(now, p, l);
        }
        self.released = released;
    }

    /// Everything still waiting, in departure order, regardless of time
    /// (a relay shutting down sends it all at once).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queued = 0;
        std::iter::from_fn(move || self.queue.pop().map(|d| d.packet))
    }

    /// Puts a datagram on the link: rate limit, queue cap, delay, jitter.
    fn depart(&mut self, now: Nanos, packet: T, len: usize) {
        if self.queued + len as u64 > self.cfg.queue_limit.bytes() {
            self.counters.dropped_overflow += 1;
            return;
        }
        let mut at = now;
        if let Some(rate) = self.cfg.rate {
            let start = self.link_free.max(now);
            if start - now > self.cfg.queue {
                self.counters.dropped_queue += 1;
                return;
            }
            self.link_free = start + rate.time_for(ByteSize::of_len(len));
            at = self.link_free;
        }
        let j = self.cfg.jitter.as_nanos() as f64;
        let jitter = if j > 0.0 {
            ((self.timing.unit() * 2.0 - 1.0) * j) as i64
        } else {
            0
        };
        let at = Nanos(
            (at + self.cfg.delay)
                .as_nanos()
                .saturating_add_signed(jitter),
        );
        self.counters.forwarded += 1;
        self.queued += len as u64;
        self.queue.push(Departure {
            at,
            order: self.order,
            len,
            packet,
        });
        self.order += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Nanos;
    use crate::probe::{Arrival, TestParams, analyze};

    /// Hands out everything due up to `until`, stamped with the virtual
    /// time it left at.
    fn drain_until<T: Clone>(m: &mut Netem<T>, until: Nanos, out: &mut Vec<(u64, T)>) {
        while let Some(at) = m.poll_timeout().filter(|&at| at <= until) {
            while let Some(p) = m.poll_transmit(at) {
                out.push((at.as_nanos(), p));
            }
        }
    }

    /// `n` 1000-byte stream packets, one every 10 µs, through the machine
    /// on virtual time.
    fn run(cfg: ImpairConfig, n: u64) -> (Vec<(u64, u64)>, ImpairCounters) {
        cfg.validate().unwrap();
        let mut m = Netem::new(cfg);
        let mut out = Vec::new();
        for s in 0..n {
            let now = Nanos(s * 10_000);
            drain_until(&mut m, now, &mut out);
            m.handle_input(now, s, 1000, Some(s as u16));
        }
        m.flush(Nanos(n * 10_000));
        drain_until(&mut m, Nanos::MAX, &mut out);
        assert_eq!(m.queued(), ByteSize(0));
        (out, m.counters())
    }

    fn report(out: &[(u64, u64)], n: u64) -> crate::probe::ReceiverReport {
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
            streams: 1,
            bidir: false,
        };
        let s = p.validate().unwrap();
        // Delivered in departure order (stable for ties).
        let mut sorted: Vec<(usize, &(u64, u64))> = out.iter().enumerate().collect();
        sorted.sort_by_key(|(i, (at, _))| (*at, *i));
        let a: Vec<Arrival> = sorted
            .iter()
            .map(|(_, (at, seq))| Arrival {
                seq: *seq,
                sent_at: Nanos(seq * 10_000),
                received_at: Nanos(*at),
            })
            .collect();
        analyze(&a, n, &p, &s)
    }

    fn cfg() -> ImpairConfig {
        ImpairConfig::default()
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
                delay: Nanos::from_millis(5),
                jitter: Nanos::from_millis(1),
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
                rate: Some(crate::units::BitRate(400_000_000)),
                queue: Nanos::from_millis(1),
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
        let mut m: Netem<u8> = Netem::new(ImpairConfig {
            loss: 1.0,
            delay: Nanos(7),
            ..cfg()
        });
        m.handle_input(Nanos(100), 1, 10, None);
        m.handle_input(Nanos(100), 2, 10, Some(0));
        assert_eq!(m.poll_timeout(), Some(Nanos(107)));
        assert_eq!(m.poll_transmit(Nanos(106)), None);
        assert_eq!(m.poll_transmit(Nanos(107)), Some(1));
        assert_eq!(m.poll_transmit(Nanos(107)), None);
        assert_eq!(m.poll_timeout(), None);
    }

    #[test]
    fn bad_configs_and_lists() {
        assert!(ImpairConfig { loss: 1.5, ..cfg() }.validate().is_err());
        assert!(
            ImpairConfig {
                jitter: Nanos(2),
                delay: Nanos(1),
                ..cfg()
            }
            .validate()
            .is_err()
        );
        assert_eq!(
            ImpairConfig { loss: 1.5, ..cfg() }
                .validate()
                .unwrap_err()
                .to_string(),
            "loss probability 1.5 is outside 0..=1"
        );
        assert_eq!(parse_seq_list("1,x"), Err(Error::SeqListItem { item: 2 }));
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

    #[test]
    fn nth_counts_from_each_streams_first_packet_and_seq_is_absolute() {
        let mut m: Netem<(u32, u16)> = Netem::new(ImpairConfig {
            drop_nth: parse_seq_list("1,3").unwrap(),
            drop_seq: parse_seq_list("40002").unwrap(),
            ..cfg()
        });
        // Two senders starting at random sequence numbers, interleaved.
        for k in 0..5u16 {
            for (ssrc, first) in [(7u32, 40_000u16), (9, 65_534)] {
                let seq = first.wrapping_add(k);
                m.handle_rtp(Nanos(0), (ssrc, k), 100, Some((Ssrc(ssrc), seq)));
            }
        }
        let mut left: Vec<(u32, u16)> = std::iter::from_fn(|| m.poll_transmit(Nanos(0))).collect();
        left.sort_unstable();
        assert_eq!(left, [(7, 0), (7, 4), (9, 0), (9, 2), (9, 4)]);
        assert_eq!(m.counters().dropped_scripted, 5);
    }

    #[test]
    fn held_packets_leave_when_the_stream_pauses() {
        let mut m: Netem<u64> = Netem::new(ImpairConfig {
            reorder_seq: parse_seq_list("1").unwrap(),
            ..cfg()
        });
        m.handle_input(Nanos(0), 0, 100, Some(0));
        m.handle_input(Nanos(10), 1, 100, Some(1));
        assert_eq!(m.held(), 1);
        assert_eq!(m.poll_transmit(Nanos(10)), Some(0));
        // Nothing overtakes it, so it leaves after the idle time, in order
        // and not counted as reordered.
        assert_eq!(m.poll_timeout(), Some(Nanos(10) + FLUSH_IDLE));
        assert_eq!(m.poll_transmit(Nanos(10) + FLUSH_IDLE), Some(1));
        assert_eq!(m.counters().reordered, 0);
        assert_eq!(m.poll_timeout(), None);
    }

    #[test]
    fn delay_queue_is_capped_in_bytes() {
        // 1 Gbit/s of 8000-byte datagrams into a 2 s delay: without a cap
        // the queue would reach 250 MB; with 1 MiB it holds 131 of them.
        let mut m: Netem<()> = Netem::new(ImpairConfig {
            delay: Nanos::from_secs(2),
            queue_limit: ByteSize(1 << 20),
            ..cfg()
        });
        for i in 0..10_000u64 {
            m.handle_input(Nanos(i * 64_000), (), 8000, None);
            assert!(m.queued() <= ByteSize(1 << 20));
        }
        let k = m.counters();
        assert_eq!(k.forwarded, 131);
        assert_eq!(k.dropped_overflow, 10_000 - 131);
        assert_eq!(m.drain().count(), 131);
        assert_eq!(m.queued(), ByteSize(0));
    }
}
