//! Raw video formats: pixel formats as RFC 4175 pixel groups, frame
//! geometry and exact rational frame rates.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::Error;

/// RTP clock rate for video (RFC 4175, ST 2110-10).
pub use crate::units::VIDEO_CLOCK_RATE;

/// A pixel format, named as FFmpeg (`uyvy422`, `rgb24`) and GStreamer
/// (`uyvp`) name them; the byte layout is RFC 4175's pixel group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PixelFormat {
    /// 8-bit 4:2:2, Cb Y0 Cr Y1: 4 bytes per 2 pixels.
    Uyvy422,
    /// 10-bit 4:2:2, Cb Y0 Cr Y1 packed big-endian: 5 bytes per 2 pixels.
    Uyvp,
    /// 8-bit RGB: 3 bytes per pixel.
    Rgb24,
}

impl PixelFormat {
    /// Every supported format, for help texts and property tests.
    pub const ALL: [PixelFormat; 3] = [PixelFormat::Uyvy422, PixelFormat::Uyvp, PixelFormat::Rgb24];

    /// Bytes in one RFC 4175 pixel group.
    pub const fn pgroup_bytes(self) -> usize {
        match self {
            PixelFormat::Uyvy422 => 4,
            PixelFormat::Uyvp => 5,
            PixelFormat::Rgb24 => 3,
        }
    }

    /// Pixels in one RFC 4175 pixel group.
    pub const fn pgroup_pixels(self) -> usize {
        match self {
            PixelFormat::Uyvy422 | PixelFormat::Uyvp => 2,
            PixelFormat::Rgb24 => 1,
        }
    }

    /// The SDP `sampling=` value.
    pub const fn sampling(self) -> &'static str {
        match self {
            PixelFormat::Uyvy422 | PixelFormat::Uyvp => "YCbCr-4:2:2",
            PixelFormat::Rgb24 => "RGB",
        }
    }

    /// The SDP `depth=` value.
    pub const fn depth(self) -> u32 {
        match self {
            PixelFormat::Uyvy422 | PixelFormat::Rgb24 => 8,
            PixelFormat::Uyvp => 10,
        }
    }

    /// The format an SDP's `sampling` and `depth` describe, if supported.
    pub fn from_sampling(sampling: &str, depth: u32) -> Option<PixelFormat> {
        PixelFormat::ALL
            .into_iter()
            .find(|f| f.sampling().eq_ignore_ascii_case(sampling) && f.depth() == depth)
    }

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            PixelFormat::Uyvy422 => "uyvy422",
            PixelFormat::Uyvp => "uyvp",
            PixelFormat::Rgb24 => "rgb24",
        }
    }
}

impl fmt::Display for PixelFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PixelFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.to_ascii_lowercase();
        PixelFormat::ALL
            .into_iter()
            .find(|f| f.name() == lower)
            .or(match lower.as_str() {
                // GStreamer's caps names for the same layouts.
                "uyvy" => Some(PixelFormat::Uyvy422),
                "rgb" => Some(PixelFormat::Rgb24),
                _ => None,
            })
            .ok_or(Error::UnknownPixelFormat)
    }
}

/// Largest frame dimension accepted; ST 2110-20 allows 32767 lines and a
/// 15-bit offset, and 16K is as large as anyone ships.
pub const MAX_DIMENSION: u32 = 16384;

/// Geometry and layout of one progressive raw video frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct VideoFormat {
    /// Pixels per line.
    pub width: u32,
    /// Lines per frame.
    pub height: u32,
    /// Pixel layout.
    pub pixel_format: PixelFormat,
}

impl VideoFormat {
    /// Validates that the pixel format can carry this size.
    pub fn new(width: u32, height: u32, pixel_format: PixelFormat) -> Result<Self, Error> {
        if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
            return Err(Error::BadDimensions { width, height });
        }
        if width as usize % pixel_format.pgroup_pixels() != 0 {
            return Err(Error::WidthNotMultiple {
                width,
                multiple: pixel_format.pgroup_pixels() as u32,
            });
        }
        Ok(VideoFormat {
            width,
            height,
            pixel_format,
        })
    }

    /// Bytes in one line (frames are stored without row padding).
    pub fn line_bytes(&self) -> usize {
        self.width as usize / self.pixel_format.pgroup_pixels() * self.pixel_format.pgroup_bytes()
    }

    /// Bytes in one frame.
    pub fn frame_bytes(&self) -> usize {
        self.line_bytes() * self.height as usize
    }
}

/// Parses `WIDTHxHEIGHT`.
pub fn parse_size(s: &str) -> Result<(u32, u32), Error> {
    let (w, h) = s.split_once(['x', 'X']).ok_or(Error::BadSize)?;
    let w = w.trim().parse().map_err(|_| Error::BadSize)?;
    let h = h.trim().parse().map_err(|_| Error::BadSize)?;
    Ok((w, h))
}

/// An exact frame rate `num/den` frames per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRate {
    /// Numerator.
    pub num: u32,
    /// Denominator.
    pub den: u32,
}

impl FrameRate {
    /// Validates `num/den` (positive, at most 1000 frames per second).
    pub fn new(num: u32, den: u32) -> Result<Self, Error> {
        if num == 0 || den == 0 || u64::from(num) > 1000 * u64::from(den) {
            return Err(Error::BadFrameRate);
        }
        let g = gcd(num, den);
        Ok(FrameRate {
            num: num / g,
            den: den / g,
        })
    }

