//! The binary's OS layer: sockets (UDP with GSO/GRO and mmsg batches,
//! multicast membership), interfaces, frame files (O_DIRECT), host
//! settings (sysctls, clock discipline), thread tuning and shared memory
//! for screen capture. The only unsafe code in the binary lives under
//! this module, each block with a SAFETY comment; calls off the
//! per-packet path go through nix's safe wrappers.

pub(crate) mod accept;
pub(crate) mod awake;
pub(crate) mod copy_rate;
pub(crate) mod file;
pub(crate) mod host;
pub(crate) mod http;
pub(crate) mod iface;
pub(crate) mod placement;
pub(crate) mod rtcp;
#[cfg(feature = "x11")]
pub(crate) mod shm;
pub(crate) mod stalls;
pub(crate) mod train;
pub(crate) mod tuning;
pub(crate) mod udp;
pub(crate) mod wait;
pub(crate) mod wakeup;
pub(crate) mod watch;
