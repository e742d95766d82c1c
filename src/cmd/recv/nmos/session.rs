//! One receive session of `recv --nmos`: what an activation with
//! `master_enable` true starts. One leg is the same engine as `recv
//! --sdp` ([`single::run`], the receive engine); two legs (an ST 2022-7
//! pair) are `recv --dup`'s ([`stripes`], one stripe on two legs, merged).
//! Either runs on a thread of its own, so the NMOS APIs keep answering
//! while it receives; stopping it ends receiving as a stop signal would
//! (the writer flushed, the report printed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use nagare_api::stripes::StripesReport;
use nagare_api::video::RecvReport;
use nagare_proto::nmos::connection::Listen;

use crate::cmd::recv::stripes::{self, Plan};
use crate::engine::recv::{self as single, Bound};
use crate::engine::recv::{RecvArgs, RecvConfig};
use crate::net::placement::{Placement, Role};

/// The receive engine a session runs, and what it reports.
enum Engine {
    /// One leg.
    Single {
        thread: JoinHandle<Result<RecvReport>>,
        /// Boxed: the config is large beside the other variant.
        cfg: Box<RecvConfig>,
    },
    /// Two legs merged.
    Legs(JoinHandle<Result<StripesReport>>),
}

/// A running receive.
pub(super) struct Session {
    stop: Arc<AtomicBool>,
    engine: Engine,
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
            engine: Engine::Single {
                thread,
                cfg: Box::new(cfg),
            },
            json: args.json,
        })
    }

    /// Binds and joins both legs of an ST 2022-7 pair of the stream the
    /// SDP `text` describes and starts receiving them merged; `Err`
    /// refuses the activation.
    pub(super) fn start_legs(text: &str, listens: &[Listen], args: &RecvArgs) -> Result<Session> {
        let plan = Plan::for_legs(args, text, "the staged transport_file", listens)?;
        let opened = stripes::open(&plan)?;
        for l in listens {
            eprintln!("nagare recv: receiving on {}", l.address);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("recv-session".into())
            .spawn(move || stripes::run_opened(&plan, opened, &flag))
            .context("starting the receive thread")?;
        Ok(Session {
            stop,
            engine: Engine::Legs(thread),
            json: args.json,
        })
    }

    /// Whether it ended by itself (the frame limit, the idle timeout, an
    /// error).
    pub(super) fn ended(&self) -> bool {
        match &self.engine {
            Engine::Single { thread, .. } => thread.is_finished(),
            Engine::Legs(thread) => thread.is_finished(),
        }
    }

    /// Stops receiving and reports; `Err` says why the receive failed.
    pub(super) fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.engine {
            Engine::Single { thread, cfg } => {
                let report = joined(thread)?;
                if self.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    single::print_summary(&report);
                }
                if let Some(h) = single::format_hint(&report, &cfg.format) {
                    eprintln!("{h}");
                }
                if let Some(e) = &report.output_error {
                    eprintln!("nagare recv: error: {e}");
                }
            }
            Engine::Legs(thread) => {
                let report = joined(thread)?;
                if self.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    stripes::print_summary(&report);
                }
            }
        }
        Ok(())
    }
}

/// What the receive thread returned.
fn joined<T>(thread: JoinHandle<Result<T>>) -> Result<T> {
    match thread.join() {
        Ok(r) => r,
        Err(_) => anyhow::bail!("the receive thread panicked"),
    }
}
