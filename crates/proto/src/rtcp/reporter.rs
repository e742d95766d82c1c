//! The RTCP machine of one sending stream: sender reports on RFC 3550's
//! randomised interval, and a BYE when the stream ends.

use super::clock::{Anchor, NtpTime, WallTime};
use super::wire::{self, SenderInfo};
use super::{BYE_DELAY, INTERVAL, VIDEO_CLOCK_RATE};
use crate::splitmix::{GAMMA, splitmix64};
use crate::units::{Nanos, Ssrc};

/// Settings of a [`Reporter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The stream's SSRC (its RTP packets' own).
    pub ssrc: Ssrc,
    /// Its canonical name (SDES CNAME), the same for every stream of one
    /// sender that a player should keep in sync.
    pub cname: String,
    /// The RTP clock rate, in Hz.
    pub clock_rate: u32,
    /// The mean report interval (see [`INTERVAL`]).
    pub interval: Nanos,
    /// How long the BYE waits after the stream ends (see [`BYE_DELAY`]).
    pub bye_delay: Nanos,
    /// Seed of the interval's randomisation (drawn by the driver).
    pub seed: u64,
}

impl Config {
    /// A stream `ssrc` named `cname` on the 90 kHz clock, reporting every
    /// [`INTERVAL`] on average.
    pub fn new(ssrc: Ssrc, cname: impl Into<String>, seed: u64) -> Config {
        Config {
            ssrc,
            cname: cname.into(),
            clock_rate: VIDEO_CLOCK_RATE,
            interval: INTERVAL,
            bye_delay: BYE_DELAY,
            seed,
        }
    }
}

/// What the driver tells a [`Reporter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// RTP packets left.
    Sent {
        /// How many.
        packets: u64,
        /// Their payload octets (datagram bytes less the RTP header).
        payload_octets: u64,
        /// An instant known on both the RTP and the wall clock, from
        /// which the report's RTP time is counted.
        anchor: Anchor,
    },
    /// The stream is over (played to its end, or failed): a BYE goes
    /// [`Config::bye_delay`] later, and nothing after it.
    Ended,
}

/// The RTCP machine of one sending stream.
#[derive(Debug, Clone)]
pub struct Reporter {
    config: Config,
    packets: u64,
    octets: u64,
    anchor: Option<Anchor>,
    /// Whether RTP left since the last report (RFC 3550 §6.4: else no SR).
    fresh: bool,
    /// When the next report is due; `None` before the first packet.
    due: Option<Nanos>,
    /// When the BYE is due, once the stream ended.
    bye_at: Option<Nanos>,
    said_bye: bool,
    draws: u64,
    reports: u64,
}

impl Reporter {
    /// A reporter for a stream that has sent nothing yet.
    pub fn new(config: Config) -> Reporter {
        let draws = config.seed;
        Reporter {
            config,
            packets: 0,
            octets: 0,
            anchor: None,
            fresh: false,
            due: None,
            bye_at: None,
            said_bye: false,
            draws,
            reports: 0,
        }
    }

    /// Takes what the stream did. The first packets make a report due at
    /// once, so a player can map RTP to wall-clock time from its first
    /// frame rather than after a whole interval.
    pub fn handle_input(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Sent {
                packets,
                payload_octets,
                anchor,
            } if self.bye_at.is_none() => {
                self.packets = self.packets.wrapping_add(packets);
                self.octets = self.octets.wrapping_add(payload_octets);
                self.anchor = Some(anchor);
                self.fresh = true;
                self.due.get_or_insert(now);
            }
            Input::Sent { .. } => {}
            Input::Ended => {
                let at = now + self.config.bye_delay;
                self.bye_at.get_or_insert(at);
            }
        }
    }

    /// The next compound to send on the RTCP path, if one is due at `now`;
    /// `wall` is the wall-clock time of `now`, for the report's NTP time.
    pub fn poll_transmit(&mut self, now: Nanos, wall: WallTime) -> Option<Vec<u8>> {
        if self.said_bye {
            return None;
        }
        if let Some(at) = self.bye_at {
            if now < at {
                return None;
            }
            self.said_bye = true;
            let info = self.info(wall);
            return Some(wire::bye(self.config.ssrc, &self.config.cname, info));
        }
        if !self.fresh || self.due.is_none_or(|d| d > now) {
            return None;
        }
        let info = self.info(wall)?;
        self.fresh = false;
        self.due = Some(now + self.draw_interval());
        self.reports += 1;
        Some(wire::sender_report(
            self.config.ssrc,
            &self.config.cname,
            info,
        ))
    }

    /// When [`Reporter::poll_transmit`] has something next: the BYE's
    /// time once the stream ended, else the report's due time once RTP
    /// left since the last one.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match (self.bye_at, self.said_bye) {
            (_, true) => None,
            (Some(at), false) => Some(at),
            _ if self.fresh => self.due,
            _ => None,
        }
    }

    /// Sender reports sent so far (not counting the one in the BYE).
    pub fn reports(&self) -> u64 {
        self.reports
    }

    /// Whether the BYE has gone.
    pub fn said_bye(&self) -> bool {
        self.said_bye
    }

    /// The stream's SSRC.
    pub fn ssrc(&self) -> Ssrc {
        self.config.ssrc
    }

    /// What a report at `wall` says, once anything was sent.
    fn info(&self, wall: WallTime) -> Option<SenderInfo> {
        let anchor = self.anchor?;
        Some(SenderInfo {
            ntp: NtpTime::from_wall(wall),
            rtp: anchor.rtp_at(wall, self.config.clock_rate),
            // Both counts wrap modulo 2^32 (RFC 3550 §6.4.1).
            packets: self.packets as u32,
            octets: self.octets as u32,
        })
    }

    /// The next interval: uniform in [0.5, 1.5) of the mean.
    fn draw_interval(&mut self) -> Nanos {
        self.draws = self.draws.wrapping_add(GAMMA);
        let u = splitmix64(self.draws) >> 32;
        let mean = self.config.interval.as_nanos();
        Nanos(mean / 2 + ((u128::from(mean) * u128::from(u)) >> 32) as u64)
    }
}
