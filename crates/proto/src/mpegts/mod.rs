//! MPEG-TS (ISO/IEC 13818-1) for serving `.ts` files: a checked view of
//! the 188-byte packet with its PCR, continuity checking per PID, a
//! PCR-paced departure schedule of 7-packet datagrams, and their
//! encapsulation over RTP (RFC 2250) or plain UDP.
//!
//! The serve driver reads a file, feeds each packet to a [`Schedule`]
//! (and, for statistics, a [`ContinuityChecker`]), and sends datagram `d`
//! (packets `7d..7d+7`) at its start time plus the departure offset, written
//! by a [`DatagramWriter`]. To loop, it calls [`Schedule::restart`] and
//! [`LoopStamper::next_pass`] and restamps each packet with
//! [`LoopStamper::stamp`] before writing it, so that receivers see one
//! continuous stream.

mod continuity;
mod datagram;
mod error;
mod looping;
mod packet;
mod schedule;
#[cfg(test)]
mod synth;

pub use continuity::{Continuity, ContinuityChecker, ContinuityCounters};
pub use datagram::{DatagramWriter, Encapsulation, MP2T_PAYLOAD_TYPE};
pub use error::Error;
pub use looping::LoopStamper;
pub use packet::{PACKET_LEN, PCR_HZ, PCR_MODULUS, Packet, Pcr, Pid, SYNC_BYTE};
pub use schedule::{
    DATAGRAM_LEN, Departure, PACKETS_PER_DATAGRAM, Schedule, ScheduleConfig, ScheduleCounters,
};
