//! The constants of ST 2110-21 for one stream, in exact arithmetic.
//!
//! Every time in the model is a rational number of nanoseconds (TRS of
//! 1080p59.94 with 4320 packets is 100100/27 ns), so the analyser and the
//! sender schedule work in integer units small enough for `u128`/`i128`
//! and floor only where the standard does.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Error;
use crate::units::{MAX_UDP_PAYLOAD, Nanos, VIDEO_CLOCK_RATE};
use crate::video::FrameRate;

/// Largest Npackets a [`Model`] accepts (2^24; an 8K 4:4:4 16-bit frame
/// in 1200-byte packets needs about 170 000).
pub const MAX_PACKETS: u32 = 1 << 24;

/// Largest numerator or denominator of a frame rate a [`Model`] accepts
/// (2^24), which keeps every product of the model within 128 bits.
pub const MAX_RATE_TERM: u32 = 1 << 24;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// How the lines of a picture are scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scan {
    /// Whole frames.
    Progressive,
    /// Two fields per frame; the model's rate is then the field rate.
    Interlaced,
}

/// The packet read schedule of the virtual receiver (ST 2110-21 6.3, 6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadSchedule {
    /// Reads only during the active lines (Ractive < 1): N senders.
    Gapped,
    /// Reads evenly over the whole frame (Ractive = 1): NL senders.
    Linear,
}

impl ReadSchedule {
    /// Both schedules, gapped first.
    pub const ALL: [ReadSchedule; 2] = [ReadSchedule::Gapped, ReadSchedule::Linear];

    /// Lower-case name, as reports print it.
    pub const fn name(self) -> &'static str {
        match self {
            ReadSchedule::Gapped => "gapped",
            ReadSchedule::Linear => "linear",
        }
    }

    /// What the schedule's virtual receiver does, in plain words.
    pub const fn plain(self) -> &'static str {
        match self {
            ReadSchedule::Gapped => "reads a packet every TRS during the active lines only",
            ReadSchedule::Linear => "reads a packet every TRS evenly over the whole frame",
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            ReadSchedule::Gapped => 0,
            ReadSchedule::Linear => 1,
        }
    }
}

impl fmt::Display for ReadSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An exact non-negative number of nanoseconds, `num / den` in lowest
/// terms: the model's times are rational.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExactNanos {
    num: u128,
    den: u128,
}

impl ExactNanos {
    /// `num / den` nanoseconds, reduced (`den` of zero counts as one).
    pub fn new(num: u128, den: u128) -> ExactNanos {
        let den = den.max(1);
        let g = gcd(num, den);
        ExactNanos {
            num: num / g,
            den: den / g,
        }
    }

    /// The numerator in lowest terms.
    pub const fn num(self) -> u128 {
        self.num
    }

    /// The denominator in lowest terms.
    pub const fn den(self) -> u128 {
        self.den
    }

    /// Rounded down to whole nanoseconds (saturating).
    pub fn floor(self) -> Nanos {
        Nanos(u64::try_from(self.num / self.den).unwrap_or(u64::MAX))
    }

    /// Nanoseconds as a float, for reports.
    pub fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl fmt::Display for ExactNanos {
    /// Microseconds with three decimals (`3.707 µs`), or nanoseconds below
    /// one microsecond.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.as_f64();
        if ns >= 1e3 {
            write!(f, "{:.3} µs", ns / 1e3)
        } else {
            write!(f, "{ns:.1} ns")
        }
    }
}

/// The limits a stream is judged against, in packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// CMAX of a narrow gapped (N) sender: Ractive of the raster.
    pub cmax_n: u64,
    /// CMAX of a narrow linear (NL) sender: Ractive = 1.
    pub cmax_nl: u64,
    /// CMAX of a wide (W) sender.
    pub cmax_w: u64,
    /// VRX_FULL of narrow senders (N and NL).
    pub vrx_full_n: u64,
    /// VRX_FULL of wide senders.
    pub vrx_full_w: u64,
}

impl Limits {
    /// CMAX of `sender`.
    pub const fn cmax(&self, sender: SenderType) -> u64 {
        match sender {
            SenderType::N => self.cmax_n,
            SenderType::NL => self.cmax_nl,
            SenderType::W => self.cmax_w,
        }
    }

    /// VRX_FULL of `sender`.
    pub const fn vrx_full(&self, sender: SenderType) -> u64 {
        match sender {
            SenderType::N | SenderType::NL => self.vrx_full_n,
            SenderType::W => self.vrx_full_w,
        }
    }
}

/// ST 2110-10's Standard UDP Size Limit: bytes of UDP payload (RTP
/// header and all) a datagram may carry unless the sender declares more.
pub const STANDARD_UDP_SIZE_LIMIT: u32 = 1460;

/// ST 2110-10's Extended UDP Size Limit, declared as `MAXUDP=8960`.
pub const EXTENDED_UDP_SIZE_LIMIT: u32 = 8960;

