//! Sockets and OS tuning: UDP with GSO/GRO and mmsg batches, multicast
//! membership, thread priority and affinity, shared memory for screen
//! capture. The only unsafe code in the binary lives under this module.

#[cfg(feature = "x11")]
pub mod shm;
pub mod tuning;
pub mod udp;
