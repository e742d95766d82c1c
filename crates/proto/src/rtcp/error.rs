//! The one error of the RTCP subsystem: a compound packet refused.

/// Why an RTCP compound packet was refused (RFC 3550 A.2's checks, and
/// the lengths `rtcp-types` checks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The lengths, padding or a packet's body do not add up.
    #[error("malformed RTCP: {0}")]
    Malformed(String),
    /// A packet of another RTP version than 2.
    #[error("RTCP version {0}, not 2")]
    Version(u8),
    /// A compound must open with a sender or receiver report.
    #[error("RTCP compound opens with packet type {0}, not SR (200) or RR (201)")]
    FirstNotReport(u8),
}

impl From<rtcp_types::RtcpParseError> for Error {
    fn from(e: rtcp_types::RtcpParseError) -> Error {
        Error::Malformed(e.to_string())
    }
}
