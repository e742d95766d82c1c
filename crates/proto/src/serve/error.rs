//! What serve's policy refuses: a bad `--allow` block or token, a
//! destination outside the allow-list, a stream over the rate or load
//! budget, and a cluster leg that cannot be sent.

use std::net::IpAddr;

use crate::rtsp::{Refusal, RefusalKind};
use crate::video::stripe::Rule;
use crate::{BitRate, ByteSize, Nanos};

use super::cidr::Cidr;

/// Everything serve's policy can refuse. The texts name the value and
/// what to do; the driver maps each to its HTTP or RTSP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// `--allow` text that is no address.
    #[error("--allow '{text}' is not an address block such as 127.0.0.0/8 or fd00::/64")]
    BadCidr {
        /// The text given.
        text: String,
    },
    /// `--allow` with a prefix longer than the address.
    #[error("--allow '{text}': prefix length must be 0..={max}")]
    CidrPrefix {
        /// The text given.
        text: String,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// A destination that is neither the client nor inside `--allow`.
    #[error(
        "destination {destination} is neither your own address ({client}) nor inside --allow \
         ({}); start the server with --allow {destination}/32 to permit it",
        blocks(.allowed)
    )]
    DestinationNotAllowed {
        /// The client's address.
        client: IpAddr,
        /// The destination it named.
        destination: IpAddr,
        /// The `--allow` blocks.
        allowed: Vec<Cidr>,
    },
    /// The busiest pacing thread, or the read-ahead thread, measured over
    /// the load limit.
    #[error(
        "the {thread} worked {:.0}% of the last second (limit {:.0}%, --max-load): another \
         stream would make every stream late; stop a stream or add cores",
        .load * 100.0,
        .max * 100.0
    )]
    LoadOverBudget {
        /// Which thread.
        thread: Thread,
        /// Its share of time spent working.
        load: f64,
        /// The limit (`--max-load`).
        max: f64,
    },
    /// The streams admitted so far plus this one would keep a thread busier
    /// than the load limit, by the measured cost of their work.
    #[error(
        "admitting this stream would keep the {thread} {:.1}% busy (limit {:.1}%, \
         --max-load): {:.0} {} a second over {threads} thread(s) at {per_unit} each; stop a \
         stream, or add cores",
        .predicted * 100.0,
        .max * 100.0,
        .units_per_s,
        unit_name(*.thread)
    )]
    PredictedOverBudget {
        /// Which thread.
        thread: Thread,
        /// Its predicted share of time spent working.
        predicted: f64,
        /// The limit (`--max-load`).
        max: f64,
        /// Working time per datagram (pacing) or per MiB (read-ahead).
        per_unit: Nanos,
        /// Threads sharing the work.
        threads: usize,
        /// Datagrams (pacing) or MiB (read-ahead) a second, this stream
        /// included.
        units_per_s: f64,
    },
    /// The pacing and read-ahead threads together would keep the cores
    /// they share busier than the load limit.
    #[error(
        "admitting this stream would keep the {cores} core(s) {:.1}% busy with pacing and \
         reading (limit {:.1}%, --max-load; {pacers} pacing thread(s) and the read-ahead \
         thread share them); stop a stream, or add cores",
        .predicted * 100.0,
        .max * 100.0
    )]
    CoresOverBudget {
        /// Predicted share of the cores' time.
        predicted: f64,
        /// The limit (`--max-load`).
        max: f64,
        /// Pacing threads.
        pacers: usize,
        /// Cores they and the reader share.
        cores: usize,
    },
    /// The streams admitted within the proving time, this one included,
    /// would take more of the cores than may go unmeasured.
    #[error(
        "the streams admitted in the last {within} are not yet measured, and with this one they \
         would keep the cores {:.1}% busy (limit {:.1}% until measured, a quarter of --max-load): \
         retry in a second, as load is measured",
        .predicted * 100.0,
        .max * 100.0
    )]
    Unproven {
        /// Predicted share of the cores' time of the unproven streams.
        predicted: f64,
        /// The share that may go unmeasured.
        max: f64,
        /// How long a stream stays unproven.
        within: Nanos,
    },
    /// The running streams are about to run late: a thread could not keep
    /// up with them just now, whatever the prediction says.
    #[error(
        "the {thread} {why}: another stream would make the running ones late (load limit \
         {:.0}%, --max-load); stop a stream, or add cores",
        .max * 100.0
    )]
    Slipping {
        /// Which thread.
        thread: Thread,
        /// What it showed.
        why: String,
        /// The limit (`--max-load`).
        max: f64,
    },
    /// A stream whose read-ahead ring would take the total past
    /// `--max-memory`.
    #[error(
        "a stream whose ring holds {asked} on top of the {reserved} the running streams hold \
         would exceed --max-memory {max}; stop a stream, give fewer --ring-frames, or raise \
         --max-memory"
    )]
    MemoryOverBudget {
        /// The stream's ring.
        asked: ByteSize,
        /// Ring memory of the streams already admitted.
        reserved: ByteSize,
        /// `--max-memory`.
        max: ByteSize,
    },
    /// A stream that would take the total over `--max-rate`.
    #[error(
        "a stream of {} on top of the {} in use would exceed --max-rate {}",
        rate(*.asked),
        rate(*.reserved),
        rate(*.max)
    )]
    RateOverBudget {
        /// The stream's rate.
        asked: BitRate,
        /// Rate reserved by the streams already admitted.
        reserved: BitRate,
        /// `--max-rate`.
        max: BitRate,
    },
    /// A `--token` too short to resist guessing.
    #[error("--token is {len} characters: use at least 8 (random)")]
    TokenTooShort {
        /// Its length.
        len: usize,
    },
    /// A `--token` with spaces, control characters or non-ASCII bytes,
    /// which no `Authorization: Bearer` header can carry intact.
    #[error(
        "--token has spaces, control characters or non-ASCII bytes, which no client can send in \
         'Authorization: Bearer TOKEN': use printable ASCII (e.g. openssl rand -hex 16)"
    )]
    TokenNotPrintable,
    /// An API reachable from the network without a token.
    #[error(
        "the HTTP API is not bound to loopback, so it needs --token TOKEN (or NAGARE_TOKEN); \
         or bind it with --http 127.0.0.1:8080"
    )]
    TokenNeeded,
    /// RTSP reachable from the network without credentials.
    #[error(
        "RTSP is not bound to loopback, so its clients need credentials: give --token TOKEN \
         (or NAGARE_TOKEN; players then open rtsp://USER:TOKEN@HOST:PORT/NAME), or bind it \
         with --rtsp 127.0.0.1:8554"
    )]
    RtspTokenNeeded,
    /// `--rtsp-auth` without a token to check against.
    #[error(
        "--rtsp-auth asks RTSP clients for the --token as password, but no --token (or \
         NAGARE_TOKEN) is given: give one"
    )]
    RtspAuthWithoutToken,
    /// Stripe, SSRC or start frame asked of an MPEG-TS path.
    #[error("'{path}' is MPEG-TS: stripe, ssrc and epoch_frame are for raw video and patterns")]
    LegOnTs {
        /// The path.
        path: String,
    },
    /// A stripe split the frame size does not allow.
    #[error("stripe split {rule} count {count} does not fit {width}x{height}: {why}")]
    StripeSplit {
        /// The split rule.
        rule: Rule,
        /// Stripes asked for.
        count: usize,
        /// Frame width.
        width: u32,
        /// Frame height.
        height: u32,
        /// Why the split fails.
        why: crate::video::Error,
    },
    /// A stripe index beyond the count.
    #[error("stripe index {index} is not one of {count} stripes: give 0..={}", .count - 1)]
    StripeIndex {
        /// The index asked for.
        index: usize,
        /// Stripes in the split.
        count: usize,
    },
    /// A first frame too far in the future.
    #[error(
        "epoch_frame {frame} starts more than a minute from now: give a frame within the next minute"
    )]
    StartTooFar {
        /// The frame asked for.
        frame: u64,
    },
    /// An idempotency key that is empty, too long or not printable.
    #[error("idempotency_key of {len} bytes: give 1 to {max} printable ASCII characters")]
    BadKey {
        /// Its length in bytes.
        len: usize,
        /// The longest key taken.
        max: usize,
    },
    /// An idempotency key that already names a stream made by another
    /// request.
    #[error(
        "idempotency_key '{key}' already names stream {id}, made by a different request: \
         use a new key for a new stream"
    )]
    KeyReused {
        /// The key.
        key: String,
        /// The stream it names.
        id: u64,
    },
}

