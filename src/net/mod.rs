//! The binary's OS layer: sockets (UDP with GSO/GRO and mmsg batches,
//! multicast membership), interfaces, frame files (O_DIRECT), host
//! settings (sysctls, clock discipline), thread tuning and shared memory
//! for screen capture. The only unsafe code in the binary lives under
//! this module, each block with a SAFETY comment; calls off the
//! per-packet path go through nix's safe wrappers.

pub mod file;
pub mod host;
pub mod iface;
pub mod placement;
#[cfg(feature = "x11")]
pub mod shm;
pub mod train;
pub mod tuning;
pub mod udp;
pub mod wait;
pub mod wakeup;
pub mod watch;
