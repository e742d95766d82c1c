//! The accepting side of a connection (the source, or a relay parent):
//! challenge the newcomer, check its proof, and say what it asked to be.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::Error;
use super::auth::{Nonce, Role, SessionKey, proof_matches};
use super::link::{LinkId, Message};
use super::wire::{Control, PeerId};
use crate::framing::Kind;
use crate::units::Nanos;

/// How long a new connection may take to prove itself.
pub const HANDSHAKE_TIMEOUT: Nanos = Nanos::from_secs(5);

/// Connections waiting to prove themselves at once. A newcomer beyond it
/// evicts the one that has waited longest (closed unanswered), so a flood
/// of idle or trickling connections costs bounded memory and still
/// cannot lock out a peer that answers its challenge at once.
pub const MAX_PENDING: usize = 64;

/// Connections from one address waiting at once; beyond it the oldest
/// from that address is evicted, once it has had [`PROVE_GRACE`].
pub const MAX_PENDING_PER_ADDRESS: usize = 16;

/// How long a connection may wait before a newcomer can evict it. A
/// classroom behind one NAT address that switches on at once sends a
/// burst of joins; on a busy host each answers its challenge within a
/// few round trips, but not within the microseconds between arrivals,
/// so evicting by age alone turned legitimate peers away (4 runs in 7
/// of a 30-peer burst). Tricklers are older than this by the time the
/// next newcomer comes, and still go first.
pub const PROVE_GRACE: Nanos = Nanos::from_millis(1000);

/// While every waiting connection is within its grace, the caps stretch
/// to this many times [`MAX_PENDING`] and [`MAX_PENDING_PER_ADDRESS`]
/// before the oldest is evicted anyway: memory stays bounded.
pub const BURST_FACTOR: usize = 8;

/// Largest message a connection may send before it has proved itself:
/// a join or attach request is under 100 bytes, so a length prefix
/// beyond this is refused before anything is allocated for it.
pub const MAX_HANDSHAKE_MESSAGE: usize = 512;

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its proof does not match the session key.
    WrongKey(Role),
    /// It asked for something this side does not offer (a join at a
    /// relay parent) or opened with another message.
    Unexpected(Kind),
    /// Its first message is malformed.
    Malformed(Error),
    /// It did not answer the challenge in time.
    Timeout,
    /// Too many connections are already waiting to prove themselves.
    Busy,
    /// The tree holds as many peers as it can.
    TreeFull,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::WrongKey(Role::Join) => f.write_str("tried to join with a wrong key"),
            Refusal::WrongKey(Role::Attach) => f.write_str("tried to attach with a wrong key"),
            Refusal::Unexpected(kind) => write!(f, "opened with {kind:?}"),
            Refusal::Malformed(e) => write!(f, "opened with a malformed message ({e})"),
            Refusal::Timeout => f.write_str("did not answer the challenge in time"),
            Refusal::Busy => f.write_str("too many connections waiting to prove themselves"),
            Refusal::TreeFull => f.write_str("the tree is full"),
        }
    }
}

impl Refusal {
    /// The reason sent to the newcomer, if it gets one.
    pub fn reason(self, accepts_join: bool) -> Option<&'static str> {
        match self {
            Refusal::WrongKey(_) => {
                Some("wrong session key: use the key `nagare tree source` printed")
            }
            Refusal::Unexpected(_) | Refusal::Malformed(_) if accepts_join => {
                Some("expected a join or attach request")
            }
            Refusal::Unexpected(_) | Refusal::Malformed(_) => Some("expected an attach request"),
            Refusal::TreeFull => Some("the tree is full"),
            Refusal::Timeout | Refusal::Busy => None,
        }
    }
}

/// What a newcomer turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A peer joining the tree; its relay listens on `relay_port` at the
    /// address it came from.
    Join {
        /// The peer's relay listener.
        relay: SocketAddr,
    },
    /// A child attaching to stream from this side.
    Attach {
        /// The child.
        peer: PeerId,
        /// Frame it holds.
        version: Option<u64>,
    },
    /// Turned away.
    Refused(Refusal),
}

#[derive(Debug)]
struct Pending {
    nonce: Nonce,
    from: SocketAddr,
    deadline: Nanos,
}

/// Connections that were challenged and have not answered yet.
#[derive(Debug)]
pub(crate) struct Admission {
    key: SessionKey,
    accepts_join: bool,
    pending: BTreeMap<LinkId, Pending>,
}

impl Admission {
    /// Admits joins too when `accepts_join` (the source), else only
    /// attaching children.
    pub(crate) fn new(key: SessionKey, accepts_join: bool) -> Self {
        Admission {
            key,
            accepts_join,
            pending: BTreeMap::new(),
        }
    }

