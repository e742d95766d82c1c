//! What a test asks for ([`TestParams`], Sperf's "information packet"),
//! the limits both ends hold it to, and the send [`Schedule`] it implies.

use serde::{Deserialize, Serialize};

use crate::probe::error::{Error, Param};
use crate::units::Nanos;
use crate::video::format::FrameRate;
use crate::video::pacer::Pacer;

/// Smallest `--packet-size` (the header must fit, plus room to spare).
pub const MIN_PACKET_SIZE: u64 = 64;
/// Largest `--packet-size`: the IPv4 UDP payload limit.
pub const MAX_PACKET_SIZE: u64 = crate::units::MAX_UDP_PAYLOAD as u64;
/// Lowest test rate, bits of UDP payload per second.
pub const MIN_RATE_BPS: u64 = 100_000;
/// Highest test rate accepted (far above what one host sends today).
pub const MAX_RATE_BPS: u64 = 400_000_000_000;
/// Shortest test.
pub const MIN_DURATION_MS: u64 = 100;
/// Longest test.
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Most packets one test may plan: the receiver keeps one 24-byte record
/// per packet, so this bounds its memory (240 MB).
pub const MAX_PACKETS: u64 = 10_000_000;
/// Largest `--playout` delay.
pub const MAX_PLAYOUT_US: u64 = 10_000_000;
/// Largest reporting interval.
pub const MAX_INTERVAL_MS: u64 = 60_000;
/// Most parallel streams in one test (iperf3's `-P`, which allows 128;
/// each stream here keeps its own records).
pub const MAX_STREAMS: u64 = 32;
/// Default train window of the sender (as `nagare send --burst-us`).
pub const DEFAULT_BURST_US: u64 = 100;
/// Largest train window: beyond a few ms the stream is no longer paced.
pub const MAX_BURST_US: u64 = 10_000;
/// Most reporting intervals in one test (an hour of 1 s intervals), over
/// the whole send schedule: the report carries one entry per interval and
/// must fit one control frame ([`crate::probe::MAX_FRAME_LEN`]); 3600
/// entries take about 700 KB of JSON.
pub const MAX_INTERVALS: u64 = 3600;

/// What the client asks for: Sperf's information packet. The fields are
/// the wire format (JSON in the hello); the accessors give them as units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    /// Target rate, bits of UDP payload per second.
    pub rate_bps: u64,
    /// Test length in milliseconds.
    pub duration_ms: u64,
    /// UDP payload bytes per packet.
    pub packet_size: u32,
    /// Video frame rate `(num, den)` grouping packets into frames, if any.
    pub fps: Option<(u32, u32)>,
    /// The server sends and the client receives.
    pub reverse: bool,
    /// The client wants per-packet records back.
    pub records: bool,
    /// Playout delay for late packets and frames, microseconds.
    pub playout_us: u64,
    /// Shortest run of consecutive losses that counts as a Sperf burst.
    pub burst_threshold: u32,
    /// Reporting interval of the time series, milliseconds.
    pub interval_ms: u64,
    /// Sender's train window, microseconds: packets whose slots fall
    /// within it of a train's first slot leave in one send call. Clients
    /// that predate it get the default.
    #[serde(default = "default_burst_us")]
    pub burst_us: u64,
    /// Parallel streams, each at `rate_bps` on the same schedule (as
    /// iperf3's `-P`, whose `-b` is per stream too).
    #[serde(default = "one")]
    pub streams: u32,
    /// Both ends send a stream and measure the one they receive, at once
    /// (iperf3's `--bidir`): the client's goes to the server, the
    /// server's to the address the client opens, each on the same
    /// schedule; `reverse` must be off.
    #[serde(default)]
    pub bidir: bool,
}

/// Which way a test stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// The client sends, the server receives (the default, and the
    /// client's stream with `bidir`).
    #[serde(rename = "client to server")]
    ClientToServer,
    /// The server sends, the client receives (`reverse`, and the
    /// server's stream with `bidir`).
    #[serde(rename = "server to client")]
    ServerToClient,
}

