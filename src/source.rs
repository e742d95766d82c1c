//! Frame sources and the reader thread (seed 002): frames are read ahead
//! into a bounded ring on their own thread so that a slow read never
//! disturbs the send schedule while the ring holds frames.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded};
use nagare_proto::VideoFormat;
use nagare_proto::video::pattern::Pattern;

use crate::net::file::{ALIGN, AlignedBuf, Passes, open_direct};

/// Where frames come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// A raw file of frames back to back.
    File {
        /// Path for messages and reopening when looping.
        path: PathBuf,
        /// Whole frames in the file.
        frames: u64,
        /// Read with O_DIRECT, bypassing the page cache.
        direct: bool,
    },
    /// A directory with one file per frame, sorted by name.
    Dir(Vec<PathBuf>),
    /// A pipe, FIFO or other stream (`-` is standard input): frames are
    /// read as they come, until it ends; it cannot be replayed.
    Pipe(PathBuf),
    /// The synthetic scrolling-bars pattern.
    Pattern(Box<Pattern>),
}

impl Source {
    /// Opens and validates `input` against `format`. With `direct`, a file
    /// is read with O_DIRECT: a multi-gigabit stream read once should not
    /// push everything else out of the page cache.
    pub(crate) fn open(input: &str, format: VideoFormat, direct: bool) -> Result<Source> {
        let frame = format.frame_bytes() as u64;
        if let Some(name) = input.strip_prefix("pattern:") {
            if name != "bars" && !name.is_empty() {
                bail!("unknown pattern '{name}': the built-in pattern is pattern:bars");
            }
            return Ok(Source::Pattern(Box::new(Pattern::new(format))));
        }
        if input == "-" {
            return Source::pipe(Path::new("/dev/stdin"), direct);
        }
        let path = Path::new(input);
        let meta = std::fs::metadata(path).with_context(|| {
            format!("cannot read input '{input}': give a raw video file, a directory of frames, or pattern:bars")
        })?;
        if meta.is_dir() {
            return Source::open_dir(input, format);
        }
        if !meta.is_file() {
            // /dev/stdin, a FIFO, a socket: a stream with no length.
            return Source::pipe(path, direct);
        }
        File::open(path).with_context(|| format!("cannot open input '{input}'"))?;
        Source::check_file(input, meta.len(), format, direct)?;
        Ok(Source::File {
            path: path.to_path_buf(),
            frames: meta.len() / frame,
            direct,
        })
    }

    /// A stream at `path`, read in order, once.
    fn pipe(path: &Path, direct: bool) -> Result<Source> {
        if direct {
            bail!(
                "--direct reads files at aligned offsets; '{}' is a pipe or stream: drop --direct",
                path.display()
            );
        }
        File::open(path).with_context(|| format!("cannot open input '{}'", path.display()))?;
        Ok(Source::Pipe(path.to_path_buf()))
    }

    /// Whether the input can be read only once, in order (a pipe).
    pub(crate) fn is_stream(&self) -> bool {
        matches!(self, Source::Pipe(_))
    }

    /// A directory of frame files, each exactly one frame long.
    fn open_dir(input: &str, format: VideoFormat) -> Result<Source> {
        let frame = format.frame_bytes() as u64;
        let mut files: Vec<PathBuf> = std::fs::read_dir(input)
            .with_context(|| format!("cannot list directory '{input}'"))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        if files.is_empty() {
            bail!("directory '{input}' holds no frame files");
        }
        for f in &files {
            let len = std::fs::metadata(f)?.len();
            if len != frame {
                bail!(
                    "frame file '{}' is {len} bytes but a {}x{} {} frame is {frame} bytes; \
                     check --size and --pix-fmt",
                    f.display(),
                    format.width,
                    format.height,
                    format.pixel_format
                );
            }
        }
        Ok(Source::Dir(files))
    }

