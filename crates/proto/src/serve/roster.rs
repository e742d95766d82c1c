//! The connections a front end holds, and which one gives way when a cap
//! is reached: serve's RTSP and HTTP listeners keep to it.
//!
//! Caps on all connections and on those from one client address; when
//! one is reached the newcomer is let in and the connection idle the
//! longest (from that address, or at all) is evicted, as [`crate::lobby`]
//! does for the probe and tree daemons. So a flood of idle connections
//! keeps rotating through the roster and a real client, which talks as
//! soon as it connects, still gets in. Connections holding a session give
//! way only after every one without: a player that sends a keep-alive
//! every 30 s is not pushed out by a flood that connects faster.
//!
//! Ordered sets keep every step at O(log n) for the tens of thousands of
//! connections one event loop holds.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use super::cidr::canonical;
use crate::lobby::Guest;
use crate::units::Nanos;

/// Where a connection stands in the order of eviction: without a session
/// before with one, then the longest idle, then the first admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Standing {
    session: bool,
    last_active: Nanos,
    guest: Guest,
}

#[derive(Debug, Clone, Copy)]
struct Tenant {
    from: IpAddr,
    standing: Standing,
}

/// Connections held under two caps (see the module docs).
#[derive(Debug, Default)]
pub struct Roster {
    total: usize,
    per_address: usize,
    tenants: HashMap<Guest, Tenant>,
    order: BTreeSet<Standing>,
    by_address: HashMap<IpAddr, BTreeSet<Standing>>,
    evicted: u64,
}

impl Roster {
    /// At most `total` connections, and `per_address` from one client
    /// address (each at least 1). An IPv4-mapped IPv6 address counts as
    /// its IPv4 address.
    pub fn new(total: usize, per_address: usize) -> Roster {
        Roster {
            total: total.max(1),
            per_address: per_address.max(1),
            ..Roster::default()
        }
    }

    /// Admits `guest` from `from` at `now` (a new guest id each time);
    /// returns the connections evicted to make room: close them.
    pub fn enter(&mut self, now: Nanos, guest: Guest, from: IpAddr) -> Vec<Guest> {
        let from = canonical(from);
        let mut out = Vec::new();
        let mine = self.by_address.get(&from).map_or(0, BTreeSet::len);
        if mine >= self.per_address {
            let first = self.by_address.get(&from).and_then(|s| s.first()).copied();
            out.extend(first.map(|s| s.guest));
        }
        out.retain(|&g| self.leave(g));
        if self.tenants.len() >= self.total {
            let first = self.order.first().map(|s| s.guest);
            out.extend(first.filter(|&g| self.leave(g)));
        }
        self.evicted += out.len() as u64;
        let standing = Standing {
            session: false,
            last_active: now,
            guest,
        };
        self.leave(guest);
        self.tenants.insert(guest, Tenant { from, standing });
        self.order.insert(standing);
        self.by_address.entry(from).or_default().insert(standing);
        out
    }

    /// `guest` did something at `now` (the client sent bytes).
    pub fn touch(&mut self, now: Nanos, guest: Guest) {
        self.restand(guest, |s| s.last_active = s.last_active.max(now));
    }

    /// Whether `guest` holds a session now.
    pub fn set_session(&mut self, guest: Guest, session: bool) {
        self.restand(guest, |s| s.session = session);
    }

    fn restand(&mut self, guest: Guest, change: impl FnOnce(&mut Standing)) {
        let Some(t) = self.tenants.get_mut(&guest) else {
            return;
        };
        let old = t.standing;
        change(&mut t.standing);
        let new = t.standing;
        if old == new {
            return;
        }
        self.order.remove(&old);
        self.order.insert(new);
        if let Some(set) = self.by_address.get_mut(&t.from) {
            set.remove(&old);
            set.insert(new);
        }
    }

    /// `guest` closed: its place is free. False if it was not held
    /// (already evicted, or never admitted).
    pub fn leave(&mut self, guest: Guest) -> bool {
        let Some(t) = self.tenants.remove(&guest) else {
            return false;
        };
        self.order.remove(&t.standing);
        if let Some(set) = self.by_address.get_mut(&t.from) {
            set.remove(&t.standing);
            if set.is_empty() {
                self.by_address.remove(&t.from);
            }
        }
        true
    }

    /// Whether `guest` is held.
    pub fn contains(&self, guest: Guest) -> bool {
        self.tenants.contains_key(&guest)
    }

    /// Connections held now.
    pub fn len(&self) -> usize {
        self.tenants.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }

    /// Connections evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn secs(s: u64) -> Nanos {
        Nanos::from_secs(s)
    }

    #[test]
    fn a_full_address_gives_way_longest_idle_first() {
        let mut r = Roster::new(100, 3);
        for g in 1..=3 {
            assert!(r.enter(secs(g), g, ip(1)).is_empty());
        }
        // 1 talked last; 2 is now the longest idle from that address.
        r.touch(secs(10), 1);
        assert_eq!(r.enter(secs(11), 4, ip(1)), [2]);
        assert_eq!(r.enter(secs(12), 5, ip(1)), [3]);
        // The mapped form is the same address; another address is not.
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(r.enter(secs(13), 6, mapped), [1]);
        assert!(r.enter(secs(14), 7, ip(2)).is_empty());
        assert_eq!((r.len(), r.evicted()), (4, 3));
        assert!(!r.leave(2) && r.leave(4) && !r.contains(4));
    }

    #[test]
    fn a_full_roster_evicts_the_longest_idle_anywhere_and_sessions_last() {
        let mut r = Roster::new(3, 3);
        assert!(r.enter(secs(1), 1, ip(1)).is_empty());
        assert!(r.enter(secs(2), 2, ip(2)).is_empty());
        assert!(r.enter(secs(3), 3, ip(3)).is_empty());
        // 1 plays: it is idle the longest but holds a session.
        r.set_session(1, true);
        assert_eq!(r.enter(secs(4), 4, ip(4)), [2]);
        assert_eq!(r.enter(secs(5), 5, ip(5)), [3]);
        assert_eq!(r.enter(secs(6), 6, ip(6)), [4]);
        // Once every connection has a session, the longest idle goes.
        r.set_session(5, true);
        r.set_session(6, true);
        assert_eq!(r.enter(secs(7), 7, ip(7)), [1]);
        // Without a session, a newer connection gives way before older
        // ones with.
        r.set_session(7, false);
        assert_eq!(r.enter(secs(8), 8, ip(5)), [7]);
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn both_caps_evict_at_most_one_each_and_time_never_runs_back() {
        let mut r = Roster::new(2, 1);
        assert!(r.enter(secs(5), 1, ip(1)).is_empty());
        assert!(r.enter(secs(6), 2, ip(2)).is_empty());
        // Full in all and from ip(2): its one connection goes, and that
        // makes room in all too.
        assert_eq!(r.enter(secs(7), 3, ip(2)), [2]);
        r.touch(secs(1), 1);
        assert_eq!(r.enter(secs(8), 4, ip(3)), [1], "a late touch is ignored");
        r.touch(secs(9), 99);
        assert_eq!(r.len(), 2);
    }
}
