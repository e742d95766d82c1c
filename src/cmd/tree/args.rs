//! The flags of `nagare tree source` and `nagare tree join`, and the
//! values parsed from them (relay limits, the session key): a leaf the
//! source, the peer and the dispatch in `mod.rs` read.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use nagare_proto::tree::{KEY_LEN, Limits, SessionKey};

/// Arguments of `nagare tree`.
#[derive(Args)]
pub(crate) struct TreeArgs {
    #[command(subcommand)]
    pub(super) command: TreeCommand,
}

#[derive(Subcommand)]
pub(super) enum TreeCommand {
    /// Capture a screen (or play a file or pattern) and coordinate the tree.
    Source(SourceArgs),
    /// Join a tree: receive the screen, relay it to up to two children.
    Join(JoinArgs),
}

/// Arguments of `nagare tree source`.
#[derive(Args)]
pub(super) struct SourceArgs {
    /// Raw video file (packed frames of --size and --pix-fmt) or
    /// `pattern:bars`; not needed with --capture.
    #[arg(value_name = "INPUT", required_unless_present = "capture")]
    pub(super) input: Option<String>,
    /// Capture an X11 screen through MIT-SHM: `x11` (uses $DISPLAY) or `x11:DISPLAY`.
    #[arg(long, value_name = "x11[:DISPLAY]", conflicts_with = "input")]
    pub(super) capture: Option<String>,
    /// Address to listen on, for joining peers and the source's children
    /// (loopback by default: give the LAN address, or 0.0.0.0:7450, to
    /// serve other hosts; peers still need the session key).
    #[arg(long, default_value = "127.0.0.1:7450", value_name = "HOST:PORT")]
    pub(super) listen: String,
    /// Frames per second to capture: 12, 30000/1001 or 29.97.
    #[arg(long, default_value = "12")]
    pub(super) fps: String,
    /// Frame size WIDTHxHEIGHT of a file or pattern input.
    #[arg(long, default_value = "1440x900", value_name = "WxH")]
    pub(super) size: String,
    /// Pixel format of a file or pattern input: rgb24, uyvy422 (8-bit
    /// 4:2:2), uyvp (10-bit 4:2:2).
    #[arg(long = "pix-fmt", alias = "pixel-format", default_value = "rgb24")]
    pub(super) pix_fmt: String,
    /// Stop after this many frames (default: until the input ends, or forever).
    #[arg(long)]
    pub(super) frames: Option<u64>,
    /// Hold the first frame until this many peers are attached.
    #[arg(long, default_value_t = 0)]
    pub(super) wait_peers: usize,
    /// Session key as 32 hex digits (default: a fresh random one, printed).
    #[arg(long)]
    pub(super) key: Option<String>,
    /// Send a key frame every this many frames (0: only the first).
    #[arg(long, default_value_t = 120)]
    pub(super) key_interval: u64,
    /// Write statistics as JSON here when the stream ends.
    #[arg(long, value_name = "FILE")]
    pub(super) report: Option<PathBuf>,
    /// Most KiB queued for one child before it counts as lagging: it is
    /// dropped from the live stream and caught up later (default 8192).
    #[arg(long = "lag-limit", alias = "lag-limit-kib", value_name = "KIB")]
    pub(super) lag_limit_kib: Option<usize>,
}

/// Arguments of `nagare tree join`.
#[derive(Args)]
pub(super) struct JoinArgs {
    /// The source's address, as it printed it.
    #[arg(value_name = "HOST:PORT")]
    pub(super) source: String,
    /// Session key the source printed (or set NAGARE_TREE_KEY, which
    /// keeps it out of the process list).
    #[arg(long)]
    pub(super) key: Option<String>,
    /// Append every received frame (raw, packed) to this file; `-` writes
    /// them to standard output.
    #[arg(long, short, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Show the screen in an X11 window.
    #[arg(long)]
    pub(super) view: bool,
    /// Address for the relay listener that children attach to (default:
    /// the local address this host reaches the source from, any port).
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) listen: Option<String>,
    /// Give up after this many seconds without a frame or a parent.
    #[arg(long, default_value_t = 30)]
    pub(super) timeout: u64,
    /// Stop after this many frames.
    #[arg(long)]
    pub(super) frames: Option<u64>,
    /// Write statistics as JSON here when leaving.
    #[arg(long, value_name = "FILE")]
    pub(super) report: Option<PathBuf>,
    /// Most KiB queued for one of this peer's children before it counts
    /// as lagging (default 8192), as on the source.
    #[arg(long = "lag-limit", value_name = "KIB")]
    pub(super) lag_limit_kib: Option<usize>,
    /// Test only: stop reading from the parent for this many
    /// milliseconds, once, after the first few messages (a slow child).
    #[arg(long, hide = true, default_value_t = 0)]
    pub(super) stall_ms: u64,
}

/// Relay queue limits from `--lag-limit KIB`: resume at an eighth.
pub(super) fn lag_limits(kib: Option<usize>) -> anyhow::Result<Limits> {
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

pub(super) fn parse_key(text: &str) -> anyhow::Result<SessionKey> {
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

pub(super) fn format_key(key: &SessionKey) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn random_key() -> anyhow::Result<SessionKey> {
    let mut key = [0; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| {
        anyhow::anyhow!("the system's random source failed ({e}); pass --key instead")
    })?;
    Ok(key)
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