    /// Checks that a raw file of `len` bytes holds whole frames (aligned
    /// for O_DIRECT with `direct`).
    fn check_file(input: &str, len: u64, format: VideoFormat, direct: bool) -> Result<()> {
        let frame = format.frame_bytes() as u64;
        if len == 0 {
            bail!("input '{input}' is empty");
        }
        if len < frame {
            bail!(
                "input '{input}' is {len} bytes, less than one {}x{} {} frame of {frame} bytes; \
                 check --size and --pix-fmt",
                format.width,
                format.height,
                format.pixel_format,
            );
        }
        if len % frame != 0 {
            // What a recording killed mid-frame leaves: send the whole
            // frames, and say so (a wrong --size looks the same).
            eprintln!(
                "nagare send: note: input '{input}' is {len} bytes: {} whole frames of {frame} \
                 bytes ({}x{} {}) and a partial frame of {} bytes at the end (a recording cut \
                 short?), which is not sent; if that is wrong, check --size and --pix-fmt",
                len / frame,
                format.width,
                format.height,
                format.pixel_format,
                len % frame
            );
        }
        if direct {
            if frame % ALIGN as u64 != 0 {
                bail!(
                    "--direct reads whole frames at {ALIGN}-byte boundaries, but a frame is {frame} \
                     bytes ({} over a multiple of {ALIGN}); drop --direct for this size",
                    frame % ALIGN as u64
                );
            }
            open_direct(Path::new(input))?;
        }
        Ok(())
    }

    /// Frames available in one pass (None for the endless pattern, and
    /// for a pipe, which says only when it ends).
    pub(crate) fn frames(&self) -> Option<u64> {
        match self {
            Source::File { frames, .. } => Some(*frames),
            Source::Dir(files) => Some(files.len() as u64),
            Source::Pattern(_) | Source::Pipe(_) => None,
        }
    }
}

/// A frame handed from the reader to the sender.
pub(crate) struct FrameBuf {
    /// The frame's bytes.
    pub data: AlignedBuf,
    /// Its xxh3, when the plan asked for checksums.
    pub sum: Option<u64>,
}

/// Message on the ring: a frame, or why the reader stopped early.
pub(crate) enum Slot {
    /// The next frame.
    Frame(FrameBuf),
    /// A read failed; the sender reports it and stops.
    Failed(String),
}

/// Rearranges a frame as read (`from`) into the buffer sent (`to`), on
/// the reader thread: how stripes that are not one contiguous run of the
/// frame (2SI, quadrants) are gathered without costing the pacing thread.
pub(crate) type Arrange = Box<dyn Fn(&[u8], &mut [u8]) + Send + Sync>;

/// What the reader thread reads.
#[derive(Default)]
pub(crate) struct ReadPlan {
    /// Frames to read (`None`: one pass, or forever when looping).
    pub limit: Option<u64>,
    /// Start again at the end of the input.
    pub looping: bool,
    /// Sleep before each read (simulated slow storage).
    pub read_delay: Duration,
    /// Input frame to start at (taken modulo the input's length), so that
    /// senders on different hosts show the same input frame in the same
    /// epoch frame.
    pub first: u64,
    /// Rearranges every frame read.
    pub arrange: Option<Arrange>,
    /// Hash every frame (xxh3) here, on the reader, not on the pacing
    /// thread, which at 2.5 Gbit/s has no time to spare for it.
    pub checksums: bool,
}

/// A frame the sender holds: read into a ring buffer (handed back once
/// sent) or one of a cycle's frames (shared, never copied).
pub(crate) enum FrameData {
    /// A ring buffer, filled by the reader thread, and its checksum.
    Read(AlignedBuf, Option<u64>),
    /// A frame of a [`FrameCycle`], and its checksum.
    Cycled(Arc<AlignedBuf>, Option<u64>),
}

impl FrameData {
    /// The frame's xxh3, when the read plan asked for checksums.
    pub(crate) fn checksum(&self) -> Option<u64> {
        match self {
            FrameData::Read(_, sum) | FrameData::Cycled(_, sum) => *sum,
        }
    }
}

impl std::ops::Deref for FrameData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FrameData::Read(b, _) => b,
            FrameData::Cycled(b, _) => b,
        }
    }
}

/// What the frame source had when asked.
pub(crate) enum Take {
    /// The next frame.
    Frame(FrameData),
    /// None yet (the reader is behind).
    Empty,
    /// The input ended.
    End,
}

