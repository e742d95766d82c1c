//! The screen-relay tree: topology kept by the coordinator, the wire
//! format and admission proof, and the per-child relay queue.

pub mod relay;
pub mod topology;
pub mod wire;

pub use topology::*;
