//! Drivers that more than one subcommand runs, so that no subcommand
//! (`src/cmd/X`) uses another: the send engine (`send`, `demo`) and the
//! receive engine (`recv`, `demo`, `analyze --listen`). Each is a driver
//! like any other, held to the same rules: it moves bytes and time, and
//! every decision is nagare-proto's.

pub(crate) mod recv;
pub(crate) mod send;
