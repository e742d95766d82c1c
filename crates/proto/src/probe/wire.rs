//! The probe's datagrams: test-stream packets (RTP with a probe header)
//! and echo datagrams (RTT probes and the reverse-mode opener).
//!
//! The parsers take bytes straight from the network and never panic or
//! allocate; they are fuzz entry points ([`Datagram::parse`]). Each writer
//! sits next to its parser: [`DataHeader::write`] for one packet,
//! [`DataTrain::write`] for the headers of a whole train as the sender
//! lays them over its packet buffers.

use crate::probe::error::Error;
use crate::probe::params::Schedule;
use crate::rtp::{HEADER_LEN, RtpHeader, RtpPacket};
use crate::units::{MediaTime, Nanos};

/// Version of the probe wire protocol (datagrams and control messages).
///
/// 2: the reports' percentile summaries became [`crate::stats::Quantiles`]
/// (with `count`, `min` and `mean`), and the pacing error became lateness.
/// 3: the receiver sends live interval messages while the stream runs,
/// and intervals carry their end.
/// 4: `bidir` tests (both ends send at once); an older server would
/// ignore the flag and run a one-way test, so the version says it.
pub const PROTOCOL_VERSION: u32 = 4;

/// RTP payload type of the test stream (dynamic range).
pub const PAYLOAD_TYPE: u8 = 98;

/// Magic after the RTP header of a test-stream packet.
pub const DATA_MAGIC: [u8; 4] = *b"NGPD";
/// Magic at the start of an echo / open datagram. Its first byte makes the
/// RTP version field read 1, so RTP-aware tools (and `nagare impair`'s
/// scripted actions) never take an echo for part of the stream.
pub const ECHO_MAGIC: [u8; 4] = *b"NGPE";

/// Bytes of a test-stream packet before its filler: RTP header, magic,
/// version, flags, session id, sequence number, send time.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 4 + 1 + 3 + 8 + 8 + 8;
/// Bytes of an echo datagram.
pub const ECHO_LEN: usize = 4 + 1 + 1 + 2 + 8 + 8 + 8;

/// One parsed datagram of a probe test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram {
    /// A test-stream packet.
    Data(DataHeader),
    /// An echo request, echo reply or open datagram.
    Echo(Echo),
}

impl Datagram {
    /// Parses any probe datagram; everything else is an error, which the
    /// receiver counts as a stranger.
    pub fn parse(buf: &[u8]) -> Result<Datagram, Error> {
        if buf.len() >= 4 && buf[..4] == ECHO_MAGIC {
            Echo::parse(buf).map(Datagram::Echo)
        } else {
            DataHeader::parse(buf).map(Datagram::Data)
        }
    }
}

/// The fields of a test-stream packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Per-test session id, chosen by the server.
    pub session: u64,
    /// Sequence number, from 0; its low 16 bits are the RTP sequence number.
    pub seq: u64,
    /// Send time on the sender's schedule (zero at its first packet).
    pub sent_at: Nanos,
    /// Last packet of a frame (RTP marker).
    pub marker: bool,
}

impl DataHeader {
    /// Writes the header into the front of `buf` (the rest is filler the
    /// caller leaves as it is). Returns the header length.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.len() < DATA_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: DATA_HEADER_LEN,
            });
        }
        RtpHeader {
            marker: self.marker,
            payload_type: PAYLOAD_TYPE,
            sequence_number: self.seq as u16,
            // 90 kHz media clock derived from the send time, so RTP tools
            // see a sensible timestamp (it wraps, as RTP timestamps do).
            timestamp: MediaTime::nanos_to_ticks(self.sent_at) as u32,
            ssrc: self.session as u32,
        }
        .write(buf)
        .map_err(|_| Error::BufferTooSmall {
            needed: DATA_HEADER_LEN,
        })?;
        let b = &mut buf[HEADER_LEN..DATA_HEADER_LEN];
        b[..4].copy_from_slice(&DATA_MAGIC);
        b[4] = PROTOCOL_VERSION as u8;
        b[5..8].fill(0);
        b[8..16].copy_from_slice(&self.session.to_be_bytes());
        b[16..24].copy_from_slice(&self.seq.to_be_bytes());
        b[24..32].copy_from_slice(&self.sent_at.as_nanos().to_be_bytes());
        Ok(DATA_HEADER_LEN)
    }

    /// Parses a test-stream packet.
    pub fn parse(buf: &[u8]) -> Result<DataHeader, Error> {
        // Not RTP at all is not a probe packet either.
        let rtp = RtpPacket::new_checked(buf).map_err(|_| Error::NotProbe)?;
        if rtp.payload_type() != PAYLOAD_TYPE {
            return Err(Error::NotProbe);
        }
        let p = rtp.payload();
        if p.len() < DATA_HEADER_LEN - HEADER_LEN {
            return Err(Error::Truncated {
                needed: DATA_HEADER_LEN,
                got: buf.len(),
            });
        }
        if p[..4] != DATA_MAGIC {
            return Err(Error::NotProbe);
        }
        check_version(p[4])?;
        Ok(DataHeader {
            session: be64(&p[8..16]),
            seq: be64(&p[16..24]),
            sent_at: Nanos(be64(&p[24..32])),
            marker: rtp.marker(),
        })
    }
}

