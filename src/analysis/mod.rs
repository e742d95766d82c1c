//! The ST 2110-21 analysis shared by `analyze`, `recv --analyze` and the
//! ideal-receiver verdict `send` prints: the monitor's events gathered
//! into a report ([`collect`]), the verdict of a perfect receiver
//! ([`ideal`]) and how it is printed ([`output`]). Outside `cmd` so no
//! subcommand imports another for it.

pub(crate) mod collect;
pub(crate) mod ideal;
pub(crate) mod output;
