//! Whether one more stream fits: the rate budget of `--max-rate`, the
//! ring memory of `--max-memory`, and the work of the pacing and
//! read-ahead threads, predicted from what the admitted streams will ask
//! rather than only measured after they start.
//!
//! Measuring alone cannot refuse in time: 2,000 stream requests arrive in
//! two seconds, long before a one-second load window has seen the first
//! of them, and every one was admitted while the pacers fell 14 s behind.
//! So each stream reserves its [`Demand`] (rate, packets and bytes per
//! second, ring bytes) at admission, and the prediction is the reserved
//! total times the measured [`Cost`] of a packet and of a read byte. The
//! measured load still counts, since it sees what the model leaves out
//! (another process on the same cores, a slow disk).
//!
//! The pacing and read-ahead threads share the machine's cores, so the
//! prediction is also checked for all of them together: two pacers each
//! 90% busy and a reader 40% busy do not fit on two cores, and a pacer
//! that takes the reader's core leaves every ring dry (741 underruns were
//! counted before the first refusal when each thread was checked alone).
//!
//! A model can still be wrong (costs measured on a quiet second, another
//! process arriving), so the running streams' [`Slack`] closes admission
//! the moment it shrinks: a pacing thread that stays behind its schedule,
//! or a ring found empty when its next frame was asked for. Both come
//! before any stream's first underrun, and both are read at the moment
//! of asking, not over a window.
//!
//! The driver keeps the reserved total where its threads can share it
//! and asks [`Budget::admit`] for every new stream, under one lock, so
//! two admissions racing can never pass the budget together.

use crate::{BitRate, ByteSize, Nanos};

use super::Error;
pub use super::error::Thread;

/// What one stream asks of the server while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    /// Its payload rate.
    pub rate: BitRate,
    /// Datagrams it sends per second (every destination counted).
    pub packets_per_s: f64,
    /// Bytes the read-ahead thread reads or renders for it per second.
    pub read_bytes_per_s: f64,
    /// Memory its read-ahead ring holds.
    pub ring: ByteSize,
}

impl Demand {
    /// The two demands together.
    pub fn plus(self, other: Demand) -> Demand {
        Demand {
            rate: BitRate(self.rate.bps().saturating_add(other.rate.bps())),
            packets_per_s: self.packets_per_s + other.packets_per_s,
            read_bytes_per_s: self.read_bytes_per_s + other.read_bytes_per_s,
            ring: ByteSize(self.ring.bytes().saturating_add(other.ring.bytes())),
        }
    }

    /// What is left of `self` once `other` ends (never below zero).
    pub fn minus(self, other: Demand) -> Demand {
        Demand {
            rate: BitRate(self.rate.bps().saturating_sub(other.rate.bps())),
            packets_per_s: (self.packets_per_s - other.packets_per_s).max(0.0),
            read_bytes_per_s: (self.read_bytes_per_s - other.read_bytes_per_s).max(0.0),
            ring: ByteSize(self.ring.bytes().saturating_sub(other.ring.bytes())),
        }
    }
}

/// What a unit of work costs a thread, measured or assumed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Working time of a pacing thread per datagram sent.
    pub per_packet: Nanos,
    /// Working time of the read-ahead thread per MiB read or rendered.
    pub per_mib: Nanos,
}

impl Cost {
    /// Assumed until a thread has measured its own: 6 µs a datagram (a
    /// 2-core Xeon VM measured 5.5–7.7 µs with 25–100 pattern streams on
    /// loopback) and 1 ms a MiB (a page-cache read at 1 GB/s; the test
    /// pattern renders at about 4 GB/s). Erring high refuses early for
    /// the first second; the measurement then takes over.
    pub const PRIOR: Cost = Cost {
        per_packet: Nanos::from_micros(6),
        per_mib: Nanos::from_millis(1),
    };

    /// The cost of a MiB read, assumed from how fast one core of this
    /// machine copies memory (`bytes_per_second`) until the read-ahead
    /// thread has measured its own: twice a memcpy of a MiB, as a read
    /// from the page cache is the kernel's copy plus the calls around it.
    /// [`PRIOR`](Self::PRIOR)'s 1 ms a MiB refused every 4K60 and 8K raw
    /// stream of a server that had read nothing yet, and without a stream
    /// it never measures. `None` for a rate that is no rate.
    pub fn per_mib_for_copy_rate(bytes_per_second: f64) -> Option<Nanos> {
        (bytes_per_second.is_finite() && bytes_per_second > 0.0)
            .then(|| Nanos((2.0 * MIB as f64 / bytes_per_second * 1e9).ceil() as u64))
    }