impl Error {
    /// The RTSP refusal of a stream this error stopped at admission: 453
    /// for a budget, 403 for the allow-list, with this error's text (the
    /// value and the limit) as the response's body.
    pub fn rtsp_refusal(&self) -> Refusal {
        let kind = match self {
            Error::Unproven { .. } => RefusalKind::Busy {
                retry_after_secs: self
                    .retry_after()
                    .map_or(1, |t| t.as_secs_f64().ceil() as u32),
            },
            Error::LoadOverBudget { .. }
            | Error::PredictedOverBudget { .. }
            | Error::CoresOverBudget { .. }
            | Error::Slipping { .. }
            | Error::MemoryOverBudget { .. }
            | Error::RateOverBudget { .. } => RefusalKind::Capacity,
            Error::DestinationNotAllowed { .. } => RefusalKind::Forbidden,
            // Refusals of the configuration, a cluster leg or an API key:
            // no RTSP admission raises them, and a server that did could
            // not send the stream.
            Error::BadCidr { .. }
            | Error::CidrPrefix { .. }
            | Error::TokenTooShort { .. }
            | Error::TokenNotPrintable
            | Error::TokenNeeded
            | Error::RtspTokenNeeded
            | Error::RtspAuthWithoutToken
            | Error::LegOnTs { .. }
            | Error::StripeSplit { .. }
            | Error::StripeIndex { .. }
            | Error::StartTooFar { .. }
            | Error::BadKey { .. }
            | Error::KeyReused { .. } => RefusalKind::Unplayable,
        };
        Refusal::new(kind, self.to_string())
    }
}

