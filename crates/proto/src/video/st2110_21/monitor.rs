//! From RTP datagrams to the analyser: the machine `nagare analyze` and
//! `recv --analyze` feed, live or from a capture.
//!
//! The model needs Npackets, which an SDP does not carry (it depends on
//! the sender's packet size), so unless it is given the monitor learns
//! it: it holds the first packets back until it has seen the start of two
//! consecutive frames (a change of RTP timestamp), takes the distance of
//! their sequence numbers as the packets of a frame, as EBU LIST does,
//! then builds the [`Model`] and replays what it held. Holding back is
//! bounded by [`MAX_LEARN`] packets.
//!
//! Every datagram is first inspected ([`inspect::rtp`], [`inspect::payload`]): what is not RFC 4175 video is
//! counted and never analysed, and a stream whose first
//! [`REFUSE_AFTER`] datagrams are none of them video is refused with what
//! they are ([`LearnError::NotVideo`]). The sample row headers of the
//! video packets give the raster they describe, held against the size
//! given by [`Monitor::size_mismatch`].
//!
//! # Polling order
//!
//! The monitor sends nothing and sets no timer: the driver feeds each
//! datagram with [`Monitor::handle_input`]`(at, ..)`, `at` being its
//! receive (or capture) time, and takes every [`Monitor::poll_event`]
//! after each batch.

use std::collections::VecDeque;

use super::Error;
use super::analyzer::{Analyzer, FrameReport, Observation};
use super::inspect::{self, NotVideo, RasterSeen, SizeMismatch};
use super::model::{Model, Scan};
use crate::stats::SeqExtender;
use crate::units::{ByteSize, ExtSeq, MediaTime, Nanos, Ssrc};
use crate::video::{FrameRate, PixelFormat};

/// Packets held back while learning Npackets: two frames of an 8K 4:2:2
/// 10-bit stream in 1200-byte packets (about 2 × 140 000) and more.
pub const MAX_LEARN: usize = 1 << 19;

/// Datagrams that are not video, with none that is, before a stream is
/// refused: a few strays before the video starts are not a refusal.
pub const REFUSE_AFTER: u64 = 16;

/// What is known of a stream before its packets arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamShape {
    /// Frames (fields if interlaced) per second.
    pub rate: FrameRate,
    /// Lines of the raster.
    pub lines: u32,
    /// Pixels of a line, if given (to check the packets against).
    pub width: Option<u32>,
    /// The pixel format, if given (a segment's length then gives its
    /// pixels).
    pub format: Option<PixelFormat>,
    /// Progressive or interlaced.
    pub scan: Scan,
    /// Npackets, if known (else learned from the stream).
    pub packets: Option<u32>,
    /// A signalled TRoffset (else TROdefault).
    pub tr_offset: Option<Nanos>,
    /// A signalled UDP size limit (`MAXUDP`); else the standard one, or
    /// the extended one when a datagram held while learning Npackets is
    /// larger than the standard allows.
    pub max_udp: Option<u32>,
}

impl StreamShape {
    /// The model of `packets` packets a frame, whose largest datagram
    /// seen so far was `largest` bytes (0: none seen).
    fn model(&self, packets: u32, largest: usize) -> Result<Model, Error> {
        let m = Model::new(self.rate, self.lines, self.scan, packets)?;
        let m = match self.max_udp {
            Some(b) => m.with_max_udp(b)?,
            None => m.for_datagrams(largest)?,
        };
        match self.tr_offset {
            Some(t) => m.with_tr_offset(t),
            None => Ok(m),
        }
    }
}

/// What the monitor has to say, in order.
#[derive(Debug, Clone)]
pub enum Event {
    /// The stream's first packet: the SSRC it locked on.
    Stream {
        /// The SSRC.
        ssrc: Ssrc,
    },
    /// The model judged by, once Npackets is known.
    Model(Model),
    /// A frame ended.
    Frame(FrameReport),
    /// No model could be built (the reason); nothing more is analysed.
    Failed(LearnError),
}

