//! `nagare probe`: tells whether a path carries a stream, by sending a
//! paced RTP test stream of that shape (after Sperf) and measuring what
//! arrives. The server is a long-running responder that logs each test;
//! both ends print a line per interval as the test runs, and the client
//! prints the whole report. Flags follow iperf3 where it has them.

mod args;
mod client;
mod html;
mod link;
mod output;
mod plot;
mod server;
mod stream;

use std::process::ExitCode;

use anyhow::Result;

pub(crate) use args::ProbeArgs;
use args::Role;

/// Runs `nagare probe`.
pub(crate) fn run(args: ProbeArgs) -> Result<ExitCode> {
    match args.role {
        Role::Server(a) => server::run(a),
        Role::Client(a) => client::run(a),
    }
}
