//! Sockets and OS tuning: UDP with GSO/GRO and mmsg batches, multicast
//! membership, thread priority and affinity. The only unsafe code in the
//! binary lives under this module.

pub mod tuning;
pub mod udp;
