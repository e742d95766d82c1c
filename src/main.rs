//! nagare: uncompressed video over IP at multi-gigabit rates.
//!
//! This binary is the thin, I/O-owning shell around `nagare-proto`: it
//! parses the command line, opens sockets and files, runs threads and
//! reads clocks. Each subcommand's driver lives in its own module.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unreachable_pub)]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod analysis;
mod cli;
mod clock;
mod cmd;
mod engine;
mod lateness;
mod logging;
mod net;
mod nmos;
mod plot;
mod progress;
mod signal;
mod source;
mod version;

#[derive(Parser)]
#[command(name = "nagare", version = version::VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: logging::LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Send a raw video file, a directory of frames or a test pattern as a
    /// paced RFC 4175 / ST 2110-20 RTP stream.
    Send(cmd::send::SendArgs),
    /// Receive an RFC 4175 stream, reassemble and record its frames.
    Recv(engine::recv::RecvArgs),
    /// ST 2110-21 analysis of a stream, live or from a pcap: Cinst, VRX,
    /// FPT, RTP offset and latency per frame, and the N/NL/W verdict.
    Analyze(cmd::analyze::AnalyzeArgs),
    /// Send a test pattern to a receiver on loopback and prove every frame
    /// arrives identical. Needs no files and no flags.
    Demo(cmd::demo::DemoArgs),
    /// Check that this host is set up for a planned stream (buffers,
    /// backlog, MTU, multicast route, clock) and print the fixes.
    Doctor(cmd::doctor::DoctorArgs),
    /// One screen to many peers over a balanced binary tree of TCP relays.
    Tree(cmd::tree::TreeArgs),
    /// Check whether a path carries a stream: paced RTP test stream, loss, bursts, reordering, jitter, PDV, RTT, verdict.
    Probe(cmd::probe::ProbeArgs),
    /// User-space UDP relay that impairs traffic like netem: loss, bursts, reordering, duplicates, delay, rate.
    Impair(cmd::impair::ImpairArgs),
    /// Stream server: RTSP (raw video, MPEG-TS, test pattern) and push
    /// streams from one paced schedule, an HTTP JSON API and /metrics.
    Serve(cmd::serve::ServeArgs),
    /// How many streams a server carries before frames drop: ramps RTSP
    /// clients or push streams, measures loss, jitter and server CPU.
    Loadtest(cmd::loadtest::LoadtestArgs),
    /// One stream striped over several serve nodes: start, stop, status,
    /// and hitless move of a stripe between nodes (cluster.toml).
    Cluster(cmd::cluster::ClusterArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::shell::CompletionsArgs),
    /// Print the man page (roff), of nagare or of one subcommand.
    Man(cmd::shell::ManArgs),
}

impl Command {
    /// The subcommand's name, as each log line starts with it.
    fn name(&self) -> &'static str {
        match self {
            Command::Send(_) => "send",
            Command::Recv(_) => "recv",
            Command::Analyze(_) => "analyze",
            Command::Demo(_) => "demo",
            Command::Doctor(_) => "doctor",
            Command::Tree(_) => "tree",
            Command::Probe(_) => "probe",
            Command::Impair(_) => "impair",
            Command::Serve(_) => "serve",
            Command::Loadtest(_) => "loadtest",
            Command::Cluster(_) => "cluster",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(&cli.log, cli.command.name()) {
        eprintln!("nagare: error: {e:#}");
        return ExitCode::from(2);
    }
    signal::install();
    net::placement::note_start_cpus();
    net::tuning::raise_open_files();
    let result: anyhow::Result<ExitCode> = match cli.command {
        Command::Send(a) => cmd::send::main(a),
        Command::Recv(a) => cmd::recv::main(a),
        // analyze's histograms are its `-v`: one flag for "more".
        Command::Analyze(a) => cmd::analyze::main(cmd::analyze::AnalyzeArgs {
            verbose: a.verbose || cli.log.verbose > 0,
            ..a
        }),
        Command::Demo(a) => cmd::demo::main(a),
        Command::Doctor(a) => cmd::doctor::main(a),
        Command::Tree(a) => cmd::tree::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Impair(a) => cmd::impair::run(a),
        Command::Serve(a) => cmd::serve::main(a),
        Command::Loadtest(a) => cmd::loadtest::main(a),
        Command::Cluster(a) => cmd::cluster::main(a),
        Command::Completions(a) => cmd::shell::completions(&a, Cli::command()),
        Command::Man(a) => cmd::shell::man(&a, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nagare: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