/// Where the sender takes its frames from.
pub(crate) enum Frames {
    /// Read ahead on the reader thread.
    Ring(FrameRing),
    /// Rendered once and played in a loop.
    Cycle(FrameCycle),
}

impl Frames {
    /// Starts `source` as `plan` says. The pattern is rendered (and
    /// arranged into stripes) once into `capacity` frames that play in a
    /// loop: rendering and a 2SI gather of every 8K frame cost a core
    /// at 30 fps, and the frames are there before the schedule starts.
    /// Anything else, and the pattern under a simulated read delay (slow
    /// storage), is read ahead into a ring of `capacity` frames.
    pub(crate) fn start(
        source: Source,
        format: VideoFormat,
        capacity: usize,
        plan: ReadPlan,
    ) -> Frames {
        match source {
            Source::Pattern(p) if plan.read_delay.is_zero() => {
                Frames::Cycle(FrameCycle::render(&p, format, capacity, plan))
            }
            other => Frames::Ring(FrameRing::start_with(other, format, capacity, plan)),
        }
    }

    /// The next frame, without waiting.
    pub(crate) fn take(&mut self) -> Result<Take> {
        match self {
            Frames::Ring(ring) => ring.take(),
            Frames::Cycle(cycle) => Ok(cycle.take()),
        }
    }

    /// Hands a frame back once it is sent (a ring buffer is read into
    /// again; a cycle's frame stays where it is).
    pub(crate) fn give_back(&self, data: FrameData) {
        if let (Frames::Ring(ring), FrameData::Read(buf, _)) = (self, data) {
            // The channel has a place for every buffer.
            let _ = ring.empty.try_send(buf);
        }
    }

    /// Frames ready to send without waiting.
    pub(crate) fn fill(&self) -> usize {
        match self {
            Frames::Ring(ring) => ring.fill(),
            Frames::Cycle(cycle) => cycle.frames.len(),
        }
    }

    /// Whether `want` frames are ready, or no more will come.
    pub(crate) fn primed(&self, want: usize) -> bool {
        match self {
            Frames::Ring(ring) => ring.fill() >= want || ring.reader_done(),
            Frames::Cycle(_) => true,
        }
    }
}

/// Frames rendered once, arranged as sent, and played in a loop: input
/// frame `f` is cycle frame `f mod n`, so a sender costs no reading,
/// rendering or copying per frame, and epoch-locked senders of the same
/// cycle send identical frames.
pub(crate) struct FrameCycle {
    frames: Vec<Arc<AlignedBuf>>,
    /// Each frame's xxh3, when the plan asked for checksums.
    sums: Vec<Option<u64>>,
    /// Input frame number of the next take.
    next: u64,
    /// Input frame number at which the cycle ends (`None`: never).
    end: Option<u64>,
}

impl FrameCycle {
    /// Renders `count` frames of `pattern` (pattern frames 0..count),
    /// arranged by `plan.arrange`, each page touched once here rather than
    /// on the schedule; a thread per frame up to the CPUs there are.
    pub(crate) fn render(
        pattern: &Pattern,
        format: VideoFormat,
        count: usize,
        plan: ReadPlan,
    ) -> Self {
        let count = count.max(1);
        let n = format.frame_bytes();
        let arrange = plan.arrange.as_ref();
        let checksums = plan.checksums;
        let threads = std::thread::available_parallelism().map_or(1, |c| c.get().min(count));
        let mut frames: Vec<Option<(AlignedBuf, Option<u64>)>> = (0..count).map(|_| None).collect();
        std::thread::scope(|s| {
            for (t, part) in frames.chunks_mut(count.div_ceil(threads)).enumerate() {
                s.spawn(move || {
                    let mut raw = arrange.map(|_| AlignedBuf::new(n));
                    for (i, slot) in part.iter_mut().enumerate() {
                        let number = (t * count.div_ceil(threads) + i) as u64;
                        let mut buf = AlignedBuf::new(n);
                        match (raw.as_mut(), arrange) {
                            (Some(raw), Some(arrange)) => {
                                pattern.render(number, raw);
                                arrange(raw, &mut buf);
                            }
                            _ => pattern.render(number, &mut buf),
                        }
                        let sum = checksums.then(|| xxhash_rust::xxh3::xxh3_64(&buf));
                        *slot = Some((buf, sum));
                    }
                });
            }
        });
        let (frames, sums) = frames
            .into_iter()
            .flatten()
            .map(|(f, s)| (Arc::new(f), s))
            .unzip();
        FrameCycle {
            frames,
            sums,
            next: plan.first,
            end: plan.limit.map(|l| plan.first.wrapping_add(l)),
        }
    }

