//! SMPTE ST 2022-7 seamless protection: two legs carry the same RTP
//! stream (same SSRC, sequence numbers and timestamps, e.g. `a=group:DUP`
//! in the SDP, or a stripe being moved between nodes); the receiver keeps
//! the first copy of every packet and drops the second.
//!
//! [`Merger`] sits in front of a [`super::Receiver`]: every datagram of
//! either leg goes through [`Merger::handle_input`], and only those whose
//! verdict ([`Merger::poll_event`]) is [`Arrival::First`] go on. It keeps, per sequence number, which
//! legs delivered it for as long as a copy may still come (the
//! path-differential tolerance, in packets: at least two frame periods of
//! the stream), then classifies it exactly:
//! - delivered by one leg only: the other leg lost it and this one
//!   *recovered* it;
//! - delivered by neither: *unrecovered* (lost on both paths).
//!
//! A leg's losses count only inside the span it was seen carrying
//! (from its first to its newest packet), so a hot standby that joins late,
//! or a primary that stops after a planned move, is not charged with the
//! packets from before it started or after it stopped.
//!
//! Sequence numbers of both legs are extended by one shared
//! [`SeqExtender`] (with the RFC 4175 ESN when the sender fills it), so a
//! leg running behind still names the same packets.
//!
//! # Polling order
//!
//! For every datagram of any leg the driver calls
//! [`Merger::handle_input`]`(now, `[`Input::Datagram`]`)`, then takes its
//! verdict from [`Merger::poll_event`] before the next datagram, and
//! hands the datagram to the receiver only on [`Arrival::First`]. The
//! merger sends nothing and sets no timer: there is no `poll_transmit`
//! or `poll_timeout`. At the end, [`Merger::finish`] settles the window.

use serde::{Deserialize, Serialize};

use super::Error;
use crate::rtcp::Reception;
use crate::rtp::RtpPacket;
use crate::stats::SeqExtender;
use crate::units::Nanos;

/// Legs a merger takes (ST 2022-7 has two; more cost nothing here).
pub const MAX_LEGS: usize = 4;

/// One input of the merger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    /// A datagram of `leg` as it came off the wire: its RTP sequence
    /// number and RFC 4175 ESN decide. A datagram too short to be RTP
    /// passes as [`Arrival::First`] so the receiver behind counts it
    /// malformed, as it would without a second leg.
    Datagram {
        /// The leg it came on (beyond the configured count: the last).
        leg: usize,
        /// The UDP payload.
        bytes: &'a [u8],
    },
    /// A packet already parsed: its RTP sequence number and, when the
    /// payload carries one, the RFC 4175 extended sequence number's high
    /// half.
    Packet {
        /// The leg it came on (beyond the configured count: the last).
        leg: usize,
        /// RTP sequence number.
        seq: u16,
        /// RFC 4175 ESN (high half of the extended sequence number).
        esn: Option<u16>,
    },
}

/// The merger's event: the verdict on the last input, what to do with
/// that datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first copy: pass it on.
    First,
    /// The packet already came on another leg (or twice on this one).
    Duplicate,
    /// Older than the tolerance window: too late to use.
    TooLate,
}

/// Counters of one leg.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegCounters {
    /// Packets that came on this leg (copies included).
    pub received: u64,
    /// Packets of its span this leg never delivered.
    pub lost: u64,
    /// Packets this leg delivered after the other leg had (dropped).
    pub duplicates: u64,
    /// Packets only this leg delivered: losses of the other leg it made
    /// good.
    pub recovered: u64,
    /// Packets that came too late to use.
    pub late: u64,
}

/// What the merger saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeCounters {
    /// Per leg, in leg order.
    pub legs: Vec<LegCounters>,
    /// Distinct packets passed on.
    pub forwarded: u64,
    /// Packets of the stream that neither leg delivered.
    pub unrecovered: u64,
}

/// The merge machine (see the module docs).
#[derive(Debug, Clone)]
pub struct Merger {
    ext: SeqExtender,
    /// Bit `l` of slot `seq % window`: leg `l` delivered `seq`.
    seen: Vec<u8>,
    window: u64,
    /// Newest extended sequence number of any leg.
    highest: Option<u64>,
    /// Everything below this has been classified.
    settled: u64,
    /// First and newest sequence number each leg carried.
    spans: Vec<Option<(u64, u64)>>,
    counters: MergeCounters,
    /// The verdict on the last input, until polled.
    verdict: Option<Arrival>,
}

