//! MPEG-TS (ISO/IEC 13818-1) for serving `.ts` files: a checked view of
//! the 188-byte packet with its PCR, continuity checking per PID, a
//! PCR-paced departure schedule of 7-packet datagrams, and their
//! encapsulation over RTP (RFC 2250) or plain UDP.
//!
//! The [`Sender`] is the machine of serve's TS flows: it feeds each
//! file's packets to a [`Schedule`], sends datagram `d` (packets
//! `7d..7d+7`) at the flow's start plus the departure offset (moved on by
//! pauses), written by a [`DatagramWriter`], and on a loop calls
//! [`Schedule::restart`] and restamps each packet with a [`LoopStamper`],
//! so that receivers see one continuous stream. Its driver only reads the
//! file, sends the datagrams and keeps the clock.

mod continuity;
mod datagram;
mod error;
mod looping;
mod packet;
pub mod psi;
mod schedule;
pub mod sender;
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
pub use sender::{FlowId, FlowSpec, Sender};