    /// The cost per datagram a pacing thread measured: `busy` working
    /// time over `packets` sent in the same window. `None` while too few
    /// were sent to tell (fixed costs would swamp the figure).
    pub fn per_packet_from(busy: Nanos, packets: u64) -> Option<Nanos> {
        (packets >= MIN_SAMPLE_PACKETS).then(|| Nanos(busy.as_nanos() / packets))
    }

    /// The cost per MiB the read-ahead thread measured: `busy` working
    /// time over `bytes` read. `None` below 16 MiB read.
    pub fn per_mib_from(busy: Nanos, bytes: u64) -> Option<Nanos> {
        (bytes >= MIN_SAMPLE_BYTES)
            .then(|| Nanos((busy.as_nanos() as u128 * MIB as u128 / bytes as u128) as u64))
    }
}

/// Datagrams a window must have sent for its cost per datagram to count.
pub const MIN_SAMPLE_PACKETS: u64 = 2_000;
/// Bytes a window must have read for its cost per MiB to count.
pub const MIN_SAMPLE_BYTES: u64 = 16 * MIB;
const MIB: u64 = 1 << 20;

/// How close the running streams came to breaking their schedule, as
/// the driver sees it at the moment a stream asks in.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slack {
    /// How long the pacing thread furthest behind has gone without
    /// catching up with its schedule (zero: every one is on time).
    pub pacer_behind: Nanos,
    /// How long ago a pacing thread last found a running stream's ring
    /// empty when it asked for the stream's next frame (the read-ahead
    /// thread a whole frame behind), if it ever did.
    pub since_dry_ring: Option<Nanos>,
}

/// A pacing thread behind its schedule for longer than this is saturated,
/// not merely woken late: a thread that lost its core for a moment (a
/// busy machine's scheduling delay is a few milliseconds) catches up and
/// sleeps again within one pass over its flows.
pub const BEHIND_LIMIT: Nanos = Nanos::from_millis(20);

/// Admission stays closed this long after a ring was found empty: the
/// streams admitted just before (their first frames still 100 ms away)
/// have not yet added their reading work, so one quiet pass proves
/// nothing.
pub const DRY_RING_HOLD: Nanos = Nanos::from_secs(2);

/// Streams admitted this recently count as unproven: their first frames
/// leave 100 ms after admission, and a one-second load window must then
/// close over them before their cost is measured.
pub const PROVING_TIME: Nanos = Nanos::from_millis(1_500);

/// Share of the load limit that streams not yet proven may take. Costs
/// assumed or measured on a quieter second can be wrong by a factor (118
/// streams of bars passed a prediction at 6 µs a datagram on a loaded
/// 2-core machine, then ran 387 frames late): admitting no faster than
/// the measurement can follow bounds the damage of a wrong guess to this
/// share, and the measured load and the running streams' slack refuse
/// the rest.
pub const RAMP_SHARE: f64 = 0.25;

/// The server's threads as admission sees them now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Pacing threads sharing the streams.
    pub pacers: usize,
    /// Cores the pacing and read-ahead threads share.
    pub cores: usize,
    /// The busiest pacing thread's measured share of time spent working.
    pub pacer_load: f64,
    /// The read-ahead thread's measured share of time spent working.
    pub reader_load: f64,
    /// What a datagram and a MiB cost ([`Cost::PRIOR`] until measured).
    pub cost: Cost,
    /// How close the running streams are to running late.
    pub slack: Slack,
    /// What the streams admitted within [`PROVING_TIME`] ask, not yet
    /// seen by a measurement.
    pub unproven: Demand,
}

impl Work {
    /// The share of each pacing thread's time `total` would take, the
    /// streams spread evenly (the driver gives each new stream to the
    /// thread with the fewest).
    pub fn pacing_share(&self, total: &Demand) -> f64 {
        total.packets_per_s * self.cost.per_packet.as_secs_f64() / self.pacers.max(1) as f64
    }

    /// The share of the read-ahead thread's time `total` would take.
    pub fn reading_share(&self, total: &Demand) -> f64 {
        total.read_bytes_per_s / MIB as f64 * self.cost.per_mib.as_secs_f64()
    }

