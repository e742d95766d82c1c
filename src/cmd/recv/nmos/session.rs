//! One receive session of `recv --nmos`: what an activation with
//! `master_enable` true starts. The same engine as `recv --sdp`
//! ([`single::run`], the receive engine) on a thread of its own, so the NMOS APIs keep
//! answering while it receives; stopping it ends receiving as a stop
//! signal would (the writer flushed, the report printed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use nagare_api::video::RecvReport;

use crate::engine::recv::{self as single, Bound};
use crate::engine::recv::{RecvArgs, RecvConfig};
use crate::net::placement::{Placement, Role};

/// A running receive.
pub(super) struct Session {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<RecvReport>>,
    cfg: RecvConfig,
    json: bool,
}

impl Session {
    /// Binds and joins as `cfg` says and starts receiving; `Err` (a port
    /// taken, a group that cannot be joined) refuses the activation.
    pub(super) fn start(cfg: RecvConfig, args: &RecvArgs) -> Result<Session> {
        let bound = Bound::open_noting(&cfg, args.rtcp)?;
        if let Some(a) = bound.local_addr() {
            eprintln!("nagare recv: receiving on {a}");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, run_cfg, cpu) = (Arc::clone(&stop), cfg.clone(), args.cpu);
        let thread = std::thread::Builder::new()
            .name("recv-session".into())
            .spawn(move || {
                // The receive thread takes its CPU as plain recv's does.
                Placement::new(cpu).apply(Role::Receive { index: 0 })?;
                single::run(&run_cfg, bound, &flag)
            })
            .context("starting the receive thread")?;
        Ok(Session {
            stop,
            thread,
            cfg,
            json: args.json,
        })
    }

    /// Whether it ended by itself (the frame limit, the idle timeout, an
    /// error).
    pub(super) fn ended(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops receiving and reports; `Err` says why the receive failed.
    pub(super) fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let report = match self.thread.join() {
            Ok(r) => r?,
            Err(_) => anyhow::bail!("the receive thread panicked"),
        };
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            single::print_summary(&report);
        }
        if let Some(h) = single::format_hint(&report, &self.cfg.format) {
            eprintln!("{h}");
        }
        if let Some(e) = &report.output_error {
            eprintln!("nagare recv: error: {e}");
        }
        Ok(())
    }
}
