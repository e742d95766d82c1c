//! `nagare serve`: real RTSP players, the HTTP API and its refusals, RTSP
//! sessions, and 100 concurrent streams, all on loopback.

mod api;
mod auth;
mod example;
pub(crate) mod harness;
mod hostile;
mod idle;
mod is05;
mod load;
mod loadtest;
mod logs;
mod nmos;
mod nmos_recv;
mod openapi;
mod players;
mod rtcp;
mod rtsp;
