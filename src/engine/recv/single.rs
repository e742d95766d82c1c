//! The receive engine's single path (`recv`, `demo`, `analyze --listen`):
//! receives one RFC 4175 stream (nagare's,
//! GStreamer's or FFmpeg's) and records its frames on a writer thread in
//! the raw layout `nagare send` reads. Every decision about packets and
//! frames is nagare-proto's `video::Receiver`; this driver moves socket
//! batches in, frames out to the writer, and builds the report.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nagare_api::video::{EndedBy, FrameList, RecvReport, Rival, Take};
use nagare_proto::video::receiver::{self, Config, Datagram, Event};
use nagare_proto::video::st2110_21::Monitor;
use nagare_proto::{BitRate, ByteSize, Nanos, VideoFormat};

use crate::analysis::collect::{Collector, FramePoint};
use crate::clock::Origin;
use crate::net::rtcp::reading::{ReaderRtcp, next_port};
use crate::net::udp::Receiver;
use crate::progress::{Ticker, bitrate};

use super::args::{AnalyzeSpec, RecvConfig};
use super::writer::{ToWriter, Writer};

/// A bound receiver ready to run (binding first lets callers learn the
/// port before the sender starts).
pub(crate) struct Bound {
    rx: Receiver,
    /// The RTCP port (the SDP's `a=rtcp`, else the RTP port + 1), once
    /// bound.
    rtcp: Option<ReaderRtcp>,
}

impl Bound {
    /// Binds and joins as configured.
    pub(crate) fn open(cfg: &RecvConfig) -> Result<Bound> {
        let mut rx = Receiver::open(cfg.listen, &cfg.socket)?;
        rx.read_on_a_timer();
        Ok(Bound { rx, rtcp: None })
    }

    /// [`Bound::open`], and the RTCP port beside the stream's with
    /// `rtcp` (`recv --rtcp`); says the notices of socket setup and why
    /// there is no RTCP port, if there is none.
    pub(crate) fn open_noting(cfg: &RecvConfig, rtcp: bool) -> Result<Bound> {
        let mut bound = Bound::open(cfg)?;
        if rtcp && let Err(why) = bound.bind_rtcp(cfg) {
            eprintln!("nagare recv: note: {why}");
        }
        for n in bound.notices() {
            eprintln!("nagare recv: note: {n}");
        }
        Ok(bound)
    }

    /// Binds the RTCP port beside the stream's (`recv --rtcp`): where the
    /// SDP's `a=rtcp` says, else the RTP port + 1; on a multicast group
    /// joined as the stream's socket is. `Err` says why there is none
    /// (the port taken, no port + 1).
    pub(crate) fn bind_rtcp(&mut self, cfg: &RecvConfig) -> Result<(), String> {
        let listen = cfg.listen;
        let port = self.rx.local_addr().map_or(listen.port(), |a| a.port());
        let at = match cfg.rtcp {
            Some(at) => at,
            None => next_port(SocketAddr::new(listen.ip(), port))?,
        };
        self.rtcp = Some(ReaderRtcp::bind(at, &cfg.socket, cfg.ttl)?);
        Ok(())
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.rx.local_addr()
    }

    /// Notices from socket setup.
    pub(crate) fn notices(&self) -> &[String] {
        &self.rx.notices
    }
}

/// Longest a stopping receiver keeps taking datagrams already queued.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The receive loop's state around the proto machine.
struct Driver<'a> {
    cfg: &'a RecvConfig,
    machine: receiver::Receiver,
    writer: Writer<Vec<u8>>,
    /// The writer stopped at an error: receiving ends too.
    writer_stopped: bool,
    /// Another sender took over, not followed: receiving ends.
    taken_over: bool,
    origin: Origin,
    report: RecvReport,
    ticker: Ticker,
    window: (u64, Instant),
    analysis: Option<Analysis>,
    /// The sender's reports read and receiver reports sent.
    rtcp: Option<ReaderRtcp>,
}

/// The ST 2110-21 monitor beside the receiver machine, and what it found.
struct Analysis {
    monitor: Monitor,
    collector: Collector,
    print_seconds: bool,
}

impl Analysis {
    /// Starts the analysis of `spec`, making `rx` stamp every datagram.
    fn start(spec: AnalyzeSpec, rx: &mut Receiver, listen: SocketAddr) -> Analysis {
        // Each datagram needs its own arrival: kernel stamps, and no GRO
        // batches sharing one.
        if !rx.enable_timestamps() {
            eprintln!("nagare recv: note: no kernel receive stamps here; arrivals are read times");
        }
        rx.disable_gro();
        Analysis {
            monitor: Monitor::new(spec.shape),
            collector: Collector::new(format!("udp {listen}"), spec.declared),
            print_seconds: spec.print_seconds,
        }
    }

