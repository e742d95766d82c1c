//! The front ends: RTSP sessions, the HTTP API and the Prometheus metrics, each turning requests into calls on the hub.

pub(crate) mod http;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod rtsp;
mod tenants;