/// `--allow` blocks as the refusal lists them.
fn blocks(allowed: &[Cidr]) -> String {
    if allowed.is_empty() {
        return "none".to_string();
    }
    let texts: Vec<String> = allowed.iter().map(Cidr::to_string).collect();
    texts.join(", ")
}

/// What a thread's work is counted in.
fn unit_name(thread: Thread) -> &'static str {
    match thread {
        Thread::Pacing => "datagrams",
        Thread::Reading => "MiB",
    }
}

impl Error {
    /// How long a client should wait before asking again (HTTP and RTSP
    /// `Retry-After`), for a refusal that time alone lifts: the streams
    /// admitted just before are measured within a second, and then the
    /// same request may fit. `None` for every refusal that stays until
    /// something changes (a stream stops, the request changes).
    pub fn retry_after(&self) -> Option<Nanos> {
        match self {
            Error::Unproven { .. } => Some(Nanos::from_secs(1)),
            _ => None,
        }
    }
}

/// A rate as the serve log and progress line print it, so the refusal
/// and the log agree.
fn rate(r: BitRate) -> String {
    crate::units::bitrate_text(r.as_f64())
}

/// Which of serve's threads a load refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thread {
    /// The pacing threads (work per datagram).
    Pacing,
    /// The read-ahead thread (work per byte read or rendered).
    Reading,
}

impl std::fmt::Display for Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Thread::Pacing => "pacing threads",
            Thread::Reading => "read-ahead thread",
        })
    }
}