impl Merger {
    /// A merger of `legs` legs (clamped to 1..=[`MAX_LEGS`]) that waits
    /// for a second copy until `window` newer packets have arrived
    /// (clamped to 16..=2^22; give at least two frame periods' worth).
    pub fn new(legs: usize, window: u64) -> Merger {
        let legs = legs.clamp(1, MAX_LEGS);
        let window = window.clamp(16, 1 << 22);
        Merger {
            ext: SeqExtender::default(),
            seen: vec![0; window as usize],
            window,
            highest: None,
            settled: 0,
            spans: vec![None; legs],
            verdict: None,
            counters: MergeCounters {
                legs: vec![LegCounters::default(); legs],
                ..MergeCounters::default()
            },
        }
    }

    /// One datagram or packet at `now`; its verdict waits in
    /// [`Merger::poll_event`] (a verdict not polled before the next input
    /// is replaced: the merger holds one, so it never grows). Every input
    /// is taken: a leg beyond the configured count counts as the last, and
    /// bytes that are not RTP pass on. The `Result` is the verb set's.
    pub fn handle_input(&mut self, _now: Nanos, input: Input<'_>) -> Result<(), Error> {
        let verdict = match input {
            Input::Datagram { leg, bytes } => self.arrival_of_datagram(leg, bytes),
            Input::Packet { leg, seq, esn } => self.arrival(leg, seq, esn),
        };
        self.verdict = Some(verdict);
        Ok(())
    }

    /// The verdict on the last input, once.
    pub fn poll_event(&mut self) -> Option<Arrival> {
        self.verdict.take()
    }

    /// Classifies one packet of `leg` by its extended sequence number.
    fn arrival(&mut self, leg: usize, seq: u16, esn: Option<u16>) -> Arrival {
        let leg = leg.min(self.spans.len() - 1);
        let s = self.ext.extend(seq, esn);
        self.counters.legs[leg].received += 1;
        let highest = match self.highest {
            None => {
                self.settled = s;
                s
            }
            Some(h) => h.max(s),
        };
        if s < self.settled || highest - s >= self.window {
            self.counters.legs[leg].late += 1;
            return Arrival::TooLate;
        }
        let span = self.spans[leg].get_or_insert((s, s));
        span.0 = span.0.min(s);
        span.1 = span.1.max(s);
        self.advance(highest);
        let slot = &mut self.seen[(s % self.window) as usize];
        let bit = 1u8 << leg;
        if *slot != 0 {
            *slot |= bit;
            self.counters.legs[leg].duplicates += 1;
            return Arrival::Duplicate;
        }
        *slot |= bit;
        self.counters.forwarded += 1;
        Arrival::First
    }

