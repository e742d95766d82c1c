//! What a reader sends back: its receiver reports, kept per reader.

use super::wire::{self, Packet, ReportBlock};
use crate::units::{Nanos, Ssrc};

/// A reader's latest reception report on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderReport {
    /// The reader's own SSRC.
    pub reader: Ssrc,
    /// What it said of the stream.
    pub block: ReportBlock,
    /// When it came.
    pub at: Nanos,
}

/// What came back from one reader, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeedbackCounters {
    /// Compound packets accepted.
    pub compounds: u64,
    /// Reception report blocks about the stream.
    pub reports: u64,
    /// BYEs (the reader leaving).
    pub byes: u64,
    /// Datagrams refused as malformed.
    pub malformed: u64,
    /// The stream's own compounds heard back (a multicast sender hears
    /// its reports and BYE on the group), left out of every other count.
    pub own: u64,
}

/// The RTCP one reader sends about one stream. Takes every datagram:
/// garbage is counted, never returned, so one bad packet stops nothing.
#[derive(Debug, Clone, Default)]
pub struct Feedback {
    source: Option<Ssrc>,
    latest: Option<ReaderReport>,
    counters: FeedbackCounters,
}

impl Feedback {
    /// Feedback on any source: a session that carries one stream takes
    /// every report block its reader sends.
    pub fn new() -> Feedback {
        Feedback::default()
    }

    /// Feedback that keeps only report blocks about `source`.
    pub fn for_source(source: Ssrc) -> Feedback {
        Feedback {
            source: Some(source),
            ..Feedback::default()
        }
    }

    /// Takes one RTCP compound packet that came at `now`. For a
    /// [`Feedback::for_source`], a compound whose opening report is the
    /// source's own (RFC 3550 §6.1: every compound opens with its
    /// sender's SR or RR) is the stream's own report or BYE coming back
    /// on a multicast group: counted as such, and nothing else.
    pub fn handle_input(&mut self, now: Nanos, datagram: &[u8]) {
        let packets = match wire::parse(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if let (Some(source), Some(first)) = (self.source, packets.first())
            && opener(first) == Some(source)
        {
            self.counters.own += 1;
            return;
        }
        self.counters.compounds += 1;
        for p in packets {
            match p {
                Packet::ReceiverReport { ssrc, blocks }
                | Packet::SenderReport { ssrc, blocks, .. } => self.blocks(now, ssrc, &blocks),
                Packet::Bye { .. } => self.counters.byes += 1,
                Packet::Sdes | Packet::Other { .. } => {}
            }
        }
    }

    fn blocks(&mut self, now: Nanos, reader: Ssrc, blocks: &[ReportBlock]) {
        for b in blocks {
            if self.source.is_some_and(|s| s != b.source) {
                continue;
            }
            self.counters.reports += 1;
            self.latest = Some(ReaderReport {
                reader,
                block: *b,
                at: now,
            });
        }
    }

    /// The latest report about the stream, if any came (never one of its
    /// own: a sender's report carries no block about itself).
    pub fn latest(&self) -> Option<&ReaderReport> {
        self.latest.as_ref()
    }

    /// Counters so far.
    pub fn counters(&self) -> FeedbackCounters {
        self.counters
    }
}

/// The SSRC of a compound's opening report.
fn opener(p: &Packet) -> Option<Ssrc> {
    match p {
        Packet::SenderReport { ssrc, .. } | Packet::ReceiverReport { ssrc, .. } => Some(*ssrc),
        _ => None,
    }
}
