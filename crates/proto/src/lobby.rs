//! Connections that have not proved themselves yet, for any daemon that
//! listens: a deadline for the whole handshake (not per read), and caps
//! on how many wait at once, per daemon and per source address.
//!
//! When a cap is reached the connection that has waited longest (from
//! that address, or at all) is evicted to make room, rather than the
//! newcomer refused: a flood of idle or trickling connections then keeps
//! rotating through the lobby, and a legitimate client, which finishes
//! its handshake in one round trip, still gets in. Drivers close what the
//! lobby evicts or lets expire, and keep no thread or large buffer for a
//! connection before it leaves the lobby proved.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::units::Nanos;

/// A connection in the lobby, named by its driver.
pub type Guest = u64;

/// How many may wait, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LobbyLimits {
    /// Connections waiting at once, in all.
    pub total: usize,
    /// Connections waiting at once from one address.
    pub per_address: usize,
    /// Time for the whole handshake.
    pub deadline: Nanos,
}

impl Default for LobbyLimits {
    /// 64 in all, 16 per address, 5 s.
    fn default() -> Self {
        LobbyLimits {
            total: 64,
            per_address: 16,
            deadline: Nanos::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    from: IpAddr,
    since: Nanos,
}

/// Connections waiting to prove themselves (see the module docs).
#[derive(Debug, Default)]
pub struct Lobby {
    limits: LobbyLimits,
    waiting: BTreeMap<Guest, Waiting>,
    evicted: u64,
    expired: u64,
}

impl Lobby {
    /// An empty lobby.
    pub fn new(limits: LobbyLimits) -> Lobby {
        Lobby {
            limits: LobbyLimits {
                total: limits.total.max(1),
                per_address: limits.per_address.max(1),
                ..limits
            },
            ..Lobby::default()
        }
    }

    /// Lets `guest` from `from` in at `now`; returns the guests evicted
    /// to make room (close them).
    pub fn enter(&mut self, now: Nanos, guest: Guest, from: IpAddr) -> Vec<Guest> {
        let mut out = Vec::new();
        let same = |w: &Waiting| w.from == from;
        if self.waiting.values().filter(|w| same(w)).count() >= self.limits.per_address {
            out.extend(self.oldest(Some(from)));
        }
        if self.waiting.len() >= self.limits.total {
            out.extend(self.oldest(None));
        }
        self.evicted += out.len() as u64;
        self.waiting.insert(guest, Waiting { from, since: now });
        out
    }

    fn oldest(&mut self, from: Option<IpAddr>) -> Option<Guest> {
        let (&g, _) = self
            .waiting
            .iter()
            .filter(|(_, w)| from.is_none_or(|f| w.from == f))
            .min_by_key(|(g, w)| (w.since, **g))?;
        self.waiting.remove(&g);
        Some(g)
    }

    /// `guest` proved itself (or closed): it leaves the lobby. False if it
    /// was no longer there (evicted or expired: close it).
    pub fn leave(&mut self, guest: Guest) -> bool {
        self.waiting.remove(&guest).is_some()
    }

    /// Whether `guest` is still waiting.
    pub fn contains(&self, guest: Guest) -> bool {
        self.waiting.contains_key(&guest)
    }

    /// When `guest`'s handshake time runs out.
    pub fn deadline(&self, guest: Guest) -> Option<Nanos> {
        self.waiting
            .get(&guest)
            .map(|w| w.since + self.limits.deadline)
    }

    /// Guests whose time ran out by `now` (close them).
    pub fn expire(&mut self, now: Nanos) -> Vec<Guest> {
        let limit = self.limits.deadline;
        let late: Vec<Guest> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.since + limit <= now)
            .map(|(&g, _)| g)
            .collect();
        for g in &late {
            self.waiting.remove(g);
        }
        self.expired += late.len() as u64;
        late
    }

    /// The earliest deadline, for a driver's timer.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.waiting
            .values()
            .map(|w| w.since + self.limits.deadline)
            .min()
    }

    /// Guests waiting now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Guests evicted and expired so far.
    pub fn turned_away(&self) -> (u64, u64) {
        (self.evicted, self.expired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn the_oldest_from_a_full_address_makes_room() {
        let mut l = Lobby::new(LobbyLimits {
            total: 4,
            per_address: 2,
            deadline: Nanos::from_secs(5),
        });
        assert!(l.enter(Nanos(1), 1, ip(1)).is_empty());
        assert!(l.enter(Nanos(2), 2, ip(1)).is_empty());
        assert_eq!(l.enter(Nanos(3), 3, ip(1)), [1]);
        assert!(l.enter(Nanos(4), 4, ip(2)).is_empty());
        assert!(l.enter(Nanos(5), 5, ip(3)).is_empty());
        // Full in all: the oldest anywhere goes.
        assert_eq!(l.enter(Nanos(6), 6, ip(4)), [2]);
        assert!(!l.leave(1) && l.leave(3));
        assert_eq!(l.turned_away(), (2, 0));
    }

    #[test]
    fn the_deadline_is_for_the_whole_handshake() {
        let mut l = Lobby::new(LobbyLimits::default());
        l.enter(Nanos::ZERO, 7, ip(1));
        l.enter(Nanos::from_secs(1), 8, ip(1));
        assert_eq!(l.poll_timeout(), Some(Nanos::from_secs(5)));
        assert_eq!(l.deadline(8), Some(Nanos::from_secs(6)));
        assert_eq!(l.expire(Nanos::from_secs(5)), [7]);
        assert!(l.contains(8) && !l.contains(7));
        assert_eq!(l.len(), 1);
    }
}
