//! `nagare tree`: one screen to many peers over a balanced binary tree of
//! TCP relays (seed 004, SOLAR-CATS). Every protocol decision (admission,
//! placement, repair, re-attaching, what each child is sent) is made by
//! `nagare_proto::tree::{Coordinator, Peer}`; this module owns the
//! sockets ([`links`]), the threads, the clocks, the screen ([`capture`],
//! `view`) and the files.

mod args;
mod capture;
mod links;
mod peer;
mod source;
mod stamp;
#[cfg(feature = "x11")]
mod view;

use std::process::ExitCode;

pub(crate) use args::TreeArgs;
use args::TreeCommand;

/// Runs `nagare tree`.
pub(crate) fn run(args: TreeArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        TreeCommand::Source(a) => source::run(a),
        TreeCommand::Join(a) => peer::run(a),
    }
}
