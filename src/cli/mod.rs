//! Values typed on the command line that several subcommands share: one
//! parser per kind of value, so every subcommand accepts and refuses the
//! same spellings with the same message.
//!
//! Each `parse_*` taking one `&str` is a clap value parser as it stands
//! (`#[arg(long, value_parser = cli::parse_size)]`): clap prints its
//! message after `invalid value 'X' for '--flag'`. Every message names the
//! value and says what to write instead.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::video::st2110_21::SenderType;
use nagare_proto::video::stripe::{Rule, Stripes};
use nagare_proto::{BitRate, FrameRate, PixelFormat, VideoFormat};

pub(crate) use crate::net::iface::parse_interface;

/// Parses a pixel format with a message listing the known ones.
pub(crate) fn parse_pix_fmt(s: &str) -> Result<PixelFormat> {
    s.parse().map_err(|_| {
        anyhow!("unknown pixel format '{s}': known formats are uyvy422 (8-bit 4:2:2), uyvp (10-bit 4:2:2), rgb24")
    })
}

/// Parses `--split`: how a frame is divided into stripes.
pub(crate) fn parse_split(s: &str) -> Result<Rule> {
    s.parse()
        .map_err(|_| anyhow!("unknown split '{s}': use lines, square or 2si"))
}

/// `stripes` stripes of `format` by `rule`, or why not in flag terms.
pub(crate) fn stripes_of(format: VideoFormat, stripes: usize, rule: Rule) -> Result<Stripes> {
    Stripes::new(format, rule, stripes).map_err(|e| {
        anyhow!(
            "--split {rule} --stripes {stripes} does not fit {}x{}: {e}",
            format.width,
            format.height
        )
    })
}

/// A picture size in pixels, from `--size WIDTHxHEIGHT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Size {
    /// Pixels per line.
    pub width: u32,
    /// Lines per frame.
    pub height: u32,
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// Parses `--size WIDTHxHEIGHT` (`1920x1080`), both sides above zero.
pub(crate) fn parse_size(text: &str) -> Result<Size> {
    let (width, height) = nagare_proto::video::format::parse_size(text)
        .map_err(|_| anyhow!("size '{text}' does not parse: give WIDTHxHEIGHT, e.g. 1920x1080"))?;
    if width == 0 || height == 0 {
        bail!("size '{text}' has a zero side: give WIDTHxHEIGHT above 0x0, e.g. 1920x1080");
    }
    Ok(Size { width, height })
}

/// Combines a parsed `--size` and `--pix-fmt` into a validated format
/// (the pixel format decides which widths are allowed).
pub(crate) fn video_format(size: Size, pix_fmt: PixelFormat) -> Result<VideoFormat> {
    VideoFormat::new(size.width, size.height, pix_fmt)
        .map_err(|e| anyhow!("size {size} with {pix_fmt}: {e}"))
}

/// Parses `--size` and `--pix-fmt` into a validated format.
#[allow(
    dead_code,
    reason = "send, recv and demo parse the flags with clap; tree and probe may still call this"
)]
pub(crate) fn parse_format(size: &str, pix_fmt: &str) -> Result<VideoFormat> {
    let pf = parse_pix_fmt(pix_fmt)?;
    video_format(parse_size(size)?, pf)
}

/// Parses `--fps`: `30`, `60000/1001` or `29.97`.
pub(crate) fn parse_rate(fps: &str) -> Result<FrameRate> {
    fps.parse()
        .map_err(|_| anyhow!("frame rate '{fps}' does not parse: give 30, 60000/1001 or 29.97 (above 0, at most 1000)"))
}

/// Parses `--tp`: the ST 2110-21 sender type `n`, `nl` or `w` (either
/// case).
pub(crate) fn parse_sender_type(text: &str) -> Result<SenderType> {
    SenderType::ALL
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            anyhow!(
                "sender type '{text}' is not one of ST 2110-21's: give n (narrow gapped), nl \
                 (narrow linear) or w (wide)"
            )
        })
}

/// How a sender picks its ST 2110-21 TRoffset (`--tr-offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum TrOffsetChoice {
    /// A wide sender declares the offset that gives it its centred lead
    /// (`SenderSchedule::with_room_to_lead`); N and NL keep TROdefault.
    #[default]
    Auto,
    /// TROdefault, declared by nothing (what a receiver assumes without
    /// `TROFF`).
    Default,
    /// This many microseconds, declared as `TROFF`.
    Micros(u64),
}