impl Direction {
    /// The other way.
    pub fn opposite(self) -> Direction {
        match self {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::ClientToServer => "client to server",
            Direction::ServerToClient => "server to client",
        })
    }
}

fn one() -> u32 {
    1
}

fn default_burst_us() -> u64 {
    DEFAULT_BURST_US
}

fn check(param: Param, value: u64, min: u64, max: u64) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            param,
            value,
            min,
            max,
        })
    }
}

/// How a test's packets are laid out in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Frame rate of the pacer (virtual frames without `--fps`).
    pub rate: FrameRate,
    /// Packets per (possibly virtual) frame.
    pub packets_per_frame: u64,
    /// Packets in the whole test.
    pub total_packets: u64,
    /// Whether frames are real video frames (`--fps`).
    pub video_frames: bool,
}

impl Schedule {
    /// A pacer for this schedule, time zero at the first packet.
    pub fn pacer(&self) -> Pacer {
        Pacer::new(self.rate, self.packets_per_frame as usize, 0)
    }

    /// The send slot of packet `seq`, after the first packet's: the
    /// pacer's slot, computed without building a pacer.
    pub fn slot(&self, seq: u64) -> Nanos {
        let ppf = u128::from(self.packets_per_frame.max(1));
        let ns = u128::from(seq) * u128::from(self.rate.den) * 1_000_000_000
            / (u128::from(self.rate.num) * ppf);
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Whether packet `seq` ends a (possibly virtual) frame: the RTP marker.
    pub fn ends_frame(&self, seq: u64) -> bool {
        let ppf = self.packets_per_frame.max(1);
        seq % ppf == ppf - 1
    }

    /// Bits per second the schedule really sends with `packet_size`-byte
    /// packets (rounding to whole packets per frame).
    pub fn rate_bps(&self, packet_size: u32) -> f64 {
        self.packets_per_second() * f64::from(packet_size) * 8.0
    }

    /// Packets per second of the schedule.
    pub fn packets_per_second(&self) -> f64 {
        self.rate.as_f64() * self.packets_per_frame as f64
    }

    /// Most arrival records a receiver keeps: the plan plus room for
    /// duplicates; datagrams beyond it count as strangers.
    pub fn record_cap(&self) -> usize {
        let t = usize::try_from(self.total_packets).unwrap_or(usize::MAX);
        t.saturating_add(t / 2).saturating_add(1024)
    }
}

impl TestParams {
    /// Test length.
    pub fn duration(&self) -> Nanos {
        Nanos::from_millis(self.duration_ms)
    }

    /// Playout delay: packets later than their slot plus this are late.
    pub fn playout(&self) -> Nanos {
        Nanos::from_micros(self.playout_us)
    }

    /// Reporting interval of the time series.
    pub fn interval(&self) -> Nanos {
        Nanos::from_millis(self.interval_ms)
    }

    /// The sender's train window.
    pub fn burst(&self) -> Nanos {
        Nanos::from_micros(self.burst_us)
    }

    /// Whether the client sends a stream.
    pub fn client_sends(&self) -> bool {
        !self.reverse || self.bidir
    }

    /// Whether the server sends a stream.
    pub fn server_sends(&self) -> bool {
        self.reverse || self.bidir
    }