    fn events(&mut self) {
        while let Some(e) = self.monitor.poll_event() {
            if let Some(line) = self.collector.event(e)
                && self.print_seconds
            {
                eprintln!("{}", crate::analysis::output::second(&line));
            }
        }
    }

    fn finish(mut self) -> (nagare_api::st2110::AnalyzeReport, Vec<FramePoint>) {
        self.monitor.flush();
        self.events();
        self.collector.inspect(&self.monitor);
        self.collector
            .finish(self.monitor.analyzer(), self.monitor.stats(), 0)
    }
}

/// Receives until the frame limit, the idle timeout, or `stop`.
pub(crate) fn run(cfg: &RecvConfig, bound: Bound, stop: &AtomicBool) -> Result<RecvReport> {
    run_analyzed(cfg, bound, stop).map(|(r, _)| r)
}

/// [`run`], also returning the analysis's per-frame series (for a plot).
pub(crate) fn run_analyzed(
    cfg: &RecvConfig,
    bound: Bound,
    stop: &AtomicBool,
) -> Result<(RecvReport, Vec<FramePoint>)> {
    let mut rx = bound.rx;
    let rtcp = bound.rtcp;
    let drops_at_start = rx.kernel_drops;
    let analysis = cfg
        .analyze
        .map(|spec| Analysis::start(spec, &mut rx, cfg.listen));
    let mut d = Driver {
        cfg,
        machine: receiver::Receiver::new(Config {
            format: cfg.format,
            rate: cfg.rate,
            incomplete: cfg.incomplete,
            frame_limit: cfg.frames,
        })
        .with_selection(cfg.source_filter, cfg.follow_ssrc),
        writer: Writer::start(cfg.plan(), cfg.buffer_frames, cfg.incomplete)?,
        writer_stopped: false,
        taken_over: false,
        origin: Origin::now(),
        report: RecvReport::default(),
        ticker: Ticker::new(cfg.quiet),
        window: (0, Instant::now()),
        analysis,
        rtcp,
    };
    let ended_by = match d.receive(&mut rx, stop) {
        Ok(e) => e,
        Err(e) => {
            let _ = d.writer.finish();
            return Err(e);
        }
    };
    d.ticker.finish();
    d.machine.finish();
    d.events()?;
    let Driver {
        machine,
        writer,
        mut report,
        analysis,
        rtcp,
        ..
    } = d;
    report.rtcp = rtcp.as_ref().map(ReaderRtcp::report);
    let written = writer.finish()?;
    report.frames_written = written.frames;
    report.output_error = written.error;
    fill_report(&mut report, &machine.stats(), cfg);
    report.kernel_drops = u64::from(rx.kernel_drops.wrapping_sub(drops_at_start));
    report.ended_by = if report.output_error.is_some() {
        EndedBy::OutputError
    } else {
        ended_by
    };
    report.gro = rx.gro;
    let (analysis, points) = analysis.map(Analysis::finish).unzip();
    report.analysis = analysis;
    Ok((report, points.unwrap_or_default()))
}

