//! One module per subcommand: each parses its arguments into a config and
//! drives nagare-proto's machines with sockets, threads, files and clocks.

pub(crate) mod analyze;
pub(crate) mod cluster;
pub(crate) mod demo;
pub(crate) mod doctor;
pub(crate) mod impair;
pub(crate) mod loadtest;
pub(crate) mod probe;
pub(crate) mod recv;
pub(crate) mod send;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod tree;
