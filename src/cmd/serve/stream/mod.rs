//! The media path: the reader that fills each stream's ring ahead of time, the pacers that send on the schedule, and the outputs (UDP, interleaved TCP).

pub(crate) mod meter;
pub(crate) mod output;
pub(crate) mod pacer;
pub(crate) mod reader;
