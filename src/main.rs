//! nagare: uncompressed video over IP at multi-gigabit rates.
//!
//! This binary is the thin, I/O-owning shell around `nagare-proto`: it
//! parses the command line, opens sockets and files, runs threads and
//! reads clocks. Each subcommand's driver lives in its own module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod impair;
mod probe;

#[derive(Parser)]
#[command(name = "nagare", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // Subcommands are added here, one module each.
    /// Check whether a path carries a stream: paced RTP test stream, loss, bursts, reordering, jitter, PDV, RTT, verdict.
    Probe(probe::ProbeArgs),
    /// User-space UDP relay that impairs traffic like netem: loss, bursts, reordering, duplicates, delay, rate.
    Impair(impair::ImpairArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: anyhow::Result<ExitCode> = match cli.command {
        Command::Probe(a) => probe::run(a),
        Command::Impair(a) => impair::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nagare: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
