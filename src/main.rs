//! nagare: uncompressed video over IP at multi-gigabit rates.
//!
//! This binary is the thin, I/O-owning shell around `nagare-proto`: it
//! parses the command line, opens sockets and files, runs threads and
//! reads clocks. Each subcommand's driver lives in its own module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod tree;

#[derive(Parser)]
#[command(name = "nagare", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // Subcommands are added here, one module each.
    /// One screen to many peers over a balanced binary tree of TCP relays.
    Tree(tree::TreeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: anyhow::Result<ExitCode> = match cli.command {
        Command::Tree(args) => tree::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nagare: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