/// The `--tr-offset` parser: `auto`, `default` or whole microseconds.
pub(crate) fn parse_tr_offset(text: &str) -> Result<TrOffsetChoice> {
    match text.trim() {
        "auto" => Ok(TrOffsetChoice::Auto),
        "default" => Ok(TrOffsetChoice::Default),
        n => n.parse::<u64>().map(TrOffsetChoice::Micros).map_err(|_| {
            anyhow!("--tr-offset '{text}' is not auto, default or whole microseconds (like 1813)")
        }),
    }
}

/// The `--incomplete` parser: clap lists and checks the names, proto's
/// policy type takes them.
pub(crate) fn parse_incomplete() -> impl clap::builder::TypedValueParser<Value = Incomplete> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Incomplete::NAMES)
        .map(|name| name.parse().unwrap_or_default())
}

/// Parses a bit rate such as `3.2G`, `500M`, `100k`, `6m` or `6000000`
/// (bits/s; suffixes k, M, G, T in either case) into bits per second.
/// Wrap the result in [`BitRate`] where it is kept.
pub(crate) fn parse_bit_rate(text: &str) -> Result<u64> {
    text.parse::<BitRate>()
        .map(BitRate::bps)
        .map_err(|e| anyhow!("rate {text:?}: {e}"))
}

/// Parses a memory size such as `4G`, `512M` or `65536` (bytes; K, M, G,
/// T are powers of 1024).
pub(crate) fn parse_memory(text: &str) -> Result<nagare_proto::ByteSize> {
    text.parse::<nagare_proto::ByteSize>()
        .map_err(|e| anyhow!("size {text:?}: {e}"))
}

/// Largest UDP payload over IPv4 (65535 less the IPv4 and UDP headers).
pub(crate) const MAX_UDP_PAYLOAD: usize = nagare_proto::units::MAX_UDP_PAYLOAD as usize;

/// Parses `--packet-size`: UDP payload bytes per packet, 1 to 65507.
/// Each subcommand checks its own narrower bounds (a video packet must
/// hold a pixel group) against the parsed number.
pub(crate) fn parse_packet_size(text: &str) -> Result<usize> {
    let hint = "give the UDP payload per packet, e.g. 1440 for a 1500-byte MTU or 8800 for \
                9000-byte jumbo frames";
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| anyhow!("packet size '{text}' is not a whole number of bytes: {hint}"))?;
    if n == 0 || n > MAX_UDP_PAYLOAD {
        bail!(
            "packet size {n} is out of range 1 to {MAX_UDP_PAYLOAD} (the largest UDP payload): {hint}"
        );
    }
    Ok(n)
}

/// Longest span [`parse_seconds`] accepts: a year, far beyond any test or
/// timeout, and small enough that adding it to any `Instant` cannot
/// overflow.
pub(crate) const MAX_SECONDS: u64 = 365 * 24 * 3600;

/// Parses a span of time in seconds: `5`, `0.25`, `2.5s` or `250ms`;
/// above zero and at most a year.
pub(crate) fn parse_seconds(text: &str) -> Result<Duration> {
    let t = text.trim();
    let (num, scale) = if let Some(ms) = t.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    let hint = "give seconds such as 5, 0.25, 2.5s or 250ms";
    let secs = num
        .trim()
        .parse::<f64>()
        .map_err(|_| anyhow!("duration '{text}' does not parse: {hint}"))?
        * scale;
    if secs.is_nan() || secs <= 0.0 {
        bail!("duration '{text}' is not above zero: {hint}");
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= Duration::from_secs(MAX_SECONDS) => Ok(d),
        _ => bail!("duration '{text}' is longer than a year ({MAX_SECONDS} s): {hint}"),
    }
}

/// Parses a `HOST:PORT` flag through the one address resolver
/// ([`crate::net::udp::parse_addr`]).
pub(crate) fn parse_address(text: &str) -> Result<SocketAddr> {
    crate::net::udp::parse_addr(text, "address")
}

