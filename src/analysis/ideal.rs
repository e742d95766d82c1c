//! The ST 2110-21 verdict a receiver with a perfect clock would give the
//! stream `send` just sent: each packet observed when its send call
//! returned, on the schedule's own epoch grid. Kernel and wire add their
//! own delay variation on top; this is the part the sender is to blame
//! for.

use nagare_api::st2110::AnalyzeReport;
use nagare_proto::video::sender::Transmit;
use nagare_proto::video::st2110_21::{
    Analyzer, Model, MonitorEvent, MonitorStats, Observation, SenderType,
};
use nagare_proto::{ByteSize, Nanos};

use super::collect::Collector;

/// See the module docs.
pub(crate) struct IdealReceiver {
    analyzer: Analyzer,
    collector: Collector,
    /// Epoch nanoseconds at the sender's timeline zero.
    epoch_base: i128,
    packets: usize,
}

impl IdealReceiver {
    /// A receiver judging by `model` the stream declared `declared`,
    /// whose timeline point `at` is epoch time `at + epoch_base`.
    pub(crate) fn new(model: Model, declared: SenderType, epoch_base: i128) -> IdealReceiver {
        let mut collector = Collector::new("send (ideal receiver)".into(), Some(declared));
        collector.event(MonitorEvent::Model(model));
        collector.set_timeline(epoch_base);
        IdealReceiver {
            analyzer: Analyzer::new(model),
            collector,
            epoch_base,
            packets: model.packets() as usize,
        }
    }

    /// Train `t` left at `at` on the sender's timeline; `len` is each
    /// packet's length.
    pub(crate) fn sent(&mut self, at: Nanos, t: &Transmit, len: usize) {
        let epoch = (i128::from(at.0) + self.epoch_base).max(0);
        let arrival = Nanos(u64::try_from(epoch).unwrap_or(u64::MAX));
        for (k, j) in t.packets.clone().enumerate() {
            self.analyzer.handle_input(Observation {
                arrival,
                rtp_timestamp: t.timestamp,
                marker: j + 1 == self.packets,
                seq: t.first_seq.add(k as u64),
                len: ByteSize(len as u64),
            });
        }
        while let Some(r) = self.analyzer.poll_event() {
            self.collector.event(MonitorEvent::Frame(r));
        }
    }

    /// The analysis of everything sent.
    pub(crate) fn finish(mut self) -> AnalyzeReport {
        self.analyzer.flush();
        while let Some(r) = self.analyzer.poll_event() {
            self.collector.event(MonitorEvent::Frame(r));
        }
        let (report, _) = self
            .collector
            .finish(Some(&self.analyzer), MonitorStats::default(), 0);
        report
    }
}