/// Why no model could be built, or the stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    /// The stream is not RFC 4175 video: what its first datagram was.
    #[error(
        "this is not RFC 4175 video: {0}; analyze judges uncompressed ST 2110-20 video only (pick another stream with --port or --sdp)"
    )]
    NotVideo(NotVideo),
    /// No two frame starts within [`MAX_LEARN`] packets.
    #[error(
        "no two frame starts (RTP timestamp changes) in the first {MAX_LEARN} packets; give the packets per frame"
    )]
    NoFrames,
    /// The learned or given values make no model.
    #[error("{0}")]
    Model(Error),
}

/// Datagrams seen that were not analysed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MonitorStats {
    /// Datagrams offered.
    pub datagrams: u64,
    /// Not RTP version 2.
    pub not_rtp: u64,
    /// RTP, but not RFC 4175 video (see [`inspect::payload`]).
    pub not_video: u64,
    /// Of another SSRC than the stream's.
    pub foreign: u64,
}

enum Phase {
    /// Holding packets back; the sequence numbers of the frame starts.
    Learning {
        held: Vec<Observation>,
        starts: Vec<ExtSeq>,
    },
    Analyzing(Box<Analyzer>),
    Failed,
}

/// The machine (see the module docs).
pub struct Monitor {
    shape: StreamShape,
    /// The stream's SSRC: the first packet's (a capture or a port holds
    /// one stream; strays of another SSRC are counted, not analysed).
    ssrc: Option<Ssrc>,
    ext: SeqExtender,
    last_rtp: Option<MediaTime>,
    phase: Phase,
    events: VecDeque<Event>,
    stats: MonitorStats,
    /// Video datagrams taken.
    video: u64,
    /// The first refusal, while no datagram was video.
    first_refusal: Option<NotVideo>,
    raster: RasterSeen,
    /// Marker bits seen: two make a whole frame between them.
    markers: u64,
}

impl Monitor {
    /// A monitor of a stream of `shape`.
    pub fn new(shape: StreamShape) -> Monitor {
        let mut m = Monitor {
            shape,
            ssrc: None,
            ext: SeqExtender::default(),
            last_rtp: None,
            phase: Phase::Learning {
                held: Vec::new(),
                starts: Vec::new(),
            },
            events: VecDeque::new(),
            stats: MonitorStats::default(),
            video: 0,
            first_refusal: None,
            raster: RasterSeen::default(),
            markers: 0,
        };
        if let Some(n) = shape.packets {
            m.start(n, Vec::new());
        }
        m
    }

    /// One datagram that arrived at `at` (nanoseconds since the epoch the
    /// stream's RTP timestamps count from: PTP's, or the Unix epoch).
    pub fn handle_input(&mut self, at: Nanos, bytes: &[u8]) {
        self.stats.datagrams += 1;
        let pkt = match inspect::rtp(bytes) {
            Ok(p) => p,
            Err(e) => return self.refuse(e),
        };
        let view = match inspect::payload(pkt.payload_type(), pkt.payload()) {
            Ok(v) => v,
            Err(e) => return self.refuse(e),
        };
        let ssrc = Ssrc(pkt.ssrc());
        match self.ssrc {
            Some(s) if s != ssrc => {
                self.stats.foreign += 1;
                return;
            }
            Some(_) => {}
            None => {
                self.ssrc = Some(ssrc);
                self.events.push_back(Event::Stream { ssrc });
            }
        }
        self.video += 1;
        self.raster.record(&view, self.shape.format);
        self.markers += u64::from(pkt.marker());
        // RFC 4175's extended sequence number leads the payload.
        let seq = ExtSeq(self.ext.extend(pkt.sequence_number(), Some(view.esn)));
        let rtp = MediaTime(pkt.timestamp());
        let new_frame = self.last_rtp.is_some_and(|r| r != rtp);
        self.last_rtp = Some(rtp);
        let obs = Observation {
            arrival: at,
            rtp_timestamp: rtp,
            marker: pkt.marker(),
            seq,
            len: ByteSize(bytes.len() as u64),
        };
        self.observe(obs, new_frame);
    }

