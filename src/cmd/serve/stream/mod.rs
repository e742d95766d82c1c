//! The media path: the reader that fills each stream's ring ahead of time, the pacers that send on the schedule, the outputs (UDP, interleaved TCP), and each RTSP flow's RTCP.

pub(crate) mod meter;
pub(crate) mod output;
pub(crate) mod pacer;
pub(crate) mod reader;
pub(crate) mod rtcp;