/// MAXUDP in ST 2110-21's VRX_FULL when the Standard UDP Size Limit is in
/// use.
const MAXUDP_STANDARD: u128 = 1500;

/// The ST 2110-21 constants of one video stream.
///
/// Built from the frame rate, the raster (lines and scan) and Npackets,
/// the packets of one frame (of one field if interlaced). TRoffset is
/// TROdefault unless the SDP signals another (`TROFF`); the UDP size
/// limit is the standard one unless it signals `MAXUDP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Model {
    rate: FrameRate,
    lines: u32,
    scan: Scan,
    packets: u32,
    tr_offset: Option<Nanos>,
    max_udp: Option<u32>,
}

impl Model {
    /// The model of a stream of `packets` packets per frame at `rate`
    /// frames per second (fields per second if interlaced).
    pub fn new(rate: FrameRate, lines: u32, scan: Scan, packets: u32) -> Result<Model, Error> {
        if packets == 0 || packets > MAX_PACKETS {
            return Err(Error::Packets { packets });
        }
        if rate.num == 0 || rate.den == 0 || rate.num > MAX_RATE_TERM || rate.den > MAX_RATE_TERM {
            return Err(Error::Rate {
                num: rate.num,
                den: rate.den,
            });
        }
        if lines == 0 {
            return Err(Error::Lines);
        }
        Ok(Model {
            rate,
            lines,
            scan,
            packets,
            tr_offset: None,
            max_udp: None,
        })
    }

    /// The same model for a sender that declares a UDP size limit above
    /// the standard one (`MAXUDP=`, ST 2110-10): VRX_FULL's minimum is
    /// then counted in packets of that size.
    pub fn with_max_udp(self, max_udp: u32) -> Result<Model, Error> {
        if !Model::declarable_max_udp(max_udp) {
            return Err(Error::MaxUdp { max_udp });
        }
        Ok(Model {
            max_udp: Some(max_udp),
            ..self
        })
    }

    /// The same model for a sender of datagrams of up to `largest` bytes:
    /// with the limit it declares ([`Model::max_udp_for`]), if any.
    pub fn for_datagrams(self, largest: usize) -> Result<Model, Error> {
        match Model::max_udp_for(largest) {
            Some(b) => self.with_max_udp(b),
            None => Ok(self),
        }
    }

    /// Whether `bytes` is a UDP size limit a sender may declare (`MAXUDP`):
    /// above the standard limit, and a UDP payload at all. A model and an
    /// SDP parser take the same ones.
    pub const fn declarable_max_udp(bytes: u32) -> bool {
        bytes > STANDARD_UDP_SIZE_LIMIT && bytes <= MAX_UDP_PAYLOAD
    }

    /// The MAXUDP a sender of datagrams of up to `largest` bytes of UDP
    /// payload declares: none within the Standard UDP Size Limit, the
    /// Extended one up to it, and the size itself beyond (which is past
    /// ST 2110-10, but the formula still counts the bytes a receiver
    /// holds).
    pub fn max_udp_for(largest: usize) -> Option<u32> {
        let largest = u32::try_from(largest).unwrap_or(u32::MAX);
        match largest {
            0..=STANDARD_UDP_SIZE_LIMIT => None,
            n if n <= EXTENDED_UDP_SIZE_LIMIT => Some(EXTENDED_UDP_SIZE_LIMIT),
            n => Some(n.min(MAX_UDP_PAYLOAD)),
        }
    }

    /// The UDP size limit the sender declares (`MAXUDP`), if above the
    /// standard one.
    pub const fn max_udp(&self) -> Option<u32> {
        self.max_udp
    }

    /// The same model with a signalled TRoffset instead of TROdefault.
    pub fn with_tr_offset(self, tr_offset: Nanos) -> Result<Model, Error> {
        let frame = self.frame_period();
        if u128::from(tr_offset.0) * frame.den >= frame.num {
            return Err(Error::TrOffset {
                tr_offset,
                frame: frame.floor(),
            });
        }
        Ok(Model {
            tr_offset: Some(tr_offset),
            ..self
        })
    }

    /// Frames (fields) per second.
    pub const fn rate(&self) -> FrameRate {
        self.rate
    }

    /// Lines of the raster.
    pub const fn lines(&self) -> u32 {
        self.lines
    }

    /// Progressive or interlaced.
    pub const fn scan(&self) -> Scan {
        self.scan
    }

    /// Npackets: packets of one frame (field).
    pub const fn packets(&self) -> u32 {
        self.packets
    }

