//! `nagare serve`: real RTSP players, the HTTP API and its refusals, RTSP
//! sessions, and 100 concurrent streams, all on loopback.

mod api;
mod auth;
pub(crate) mod harness;
mod hostile;
mod idle;
mod load;
mod loadtest;
mod nmos;
mod players;
mod rtsp;
