//! A sender's RTCP thread: sender reports (RFC 3550 §6.4.1) about every
//! second while the streams send, a BYE when they end, and the receiver
//! reports that come back. The pacing thread never waits on it: per train
//! it stores its counts in a [`Tally`], and this thread reads them when a
//! report is due.
//!
//! Unicast streams share one socket, where each receiver answers the
//! address the reports came from. A multicast stream has a socket of its
//! own joined to the group's RTCP port, since its receivers report to the
//! group (RFC 3550 §6); there it also hears its own reports (multicast
//! loop), which its `rtcp::Feedback` sets aside by their SSRC.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use nagare_api::video::SendRtcp;
use nagare_proto::rtcp::{self, Anchor, Feedback, Input, Reporter, WallTime};
use nagare_proto::{FrameRate, MediaTime, Ssrc};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::clock::{Origin, epoch_ns};

/// The longest the thread sleeps between looks at the tallies: a first
/// report goes within this of a stream's first packets.
const LOOK: Duration = Duration::from_millis(100);

/// Datagrams read from one socket per look at most.
const PER_LOOK: usize = 16;

/// A frame number that is none yet.
const NO_FRAME: u64 = u64::MAX;

/// What one stream has sent, written by the pacing thread.
pub(crate) struct Tally {
    packets: AtomicU64,
    octets: AtomicU64,
    /// The epoch frame of the latest train (its start and RTP timestamp
    /// tie the RTP clock to the wall clock).
    frame: AtomicU64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            packets: AtomicU64::new(0),
            octets: AtomicU64::new(0),
            frame: AtomicU64::new(NO_FRAME),
        }
    }

    /// A train of `packets` datagrams of `bytes` in all of epoch frame
    /// `frame` left.
    pub(crate) fn sent(&self, packets: u64, bytes: u64, frame: u64) {
        let payload = bytes.saturating_sub(packets * rtcp::RTP_HEADER_BYTES);
        self.frame.store(frame, Ordering::Relaxed);
        self.octets.fetch_add(payload, Ordering::Relaxed);
        self.packets.fetch_add(packets, Ordering::Relaxed);
    }
}

/// One stream's RTCP: its SSRC, where its reports go, and which of the
/// thread's sockets sends them (and hears the answers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stream {
    pub ssrc: Ssrc,
    pub to: SocketAddr,
    pub socket: usize,
}

/// The RTCP thread of one send, and the tallies it reads.
pub(crate) struct SenderRtcp {
    tallies: Arc<Vec<Tally>>,
    ended: Arc<AtomicBool>,
    thread: JoinHandle<SendRtcp>,
}

impl SenderRtcp {
    /// Starts the thread for `streams` of frame rate `rate`, each sending
    /// from its socket of `sockets` (which receiver reports come back to).
    pub(crate) fn start(
        streams: Vec<Stream>,
        rate: FrameRate,
        sockets: Vec<UdpSocket>,
    ) -> Result<SenderRtcp> {
        let tallies: Arc<Vec<Tally>> = Arc::new(streams.iter().map(|_| Tally::new()).collect());
        let ended = Arc::new(AtomicBool::new(false));
        let mut worker = Worker::new(
            streams,
            rate,
            sockets,
            Arc::clone(&tallies),
            Arc::clone(&ended),
        )?;
        let thread = std::thread::Builder::new()
            .name("send-rtcp".into())
            .spawn(move || worker.run())
            .context("starting the RTCP thread")?;
        Ok(SenderRtcp {
            tallies,
            ended,
            thread,
        })
    }

    /// Stream `i`'s tally.
    pub(crate) fn tally(&self, i: usize) -> Option<&Tally> {
        self.tallies.get(i)
    }

