//! Frame buffers that start on a page, so O_DIRECT can read into them
//! and write from them as they are: an 8K frame copied once more on its
//! way to the disk cost a tenth of a receiving core.
//!
//! A buffer can be divided into consecutive [`Part`]s that are written
//! apart (by other threads) and joined back into the same buffer without
//! a copy: stripes of the `lines` rule land straight in their part of the
//! whole frame (see [`super::assembler`]).

use std::fmt;

use bytes::BytesMut;

/// Alignment of an [`AlignedBuf`]'s bytes, and of the offsets and lengths
/// of O_DIRECT transfers: a page, enough for any logical block size.
pub const ALIGN: usize = 4096;

/// A zeroed byte buffer whose first byte is [`ALIGN`]-aligned; it
/// dereferences to its bytes. Plain safe code: an over-allocated
/// `BytesMut` advanced to the first page boundary (the heap block never
/// moves while a view of it lives, so the alignment survives moves of
/// the buffer and [`AlignedBuf::split`] / [`AlignedBuf::join`]).
#[derive(Default, PartialEq, Eq)]
pub struct AlignedBuf {
    raw: BytesMut,
}

/// One of consecutive pieces of an [`AlignedBuf`] ([`AlignedBuf::split`]):
/// its own bytes, writable while the others are written elsewhere, and
/// joined back without a copy by [`AlignedBuf::join`].
#[derive(PartialEq, Eq)]
pub struct Part(BytesMut);

impl AlignedBuf {
    /// `len` zero bytes, page-aligned. Pages are faulted in on first use.
    pub fn new(len: usize) -> AlignedBuf {
        let mut raw = BytesMut::zeroed(len + ALIGN);
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        let _ = raw.split_to(start);
        raw.truncate(len);
        AlignedBuf { raw }
    }

    /// [`AlignedBuf::new`] with every page already faulted in (see
    /// [`crate::video::prefaulted`]).
    pub fn prefaulted(len: usize) -> AlignedBuf {
        let mut buf = AlignedBuf::new(len);
        super::fault_in(&mut buf);
        buf
    }

    /// A page-aligned copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::new(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }

    /// Divides the buffer into consecutive parts of `len` bytes (the last
    /// holds what is left), without copying.
    pub fn split(self, len: usize) -> Vec<Part> {
        let mut rest = self.raw;
        let mut parts = Vec::with_capacity(rest.len().div_ceil(len.max(1)));
        while rest.len() > len.max(1) {
            parts.push(Part(rest.split_to(len.max(1))));
        }
        parts.push(Part(rest));
        parts
    }

    /// The buffer `parts` were split from, whole again: without a copy
    /// when they are all of one [`AlignedBuf::split`], in order; a
    /// page-aligned copy of their bytes otherwise.
    pub fn join(parts: Vec<Part>) -> AlignedBuf {
        let mut whole = BytesMut::new();
        let mut joined = true;
        for Part(p) in parts {
            if whole.is_empty() {
                whole = p;
            } else if let Err(p) = whole.try_unsplit(p) {
                joined = false;
                whole.extend_from_slice(&p);
            }
        }
        if joined && whole.as_ptr().addr() % ALIGN == 0 {
            AlignedBuf { raw: whole }
        } else {
            AlignedBuf::copy_of(&whole)
        }
    }
}

impl Clone for AlignedBuf {
    /// A page-aligned copy (a `BytesMut` clone would not be aligned).
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::copy_of(self)
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.raw.len())
    }
}

impl std::ops::Deref for Part {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Part {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Part({} bytes)", self.0.len())
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
        let c = AlignedBuf::copy_of(b"abcd").clone();
        assert_eq!((&c[..], c.as_ptr().addr() % ALIGN), (&b"abcd"[..], 0));
    }

    #[test]
    fn parts_written_apart_join_into_the_same_memory() {
        let buf = AlignedBuf::copy_of(&[0xee; 10_000]);
        let at = buf.as_ptr();
        let mut parts = buf.split(3000);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [3000, 3000, 3000, 1000]
        );
        // Moved to other threads and written there.
        let handles: Vec<_> = parts
            .drain(..)
            .enumerate()
            .map(|(k, mut p)| {
                std::thread::spawn(move || {
                    p.fill(k as u8);
                    p
                })
            })
            .collect();
        let parts: Vec<Part> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let whole = AlignedBuf::join(parts);
        assert_eq!(whole.as_ptr(), at, "joined without a copy");
        let want: Vec<u8> = (0..10_000).map(|i| (i / 3000) as u8).collect();
        assert_eq!(&whole[..], &want[..]);
        // Out of order: the same bytes, copied, still aligned.
        let mut parts = whole.split(4000);
        parts.swap(0, 1);
        let copied = AlignedBuf::join(parts);
        assert_eq!(copied.as_ptr().addr() % ALIGN, 0);
        assert_eq!(&copied[..4000], &want[4000..8000]);
    }
}
