//! The shared holder of serve's rate budget. Who may make the server
//! send where, the token and the budget's rule live in
//! `nagare_proto::serve::access`; this file keeps only the running total
//! that RTSP sessions, the HTTP API and the flows change from many
//! threads at once.

use std::sync::atomic::{AtomicU64, Ordering};

use nagare_proto::BitRate;
use nagare_proto::serve::{Budget, Error};

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