    /// Ractive of `schedule` as the standard's table writes it (active
    /// lines, total lines): `(1080, 1125)` for gapped 1080p, `(1, 1)` for
    /// linear.
    pub fn active_fraction(&self, schedule: ReadSchedule) -> (u32, u32) {
        match (schedule, self.scan) {
            (ReadSchedule::Linear, _) => (1, 1),
            (ReadSchedule::Gapped, Scan::Progressive) => match self.lines {
                720 => (720, 750),
                2160 => (2160, 2250),
                4320 => (4320, 4500),
                // LIST uses 1080/1125 for every progressive raster; the
                // table's other rows are the same fraction.
                _ => (1080, 1125),
            },
            (ReadSchedule::Gapped, Scan::Interlaced) => match self.lines {
                0..576 => (487, 525),
                576..1080 => (576, 625),
                _ => (1080, 1125),
            },
        }
    }

    /// TROdefault as a fraction of the frame period (of two fields).
    fn tr_offset_fraction(&self) -> (u128, u128) {
        match self.scan {
            Scan::Progressive if self.lines >= 1080 => (43, 1125),
            Scan::Progressive => (28, 750),
            // The field period is the model's Tframe: twice it is a frame.
            Scan::Interlaced => match self.lines {
                0..576 => (2 * 20, 525),
                576..1080 => (2 * 26, 625),
                _ => (2 * 22, 1125),
            },
        }
    }

    /// Tframe: the frame (field) period.
    pub fn frame_period(&self) -> ExactNanos {
        ExactNanos::new(
            u128::from(self.rate.den) * NANOS_PER_SEC,
            u128::from(self.rate.num),
        )
    }

    /// TRS = Tframe · Ractive / Npackets: the read period of `schedule`.
    pub fn trs(&self, schedule: ReadSchedule) -> ExactNanos {
        let (ra, rb) = self.active_fraction(schedule);
        ExactNanos::new(
            u128::from(self.rate.den) * NANOS_PER_SEC * u128::from(ra),
            u128::from(self.rate.num) * u128::from(rb) * u128::from(self.packets),
        )
    }

    /// TROdefault: 43/1125 · Tframe for progressive scan with at least
    /// 1080 lines, 28/750 · Tframe below (see the module docs for
    /// interlaced scan).
    pub fn tr_offset_default(&self) -> ExactNanos {
        let (p, q) = self.tr_offset_fraction();
        ExactNanos::new(
            p * u128::from(self.rate.den) * NANOS_PER_SEC,
            q * u128::from(self.rate.num),
        )
    }

    /// The TRoffset the SDP signals (`TROFF`), if any.
    pub const fn signalled_tr_offset(&self) -> Option<Nanos> {
        self.tr_offset
    }

    /// The TRoffset in use: signalled, or TROdefault.
    pub fn tr_offset(&self) -> ExactNanos {
        match self.tr_offset {
            Some(t) => ExactNanos::new(u128::from(t.0), 1),
            None => self.tr_offset_default(),
        }
    }

    /// TDRAIN = (Tframe / Npackets) / 1.1: the drain period of the Cinst
    /// bucket.
    pub fn drain_period(&self) -> ExactNanos {
        ExactNanos::new(
            10 * u128::from(self.rate.den) * NANOS_PER_SEC,
            11 * u128::from(self.rate.num) * u128::from(self.packets),
        )
    }

    /// CMAX and VRX_FULL for every sender type.
    pub fn limits(&self) -> Limits {
        let np = u128::from(self.packets);
        let (num, den) = (u128::from(self.rate.num), u128::from(self.rate.den));
        // Npackets / (k · Ractive · Tframe) = Np · rb · num / (k · ra · den).
        let per = |k: u128, (ra, rb): (u32, u32)| -> u64 {
            let v = np * u128::from(rb) * num / (k * u128::from(ra) * den);
            u64::try_from(v).unwrap_or(u64::MAX)
        };
        let gapped = self.active_fraction(ReadSchedule::Gapped);
        // The VRX_FULL minimums are 8 and 720 packets of 1500 bytes: the
        // same bytes in packets of MAXUDP.
        let max_udp = self.max_udp.map_or(MAXUDP_STANDARD, u128::from);
        let floor = |packets_of_1500: u128| (packets_of_1500 * MAXUDP_STANDARD / max_udp) as u64;
        Limits {
            cmax_n: per(43_200, gapped).max(4),
            cmax_nl: per(43_200, (1, 1)).max(4),
            cmax_w: per(21_600, (1, 1)).max(16),
            vrx_full_n: per(27_000, (1, 1)).max(floor(8)),
            vrx_full_w: per(300, (1, 1)).max(floor(720)),
        }
    }

    /// N = ⌊t / Tframe⌋: the frame of the ST 2110-10 epoch that `t`
    /// (nanoseconds since the epoch) falls in.
    pub fn epoch_frame(&self, t: Nanos) -> u64 {
        self.grid().epoch_frame(t)
    }

