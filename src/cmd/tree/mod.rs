//! `nagare tree`: one screen to many peers over a balanced binary tree of
//! TCP relays (seed 004, SOLAR-CATS). Every protocol decision (admission,
//! placement, repair, re-attaching, what each child is sent) is made by
//! `nagare_proto::tree::{Coordinator, Peer}`; this module owns the
//! sockets ([`links`]), the threads, the clocks, the screen ([`capture`],
//! `view`) and the files.

mod capture;
mod links;
mod peer;
mod source;
#[cfg(feature = "x11")]
mod view;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use nagare_proto::tree::{KEY_LEN, Limits, SessionKey};

/// Arguments of `nagare tree`.
#[derive(Args)]
pub struct TreeArgs {
    #[command(subcommand)]
    command: TreeCommand,
}

#[derive(Subcommand)]
enum TreeCommand {
    /// Capture a screen (or play a file or pattern) and coordinate the tree.
    Source(SourceArgs),
    /// Join a tree: receive the screen, relay it to up to two children.
    Join(JoinArgs),
}

/// Arguments of `nagare tree source`.
#[derive(Args)]
pub struct SourceArgs {
    /// Raw video file (packed frames of --size and --pix-fmt) or
    /// `pattern:bars`; not needed with --capture.
    #[arg(value_name = "INPUT", required_unless_present = "capture")]
    input: Option<String>,
    /// Capture an X11 screen through MIT-SHM: `x11` (uses $DISPLAY) or `x11:DISPLAY`.
    #[arg(long, value_name = "x11[:DISPLAY]", conflicts_with = "input")]
    capture: Option<String>,
    /// Address to listen on, for joining peers and the source's children
    /// (loopback by default: give the LAN address, or 0.0.0.0:7450, to
    /// serve other hosts; peers still need the session key).
    #[arg(long, default_value = "127.0.0.1:7450", value_name = "HOST:PORT")]
    listen: String,
    /// Frames per second to capture: 12, 30000/1001 or 29.97.
    #[arg(long, default_value = "12")]
    fps: String,
    /// Frame size WIDTHxHEIGHT of a file or pattern input.
    #[arg(long, default_value = "1440x900", value_name = "WxH")]
    size: String,
    /// Pixel format of a file or pattern input: rgb24, uyvy422 (8-bit
    /// 4:2:2), uyvp (10-bit 4:2:2).
    #[arg(long = "pix-fmt", alias = "pixel-format", default_value = "rgb24")]
    pix_fmt: String,
    /// Stop after this many frames (default: until the input ends, or forever).
    #[arg(long)]
    frames: Option<u64>,
    /// Hold the first frame until this many peers are attached.
    #[arg(long, default_value_t = 0)]
    wait_peers: usize,
    /// Session key as 32 hex digits (default: a fresh random one, printed).
    #[arg(long)]
    key: Option<String>,
    /// Send a key frame every this many frames (0: only the first).
    #[arg(long, default_value_t = 120)]
    key_interval: u64,
    /// Write statistics as JSON here when the stream ends.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Most KiB queued for one child before it counts as lagging: it is
    /// dropped from the live stream and caught up later (default 8192).
    #[arg(long = "lag-limit", alias = "lag-limit-kib", value_name = "KIB")]
    lag_limit_kib: Option<usize>,
}

/// Arguments of `nagare tree join`.
#[derive(Args)]
pub struct JoinArgs {
    /// The source's address, as it printed it.
    #[arg(value_name = "HOST:PORT")]
    source: String,
    /// Session key the source printed (or set NAGARE_TREE_KEY, which
    /// keeps it out of the process list).
    #[arg(long)]
    key: Option<String>,
    /// Append every received frame (raw, packed) to this file; `-` writes
    /// them to standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Show the screen in an X11 window.
    #[arg(long)]
    view: bool,
    /// Address for the relay listener that children attach to (default:
    /// the local address this host reaches the source from, any port).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Give up after this many seconds without a frame or a parent.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Stop after this many frames.
    #[arg(long)]
    frames: Option<u64>,
    /// Write statistics as JSON here when leaving.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Most KiB queued for one of this peer's children before it counts
    /// as lagging (default 8192), as on the source.
    #[arg(long = "lag-limit", value_name = "KIB")]
    lag_limit_kib: Option<usize>,
    /// Test only: stop reading from the parent for this many
    /// milliseconds, once, after the first few messages (a slow child).
    #[arg(long, hide = true, default_value_t = 0)]
    stall_ms: u64,
}

/// Runs `nagare tree`.
pub fn run(args: TreeArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        TreeCommand::Source(a) => source::run(a),
        TreeCommand::Join(a) => peer::run(a),
    }
}

/// Microseconds since the Unix epoch: capture timestamps travel with
/// frames, so latency is comparable across peers on one clock.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Relay queue limits from `--lag-limit KIB`: resume at an eighth.
fn lag_limits(kib: Option<usize>) -> anyhow::Result<Limits> {
    let Some(kib) = kib else {
        return Ok(Limits::default());
    };
    if kib < 64 {
        anyhow::bail!(
            "--lag-limit {kib} KiB cannot hold a frame of screen updates; give at least 64"
        );
    }
    let lag = kib.saturating_mul(1024);
    Ok(Limits {
        lag,
        resume: lag / 8,
    })
}

fn parse_key(text: &str) -> anyhow::Result<SessionKey> {
    let text = text.trim();
    let bad = || {
        anyhow::anyhow!(
            "session key {text:?} is not {} hex digits; copy the key that `nagare tree source` printed",
            2 * KEY_LEN
        )
    };
    if text.len() != 2 * KEY_LEN || !text.is_ascii() {
        return Err(bad());
    }
    let mut key = [0; KEY_LEN];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(key)
}

fn format_key(key: &SessionKey) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_key() -> anyhow::Result<SessionKey> {
    let mut key = [0; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| {
        anyhow::anyhow!("the system's random source failed ({e}); pass --key instead")
    })?;
    Ok(key)
}

/// A frame fingerprint for reports (xxh3 of the pixels), so tests
/// compare what every peer decoded without storing every frame.
fn fingerprint(pixels: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(pixels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_bad_ones_are_named() {
        let key = parse_key("00112233445566778899aabbccddeeff").unwrap();
        assert_eq!(format_key(&key), "00112233445566778899aabbccddeeff");
        let e = parse_key("xyz").unwrap_err().to_string();
        assert!(e.contains("\"xyz\"") && e.contains("32 hex digits"), "{e}");
        assert!(parse_key("0011223344556677889900aabbccddeg").is_err());
    }
}
