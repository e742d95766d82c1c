//! The RTCP machine of one reading stream: it reads the sender's reports
//! and answers them with receiver reports (RFC 3550 §6.4.2) on the
//! randomised interval.

use super::INTERVAL;
use super::clock::NtpTime;
use super::wire::{self, Packet, ReportBlock};
use crate::splitmix::{GAMMA, splitmix64};
use crate::units::{Nanos, Ssrc};

/// The largest cumulative loss a report block holds (24 bits, signed:
/// RFC 3550 §6.4.1 clamps a larger count here).
const MAX_CUMULATIVE_LOST: u64 = 0x7f_ffff;

/// What the reader received of the stream so far, as the driver's RTP
/// machine counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reception {
    /// The stream's SSRC.
    pub source: Ssrc,
    /// Highest extended sequence number received.
    pub highest_seq: u64,
    /// Distinct packets received.
    pub received: u64,
    /// Packets missing from the first..highest sequence range.
    pub lost: u64,
    /// Interarrival jitter, in RTP timestamp units.
    pub jitter: u32,
}

/// What came from the sender and went back, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReaderCounters {
    /// Sender reports read (those in a closing BYE compound too).
    pub sender_reports: u64,
    /// BYEs read.
    pub byes: u64,
    /// Datagrams refused as malformed.
    pub malformed: u64,
    /// Receiver reports handed out to send.
    pub reports_sent: u64,
}

/// The last sender report heard, for the LSR and DLSR fields.
#[derive(Debug, Clone, Copy)]
struct LastSr {
    ntp: NtpTime,
    at: Nanos,
}

/// The RTCP machine of one reading stream. It reports only once the
/// sender has reported (a sender without RTCP gets nothing back, and the
/// driver learns where to send from the SR's source address).
#[derive(Debug, Clone)]
pub struct Reader {
    ssrc: Ssrc,
    cname: String,
    interval: Nanos,
    draws: u64,
    last_sr: Option<LastSr>,
    due: Option<Nanos>,
    /// Expected and received at the previous report, for its fraction lost.
    prior: (u64, u64),
    counters: ReaderCounters,
}

impl Reader {
    /// A reader whose own SSRC is `ssrc`, named `cname`, reporting every
    /// [`INTERVAL`] on average; `seed` randomises the interval.
    pub fn new(ssrc: Ssrc, cname: impl Into<String>, seed: u64) -> Reader {
        Reader {
            ssrc,
            cname: cname.into(),
            interval: INTERVAL,
            draws: seed,
            last_sr: None,
            due: None,
            prior: (0, 0),
            counters: ReaderCounters::default(),
        }
    }

    /// Takes one RTCP datagram from the sender that came at `now`. The
    /// first sender report makes a receiver report due at once.
    pub fn handle_input(&mut self, now: Nanos, datagram: &[u8]) {
        let Ok(packets) = wire::parse(datagram) else {
            self.counters.malformed += 1;
            return;
        };
        for p in packets {
            match p {
                Packet::SenderReport { info, .. } => {
                    self.counters.sender_reports += 1;
                    self.last_sr = Some(LastSr {
                        ntp: info.ntp,
                        at: now,
                    });
                    self.due.get_or_insert(now);
                }
                Packet::Bye { .. } => self.counters.byes += 1,
                _ => {}
            }
        }
    }

    /// The next receiver report, if one is due at `now`, on what
    /// `reception` says; `None` before any sender report or packet.
    pub fn poll_transmit(&mut self, now: Nanos, reception: Option<Reception>) -> Option<Vec<u8>> {
        let r = reception?;
        if self.due.is_none_or(|d| d > now) {
            return None;
        }
        let block = self.block(now, r);
        self.due = Some(now + self.draw_interval());
        self.counters.reports_sent += 1;
        Some(wire::receiver_report(self.ssrc, &self.cname, block))
    }

    /// When the next receiver report is due, once a sender report came.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.due
    }

    /// Counters so far.
    pub fn counters(&self) -> ReaderCounters {
        self.counters
    }

    /// The report block on `r` at `now` (RFC 3550 A.3 for the loss).
    fn block(&mut self, now: Nanos, r: Reception) -> ReportBlock {
        let expected = r.received + r.lost;
        let (prior_expected, prior_received) = self.prior;
        self.prior = (expected, r.received);
        let expected_since = expected.saturating_sub(prior_expected);
        let received_since = r.received.saturating_sub(prior_received);
        let lost_since = expected_since.saturating_sub(received_since);
        // Nothing expected since: nothing lost.
        let fraction_lost = (lost_since << 8)
            .checked_div(expected_since)
            .map_or(0, |f| f.min(255) as u8);
        let (last_sr, delay_since_last_sr) = self.last_sr.map_or((0, 0), |sr| {
            let delay = now.saturating_sub(sr.at).as_nanos();
            // 1/65536 s units, saturating rather than wrapping.
            let units = u128::from(delay) * 65_536 / 1_000_000_000;
            (sr.ntp.middle(), u32::try_from(units).unwrap_or(u32::MAX))
        });
        ReportBlock {
            source: r.source,
            fraction_lost,
            cumulative_lost: r.lost.min(MAX_CUMULATIVE_LOST) as i32,
            // The low 32 bits: 16 of cycles, 16 of sequence number.
            highest_seq: r.highest_seq as u32,
            jitter: r.jitter,
            last_sr,
            delay_since_last_sr,
        }
    }

    /// The next interval: uniform in [0.5, 1.5) of the mean.
    fn draw_interval(&mut self) -> Nanos {
        self.draws = self.draws.wrapping_add(GAMMA);
        let u = splitmix64(self.draws) >> 32;
        let mean = self.interval.as_nanos();
        Nanos(mean / 2 + ((u128::from(mean) * u128::from(u)) >> 32) as u64)
    }
}
