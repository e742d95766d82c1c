//! A stream's share of the budget (rate, work, ring memory): taken at admission, given back
//! when its table entry or its flow lets go, whichever is first. A leaf
//! shared by the table, the pacers and the sessions.

use std::sync::Arc;

use nagare_proto::serve::{Demand, Work};

use crate::cmd::serve::hub::access::Admission;

/// A reservation of the budget, given back when the flow ends.
#[derive(Debug)]
pub(crate) struct Reservation {
    admission: Arc<Admission>,
    demand: Demand,
}

impl Reservation {
    /// Takes `demand` from `admission`, or says why not.
    pub(crate) fn take(
        admission: &Arc<Admission>,
        demand: Demand,
        work: &Work,
    ) -> std::result::Result<Reservation, nagare_proto::serve::Error> {
        admission.reserve(demand, work)?;
        Ok(Reservation {
            admission: admission.clone(),
            demand,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.admission.release(self.demand);
    }
}

/// A stream's reservation, shared by its table entry and its flow: it is
/// given back as soon as either lets go (the API stopped the stream, or
/// the flow ended), not when the last of them is dropped.
pub(crate) type Held = Arc<std::sync::Mutex<Option<Reservation>>>;

/// Lets go of a held reservation.
pub(crate) fn release(held: &Held) {
    held.lock().unwrap_or_else(|p| p.into_inner()).take();
}
