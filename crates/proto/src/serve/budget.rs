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

/// The server's threads as admission sees them now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Pacing threads sharing the streams.
    pub pacers: usize,
    /// The busiest pacing thread's measured share of time spent working.
    pub pacer_load: f64,
    /// The read-ahead thread's measured share of time spent working.
    pub reader_load: f64,
    /// What a datagram and a MiB cost ([`Cost::PRIOR`] until measured).
    pub cost: Cost,
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
    /// whatever the rate), measured, then predicted; then memory; then
    /// rate.
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
        let after = reserved.plus(asked);
        self.predicted(after, work)?;
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
    /// pacing or the read-ahead threads.
    fn predicted(&self, after: Demand, work: &Work) -> Result<(), Error> {
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
        Ok(())
    }
}
