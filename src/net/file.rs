//! Frame files at stream rates: O_DIRECT reading and writing (bypassing
//! the page cache), sequential read-ahead advice, the page-aligned
//! buffers O_DIRECT moves bytes through, and [`Passes`], the one way a
//! media file is read (send's frame ring and serve's read-ahead thread).

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use nix::fcntl::{OFlag, PosixFadviseAdvice, posix_fadvise};

pub(crate) use nagare_proto::video::aligned::{ALIGN, AlignedBuf};

/// Opens `path` for reading with O_DIRECT; says what to do where the
/// filesystem refuses it.
pub(crate) fn open_direct(path: &Path) -> Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    with_o_direct(&options, path, "opening")
}

/// Opens `path` as `options` say, plus O_DIRECT; an EINVAL (the
/// filesystem takes no O_DIRECT) is named with what to do.
fn with_o_direct(options: &std::fs::OpenOptions, path: &Path, doing: &str) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    options
        .clone()
        .custom_flags(OFlag::O_DIRECT.bits())
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                anyhow!(
                    "the filesystem holding '{}' does not support O_DIRECT (tmpfs before \
                     Linux 6.6 does not); drop --direct",
                    path.display()
                )
            } else {
                anyhow!("{doing} '{}' with O_DIRECT: {e}", path.display())
            }
        })
}

/// Tells the kernel `file` is read front to back, so it reads ahead. Only
/// advice: a refusal changes nothing but speed.
pub(crate) fn advise_sequential(file: &File) {
    let _ = posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_SEQUENTIAL);
}

/// Bytes of each O_DIRECT write, and of a [`DirectWriter`]'s staging
/// buffer: 8 MiB writes kept this VM's virtual disk at 2.6 GB/s, as fast
/// as two writers at once; 64 MiB ones reached 1.9 GB/s.
const DIRECT_CHUNK: usize = 8 << 20;

/// A file written with O_DIRECT through a page-aligned staging buffer.
/// Whole blocks go to the disk as they fill: no copy into the page cache
/// and no reclaim of it, which at 20 Gbit/s costs most of a core. The
/// few bytes past the last whole block wait for the next write, or for
/// [`DirectWriter::finish`], which writes them through the page cache
/// (O_DIRECT takes whole blocks only).
pub(crate) struct DirectWriter {
    file: File,
    stage: AlignedBuf,
    held: usize,
}

