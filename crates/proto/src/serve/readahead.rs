//! Which stream's ring the read-ahead thread fills next. One thread
//! serves every ring, so the order is the whole policy: the ring that
//! runs dry first is read first, and among rings equally urgent the
//! higher priority goes first.

use crate::Nanos;

/// One ring as the read-ahead thread sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFill {
    /// The stream's id.
    pub id: u64,
    /// When the ring runs dry if nothing more is read (on the driver's
    /// timeline): the time it was looked at plus the play time it holds.
    pub due: Nanos,
    /// Read-ahead priority (higher reads first among equals).
    pub priority: u8,
    /// Whether the ring has a free buffer to read into; a full ring
    /// cannot take a read and is left out.
    pub room: bool,
}

/// The ids of rings with room, in the order to read them at `now`.
///
/// A ring already due (its `due` at or before `now`) has run dry: how
/// long ago no longer matters, every such ring is as urgent as one due
/// right now, so priority alone orders them. The rest go earliest `due`
/// first, then priority, then id (so the order is the same every time).
pub fn due_order(now: Nanos, rings: &[RingFill]) -> Vec<u64> {
    let mut due: Vec<(Nanos, std::cmp::Reverse<u8>, u64)> = rings
        .iter()
        .filter(|r| r.room)
        .map(|r| (r.due.max(now), std::cmp::Reverse(r.priority), r.id))
        .collect();
    due.sort_unstable();
    due.into_iter().map(|(_, _, id)| id).collect()
}
