//! The recording side of `nagare recv`: a thread that writes the frame
//! slots the receive loop hands it, so a slow disk never stalls the
//! socket. Each frame goes to the [`Recording`] as soon as it is complete.
//! A write error stops the thread; the receive loop notices at its next
//! frame, stops too, and the report carries the error.

use std::thread::JoinHandle;

use anyhow::{Context, Result, anyhow};
use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx, bounded};
use nagare_proto::video::receiver::{Incomplete, Record};
use nagare_proto::video::st2110_20::Frame;

use super::recording::{Plan, Recording};

/// One frame slot for the writer.
pub(super) enum ToWriter {
    Frame(Frame),
    Lost(u64),
}

/// How the writer ended.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// Frames written (or counted, without an output file).
    pub frames: u64,
    /// The write error that stopped it: OS error, path, frames so far.
    pub error: Option<String>,
}

/// The writer thread and its queues.
pub(super) struct Writer {
    tx: ChanTx<ToWriter>,
    pub(super) recycled: ChanRx<Vec<u8>>,
    thread: JoinHandle<Written>,
}

impl Writer {
    /// Opens the recording (if any) and starts the thread.
    pub(super) fn start(plan: Option<Plan>, queue: usize, policy: Incomplete) -> Result<Writer> {
        let recording = plan.map(Recording::open).transpose()?;
        let (tx, rx) = bounded::<ToWriter>(queue);
        let (back, recycled) = bounded::<Vec<u8>>(queue + 4);
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
            thread,
        })
    }

    /// Queues a frame slot; false once the writer has stopped at an error.
    pub(super) fn send(&self, msg: ToWriter) -> bool {
        self.tx.send(msg).is_ok()
    }

    /// Closes the queue and says how the writer ended.
    pub(super) fn finish(self) -> Result<Written> {
        drop(self.tx);
        self.thread
            .join()
            .map_err(|_| anyhow!("the writer thread panicked"))
    }
}

/// Writes what the policy says for each frame slot; keeps a copy of the
/// last complete frame only when the policy repeats it.
fn write_loop(
    mut recording: Option<Recording>,
    rx: &ChanRx<ToWriter>,
    back: &ChanTx<Vec<u8>>,
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
                ToWriter::Frame(f) => {
                    match policy.record(f.complete) {
                        Record::Frame => put(Some(&f.data))?,
                        Record::LastComplete => put(last.as_deref())?,
                        Record::Nothing => {}
                    }
                    if f.complete && policy == Incomplete::RepeatLast {
                        last.get_or_insert_with(Vec::new).clone_from(&f.data);
                    }
                    let _ = back.try_send(f.data);
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