impl Driver<'_> {
    /// Feeds socket batches to the machine until it is done, the socket is
    /// idle for the timeout, or `stop`.
    fn receive(&mut self, rx: &mut Receiver, stop: &AtomicBool) -> Result<EndedBy> {
        let mut last_packet = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                self.drain(rx)?;
                return Ok(EndedBy::Interrupted);
            }
            if self.writer_stopped {
                return Ok(EndedBy::OutputError);
            }
            if self.taken_over {
                return Ok(EndedBy::TakenOver);
            }
            if self.machine.is_done() {
                return Ok(EndedBy::FrameCount);
            }
            if self.cfg.timeout.is_some_and(|t| last_packet.elapsed() >= t) {
                return Ok(EndedBy::Timeout);
            }
            if self.batch(rx)? > 0 {
                last_packet = Instant::now();
            }
            self.events()?;
            self.rtcp();
            self.progress();
        }
    }

    /// Feeds one socket batch to the machine; how many datagrams it held.
    fn batch(&mut self, rx: &mut Receiver) -> Result<usize> {
        let (machine, origin) = (&mut self.machine, self.origin);
        let mut monitor = self.analysis.as_mut().map(|a| &mut a.monitor);
        let got = rx
            .recv_batch(|d| {
                let now = origin.nanos(d.at);
                let wall = epoch_nanos(d.wall);
                for bytes in d.segments() {
                    if let Some(m) = monitor.as_mut() {
                        m.handle_input(wall, bytes);
                    }
                    let from = d.from;
                    machine.handle_input(now, Datagram { bytes, from });
                }
            })
            .context("receiving")?;
        if let Some(a) = self.analysis.as_mut() {
            a.events();
        }
        Ok(got)
    }

    /// On a stop, takes what the kernel already holds (a sender stopped
    /// first has its last frame there), bounded in time, so the frames
    /// that arrived are recorded whole.
    fn drain(&mut self, rx: &mut Receiver) -> Result<()> {
        rx.set_wait(Duration::from_millis(1))
            .context("setting the receive timeout")?;
        let until = Instant::now() + DRAIN_LIMIT;
        while Instant::now() < until
            && !self.machine.is_done()
            && !self.writer_stopped
            && self.batch(rx)? > 0
        {
            self.events()?;
        }
        Ok(())
    }

    /// Hands frames to the writer and books them in the report.
    fn events(&mut self) -> Result<()> {
        while let Ok(buf) = self.writer.recycled.try_recv() {
            self.machine.recycle(buf);
        }
        while let Some(e) = self.machine.poll_event() {
            match e {
                Event::Stream {
                    ssrc,
                    from,
                    first_seq,
                    replaces,
                    first_frame,
                } => {
                    self.report.sender = from;
                    self.report.takes.push(Take {
                        ssrc: ssrc.0,
                        first_seq,
                        sender: from,
                        first_frame,
                    });
                    say_stream(&self.report.takes, replaces.map(|s| s.0));
                }
                Event::Rival {
                    ssrc,
                    from,
                    stream,
                    took_over,
                } => {
                    self.report.rivals.push(Rival {
                        ssrc: ssrc.0,
                        sender: from,
                        took_over,
                    });
                    say_rival(ssrc.0, from, stream.0, took_over);
                    self.taken_over |= took_over;
                }
                Event::Frame(f) => {
                    if !f.complete {
                        self.report.frames_incomplete.add(f.index, 1);
                    } else if self.cfg.checksums {
                        let sum = xxhash_rust::xxh3::xxh3_64(&f.data);
                        self.report.checksums.push((f.index, sum));
                    }
                    self.hand_over(ToWriter::Frame {
                        data: f.data,
                        complete: f.complete,
                    });
                }
                Event::Lost { first, count } => {
                    self.report.frames_lost.add(first, count);
                    self.hand_over(ToWriter::Lost(count));
                }
                // Frames the stream ended before are reported, not written.
                Event::Missing { first, count } => self.report.frames_lost.add(first, count),
            }
        }
        Ok(())
    }

    /// Reads the sender's reports and answers them when due.
    fn rtcp(&mut self) {
        if let Some(r) = self.rtcp.as_mut() {
            let machine = &self.machine;
            r.step(self.origin.elapsed(), || machine.reception());
        }
    }

    fn hand_over(&mut self, slot: ToWriter<Vec<u8>>) {
        if !self.writer_stopped && !self.writer.send(slot) {
            self.writer_stopped = true;
        }
    }

    fn progress(&mut self) {
        let now = Instant::now();
        if !self.ticker.due(now) {
            return;
        }
        let s = self.machine.stats();
        let (b0, t0) = self.window;
        let rate = (s.bytes - b0) as f64 * 8.0 / now.duration_since(t0).as_secs_f64().max(1e-9);
        self.window = (s.bytes, now);
        self.ticker.print(&format!(
            "recv: {}  frames {} complete, {} incomplete, {} lost  packets lost {}",
            bitrate(rate),
            s.frames_complete,
            s.frames_incomplete,
            s.frames_lost,
            s.packets_lost
        ));
    }
}

/// Names the stream just locked on (SSRC, first sequence number, sender),
/// so it can be matched with what the sender printed.
fn say_stream(takes: &[Take], replaces: Option<u32>) {
    let Some(t) = takes.last() else { return };
    let from = t.sender.map_or(String::new(), |a| format!(" from {a}"));
    let head = match replaces {
        Some(old) => format!(
            "take {}: SSRC 0x{old:08x} went silent and a new stream took over:",
            takes.len()
        ),
        None => "stream".to_owned(),
    };
    eprintln!(
        "nagare recv: {head} SSRC 0x{:08x}{from}, first sequence number {}, frames from {}",
        t.ssrc, t.first_seq, t.first_frame
    );
}