    /// The share of every core's time the pacing and the read-ahead work
    /// of `total` would take together: `pacers` threads and the reader
    /// on `cores` cores.
    pub fn cores_share(&self, total: &Demand) -> f64 {
        let pacing = self.pacing_share(total) * self.pacers.max(1) as f64;
        (pacing + self.reading_share(total)) / self.cores.max(1) as f64
    }

    /// Why the running streams are about to run late, if they are.
    fn slipping(&self, max: f64) -> Option<Error> {
        if self.slack.pacer_behind > BEHIND_LIMIT {
            return Some(Error::Slipping {
                thread: Thread::Pacing,
                why: format!(
                    "have been behind their schedule for {}",
                    self.slack.pacer_behind
                ),
                max,
            });
        }
        match self.slack.since_dry_ring {
            Some(ago) if ago < DRY_RING_HOLD => Some(Error::Slipping {
                thread: Thread::Reading,
                why: format!("left a running stream's ring empty {ago} ago"),
                max,
            }),
            _ => None,
        }
    }
}

/// The limits a new stream is checked against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// `--max-rate` (none: unlimited).
    pub max_rate: Option<BitRate>,
    /// `--max-load`: the share of a pacing or read-ahead thread's time
    /// past which no stream is added, measured or predicted.
    pub max_load: f64,
    /// `--max-memory`: ring bytes all streams may hold (none: unlimited).
    pub max_memory: Option<ByteSize>,
}

impl Budget {
    /// The reserved total after admitting `asked` on top of `reserved`,
    /// or why not. Load comes first (past it every stream would be late
    /// whatever the rate): measured, then the running streams' slack,
    /// then predicted; then memory; then rate.
    pub fn admit(&self, reserved: Demand, asked: Demand, work: &Work) -> Result<Demand, Error> {
        for (thread, load) in [
            (Thread::Pacing, work.pacer_load),
            (Thread::Reading, work.reader_load),
        ] {
            if load > self.max_load {
                return Err(Error::LoadOverBudget {
                    thread,
                    load,
                    max: self.max_load,
                });
            }
        }
        if let Some(e) = work.slipping(self.max_load) {
            return Err(e);
        }
        let after = reserved.plus(asked);
        self.predicted(after, asked, work)?;
        if let Some(max) = self.max_memory
            && after.ring > max
        {
            return Err(Error::MemoryOverBudget {
                asked: asked.ring,
                reserved: reserved.ring,
                max,
            });
        }
        match self.max_rate {
            Some(max) if after.rate > max => Err(Error::RateOverBudget {
                asked: asked.rate,
                reserved: reserved.rate,
                max,
            }),
            _ => Ok(after),
        }
    }

    /// Refuses a total whose predicted work passes `max_load` on the
    /// pacing or the read-ahead threads or on the cores they share, or
    /// whose streams not yet measured (`asked` among them) would take
    /// more than [`RAMP_SHARE`] of it.
    fn predicted(&self, after: Demand, asked: Demand, work: &Work) -> Result<(), Error> {
        let pacing = work.pacing_share(&after);
        if pacing > self.max_load {
            return Err(Error::PredictedOverBudget {
                thread: Thread::Pacing,
                predicted: pacing,
                max: self.max_load,
                per_unit: work.cost.per_packet,
                threads: work.pacers.max(1),
                units_per_s: after.packets_per_s,
            });
        }
        let reading = work.reading_share(&after);
        if reading > self.max_load {
            return Err(Error::PredictedOverBudget {
                thread: Thread::Reading,
                predicted: reading,
                max: self.max_load,
                per_unit: work.cost.per_mib,
                threads: 1,
                units_per_s: after.read_bytes_per_s / MIB as f64,
            });
        }
        // One stream alone is never refused for being new: the other
        // budgets judge it.
        let fresh = work.unproven.plus(asked);
        let ramp = work.cores_share(&fresh);
        if work.unproven != Demand::default() && ramp > RAMP_SHARE * self.max_load {
            return Err(Error::Unproven {
                predicted: ramp,
                max: RAMP_SHARE * self.max_load,
                within: PROVING_TIME,
            });
        }
        let cores = work.cores_share(&after);
        if cores > self.max_load {
            return Err(Error::CoresOverBudget {
                predicted: cores,
                max: self.max_load,
                pacers: work.pacers.max(1),
                cores: work.cores.max(1),
            });
        }
        Ok(())
    }
}
