//! `nagare probe`: tells whether a path carries a stream, by sending a
//! paced RTP test stream of that shape (after Sperf) and measuring what
//! arrives. The server is a long-running responder that logs each test;
//! both ends print a line per interval as the test runs, and the client
//! prints the whole report. Flags follow iperf3 where it has them.

mod client;
mod html;
mod link;
mod output;
pub mod plot;
mod server;
mod stream;

pub use stream::{any_for, bind as bind_udp};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

/// Default port of the probe server (TCP control and UDP test stream).
pub const DEFAULT_PORT: u16 = 5201;

/// `nagare probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Answer probe clients, one test at a time (TCP control and UDP test
    /// stream on the same port).
    Server(ServerArgs),
    /// Run one test against a probe server and print the report.
    Client(ClientArgs),
}

/// `nagare probe server`.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address to listen on; port 0 picks a free one (printed on stderr).
    #[arg(long, default_value = "127.0.0.1:5201")]
    listen: SocketAddr,
    /// Token clients must present; required when listening beyond loopback.
    #[arg(long)]
    token: Option<String>,
    /// Exit after this many tests (default: run until killed).
    #[arg(long)]
    tests: Option<u64>,
    /// Highest stream rate a client may ask for, with k/M/G suffixes
    /// (default: unlimited on loopback, 10G when listening beyond it, so
    /// a client cannot make the server flood a path by accident).
    #[arg(long)]
    max_rate: Option<String>,
}

/// `nagare probe client`.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The probe server, HOST:PORT (PORT defaults to 5201).
    server: String,
    /// Stream rate: bits of UDP payload per second, with k/M/G suffixes
    /// (100k to what the machine can do). Default: the profile's, or 6M.
    #[arg(short = 'b', long, visible_alias = "bitrate")]
    rate: Option<String>,
    /// Test length in seconds.
    #[arg(short = 't', long, visible_alias = "time", default_value_t = 5.0)]
    duration: f64,
    /// UDP payload bytes per packet (default: the profile's; 1440, as
    /// send's, without one; mpeg2-ts 1316, 8k-stripe 8800).
    #[arg(short = 'l', long, visible_alias = "length")]
    packet_size: Option<u32>,
    /// Group packets into video frames at this rate (30, 59.94, 60000/1001).
    #[arg(long)]
    fps: Option<String>,
    /// Judge against a stream profile: generic, mpeg2-ts, hd-2110, 8k-stripe.
    #[arg(long)]
    profile: Option<String>,
    /// Parallel streams, each at --rate (as iperf3's -P): the report has
    /// a row per stream and their total.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    parallel: u32,
    /// The server sends and this client receives.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// Both ends send at once, each at --rate with -P streams, and each
    /// measures what it receives (as iperf3's --bidir): the report shows
    /// both directions side by side, each with its own verdict.
    #[arg(long, conflicts_with = "reverse")]
    bidir: bool,
    /// Print the report as JSON (no live interval lines).
    #[arg(short = 'J', long)]
    json: bool,
    /// Write one CSV line per received packet (seq, send and receive time).
    #[arg(long, value_name = "FILE.csv")]
    log: Option<PathBuf>,
    /// Draw rate (against the set rate), loss and delay variation over
    /// time into a PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Write one self-contained HTML page: verdict and reasons, key
    /// numbers, the plot inline and the whole report.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Receiver's playout buffer in ms: packets later than their slot plus
    /// this are late (default: the profile's).
    #[arg(long)]
    playout: Option<f64>,
    /// Shortest run of consecutive losses counted as a Sperf burst loss.
    #[arg(long, default_value_t = 5)]
    burst_threshold: u32,
    /// Longest train of packets sent back to back, in microseconds of
    /// schedule, as `nagare send --burst-us` (bigger trains cost less CPU,
    /// smaller ones burst less; 0 sends packet by packet).
    #[arg(long, default_value_t = nagare_proto::probe::DEFAULT_BURST_US)]
    burst_us: u64,
    /// Reporting interval of the live lines and the time series, seconds.
    #[arg(short = 'i', long, default_value_t = 1.0)]
    interval: f64,
    /// Token the server asks for.
    #[arg(long)]
    token: Option<String>,
}

/// Runs `nagare probe`.
pub fn run(args: ProbeArgs) -> Result<ExitCode> {
    match args.role {
        Role::Server(a) => server::run(a),
        Role::Client(a) => client::run(a),
    }
}
