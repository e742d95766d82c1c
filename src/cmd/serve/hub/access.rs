//! The shared holders of serve's budget and connection caps. Who
//! may make the server send where, the token, the budget's rule and the
//! caps' rule live in `nagare_proto::serve`; this file keeps only the
//! running totals that RTSP sessions, the HTTP API and the flows change
//! from many threads at once.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use nagare_proto::serve::{Budget, ConnectionCaps, Demand, Error, Work};

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

/// What the admitted streams have reserved, checked against a
/// [`Budget`].
#[derive(Debug)]
pub(crate) struct Admission {
    budget: Budget,
    reserved: Mutex<Demand>,
}

impl Admission {
    /// The budget of `--max-rate`, `--max-load` and `--max-memory`.
    pub(crate) fn new(budget: Budget) -> Admission {
        Admission {
            budget,
            reserved: Mutex::new(Demand::default()),
        }
    }

    /// Reserves `demand` for a new stream, or says why not. One lock
    /// around the check and the update: two admissions racing each see
    /// the other's reservation, so together they never pass the budget.
    pub(crate) fn reserve(&self, demand: Demand, work: &Work) -> Result<(), Error> {
        let mut reserved = self.lock();
        *reserved = self.budget.admit(*reserved, demand, work)?;
        Ok(())
    }

    /// Gives back what [`Admission::reserve`] took.
    pub(crate) fn release(&self, demand: Demand) {
        let mut reserved = self.lock();
        *reserved = reserved.minus(demand);
    }

    /// What is reserved now.
    pub(crate) fn reserved(&self) -> Demand {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Demand> {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_proto::serve::Cost;
    use nagare_proto::{BitRate, ByteSize};

    #[test]
    fn reserve_and_release_move_the_total() {
        let a = Admission::new(Budget {
            max_rate: Some(BitRate(10_000_000)),
            max_load: 0.9,
            max_memory: Some(ByteSize(1 << 20)),
        });
        let work = Work {
            pacers: 1,
            pacer_load: 0.1,
            reader_load: 0.0,
            cost: Cost::PRIOR,
        };
        let six = Demand {
            rate: BitRate(6_000_000),
            packets_per_s: 500.0,
            read_bytes_per_s: 750_000.0,
            ring: ByteSize(1 << 19),
        };
        assert!(a.reserve(six, &work).is_ok());
        assert_eq!(a.reserved(), six);
        let e = a.reserve(six, &work).unwrap_err();
        assert!(matches!(e, Error::RateOverBudget { .. }), "{e}");
        let busy = Work {
            pacer_load: 0.95,
            ..work
        };
        assert!(matches!(
            a.reserve(Demand::default(), &busy).unwrap_err(),
            Error::LoadOverBudget { .. }
        ));
        assert_eq!(a.reserved(), six);
        a.release(six);
        assert_eq!(a.reserved(), Demand::default());
        assert!(a.reserve(six, &work).is_ok());
    }
}