    /// Checks every field against its range, and the planned packet count
    /// against [`MAX_PACKETS`]; the server runs this too, so a client can
    /// never make it allocate or send without bound.
    pub fn validate(&self) -> Result<Schedule, Error> {
        if self.reverse && self.bidir {
            return Err(Error::ReverseBidir);
        }
        check(Param::Rate, self.rate_bps, MIN_RATE_BPS, MAX_RATE_BPS)?;
        check(
            Param::Duration,
            self.duration_ms,
            MIN_DURATION_MS,
            MAX_DURATION_MS,
        )?;
        check(
            Param::PacketSize,
            u64::from(self.packet_size),
            MIN_PACKET_SIZE,
            MAX_PACKET_SIZE,
        )?;
        check(Param::Playout, self.playout_us, 0, MAX_PLAYOUT_US)?;
        check(
            Param::BurstThreshold,
            u64::from(self.burst_threshold),
            1,
            1_000_000,
        )?;
        check(Param::Interval, self.interval_ms, 10, MAX_INTERVAL_MS)?;
        check(Param::Burst, self.burst_us, 0, MAX_BURST_US)?;
        check(Param::Streams, u64::from(self.streams), 1, MAX_STREAMS)?;
        let schedule = self.schedule()?;
        check(
            Param::Packets,
            schedule
                .total_packets
                .saturating_mul(u64::from(self.streams)),
            1,
            MAX_PACKETS,
        )?;
        // The report's intervals follow the send schedule, which runs up
        // to a frame period past the duration (a slow --fps).
        let span = schedule.slot(schedule.total_packets - 1).as_nanos();
        let intervals = span / self.interval().as_nanos().max(1) + 1;
        check(Param::Intervals, intervals, 1, MAX_INTERVALS)?;
        Ok(schedule)
    }

    fn schedule(&self) -> Result<Schedule, Error> {
        let bits = u64::from(self.packet_size) * 8;
        let (rate, ppf, video) = match self.fps {
            Some((num, den)) => {
                let fr = FrameRate::new(num, den).map_err(|_| Error::FrameRate)?;
                let per_frame = self.rate_bps as f64 / fr.as_f64() / bits as f64;
                (fr, (per_frame.round() as u64).max(1), true)
            }
            None => {
                let (fr, ppf) = self.cbr_rate(bits)?;
                (fr, ppf, false)
            }
        };
        // Whole frames that start within the duration.
        let frames = rate.frame_at_or_after_ns(u128::from(self.duration().as_nanos()));
        Ok(Schedule {
            rate,
            packets_per_frame: ppf,
            total_packets: frames.saturating_mul(ppf),
            video_frames: video,
        })
    }

