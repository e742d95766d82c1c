//! `nagare tree`: one screen to many peers over a balanced binary tree of
//! TCP relays (seed 004, SOLAR-CATS). The source captures, encodes with
//! the screen codec and coordinates the tree; each peer relays every
//! chunk to its at most two children as it arrives. The topology model,
//! the codec and the wire format live in nagare-proto; this module owns
//! sockets, threads, clocks and the screen.

mod capture;
mod fanout;
mod peer;
mod source;
mod view;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use nagare_proto::tree::wire::{self as tree_wire, Control, KEY_LEN, NONCE_LEN, Nonce, SessionKey};

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
    /// Raw video file (packed frames of --size and --pixel-format) or
    /// `pattern:bars`; not needed with --capture.
    #[arg(value_name = "INPUT", required_unless_present = "capture")]
    input: Option<String>,
    /// Capture an X11 screen through MIT-SHM: `x11` (uses $DISPLAY) or `x11:DISPLAY`.
    #[arg(long, value_name = "x11[:DISPLAY]", conflicts_with = "input")]
    capture: Option<String>,
    /// Address to listen on, for joining peers and the source's children.
    #[arg(long, default_value = "0.0.0.0:7450", value_name = "HOST:PORT")]
    listen: String,
    /// Frames per second to capture.
    #[arg(long, default_value = "12")]
    fps: String,
    /// Frame size of a file or pattern input.
    #[arg(long, default_value = "1440x900", value_name = "WxH")]
    size: String,
    /// Pixel format of a file or pattern input (rgb24, uyvy422, uyvp).
    #[arg(long, default_value = "rgb24")]
    pixel_format: String,
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
    /// Test only: queue limit per child in KiB (default 8192), so a test
    /// can make a stalled child lag with little data.
    #[arg(long, hide = true)]
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
    /// Append every received frame (raw, packed) to this file.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Show the screen in an X11 window.
    #[arg(long)]
    view: bool,
    /// Address for the relay listener that children attach to.
    #[arg(long, default_value = "0.0.0.0:0", value_name = "HOST:PORT")]
    listen: String,
    /// Give up after this many seconds without a frame or a parent.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Stop after this many frames.
    #[arg(long)]
    frames: Option<u64>,
    /// Write statistics as JSON here when leaving.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
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
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
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

/// Sends a fresh challenge on a connection just accepted and returns it:
/// the newcomer must answer with a proof for this nonce.
fn challenge(stream: &mut TcpStream) -> anyhow::Result<Nonce> {
    let mut nonce = [0; NONCE_LEN];
    getrandom::fill(&mut nonce)
        .map_err(|e| anyhow::anyhow!("the system's random source failed ({e})"))?;
    send(stream, &Control::Challenge { nonce })?;
    Ok(nonce)
}

/// Reads the challenge the accepting side opens with.
fn read_challenge(stream: &mut TcpStream, whom: &str) -> anyhow::Result<Nonce> {
    let c = read_control(stream).with_context(|| format!("waiting for {whom}'s challenge"))?;
    check_no_refusal(&c, whom)?;
    match c {
        Control::Challenge { nonce } => Ok(nonce),
        other => bail!(
            "{whom} opened with {other:?} instead of a challenge; is it a `nagare tree` of the same version?"
        ),
    }
}

/// Reads one framed message (header included), refusing oversized ones
/// before allocating.
fn read_message(stream: &mut impl Read) -> anyhow::Result<Vec<u8>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = tree_wire::body_len(header)?;
    let mut msg = vec![0u8; 4 + len];
    msg[..4].copy_from_slice(&header);
    stream.read_exact(&mut msg[4..])?;
    Ok(msg)
}

/// Reads a message that must be a control message.
fn read_control(stream: &mut impl Read) -> anyhow::Result<Control> {
    let msg = read_message(stream)?;
    let (kind, body) = tree_wire::split(&msg)?;
    Control::parse(kind, body)?
        .ok_or_else(|| anyhow::anyhow!("expected a control message, got {kind:?}"))
}

fn send(stream: &mut TcpStream, msg: &Control) -> anyhow::Result<()> {
    stream.write_all(&msg.to_bytes())?;
    Ok(())
}

fn refuse(stream: &mut TcpStream, reason: &str) {
    let _ = send(
        stream,
        &Control::Refused {
            reason: reason.to_owned(),
        },
    );
}

/// A 64-bit frame fingerprint (FNV-style over 8-byte words, so it costs
/// little next to decoding): reports carry one per frame, so tests compare
/// what every peer decoded without storing every frame.
fn fingerprint(data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(8);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(a)).wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn resolve(addr: &str, what: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .with_context(|| format!("{what} {addr:?} is not HOST:PORT"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{what} {addr:?} resolves to no address"))
}

fn check_no_refusal(c: &Control, whom: &str) -> anyhow::Result<()> {
    if let Control::Refused { reason } = c {
        bail!("{whom} refused: {reason}");
    }
    Ok(())
}