    /// The streams ended: the BYEs go (`rtcp::BYE_DELAY` later, so a
    /// reader takes the last frame first), and the thread's counts come
    /// back.
    pub(crate) fn finish(self) -> SendRtcp {
        self.ended.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// One stream on the RTCP thread.
struct Flow {
    to: SocketAddr,
    /// Its socket among the worker's.
    socket: usize,
    reporter: Reporter,
    feedback: Feedback,
    /// Packets and octets already told to the reporter.
    fed: (u64, u64),
    byes: u64,
}

/// The thread's state.
struct Worker {
    flows: Vec<Flow>,
    rate: FrameRate,
    sockets: Vec<UdpSocket>,
    tallies: Arc<Vec<Tally>>,
    ended: Arc<AtomicBool>,
    origin: Origin,
    malformed: u64,
}

impl Worker {
    fn new(
        streams: Vec<Stream>,
        rate: FrameRate,
        sockets: Vec<UdpSocket>,
        tallies: Arc<Vec<Tally>>,
        ended: Arc<AtomicBool>,
    ) -> Result<Worker> {
        let seed = getrandom::u64().unwrap_or(0);
        let flows: Vec<Flow> = streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                // RFC 7022: one random CNAME per sender; the stripes of
                // a frame share it, as a player should keep them in step.
                let cname = format!("nagare-{seed:016x}@send");
                let config = rtcp::Config::new(s.ssrc, cname, seed.wrapping_add(i as u64));
                Flow {
                    to: s.to,
                    socket: s.socket,
                    reporter: Reporter::new(config),
                    feedback: Feedback::for_source(s.ssrc),
                    fed: (0, 0),
                    byes: 0,
                }
            })
            .collect();
        if let Some(f) = flows.iter().find(|f| f.socket >= sockets.len()) {
            anyhow::bail!("the RTCP of {} has no socket", f.to);
        }
        for s in &sockets {
            s.set_nonblocking(true)
                .context("making the RTCP socket non-blocking")?;
        }
        Ok(Worker {
            flows,
            rate,
            sockets,
            tallies,
            ended,
            origin: Origin::now(),
            malformed: 0,
        })
    }

    /// Reports until every stream said BYE.
    fn run(&mut self) -> SendRtcp {
        let mut buf = vec![0u8; 2048];
        loop {
            let now = self.origin.elapsed();
            // Read before the tallies: the pacer's last counts are in
            // them once it says it ended.
            let ended = self.ended.load(Ordering::Acquire);
            self.feed(now, ended);
            self.send_due(now);
            if self.flows.iter().all(|f| f.reporter.said_bye()) {
                return self.report();
            }
            let next = self
                .flows
                .iter()
                .filter_map(|f| f.reporter.poll_timeout())
                .min()
                .map_or(LOOK, |t| Duration::from(t.saturating_sub(now)).min(LOOK));
            self.read(next.max(Duration::from_millis(1)), &mut buf);
        }
    }

    /// Tells each reporter what its stream sent since the last look.
    fn feed(&mut self, now: nagare_proto::Nanos, ended: bool) {
        for (f, t) in self.flows.iter_mut().zip(self.tallies.iter()) {
            let packets = t.packets.load(Ordering::Relaxed);
            let octets = t.octets.load(Ordering::Relaxed);
            let frame = t.frame.load(Ordering::Relaxed);
            if packets > f.fed.0 && frame != NO_FRAME {
                // Frame n starts n periods after the Unix epoch, and its
                // timestamp is that instant's on the 90 kHz clock.
                let anchor = Anchor {
                    wall: WallTime(u64::try_from(self.rate.frame_start_ns(frame)).unwrap_or(0)),
                    rtp: MediaTime(self.rate.rtp_timestamp(frame)),
                };
                let input = Input::Sent {
                    packets: packets - f.fed.0,
                    payload_octets: octets.saturating_sub(f.fed.1),
                    anchor,
                };
                f.reporter.handle_input(now, input);
                f.fed = (packets, octets);
            }
            if ended {
                f.reporter.handle_input(now, Input::Ended);
            }
        }
    }

