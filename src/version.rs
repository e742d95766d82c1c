//! This build's version, shared by `--version` and the reports that name
//! the build (a leaf, so no subcommand imports `main`).

/// This build's version: the crate's, and the git commit it was built
/// from when built in a checkout (see build.rs).
pub(crate) const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("NAGARE_VERSION_SUFFIX"));