/// Parses a listen address: `HOST:PORT`, or `:PORT` for every interface
/// (as MediaMTX and Go write it), which is `0.0.0.0:PORT` and so under the
/// same token rules as any other address that is not loopback.
pub(crate) fn parse_listen_address(text: &str) -> Result<SocketAddr> {
    match text.trim().strip_prefix(':') {
        Some(port) => {
            let port: u16 = port.parse().map_err(|_| {
                anyhow!(
                    "listen address '{text}': ':PORT' needs a port 0 to 65535, e.g. :8554 \
                     (every interface) or 127.0.0.1:8554 (this machine only)"
                )
            })?;
            Ok(SocketAddr::from(([0, 0, 0, 0], port)))
        }
        None => parse_address(text),
    }
}

/// Where `-o/--output` sends frames: `-` is standard output (for a pipe
/// into ffmpeg or ffplay), anything else a file created (or truncated).
pub(crate) fn open_output(path: &std::path::Path) -> Result<Box<dyn std::io::Write + Send>> {
    if is_stdio(path) {
        return Ok(Box::new(std::io::stdout()));
    }
    let f = std::fs::File::create(path).with_context(|| {
        format!(
            "cannot create output '{}': check that its directory exists and is writable",
            path.display()
        )
    })?;
    Ok(Box::new(f))
}

