//! The files a recording goes to: one file, or segments named with a
//! counter, always holding whole frames.
//!
//! Each frame is written the moment it is complete (no multi-frame
//! buffer), so after SIGKILL a file holds whole frames and at most one
//! partial tail, which `recv --append` and `send` cut. A segment is
//! written as `NAME.part` and renamed into place when it is complete, so
//! a file under its final name is always whole. A write error (a full
//! disk) leaves the file frame-aligned: the partial frame is cut, or with
//! `--incomplete keep` padded with zeros, and the error names the OS
//! error, the path and the frames written.
//!
//! With `--direct` the files are written with O_DIRECT (see
//! [`DirectWriter`]): the last bytes of a frame that end mid-block reach
//! the file with the next frame, so after SIGKILL the partial tail may
//! be the last frame's.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::net::file::DirectWriter;

/// When a recording moves on to the next segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segmenting {
    /// One file for the whole recording.
    None,
    /// A new file every this many frames.
    Frames(u64),
    /// A new file (at the next frame) once this much time has passed.
    Every(Duration),
}

/// How a recording is opened.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The file, or the name segments are numbered after.
    pub path: PathBuf,
    /// Bytes of one frame.
    pub frame_bytes: u64,
    /// When to start a new segment.
    pub segmenting: Segmenting,
    /// Append to an existing file (cutting a partial tail) instead of
    /// replacing it.
    pub append: bool,
    /// Pad a partial frame left by a failed write with zeros (`--incomplete
    /// keep`) instead of cutting it.
    pub pad_partial: bool,
    /// Write with O_DIRECT, past the page cache.
    pub direct: bool,
}

/// Where a recording's bytes go.
enum Sink {
    Plain(File),
    Direct(DirectWriter),
}

impl Sink {
    fn create(path: &Path, direct: bool) -> Result<Sink> {
        if direct {
            return DirectWriter::create(path).map(Sink::Direct);
        }
        File::create(path)
            .map(Sink::Plain)
            .with_context(|| format!("cannot create output '{}'", path.display()))
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Plain(f) => f.write_all(data),
            Sink::Direct(d) => d.write_all(data),
        }
    }

    /// Writes whatever is still staged.
    fn finish(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(_) => Ok(()),
            Sink::Direct(d) => d.finish(),
        }
    }

    fn file(&self) -> &File {
        match self {
            Sink::Plain(f) => f,
            Sink::Direct(d) => d.file(),
        }
    }
}

/// An open recording.
pub(super) struct Recording {
    plan: Plan,
    file: Sink,
    /// The path being written (`.part` for a segment).
    writing: PathBuf,
    /// The name it gets when complete.
    final_path: PathBuf,
    segment: u64,
    /// Bytes the file held when opened (an appended-to file's frames).
    start_len: u64,
    in_segment: u64,
    opened: Instant,
    /// Frames written to every file so far.
    frames: u64,
    failed: bool,
}

impl Recording {
    /// Opens the first file (appending after cutting a partial tail, when
    /// asked); says on stderr what it cut.
    pub(super) fn open(plan: Plan) -> Result<Recording> {
        if plan.frame_bytes == 0 {
            bail!("a recording needs frames of at least one byte");
        }
        let (writing, final_path) = segment_paths(&plan, 0);
        let stdio = crate::cli::is_stdio(&plan.path);
        if plan.direct && (stdio || plan.append) {
            bail!(
                "--direct writes whole disk blocks from the start of a file: it takes neither \
                 -o - nor --append; drop --direct"
            );
        }
        let file = if stdio {
            Sink::Plain(stdout_file(&plan)?)
        } else if plan.append {
            Sink::Plain(open_append(&writing, plan.frame_bytes)?)
        } else {
            Sink::create(&writing, plan.direct)?
        };
        let start_len = file.file().metadata()?.len();
        Ok(Recording {
            plan,
            file,
            writing,
            final_path,
            segment: 0,
            start_len,
            in_segment: 0,
            opened: Instant::now(),
            frames: 0,
            failed: false,
        })
    }

    /// Frames written so far, in every file.
    pub(super) fn frames(&self) -> u64 {
        self.frames
    }

    /// Writes one frame now. On an error the file is left frame-aligned
    /// and later writes are refused.
    pub(super) fn write(&mut self, frame: &[u8]) -> Result<()> {
        if self.failed {
            bail!("the recording stopped at an earlier error");
        }
        if self.segment_due() {
            self.next_segment()?;
        }
        if let Err(e) = self.file.write_all(frame) {
            self.failed = true;
            let (whole, kept) = self.align();
            return Err(anyhow!(
                "{e} writing {} after {whole} frames{kept}",
                self.writing.display()
            ));
        }
        self.frames += 1;
        self.in_segment += 1;
        Ok(())
    }

    /// Closes the last file, renaming a segment into place.
    pub(super) fn close(mut self) -> Result<()> {
        self.finish_segment()
    }

    fn segment_due(&self) -> bool {
        self.in_segment > 0
            && match self.plan.segmenting {
                Segmenting::None => false,
                Segmenting::Frames(n) => self.in_segment >= n,
                Segmenting::Every(d) => self.opened.elapsed() >= d,
            }
    }

    fn next_segment(&mut self) -> Result<()> {
        self.finish_segment()?;
        self.segment += 1;
        let (writing, final_path) = segment_paths(&self.plan, self.segment);
        self.file = Sink::create(&writing, self.plan.direct)
            .with_context(|| format!("starting segment {}", self.segment))?;
        (self.writing, self.final_path) = (writing, final_path);
        self.start_len = 0;
        self.in_segment = 0;
        self.opened = Instant::now();
        Ok(())
    }