    pub(crate) fn grid(&self) -> Grid {
        let num = u128::from(self.rate.num);
        let den_ns = u128::from(self.rate.den) * NANOS_PER_SEC;
        let (q, tro_u) = match self.tr_offset {
            // One unit is 1/num ns: TRoffset in ns is tro·num units.
            Some(t) => (1, u128::from(t.0) * num),
            // One unit is 1/(num·q) ns: p/q of den_ns/num ns is p·den_ns.
            None => {
                let (p, q) = self.tr_offset_fraction();
                let g = gcd(p, q);
                (q / g, p / g * den_ns)
            }
        };
        let reads = ReadSchedule::ALL.map(|s| {
            let (ra, rb) = self.active_fraction(s);
            let g = gcd(u128::from(ra), u128::from(rb));
            let (ra, rb) = (u128::from(ra) / g, u128::from(rb) / g);
            Ratio {
                a: rb * u128::from(self.packets),
                b: q * den_ns * ra,
            }
        });
        let drain = Ratio {
            a: 11 * num * u128::from(self.packets),
            b: 10 * den_ns,
        };
        Grid {
            num,
            den_ns,
            q,
            tro_u,
            reads,
            drain,
        }
    }
}

/// `x ↦ ⌊x · a / b⌋`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ratio {
    a: u128,
    b: u128,
}

impl Ratio {
    /// ⌊x · a / b⌋, or `None` if it does not fit: x is split by b first,
    /// so nothing overflows while (b − 1) · a fits in 128 bits.
    pub(crate) fn apply(self, x: u128) -> Option<u128> {
        let (whole, rest) = (x / self.b, x % self.b);
        whole
            .checked_mul(self.a)?
            .checked_add(rest * self.a / self.b)
    }
}

/// The model as integers for the per-packet arithmetic.
///
/// Inside frame N, time counts in units of 1/(num · q) ns from
/// S = ⌊N · Tframe⌋ (whole nanoseconds), where q is TRoffset's
/// denominator, so TRoffset and the frame's own fractional start are
/// whole numbers of units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    num: u128,
    den_ns: u128,
    q: u128,
    tro_u: u128,
    /// Reads per unit of each schedule: TRS in units is b / a.
    reads: [Ratio; 2],
    /// Drains per nanosecond of the Cinst bucket.
    drain: Ratio,
}

/// Where frame N starts: `start` = ⌊N · Tframe⌋ and `rest` = the part
/// below a nanosecond, in 1/num ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameOrigin {
    pub(crate) start: Nanos,
    pub(crate) rest: u128,
}