    /// The next frame of the cycle, or the end.
    fn take(&mut self) -> Take {
        if self.end.is_some_and(|e| self.next >= e) || self.frames.is_empty() {
            return Take::End;
        }
        let k = (self.next % self.frames.len() as u64) as usize;
        self.next += 1;
        Take::Frame(FrameData::Cycled(self.frames[k].clone(), self.sums[k]))
    }
}

/// The bounded ring between reader and sender, with a return path for
/// buffers so nothing is allocated per frame.
pub(crate) struct FrameRing {
    /// Frames ready to send.
    pub full: Receiver<Slot>,
    /// Buffers to hand back after sending.
    pub empty: Sender<AlignedBuf>,
    done: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FrameRing {
    /// Starts the reader thread with `capacity` frame buffers, reading as
    /// `plan` says.
    pub(crate) fn start_with(
        source: Source,
        format: VideoFormat,
        capacity: usize,
        plan: ReadPlan,
    ) -> FrameRing {
        let capacity = capacity.max(1);
        let (full_tx, full) = bounded::<Slot>(capacity);
        let (empty, empty_rx) = bounded::<AlignedBuf>(capacity);
        for _ in 0..capacity {
            // The channel has exactly `capacity` places.
            let _ = empty.send(AlignedBuf::new(format.frame_bytes()));
        }
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (done2, stop2) = (done.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("reader".into())
            .spawn(move || {
                let mut plan = plan;
                if let Err(e) = read_loop(&source, format, &mut plan, &empty_rx, &full_tx, &stop2) {
                    let _ = full_tx.send(Slot::Failed(format!("{e:#}")));
                }
                done2.store(true, Ordering::Release);
            })
            .ok();
        FrameRing {
            full,
            empty,
            done,
            stop,
            thread,
        }
    }

    /// Whether the reader has finished (no more frames will come once the
    /// ring is drained).
    pub(crate) fn reader_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Frames waiting in the ring.
    pub(crate) fn fill(&self) -> usize {
        self.full.len()
    }

    /// The next frame from the ring, without waiting.
    pub(crate) fn take(&self) -> Result<Take> {
        match self.full.try_recv() {
            Ok(Slot::Frame(f)) => Ok(Take::Frame(FrameData::Read(f.data, f.sum))),
            Ok(Slot::Failed(e)) => bail!("{e}"),
            Err(TryRecvError::Empty) if !self.reader_done() => Ok(Take::Empty),
            // The reader may have finished right after try_recv.
            Err(_) => match self.full.try_recv() {
                Ok(Slot::Frame(f)) => Ok(Take::Frame(FrameData::Read(f.data, f.sum))),
                Ok(Slot::Failed(e)) => bail!("{e}"),
                Err(_) => Ok(Take::End),
            },
        }
    }
}

impl Drop for FrameRing {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock a reader waiting for a buffer or a free slot.
        while self.full.try_recv().is_ok() {}
        if let Some(t) = self.thread.take() {
            let _ = self.empty.send(AlignedBuf::new(0));
            while !t.is_finished() {
                while self.full.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = t.join();
        }
    }
}

fn read_loop(
    source: &Source,
    format: VideoFormat,
    plan: &mut ReadPlan,
    empty: &Receiver<AlignedBuf>,
    full: &Sender<Slot>,
    stop: &AtomicBool,
) -> Result<()> {
    let (limit, looping) = (plan.limit, plan.looping);
    let per_pass = source.frames();
    let mut opened = Opened::default();
    let mut scratch = plan
        .arrange
        .as_ref()
        .map(|_| AlignedBuf::new(format.frame_bytes()));
    let mut number = 0u64;
    loop {
        if limit.is_some_and(|l| number >= l) || stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let input = number.wrapping_add(plan.first);
        let in_pass = per_pass.map(|n| input % n);
        if let (Some(n), false) = (per_pass, looping)
            && number >= n
            && limit.is_none_or(|l| l > n)
        {
            // One pass only: --frames beyond the input needs --loop.
            if limit.is_some() {
                bail!(
                    "input has {n} frames but --frames asks for {}; add --loop to repeat it",
                    limit.unwrap_or(0)
                );
            }
            return Ok(());
        }
        let Ok(mut buf) = empty.recv() else {
            return Ok(());
        };
        if stop.load(Ordering::Acquire) || buf.is_empty() {
            return Ok(());
        }
        if !plan.read_delay.is_zero() {
            std::thread::sleep(plan.read_delay);
        }
        let got = match (&plan.arrange, &mut scratch) {
            (Some(arrange), Some(raw)) => {
                let got = fill(source, input, in_pass, &mut opened, raw)?;
                if got {
                    arrange(raw, &mut buf);
                }
                got
            }
            _ => fill(source, input, in_pass, &mut opened, &mut buf)?,
        };
        if !got {
            // The pipe ended between frames.
            return Ok(());
        }
        let sum = plan.checksums.then(|| xxhash_rust::xxh3::xxh3_64(&buf));
        if full.send(Slot::Frame(FrameBuf { data: buf, sum })).is_err() {
            return Ok(());
        }
        number += 1;
    }
}

/// What the reader keeps open between frames.
#[derive(Default)]
struct Opened {
    pipe: Option<File>,
    file: Option<Passes>,
}

/// Reads frame `number` (`in_pass` within one pass of the input) into
/// `buf`; a pipe or file stays open between frames, a file starts over at
/// the end of each pass. Returns false when a pipe ended before the frame
/// began.
fn fill(
    source: &Source,
    number: u64,
    in_pass: Option<u64>,
    opened: &mut Opened,
    buf: &mut [u8],
) -> Result<bool> {
    match source {
        Source::Pipe(path) => {
            let h = match opened.pipe.as_mut() {
                Some(h) => h,
                None => opened.pipe.insert(
                    File::open(path).with_context(|| format!("opening '{}'", path.display()))?,
                ),
            };
            return read_frame(h, buf, number, path);
        }
        Source::Pattern(p) => p.render(number, buf),
        Source::Dir(files) => {
            let f = in_pass
                .and_then(|k| files.get(usize::try_from(k).ok()?))
                .context("frame index beyond the directory listing")?;
            File::open(f)
                .and_then(|mut h| h.read_exact(buf))
                .with_context(|| format!("reading frame file '{}'", f.display()))?;
        }
        Source::File {
            path,
            frames,
            direct,
        } => {
            let frame = buf.len() as u64;
            // A reader starting mid-input (an epoch-locked start) starts
            // at its first frame.
            let passes = opened.file.get_or_insert_with(|| {
                let name = path.display().to_string();
                let start = in_pass.unwrap_or(0) * frame;
                Passes::new(path.clone(), name, frames * frame, start, *direct)
            });
            let read = passes
                .read(buf, true)
                .with_context(|| format!("reading frame {number}"))?;
            if read.is_none_or(|(n, _)| n != buf.len()) {
                bail!("'{}' has no whole frame {number}", path.display());
            }
        }
    }
    Ok(true)
}

/// Reads one whole frame from a pipe: false if it ended before the frame
/// began; an error naming the likely cause if it ended within it.
fn read_frame(h: &mut File, buf: &mut [u8], number: u64, path: &Path) -> Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match h.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading frame {number} from '{}'", path.display()));
            }
        }
    }
    match got {
        0 => Ok(false),
        n if n == buf.len() => Ok(true),
        n => bail!(
            "'{}' ended within frame {number}: {n} of its {} bytes came; check --size and \
             --pix-fmt against what the writer sends",
            path.display(),
            buf.len()
        ),
    }
}