impl DirectWriter {
    /// Creates (or truncates) `path` for writing with O_DIRECT; says what
    /// to do where the filesystem refuses it.
    pub(crate) fn create(path: &Path) -> Result<DirectWriter> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        let file = with_o_direct(&options, path, "cannot create output")?;
        Ok(DirectWriter {
            file,
            stage: AlignedBuf::new(DIRECT_CHUNK),
            held: 0,
        })
    }

    /// Appends `data`: every whole block staged so far goes to the disk.
    /// Page-aligned data (an [`AlignedBuf`])
    /// following whole blocks goes straight from where it is, uncopied.
    pub(crate) fn write_all(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        if self.held == 0 && data.as_ptr().addr() % ALIGN == 0 {
            let whole = data.len() / ALIGN * ALIGN;
            for chunk in data[..whole].chunks(DIRECT_CHUNK) {
                self.file.write_all(chunk)?;
            }
            data = &data[whole..];
        }
        while !data.is_empty() {
            let n = data.len().min(self.stage.len() - self.held);
            self.stage[self.held..self.held + n].copy_from_slice(&data[..n]);
            self.held += n;
            data = &data[n..];
            let whole = self.held / ALIGN * ALIGN;
            if whole > 0 {
                self.file.write_all(&self.stage[..whole])?;
                self.stage.copy_within(whole..self.held, 0);
                self.held -= whole;
            }
        }
        Ok(())
    }

    /// Writes the staged tail (under a block) through the page cache; the
    /// file ends there, so no O_DIRECT write can follow.
    pub(crate) fn finish(&mut self) -> std::io::Result<()> {
        if self.held == 0 {
            return Ok(());
        }
        use nix::fcntl::{FcntlArg, fcntl};
        let flags = fcntl(&self.file, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
        let buffered = OFlag::from_bits_truncate(flags) & !OFlag::O_DIRECT;
        fcntl(&self.file, FcntlArg::F_SETFL(buffered)).map_err(std::io::Error::from)?;
        self.file.write_all(&self.stage[..self.held])?;
        self.held = 0;
        Ok(())
    }

    /// The file (for its length, or to cut it back).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

/// A media file read front to back in passes: opened at the first read
/// (with sequential read-ahead advice, or O_DIRECT), from any starting
/// byte, and started over at the end of a pass when the stream loops.
pub(crate) struct Passes {
    path: PathBuf,
    /// How errors name the file: its path (send), or the catalog entry
    /// (serve's errors reach API clients and never name the server's path).
    name: String,
    /// Usable bytes of one pass.
    total: u64,
    direct: bool,
    file: Option<File>,
    /// Bytes read in this pass.
    pos: u64,
}

impl Passes {
    /// `total` usable bytes of `path`, read from byte `start` (taken
    /// within one pass).
    pub(crate) fn new(path: PathBuf, name: String, total: u64, start: u64, direct: bool) -> Passes {
        Passes {
            path,
            name,
            total,
            direct,
            file: None,
            pos: start.checked_rem(total).unwrap_or(0),
        }
    }

    /// The next `buf.len()` bytes, fewer at the end of a pass: `(bytes,
    /// whether the pass ended)`. At the end of a pass, `None` unless
    /// `looping`, which starts the next one.
    pub(crate) fn read(&mut self, buf: &mut [u8], looping: bool) -> Result<Option<(usize, bool)>> {
        if self.pos >= self.total {
            if !looping {
                return Ok(None);
            }
            self.pos = 0;
            if let Some(h) = self.file.as_mut() {
                h.seek(SeekFrom::Start(0))
                    .with_context(|| format!("rewinding '{}'", self.name))?;
            }
        }
        let h = match self.file.as_mut() {
            Some(h) => h,
            None => self.file.insert(self.open()?),
        };
        let want = (self.total - self.pos).min(buf.len() as u64) as usize;
        match h.read_exact(&mut buf[..want]) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => bail!(
                "'{}' ends before byte {} of {}: the file was cut short after it was opened",
                self.name,
                self.pos + want as u64,
                self.total
            ),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading '{}' at byte {}", self.name, self.pos));
            }
        }
        self.pos += want as u64;
        Ok(Some((want, self.pos >= self.total)))
    }

    /// Opens the file where the pass stands (a stream that starts mid-file
    /// seeks once).
    fn open(&self) -> Result<File> {
        let mut h = if self.direct {
            open_direct(&self.path)?
        } else {
            File::open(&self.path).with_context(|| format!("opening '{}'", self.name))?
        };
        advise_sequential(&h);
        if self.pos > 0 {
            h.seek(SeekFrom::Start(self.pos))
                .with_context(|| format!("seeking '{}' to byte {}", self.name, self.pos))?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_writes_keep_every_byte_in_order() {
        // /var/tmp is on disk (O_DIRECT); /tmp may be tmpfs.
        let dir = Path::new("/var/tmp");
        let path = dir.join(format!("nagare-direct-{}", std::process::id()));
        let mut w = DirectWriter::create(&path).unwrap();
        // Frames that are not a whole number of blocks, and one larger
        // than the stage, so tails carry over and the stage wraps.
        let frames: Vec<Vec<u8>> = [5_184_000usize, 7, DIRECT_CHUNK + 4097, 4096, 3 * 4096]
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 7 + k) as u8).collect())
            .collect();
        // An aligned frame first (written in place), then unaligned ones
        // (staged, tails carried over), then aligned ones again while a
        // tail is staged (staged too, to keep the file in order).
        let mut aligned = AlignedBuf::new(2 * DIRECT_CHUNK + 4096 + 100);
        let first: Vec<u8> = (0..aligned.len()).map(|i| (i % 251) as u8).collect();
        aligned.copy_from_slice(&first);
        w.write_all(&aligned).unwrap();
        for f in &frames {
            w.write_all(f).unwrap();
        }
        w.write_all(&aligned).unwrap();
        w.finish().unwrap();
        drop(w);
        let got = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let want = [first.clone(), frames.concat(), first].concat();
        assert_eq!(got.len(), want.len());
        assert!(got == want);
    }

    #[test]
    fn passes_start_mid_file_end_each_pass_and_loop() {
        let dir = std::env::temp_dir().join(format!("nagare-passes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ten.bin");
        std::fs::write(&path, (0u8..10).collect::<Vec<u8>>()).unwrap();
        // Usable bytes 0..9 (the tenth is past the last whole chunk), from byte 6.
        let mut p = Passes::new(path.clone(), "ten".into(), 9, 6, false);
        let mut buf = [0u8; 4];
        assert_eq!(p.read(&mut buf, true).unwrap(), Some((3, true)));
        assert_eq!(&buf[..3], &[6, 7, 8]);
        assert_eq!(p.read(&mut buf, true).unwrap(), Some((4, false)));
        assert_eq!(buf, [0, 1, 2, 3]);
        assert_eq!(p.read(&mut buf, false).unwrap(), Some((4, false)));
        assert_eq!(p.read(&mut buf, false).unwrap(), Some((1, true)));
        assert_eq!(buf[0], 8);
        assert_eq!(p.read(&mut buf, false).unwrap(), None, "one pass, no loop");

        // A file cut short after it was opened names the entry, not the path.
        let mut p = Passes::new(path.clone(), "clip".into(), 10, 0, false);
        assert_eq!(p.read(&mut buf, true).unwrap(), Some((4, false)));
        std::fs::write(&path, [0u8; 5]).unwrap();
        let e = format!("{:#}", p.read(&mut buf, true).unwrap_err());
        assert!(e.contains("'clip' ends before byte 8 of 10"), "{e}");
        assert!(!e.contains(dir.to_str().unwrap()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
