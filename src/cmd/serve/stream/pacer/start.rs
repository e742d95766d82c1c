//! What a pacing thread is handed to start a flow: a leaf, so the
//! per-kind pacers (raw, ts) and the pool that dispatches to them do not
//! import each other.

use std::sync::Arc;

use nagare_api::serve::{Encapsulation, Pacing};

use crate::cmd::serve::hub::media::Media;
use crate::cmd::serve::hub::reservation::{Held, release};
use crate::cmd::serve::hub::table::{Counters, StreamId};
use crate::cmd::serve::stream::output::Output;
use crate::cmd::serve::stream::reader::Ring;

/// Why a stream failed when its TCP reader was dropped.
pub(crate) const READER_DROPPED: &str =
    "its RTSP/TCP reader did not keep up and was dropped (its write queue was full)";

/// What makes a raw flow a `nagare cluster` leg: it is epoch-aligned
/// (starts at a given epoch frame, whose content it sends for that frame),
/// may send one stripe only, and may number its packets from the epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leg {
    /// The split and the stripe sent, if only one.
    pub stripe: Option<(nagare_proto::video::stripe::Stripes, usize)>,
    /// Fixed SSRC: sequence numbers locked to the epoch.
    pub ssrc: Option<u32>,
    /// The first epoch frame.
    pub first_frame: u64,
}

/// Everything a flow needs to start.
pub(crate) struct Start {
    /// Its table id.
    pub id: StreamId,
    /// What it plays.
    pub media: Arc<Media>,
    /// Its read-ahead ring.
    pub ring: Ring,
    /// Where it goes.
    pub outputs: Vec<Output>,
    /// Raw video pacing.
    pub pacing: Pacing,
    /// RTP or plain UDP (TS only).
    pub encapsulation: Encapsulation,
    /// Its counters.
    pub counters: Arc<Counters>,
    /// Cluster leg settings (raw video only).
    pub leg: Option<Leg>,
    /// The SSRC to send with, if one was announced (an RTSP session's);
    /// a leg's own comes first.
    pub ssrc: Option<u32>,
    /// Its admitted rate, given back when the flow ends.
    pub reservation: Held,
}

impl Drop for Start {
    /// The flow is over (finished, failed or stopped): its rate is free.
    fn drop(&mut self) {
        release(&self.reservation);
    }
}
