//! nagare-api: the serde types nagare prints (`--json` reports) and reads
//! (stream configurations), shared by the binary, its HTTP API, the
//! integration tests and any other client.
//!
//! Every report type derives both `Serialize` and `Deserialize`, so a test
//! or a monitoring script parses the exact struct the binary wrote instead
//! of probing a JSON tree by key. No I/O and no logic beyond plain data
//! live here; units come from nagare-proto.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cluster;
pub mod doctor;
pub mod impair;
pub mod probe;
pub mod serve;
pub mod st2110;
pub mod stripes;
pub mod tree;
pub mod video;
