//! One module per subcommand: each parses its arguments into a config and
//! drives nagare-proto's machines with sockets, threads, files and clocks.

pub mod analyze;
pub mod cluster;
pub mod demo;
pub mod doctor;
pub mod impair;
pub mod loadtest;
pub mod probe;
pub mod recv;
pub mod send;
pub mod serve;
pub mod shell;
pub mod tree;