    /// Reads a datagram's sequence number and ESN (see [`Input::Datagram`]).
    fn arrival_of_datagram(&mut self, leg: usize, bytes: &[u8]) -> Arrival {
        let Ok(pkt) = RtpPacket::new_checked(bytes) else {
            return Arrival::First;
        };
        let esn = pkt
            .payload()
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]));
        self.arrival(leg, pkt.sequence_number(), esn)
    }

    /// Classifies every sequence number that falls out of the window when
    /// the newest becomes `highest`.
    fn advance(&mut self, highest: u64) {
        self.highest = Some(highest);
        let keep_from = (highest + 1).saturating_sub(self.window);
        // A jump of more than a window classifies at most one window's
        // worth of slots; the rest were never seen by anyone.
        if keep_from > self.settled + self.window {
            let skipped = keep_from - self.window - self.settled;
            self.charge_unseen(self.settled, skipped);
            self.settled = keep_from - self.window;
        }
        while self.settled < keep_from {
            self.classify(self.settled);
            self.settled += 1;
        }
    }

    /// `count` sequence numbers from `first` that no leg delivered.
    fn charge_unseen(&mut self, first: u64, count: u64) {
        self.counters.unrecovered += count;
        for (leg, span) in self.spans.iter().enumerate() {
            if let Some((a, b)) = *span {
                let lo = first.max(a);
                let hi = (first + count).min(b + 1);
                self.counters.legs[leg].lost += hi.saturating_sub(lo);
            }
        }
    }

    fn classify(&mut self, s: u64) {
        let slot = std::mem::take(&mut self.seen[(s % self.window) as usize]);
        if slot == 0 {
            self.charge_unseen(s, 1);
            return;
        }
        let only_one = slot.count_ones() == 1;
        for (leg, span) in self.spans.iter().enumerate() {
            let delivered = slot & (1 << leg) != 0;
            let in_span = span.is_some_and(|(a, b)| (a..=b).contains(&s));
            if delivered && only_one && self.spans.len() > 1 {
                // Only this leg had it: a loss of the others made good,
                // if any other leg was carrying the stream then.
                let others_active = self
                    .spans
                    .iter()
                    .enumerate()
                    .any(|(o, sp)| o != leg && sp.is_some_and(|(a, b)| (a..=b).contains(&s)));
                if others_active {
                    self.counters.legs[leg].recovered += 1;
                }
            }
            if !delivered && in_span {
                self.counters.legs[leg].lost += 1;
            }
        }
    }

    /// The stream ended: classifies everything still in the window.
    pub fn finish(&mut self) {
        if let Some(h) = self.highest {
            while self.settled <= h {
                self.classify(self.settled);
                self.settled += 1;
            }
        }
    }

    /// Counters so far (packets still inside the window are not yet
    /// classified as lost or recovered; see [`Merger::finish`]).
    pub fn counters(&self) -> &MergeCounters {
        &self.counters
    }

    /// What leg `leg` received of the stream, for a receiver report to
    /// that leg's sender (each leg is an RTP session of its own, with its
    /// own RTCP port): `merged`, the reception of the stream behind the
    /// merger, with the leg's own packets and losses (those settled so
    /// far), so each path's sender learns that path's loss. Its highest
    /// sequence number and jitter stay the stream's: the merger keeps
    /// neither per leg. `merged` as it is for a leg the merger lacks.
    pub fn reception(&self, leg: usize, merged: Reception) -> Reception {
        match self.counters.legs.get(leg) {
            Some(l) => Reception {
                received: l.received,
                lost: l.lost,
                ..merged
            },
            None => merged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one parsed packet and takes its verdict.
    fn packet(m: &mut Merger, leg: usize, seq: u16, esn: Option<u16>) -> Arrival {
        m.handle_input(Nanos::ZERO, Input::Packet { leg, seq, esn })
            .unwrap();
        m.poll_event().unwrap()
    }

    /// Feeds one datagram and takes its verdict.
    fn datagram(m: &mut Merger, leg: usize, bytes: &[u8]) -> Arrival {
        m.handle_input(Nanos::ZERO, Input::Datagram { leg, bytes })
            .unwrap();
        m.poll_event().unwrap()
    }

    /// Sends packets `0..n` (16-bit numbers from `start`) on both legs,
    /// leg A first, dropping those each leg's filter refuses.
    fn run(
        n: u16,
        start: u16,
        a: impl Fn(u16) -> bool,
        b: impl Fn(u16) -> bool,
    ) -> (MergeCounters, Vec<u16>) {
        let mut m = Merger::new(2, 64);
        let mut out = Vec::new();
        for i in 0..n {
            let seq = start.wrapping_add(i);
            for (leg, keep) in [(0, a(i)), (1, b(i))] {
                if keep && packet(&mut m, leg, seq, None) == Arrival::First {
                    out.push(i);
                }
            }
        }
        m.finish();
        (m.counters().clone(), out)
    }

    #[test]
    fn each_leg_reports_its_own_packets_and_losses() {
        let mut m = Merger::new(2, 8);
        // Leg A loses 3 and 4, leg B loses 6; both carry 0..20.
        for seq in 0..20u16 {
            for (leg, lost) in [(0, [3, 4].contains(&seq)), (1, seq == 6)] {
                if !lost {
                    packet(&mut m, leg, seq, None);
                }
            }
        }
        m.finish();
        let merged = Reception {
            source: crate::units::Ssrc(7),
            highest_seq: 19,
            received: 20,
            lost: 0,
            jitter: 12,
        };
        let a = m.reception(0, merged);
        let b = m.reception(1, merged);
        assert_eq!((a.received, a.lost), (18, 2));
        assert_eq!((b.received, b.lost), (19, 1));
        // The stream's own, on both legs.
        assert_eq!((a.source, a.highest_seq, a.jitter), (merged.source, 19, 12));
        assert_eq!((b.source, b.highest_seq, b.jitter), (merged.source, 19, 12));
        assert_eq!(m.reception(2, merged), merged);
    }

    #[test]
    fn disjoint_losses_give_a_complete_stream() {
        // Leg A loses 10, 11, 12 and 40; leg B loses 20 and 41..=44.
        let a_lost = [10, 11, 12, 40];
        let b_lost = [20, 41, 42, 43, 44];
        let (c, out) = run(
            100,
            65_500,
            |i| !a_lost.contains(&i),
            |i| !b_lost.contains(&i),
        );
        assert_eq!(out, (0..100).collect::<Vec<_>>());
        assert_eq!(c.forwarded, 100);
        assert_eq!(c.unrecovered, 0);
        // Hand-computed: A delivered 96, B 95; every packet both had is a
        // duplicate on B (A arrives first), except the 4 A lost which B
        // recovered; A recovered B's 5.
        let (la, lb) = (c.legs[0], c.legs[1]);
        assert_eq!(
            (la.received, la.lost, la.duplicates, la.recovered),
            (96, 4, 0, 5)
        );
        assert_eq!(
            (lb.received, lb.lost, lb.duplicates, lb.recovered),
            (95, 5, 91, 4)
        );
    }

    #[test]
    fn datagrams_are_judged_by_their_rtp_numbers() {
        let f = crate::video::VideoFormat::new(8, 2, crate::video::PixelFormat::Uyvy422).unwrap();
        let p = crate::video::Packetizer::new(f, 40, crate::units::Ssrc(7)).unwrap();
        let pk = p
            .frame_packets(
                &[0u8; 32],
                crate::units::ExtSeq(0x2_fffe),
                crate::units::MediaTime(0),
            )
            .unwrap();
        let mut m = Merger::new(2, 64);
        assert_eq!(datagram(&mut m, 0, &pk[0]), Arrival::First);
        assert_eq!(datagram(&mut m, 1, &pk[0]), Arrival::Duplicate);
        assert_eq!(datagram(&mut m, 1, b"junk"), Arrival::First);
        assert_eq!(m.counters().legs[1].received, 1);
    }

    #[test]
    fn common_losses_are_unrecovered() {
        let (c, out) = run(50, 7, |i| i != 30 && i != 31, |i| i != 31);
        assert_eq!(c.unrecovered, 1);
        assert_eq!(out.len(), 49);
        assert_eq!((c.legs[0].lost, c.legs[1].lost), (2, 1));
        assert_eq!(c.legs[1].recovered, 1);
    }

    #[test]
    fn a_late_standby_and_a_stopped_primary_are_not_charged() {
        // B joins at 20; A stops after 60: a hitless move.
        let (c, out) = run(100, 0, |i| i <= 60, |i| i >= 20);
        assert_eq!(out.len(), 100);
        assert_eq!((c.unrecovered, c.legs[0].lost, c.legs[1].lost), (0, 0, 0));
        assert_eq!((c.legs[0].recovered, c.legs[1].recovered), (0, 0));
    }

    #[test]
    fn a_leg_behind_by_less_than_the_window_still_merges() {
        // Leg B runs 40 packets behind leg A and has what A lost.
        let mut m = Merger::new(2, 64);
        let mut first = 0;
        for i in 0..200u16 {
            if i % 10 != 3 && packet(&mut m, 0, i, None) == Arrival::First {
                first += 1;
            }
            if i >= 40 && packet(&mut m, 1, i - 40, None) == Arrival::First {
                first += 1;
            }
        }
        for i in 160..200u16 {
            if packet(&mut m, 1, i, None) == Arrival::First {
                first += 1;
            }
        }
        m.finish();
        assert_eq!(first, 200);
        assert_eq!(m.counters().unrecovered, 0);
        assert_eq!(m.counters().legs[1].recovered, 20);
        // Beyond the window a copy is too late.
        assert_eq!(packet(&mut m, 1, 0, None), Arrival::TooLate);
    }

    #[test]
    fn each_verdict_is_polled_once_and_never_piles_up() {
        let mut m = Merger::new(2, 64);
        assert_eq!(m.poll_event(), None, "no input, no verdict");
        for seq in 0..1000 {
            m.handle_input(
                Nanos::ZERO,
                Input::Packet {
                    leg: 0,
                    seq,
                    esn: None,
                },
            )
            .unwrap();
        }
        // Only the last input's verdict is held.
        assert_eq!(m.poll_event(), Some(Arrival::First));
        assert_eq!(m.poll_event(), None);
        assert_eq!(m.counters().forwarded, 1000);
    }

    #[test]
    fn hostile_jumps_stay_bounded() {
        let mut m = Merger::new(2, 1 << 30);
        assert_eq!(packet(&mut m, 0, 0, Some(1)), Arrival::First);
        assert_eq!(packet(&mut m, 0, 0, Some(0x4001)), Arrival::First);
        // A leg number beyond the count is the last leg.
        packet(&mut m, 7, 5, None);
        assert_eq!(m.counters().legs[1].received, 1);
        m.finish();
        // Everything between leg 0's two packets was never seen: charged
        // to leg 0, whose span covers it. Leg 1's packet landed 5 past the
        // newest, and the 4 between are unrecovered but nobody's span.
        let c = m.counters();
        assert_eq!(c.legs[0].lost, (1 << 30) - 1);
        assert_eq!(c.unrecovered, c.legs[0].lost + 4);
        assert_eq!(c.forwarded, 3);
    }
}