    /// Sends every report and BYE due.
    fn send_due(&mut self, now: nagare_proto::Nanos) {
        for f in &mut self.flows {
            if f.reporter.poll_timeout().is_none_or(|t| t > now) {
                continue;
            }
            let wall = WallTime(u64::try_from(epoch_ns()).unwrap_or(0));
            while let Some(bytes) = f.reporter.poll_transmit(now, wall) {
                // A refused report (nobody on the RTCP port) is not an
                // error: RTCP is optional for every reader.
                let _ = self.sockets[f.socket].send_to(&bytes, f.to);
            }
            if f.reporter.said_bye() && f.byes == 0 {
                f.byes = 1;
            }
        }
    }

    /// Waits up to `wait` for datagrams on any socket, and reads what
    /// each has (a few per socket: a flood costs one look no more).
    fn read(&mut self, wait: Duration, buf: &mut [u8]) {
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd> = self
                .sockets
                .iter()
                .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
                .collect();
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            if poll(&mut fds, PollTimeout::from(ms)).unwrap_or(0) <= 0 {
                return;
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        for (i, _) in ready.iter().enumerate().filter(|(_, r)| **r) {
            for _ in 0..PER_LOOK {
                let Ok((n, _from)) = self.sockets[i].recv_from(buf) else {
                    break;
                };
                self.take(i, &buf[..n]);
            }
        }
    }

    /// Gives a datagram from socket `socket` to the feedback of every
    /// stream on it, which keeps the blocks about its own SSRC.
    fn take(&mut self, socket: usize, datagram: &[u8]) {
        let now = self.origin.elapsed();
        let on = |f: &&mut Flow| f.socket == socket;
        let mut bad = false;
        for f in self.flows.iter_mut().filter(on) {
            let before = f.feedback.counters().malformed;
            f.feedback.handle_input(now, datagram);
            bad |= f.feedback.counters().malformed > before;
        }
        if bad {
            self.malformed += 1;
        }
    }

    fn report(&self) -> SendRtcp {
        let latest: Vec<_> = self
            .flows
            .iter()
            .filter_map(|f| f.feedback.latest())
            .collect();
        SendRtcp {
            to: self.flows.iter().map(|f| f.to).collect(),
            sender_reports: self.flows.iter().map(|f| f.reporter.reports()).sum(),
            byes: self.flows.iter().map(|f| f.byes).sum(),
            receiver_reports: self
                .flows
                .iter()
                .map(|f| f.feedback.counters().reports)
                .sum(),
            malformed: self.malformed,
            reported_lost: (!latest.is_empty()).then(|| {
                latest
                    .iter()
                    .map(|r| i64::from(r.block.cumulative_lost))
                    .sum()
            }),
            reported_jitter_ms: latest
                .iter()
                .map(|r| f64::from(r.block.jitter) * 1e3 / f64::from(rtcp::VIDEO_CLOCK_RATE))
                .reduce(f64::max),
        }
    }
}

/// Where stream `rtp`'s RTCP goes among `stripes` streams on consecutive
/// ports: the RTP port + 1 for one stream (RFC 3550 §11), past the
/// stripes' RTP ports (+ the stripe count) for several, which the SDP
/// then names in `a=rtcp`. `None` above port 65535.
pub(crate) fn rtcp_dest(rtp: SocketAddr, stripes: usize) -> Option<SocketAddr> {
    let port = u16::try_from(usize::from(rtp.port()) + stripes.max(1)).ok()?;
    Some(SocketAddr::new(rtp.ip(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtcp_goes_to_port_plus_one_or_past_the_stripes() {
        let rtp: SocketAddr = "127.0.0.1:5004".parse().unwrap();
        assert_eq!(rtcp_dest(rtp, 1), Some("127.0.0.1:5005".parse().unwrap()));
        // Stripe 2 of 4 on 5006: 5004..=5007 carry RTP, its RTCP is 5010.
        let stripe: SocketAddr = "127.0.0.1:5006".parse().unwrap();
        assert_eq!(
            rtcp_dest(stripe, 4),
            Some("127.0.0.1:5010".parse().unwrap())
        );
        assert_eq!(rtcp_dest("127.0.0.1:65535".parse().unwrap(), 1), None);
    }
}