/// Says what happens to a second stream on the port.
fn say_rival(ssrc: u32, from: Option<SocketAddr>, stream: u32, took_over: bool) {
    let from = from.map_or(String::new(), |a| format!(" from {a}"));
    if took_over {
        eprintln!(
            "nagare recv: error: SSRC 0x{stream:08x} went silent and another stream (SSRC \
             0x{ssrc:08x}{from}) took over: a restarted sender? Stopping; pass --follow-ssrc to \
             record it as a new take"
        );
    } else {
        eprintln!(
            "nagare recv: warning: a second stream (SSRC 0x{ssrc:08x}{from}) is sending to this \
             port alongside SSRC 0x{stream:08x}; its packets are counted as foreign"
        );
    }
}

/// A system-clock time as nanoseconds since the Unix epoch.
fn epoch_nanos(t: std::time::SystemTime) -> Nanos {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Copies the machine's counters into the report.
fn fill_report(r: &mut RecvReport, s: &receiver::Stats, cfg: &RecvConfig) {
    r.frames_complete = s.frames_complete;
    r.packets_received = s.packets_received;
    r.packets_lost = s.packets_lost;
    r.packets_reordered = s.packets_reordered;
    r.packets_duplicate = s.packets_duplicate;
    r.packets_malformed = s.packets_malformed;
    r.packets_late = s.packets_late;
    r.packets_foreign = s.packets_foreign;
    r.bytes = s.bytes;
    let span = match (s.first_at, s.last_at) {
        (Some(a), Some(b)) => b - a,
        _ => Nanos::ZERO,
    };
    r.seconds = span.as_secs_f64();
    r.rate_bps = BitRate::of(ByteSize(s.bytes), span);
    r.jitter_ms = s.jitter.as_millis_f64();
    // A stream thrown away is never a success.
    r.all_complete = r.output_error.is_none()
        && r.rivals.is_empty()
        && r.frames_complete > 0
        && r.frames_incomplete.count == 0
        && r.frames_lost.count == 0
        && cfg.frames.is_none_or(|n| r.frames_complete >= n);
}

/// ` (1,4-6)` for a non-empty list, nothing for an empty one.
fn listed(l: &FrameList) -> String {
    if l.count > 0 {
        format!(" ({l})")
    } else {
        String::new()
    }
}

/// Prints the human summary of a receive.
pub(crate) fn print_summary(r: &RecvReport) {
    eprintln!(
        "recv: {} frames complete, {} incomplete{}, {} lost{}; {} written",
        r.frames_complete,
        r.frames_incomplete.count,
        listed(&r.frames_incomplete),
        r.frames_lost.count,
        listed(&r.frames_lost),
        r.frames_written
    );
    eprintln!(
        "recv: packets {} received, {} lost, {} reordered, {} duplicate, {} malformed, {} late, {} foreign; kernel drops {}",
        r.packets_received,
        r.packets_lost,
        r.packets_reordered,
        r.packets_duplicate,
        r.packets_malformed,
        r.packets_late,
        r.packets_foreign,
        r.kernel_drops
    );
    eprintln!(
        "recv: {} over {:.2} s, jitter (RFC 3550) {:.3} ms; ended by {}",
        bitrate(r.rate_bps.as_f64()),
        r.seconds,
        r.jitter_ms,
        r.ended_by
    );
    if let Some(c) = &r.rtcp {
        let from = c.sender.map_or("no sender reports".to_owned(), |a| {
            format!("{} sender reports from {a}", c.sender_reports)
        });
        eprintln!(
            "recv: RTCP on port {}: {from}, {} BYE; {} receiver reports sent",
            c.port, c.byes, c.receiver_reports
        );
    }
    if let Some(a) = &r.analysis {
        eprint!("{}", crate::analysis::output::summary(a, false));
    }
}

/// Why most of a stream failed to parse, when that looks like a format
/// mismatch rather than loss: packets whose lines or offsets fall outside
/// the frame this receiver expects are malformed, and their frames then
/// count as incomplete or lost.
pub(crate) fn format_hint(r: &RecvReport, f: &VideoFormat) -> Option<String> {
    let seen = r.packets_received + r.packets_malformed;
    let mostly_bad = r.packets_malformed > 0 && r.packets_malformed * 10 >= seen;
    (mostly_bad && r.frames_complete * 2 <= r.frames_incomplete.count + r.frames_lost.count + 1)
        .then(|| {
            format!(
                "recv: hint: {} of {seen} packets did not fit a {}x{} {} frame: the sender most \
                 likely sends another size or pixel format; give recv the sender's --size and \
                 --pix-fmt, or its SDP with --sdp",
                r.packets_malformed, f.width, f.height, f.pixel_format
            )
        })
}
