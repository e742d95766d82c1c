//! `nagare recv`: receives an RFC 4175 stream and records its frames. One
//! stream on one leg is [`single`]; a frame striped over several streams,
//! or any stream with a second ST 2022-7 leg, is [`stripes`]. Both read
//! their flags from [`args`] and record through [`recording`].

mod args;
mod recording;
mod single;
mod stripes;
mod writer;

use anyhow::Result;

pub(crate) use args::{AnalyzeSpec, RecvArgs, RecvConfig};
pub(crate) use recording::Segmenting;
pub(crate) use single::{Bound, print_summary, run, run_analyzed};

/// `nagare recv`.
pub(crate) fn main(args: RecvArgs) -> Result<std::process::ExitCode> {
    if stripes::wanted(&args)? {
        return stripes::main(args);
    }
    single::main(args)
}
