//! Log events on stderr: the global `-v`/`-q`/`--log-format` flags,
//! `RUST_LOG`, and the two line formats.
//!
//! What a command reports as its result (send's and recv's summaries,
//! analyze's verdict, `--json` on stdout) is output, printed as before;
//! what a long-running command says about its own work (serve's
//! sessions and streams, cluster's decisions, skipped media) goes
//! through `tracing` events with structured fields, so it can be
//! filtered and shipped.
//!
//! The default human line is the one nagare always printed,
//! `nagare serve: rtsp listening on 127.0.0.1:8554`, with no timestamp
//! and no field list: the message carries the facts in prose, journald,
//! docker and terminals stamp the time themselves, and scripts (the
//! tests among them) that wait for a line keep finding it. `-v` is for
//! someone debugging: each line then starts with an RFC 3339 time and
//! the level, and ends with the event's fields. `--log-format json`
//! writes one JSON object per line (time, level, target, message and
//! every field at the top level) for log shippers.

use std::fmt::{self, Write as _};

use anyhow::{Result, anyhow};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The global logging flags (they work before or after the subcommand).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct LogArgs {
    /// More on stderr: -v adds debug events, and a time, the level and the
    /// event's fields to each line; -vv adds trace events. `analyze -v`
    /// also prints its histograms.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Less on stderr: -q keeps warnings and errors only, -qq errors only.
    /// Command reports and --json output are not logs and stay.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub quiet: u8,
    /// Log lines as human text, or as one JSON object per line for log
    /// shippers. RUST_LOG (e.g. 'debug', 'nagare::cmd::serve=debug')
    /// overrides -v and -q.
    #[arg(
        long,
        value_enum,
        default_value_t = LogFormat::Text,
        global = true,
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
}

/// How log events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `nagare serve: message` lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogArgs {
    /// The level the flags ask for.
    fn level(&self) -> Level {
        match (self.verbose, self.quiet) {
            (0, 0) => Level::INFO,
            (0, 1) => Level::WARN,
            (0, _) => Level::ERROR,
            (1, _) => Level::DEBUG,
            _ => Level::TRACE,
        }
    }
}

/// Installs the global subscriber for `command` (the subcommand's name,
/// which starts each human line). A `RUST_LOG` that does not parse is an
/// error naming it.
pub(crate) fn init(args: &LogArgs, command: &'static str) -> Result<()> {
    let filter = filter(args)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let installed = match args.log_format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder
            .event_format(Human {
                command,
                detailed: args.verbose > 0,
            })
            .try_init(),
    };
    installed.map_err(|e| anyhow!("cannot install the logger: {e}"))
}

/// `RUST_LOG` when it is set, else the flags' level.
fn filter(args: &LogArgs) -> Result<EnvFilter> {
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).map_err(|e| {
            anyhow!(
                "RUST_LOG='{spec}' does not parse ({e}): give a level (error, warn, info, \
                 debug, trace) or TARGET=LEVEL pairs such as nagare::cmd::serve=debug"
            )
        }),
        _ => Ok(EnvFilter::default().add_directive(LevelFilter::from_level(args.level()).into())),
    }
}

/// The human line: `nagare COMMAND: [LEVEL: ]message`, and with `-v` a
/// time and level in front and the fields behind.
struct Human {
    command: &'static str,
    detailed: bool,
}

impl<S, N> FormatEvent<S, N> for Human
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if self.detailed {
            let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
            write!(w, "{now} {level:>5} ")?;
        }
        write!(w, "nagare {}: ", self.command)?;
        if !self.detailed {
            w.write_str(level_word(level))?;
        }
        w.write_str(&fields.message)?;
        if self.detailed && !fields.rest.is_empty() {
            write!(w, " {{{}}}", fields.rest)?;
        }
        writeln!(w)
    }
}

/// The word before a message of `level` in the default line, as nagare
/// wrote its warnings before it had levels.
fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error: ",
        Level::WARN => "warning: ",
        Level::INFO => "",
        Level::DEBUG => "debug: ",
        Level::TRACE => "trace: ",
    }
}

/// An event's message, and its other fields as `key=value` pairs.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Fields {
    fn push(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if field.name() == "message" {
            let _ = self.message.write_fmt(value);
            return;
        }
        if !self.rest.is_empty() {
            self.rest.push(' ');
        }
        let _ = write!(self.rest, "{}={value}", field.name());
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Quoted only when a space would blur where the value ends.
        if field.name() != "message" && (value.is_empty() || value.contains(' ')) {
            self.push(field, format_args!("{value:?}"));
        } else {
            self.push(field, format_args!("{value}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(verbose: u8, quiet: u8) -> LogArgs {
        LogArgs {
            verbose,
            quiet,
            log_format: LogFormat::Text,
        }
    }

    #[test]
    fn flags_pick_the_level() {
        assert_eq!(args(0, 0).level(), Level::INFO);
        assert_eq!(args(0, 1).level(), Level::WARN);
        assert_eq!(args(0, 2).level(), Level::ERROR);
        assert_eq!(args(1, 0).level(), Level::DEBUG);
        assert_eq!(args(2, 0).level(), Level::TRACE);
    }

    /// What `Human` writes for the events `f` makes.
    fn human_lines(detailed: bool, f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let out = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_writer(move || sink.clone())
            .event_format(Human {
                command: "serve",
                detailed,
            })
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn default_lines_read_as_before() {
        let text = human_lines(false, || {
            tracing::info!(addr = "127.0.0.1:8554", "rtsp listening on 127.0.0.1:8554");
            tracing::warn!(file = "a b.yuv", "skipping 'a b.yuv': no sidecar");
        });
        assert_eq!(
            text,
            "nagare serve: rtsp listening on 127.0.0.1:8554\n\
             nagare serve: warning: skipping 'a b.yuv': no sidecar\n"
        );
    }

    #[test]
    fn detailed_lines_add_time_level_and_fields() {
        let text = human_lines(true, || {
            tracing::debug!(session = 3, path = "cam one", "rtsp session 3 opened");
        });
        let (time, rest) = text.split_once(' ').unwrap();
        assert!(humantime::parse_rfc3339(time).is_ok(), "{text}");
        assert_eq!(
            rest.trim_start(),
            "DEBUG nagare serve: rtsp session 3 opened {session=3 path=\"cam one\"}\n"
        );
    }
}