    /// Counts a datagram that is not video; refuses the stream when none
    /// of the first [`REFUSE_AFTER`] was.
    fn refuse(&mut self, why: NotVideo) {
        match why {
            NotVideo::NotRtp(_) | NotVideo::TsOverUdp { .. } => self.stats.not_rtp += 1,
            _ => self.stats.not_video += 1,
        }
        if self.video > 0 || matches!(self.phase, Phase::Failed) {
            return;
        }
        let first = *self.first_refusal.get_or_insert(why);
        if self.stats.not_rtp + self.stats.not_video >= REFUSE_AFTER {
            self.fail(LearnError::NotVideo(first));
        }
    }

    fn observe(&mut self, obs: Observation, new_frame: bool) {
        match &mut self.phase {
            Phase::Analyzing(a) => {
                a.handle_input(obs);
                while let Some(r) = a.poll_event() {
                    self.events.push_back(Event::Frame(r));
                }
            }
            Phase::Learning { held, starts } => {
                held.push(obs);
                if new_frame {
                    starts.push(obs.seq);
                }
                if let [first, second] = starts[..] {
                    let packets = second.0.saturating_sub(first.0);
                    let packets = u32::try_from(packets).unwrap_or(u32::MAX);
                    let held = std::mem::take(held);
                    self.start(packets, held);
                } else if held.len() >= MAX_LEARN {
                    self.fail(LearnError::NoFrames);
                }
            }
            Phase::Failed => {}
        }
    }

    /// Builds the model for `packets` and replays `held` into it.
    fn start(&mut self, packets: u32, held: Vec<Observation>) {
        let largest = held.iter().map(|o| o.len.bytes()).max().unwrap_or(0);
        let largest = usize::try_from(largest).unwrap_or(usize::MAX);
        let model = match self.shape.model(packets, largest) {
            Ok(m) => m,
            Err(e) => return self.fail(LearnError::Model(e)),
        };
        self.events.push_back(Event::Model(model));
        self.phase = Phase::Analyzing(Box::new(Analyzer::new(model)));
        for obs in held {
            self.observe(obs, false);
        }
    }

    fn fail(&mut self, e: LearnError) {
        self.phase = Phase::Failed;
        self.events.push_back(Event::Failed(e));
    }

