//! NMOS IS-04 and IS-05 for `nagare serve`: the node's resources
//! ([`node`]), every sender's IS-05 state ([`senders`]) and its
//! activations through the stream table ([`activate`]), and serve as the
//! shared NMOS routes see it ([`connection_api`]). The node id, the
//! routes, the listener's NMOS parts and registration are the binary's
//! `nmos` module, shared with `recv --nmos`.

pub(crate) mod activate;
pub(crate) mod connection_api;
pub(crate) mod node;
pub(crate) mod senders;

pub(crate) use node::Node;
