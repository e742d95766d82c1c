//! `nagare recv`: receives an RFC 4175 stream and records its frames. One
//! stream on one leg is the receive engine's single path
//! ([`crate::engine::recv`], which `demo` and `analyze --listen` run too);
//! a frame striped over several streams, or any stream with a second
//! ST 2022-7 leg, is [`stripes`]. Both read their flags from the engine's
//! `RecvArgs` and record through its writer. With `--nmos` it is an NMOS
//! node whose controller says what to receive ([`nmos`]).

mod nmos;
mod stripes;

use anyhow::{Result, bail};

use crate::engine::recv::{Bound, RecvArgs, format_hint, print_summary, run};
use crate::net::placement::{Placement, Role};

/// `nagare recv`.
pub(crate) fn main(args: RecvArgs) -> Result<std::process::ExitCode> {
    if args.nmos {
        return nmos::main(args);
    }
    if args.registration.source().is_some() || args.registration.state_dir.is_some() {
        anyhow::bail!(
            "--registry, --nmos-dns, --nmos-mdns and --state-dir are for an NMOS receiver: add --nmos"
        );
    }
    if stripes::wanted(&args)? {
        return stripes::main(args);
    }
    single(args)
}

/// `nagare recv` of one stream on one leg.
fn single(args: RecvArgs) -> Result<std::process::ExitCode> {
    let cfg = args.config()?;
    if args.json && cfg.output.as_deref().is_some_and(crate::cli::is_stdio) {
        bail!("--json prints on stdout, where -o - writes the frames: drop one, or give -o a file");
    }
    let bound = Bound::open_noting(&cfg, args.rtcp)?;
    if let Some(a) = bound.local_addr() {
        eprintln!("nagare recv: listening on {a}");
    }
    // Receive threads take the lowest CPUs and every other thread stays
    // off the highest, a local sender's (net::placement); the writer
    // thread, started by `run` after this, goes to the helper CPUs.
    let placement = Placement::new(args.cpu);
    placement.apply(Role::Helper { pacers: 0 })?;
    placement.apply(Role::Receive { index: 0 })?;
    if args.realtime {
        crate::net::tuning::realtime()?;
    }
    let report = run(&cfg, bound, crate::signal::stop_flag())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    if let Some(h) = format_hint(&report, &cfg.format) {
        eprintln!("{h}");
    }
    if let Some(e) = &report.output_error {
        eprintln!("nagare recv: error: {e}");
        return Ok(std::process::ExitCode::from(2));
    }
    Ok(if report.all_complete {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
