//! AMWA NMOS IS-04 (discovery and registration) and IS-05 (connection
//! management), sans-IO.
//!
//! - [`resource`]: the v1.3 resources as serde types (node, device,
//!   source, flow, sender, receiver).
//! - [`model`]: a serve node's resources built from its paths and push
//!   streams ([`NodeSpec`]), with ids derived from the node id
//!   ([`ResourceId::derive`]) so they survive restarts.
//! - [`Store`]: the resources with versions that move only on change.
//! - [`TaiTime`]: versions (and later IS-05 activation times) as TAI
//!   `seconds:nanoseconds`.
//! - [`Registrar`]: registration, heartbeats, re-registration and
//!   registry failover on the caller's time.
//! - [`discovery`]: which registries a DNS-SD answer names, in order.
//! - [`connection`]: IS-05 staging and activation of one sender or
//!   receiver ([`Connection`]), on the caller's TAI time.
//!
//! The drivers (HTTP server, HTTP client, DNS client) live in the binary.

pub mod connection;
pub mod discovery;
mod id;
pub mod model;
pub mod registration;
pub mod resource;
mod store;
#[cfg(test)]
mod tests;
mod version;

pub use connection::Connection;
pub use id::ResourceId;
pub use model::{NodeSpec, PathSpec, StreamSpec, StripeSenderSpec};
pub use registration::{Registrar, Registry};
pub use resource::{Kind, Resource};
pub use store::Store;
pub use version::{TAI_MINUS_UTC_SECS, TaiTime};
