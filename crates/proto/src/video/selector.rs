//! Which SSRC on a port is the stream, and when a new one takes over.
//!
//! The first SSRC heard is not trusted: one stray or spoofed datagram
//! must not capture a receiver. A source becomes the stream once it
//! behaves like one: [`PROBATION`] packets in a row with consecutive
//! sequence numbers (the caller has already checked each is valid RFC
//! 4175 for the format), from the allowed source address when there is
//! one. Its packets are held meanwhile and handed back on the lock, so
//! nothing of the real stream is lost to the wait.
//!
//! Once locked, another SSRC that behaves like a stream is held (bounded
//! in bytes) until it is clear what it is: a *takeover* once the stream
//! has been silent for [`SelectorConfig::silence`] (a restarted sender),
//! or an *intruder* when the stream talks again (two senders at once).
//! A takeover is followed as a new take with [`SelectorConfig::follow`]
//! (its held packets replayed), else reported so the driver can stop; an
//! intruder is reported and its packets counted as foreign. Either way
//! nothing is thrown away silently ([`Selector::poll_rival`]).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use crate::units::{Nanos, Ssrc};

/// Packets in a row with consecutive sequence numbers that make a source
/// a stream (RFC 3550's MIN_SEQUENTIAL is 2; one more resists a spoofer
/// who sends a pair).
pub const PROBATION: u32 = 3;

/// Sources on probation at once; the one heard longest ago makes room.
const CANDIDATES: usize = 4;

/// How a [`Selector`] chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorConfig {
    /// Only datagrams from this address can be the stream (an SDP's
    /// source filter, or `--source`).
    pub source: Option<IpAddr>,
    /// How long the stream must be silent before another takes over.
    pub silence: Nanos,
    /// Follow a takeover as a new take instead of reporting it.
    pub follow: bool,
    /// Bytes held per source on probation (the newest are kept): enough
    /// for the packets of a restarted sender that arrive while the old
    /// stream's silence is still being timed.
    pub held_bytes: usize,
}

impl Default for SelectorConfig {
    fn default() -> Self {
        SelectorConfig {
            source: None,
            silence: Nanos::from_millis(100),
            follow: false,
            held_bytes: 1 << 20,
        }
    }
}

/// A packet held while its source was on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPacket {
    /// When it arrived.
    pub at: Nanos,
    /// Who sent it.
    pub from: Option<SocketAddr>,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A source that became the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// Its SSRC.
    pub ssrc: Ssrc,
    /// Where its first held packet came from.
    pub from: Option<SocketAddr>,
    /// Sequence number of its first held packet.
    pub first_seq: u16,
    /// The stream it replaces, on a followed takeover.
    pub replaces: Option<Ssrc>,
    /// Its packets so far, oldest first (the current one is the last):
    /// feed them to the stream in order.
    pub held: Vec<HeldPacket>,
}

/// Another stream on the port, not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rival {
    /// Its SSRC.
    pub ssrc: Ssrc,
    /// Where it came from.
    pub from: Option<SocketAddr>,
    /// The stream's SSRC.
    pub stream: Ssrc,
}

/// The [`Selector`]'s verdict on one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A packet of the stream.
    Stream,
    /// Not the stream: drop it (it is counted).
    Foreign,
    /// Held while its source is on probation.
    Held,
    /// Its source is the stream now (the first, or a followed takeover).
    Locked(Lock),
}

/// Another stream on the port that is not followed, reported once per
/// SSRC and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RivalNotice {
    /// Who.
    pub rival: Rival,
    /// It took over after the stream went silent (a restarted sender; a
    /// driver should stop rather than ignore it); else the stream still
    /// talks and two senders share the port.
    pub took_over: bool,
}

#[derive(Debug)]
struct Candidate {
    ssrc: Ssrc,
    last_seq: u16,
    run: u32,
    heard: Nanos,
    held: VecDeque<HeldPacket>,
    held_bytes: usize,
    told_intruder: bool,
    told_takeover: bool,
}

/// Chooses the stream among the SSRCs on a port (see the module docs).
#[derive(Debug, Default)]
pub struct Selector {
    config: SelectorConfig,
    stream: Option<(Ssrc, Nanos)>,
    candidates: Vec<Candidate>,
    notices: VecDeque<RivalNotice>,
    dropped: u64,
    takes: u32,
}

impl Selector {
    /// A selector with nothing heard yet.
    pub fn new(config: SelectorConfig) -> Selector {
        Selector {
            config,
            ..Selector::default()
        }
    }

