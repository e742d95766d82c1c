//! How many connections a front end holds at once: in all, and from one
//! client address, so that one address holding connections open cannot
//! take every place (serve's HTTP API and its RTSP listener both keep
//! to this).

use std::collections::HashMap;
use std::net::IpAddr;

use super::cidr::canonical;

/// Connections open under two caps; the driver turns away a connection
/// [`ConnectionCaps::enter`] refuses, and calls
/// [`ConnectionCaps::leave`] when one it let in closes.
#[derive(Debug, Default)]
pub struct ConnectionCaps {
    total: usize,
    per_address: usize,
    open: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl ConnectionCaps {
    /// At most `total` connections, and `per_address` from one client
    /// address (each at least 1). An IPv4-mapped IPv6 address counts as
    /// its IPv4 address.
    pub fn new(total: usize, per_address: usize) -> ConnectionCaps {
        ConnectionCaps {
            total: total.max(1),
            per_address: per_address.max(1),
            ..ConnectionCaps::default()
        }
    }

    /// Takes a place for a connection from `client`; false when either
    /// cap is reached.
    pub fn enter(&mut self, client: IpAddr) -> bool {
        let client = canonical(client);
        let mine = self.by_address.get(&client).copied().unwrap_or(0);
        if mine >= self.per_address || self.open >= self.total {
            return false;
        }
        self.by_address.insert(client, mine + 1);
        self.open += 1;
        true
    }

    /// Gives back the place of a connection from `client`.
    pub fn leave(&mut self, client: IpAddr) {
        let client = canonical(client);
        if let Some(n) = self.by_address.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                self.by_address.remove(&client);
            }
            self.open -= 1;
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let mut caps = ConnectionCaps::new(5, 3);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let a_mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(caps.enter(a) && caps.enter(a) && caps.enter(a_mapped));
        assert!(!caps.enter(a), "one address's cap, mapped or not");
        assert!(caps.enter(b) && caps.enter(b));
        assert!(!caps.enter("127.0.0.3".parse().unwrap()), "the total cap");
        caps.leave(a);
        assert_eq!(caps.open(), 4);
        assert!(caps.enter(a_mapped));
        for _ in 0..3 {
            caps.leave(a);
        }
        caps.leave(a);
        assert_eq!(caps.open(), 2, "a place is given back once");
        assert!(!caps.by_address.contains_key(&a));
    }
}