    /// Challenges a new connection; also returns the pending links it
    /// evicted to make room (the caller closes them unanswered).
    pub(crate) fn accept(
        &mut self,
        now: Nanos,
        link: LinkId,
        from: SocketAddr,
        nonce: Nonce,
    ) -> (Message, Vec<(LinkId, SocketAddr)>) {
        let mut evicted = Vec::new();
        let same = self
            .pending
            .values()
            .filter(|p| p.from.ip() == from.ip())
            .count();
        if same >= MAX_PENDING_PER_ADDRESS {
            let hard = same >= MAX_PENDING_PER_ADDRESS * BURST_FACTOR;
            evicted.extend(self.evict(now, Some(from), hard));
        }
        if self.pending.len() >= MAX_PENDING {
            let hard = self.pending.len() >= MAX_PENDING * BURST_FACTOR;
            evicted.extend(self.evict(now, None, hard));
        }
        let deadline = now + HANDSHAKE_TIMEOUT;
        self.pending.insert(
            link,
            Pending {
                nonce,
                from,
                deadline,
            },
        );
        (Control::Challenge { nonce }.to_bytes().into(), evicted)
    }

    /// Removes the pending link that has waited longest (from `from`'s
    /// address, if given), if it has had its [`PROVE_GRACE`] or `hard`
    /// (the stretched cap is reached).
    fn evict(
        &mut self,
        now: Nanos,
        from: Option<SocketAddr>,
        hard: bool,
    ) -> Option<(LinkId, SocketAddr)> {
        let (&link, p) = self
            .pending
            .iter()
            .filter(|(_, p)| from.is_none_or(|f| p.from.ip() == f.ip()))
            .min_by_key(|(l, p)| (p.deadline, **l))?;
        let since = p.deadline.saturating_sub(HANDSHAKE_TIMEOUT);
        if !hard && now.saturating_sub(since) < PROVE_GRACE {
            return None;
        }
        let from = p.from;
        self.pending.remove(&link);
        Some((link, from))
    }

    /// Whether `link` is waiting to prove itself.
    pub(crate) fn contains(&self, link: LinkId) -> bool {
        self.pending.contains_key(&link)
    }

    /// Judges the first message of a pending link: where it came from,
    /// the challenge it answered and what it is; `None` if the link is
    /// not pending.
    pub(crate) fn receive(
        &mut self,
        link: LinkId,
        msg: &[u8],
    ) -> Option<(SocketAddr, Nonce, Verdict)> {
        let p = self.pending.remove(&link)?;
        Some((p.from, p.nonce, self.judge(&p, msg)))
    }

    /// The session key newcomers prove they hold.
    pub(crate) fn key(&self) -> &SessionKey {
        &self.key
    }

    fn judge(&self, p: &Pending, msg: &[u8]) -> Verdict {
        let control = match Control::parse_framed(msg) {
            Ok(c) => c,
            Err(Error::Unexpected(kind)) => return Verdict::Refused(Refusal::Unexpected(kind)),
            Err(e) => return Verdict::Refused(Refusal::Malformed(e)),
        };
        let (role, proof) = match &control {
            Control::Join { proof, .. } if self.accepts_join => (Role::Join, proof),
            Control::Attach { proof, .. } => (Role::Attach, proof),
            other => return Verdict::Refused(Refusal::Unexpected(other.kind())),
        };
        if !proof_matches(&self.key, &p.nonce, role, proof) {
            return Verdict::Refused(Refusal::WrongKey(role));
        }
        match control {
            Control::Join { relay_port, .. } => Verdict::Join {
                relay: SocketAddr::new(p.from.ip(), relay_port),
            },
            Control::Attach { peer, version, .. } => Verdict::Attach { peer, version },
            _ => Verdict::Refused(Refusal::Unexpected(control.kind())),
        }
    }

    /// Forgets a link that closed.
    pub(crate) fn remove(&mut self, link: LinkId) -> bool {
        self.pending.remove(&link).is_some()
    }

