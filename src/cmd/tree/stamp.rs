//! What travels with a frame for the reports: its capture time and its
//! fingerprint.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch: capture timestamps travel with
/// frames, so latency is comparable across peers on one clock.
pub(super) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A frame fingerprint for reports (xxh3 of the pixels), so tests
/// compare what every peer decoded without storing every frame.
pub(super) fn fingerprint(pixels: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(pixels)
}