    /// Frames per second as a float, for display only.
    pub fn as_f64(self) -> f64 {
        f64::from(self.num) / f64::from(self.den)
    }

    /// Nanoseconds from the epoch to the start of frame `n` (floor).
    pub fn frame_start_ns(self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.den) * 1_000_000_000 / u128::from(self.num)
    }

    /// The first frame number whose start is at or after `ns` since the epoch.
    pub fn frame_at_or_after_ns(self, ns: u128) -> u64 {
        let num = ns * u128::from(self.num);
        let den = u128::from(self.den) * 1_000_000_000;
        let n = num.div_ceil(den);
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// The 90 kHz RTP timestamp of frame `n` counted from the epoch
    /// (ST 2110-10): `floor(n × period × 90000) mod 2^32`.
    pub fn rtp_timestamp(self, n: u64) -> u32 {
        let ticks = u128::from(n) * u128::from(self.den) * u128::from(VIDEO_CLOCK_RATE)
            / u128::from(self.num);
        ticks as u32 // modulo 2^32 is the RTP rule
    }

    /// The frame period in 90 kHz ticks, as a float (may be fractional).
    pub fn period_ticks(self) -> f64 {
        VIDEO_CLOCK_RATE as f64 * f64::from(self.den) / f64::from(self.num)
    }

    /// The SDP `exactframerate=` value (`30`, `60000/1001`).
    pub fn sdp_value(self) -> String {
        if self.den == 1 {
            self.num.to_string()
        } else {
            format!("{}/{}", self.num, self.den)
        }
    }
}

impl fmt::Display for FrameRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{} ({:.3})", self.num, self.den, self.as_f64())
        }
    }
}

impl FromStr for FrameRate {
    type Err = Error;
    /// Accepts `30`, `60000/1001`, and decimals; the broadcast decimals
    /// (23.976, 29.97, 59.94, 119.88) mean their exact /1001 rates.
    fn from_str(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        if let Some((n, d)) = s.split_once('/') {
            let n = n.trim().parse().map_err(|_| Error::BadFrameRate)?;
            let d = d.trim().parse().map_err(|_| Error::BadFrameRate)?;
            return FrameRate::new(n, d);
        }
        match s {
            "23.976" | "23.98" => return FrameRate::new(24000, 1001),
            "29.97" => return FrameRate::new(30000, 1001),
            "47.952" | "47.95" => return FrameRate::new(48000, 1001),
            "59.94" => return FrameRate::new(60000, 1001),
            "119.88" => return FrameRate::new(120000, 1001),
            _ => {}
        }
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|c| c.is_ascii_digit())
            || !frac.bytes().all(|c| c.is_ascii_digit())
            || frac.len() > 6
        {
            return Err(Error::BadFrameRate);
        }
        let den = 10u32.pow(frac.len() as u32);
        let digits = format!("{int}{frac}");
        let num: u32 = digits.parse().map_err(|_| Error::BadFrameRate)?;
        FrameRate::new(num, den)
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_rates_parse_exactly() {
        assert_eq!(
            "30".parse::<FrameRate>().unwrap(),
            FrameRate { num: 30, den: 1 }
        );
        assert_eq!(
            "60000/1001".parse::<FrameRate>().unwrap(),
            FrameRate {
                num: 60000,
                den: 1001
            }
        );
        assert_eq!(
            "29.97".parse::<FrameRate>().unwrap(),
            FrameRate {
                num: 30000,
                den: 1001
            }
        );
        assert_eq!(
            "12.5".parse::<FrameRate>().unwrap(),
            FrameRate { num: 25, den: 2 }
        );
        for bad in ["0", "abc", "1/0", "-5", "", ".", "5000", "1e3"] {
            assert!(bad.parse::<FrameRate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn timestamps_are_frame_number_times_period() {
        let r = FrameRate::new(50, 1).unwrap();
        assert_eq!(r.rtp_timestamp(0), 0);
        assert_eq!(r.rtp_timestamp(1), 1800);
        assert_eq!(r.rtp_timestamp(1000), 1_800_000);
        let r = FrameRate::new(60000, 1001).unwrap();
        assert_eq!(r.rtp_timestamp(2), 3003);
        assert_eq!(r.rtp_timestamp(3), 4504);
    }

    #[test]
    fn epoch_alignment() {
        let r = FrameRate::new(30, 1).unwrap();
        assert_eq!(r.frame_at_or_after_ns(0), 0);
        assert_eq!(r.frame_at_or_after_ns(1), 1);
        assert_eq!(r.frame_at_or_after_ns(r.frame_start_ns(77)), 77);
    }

    #[test]
    fn formats_validate() {
        assert!(VideoFormat::new(1921, 1080, PixelFormat::Uyvy422).is_err());
        assert!(VideoFormat::new(1921, 1080, PixelFormat::Rgb24).is_ok());
        let f = VideoFormat::new(1920, 1080, PixelFormat::Uyvp).unwrap();
        assert_eq!(f.line_bytes(), 4800);
        assert_eq!("UYVY".parse::<PixelFormat>().unwrap(), PixelFormat::Uyvy422);
        assert!("yuv420p".parse::<PixelFormat>().is_err());
        assert_eq!(parse_size("1920x1080").unwrap(), (1920, 1080));
        assert!(parse_size("1920").is_err());
    }
}
