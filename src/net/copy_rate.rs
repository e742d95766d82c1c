//! How fast one core copies memory: the price of every copy a receiver
//! makes of a stream (the kernel's copy to user space, a reassembly
//! copy), which `doctor` reports and `bench/stripes.sh` sets beside the
//! receiver's CPU per Gbit.

use std::time::Instant;

/// Bytes of each buffer: far past any last-level cache, so the copy
/// streams from memory as a frame's does.
const BUFFER: usize = 64 << 20;
/// Copies of the buffer per round: 256 MiB.
const PASSES: usize = 4;
/// Rounds; the fastest counts (the others met other work on the core).
const ROUNDS: usize = 3;

/// One core's copy rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyRate {
    /// Bytes copied per second in the fastest round.
    pub bytes_per_second: f64,
    /// Bytes each round copied.
    pub round_bytes: usize,
    /// Rounds measured.
    pub rounds: usize,
}

/// Copies 256 MiB (a 64 MiB buffer four times) three times on this
/// thread and keeps the fastest round: about a second at most, 128 MiB
/// held meanwhile. A round is timed by the thread's CPU time (the wall
/// clock where the kernel does not say): on a busy host the core is
/// shared, and what a copy costs is the CPU it takes.
pub(crate) fn measure() -> CopyRate {
    measure_with(BUFFER)
}

/// [`measure`] with `buffer`-byte buffers (four passes, three rounds):
/// serve takes a 16 MiB sample as its read-ahead thread starts, which
/// costs about 20 ms and 32 MiB for a moment.
pub(crate) fn measure_with(buffer: usize) -> CopyRate {
    // Both buffers written first, so page faults are not timed.
    let src = vec![1u8; buffer];
    let mut dst = vec![2u8; buffer];
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let (start, cpu) = (Instant::now(), crate::clock::thread_cpu_seconds());
        for _ in 0..PASSES {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        let cpu = crate::clock::thread_cpu_seconds() - cpu;
        let took = if cpu > 0.0 {
            cpu
        } else {
            start.elapsed().as_secs_f64()
        };
        best = best.min(took);
    }
    let round_bytes = buffer * PASSES;
    CopyRate {
        bytes_per_second: round_bytes as f64 / best.max(1e-9),
        round_bytes,
        rounds: ROUNDS,
    }
}
