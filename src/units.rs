//! Units typed on the command line that several subcommands share.

use anyhow::{Result, anyhow, bail};

/// Parses a bit rate such as `3.2G`, `500M`, `100k`, `6m` or `6000000`
/// (bits/s; suffixes k, M, G, T in either case).
pub fn parse_bit_rate(text: &str) -> Result<u64> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'g' => 1e9,
                't' => 1e12,
                _ => bail!("rate {text:?}: unknown suffix {c:?}; use k, M or G (like 3.2G)"),
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| anyhow!("rate {text:?} is not a number; write it like 6M, 3.2G or 100k"))?;
    let bps = v * mult;
    if !bps.is_finite() || !(1.0..=1e15).contains(&bps) {
        bail!("rate {text:?} is out of range: 1 bit/s to 1000T; write it like 6M, 3.2G or 100k");
    }
    Ok(bps.round() as u64)
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
