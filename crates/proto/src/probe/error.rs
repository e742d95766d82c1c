//! What the probe can refuse or fail on: datagrams and control frames
//! that are not the protocol, parameters out of range, and a session that
//! ends before its results.
//!
//! `Copy` and allocation-free, as every error of the core: the datagram
//! parsers return it per packet. Text a peer sent (an abort or refusal
//! message) travels in [`crate::probe::Event`] instead.

use std::fmt;

use thiserror::Error;

use crate::units::Nanos;

/// Everything the probe refuses or fails on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// Input shorter than its header requires.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// Output buffer too small for what must be written.
    #[error("buffer too small: {needed} bytes needed")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
    },
    /// Datagram that is not a nagare probe packet (not RTP, wrong payload
    /// type, magic or echo kind).
    #[error("not a nagare probe packet")]
    NotProbe,
    /// Datagram or control message of another protocol version.
    #[error(
        "peer speaks probe protocol version {got}, this build speaks {want}: run the same \
         nagare release on both ends"
    )]
    Version {
        /// Version in the input.
        got: u32,
        /// Version this build speaks.
        want: u32,
    },
    /// The peer reported another number of streams than the test has.
    #[error("the peer reported {got} streams for a test of {want}")]
    Streams {
        /// Reports in the message.
        got: usize,
        /// Streams in the test.
        want: u32,
    },
    /// A test asked to be both reverse and bidirectional.
    #[error(
        "a test is reverse (the server sends) or bidirectional (both send), not both: \
         drop --reverse, as --bidir already sends from the server"
    )]
    ReverseBidir,
    /// Control frame of an unknown type byte.
    #[error("control frame of unknown type 0x{0:02x}")]
    FrameType(u8),
    /// Control frame longer than the protocol allows: a hostile or
    /// confused peer.
    #[error("control frame of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge {
        /// Length announced.
        len: usize,
        /// Largest accepted.
        max: usize,
    },
    /// Control message whose JSON does not parse as a message.
    #[error("malformed control message (JSON error at line {line}, column {column})")]
    Malformed {
        /// Line of the JSON error.
        line: usize,
        /// Column of the JSON error.
        column: usize,
    },
    /// A test parameter outside its range.
    #[error("{param} = {value} is out of range {min}..={max}")]
    OutOfRange {
        /// Which parameter.
        param: Param,
        /// Value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A frame rate that does not parse or is out of range.
    #[error("frame rate must be like 30, 60000/1001 or 29.97 (above 0, at most 1000)")]
    FrameRate,
    /// The client asked for more than the server's `--max-rate`.
    #[error(
        "rate {} Mbit/s above this server's --max-rate {} Mbit/s; ask for a lower --rate, \
         or start the server with a higher --max-rate",
        mbit(.rate), mbit(.max)
    )]
    AboveMaxRate {
        /// Rate asked for, bits/s.
        rate: u64,
        /// The server's cap, bits/s.
        max: u64,
    },
    /// The client's token is missing or wrong.
    #[error("missing or wrong --token")]
    Token,
    /// The peer sent a message that has no place at this stage.
    #[error("unexpected {got} message {stage}")]
    Unexpected {
        /// What came.
        got: MessageKind,
        /// Where the session was.
        stage: Stage,
    },
    /// The peer closed the control connection before the session ended.
    #[error("the peer closed the control connection {stage}")]
    Closed {
        /// Where the session was.
        stage: Stage,
    },
    /// A stage took longer than its deadline.
    #[error("nothing came from the peer within {after} {stage}")]
    Timeout {
        /// The stage that ran out of time.
        stage: Stage,
        /// How long it had.
        after: Nanos,
    },
    /// The server announced more records than the test can have produced.
    #[error("the peer announced {announced} records, more than the test allows ({max})")]
    TooManyRecords {
        /// Records announced.
        announced: u64,
        /// Most the test can produce.
        max: u64,
    },
    /// The server sent more records than it announced.
    #[error("the peer sent more records than it announced ({announced})")]
    ExtraRecords {
        /// Records announced.
        announced: u64,
    },
}

fn mbit(bps: &u64) -> f64 {
    *bps as f64 / 1e6
}

/// A test parameter, for [`Error::OutOfRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `rate_bps`.
    Rate,
    /// `duration_ms`.
    Duration,
    /// `packet_size`.
    PacketSize,
    /// `playout_us`.
    Playout,
    /// `burst_threshold`.
    BurstThreshold,
    /// `interval_ms`.
    Interval,
    /// `burst_us`.
    Burst,
    /// `streams`.
    Streams,
    /// Packets the schedule plans, over every stream.
    Packets,
    /// Reporting intervals the schedule spans.
    Intervals,
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Param::Rate => "rate (bit/s)",
            Param::Duration => "duration (ms)",
            Param::PacketSize => "packet size (bytes)",
            Param::Playout => "playout (us)",
            Param::BurstThreshold => "burst threshold (packets)",
            Param::Interval => "interval (ms)",
            Param::Burst => "burst (us)",
            Param::Streams => "parallel streams",
            Param::Packets => "packets in the test",
            Param::Intervals => "intervals in the test",
        })
    }
}

/// The kind of a control frame, for messages about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// [`crate::probe::ControlMessage::Hello`].
    Hello,
    /// [`crate::probe::ControlMessage::Welcome`].
    Welcome,
    /// [`crate::probe::ControlMessage::Refused`].
    Refused,
    /// [`crate::probe::ControlMessage::Done`].
    Done,
    /// [`crate::probe::ControlMessage::Report`].
    Report,
    /// [`crate::probe::ControlMessage::Interval`].
    Interval,
    /// [`crate::probe::ControlMessage::Abort`].
    Abort,
    /// A frame of binary records.
    Records,
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MessageKind::Hello => "hello",
            MessageKind::Welcome => "welcome",
            MessageKind::Refused => "refused",
            MessageKind::Done => "done",
            MessageKind::Report => "report",
            MessageKind::Interval => "interval",
            MessageKind::Abort => "abort",
            MessageKind::Records => "records",
        })
    }
}

/// Where a session is, for messages about what went wrong there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Client: waiting for the server's answer to the hello.
    Welcome,
    /// Server: waiting for the client's hello.
    Hello,
    /// Client: measuring the idle round-trip time.
    IdleRtt,
    /// Server: waiting for the reverse-mode client's open datagram.
    Open,
    /// The test stream is running.
    Stream,
    /// Client: waiting for the server's report and records.
    Results,
    /// Client: interrupted, waiting for the server to confirm the stop.
    Stopping,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Welcome => "while waiting for the server to answer the hello",
            Stage::Hello => "while waiting for the client's hello",
            Stage::IdleRtt => "while measuring the idle round-trip time",
            Stage::Open => {
                "while waiting for the client's UDP open datagram (firewall or NAT on the way?)"
            }
            Stage::Stream => "during the test stream",
            Stage::Results => "while waiting for the report",
            Stage::Stopping => "while waiting for the peer to confirm the stop (interrupted)",
        })
    }
}
