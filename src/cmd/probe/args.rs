//! The flags of `nagare probe server` and `nagare probe client`: a leaf
//! the server, the client and the dispatch in `mod.rs` read.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Default port of the probe server (TCP control and UDP test stream).
pub(super) const DEFAULT_PORT: u16 = 5201;

/// `nagare probe`.
#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    #[command(subcommand)]
    pub(super) role: Role,
}

#[derive(Subcommand, Debug)]
pub(super) enum Role {
    /// Answer probe clients, one test at a time (TCP control and UDP test
    /// stream on the same port). `-s`, as iperf3 writes it.
    #[command(short_flag = 's')]
    Server(ServerArgs),
    /// Run one test against a probe server and print the report. `-c
    /// HOST`, as iperf3 writes it.
    #[command(short_flag = 'c')]
    Client(ClientArgs),
}

/// `nagare probe server`.
#[derive(Args, Debug)]
pub(super) struct ServerArgs {
    /// Address to listen on; port 0 picks a free one (printed on stderr).
    #[arg(long, default_value = "127.0.0.1:5201")]
    pub(super) listen: SocketAddr,
    /// Token clients must present; required when listening beyond loopback.
    #[arg(long)]
    pub(super) token: Option<String>,
    /// Exit after this many tests (default: run until killed).
    #[arg(long)]
    pub(super) tests: Option<u64>,
    /// Highest stream rate a client may ask for, with k/M/G suffixes
    /// (default: unlimited on loopback, 10G when listening beyond it, so
    /// a client cannot make the server flood a path by accident).
    #[arg(long)]
    pub(super) max_rate: Option<String>,
}

/// `nagare probe client`.
#[derive(Args, Debug)]
pub(super) struct ClientArgs {
    /// The probe server, HOST:PORT (PORT defaults to 5201).
    pub(super) server: String,
    /// Stream rate: bits of UDP payload per second, with k/M/G suffixes
    /// (100k to what the machine can do). Default: the profile's, or 6M.
    #[arg(short = 'b', long, visible_alias = "bitrate")]
    pub(super) rate: Option<String>,
    /// Test length in seconds.
    #[arg(short = 't', long, visible_alias = "time", default_value_t = 5.0)]
    pub(super) duration: f64,
    /// UDP payload bytes per packet (default: the profile's; 1440, as
    /// send's, without one; mpeg2-ts 1316, 8k-stripe 8800).
    #[arg(short = 'l', long, visible_alias = "length")]
    pub(super) packet_size: Option<u32>,
    /// Group packets into video frames at this rate (30, 59.94, 60000/1001).
    #[arg(long)]
    pub(super) fps: Option<String>,
    /// Judge against a stream profile: generic, mpeg2-ts, hd-2110, 8k-stripe.
    #[arg(long)]
    pub(super) profile: Option<String>,
    /// Parallel streams, each at --rate (as iperf3's -P): the report has
    /// a row per stream and their total.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub(super) parallel: u32,
    /// The server sends and this client receives.
    #[arg(short = 'R', long)]
    pub(super) reverse: bool,
    /// Both ends send at once, each at --rate with -P streams, and each
    /// measures what it receives (as iperf3's --bidir): the report shows
    /// both directions side by side, each with its own verdict.
    #[arg(long, conflicts_with = "reverse")]
    pub(super) bidir: bool,
    /// Print the report as JSON (no live interval lines).
    #[arg(short = 'J', long)]
    pub(super) json: bool,
    /// Write one CSV line per received packet (seq, send and receive time).
    #[arg(long, value_name = "FILE.csv")]
    pub(super) log: Option<PathBuf>,
    /// Draw rate (against the set rate), loss and delay variation over
    /// time into a PNG.
    #[arg(long, value_name = "FILE.png")]
    pub(super) plot: Option<PathBuf>,
    /// Write one self-contained HTML page: verdict and reasons, key
    /// numbers, the plot inline and the whole report.
    #[arg(long, value_name = "FILE.html")]
    pub(super) html: Option<PathBuf>,
    /// Receiver's playout buffer in ms: packets later than their slot plus
    /// this are late (default: the profile's).
    #[arg(long)]
    pub(super) playout: Option<f64>,
    /// Shortest run of consecutive losses counted as a Sperf burst loss.
    #[arg(long, default_value_t = 5)]
    pub(super) burst_threshold: u32,
    /// Longest train of packets sent back to back, in microseconds of
    /// schedule, as `nagare send --burst-us` (bigger trains cost less CPU,
    /// smaller ones burst less; 0 sends packet by packet).
    #[arg(long, default_value_t = nagare_proto::probe::DEFAULT_BURST_US)]
    pub(super) burst_us: u64,
    /// Reporting interval of the live lines and the time series, seconds.
    #[arg(short = 'i', long, default_value_t = 1.0)]
    pub(super) interval: f64,
    /// Token the server asks for.
    #[arg(long)]
    pub(super) token: Option<String>,
}
