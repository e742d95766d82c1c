//! A flow's RTCP on its pacing thread: nagare-proto's `rtcp::Reporter`
//! is fed each train the flow sends, and what it hands back (sender
//! reports, the closing BYE) goes out on every output's RTCP path. Only
//! outputs of RTSP sessions have one; a flow without any has no reporter.
//! A flow that ends keeps its reporter and outputs in [`Farewells`] until
//! its BYE has gone (`rtcp::BYE_DELAY` later).

use nagare_proto::rtcp::{self, Anchor, Input, Reporter, WallTime};
use nagare_proto::{Nanos, Ssrc};

use crate::clock::epoch_ns;
use crate::cmd::serve::stream::output::Output;

/// The RTCP side of one flow.
pub(crate) struct FlowRtcp {
    reporter: Reporter,
    /// Wall-clock minus pacer time, in ns, read when a report is due so
    /// that a datagram's departure maps to wall-clock time without a
    /// clock read per datagram.
    offset: Option<i128>,
}

impl FlowRtcp {
    /// The RTCP of a flow with `ssrc` going to `outputs`, if any of them
    /// takes RTCP.
    pub(crate) fn for_outputs(outputs: &[Output], ssrc: Ssrc) -> Option<FlowRtcp> {
        if !outputs.iter().any(Output::takes_rtcp) {
            return None;
        }
        // RFC 7022: a CNAME of the stream's own, random, as nothing ties
        // several nagare streams together for a player to sync.
        let cname = format!("nagare-{:08x}@serve", ssrc.0);
        let seed = getrandom::u64().unwrap_or(u64::from(ssrc.0));
        let config = rtcp::Config::new(ssrc, cname, seed);
        Some(FlowRtcp {
            reporter: Reporter::new(config),
            offset: None,
        })
    }

    /// Wall-clock time of `at` on the pacer's timeline, where `now` is
    /// now on it: the clock is read again whenever a report is due.
    pub(crate) fn wall(&mut self, now: Nanos, at: Nanos) -> WallTime {
        let due = self.reporter.poll_timeout().is_none_or(|t| t <= now);
        let offset = match self.offset {
            Some(o) if !due => o,
            _ => {
                let o = epoch_ns() as i128 - i128::from(now.as_nanos());
                self.offset = Some(o);
                o
            }
        };
        WallTime(u64::try_from(offset + i128::from(at.as_nanos())).unwrap_or(0))
    }

    /// Takes a train of `packets` datagrams of `bytes` in all that left at
    /// `now`, and sends a report on `outputs` if one is due.
    pub(crate) fn sent(
        &mut self,
        now: Nanos,
        packets: u64,
        bytes: u64,
        anchor: Anchor,
        outputs: &[Output],
    ) {
        let payload_octets = bytes.saturating_sub(packets * rtcp::RTP_HEADER_BYTES);
        self.reporter.handle_input(
            now,
            Input::Sent {
                packets,
                payload_octets,
                anchor,
            },
        );
        if self.reporter.poll_timeout().is_some_and(|t| t <= now) {
            self.flush(now, outputs);
        }
    }

    fn flush(&mut self, now: Nanos, outputs: &[Output]) {
        let wall = WallTime(u64::try_from(epoch_ns()).unwrap_or(0));
        while let Some(bytes) = self.reporter.poll_transmit(now, wall) {
            for out in outputs {
                // A refused report is not worth a counter of its own: the
                // next one follows within the interval.
                let _ = out.rtcp(&bytes);
            }
        }
    }
}

/// Flows that ended by themselves, each with its outputs, until their BYE
/// has gone.
#[derive(Default)]
pub(crate) struct Farewells {
    pending: Vec<(FlowRtcp, Vec<Output>)>,
}

impl Farewells {
    /// A flow that ended at `now`: its BYE goes to `outputs` once due.
    pub(crate) fn push(&mut self, now: Nanos, mut rtcp: FlowRtcp, outputs: Vec<Output>) {
        rtcp.reporter.handle_input(now, Input::Ended);
        self.pending.push((rtcp, outputs));
    }

    /// Sends every BYE due at `now`, and lets go of those flows.
    pub(crate) fn step(&mut self, now: Nanos) {
        self.pending.retain_mut(|(r, outputs)| {
            if r.reporter.poll_timeout().is_some_and(|t| t <= now) {
                r.flush(now, outputs);
            }
            !r.reporter.said_bye()
        });
    }

    /// When the next BYE is due.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.pending
            .iter()
            .filter_map(|(r, _)| r.reporter.poll_timeout())
            .min()
    }
}
