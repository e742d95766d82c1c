//! The receive engine: one RFC 4175 stream on one leg ([`single`]),
//! recorded by the one writer thread ([`writer`], [`recording`]), and the
//! flags that configure it ([`args`]). `nagare recv` runs it (and adds
//! its stripes path, `cmd/recv/stripes.rs`, which records through the
//! same writer); `demo` runs it beside the send engine, and
//! `analyze --listen` parses its flags as `recv` does and runs it with
//! the ST 2110-21 analysis on.

mod args;
pub(crate) mod recording;
mod single;
pub(crate) mod writer;

pub(crate) use args::{AnalyzeSpec, RecvArgs, RecvConfig, read_sdp};
pub(crate) use recording::Segmenting;
pub(crate) use single::{Bound, format_hint, print_summary, run, run_analyzed};
