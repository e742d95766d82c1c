//! SplitMix64, the one mixer the machines share: well-spread bits from a
//! seed, for impairment draws, sequence bases and retry jitter (never
//! for secrets).

/// The SplitMix64 increment (2^64 / φ).
pub(crate) const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output for state `x`: `x + GAMMA`, finalized.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_outputs_of_seed_zero_are_the_reference_ones() {
        // The reference SplitMix64 from seed 0: 0xe220a8397b1dcdaf, then
        // 0x6e789e6aa1b965f4.
        assert_eq!(super::splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(super::splitmix64(super::GAMMA), 0x6e78_9e6a_a1b9_65f4);
    }
}
