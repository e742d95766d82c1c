//! `nagare completions SHELL` and `nagare man`: shell completion scripts
//! and the man page, generated from the command-line definitions so they
//! always match the flags.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;

/// `nagare completions`.
#[derive(Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. Install, e.g.:
    /// `nagare completions bash > /etc/bash_completion.d/nagare`.
    shell: Shell,
}

/// `nagare man`.
#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// The page of this subcommand (`nagare man probe` is nagare-probe(1));
    /// the top-level nagare(1) without it.
    subcommand: Option<String>,
}

/// Prints the completion script for `a.shell` of `cmd`.
pub(crate) fn completions(a: &CompletionsArgs, mut cmd: Command) -> Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "nagare", &mut out);
    write_stdout(&out)
}

/// Prints the roff man page of `cmd` (or of one subcommand).
pub(crate) fn man(a: &ManArgs, cmd: Command) -> Result<ExitCode> {
    let cmd = match &a.subcommand {
        None => cmd,
        Some(name) => {
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            let sub = cmd.find_subcommand(name).cloned().with_context(|| {
                format!("no subcommand {name:?}; there are: {}", names.join(", "))
            })?;
            sub.name(format!("nagare-{name}"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .context("rendering the man page")?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<ExitCode> {
    let mut o = std::io::stdout().lock();
    // A closed pipe (| head) is not an error worth reporting.
    let _ = o.write_all(bytes).and_then(|_| o.flush());
    Ok(ExitCode::SUCCESS)
}
