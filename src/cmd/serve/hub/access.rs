//! The shared holders of serve's rate budget and connection caps. Who
//! may make the server send where, the token, the budget's rule and the
//! caps' rule live in `nagare_proto::serve`; this file keeps only the
//! running totals that RTSP sessions, the HTTP API and the flows change
//! from many threads at once.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nagare_proto::BitRate;
use nagare_proto::serve::{Budget, ConnectionCaps, Error};

/// A front end's connection caps, shared by its connection threads or
/// tasks.
pub(crate) type Places = Arc<Mutex<ConnectionCaps>>;

/// A connection's place under its front end's caps, given back when
/// dropped (however the connection ends).
pub(crate) struct Place {
    places: Places,
    client: IpAddr,
}

impl Place {
    /// Caps of `total` connections, `per_address` from one address.
    pub(crate) fn caps(total: usize, per_address: usize) -> Places {
        Arc::new(Mutex::new(ConnectionCaps::new(total, per_address)))
    }

    /// A place for a connection from `client`, if both caps allow one.
    pub(crate) fn take(places: &Places, client: IpAddr) -> Option<Place> {
        let mut caps = places.lock().unwrap_or_else(|p| p.into_inner());
        caps.enter(client).then(|| Place {
            places: Arc::clone(places),
            client,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut caps = self.places.lock().unwrap_or_else(|p| p.into_inner());
        caps.leave(self.client);
    }
}

/// The rate reserved by admitted streams, checked against a [`Budget`].
#[derive(Debug)]
pub(crate) struct Admission {
    budget: Budget,
    reserved: AtomicU64,
}

impl Admission {
    /// A budget of `max_rate` (none: unlimited) and a pacing load limit.
    pub(crate) fn new(max_rate: Option<BitRate>, max_load: f64) -> Admission {
        Admission {
            budget: Budget { max_rate, max_load },
            reserved: AtomicU64::new(0),
        }
    }

    /// Reserves `rate` for a new stream, or says why not. `load` is the
    /// busiest pacing thread's share of time spent working.
    pub(crate) fn reserve(&self, rate: BitRate, load: f64) -> Result<(), Error> {
        // A compare-and-swap loop: two admissions racing each see the
        // other's reservation, so together they never pass the budget.
        let mut now = self.reserved.load(Ordering::Relaxed);
        loop {
            let after = self.budget.admit(BitRate(now), rate, load)?;
            match self.reserved.compare_exchange(
                now,
                after.bps(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => now = seen,
            }
        }
    }

    /// Gives back what [`Admission::reserve`] took.
    pub(crate) fn release(&self, rate: BitRate) {
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |r| {
                Some(Budget::release(BitRate(r), rate).bps())
            });
    }

    /// Rate reserved now.
    pub(crate) fn reserved(&self) -> BitRate {
        BitRate(self.reserved.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_and_release_move_the_total() {
        let a = Admission::new(Some(BitRate(10_000_000)), 0.9);
        assert!(a.reserve(BitRate(6_000_000), 0.1).is_ok());
        assert_eq!(a.reserved(), BitRate(6_000_000));
        let e = a.reserve(BitRate(6_000_000), 0.1).unwrap_err();
        assert!(matches!(e, Error::RateOverBudget { .. }), "{e}");
        assert!(matches!(
            a.reserve(BitRate(1), 0.95).unwrap_err(),
            Error::LoadOverBudget { .. }
        ));
        assert_eq!(a.reserved(), BitRate(6_000_000));
        a.release(BitRate(6_000_000));
        assert_eq!(a.reserved(), BitRate(0));
        assert!(a.reserve(BitRate(6_000_000), 0.1).is_ok());
    }
}