    /// Constant bit rate: virtual frames of ppf packets at most 1000 times
    /// a second, with the frame rate as an exact fraction
    /// rate / (bits × ppf), reduced to fit u32.
    fn cbr_rate(&self, bits: u64) -> Result<(FrameRate, u64), Error> {
        let ppf = self.rate_bps.div_ceil(bits * 1000).max(1);
        let mut num = u128::from(self.rate_bps);
        let mut den = u128::from(bits) * u128::from(ppf);
        let g = gcd(num, den);
        num /= g;
        den /= g;
        while num > u128::from(u32::MAX) || den > u128::from(u32::MAX) {
            num = (num / 2).max(1);
            den = (den / 2).max(1);
        }
        let fr = FrameRate::new(num as u32, den as u32).map_err(|_| Error::OutOfRange {
            param: Param::Rate,
            value: self.rate_bps,
            min: MIN_RATE_BPS,
            max: MAX_RATE_BPS,
        })?;
        Ok((fr, ppf))
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Parses a frame rate for `--fps` into the `(num, den)` of [`TestParams`].
pub fn parse_fps(s: &str) -> Result<(u32, u32), Error> {
    let fr: FrameRate = s.parse().map_err(|_| Error::FrameRate)?;
    Ok((fr.num, fr.den))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> TestParams {
        TestParams {
            rate_bps: 3_200_000_000,
            duration_ms: 1000,
            packet_size: 8800,
            fps: None,
            reverse: false,
            records: false,
            playout_us: 20_000,
            burst_threshold: 5,
            burst_us: DEFAULT_BURST_US,
            interval_ms: 1000,
            streams: 1,
            bidir: false,
        }
    }

    #[test]
    fn cbr_schedule_hits_the_rate() {
        let s = params().validate().unwrap();
        let r = s.rate_bps(8800);
        assert!((r - 3.2e9).abs() / 3.2e9 < 1e-6, "{r}");
        // 3.2 Gbit/s of 8800-byte packets: 45454.5 packets/s for 1 s.
        assert!(
            (45_000..=45_500).contains(&s.total_packets),
            "{}",
            s.total_packets
        );
        let slow = TestParams {
            rate_bps: 100_000,
            packet_size: 1250,
            ..params()
        }
        .validate()
        .unwrap();
        assert_eq!(slow.total_packets, 10); // 10 packets/s
        assert_eq!(slow.slot(1), Nanos::from_millis(100));
        let pacer = s.pacer();
        for k in [0, 1, 7, 45_000, 1 << 40] {
            assert_eq!(s.slot(k), pacer.slot(k), "{k}");
        }
    }

    #[test]
    fn video_schedule_groups_frames() {
        let p = TestParams {
            rate_bps: 100_000_000,
            packet_size: 1000,
            fps: Some((50, 1)),
            ..params()
        };
        let s = p.validate().unwrap();
        assert_eq!(s.packets_per_frame, 250);
        assert_eq!(s.total_packets, 50 * 250);
        assert!(s.video_frames);
        assert!(s.ends_frame(249) && !s.ends_frame(250) && s.ends_frame(499));
    }

    #[test]
    fn absurd_params_are_refused_with_their_value() {
        let e = TestParams {
            rate_bps: 5,
            ..params()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rate (bit/s) = 5 is out of range 100000..=400000000000"
        );
        let e = TestParams {
            duration_ms: 3_600_000,
            rate_bps: 100_000_000_000,
            ..params()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::OutOfRange {
                    param: Param::Packets,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            TestParams {
                packet_size: 70_000,
                ..params()
            }
            .validate()
            .is_err()
        );
        assert_eq!(
            TestParams {
                fps: Some((0, 1)),
                ..params()
            }
            .validate(),
            Err(Error::FrameRate)
        );
        assert_eq!(parse_fps("59.94"), Ok((60000, 1001)));
        assert_eq!(parse_fps("fast"), Err(Error::FrameRate));
    }

    #[test]
    fn bidir_is_one_way_or_the_other_not_reverse_too() {
        let both = TestParams {
            bidir: true,
            ..params()
        };
        assert!(both.validate().is_ok());
        assert!(both.client_sends() && both.server_sends());
        let e = TestParams {
            reverse: true,
            ..both
        }
        .validate();
        assert_eq!(e, Err(Error::ReverseBidir));
        // A client that predates the field asks for a one-way test.
        let mut v = serde_json::to_value(params()).unwrap();
        v.as_object_mut().unwrap().remove("bidir");
        let old: TestParams = serde_json::from_value(v).unwrap();
        assert!(!old.bidir && old.client_sends() && !old.server_sends());
    }

    #[test]
    fn burst_window_defaults_and_is_bounded() {
        // A client that predates the field gets the default window.
        let mut v = serde_json::to_value(params()).unwrap();
        v.as_object_mut().unwrap().remove("burst_us");
        let old: TestParams = serde_json::from_value(v).unwrap();
        assert_eq!(old.burst_us, DEFAULT_BURST_US);
        assert!(
            TestParams {
                burst_us: MAX_BURST_US + 1,
                ..params()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn too_many_intervals_are_refused() {
        let many = TestParams {
            rate_bps: 100_000,
            packet_size: 65_507,
            duration_ms: 3_600_000,
            interval_ms: 10,
            ..params()
        };
        let too_many = |p: TestParams| {
            matches!(
                p.validate(),
                Err(Error::OutOfRange {
                    param: Param::Intervals,
                    ..
                })
            )
        };
        assert!(too_many(many));
        // 100 ms of a 1/1001 fps video: one frame, its packets spread
        // over 1001 s.
        assert!(too_many(TestParams {
            duration_ms: 100,
            fps: Some((1, 1001)),
            packet_size: 9797,
            ..many
        }));
    }
}