    /// Decides on one valid packet that arrived at `now`.
    pub fn admit(
        &mut self,
        now: Nanos,
        ssrc: Ssrc,
        seq: u16,
        from: Option<SocketAddr>,
        bytes: &[u8],
    ) -> Admission {
        if let Some(allowed) = self.config.source
            && from.is_none_or(|f| f.ip() != allowed)
        {
            self.dropped += 1;
            return Admission::Foreign;
        }
        if let Some((s, heard)) = &mut self.stream
            && *s == ssrc
        {
            *heard = now;
            let stream = *s;
            self.intruders(stream);
            return Admission::Stream;
        }
        let k = self.candidate(now, ssrc, seq);
        let limit = self.config.held_bytes;
        let c = &mut self.candidates[k];
        while c.held_bytes + bytes.len() > limit
            && let Some(old) = c.held.pop_front()
        {
            c.held_bytes -= old.bytes.len();
            self.dropped += 1;
        }
        c.held_bytes += bytes.len();
        c.held.push_back(HeldPacket {
            at: now,
            from,
            bytes: bytes.to_vec(),
        });
        if c.run < PROBATION {
            return Admission::Held;
        }
        self.promote(now, k)
    }

    /// The stream talks: every source past probation is a second stream
    /// on the port, not a restarted sender. Its held packets are foreign.
    fn intruders(&mut self, stream: Ssrc) {
        for c in &mut self.candidates {
            if c.run < PROBATION || c.told_intruder {
                continue;
            }
            c.told_intruder = true;
            let from = c.held.back().and_then(|h| h.from);
            self.dropped += c.held.len() as u64;
            c.held.clear();
            c.held_bytes = 0;
            self.notices.push_back(RivalNotice {
                rival: Rival {
                    ssrc: c.ssrc,
                    from,
                    stream,
                },
                took_over: false,
            });
        }
    }

    /// The next rival to report.
    pub fn poll_rival(&mut self) -> Option<RivalNotice> {
        self.notices.pop_front()
    }

    /// The probation entry for `ssrc`, updated with `seq`.
    fn candidate(&mut self, now: Nanos, ssrc: Ssrc, seq: u16) -> usize {
        if let Some(k) = self.candidates.iter().position(|c| c.ssrc == ssrc) {
            let c = &mut self.candidates[k];
            if seq == c.last_seq.wrapping_add(1) {
                c.run += 1;
            } else if seq != c.last_seq {
                c.run = 1;
            }
            c.last_seq = seq;
            c.heard = now;
            return k;
        }
        if self.candidates.len() == CANDIDATES
            && let Some(oldest) = (0..CANDIDATES).min_by_key(|&k| self.candidates[k].heard)
        {
            let gone = self.candidates.swap_remove(oldest);
            self.dropped += gone.held.len() as u64;
        }
        self.candidates.push(Candidate {
            ssrc,
            last_seq: seq,
            run: 1,
            heard: now,
            held: VecDeque::new(),
            held_bytes: 0,
            told_intruder: false,
            told_takeover: false,
        });
        self.candidates.len() - 1
    }

    /// Candidate `k` passed probation: it becomes the stream, takes over,
    /// or is a rival.
    fn promote(&mut self, now: Nanos, k: usize) -> Admission {
        let c = &mut self.candidates[k];
        let Some((stream, heard)) = self.stream else {
            return self.lock(now, k, None);
        };
        let rival = Rival {
            ssrc: c.ssrc,
            from: c.held.back().and_then(|h| h.from),
            stream,
        };
        if now.saturating_sub(heard) < self.config.silence {
            // Too early to tell: held (bounded) until the stream talks
            // again or stays silent.
            return Admission::Held;
        }
        if self.config.follow {
            return self.lock(now, k, Some(stream));
        }
        let dropped = c.held.len() as u64;
        c.held.clear();
        c.held_bytes = 0;
        self.dropped += dropped;
        if !std::mem::replace(&mut c.told_takeover, true) {
            self.notices.push_back(RivalNotice {
                rival,
                took_over: true,
            });
        }
        Admission::Foreign
    }

    fn lock(&mut self, now: Nanos, k: usize, replaces: Option<Ssrc>) -> Admission {
        let c = self.candidates.swap_remove(k);
        // Everything else on probation was not the stream.
        for other in self.candidates.drain(..) {
            self.dropped += other.held.len() as u64;
        }
        self.stream = Some((c.ssrc, now));
        self.takes += 1;
        let first = c.held.front();
        Admission::Locked(Lock {
            ssrc: c.ssrc,
            from: first.and_then(|h| h.from),
            first_seq: first.map_or(c.last_seq, |h| rtp_seq(&h.bytes)),
            replaces,
            held: c.held.into(),
        })
    }

    /// Whether [`Selector::admit`] would take a packet of `ssrc` from
    /// `from` as the stream's.
    pub fn is_stream(&self, ssrc: Ssrc, from: Option<SocketAddr>) -> bool {
        let allowed = self
            .config
            .source
            .is_none_or(|a| from.is_some_and(|f| f.ip() == a));
        allowed && self.stream.is_some_and(|(s, _)| s == ssrc)
    }

