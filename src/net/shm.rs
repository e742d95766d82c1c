//! System V shared memory for MIT-SHM screen capture: the X server writes
//! the screen into a segment both processes have attached, which saves
//! sending every frame through the X socket. `nix` has no System V shm
//! wrappers, so this is the one place that calls libc for it.

use anyhow::bail;

/// A private shared-memory segment attached to this process.
pub(crate) struct Segment {
    id: libc::c_int,
    addr: *mut u8,
    len: usize,
}

// SAFETY: the segment is plain memory owned by this value; moving it to
// another thread moves that ownership.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates and attaches a segment of `len` bytes.
    pub(crate) fn new(len: usize) -> anyhow::Result<Segment> {
        // SAFETY: shmget takes no pointers; the result is checked.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, len, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            bail!(
                "shmget of {len} bytes failed: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: `id` is a segment just created; a null address lets the
        // kernel choose where to map it. The result is checked below.
        let addr = unsafe { libc::shmat(id, std::ptr::null(), 0) };
        if addr as isize == -1 {
            let err = std::io::Error::last_os_error();
            // SAFETY: removes the segment just created; no one attached it.
            unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
            bail!("shmat failed: {err}");
        }
        Ok(Segment {
            id,
            addr: addr.cast(),
            len,
        })
    }

    /// The id to hand to the X server.
    pub(crate) fn id(&self) -> u32 {
        // shmget returns non-negative ids (checked in `new`).
        self.id as u32
    }

    /// Marks the segment for removal once every process has detached, so
    /// it cannot outlive this one. Call it once the X server attached.
    pub(crate) fn mark_removed(&self) {
        // SAFETY: IPC_RMID on our own segment takes no buffer; the memory
        // stays mapped until detached.
        unsafe { libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }

    /// The segment's bytes. Read them only after the reply to a request
    /// that wrote them: the X server writes while serving a request and
    /// is done before it replies.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `addr` maps `len` bytes for as long as `self` lives
        // (detached only in Drop), and the only other writer, the X
        // server, writes only during requests the caller waits for.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `addr` came from shmat and is detached exactly once; no
        // slice from `bytes` outlives `self`.
        unsafe {
            libc::shmdt(self.addr.cast());
        }
        self.mark_removed();
    }
}
