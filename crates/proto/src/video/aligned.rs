//! Frame buffers that start on a page, so O_DIRECT can read into them
//! and write from them as they are: an 8K frame copied once more on its
//! way to the disk cost a tenth of a receiving core.

use std::fmt;

/// Alignment of an [`AlignedBuf`]'s bytes, and of the offsets and lengths
/// of O_DIRECT transfers: a page, enough for any logical block size.
pub const ALIGN: usize = 4096;

/// A zeroed byte buffer whose first byte is [`ALIGN`]-aligned; it
/// dereferences to its bytes. Plain safe code: an over-allocated `Vec`
/// and an offset into it (the heap block never moves while the `Vec`
/// lives, so the offset survives moves of the buffer).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes, page-aligned. Pages are faulted in on first use.
    pub fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { raw, start, len }
    }

    /// [`AlignedBuf::new`] with every page already faulted in (see
    /// [`crate::video::prefaulted`]).
    pub fn prefaulted(len: usize) -> AlignedBuf {
        let mut buf = AlignedBuf::new(len);
        super::fault_in(&mut buf.raw);
        buf
    }

    /// A page-aligned copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::new(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_start_on_a_page_and_survive_a_move() {
        for len in [0, 1, 4095, 4096, 10_000] {
            let mut b = AlignedBuf::prefaulted(len);
            if len > 0 {
                b[len - 1] = 7;
            }
            let moved = Box::new(b);
            assert_eq!(moved.as_ptr().addr() % ALIGN, 0);
            assert_eq!(moved.len(), len);
            assert!(moved[..len.saturating_sub(1)].iter().all(|&x| x == 0));
        }
        assert_eq!(&AlignedBuf::copy_of(b"abc")[..], b"abc");
    }
}
