//! RTCP (RFC 3550 §6) for nagare's senders, sans-IO.
//!
//! A sender owes its readers two things RTP alone does not carry: the
//! mapping from its RTP clock to wall-clock time (sender reports, which
//! players such as GStreamer's jitter buffer synchronise on), and word
//! that a stream is over (BYE, on which FFmpeg, GStreamer's `rtspsrc` and
//! VLC end a session by themselves). Readers answer with receiver reports
//! (loss and jitter as they saw them).
//!
//! - [`Reporter`] is the machine of one sending stream: the driver tells
//!   it what left ([`Input::Sent`]) and when the stream ended
//!   ([`Input::Ended`]); it hands back SR+SDES compounds on its schedule
//!   and, [`BYE_DELAY`] after the end, a final SR+SDES+BYE.
//! - [`Feedback`] takes the RTCP a reader sends back and keeps its latest
//!   reception report and counters; garbage is counted, never returned.
//! - [`Reader`] is the machine of one reading stream: it reads the
//!   sender's reports and answers them with receiver reports built from
//!   what the driver's RTP machine counted ([`Reception`]).
//! - [`parse`] reads a compound packet with RFC 3550 A.2's checks, on
//!   top of the `rtcp-types` crate's bounds-checked parsers.
//!
//! Wall-clock time is [`WallTime`], nanoseconds since the Unix epoch read
//! by the driver; the machine reads no clock and draws no randomness (its
//! interval jitter comes from a seed).
//!
//! # Polling order
//!
//! The driver of a [`Reporter`], after each train it sends:
//!
//! 1. feeds [`Reporter::handle_input`]`(now, Input::Sent { .. })` (and
//!    [`Input::Ended`] once the stream is over);
//! 2. sends every [`Reporter::poll_transmit`]`(now, wall)` on the RTCP
//!    path (the RTP port + 1, or the interleaved channel + 1).
//!
//! Reports ride on the stream's own trains rather than on a timer of
//! their own: RFC 3550 §6.4 has a participant that sent nothing since its
//! last report send no SR, so a paused or starved stream rightly reports
//! nothing, and a pacing thread with thousands of flows keeps one
//! deadline per train. [`Reporter::poll_timeout`] says when the next
//! report is due, for drivers that want it.

mod clock;
mod error;
mod feedback;
mod reader;
mod reporter;
mod wire;

#[cfg(test)]
mod tests;

pub use clock::{Anchor, NtpTime, WallTime};
pub use error::Error;
pub use feedback::{Feedback, FeedbackCounters, ReaderReport};
pub use reader::{Reader, ReaderCounters, Reception};
pub use reporter::{Config, Input, Reporter};
pub use wire::{Packet, ReportBlock, SenderInfo, bye, parse, receiver_report, sender_report};

use crate::units::Nanos;

/// The RTCP interval: one report about every second, each drawn between
/// half and one and a half of it (RFC 3550 §6.3.1's randomisation, so
/// many streams started together do not report in step). Longer than
/// RFC 3550 §6.2's reduced minimum (360 s divided by the session
/// bandwidth in kbit/s) for every stream above 360 kbit/s, and a 60-byte
/// report a second stays far inside its 5 % of the bandwidth of any
/// video stream; short enough that a player synchronises within a second
/// of its first packet.
pub const INTERVAL: Nanos = Nanos(1_000_000_000);

/// How long a BYE waits after a stream's last packet. RFC 3550 §6.3.7
/// lets a leaving member hold its BYE back, and a reader needs it to:
/// FFmpeg reads its RTCP port before its RTP port, so a BYE sent right
/// behind the last frame ends the session with that frame's packets still
/// queued unread; half a second is many frames of a reader's lag, and
/// short beside the session timeout a player would wait otherwise.
pub const BYE_DELAY: Nanos = Nanos(500_000_000);

/// The 90 kHz RTP clock of video and MPEG-TS (RFC 3551, RFC 4175).
pub const VIDEO_CLOCK_RATE: u32 = 90_000;

/// Bytes of the fixed RTP header, left out of a sender report's octet
/// count (RFC 3550 §6.4.1 counts payload octets only).
pub const RTP_HEADER_BYTES: u64 = 12;
