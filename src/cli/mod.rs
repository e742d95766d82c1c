//! Values typed on the command line that several subcommands share: one
//! parser per kind of value, so every subcommand accepts and refuses the
//! same spellings with the same message.

use anyhow::{Result, anyhow};
use nagare_proto::video::format::parse_size;
use nagare_proto::video::receiver::Incomplete;
use nagare_proto::{BitRate, FrameRate, PixelFormat, VideoFormat};

/// Parses a pixel format with a message listing the known ones.
pub fn parse_pix_fmt(s: &str) -> Result<PixelFormat> {
    s.parse().map_err(|_| {
        anyhow!("unknown pixel format '{s}': known formats are uyvy422 (8-bit 4:2:2), uyvp (10-bit 4:2:2), rgb24")
    })
}

/// Parses `--size` and `--pix-fmt` into a validated format.
pub fn parse_format(size: &str, pix_fmt: &str) -> Result<VideoFormat> {
    let pf = parse_pix_fmt(pix_fmt)?;
    let (w, h) = parse_size(size)
        .map_err(|_| anyhow!("size '{size}' does not parse: give WIDTHxHEIGHT, e.g. 1920x1080"))?;
    VideoFormat::new(w, h, pf).map_err(|e| anyhow!("size {size} with {pf}: {e}"))
}

/// Parses `--fps`.
pub fn parse_rate(fps: &str) -> Result<FrameRate> {
    fps.parse()
        .map_err(|_| anyhow!("frame rate '{fps}' does not parse: give 30, 60000/1001 or 29.97 (above 0, at most 1000)"))
}

/// The `--incomplete` parser: clap lists and checks the names, proto's
/// policy type takes them.
pub fn parse_incomplete() -> impl clap::builder::TypedValueParser<Value = Incomplete> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Incomplete::NAMES)
        .map(|name| name.parse().unwrap_or_default())
}

/// Parses a bit rate such as `3.2G`, `500M`, `100k`, `6m` or `6000000`
/// (bits/s; suffixes k, M, G, T in either case) into bits per second.
pub fn parse_bit_rate(text: &str) -> Result<u64> {
    text.parse::<BitRate>()
        .map(BitRate::bps)
        .map_err(|e| anyhow!("rate {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn messages_name_the_fault() {
        let e = parse_bit_rate("3x").unwrap_err().to_string();
        assert!(e.contains("unknown suffix 'x'"), "{e}");
        let e = parse_bit_rate("fast").unwrap_err().to_string();
        assert!(e.contains("not a number"), "{e}");
        let e = parse_bit_rate("0").unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
    }
}