    fn finish_segment(&mut self) -> Result<()> {
        if !self.failed
            && let Err(e) = self.file.finish()
        {
            self.failed = true;
            let (whole, kept) = self.align();
            bail!(
                "{e} writing the end of {} after {whole} frames{kept}",
                self.writing.display()
            );
        }
        if self.writing == self.final_path {
            return Ok(());
        }
        std::fs::rename(&self.writing, &self.final_path).with_context(|| {
            format!(
                "renaming segment '{}' to '{}'",
                self.writing.display(),
                self.final_path.display()
            )
        })?;
        self.writing.clone_from(&self.final_path);
        Ok(())
    }

    /// After a failed write: cuts the file back to whole frames, or pads
    /// the partial one; returns the frames wholly written (all files) and
    /// what it did, for the message.
    fn align(&mut self) -> (u64, String) {
        let frame = self.plan.frame_bytes;
        let mut whole = self.start_len + self.in_segment * frame;
        let len = self.file.file().metadata().map_or(whole, |m| m.len());
        if len < whole {
            // A direct write had frames staged, not yet in the file: only
            // those on disk count.
            let on_disk = len.saturating_sub(self.start_len) / frame;
            self.frames -= self.in_segment - on_disk;
            self.in_segment = on_disk;
            whole = self.start_len + on_disk * frame;
        }
        let written = self.frames;
        if len == whole {
            return (written, String::new());
        }
        // Growing a file with set_len makes a hole, which needs no free
        // blocks, so padding works on a full disk too.
        let (to, what) = if self.plan.pad_partial {
            (whole + frame, "padded the partial frame with zeros")
        } else {
            (whole, "cut the partial frame")
        };
        match self.file.file().set_len(to) {
            Ok(()) => {
                if self.plan.pad_partial {
                    self.frames += 1;
                    self.in_segment += 1;
                }
                (written, format!(" ({what})"))
            }
            Err(e) => (
                written,
                format!(" (and could not make it frame-aligned: {e})"),
            ),
        }
    }
}

/// Opens `path` for appending, cutting a partial frame at its end.
fn open_append(path: &Path, frame_bytes: u64) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open '{}' to append", path.display()))?;
    let len = file.metadata()?.len();
    let tail = len % frame_bytes;
    if tail > 0 {
        file.set_len(len - tail).with_context(|| {
            format!(
                "cutting the partial frame at the end of '{}'",
                path.display()
            )
        })?;
        eprintln!(
            "nagare recv: note: '{}' ended in a partial frame of {tail} bytes (a recording cut \
             short); cut it, appending after its {} whole frames",
            path.display(),
            len / frame_bytes
        );
    }
    Ok(file)
}

/// The path a segment is written to and the one it is renamed to:
/// `copy.uyvy` stays itself without segmenting, else segment 3 is
/// `copy-000003.uyvy`, written as `copy-000003.uyvy.part`.
/// `-o -`: the frames go to standard output (a pipe into FFmpeg), which
/// can be neither appended to nor split into segments.
fn stdout_file(plan: &Plan) -> Result<File> {
    use std::os::fd::AsFd;
    if plan.append || plan.segmenting != Segmenting::None {
        bail!("-o - writes to standard output: it cannot take --append or --segment-*");
    }
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard output for the frames")?;
    Ok(File::from(fd))
}

fn segment_paths(plan: &Plan, segment: u64) -> (PathBuf, PathBuf) {
    if plan.segmenting == Segmenting::None {
        return (plan.path.clone(), plan.path.clone());
    }
    let stem = plan
        .path
        .file_stem()
        .map_or_else(|| "recording".into(), |s| s.to_string_lossy().into_owned());
    let name = match plan.path.extension() {
        Some(ext) => format!("{stem}-{segment:06}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{segment:06}"),
    };
    let done = plan.path.with_file_name(name);
    let mut part = done.clone().into_os_string();
    part.push(".part");
    (PathBuf::from(part), done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nagare-rec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn plan(path: PathBuf, segmenting: Segmenting, append: bool) -> Plan {
        Plan {
            path,
            frame_bytes: 4,
            segmenting,
            append,
            pad_partial: false,
            direct: false,
        }
    }

    #[test]
    fn segments_are_numbered_and_renamed_when_complete() {
        let d = dir("seg");
        let mut r = Recording::open(plan(d.join("c.raw"), Segmenting::Frames(2), false)).unwrap();
        for k in 0..5u8 {
            r.write(&[k; 4]).unwrap();
        }
        assert!(d.join("c-000002.raw.part").exists());
        r.close().unwrap();
        let len = |n: &str| std::fs::metadata(d.join(n)).unwrap().len();
        assert_eq!(
            (
                len("c-000000.raw"),
                len("c-000001.raw"),
                len("c-000002.raw")
            ),
            (8, 8, 4)
        );
        assert!(!d.join("c-000002.raw.part").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn append_cuts_a_partial_tail() {
        let d = dir("append");
        let p = d.join("a.raw");
        std::fs::write(&p, [1u8; 10]).unwrap();
        let mut r = Recording::open(plan(p.clone(), Segmenting::None, true)).unwrap();
        r.write(&[2; 4]).unwrap();
        r.close().unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn paths_without_segments_are_the_file_itself() {
        let p = plan(PathBuf::from("/x/copy.uyvy"), Segmenting::None, false);
        assert_eq!(segment_paths(&p, 0).0, PathBuf::from("/x/copy.uyvy"));
        let p = plan(PathBuf::from("/x/copy"), Segmenting::Frames(1), false);
        assert_eq!(
            segment_paths(&p, 12),
            ("/x/copy-000012.part".into(), "/x/copy-000012".into())
        );
    }
}
