//! The core, as MediaMTX's `internal/core`: the server that owns the stream table, the catalog of paths, access (allow-list, token, admission) and bandwidth reservations.

pub(crate) mod access;
pub(crate) mod media;
pub(crate) mod reservation;
pub(crate) mod server;
pub(crate) mod table;
