//! The shared holder of serve's budget. Who may make the server send
//! where, the token and the budget's rule live in `nagare_proto::serve`;
//! this file keeps only the running total that RTSP sessions, the HTTP
//! API and the flows change from many threads at once.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nagare_proto::serve::budget::PROVING_TIME;
use nagare_proto::serve::{Budget, Demand, Error, Work};

/// What the admitted streams have reserved, checked against a
/// [`Budget`].
#[derive(Debug)]
pub(crate) struct Admission {
    budget: Budget,
    ledger: Mutex<Ledger>,
}

/// The reserved total, and the admissions still within
/// [`PROVING_TIME`] (a stream stopped early stays there until its time
/// is up: counting it a little longer only errs on the safe side).
#[derive(Debug, Default)]
struct Ledger {
    reserved: Demand,
    recent: VecDeque<(Instant, Demand)>,
}

impl Ledger {
    /// What the admissions within the proving time ask, the older ones
    /// forgotten.
    fn unproven(&mut self) -> Demand {
        let proving = Duration::from_nanos(PROVING_TIME.as_nanos());
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| t.elapsed() > proving)
        {
            self.recent.pop_front();
        }
        self.recent
            .iter()
            .fold(Demand::default(), |sum, (_, d)| sum.plus(*d))
    }
}

impl Admission {
    /// The budget of `--max-rate`, `--max-load` and `--max-memory`.
    pub(crate) fn new(budget: Budget) -> Admission {
        Admission {
            budget,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// Reserves `demand` for a new stream, or says why not. One lock
    /// around the check and the update: two admissions racing each see
    /// the other's reservation, so together they never pass the budget.
    pub(crate) fn reserve(&self, demand: Demand, work: &Work) -> Result<(), Error> {
        let mut ledger = self.lock();
        let work = Work {
            unproven: ledger.unproven(),
            ..*work
        };
        ledger.reserved = self.budget.admit(ledger.reserved, demand, &work)?;
        ledger.recent.push_back((Instant::now(), demand));
        Ok(())
    }

    /// Gives back what [`Admission::reserve`] took.
    pub(crate) fn release(&self, demand: Demand) {
        let mut ledger = self.lock();
        ledger.reserved = ledger.reserved.minus(demand);
    }

    /// What is reserved now.
    pub(crate) fn reserved(&self) -> Demand {
        self.lock().reserved
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
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
            cores: 1,
            slack: Default::default(),
            unproven: Demand::default(),
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
