//! Reading frame files at stream rates: O_DIRECT (bypassing the page
//! cache), sequential read-ahead advice, and the page-aligned buffers that
//! O_DIRECT reads into.

use std::fs::File;
use std::path::Path;

use anyhow::{Result, anyhow};
use nix::fcntl::{OFlag, PosixFadviseAdvice, posix_fadvise};

/// Alignment of frame buffers, offsets and lengths for O_DIRECT: enough
/// for any logical block size up to a page.
pub const ALIGN: usize = 4096;

/// Opens `path` for reading with O_DIRECT; says what to do where the
/// filesystem refuses it.
pub fn open_direct(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_DIRECT.bits())
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                anyhow!(
                    "the filesystem holding '{}' does not support O_DIRECT (tmpfs does not); \
                     drop --direct",
                    path.display()
                )
            } else {
                anyhow!("opening '{}' with O_DIRECT: {e}", path.display())
            }
        })
}

/// Tells the kernel `file` is read front to back, so it reads ahead. Only
/// advice: a refusal changes nothing but speed.
pub fn advise_sequential(file: &File) {
    let _ = posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_SEQUENTIAL);
}

/// A zeroed buffer whose bytes start on an [`ALIGN`] boundary, so O_DIRECT
/// can read into it; it dereferences to its bytes. Plain safe code: an
/// over-allocated `Vec` and an offset into it.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed, page-aligned buffer of `len` bytes.
    pub fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        // The heap block never moves while the Vec lives, so the offset
        // stays valid when the buffer itself is moved.
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { raw, start, len }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_page_and_survive_a_move() {
        let mut b = AlignedBuf::new(10_000);
        b[9_999] = 7;
        let moved = Box::new(b);
        assert_eq!(moved.as_ptr().addr() % ALIGN, 0);
        assert_eq!((moved.len(), moved[9_999]), (10_000, 7));
        assert!(AlignedBuf::new(0).is_empty());
    }
}
