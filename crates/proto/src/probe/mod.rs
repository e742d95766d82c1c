//! The network probe (Sperf, seed 003): can this path carry that stream?
//!
//! A client and a server run one test over a TCP control connection and a
//! UDP test stream on the same port: a paced RTP stream of the asked shape
//! in either direction or both at once (`bidir`), echo datagrams for the
//! round-trip time, and a report of everything the receiver saw, judged
//! against a stream profile.
//!
//! Modules, each depending only on those above it:
//!
//! - [`params`]: what a test asks for, its limits and its send schedule;
//! - [`wire`]: the datagrams (test stream, echo);
//! - [`report`]: what a test measured, as it travels and prints;
//! - [`live`]: the receiver's running count, one line per interval;
//! - [`analysis`]: records to metrics (receiver), send times to the
//!   sender's report, RTT samples to their summary;
//! - [`control`]: the control messages, their frames and the decoder;
//! - [`profile`]: stream profiles and the PASS/FAIL verdict;
//! - [`session`]: one test as a state machine, client or server side;
//! - [`total`]: parallel streams' reports as one.

pub mod analysis;
pub mod control;
mod error;
pub mod live;
pub mod params;
pub mod profile;
pub mod report;
pub mod session;
pub mod total;
pub mod wire;

pub use analysis::{SenderLog, analyze};
pub use control::{
    ControlMessage, FRAME_HEADER_LEN, Frame, FrameDecoder, FrameHeader, FrameKind, MAX_FRAME_LEN,
    MAX_HELLO_LEN, RECORD_LEN, RECORDS_PER_FRAME, Refusal, records_frame, records_from_bytes,
    records_to_frames,
};
pub use error::{Error, MessageKind, Param, Stage};
pub use live::LiveMeter;
pub use params::{
    DEFAULT_BURST_US, Direction, MAX_BURST_US, MAX_DURATION_MS, MAX_INTERVAL_MS, MAX_INTERVALS,
    MAX_PACKET_SIZE, MAX_PACKETS, MAX_PLAYOUT_US, MAX_RATE_BPS, MAX_STREAMS, MIN_DURATION_MS,
    MIN_PACKET_SIZE, MIN_RATE_BPS, Schedule, TestParams, parse_fps,
};
pub use profile::{GENERIC, PROFILES, Profile, Verdict};
pub use report::{
    Arrival, BurstGap, FrameStats, IntervalStats, LiveInterval, ReceiverReport, RttSummary,
    RunLength, SenderReport,
};
pub use session::{
    ClientConfig, Event, Input, Leg, Results, ServerConfig, Session, StreamPlan, Transmit,
};
pub use total::{receiver_total, sender_total};
pub use wire::{
    DATA_HEADER_LEN, DATA_MAGIC, DataHeader, DataTrain, Datagram, ECHO_LEN, ECHO_MAGIC, Echo,
    EchoKind, PAYLOAD_TYPE, PROTOCOL_VERSION,
};
