//! The recording side of `nagare recv`, one stream or reassembled
//! stripes: a thread that writes the frame slots the receive loop hands
//! it, so a slow disk never stalls the socket. Each frame goes to the [`Recording`] as soon as it is complete.
//! A write error stops the thread; the receive loop notices at its next
//! frame, stops too, and the report carries the error.

use std::ops::Deref;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx, TrySendError, bounded};
use nagare_proto::video::receiver::{Incomplete, Record};

use super::recording::{Plan, Recording};

/// One frame slot for the writer. `B` is the receive path's frame buffer
/// (a `Vec<u8>` of one stream, an `AlignedBuf` of reassembled stripes);
/// the writer hands each back once written.
pub(crate) enum ToWriter<B> {
    /// A frame, whole or not.
    Frame { data: B, complete: bool },
    /// Frames of which nothing arrived.
    Lost(u64),
}

/// How the writer ended.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Frames written (or counted, without an output file).
    pub frames: u64,
    /// The write error that stopped it: OS error, path, frames so far.
    pub error: Option<String>,
    /// Time the receive side waited on a full queue: the recording was
    /// slower than the stream.
    pub waited: Duration,
}

/// The writer thread and its queues.
pub(crate) struct Writer<B> {
    tx: ChanTx<ToWriter<B>>,
    pub(crate) recycled: ChanRx<B>,
    waited: Duration,
    thread: JoinHandle<Written>,
}

impl<B: Deref<Target = [u8]> + Send + 'static> Writer<B> {
    /// Opens the recording (if any) and starts the thread, with `queue`
    /// frames in flight. `policy` says what an incomplete or lost frame
    /// leaves in the recording.
    pub(crate) fn start(plan: Option<Plan>, queue: usize, policy: Incomplete) -> Result<Writer<B>> {
        let recording = plan.map(Recording::open).transpose()?;
        let (tx, rx) = bounded::<ToWriter<B>>(queue);
        let (back, recycled) = bounded::<B>(queue + 4);
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                crate::net::tuning::ordinary();
                write_loop(recording, &rx, &back, policy)
            })
            .context("starting the writer thread")?;
        Ok(Writer {
            tx,
            recycled,
            waited: Duration::ZERO,
            thread,
        })
    }

    /// Queues a frame slot, waiting while the queue is full (the wait is
    /// counted); false once the writer has stopped at an error.
    pub(crate) fn send(&mut self, msg: ToWriter<B>) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(TrySendError::Full(msg)) => {
                let since = Instant::now();
                let sent = self.tx.send(msg).is_ok();
                self.waited += since.elapsed();
                sent
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Closes the queue and says how the writer ended.
    pub(crate) fn finish(self) -> Result<Written> {
        drop(self.tx);
        let mut written = self
            .thread
            .join()
            .map_err(|_| anyhow!("the writer thread panicked"))?;
        written.waited = self.waited;
        Ok(written)
    }
}

/// Writes what the policy says for each frame slot; keeps a copy of the
/// last complete frame only when the policy repeats it.
fn write_loop<B: Deref<Target = [u8]>>(
    mut recording: Option<Recording>,
    rx: &ChanRx<ToWriter<B>>,
    back: &ChanTx<B>,
    policy: Incomplete,
) -> Written {
    let mut last: Option<Vec<u8>> = None;
    let mut out = Written::default();
    let mut put = |data: Option<&[u8]>| -> Result<()> {
        let Some(data) = data else { return Ok(()) };
        match recording.as_mut() {
            Some(r) => {
                let written = r.write(data);
                out.frames = r.frames();
                written
            }
            None => {
                out.frames += 1;
                Ok(())
            }
        }
    };
    let result = (|| -> Result<()> {
        for msg in rx {
            match msg {
                ToWriter::Frame { data, complete } => {
                    match policy.record(complete) {
                        Record::Frame => put(Some(&data))?,
                        Record::LastComplete => put(last.as_deref())?,
                        Record::Nothing => {}
                    }
                    if complete && policy == Incomplete::RepeatLast {
                        let l = last.get_or_insert_with(Vec::new);
                        l.clear();
                        l.extend_from_slice(&data);
                    }
                    let _ = back.try_send(data);
                }
                ToWriter::Lost(count) => {
                    if policy.record_lost() == Record::LastComplete {
                        for _ in 0..count {
                            put(last.as_deref())?;
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    let closed = recording.map_or(Ok(()), Recording::close);
    if let Err(e) = result.and(closed) {
        out.error = Some(format!("{e:#}"));
    }
    out
}
