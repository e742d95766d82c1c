//! What the cluster controller refuses: plans that cannot work and moves
//! that make no sense.

/// Everything the cluster subsystem can refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Stripe count out of range.
    #[error("a cluster has 1..=64 stripes, not {stripes}")]
    StripeCount {
        /// Stripes asked for.
        stripes: usize,
    },
    /// Two nodes share a name.
    #[error("two nodes are named '{name}': give each node its own name")]
    DuplicateNode {
        /// The name.
        name: String,
    },
    /// A stripe number beyond the split.
    #[error("there is no stripe {stripe} in this cluster")]
    NoSuchStripe {
        /// The stripe.
        stripe: usize,
    },
    /// A node index beyond the plan.
    #[error("there is no node {node} in this cluster")]
    NoSuchNode {
        /// The index.
        node: usize,
    },
    /// A stripe without exactly one primary node.
    #[error(
        "stripe {stripe} has {primaries} primary nodes: exactly one non-alternate node must list it"
    )]
    Primaries {
        /// The stripe.
        stripe: usize,
        /// Non-alternate nodes listing it.
        primaries: usize,
    },
    /// Polling every 0 s.
    #[error("the poll interval must be above zero")]
    PollInterval,
    /// Requests that may take no time at all.
    #[error("the request timeout must be above zero")]
    Timeout,
    /// A second-address flag per stripe, but not as many as stripes.
    #[error("{given} second-address flags for {stripes} stripes: give one per stripe")]
    DupCount {
        /// Flags given.
        given: usize,
        /// Stripes of the plan.
        stripes: usize,
    },
    /// Moving a stripe nobody sends.
    #[error("stripe {stripe} is not being sent: start the cluster first")]
    NotSent {
        /// The stripe.
        stripe: usize,
    },
    /// Moving onto a failed node.
    #[error("node {node} has failed: move the stripe to a live node")]
    NodeFailed {
        /// The node's name.
        node: String,
    },
    /// Moving a stripe onto the only node that sends it.
    #[error("node {node} already sends stripe {stripe} and no other node does: nothing to move")]
    AlreadySending {
        /// The stripe.
        stripe: usize,
        /// The node's name.
        node: String,
    },
}