    /// The stream's SSRC, once locked.
    pub fn stream(&self) -> Option<Ssrc> {
        self.stream.map(|(s, _)| s)
    }

    /// Streams locked so far (takes).
    pub fn takes(&self) -> u32 {
        self.takes
    }

    /// Packets that were not the stream: refused by the source filter,
    /// held and then given up, or from a rival.
    pub fn foreign(&self) -> u64 {
        self.dropped
            + self
                .candidates
                .iter()
                .map(|c| c.held.len() as u64)
                .sum::<u64>()
    }
}

/// The RTP sequence number of a packet the caller already checked.
fn rtp_seq(bytes: &[u8]) -> u16 {
    bytes
        .get(2..4)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(seq: u16) -> Vec<u8> {
        let mut b = vec![0x80, 96, 0, 0];
        b[2..4].copy_from_slice(&seq.to_be_bytes());
        b
    }

    fn from(last: u8) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, last], 5000)))
    }

    fn admit(s: &mut Selector, ms: u64, ssrc: u32, seq: u16) -> Admission {
        s.admit(Nanos::from_millis(ms), Ssrc(ssrc), seq, from(1), &pkt(seq))
    }

    #[test]
    fn a_stray_datagram_does_not_capture_the_selector() {
        let mut s = Selector::new(SelectorConfig::default());
        assert_eq!(admit(&mut s, 0, 9, 500), Admission::Held);
        assert_eq!(admit(&mut s, 1, 5, 10), Admission::Held);
        assert_eq!(admit(&mut s, 1, 5, 11), Admission::Held);
        let Admission::Locked(lock) = admit(&mut s, 1, 5, 12) else {
            panic!("no lock")
        };
        assert_eq!(
            (lock.ssrc, lock.first_seq, lock.held.len()),
            (Ssrc(5), 10, 3)
        );
        assert_eq!(lock.replaces, None);
        assert_eq!(admit(&mut s, 2, 5, 13), Admission::Stream);
        assert_eq!(admit(&mut s, 2, 9, 501), Admission::Held);
        assert_eq!(s.foreign(), 2);
    }

    #[test]
    fn a_second_stream_is_an_intruder_while_the_first_talks() {
        let mut s = Selector::new(SelectorConfig::default());
        for q in 0..3 {
            admit(&mut s, 0, 1, q);
        }
        for q in 0..4 {
            assert_eq!(admit(&mut s, 10, 2, q), Admission::Held);
        }
        assert_eq!(s.poll_rival(), None);
        assert_eq!(admit(&mut s, 20, 1, 3), Admission::Stream);
        let n = s.poll_rival().unwrap();
        assert_eq!(
            (n.rival.ssrc, n.rival.stream, n.took_over),
            (Ssrc(2), Ssrc(1), false)
        );
        assert_eq!(s.foreign(), 4);
        assert_eq!(admit(&mut s, 21, 1, 4), Admission::Stream);
        assert_eq!(s.poll_rival(), None);
    }

    #[test]
    fn a_restarted_sender_is_followed_with_its_held_packets() {
        let cfg = SelectorConfig {
            follow: true,
            ..SelectorConfig::default()
        };
        let mut s = Selector::new(cfg);
        for q in 0..3 {
            admit(&mut s, 0, 1, q);
        }
        // The new sender starts 30 ms after the old one's last packet:
        // held until the silence (100 ms) is over, then followed.
        for (k, q) in (700..705).enumerate() {
            assert_eq!(admit(&mut s, 30 + k as u64, 2, q), Admission::Held);
        }
        let Admission::Locked(lock) = admit(&mut s, 100, 2, 705) else {
            panic!("no takeover")
        };
        assert_eq!((lock.ssrc, lock.replaces), (Ssrc(2), Some(Ssrc(1))));
        assert_eq!((lock.first_seq, lock.held.len()), (700, 6));
        assert_eq!((s.takes(), s.foreign()), (2, 0));
    }

    #[test]
    fn an_unfollowed_takeover_is_reported_once_and_the_source_filter_holds() {
        let cfg = SelectorConfig {
            source: Some([127, 0, 0, 1].into()),
            held_bytes: 4 * 4,
            ..SelectorConfig::default()
        };
        let mut s = Selector::new(cfg);
        let spoof = s.admit(Nanos::ZERO, Ssrc(7), 0, from(2), &pkt(0));
        assert_eq!(spoof, Admission::Foreign);
        for q in 0..3 {
            admit(&mut s, 0, 1, q);
        }
        for q in 0..6 {
            admit(&mut s, 500, 2, q);
        }
        let n = s.poll_rival().unwrap();
        assert_eq!(
            (n.rival.ssrc, n.rival.stream, n.took_over),
            (Ssrc(2), Ssrc(1), true)
        );
        assert_eq!(s.poll_rival(), None);
        assert_eq!(s.stream(), Some(Ssrc(1)));
        assert_eq!(s.foreign(), 7);
    }
}