/// Whether `path` means standard input or output (`-`).
pub(crate) fn is_stdio(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_may_leave_out_the_host() {
        assert_eq!(
            parse_listen_address(":8554").unwrap(),
            "0.0.0.0:8554".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:8554").unwrap(),
            "127.0.0.1:8554".parse().unwrap()
        );
        let e = refusal(parse_listen_address(":99999"));
        assert!(e.contains("':PORT' needs a port"), "{e}");
    }

    /// The message of a refused value.
    fn refusal<T: fmt::Debug>(r: Result<T>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn rates() {
        assert_eq!(parse_bit_rate("3.2G").unwrap(), 3_200_000_000);
        assert_eq!(parse_bit_rate("100k").unwrap(), 100_000);
        assert_eq!(parse_bit_rate("6m").unwrap(), 6_000_000);
        assert_eq!(parse_bit_rate("500m").unwrap(), 500_000_000);
        assert_eq!(parse_bit_rate("6000000").unwrap(), 6_000_000);
        assert!(parse_bit_rate("fast").is_err());
        assert!(parse_bit_rate("3x").is_err());
        assert!(parse_bit_rate("-1").is_err());
        assert!(parse_bit_rate("0").is_err());
        assert!(parse_bit_rate("").is_err());
        assert!(parse_bit_rate("1e400").is_err());
    }

    #[test]
    fn bit_rate_messages_name_the_value_and_the_fix() {
        assert_eq!(
            refusal(parse_bit_rate("3x")),
            "rate \"3x\": unknown suffix 'x'; use k, M or G (like 3.2G)"
        );
        let e = refusal(parse_bit_rate("fast"));
        assert!(
            e.contains("\"fast\": not a number; write it like 6M"),
            "{e}"
        );
        let e = refusal(parse_bit_rate("0"));
        assert!(e.contains("\"0\": out of range: 1 bit/s to 1000T"), "{e}");
    }

    #[test]
    fn sizes() {
        let s = parse_size("1920x1080").unwrap();
        assert_eq!(
            (s.width, s.height, s.to_string()),
            (1920, 1080, "1920x1080".into())
        );
        assert_eq!(
            parse_size("64X16").unwrap(),
            Size {
                width: 64,
                height: 16
            }
        );
        assert_eq!(
            refusal(parse_size("1920")),
            "size '1920' does not parse: give WIDTHxHEIGHT, e.g. 1920x1080"
        );
        assert_eq!(
            refusal(parse_size("0x1080")),
            "size '0x1080' has a zero side: give WIDTHxHEIGHT above 0x0, e.g. 1920x1080"
        );
        assert!(parse_size("-1x5").is_err());
        assert!(parse_size("99999999999x5").is_err());
    }

    #[test]
    fn formats_check_the_width_against_the_pixel_format() {
        let f = parse_format("64x16", "uyvy422").unwrap();
        assert_eq!((f.width, f.height), (64, 16));
        let e = refusal(parse_format("65x16", "uyvy422"));
        assert!(
            e.starts_with("size 65x16 with uyvy422: width 65 is not a multiple of 2"),
            "{e}"
        );
        let e = refusal(parse_format("64x16", "yuv420p"));
        assert!(
            e.starts_with("unknown pixel format 'yuv420p': known formats are uyvy422"),
            "{e}"
        );
    }

    #[test]
    fn frame_rates() {
        assert_eq!(
            parse_rate("29.97").unwrap(),
            FrameRate::new(30000, 1001).unwrap()
        );
        assert_eq!(
            parse_rate("60000/1001").unwrap(),
            FrameRate::new(60000, 1001).unwrap()
        );
        assert_eq!(
            refusal(parse_rate("fast")),
            "frame rate 'fast' does not parse: give 30, 60000/1001 or 29.97 (above 0, at most 1000)"
        );
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("1001").is_err());
    }

    #[test]
    fn packet_sizes() {
        assert_eq!(parse_packet_size("1440").unwrap(), 1440);
        assert_eq!(parse_packet_size(" 8800 ").unwrap(), 8800);
        assert_eq!(parse_packet_size("65507").unwrap(), 65_507);
        let e = refusal(parse_packet_size("big"));
        assert!(
            e.starts_with("packet size 'big' is not a whole number of bytes: give the UDP payload"),
            "{e}"
        );
        assert!(e.contains("1440 for a 1500-byte MTU"), "{e}");
        let e = refusal(parse_packet_size("65508"));
        assert!(
            e.starts_with("packet size 65508 is out of range 1 to 65507"),
            "{e}"
        );
        let e = refusal(parse_packet_size("0"));
        assert!(e.starts_with("packet size 0 is out of range"), "{e}");
        assert!(parse_packet_size("-5").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_seconds("0.25").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_seconds("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_seconds("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(
            refusal(parse_seconds("soon")),
            "duration 'soon' does not parse: give seconds such as 5, 0.25, 2.5s or 250ms"
        );
        for bad in ["0", "-1", "NaN", "0ms"] {
            let e = refusal(parse_seconds(bad));
            assert!(
                e.starts_with(&format!("duration '{bad}' is not above zero")),
                "{e}"
            );
        }
        assert_eq!(parse_seconds("31536000").unwrap().as_secs(), MAX_SECONDS);
        for bad in ["1e12", "inf", "31536001"] {
            let e = refusal(parse_seconds(bad));
            assert!(
                e.starts_with(&format!(
                    "duration '{bad}' is longer than a year (31536000 s)"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn addresses_and_interfaces() {
        assert_eq!(
            parse_address("127.0.0.1:5004").unwrap(),
            "127.0.0.1:5004".parse().unwrap()
        );
        let e = refusal(parse_address("nowhere"));
        assert!(
            e.starts_with("address 'nowhere' does not parse: expected HOST:PORT"),
            "{e}"
        );
        let e = refusal(parse_interface("nosuch0"));
        assert!(
            e.starts_with("no interface named 'nosuch0' (known: "),
            "{e}"
        );
    }

    #[test]
    fn parsers_plug_into_clap() {
        #[derive(clap::Parser, Debug)]
        struct Args {
            #[arg(long, value_parser = parse_size)]
            size: Size,
            #[arg(long, value_parser = parse_pix_fmt)]
            pix_fmt: PixelFormat,
            #[arg(long, value_parser = parse_rate)]
            fps: FrameRate,
            #[arg(long, value_parser = parse_bit_rate)]
            rate: u64,
            #[arg(long, value_parser = parse_packet_size)]
            packet_size: usize,
            #[arg(long, value_parser = parse_seconds)]
            timeout: Duration,
        }
        use clap::Parser;
        let ok = [
            "t",
            "--size",
            "64x16",
            "--pix-fmt",
            "uyvp",
            "--fps",
            "50",
            "--rate",
            "3.2G",
            "--packet-size",
            "1440",
            "--timeout",
            "1.5",
        ];
        let a = Args::try_parse_from(ok).unwrap();
        assert_eq!(
            (a.size.width, a.rate, a.packet_size),
            (64, 3_200_000_000, 1440)
        );
        assert_eq!(a.timeout, Duration::from_millis(1500));
        let mut bad = ok;
        bad[12] = "0";
        let e = Args::try_parse_from(bad).unwrap_err().to_string();
        assert!(
            e.contains(
                "invalid value '0' for '--timeout <TIMEOUT>': duration '0' is not above zero"
            ),
            "{e}"
        );
    }
}
