//! The once-a-second live status line on stderr (rewritten in place on a
//! terminal, one line per tick in logs), and number formatting.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Decides when a status line is due and prints it.
pub(crate) struct Ticker {
    last: Instant,
    every: Duration,
    tty: bool,
    printed: bool,
    quiet: bool,
}

impl Ticker {
    /// A ticker printing every second (never when `quiet`).
    pub(crate) fn new(quiet: bool) -> Ticker {
        Ticker {
            last: Instant::now(),
            every: Duration::from_secs(1),
            tty: std::io::stderr().is_terminal(),
            printed: false,
            quiet,
        }
    }

    /// Whether a line is due at `now` (and resets the timer if so).
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if now.duration_since(self.last) >= self.every {
            self.last = now;
            true
        } else {
            false
        }
    }

    /// Prints a status line.
    pub(crate) fn print(&mut self, line: &str) {
        if self.quiet {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.printed = true;
    }

    /// Ends the status line so later output starts on a fresh line.
    pub(crate) fn finish(&mut self) {
        if self.tty && self.printed && !self.quiet {
            eprintln!();
        }
        self.printed = false;
    }
}

/// Formats bits per second as `12.34 Gbit/s` (proto's text, which
/// refusals use too).
pub(crate) use nagare_proto::units::bitrate_text as bitrate;
