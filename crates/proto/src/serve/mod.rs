//! The decisions of `nagare serve` that are not RTSP's: who may make the
//! server send where ([`access`]), whether a new stream fits the rate,
//! memory and predicted load budget ([`budget`]), when and what a cluster
//! leg sends ([`leg`]), whether a keyed request replays an earlier one
//! ([`idempotency`]), which ring the read-ahead thread fills next
//! ([`readahead`]), the SDP a DESCRIBE answers with ([`describe`]) and
//! how many connections a front end holds ([`Roster`]: past a cap, the
//! longest idle is evicted, for RTSP and the HTTP API alike) and how large and slow an API request may be ([`api_limits`]).
//!
//! All of it is plain functions over values: the driver keeps the shared
//! running totals (atomics), reads the clock and passes the time in as
//! [`Nanos`](crate::Nanos), and maps each [`Error`] to an HTTP or RTSP
//! status and the error's text.

pub mod access;
pub mod api_limits;
pub mod budget;
mod cidr;
pub mod describe;
mod error;
pub mod idempotency;
pub mod leg;
pub mod readahead;
mod roster;
#[cfg(test)]
mod tests;

pub use access::{AllowList, Cidr, Token};
pub use budget::{Budget, Cost, Demand, Work};
pub use error::Error;
pub use roster::Roster;
