//! The I/O vocabulary the tree machines share with their drivers: TCP
//! connections as numbered links, what happened on them
//! ([`LinkInput`]), and what the machine wants done ([`Transmit`]).
//!
//! A driver owns the sockets. It numbers every connection it accepts or
//! opens with a fresh [`LinkId`], reads whole framed messages off each
//! (checking the length with [`crate::framing::body_len`] before
//! allocating) and hands them in; it writes what `poll_transmit` yields
//! in order per link and reports [`LinkInput::Sent`] after each write, so
//! the machine hands a child its next message only once the last one is
//! out (a slow child's backlog stays in the machine's bounded queue, not
//! in the driver).

use std::net::SocketAddr;
use std::sync::Arc;

use super::auth::{Nonce, Role};

/// Secret randomness the driver hands in with every link (never sent):
/// the seed of the link's ephemeral key. It lives with the link input
/// that carries it, so the link vocabulary depends on no machine.
pub type Seed = [u8; 32];

/// A framed message, shared by every link it goes to.
pub type Message = Arc<[u8]>;

/// A TCP connection, numbered by the driver; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

/// A connection the machine asked for, numbered by the machine so the
/// driver's answer can be matched to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DialId(pub u64);

/// Something that happened on the machine's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkInput {
    /// The listener accepted a connection from `from`; `nonce` is fresh
    /// randomness for its challenge (never used twice).
    Accepted {
        /// The new link.
        link: LinkId,
        /// The remote address.
        from: SocketAddr,
        /// Challenge bytes for this link.
        nonce: Nonce,
        /// Secret randomness for this link's encryption (never sent).
        seed: Seed,
    },
    /// A connection asked for with [`Transmit::Connect`] is open.
    Connected {
        /// The request.
        dial: DialId,
        /// The new link.
        link: LinkId,
        /// Secret randomness for this link's encryption (never sent).
        seed: Seed,
    },
    /// A connection asked for could not be opened.
    ConnectFailed {
        /// The request.
        dial: DialId,
    },
    /// A whole framed message arrived.
    Received {
        /// Where.
        link: LinkId,
        /// The message, header included.
        msg: Message,
    },
    /// The last message given for `link` has been written.
    Sent {
        /// Where.
        link: LinkId,
    },
    /// The link failed or the other side closed it (or sent a message
    /// over [`crate::framing::MAX_MESSAGE`]); the driver has closed it.
    Closed {
        /// Which.
        link: LinkId,
    },
}

/// How to close a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// After writing everything given for it before.
    Flush,
    /// At once, dropping what is still queued (the peer is out).
    Abort,
}

/// What the machine wants its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// Write `msg` to `link`, after what was given for it before.
    Send {
        /// Where.
        link: LinkId,
        /// The framed message.
        msg: Message,
    },
    /// Open a TCP connection to `addr`; answer with
    /// [`LinkInput::Connected`] or [`LinkInput::ConnectFailed`].
    Connect {
        /// Names the request in the answer.
        dial: DialId,
        /// Where to connect.
        addr: SocketAddr,
        /// What the connection is for (joining the source, or attaching
        /// to a parent), so the driver can word its messages.
        role: Role,
    },
    /// Close `link`.
    Close {
        /// Which.
        link: LinkId,
        /// When.
        how: Close,
    },
}