/// One train of a test stream: which packets it carries, so that
/// [`DataTrain::write`] can lay every packet's header out. Made from the
/// schedule's train by `StreamPlan::train`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataTrain {
    /// The session id of the stream the train belongs to.
    pub session: u64,
    /// Sequence number of the train's first packet.
    pub first: u64,
    /// Packets in the train.
    pub count: usize,
    /// When the train leaves, on the sender's schedule (every packet of a
    /// train carries the same time: they leave in one send call).
    pub sent_at: Nanos,
}

impl DataTrain {
    /// The header of the train's packet `j`: its sequence number, and
    /// the RTP marker where `schedule` ends a (possibly virtual) frame.
    pub fn header(&self, j: usize, schedule: &Schedule) -> DataHeader {
        let seq = self.first.wrapping_add(j as u64);
        DataHeader {
            session: self.session,
            seq,
            sent_at: self.sent_at,
            marker: schedule.ends_frame(seq),
        }
    }

    /// Writes the header of each of the train's packets over the front of
    /// `bufs`, cut into consecutive `packet_size`-byte packets (the filler
    /// behind each header stays as it is). Refuses, writing nothing, when
    /// a packet cannot hold the header or `bufs` the train.
    pub fn write(
        &self,
        bufs: &mut [u8],
        packet_size: usize,
        schedule: &Schedule,
    ) -> Result<(), Error> {
        let needed = packet_size
            .checked_mul(self.count)
            .ok_or(Error::BufferTooSmall { needed: usize::MAX })?;
        if packet_size < DATA_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: DATA_HEADER_LEN,
            });
        }
        if bufs.len() < needed {
            return Err(Error::BufferTooSmall { needed });
        }
        for (j, buf) in bufs.chunks_mut(packet_size).take(self.count).enumerate() {
            self.header(j, schedule).write(buf)?;
        }
        Ok(())
    }
}

fn check_version(v: u8) -> Result<(), Error> {
    if u32::from(v) == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(Error::Version {
            got: u32::from(v),
            want: PROTOCOL_VERSION,
        })
    }
}

pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Fills a test-stream packet's buffer with filler that compresses badly,
/// so no link compression flatters the measurement; the header goes over
/// its front afterwards.
pub fn fill(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
    }
}

/// What an echo datagram is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchoKind {
    /// Asks the peer to send it straight back as a reply.
    Request,
    /// The reply to a request, with the request's id and time.
    Reply,
    /// Sent by a reverse-mode client so the server learns (and checks)
    /// the address to stream to.
    Open,
}

/// An echo datagram (RTT probe, or the reverse-mode opener).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// Request, reply or open.
    pub kind: EchoKind,
    /// Session id of the test.
    pub session: u64,
    /// Id chosen by the requester.
    pub id: u64,
    /// Requester's send time, on its own clock.
    pub sent_at: Nanos,
}

