//! One received RTP flow measured against its own schedule: what
//! `loadtest` reports per stream (loss, frames with a gap, and how far
//! packet arrivals stray from where the flow's schedule puts them).
//!
//! RFC 3550's interarrival jitter compares arrival gaps with RTP
//! timestamp gaps. Every packet of a raw video frame carries the frame's
//! one timestamp, so on raw video that formula sees nothing inside a
//! frame and a whole frame period at each frame boundary: its p99 was
//! the frame period, and raw video could never be "clean". Here packet j
//! of a frame stamped T stands at `T + j · TRS` on the flow's schedule,
//! `TRS = frame period / packets a frame` (the linear ST 2110-21
//! schedule), both learned from the flow itself; the deviation of a
//! pair of consecutive packets is
//! `|(R_i − R_i−1) − (S_i − S_i−1)|` with S that schedule time. A flow
//! whose every packet has its own timestamp (MPEG-TS, RFC 2250) has
//! j = 0 throughout, and the deviation is RFC 3550's D.

use super::{Arrival, Distribution, SeqExtender, SequenceTracker};
use crate::units::{MediaTime, Nanos, VIDEO_CLOCK_RATE};

/// The frame being received.
#[derive(Debug, Clone, Copy)]
struct Frame {
    timestamp: MediaTime,
    /// Extended sequence number of its first packet seen.
    first: u64,
    /// Its start was seen (the flow did not begin inside it).
    whole: bool,
    /// A sequence gap fell into it.
    lossy: bool,
}

/// The packet before, for the deviation of the next.
#[derive(Debug, Clone, Copy)]
struct Last {
    seq: u64,
    timestamp: MediaTime,
    /// Its place in its frame.
    index: u64,
    at: Nanos,
}

/// The flow's schedule, learned from its last whole frame.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// Packets of a frame.
    packets: u64,
    /// RTP ticks from one frame to the next.
    period: u32,
}

/// Counters and the schedule deviation of one flow (see the module docs).
#[derive(Debug, Clone)]
pub struct FlowMeter {
    seq: SeqExtender,
    tracker: SequenceTracker,
    packets: u64,
    bytes: u64,
    span: Option<(Nanos, Nanos)>,
    frame: Option<Frame>,
    frames: u64,
    frames_dropped: u64,
    schedule: Option<Schedule>,
    last: Option<Last>,
    deviation: Distribution,
}

impl Default for FlowMeter {
    fn default() -> Self {
        FlowMeter::new()
    }
}

impl FlowMeter {
    /// A meter that has seen nothing.
    pub fn new() -> FlowMeter {
        FlowMeter {
            seq: SeqExtender::default(),
            tracker: SequenceTracker::new(),
            packets: 0,
            bytes: 0,
            span: None,
            frame: None,
            frames: 0,
            frames_dropped: 0,
            schedule: None,
            last: None,
            // Two digits: a thousand flows' distributions stay small.
            deviation: Distribution::with_precision(2),
        }
    }

    /// One datagram of `len` bytes, RTP sequence number `seq` and
    /// timestamp `timestamp`, that arrived at `at`.
    pub fn record(&mut self, seq: u16, timestamp: MediaTime, len: usize, at: Nanos) {
        let ext = self.seq.extend(seq, None);
        let arrival = self.tracker.record(ext);
        self.packets += 1;
        self.bytes += len as u64;
        self.span = Some(self.span.map_or((at, at), |(a, _)| (a, at)));
        if self.frame.is_none_or(|f| f.timestamp != timestamp) {
            self.next_frame(ext, timestamp);
        }
        let Some(frame) = self.frame.as_mut() else {
            return;
        };
        frame.lossy |= matches!(arrival, Arrival::Ahead { .. });
        let index = ext.saturating_sub(frame.first);
        if let Some(last) = self.last
            && last.seq + 1 == ext
            && let Some(scheduled) = self.scheduled_gap(&last, timestamp, index)
        {
            let arrived = i128::from(at.0) - i128::from(last.at.0);
            let off = (arrived - scheduled).unsigned_abs();
            self.deviation
                .record(u64::try_from(off).unwrap_or(u64::MAX));
        }
        if self.last.is_none_or(|l| ext > l.seq) {
            self.last = Some(Last {
                seq: ext,
                timestamp,
                index,
                at,
            });
        }
    }

    /// Ends the frame in progress at a new timestamp, learning the
    /// schedule from it when it was whole.
    fn next_frame(&mut self, ext: u64, timestamp: MediaTime) {
        if let Some(f) = self.frame {
            self.frames += 1;
            self.frames_dropped += u64::from(f.lossy);
            let period = timestamp.ticks_since(f.timestamp);
            if f.whole && period > 0 && ext > f.first {
                self.schedule = Some(Schedule {
                    packets: ext - f.first,
                    period: period as u32,
                });
            }
        }
        self.frame = Some(Frame {
            timestamp,
            first: ext,
            whole: self.frame.is_some(),
            lossy: false,
        });
    }

    /// `S_i − S_i−1` in nanoseconds between `last` and a packet at
    /// `index` of a frame stamped `timestamp`, once the schedule is known
    /// (or needed: packets that each start a frame need none).
    fn scheduled_gap(&self, last: &Last, timestamp: MediaTime, index: u64) -> Option<i128> {
        let ticks = i128::from(timestamp.ticks_since(last.timestamp));
        let steps = i128::from(index) - i128::from(last.index);
        let clock = i128::from(VIDEO_CLOCK_RATE);
        if steps == 0 {
            return Some(ticks * 1_000_000_000 / clock);
        }
        let s = self.schedule?;
        let packets = i128::from(s.packets);
        // ticks + steps · period / packets, in ns, one division.
        let num = (ticks * packets + steps * i128::from(s.period)) * 1_000_000_000;
        Some(num / (clock * packets))
    }

