//! `netem::parse_seq_list` (the `--drop-seq`-style lists of `nagare
//! impair`) on any UTF-8 text.
//!
//! Invariants: no panic; the list is accepted exactly when an independent
//! reading accepts it (comma-separated items, blanks ignored, each `N` or
//! `A-B` with `A <= B` in u64, at most 1 000 000 numbers named in all,
//! counting overlaps twice); the set is exactly the union of the items;
//! heap use stays within a fixed multiple of the numbers named.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::CountingAlloc;
use nagare_proto::netem::{MAX_SEQ_LIST, parse_seq_list};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The ranges a list names, or `None` if it is malformed or too long.
fn model(s: &str) -> Option<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    let mut total = 0u128;
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (a, b) = match item.find('-') {
            Some(at) => (&item[..at], &item[at + 1..]),
            None => (item, item),
        };
        let a: u64 = a.trim().parse().ok()?;
        let b: u64 = b.trim().parse().ok()?;
        if b < a {
            return None;
        }
        total += u128::from(b - a) + 1;
        if total > u128::from(MAX_SEQ_LIST) {
            return None;
        }
        ranges.push((a, b));
    }
    Some(ranges)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let parsed = parse_seq_list(text);
    let used = CountingAlloc::peak() - base;
    let expected = model(text);
    assert_eq!(parsed.is_ok(), expected.is_some(), "{parsed:?}");
    let (Ok(set), Some(mut ranges)) = (parsed, expected) else {
        return;
    };
    // Union of the ranges: its size, and every bound is in the set.
    ranges.sort_unstable();
    let mut size = 0u64;
    let mut covered: Option<u64> = None; // highest number counted so far
    for &(a, b) in &ranges {
        assert!(set.contains(&a) && set.contains(&b));
        let from = match covered {
            Some(c) if c >= b => continue,
            Some(c) if c >= a => c + 1,
            _ => a,
        };
        size += b - from + 1;
        covered = Some(b);
    }
    assert_eq!(set.len() as u64, size);
    assert!(set.len() as u64 <= MAX_SEQ_LIST);
    assert_eq!(set.first().copied(), ranges.first().map(|r| r.0));
    assert_eq!(set.last().copied(), ranges.iter().map(|r| r.1).max());
    // A B-tree holds a u64 in well under 64 bytes.
    assert!(
        used <= 64 * set.len() + 4096,
        "{used} heap bytes for {} numbers",
        set.len()
    );
});