    /// Links whose time to answer ran out, with where they came from.
    pub(crate) fn expire(&mut self, now: Nanos) -> Vec<(LinkId, SocketAddr)> {
        let late: Vec<(LinkId, SocketAddr)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(&l, p)| (l, p.from))
            .collect();
        for (l, _) in &late {
            self.pending.remove(l);
        }
        late
    }

    /// The earliest deadline of a pending link.
    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        self.pending.values().map(|p| p.deadline).min()
    }

    /// The reason a refused newcomer is told.
    pub(crate) fn reason(&self, why: Refusal) -> Option<&'static str> {
        why.reason(self.accepts_join)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::auth::proof;

    const KEY: SessionKey = [3; 16];

    fn from() -> SocketAddr {
        "10.0.0.7:40000".parse().unwrap()
    }

    #[test]
    fn verdicts() {
        let mut a = Admission::new(KEY, true);
        let nonce = [5; 32];
        assert!(a.accept(Nanos(0), LinkId(1), from(), nonce).1.is_empty());
        let join = Control::Join {
            proof: proof(&KEY, &nonce, Role::Join),
            relay_port: 7000,
        };
        assert_eq!(
            a.receive(LinkId(1), &join.to_bytes()),
            Some((
                from(),
                nonce,
                Verdict::Join {
                    relay: "10.0.0.7:7000".parse().unwrap()
                }
            ))
        );
        assert_eq!(a.receive(LinkId(1), &join.to_bytes()), None, "judged once");

        // A relay parent takes no joins; a join proof does not attach.
        let mut r = Admission::new(KEY, false);
        r.accept(Nanos(0), LinkId(2), from(), nonce);
        assert_eq!(
            r.receive(LinkId(2), &join.to_bytes()),
            Some((
                from(),
                nonce,
                Verdict::Refused(Refusal::Unexpected(Kind::Join))
            ))
        );
        r.accept(Nanos(0), LinkId(3), from(), nonce);
        let replay = Control::Attach {
            proof: proof(&KEY, &nonce, Role::Join),
            peer: PeerId(4),
            version: None,
        };
        assert_eq!(
            r.receive(LinkId(3), &replay.to_bytes()),
            Some((
                from(),
                nonce,
                Verdict::Refused(Refusal::WrongKey(Role::Attach))
            ))
        );
    }

    fn at(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 1, last], 40000))
    }

    #[test]
    fn the_longest_waiting_is_evicted_per_address_and_in_all() {
        let mut a = Admission::new(KEY, true);
        let n = MAX_PENDING_PER_ADDRESS as u64;
        let late = |i: u64| PROVE_GRACE + Nanos(i);
        for i in 0..n {
            assert!(a.accept(Nanos(i), LinkId(i), from(), [0; 32]).1.is_empty());
        }
        // One address cannot hold more than its share once the oldest
        // had its grace.
        let (_, out) = a.accept(late(n), LinkId(n), from(), [0; 32]);
        assert_eq!(out, [(LinkId(0), from())]);
        // Other addresses fill the rest; then the oldest anywhere goes.
        let mut id = 100;
        while a.pending.len() < MAX_PENDING {
            let (_, out) = a.accept(late(id), LinkId(id), at(id as u8), [0; 32]);
            assert!(out.is_empty());
            id += 1;
        }
        let (_, out) = a.accept(late(id), LinkId(id), at(250), [0; 32]);
        assert_eq!(out, [(LinkId(1), from())]);
        assert_eq!(a.pending.len(), MAX_PENDING);
    }

    #[test]
    fn a_burst_from_one_address_waits_within_its_grace_and_tricklers_still_go() {
        let mut a = Admission::new(KEY, true);
        // 300 tricklers from one address, long ago.
        for i in 0..300u64 {
            a.accept(Nanos(i), LinkId(i), from(), [0; 32]);
        }
        assert!(a.pending.len() <= MAX_PENDING * BURST_FACTOR);
        // Then a classroom of 100 at once: each evicts a trickler, never
        // one of its own.
        let t = PROVE_GRACE + PROVE_GRACE;
        for i in 0..100u64 {
            let (_, out) = a.accept(t + Nanos(i), LinkId(1000 + i), from(), [0; 32]);
            assert!(out.iter().all(|(l, _)| l.0 < 1000), "{out:?}");
        }
        for i in 0..100u64 {
            assert!(a.contains(LinkId(1000 + i)), "peer {i} was evicted");
        }
        // Past the stretched cap the oldest goes even within its grace:
        // memory stays bounded.
        let hard = MAX_PENDING_PER_ADDRESS * BURST_FACTOR;
        let mut b = Admission::new(KEY, true);
        for i in 0..=hard as u64 {
            b.accept(Nanos(i), LinkId(i), from(), [0; 32]);
        }
        assert_eq!(b.pending.len(), hard);
    }

    #[test]
    fn deadlines_are_for_the_whole_handshake() {
        let mut a = Admission::new(KEY, true);
        for i in 0..3 {
            a.accept(Nanos(i), LinkId(i), from(), [0; 32]);
        }
        assert_eq!(a.poll_timeout(), Some(HANDSHAKE_TIMEOUT));
        let late = a.expire(HANDSHAKE_TIMEOUT + Nanos(1));
        assert_eq!(late.len(), 2);
        assert!(!a.contains(LinkId(0)) && a.contains(LinkId(2)));
    }
}
