//! What the MPEG-TS views and writers refuse.

use thiserror::Error;

/// Errors of the `mpegts` module; `Copy`, for the per-packet path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// Packets with sync bytes in place but no Program Association Table
    /// (PID 0) with a valid CRC: noise, or not a transport stream.
    #[error(
        "no Program Association Table (PID 0, valid CRC-32) in the first {packets} packets: \
         this is not an MPEG transport stream, though its sync bytes are in place"
    )]
    NoProgramTable {
        /// Packets looked at.
        packets: usize,
    },
    /// Fewer than 188 bytes.
    #[error("a TS packet is 188 bytes, got {len}")]
    PacketTooShort {
        /// Bytes given.
        len: usize,
    },
    /// The first byte is not 0x47: the stream lost packet alignment.
    #[error("sync byte is {found:#04x}, not 0x47: not a 188-byte-aligned MPEG-TS")]
    SyncByte {
        /// The byte found.
        found: u8,
    },
    /// adaptation_field_control 00, which ISO/IEC 13818-1 reserves.
    #[error("PID {pid:#06x}: adaptation_field_control 00 is reserved")]
    ReservedAdaptationControl {
        /// The packet's PID.
        pid: u16,
    },
    /// The adaptation field runs past the packet.
    #[error("adaptation field of {length} bytes; at most {max} fit this packet")]
    AdaptationLength {
        /// The announced length.
        length: u8,
        /// The most that fits.
        max: u8,
    },
    /// PCR flag set in an adaptation field too short to hold a PCR.
    #[error(
        "PCR flag set, but the adaptation field of {length} bytes cannot hold a PCR (7 needed)"
    )]
    PcrOutsideAdaptation {
        /// The adaptation field length.
        length: u8,
    },
    /// A datagram payload that is not 1 to 7 whole TS packets.
    #[error("datagram of {len} bytes is not 1 to 7 whole 188-byte TS packets")]
    DatagramLength {
        /// Bytes given.
        len: usize,
    },
    /// Output buffer too small for the datagram.
    #[error("output buffer of {got} bytes, {needed} needed")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// A flow id that the sender does not hold (removed, finished, or
    /// never added).
    #[error("no such TS flow")]
    NoSuchFlow,
    /// A chunk whose length runs past its buffer.
    #[error("chunk of {len} bytes in a buffer of {buffer}")]
    ChunkLength {
        /// Bytes said to be data.
        len: usize,
        /// Bytes in the buffer.
        buffer: usize,
    },
}