    /// Datagrams received.
    pub const fn packets(&self) -> u64 {
        self.packets
    }

    /// Their bytes.
    pub const fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Datagrams missing so far (a late one takes its loss back).
    pub fn lost(&self) -> u64 {
        self.tracker.lost()
    }

    /// First and last arrival.
    pub const fn span(&self) -> Option<(Nanos, Nanos)> {
        self.span
    }

    /// Frames (RTP timestamps) that ended.
    pub const fn frames(&self) -> u64 {
        self.frames
    }

    /// Of those, frames with a sequence gap.
    pub const fn frames_dropped(&self) -> u64 {
        self.frames_dropped
    }

    /// Packets a frame and the frame period in ticks, once learned.
    pub fn schedule(&self) -> Option<(u64, u32)> {
        self.schedule.map(|s| (s.packets, s.period))
    }

    /// Each consecutive pair's deviation from the schedule, nanoseconds.
    pub const fn deviation(&self) -> &Distribution {
        &self.deviation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `frames` frames of `packets` packets at 25 fps (3600 ticks), packet
    /// j of frame f arriving at `arrive(f, j)` ns.
    fn flow(frames: u32, packets: u32, arrive: impl Fn(u32, u32) -> u64) -> FlowMeter {
        let mut m = FlowMeter::new();
        let mut seq = 65_000u16;
        for f in 0..frames {
            for j in 0..packets {
                let ts = MediaTime(0xffff_f000u32.wrapping_add(f * 3600));
                m.record(seq, ts, 1200, Nanos(arrive(f, j)));
                seq = seq.wrapping_add(1);
            }
        }
        m
    }

    #[test]
    fn a_linear_raw_flow_keeps_to_its_schedule_where_rfc_3550_saw_a_frame_period() {
        // 100 packets a frame, 400 µs apart: exactly the linear schedule.
        let m = flow(10, 100, |f, j| 1_000_000 + u64::from(f * 100 + j) * 400_000);
        assert_eq!(m.schedule(), Some((100, 3600)));
        let d = m.deviation();
        // From the third frame (the first is not known whole, the second
        // teaches the schedule): 8 frames of 100 pairs.
        assert_eq!(d.count(), 800);
        // RFC 3550's D on the same arrivals is 39.6 ms at every frame
        // start (400 µs of arrival against 40 ms of timestamp); here none.
        assert_eq!(d.max(), 0);
        assert_eq!((m.frames(), m.frames_dropped(), m.lost()), (9, 0, 0));
    }

    #[test]
    fn a_train_paced_flow_deviates_by_its_trains() {
        // Trains of 4: packets 4k..4k+3 leave together at the train's
        // first slot. Inside a train each pair arrives 400 µs early; the
        // next train's first packet 1.2 ms late.
        let m = flow(6, 100, |f, j| u64::from(f * 100 + j / 4 * 4) * 400_000);
        let d = m.deviation();
        assert_eq!(d.count(), 400);
        assert_eq!((d.min(), d.max()), (400_000, 1_200_000));
        // To the distribution's two digits: a quarter of the pairs start
        // a train.
        assert!(d.quantile(0.5).abs_diff(400_000) < 4_000);
        assert!(d.quantile(0.8).abs_diff(1_200_000) < 12_000);
    }

    #[test]
    fn a_late_packet_shows_as_its_lateness_twice() {
        // Packet 50 of frame 4 is 3 ms late: its pair and the next one.
        let m = flow(6, 100, |f, j| {
            let late = if (f, j) == (4, 50) { 3_000_000 } else { 0 };
            u64::from(f * 100 + j) * 400_000 + late
        });
        let d = m.deviation();
        assert_eq!(d.max(), 3_000_000);
        assert_eq!(d.quantile(0.99), 0);
        assert_eq!(d.count(), 400);
    }

    #[test]
    fn a_flow_of_one_packet_per_timestamp_is_rfc_3550() {
        // MPEG-TS over RTP: every datagram its own timestamp, 1 ms apart
        // in media time; arrivals alternate 0.9 and 1.1 ms apart.
        let mut m = FlowMeter::new();
        let mut at = 0u64;
        for k in 0..20u32 {
            at += if k % 2 == 0 { 900_000 } else { 1_100_000 };
            m.record(k as u16, MediaTime(k * 90), 1316, Nanos(at));
        }
        let d = m.deviation();
        assert_eq!(d.count(), 19);
        assert_eq!((d.min(), d.max()), (100_000, 100_000));
        assert_eq!(m.frames(), 19);
    }

    #[test]
    fn losses_drop_frames_and_skip_the_pairs_they_break() {
        let mut m = FlowMeter::new();
        for f in 0..5u32 {
            for j in 0..10u32 {
                if f == 3 && j == 4 {
                    continue;
                }
                let seq = (f * 10 + j) as u16;
                let at = Nanos(u64::from(f * 10 + j) * 4_000_000);
                m.record(seq, MediaTime(f * 3600), 100, at);
            }
        }
        assert_eq!((m.frames(), m.frames_dropped(), m.lost()), (4, 1, 1));
        // Pairs from the start of frame 2 (the schedule learned from
        // frame 1): 1 + 9, 1 + 7 (frame 3 lost the pairs around packet 4),
        // 1 + 9.
        assert_eq!(m.deviation().count(), 28);
        assert_eq!(m.deviation().max(), 0);
        assert_eq!((m.packets(), m.bytes()), (49, 4900));
    }
}
