//! The bounds of serve's HTTP API: how many connections it holds, and how
//! large and how slow a request may be. The listener in the binary builds
//! its HTTP server from these, and the fuzz target `http_request` builds
//! the same server from them, so what is fuzzed is what runs.
//!
//! Each bound is answered the way HTTP says (docs/serve.md has the table):
//! past the connection caps the longest idle connection gives way
//! ([`Roster`](super::Roster)); a head too large is `431`, one too slow is
//! closed; a body too large is `413`, too slow `408`.

use crate::units::Nanos;

/// Open connections at most.
pub const MAX_CONNECTIONS: usize = 256;
/// Open connections from one client address at most.
pub const MAX_PER_ADDRESS: usize = 32;
/// Time a client has to send a request's head.
pub const HEAD_TIMEOUT: Nanos = Nanos::from_secs(10);
/// Largest request head (request line and headers) read (hyper's
/// smallest read buffer is 8 KiB).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header lines in one request.
pub const MAX_HEADERS: usize = 64;
/// Largest request body read.
pub const MAX_BODY: u64 = 64 * 1024;
/// Time a client has to send a request's body.
pub const BODY_TIMEOUT: Nanos = Nanos::from_secs(10);
/// Longest a connection stays open, however busy: a client that
/// pipelines requests and never reads the answers is dropped with it.
pub const CONNECTION_LIFETIME: Nanos = Nanos::from_secs(60);
