//! `nagare recv`: receives an RFC 4175 stream and records its frames. One
//! stream on one leg is [`single`]; a frame striped over several streams,
//! or any stream with a second ST 2022-7 leg, is [`stripes`]. Both read
//! their flags from [`args`] and record through [`recording`]. With
//! `--nmos` it is an NMOS node whose controller says what to receive
//! ([`nmos`]).

mod args;
mod nmos;
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
    if args.nmos {
        return nmos::main(args);
    }
    if args.registration.source().is_some() || args.registration.state_dir.is_some() {
        anyhow::bail!(
            "--registry, --nmos-dns and --state-dir are for an NMOS receiver: add --nmos"
        );
    }
    if stripes::wanted(&args)? {
        return stripes::main(args);
    }
    single::main(args)
}