    /// Ends the frame in progress (end of capture or of the run); a
    /// stream of nothing but datagrams that are not video is refused now.
    pub fn flush(&mut self) {
        if let (0, Some(first)) = (self.video, self.first_refusal)
            && !matches!(self.phase, Phase::Failed)
        {
            self.fail(LearnError::NotVideo(first));
        }
        if let Phase::Analyzing(a) = &mut self.phase {
            a.flush();
            while let Some(r) = a.poll_event() {
                self.events.push_back(Event::Frame(r));
            }
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The analyser, once the model is known.
    pub fn analyzer(&self) -> Option<&Analyzer> {
        match &self.phase {
            Phase::Analyzing(a) => Some(a),
            _ => None,
        }
    }

    /// The raster the video packets' headers describe.
    pub const fn raster(&self) -> RasterSeen {
        self.raster
    }

    /// How the packets disagree with the size given, if they do (a
    /// raster not filled counts once two marker bits bound a whole frame).
    pub fn size_mismatch(&self) -> Option<SizeMismatch> {
        let s = &self.shape;
        self.raster.check(s.width, s.lines, self.markers >= 2)
    }

    /// Datagrams not analysed.
    pub const fn stats(&self) -> MonitorStats {
        self.stats
    }

    /// The shape given.
    pub const fn shape(&self) -> &StreamShape {
        &self.shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtp::RtpHeader;

    fn shape(packets: Option<u32>) -> StreamShape {
        StreamShape {
            rate: FrameRate::new(50, 1).unwrap(),
            lines: 1080,
            width: None,
            format: None,
            scan: Scan::Progressive,
            packets,
            tr_offset: Some(Nanos::from_millis(1)),
            max_udp: None,
        }
    }

    /// An RFC 4175 packet: ESN 0, one 20-byte segment at the start of
    /// line `seq % 10`, its samples.
    fn datagram(seq: u16, ts: u32, marker: bool, ssrc: u32) -> Vec<u8> {
        let mut b = vec![0u8; 12];
        RtpHeader {
            marker,
            payload_type: 96,
            sequence_number: seq,
            timestamp: ts,
            ssrc,
        }
        .write(&mut b)
        .unwrap();
        b.extend_from_slice(&[0, 0, 0, 20, 0, (seq % 10) as u8, 0, 0]);
        b.resize(b.len() + 20, 0);
        b
    }

    /// Frames of 10 packets at 50 fps from epoch frame 100, each packet
    /// 20 µs from 1 ms into its frame (gapped TRS of 10 packets).
    fn feed(m: &mut Monitor, frames: u64, skip_first: usize) {
        let mut k = 0u16;
        for f in 100..100 + frames {
            let ts = FrameRate::new(50, 1).unwrap().rtp_timestamp(f);
            for j in 0..10u64 {
                if (f - 100) * 10 + j < skip_first as u64 {
                    k += 1;
                    continue;
                }
                let at = Nanos(f * 20_000_000 + 1_000_000 + j * 1_920_000);
                m.handle_input(at, &datagram(k, ts, j == 9, 7));
                k = k.wrapping_add(1);
            }
        }
    }

    #[test]
    fn a_judge_without_maxudp_assumes_the_extended_limit_for_larger_datagrams() {
        let s = shape(Some(1080));
        // Within the standard limit: 720 packets of 1500 bytes.
        assert_eq!(s.model(1080, 1460).unwrap().limits().vrx_full_w, 720);
        assert_eq!(s.model(1080, 0).unwrap().max_udp(), None);
        // Above it: the extended limit is in use, 120 packets of 8960
        // (the rate term, INT(1080 · 50 / 300) = 180, is larger).
        let jumbo = s.model(1080, 8800).unwrap();
        assert_eq!(jumbo.max_udp(), Some(8960));
        assert_eq!(jumbo.limits().vrx_full_w, 180);
        // A declared MAXUDP wins over what was seen.
        let declared = StreamShape {
            max_udp: Some(9000),
            ..s
        };
        assert_eq!(declared.model(1080, 1200).unwrap().max_udp(), Some(9000));
    }

    #[test]
    fn learns_npackets_from_two_frame_starts_and_replays() {
        let mut m = Monitor::new(shape(None));
        // Start mid-frame: the first 3 packets were not captured.
        feed(&mut m, 5, 3);
        m.handle_input(Nanos(1), b"junk");
        m.handle_input(Nanos(2), &datagram(0, 0, false, 8));
        m.flush();
        let ev: Vec<Event> = std::iter::from_fn(|| m.poll_event()).collect();
        assert!(matches!(ev[0], Event::Stream { ssrc: Ssrc(7) }));
        let Event::Model(model) = &ev[1] else {
            panic!("{ev:?}")
        };
        assert_eq!(model.packets(), 10);
        let frames: Vec<&FrameReport> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Frame(r) => Some(r),
                _ => None,
            })
            .collect();
        // The partial first frame is not judged; the other four are.
        assert_eq!(frames.len(), 4);
        assert!(frames.iter().all(|r| r.packets == 10 && r.complete));
        assert_eq!(frames[0].epoch_frame, 101);
        assert_eq!(frames[0].fpt, Nanos::from_millis(1));
        let s = m.stats();
        assert_eq!((s.datagrams, s.not_rtp, s.foreign), (49, 1, 1));
    }

    #[test]
    fn a_given_npackets_analyses_from_the_first_packet() {
        let mut m = Monitor::new(shape(Some(10)));
        assert!(matches!(m.poll_event(), Some(Event::Model(_))));
        feed(&mut m, 2, 0);
        assert!(matches!(m.poll_event(), Some(Event::Stream { .. })));
        // Frame 100 ends at its marker; nothing before it was a boundary,
        // so it is not judged; frame 101 is.
        let r = std::iter::from_fn(|| m.poll_event()).count();
        assert_eq!(r, 1);
        assert_eq!(m.analyzer().unwrap().summary().packets, 20);
    }

    #[test]
    fn mpeg_ts_is_refused_with_what_it_is_and_never_analysed() {
        use super::super::inspect::NotVideo;
        // RTP MP2T: 7 TS packets a datagram, payload type 33.
        let ts_rtp = |seq: u16| {
            let mut b = vec![0u8; 12];
            RtpHeader {
                marker: false,
                payload_type: 33,
                sequence_number: seq,
                timestamp: u32::from(seq) * 90,
                ssrc: 5,
            }
            .write(&mut b)
            .unwrap();
            for _ in 0..7 {
                b.push(0x47);
                b.resize(b.len() + 187, 0x10);
            }
            b
        };
        for given in [None, Some(960)] {
            let mut m = Monitor::new(shape(given));
            for k in 0..REFUSE_AFTER as u16 + 150 {
                m.handle_input(Nanos(u64::from(k) * 1_000), &ts_rtp(k));
            }
            m.flush();
            let failed: Vec<LearnError> = std::iter::from_fn(|| m.poll_event())
                .filter_map(|e| match e {
                    Event::Failed(e) => Some(e),
                    Event::Frame(_) => panic!("a TS stream was judged"),
                    _ => None,
                })
                .collect();
            let refusal = LearnError::NotVideo(NotVideo::TsOverRtp {
                payload_type: 33,
                packets: 7,
            });
            assert_eq!(failed, [refusal]);
            assert!(refusal.to_string().starts_with(
                "this is not RFC 4175 video: MPEG-TS in RTP (RFC 2250): payload type 33, 7 × 188-byte packets"
            ));
            assert_eq!(m.stats().not_video, REFUSE_AFTER + 150);
            // No sequence numbers were read from TS bytes.
            assert!(m.analyzer().is_none_or(|a| a.summary().packets == 0));
        }
        // A short capture of it is refused at the end.
        let mut m = Monitor::new(shape(None));
        m.handle_input(Nanos(1), &ts_rtp(0));
        m.flush();
        assert!(matches!(
            m.poll_event(),
            Some(Event::Failed(LearnError::NotVideo(_)))
        ));
    }

    #[test]
    fn strays_before_the_video_are_counted_not_refused() {
        let mut m = Monitor::new(shape(None));
        for k in 0..REFUSE_AFTER - 1 {
            m.handle_input(Nanos(k), b"not a datagram of video at all");
        }
        feed(&mut m, 3, 0);
        m.flush();
        assert!(std::iter::from_fn(|| m.poll_event()).all(|e| !matches!(e, Event::Failed(_))));
        assert_eq!(m.stats().not_rtp, REFUSE_AFTER - 1);
        assert!(m.analyzer().is_some_and(|a| a.summary().frames == 2));
        // Its packets carry lines 0..=9: not the 1080 given.
        let bad = m.size_mismatch().expect("10 lines are not 1080");
        assert_eq!(bad.seen.lines, Some(10));
    }

    #[test]
    fn a_stream_without_frame_starts_gives_up_bounded() {
        let mut m = Monitor::new(shape(None));
        for k in 0..MAX_LEARN + 10 {
            m.handle_input(Nanos(k as u64), &datagram(k as u16, 5, false, 1));
        }
        let ev: Vec<Event> = std::iter::from_fn(|| m.poll_event()).collect();
        assert!(matches!(
            ev.last(),
            Some(Event::Failed(LearnError::NoFrames))
        ));
        assert!(m.analyzer().is_none());
        let mut m = Monitor::new(shape(Some(0)));
        assert!(matches!(
            m.poll_event(),
            Some(Event::Failed(LearnError::Model(Error::Packets {
                packets: 0
            })))
        ));
    }
}