impl Echo {
    /// Writes the datagram into `buf`; returns its length.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let b = buf
            .get_mut(..ECHO_LEN)
            .ok_or(Error::BufferTooSmall { needed: ECHO_LEN })?;
        b[..4].copy_from_slice(&ECHO_MAGIC);
        b[4] = PROTOCOL_VERSION as u8;
        b[5] = match self.kind {
            EchoKind::Request => 1,
            EchoKind::Reply => 2,
            EchoKind::Open => 3,
        };
        b[6..8].fill(0);
        b[8..16].copy_from_slice(&self.session.to_be_bytes());
        b[16..24].copy_from_slice(&self.id.to_be_bytes());
        b[24..32].copy_from_slice(&self.sent_at.as_nanos().to_be_bytes());
        Ok(ECHO_LEN)
    }

    /// The datagram as bytes.
    pub fn to_bytes(&self) -> [u8; ECHO_LEN] {
        let mut out = [0u8; ECHO_LEN];
        // ECHO_LEN bytes always hold an echo.
        let _ = self.write(&mut out);
        out
    }

    /// Parses an echo datagram.
    pub fn parse(buf: &[u8]) -> Result<Echo, Error> {
        if buf.len() < ECHO_LEN {
            return Err(Error::Truncated {
                needed: ECHO_LEN,
                got: buf.len(),
            });
        }
        if buf[..4] != ECHO_MAGIC {
            return Err(Error::NotProbe);
        }
        check_version(buf[4])?;
        let kind = match buf[5] {
            1 => EchoKind::Request,
            2 => EchoKind::Reply,
            3 => EchoKind::Open,
            _ => return Err(Error::NotProbe),
        };
        Ok(Echo {
            kind,
            session: be64(&buf[8..16]),
            id: be64(&buf[16..24]),
            sent_at: Nanos(be64(&buf[24..32])),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::format::FrameRate;
    use proptest::prelude::*;

    proptest! {
        /// Every packet of a written train parses back to the header the
        /// train says, the marker where the schedule ends a frame, and
        /// the filler behind each header and past the train is untouched.
        #[test]
        fn a_written_train_parses_back(
            session in any::<u64>(),
            first in any::<u64>(),
            count in 1usize..24,
            extra in 0usize..96,
            sent_at in any::<u64>(),
            ppf in 1u64..2000,
        ) {
            let schedule = Schedule {
                rate: FrameRate::new(50, 1).unwrap(),
                packets_per_frame: ppf,
                total_packets: 1 << 40,
                video_frames: false,
            };
            let size = DATA_HEADER_LEN + extra;
            let train = DataTrain { session, first, count, sent_at: Nanos(sent_at) };
            let mut bufs = vec![0u8; size * (count + 1)];
            fill(&mut bufs);
            let before = bufs.clone();
            train.write(&mut bufs, size, &schedule).unwrap();
            for (j, buf) in bufs.chunks(size).take(count).enumerate() {
                let seq = first.wrapping_add(j as u64);
                let h = DataHeader::parse(buf).unwrap();
                prop_assert_eq!(h, train.header(j, &schedule));
                prop_assert_eq!(h.session, session);
                prop_assert_eq!(h.seq, seq);
                prop_assert_eq!(h.sent_at, Nanos(sent_at));
                prop_assert_eq!(h.marker, seq % ppf == ppf - 1);
                let rtp = RtpPacket::new_checked(buf).unwrap();
                prop_assert_eq!(rtp.sequence_number(), seq as u16);
                prop_assert_eq!(&buf[DATA_HEADER_LEN..], &before[j * size + DATA_HEADER_LEN..(j + 1) * size]);
            }
            prop_assert_eq!(&bufs[count * size..], &before[count * size..]);
        }
    }

    #[test]
    fn a_train_that_does_not_fit_writes_nothing() {
        let schedule = Schedule {
            rate: FrameRate::new(50, 1).unwrap(),
            packets_per_frame: 4,
            total_packets: 100,
            video_frames: false,
        };
        let train = DataTrain {
            session: 1,
            first: 0,
            count: 3,
            sent_at: Nanos(5),
        };
        let mut bufs = vec![7u8; 3 * DATA_HEADER_LEN - 1];
        assert_eq!(
            train.write(&mut bufs, DATA_HEADER_LEN, &schedule),
            Err(Error::BufferTooSmall {
                needed: 3 * DATA_HEADER_LEN
            })
        );
        assert!(bufs.iter().all(|&b| b == 7));
        let mut bufs = vec![7u8; 300];
        assert_eq!(
            train.write(&mut bufs, DATA_HEADER_LEN - 1, &schedule),
            Err(Error::BufferTooSmall {
                needed: DATA_HEADER_LEN
            })
        );
        assert!(bufs.iter().all(|&b| b == 7));
    }

    #[test]
    fn data_round_trip_and_filler() {
        let h = DataHeader {
            session: 0xdead_beef_0000_0001,
            seq: 70_000,
            sent_at: Nanos(123_456_789),
            marker: true,
        };
        let mut buf = vec![0xaau8; 200];
        fill(&mut buf);
        let filler = buf[DATA_HEADER_LEN..].to_vec();
        assert_eq!(h.write(&mut buf).unwrap(), DATA_HEADER_LEN);
        assert_eq!(buf[DATA_HEADER_LEN..], filler[..]);
        assert_eq!(Datagram::parse(&buf).unwrap(), Datagram::Data(h));
        let rtp = RtpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(rtp.sequence_number(), 70_000u64 as u16);
        // 123.456789 ms at 90 kHz
        assert_eq!(rtp.timestamp(), 11_111);
        assert!(h.write(&mut buf[..10]).is_err());
    }

    #[test]
    fn echo_round_trip_and_strangers() {
        let e = Echo {
            kind: EchoKind::Reply,
            session: 7,
            id: 9,
            sent_at: Nanos(11),
        };
        let buf = e.to_bytes();
        assert_eq!(Datagram::parse(&buf).unwrap(), Datagram::Echo(e));
        // the echo magic is not RTP version 2
        assert!(RtpPacket::new_checked(&buf[..]).is_err());
        assert_eq!(Datagram::parse(b"hello"), Err(Error::NotProbe));
        assert!(Datagram::parse(&[0x80; 100]).is_err());
        let mut v = buf;
        v[4] = 9;
        assert_eq!(
            Datagram::parse(&v),
            Err(Error::Version {
                got: 9,
                want: PROTOCOL_VERSION
            })
        );
        v[4] = PROTOCOL_VERSION as u8;
        v[5] = 77;
        assert_eq!(Datagram::parse(&v), Err(Error::NotProbe));
    }
}