impl Grid {
    pub(crate) fn epoch_frame(&self, t: Nanos) -> u64 {
        let n = u128::from(t.0) * self.num / self.den_ns;
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    pub(crate) fn origin(&self, frame: u64) -> FrameOrigin {
        let ticks = u128::from(frame) * self.den_ns;
        FrameOrigin {
            start: Nanos(u64::try_from(ticks / self.num).unwrap_or(u64::MAX)),
            rest: ticks % self.num,
        }
    }

    /// `t − N · Tframe` in whole nanoseconds (rounded down; `t` at or
    /// after the frame's start).
    pub(crate) fn since_frame(&self, origin: FrameOrigin, t: Nanos) -> Nanos {
        let elapsed = u128::from(t.saturating_sub(origin.start).0) * self.num;
        let ns = elapsed.saturating_sub(origin.rest) / self.num;
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// `t − TPR0` in units (negative before the first read).
    pub(crate) fn after_tpr0(&self, origin: FrameOrigin, t: Nanos) -> i128 {
        let since = u128::from(t.saturating_sub(origin.start).0);
        // At most 2^64 · 2^24 · 2^11: fits i128 with room to spare.
        let now = (since * self.num * self.q) as i128;
        now - (origin.rest * self.q + self.tro_u) as i128
    }

    /// `d` units after TPR0 as nanoseconds (rounded toward −∞).
    pub(crate) fn units_to_nanos(&self, d: i128) -> i64 {
        let ns = d.div_euclid((self.num * self.q) as i128);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Reads of `schedule` at or before `d` units after TPR0: one at TPR0
    /// and one every TRS after it; none before.
    pub(crate) fn reads_by(&self, schedule: ReadSchedule, d: i128) -> u64 {
        let Ok(d) = u128::try_from(d) else {
            return 0;
        };
        let reads = self.reads[schedule.index()].apply(d).unwrap_or(u128::MAX);
        u64::try_from(reads).map_or(u64::MAX, |r| r.saturating_add(1))
    }

    /// TRoffset in whole read periods of `schedule`.
    pub(crate) fn tr_offset_in_reads(&self, schedule: ReadSchedule) -> u64 {
        let reads = self.reads[schedule.index()].apply(self.tro_u);
        reads.map_or(u64::MAX, |r| u64::try_from(r).unwrap_or(u64::MAX))
    }

    /// Latency of a frame whose first packet arrived at `t` and whose RTP
    /// timestamp is `rtp_offset` ticks from ⌊N · Tframe · 90000⌋:
    /// `t − (N · Tframe + rtp_offset / 90 kHz)` in nanoseconds, rounded
    /// toward −∞.
    pub(crate) fn latency(&self, origin: FrameOrigin, t: Nanos, rtp_offset: i32) -> i64 {
        let clock = u128::from(VIDEO_CLOCK_RATE);
        let elapsed = u128::from(t.saturating_sub(origin.start).0) * self.num;
        // In 1/(num · 90000) ns: at most 2^88 · 2^17 and 2^31 · 2^54.
        let since = (elapsed.saturating_sub(origin.rest) * clock) as i128;
        let stamp = i128::from(rtp_offset) * (NANOS_PER_SEC * self.num) as i128;
        let ns = (since - stamp).div_euclid((self.num * clock) as i128);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Drains of the Cinst bucket in `elapsed` since its start.
    pub(crate) fn drains(&self, elapsed: Nanos) -> u128 {
        self.drain.apply(u128::from(elapsed.0)).unwrap_or(u128::MAX)
    }

    /// The shortest time since the bucket's start by which it has drained
    /// `count` times: the inverse of [`drains`](Self::drains).
    pub(crate) fn drain_time(&self, count: u128) -> Nanos {
        let Ratio { a, b } = self.drain;
        // Smallest x with ⌊x · a / b⌋ ≥ count is ⌈count · b / a⌉.
        let ns = count
            .checked_mul(b)
            .map_or(u128::MAX, |n| n.div_ceil(a.max(1)));
        Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// ⌊TPR0 + slot · TRS⌋ of `schedule` in frame `frame`: `slot` may be
    /// negative (released ahead of the first read).
    #[cfg(test)]
    pub(crate) fn read_time(&self, schedule: ReadSchedule, frame: u64, slot: i128) -> Nanos {
        self.read_time_frac(schedule, frame, slot, 1)
    }

    /// ⌊TPR0 + (slot / per) · TRS⌋ of `schedule` in frame `frame`: a
    /// read time at a fraction of a read (`per` ≥ 1 parts of one).
    pub(crate) fn read_time_frac(
        &self,
        schedule: ReadSchedule,
        frame: u64,
        slot: i128,
        per: u64,
    ) -> Nanos {
        let origin = self.origin(frame);
        let Ratio { a, b } = self.reads[schedule.index()];
        let per = i128::from(per.max(1));
        // Over the denominator num · q · a · per, from S = ⌊N · Tframe⌋:
        // the frame's sub-nanosecond start and TRoffset (in units, times a
        // and per), plus slot TRS (b / a units each, over per).
        let offset = ((origin.rest * self.q + self.tro_u) * a) as i128;
        let Some(offset) = offset.checked_mul(per).and_then(|base| {
            slot.checked_mul(b as i128)
                .and_then(|s| s.checked_add(base))
        }) else {
            return if slot < 0 { origin.start } else { Nanos::MAX };
        };
        let ns = offset.div_euclid((self.num * self.q * a) as i128 * per);
        let at = i128::from(origin.start.0) + ns;
        Nanos(u64::try_from(at.max(0)).unwrap_or(u64::MAX))
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl Model {
    /// The narrowest sender type whose receiver still absorbs a path's
    /// packet delay variation `pdv` (say its p99.9), if any. Packets held
    /// back by up to `pdv` and then delivered together add ⌈pdv / TDRAIN⌉
    /// to Cinst; reads keep their pace, so VRX spreads by ⌈pdv / TRS⌉.
    /// A type is allowed when both fit its CMAX and VRX_FULL, for an
    /// ideal sender of single packets.
    pub fn path_allows(&self, pdv: Nanos) -> Option<SenderType> {
        let over = |period: ExactNanos| {
            // ⌈pdv · den / num⌉ periods.
            let n = u128::from(pdv.0) * period.den();
            u64::try_from(n.div_ceil(period.num().max(1))).unwrap_or(u64::MAX)
        };
        let cinst = over(self.drain_period());
        let limits = self.limits();
        SenderType::ALL.into_iter().find(|&t| {
            let spread = over(self.trs(t.read_schedule()));
            cinst <= limits.cmax(t) && spread <= limits.vrx_full(t)
        })
    }
}

/// The ST 2110-21 sender types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SenderType {
    /// Narrow gapped: packets only during the active lines, CMAX_N and
    /// VRX_FULL_N.
    N,
    /// Narrow linear: packets evenly over the whole frame.
    NL,
    /// Wide: trains of up to CMAX_W packets, VRX_FULL_W.
    W,
}

impl SenderType {
    /// Every type, narrowest first.
    pub const ALL: [SenderType; 3] = [SenderType::N, SenderType::NL, SenderType::W];

    /// The name used on the command line and in reports: `N`, `NL`, `W`.
    pub const fn name(self) -> &'static str {
        match self {
            SenderType::N => "N",
            SenderType::NL => "NL",
            SenderType::W => "W",
        }
    }

    /// The type in plain words with its name, as reports explain it:
    /// `narrow gapped (N)`.
    pub const fn plain(self) -> &'static str {
        match self {
            SenderType::N => "narrow gapped (N)",
            SenderType::NL => "narrow linear (NL)",
            SenderType::W => "wide (W)",
        }
    }

    /// The SDP fmtp `TP=` value (ST 2110-21 section 8.1).
    pub const fn sdp_value(self) -> &'static str {
        match self {
            SenderType::N => "2110TPN",
            SenderType::NL => "2110TPNL",
            SenderType::W => "2110TPW",
        }
    }

    /// The type an SDP `TP=` value names (exact match, as the standard
    /// spells them).
    pub fn from_sdp(value: &str) -> Option<SenderType> {
        SenderType::ALL.into_iter().find(|t| t.sdp_value() == value)
    }

    /// The read schedule the type's packets follow. W has no schedule of
    /// its own in the standard; nagare's W senders keep the gapped one
    /// (its trains fall within the active lines).
    pub const fn read_schedule(self) -> ReadSchedule {
        match self {
            SenderType::N | SenderType::W => ReadSchedule::Gapped,
            SenderType::NL => ReadSchedule::Linear,
        }
    }
}

impl fmt::Display for SenderType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(num: u32, den: u32, lines: u32, packets: u32) -> Model {
        let rate = FrameRate::new(num, den).unwrap();
        Model::new(rate, lines, Scan::Progressive, packets).unwrap()
    }

    #[test]
    fn hand_computed_1080p5994() {
        // Tframe = 1001/60000 s = 50 050 000/3 ns.
        let m = model(60000, 1001, 1080, 4320);
        assert_eq!(m.frame_period(), ExactNanos::new(50_050_000, 3));
        // TRS = Tframe · 1080/1125 / 4320 = 100100/27 ns ≈ 3.707 µs.
        assert_eq!(m.trs(ReadSchedule::Gapped), ExactNanos::new(100_100, 27));
        assert_eq!(m.trs(ReadSchedule::Gapped).floor(), Nanos(3707));
        assert_eq!(m.trs(ReadSchedule::Gapped).to_string(), "3.707 µs");
        // Linear: Tframe / 4320 = 625625/162 ns ≈ 3.862 µs.
        assert_eq!(m.trs(ReadSchedule::Linear), ExactNanos::new(625_625, 162));
        // TROdefault = 43/1125 · Tframe = 17 217 200/27 ns ≈ 637.674 µs,
        // exactly 172 TRS.
        assert_eq!(m.tr_offset_default(), ExactNanos::new(17_217_200, 27));
        assert_eq!(m.tr_offset_default().floor(), Nanos(637_674));
        assert_eq!(m.tr_offset(), m.tr_offset_default());
        // TDRAIN = Tframe / 4320 / 1.1 = 284375/81 ns ≈ 3.511 µs.
        assert_eq!(m.drain_period(), ExactNanos::new(284_375, 81));
        // The "CMAX 6/5/16" are N, NL and W: NL's CMAX takes
        // Ractive = 1 (as LIST does for the linear schedule).
        // 4320 / (43200 · 0.96 · 1001/60000) = 6.24; Ractive 1: 5.99;
        // 4320 / (21600 · Tframe) = 11.99, so 16; 4320 / (27000 · Tframe) =
        // 9.59; 4320 / (300 · Tframe) = 863.1.
        assert_eq!(
            m.limits(),
            Limits {
                cmax_n: 6,
                cmax_nl: 5,
                cmax_w: 16,
                vrx_full_n: 9,
                vrx_full_w: 863,
            }
        );
        assert_eq!(m.limits().cmax(SenderType::NL), 5);
        assert_eq!(m.limits().vrx_full(SenderType::W), 863);
    }

    #[test]
    fn hand_computed_2160p50() {
        // 17280 packets (8 per line), Tframe 20 ms.
        let m = model(50, 1, 2160, 17_280);
        assert_eq!(m.active_fraction(ReadSchedule::Gapped), (2160, 2250));
        // 20 ms · 0.96 / 17280 = 1111.1 ns; TRO = 43/1125 · 20 ms = 764.4 µs.
        assert_eq!(m.trs(ReadSchedule::Gapped), ExactNanos::new(10_000, 9));
        assert_eq!(m.tr_offset_default().floor(), Nanos(764_444));
        // 17280/829.44 = 20.8; /864 = 20; /432 = 40; /540 = 32; /6 = 2880.
        assert_eq!(
            m.limits(),
            Limits {
                cmax_n: 20,
                cmax_nl: 20,
                cmax_w: 40,
                vrx_full_n: 32,
                vrx_full_w: 2880,
            }
        );
    }

    #[test]
    fn floors_hold_at_exact_boundaries() {
        // 1080p50: Np = 43200 · 0.96 · 0.02 · 7 = 5806.08 is not whole,
        // but Np = 864 · 7 = 6048 makes Np / (43200 · Tframe) exactly 7
        // with Ractive 1 (NL) and 7.29 gapped.
        let m = model(50, 1, 1080, 6048);
        assert_eq!(m.limits().cmax_nl, 7);
        assert_eq!(m.limits().cmax_n, 7);
        // One packet fewer falls just below 7.
        assert_eq!(model(50, 1, 1080, 6047).limits().cmax_nl, 6);
        // Small streams get the minimums.
        let small = model(25, 1, 576, 100).limits();
        assert_eq!(
            (
                small.cmax_n,
                small.cmax_w,
                small.vrx_full_n,
                small.vrx_full_w
            ),
            (4, 16, 8, 720)
        );
    }

    #[test]
    fn a_declared_maxudp_counts_the_vrx_full_minimums_in_its_packets() {
        // 1080p50 in whole-line 8960-byte packets: 1080 a frame, so the
        // rate terms are INT(1080·50/27000) = 2 and INT(1080·50/300) = 180.
        let m = model(50, 1, 1080, 1080);
        let jumbo = m.with_max_udp(EXTENDED_UDP_SIZE_LIMIT).unwrap().limits();
        // MAX(INT(12000/8960), 2) = 2, MAX(INT(1080000/8960), 180) = 180.
        assert_eq!((jumbo.vrx_full_n, jumbo.vrx_full_w), (2, 180));
        // 1080p59.94 in 592 packets of 8800: the rate term is 118, under
        // the minimum of 120 packets of 8960 bytes (1/300 s of the
        // stream, as 720 of 1500 are).
        let demo = model(60000, 1001, 1080, 592);
        assert_eq!(demo.limits().vrx_full_w, 720);
        let declared = demo.with_max_udp(EXTENDED_UDP_SIZE_LIMIT).unwrap();
        assert_eq!(declared.limits().vrx_full_w, 120);
        assert_eq!(declared.limits().cmax_w, 16);
        assert_eq!(declared.max_udp(), Some(8960));
        for bad in [0, 1460, 65_508] {
            assert_eq!(m.with_max_udp(bad), Err(Error::MaxUdp { max_udp: bad }));
        }
        assert!(m.with_max_udp(1461).is_ok());
        assert_eq!(Model::max_udp_for(1440), None);
        assert_eq!(Model::max_udp_for(1460), None);
        assert_eq!(Model::max_udp_for(1461), Some(8960));
        assert_eq!(Model::max_udp_for(8800), Some(8960));
        assert_eq!(Model::max_udp_for(9000), Some(9000));
        assert_eq!(Model::max_udp_for(100_000), Some(65_507));
    }

    #[test]
    fn what_a_path_allows() {
        let m = model(60000, 1001, 1080, 4320);
        // TDRAIN 3.511 µs, TRS 3.707 µs: 10 µs adds 3 to Cinst, spreads 3.
        assert_eq!(m.path_allows(Nanos::ZERO), Some(SenderType::N));
        assert_eq!(m.path_allows(Nanos::from_micros(10)), Some(SenderType::N));
        // 30 µs: Cinst + 9 > CMAX_N 6: wide.
        assert_eq!(m.path_allows(Nanos::from_micros(30)), Some(SenderType::W));
        // Up to 16 drains (56.17 µs) a W receiver absorbs; 57 µs adds 17.
        assert_eq!(m.path_allows(Nanos::from_micros(56)), Some(SenderType::W));
        assert_eq!(m.path_allows(Nanos::from_micros(57)), None);
    }

    #[test]
    fn raster_table() {
        let r = FrameRate::new(50, 1).unwrap();
        let at = |lines, scan| {
            let m = Model::new(r, lines, scan, 1000).unwrap();
            (
                m.active_fraction(ReadSchedule::Gapped),
                m.tr_offset_fraction(),
            )
        };
        assert_eq!(at(720, Scan::Progressive), ((720, 750), (28, 750)));
        assert_eq!(at(1080, Scan::Progressive), ((1080, 1125), (43, 1125)));
        assert_eq!(at(4320, Scan::Progressive), ((4320, 4500), (43, 1125)));
        assert_eq!(at(1200, Scan::Progressive), ((1080, 1125), (43, 1125)));
        assert_eq!(at(486, Scan::Interlaced), ((487, 525), (40, 525)));
        assert_eq!(at(576, Scan::Interlaced), ((576, 625), (52, 625)));
        assert_eq!(at(1080, Scan::Interlaced), ((1080, 1125), (44, 1125)));
        let m = Model::new(r, 1080, Scan::Interlaced, 1000).unwrap();
        assert_eq!(m.active_fraction(ReadSchedule::Linear), (1, 1));
        // 1080i50 fields: 22/1125 of a 40 ms frame = 782.2 µs.
        assert_eq!(m.tr_offset_default().floor(), Nanos(782_222));
    }

    #[test]
    fn refuses_what_it_cannot_model() {
        let r = FrameRate::new(50, 1).unwrap();
        assert_eq!(
            Model::new(r, 1080, Scan::Progressive, 0),
            Err(Error::Packets { packets: 0 })
        );
        assert!(Model::new(r, 1080, Scan::Progressive, MAX_PACKETS).is_ok());
        assert!(Model::new(r, 1080, Scan::Progressive, MAX_PACKETS + 1).is_err());
        assert_eq!(Model::new(r, 0, Scan::Progressive, 10), Err(Error::Lines));
        let odd = FrameRate::new(999_999_937, 1_000_000).unwrap();
        assert!(matches!(
            Model::new(odd, 1080, Scan::Progressive, 10),
            Err(Error::Rate { .. })
        ));
        let m = Model::new(r, 1080, Scan::Progressive, 10).unwrap();
        assert_eq!(
            m.with_tr_offset(Nanos::from_millis(20)),
            Err(Error::TrOffset {
                tr_offset: Nanos::from_millis(20),
                frame: Nanos::from_millis(20)
            })
        );
        let m = m.with_tr_offset(Nanos::from_micros(500)).unwrap();
        assert_eq!(m.tr_offset().floor(), Nanos::from_micros(500));
        assert_eq!(
            m.grid().read_time(ReadSchedule::Gapped, 3, 0),
            Nanos::from_micros(60_500)
        );
    }

    #[test]
    fn read_times_are_exact() {
        let m = model(60000, 1001, 1080, 4320);
        let g = m.grid();
        // Frame 3 starts at 50 050 000 ns exactly; TPR0 = that + 637 674.07.
        assert_eq!(g.read_time(ReadSchedule::Gapped, 3, 0), Nanos(50_687_674));
        // 27 reads later is exactly 100 100 ns later (TRS = 100100/27).
        assert_eq!(
            g.read_time(ReadSchedule::Gapped, 3, 27),
            Nanos(50_687_674 + 100_100)
        );
        // Frame 1 starts at 16 683 333.33 ns, its TPR0 is 17 321 007.41.
        assert_eq!(
            g.origin(1),
            FrameOrigin {
                start: Nanos(16_683_333),
                rest: 20_000
            }
        );
        assert_eq!(g.read_time(ReadSchedule::Gapped, 1, 0), Nanos(17_321_007));
        assert_eq!(g.read_time(ReadSchedule::Linear, 1, 2), Nanos(17_328_731));
        // Ahead of the first read, down to the frame start and not below 0.
        assert_eq!(g.read_time(ReadSchedule::Gapped, 0, -172), Nanos(0));
        assert_eq!(g.read_time(ReadSchedule::Gapped, 0, -1_000_000), Nanos(0));
        assert_eq!(g.read_time(ReadSchedule::Gapped, u64::MAX, 5), Nanos::MAX);
        // Fractions of a read: 27 and a half reads in is midway between
        // the 27th and the 28th (to the nanosecond both round down to).
        let (r27, r28) = (
            g.read_time(ReadSchedule::Gapped, 3, 27),
            g.read_time(ReadSchedule::Gapped, 3, 28),
        );
        let half = g.read_time_frac(ReadSchedule::Gapped, 3, 55, 2);
        assert!((half.0 as i64 - (r27.0 + r28.0) as i64 / 2).abs() <= 1);
        assert_eq!(
            g.read_time_frac(ReadSchedule::Gapped, 3, 27 * 1024, 1024),
            r27
        );
    }

    #[test]
    fn reads_and_drains_count_from_their_origin() {
        let m = model(60000, 1001, 1080, 4320);
        let g = m.grid();
        let o = g.origin(3);
        let tpr0 = g.read_time(ReadSchedule::Gapped, 3, 0);
        // TPR0 is 0.07 ns after the whole nanosecond: no read yet there.
        assert_eq!(g.reads_by(ReadSchedule::Gapped, g.after_tpr0(o, tpr0)), 0);
        let just_after = tpr0 + Nanos(1);
        assert_eq!(
            g.reads_by(ReadSchedule::Gapped, g.after_tpr0(o, just_after)),
            1
        );
        assert_eq!(
            g.reads_by(
                ReadSchedule::Gapped,
                g.after_tpr0(o, just_after + Nanos(100_100))
            ),
            28
        );
        assert_eq!(g.units_to_nanos(g.after_tpr0(o, o.start)), -637_675);
        assert_eq!(g.since_frame(o, just_after), Nanos(637_675));
        // 81 drains every 284 375 ns.
        assert_eq!(g.drains(Nanos(284_375)), 81);
        assert_eq!(g.drains(Nanos(284_374)), 80);
        assert_eq!(g.drains(Nanos::MAX), u128::from(u64::MAX) * 81 / 284_375);
    }
}
