//! The screen-relay tree (seed 004): one screen to many peers over a
//! balanced binary tree of TCP relays.
//!
//! - [`Coordinator`]: the source's machine (admission, placement, repair,
//!   encoding, relaying to its own children);
//! - [`Peer`]: a peer's machine (join, attach, decode, relay, re-attach);
//! - [`topology`]: the balanced tree the coordinator keeps;
//! - [`wire`] and [`auth`]: control messages and the challenge-response
//!   that admits peers;
//! - [`relay`] and [`Fanout`]: what each child is sent, so a slow child
//!   holds nobody up;
//! - [`secure`]: the Noise channel every link runs after admission;
//! - [`link`]: the connections and transmits both machines share with
//!   their drivers.
//!
//! Both machines are sans-IO with one verb set: `handle_input(now, ..)`,
//! `poll_transmit(now)`, `poll_event()`, `poll_timeout()`.
//!
//! # Polling order
//!
//! The driver of a [`Coordinator`] or a [`Peer`], after anything happens
//! on a link, a frame is captured, or the timeout passes:
//!
//! 1. feeds it with `handle_input(now, ..)`: each [`LinkInput`] (accepted,
//!    connected, received, sent, closed), each captured frame, and
//!    `Input::Timeout` once `now` has reached `poll_timeout()`;
//! 2. carries out every `poll_transmit(now)` in order: writes a message,
//!    dials, closes (each write is reported back as [`LinkInput::Sent`],
//!    which releases the child's next message: see [`Fanout`]);
//! 3. acts on every `poll_event()`;
//! 4. waits for link I/O until `poll_timeout()`.
//!
//! [`Secure`] sits inside both machines: link inputs pass through it
//! before the machine sees them, and transmits after.

mod admission;
pub mod auth;
pub mod coordinator;
mod error;
mod fanout;
pub mod link;
pub mod peer;
pub mod relay;
pub mod secure;
#[cfg(test)]
mod tests;
pub mod topology;
pub mod wire;

pub use admission::{
    BURST_FACTOR, HANDSHAKE_TIMEOUT, MAX_HANDSHAKE_MESSAGE, MAX_PENDING, MAX_PENDING_PER_ADDRESS,
    PROVE_GRACE, Refusal,
};
pub use auth::{KEY_LEN, Nonce, Role, SessionKey, proof, proof_matches};
pub use coordinator::{Coordinator, CoordinatorConfig, SourceStats};
pub use error::Error;
pub use fanout::Fanout;
pub use link::{Close, DialId, LinkId, LinkInput, Message, Seed, Transmit};
pub use peer::{Peer, PeerConfig, PeerStats};
pub use relay::{ChildQueue, Chunk, Limits};
pub use secure::{Secure, SecureLink};
pub use topology::{MAX_PEERS, Placement, Repair, Topology};
pub use wire::{Control, PeerId};
