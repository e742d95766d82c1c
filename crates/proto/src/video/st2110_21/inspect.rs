//! What a stream's datagrams say about themselves before any timing is
//! judged: whether they are RFC 4175 video at all ([`rtp`], then
//! [`payload`]), and the
//! raster their sample row headers describe ([`RasterSeen`]), held
//! against the size the analysis was given ([`RasterSeen::check`]).
//!
//! A capture of something else (MPEG-TS, compressed video, a stray
//! stream) must be refused with what it is, not judged: its "sequence
//! numbers" read from the payload make millions of losses, and its
//! "frames" make a verdict about nothing.

use std::fmt;

use crate::mpegts::{PACKET_LEN as TS_PACKET_LEN, SYNC_BYTE};
use crate::rtp::{self, RtpPacket};
use crate::video::format::PixelFormat;
use crate::video::st2110_20::{ESN_LEN, PayloadView, SRD_LEN};

/// The lowest dynamic RTP payload type; RFC 4175 video always uses one.
pub const FIRST_DYNAMIC_PAYLOAD_TYPE: u8 = 96;

/// Why a datagram is not RFC 4175 video.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotVideo {
    /// No RTP header: 188-byte MPEG-TS packets straight in UDP.
    #[error("MPEG-TS over plain UDP ({packets} × 188-byte packets starting 0x47, no RTP header)")]
    TsOverUdp {
        /// TS packets in the datagram.
        packets: usize,
    },
    /// RTP carrying MPEG-TS (RFC 2250).
    #[error(
        "MPEG-TS in RTP (RFC 2250): payload type {payload_type}, {packets} × 188-byte packets starting 0x47"
    )]
    TsOverRtp {
        /// The RTP payload type.
        payload_type: u8,
        /// TS packets in the payload.
        packets: usize,
    },
    /// Not an RTP packet at all.
    #[error("not RTP: {0}")]
    NotRtp(rtp::Error),
    /// A static payload type (RFC 3551): an audio or video codec of its
    /// own, while RFC 4175 video always takes a dynamic type.
    #[error(
        "RTP payload type {0} is a static type (RFC 3551); RFC 4175 video uses a dynamic one (96-127)"
    )]
    StaticPayloadType(u8),
    /// Too short for the payload header: ESN and one sample row header.
    #[error("a {len}-byte RTP payload is too short for RFC 4175's 8-byte header (ESN and one SRD)")]
    Short {
        /// Payload bytes.
        len: usize,
    },
    /// The sample row headers' continuation bits run past the payload.
    #[error("its RFC 4175 sample row headers run past the end of the payload")]
    Unterminated,
    /// A sample row header of zero bytes.
    #[error("an RFC 4175 sample row header of 0 bytes")]
    EmptySegment,
    /// The sample row headers announce more data than the payload holds.
    #[error(
        "its RFC 4175 sample row headers announce {announced} bytes of samples, the payload holds {data}"
    )]
    Overrun {
        /// Sum of the headers' lengths.
        announced: usize,
        /// Sample bytes present.
        data: usize,
    },
}

/// MPEG-TS packets in `b`, if it is nothing but whole ones.
fn ts_packets(b: &[u8]) -> Option<usize> {
    let whole = !b.is_empty() && b.len() % TS_PACKET_LEN == 0;
    let synced = b.chunks(TS_PACKET_LEN).all(|p| p[0] == SYNC_BYTE);
    (whole && synced).then_some(b.len() / TS_PACKET_LEN)
}

/// `datagram` as an RTP packet, or what it is instead (MPEG-TS straight
/// in UDP, or no RTP version 2 header).
pub fn rtp(datagram: &[u8]) -> Result<RtpPacket<&[u8]>, NotVideo> {
    RtpPacket::new_checked(datagram).map_err(|e| match ts_packets(datagram) {
        Some(packets) => NotVideo::TsOverUdp { packets },
        None => NotVideo::NotRtp(e),
    })
}

/// The RFC 4175 payload headers of an RTP payload of `payload_type`, or
/// why it is not RFC 4175 video: an MPEG-TS payload, a static payload
/// type, or sample row headers that are missing, unterminated, empty or
/// announce more data than carried.
pub fn payload(payload_type: u8, payload: &[u8]) -> Result<PayloadView<'_>, NotVideo> {
    if let Some(packets) = ts_packets(payload) {
        return Err(NotVideo::TsOverRtp {
            payload_type,
            packets,
        });
    }
    if payload_type < FIRST_DYNAMIC_PAYLOAD_TYPE {
        return Err(NotVideo::StaticPayloadType(payload_type));
    }
    let view = PayloadView::parse(payload).map_err(|_| {
        if payload.len() < ESN_LEN + SRD_LEN {
            NotVideo::Short { len: payload.len() }
        } else {
            NotVideo::Unterminated
        }
    })?;
    let mut announced = 0usize;
    for (srd, _) in view.srds() {
        if srd.length == 0 {
            return Err(NotVideo::EmptySegment);
        }
        announced += usize::from(srd.length);
    }
    let data = view.data().len();
    if announced > data {
        return Err(NotVideo::Overrun { announced, data });
    }
    Ok(view)
}

/// The raster a stream's sample row headers describe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RasterSeen {
    /// Highest line number + 1, once a header was seen.
    pub lines: Option<u32>,
    /// Highest pixel offset of a segment's first pixel.
    pub max_offset: u32,
    /// Pixels of the widest line (offset plus the segment's pixels), when
    /// the pixel format is known.
    pub width: Option<u32>,
    /// A header had the field bit set (interlaced: lines count per field).
    pub fields: bool,
}

/// The size a stream was analysed with, and what its packets describe
/// instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeMismatch {
    /// Width given, if any.
    pub given_width: Option<u32>,
    /// Lines given.
    pub given_lines: u32,
    /// What the packets describe.
    pub seen: RasterSeen,
}

impl RasterSeen {
    /// Takes the sample row headers of one packet; with `format`, a
    /// segment's length gives its pixels.
    pub fn record(&mut self, view: &PayloadView<'_>, format: Option<PixelFormat>) {
        for (srd, field) in view.srds() {
            let line = u32::from(srd.line) + 1;
            self.lines = Some(self.lines.map_or(line, |l| l.max(line)));
            let offset = u32::from(srd.offset);
            self.max_offset = self.max_offset.max(offset);
            self.fields |= field;
            if let Some(f) = format {
                let groups = usize::from(srd.length) / f.pgroup_bytes();
                let end = offset.saturating_add((groups * f.pgroup_pixels()) as u32);
                self.width = Some(self.width.map_or(end, |w| w.max(end)));
            }
        }
    }

    /// Whether the packets fit a `width`×`lines` raster. Packets beyond it
    /// always disagree; a raster they never fill disagrees only once
    /// `whole_frame` (a whole frame has passed, so its last line and the
    /// end of its lines were due) and not for interlaced fields, whose
    /// line numbers count a field's lines.
    pub fn check(&self, width: Option<u32>, lines: u32, whole_frame: bool) -> Option<SizeMismatch> {
        let seen_lines = self.lines?;
        let fill = whole_frame && !self.fields;
        let beyond = seen_lines > lines
            || width.is_some_and(|w| self.max_offset >= w || self.width.is_some_and(|s| s > w));
        let short =
            fill && (seen_lines < lines || width.zip(self.width).is_some_and(|(w, s)| s < w));
        (beyond || short).then_some(SizeMismatch {
            given_width: width,
            given_lines: lines,
            seen: *self,
        })
    }
}

impl fmt::Display for SizeMismatch {
    /// `the packets carry lines 0..=719 and pixels up to 1280 in a line,
    /// not the 1920x1080 given: the stream is most likely 1280x720`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = self.seen.lines.unwrap_or(0);
        write!(f, "the packets carry lines 0..={}", lines.saturating_sub(1))?;
        match self.seen.width {
            Some(w) => write!(f, " and {w} pixels a line")?,
            None => write!(f, " and pixel offsets up to {}", self.seen.max_offset)?,
        }
        let given = match self.given_width {
            Some(w) => format!("{w}x{}", self.given_lines),
            None => format!("{} lines", self.given_lines),
        };
        write!(f, ", not the {given} given")?;
        if let Some(w) = self.seen.width {
            write!(f, ": the stream is most likely {w}x{lines}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtp::RtpHeader;

    fn datagram(payload_type: u8, body: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 12];
        RtpHeader {
            marker: false,
            payload_type,
            sequence_number: 1,
            timestamp: 2,
            ssrc: 3,
        }
        .write(&mut b)
        .unwrap();
        b.extend_from_slice(body);
        b
    }

    /// ESN, then SRDs of (length, line, offset), then `data` bytes.
    fn video(srds: &[(u16, u16, u16)], data: usize) -> Vec<u8> {
        let mut p = vec![0, 0];
        for (k, (len, line, offset)) in srds.iter().enumerate() {
            let more = if k + 1 < srds.len() { 0x8000 } else { 0 };
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&line.to_be_bytes());
            p.extend_from_slice(&(offset | more).to_be_bytes());
        }
        p.resize(p.len() + data, 0);
        datagram(96, &p)
    }

    fn ts(n: usize) -> Vec<u8> {
        let mut b = vec![0xffu8; 188 * n];
        b.chunks_mut(188).for_each(|p| p[0] = 0x47);
        b
    }

    /// Both checks, as the monitor makes them.
    fn inspect(d: &[u8]) -> Result<usize, NotVideo> {
        let pkt = rtp(d)?;
        payload(pkt.payload_type(), pkt.payload()).map(|v| v.srds().count())
    }

    fn raster(r: &mut RasterSeen, d: &[u8], format: Option<PixelFormat>) {
        let pkt = rtp(d).unwrap();
        r.record(&payload(96, pkt.payload()).unwrap(), format);
    }

    #[test]
    fn what_is_not_video_says_what_it_is() {
        let refuse = |d: &[u8]| inspect(d).err();
        assert_eq!(refuse(&ts(7)), Some(NotVideo::TsOverUdp { packets: 7 }));
        assert_eq!(
            refuse(&datagram(33, &ts(7))),
            Some(NotVideo::TsOverRtp {
                payload_type: 33,
                packets: 7
            })
        );
        assert_eq!(
            refuse(&datagram(33, &ts(7))).unwrap().to_string(),
            "MPEG-TS in RTP (RFC 2250): payload type 33, 7 × 188-byte packets starting 0x47"
        );
        assert_eq!(
            refuse(&datagram(0, &[1; 40])),
            Some(NotVideo::StaticPayloadType(0))
        );
        assert_eq!(
            refuse(&datagram(96, &[0; 5])),
            Some(NotVideo::Short { len: 5 })
        );
        assert!(matches!(
            refuse(&[0x40; 30]),
            Some(NotVideo::NotRtp(rtp::Error::Version(1)))
        ));
        // Every header says "another follows".
        assert_eq!(
            refuse(&datagram(96, &[0, 0, 0, 4, 0, 0, 0x80, 0])),
            Some(NotVideo::Unterminated)
        );
        assert_eq!(
            refuse(&video(&[(0, 3, 0)], 10)),
            Some(NotVideo::EmptySegment)
        );
        assert_eq!(
            refuse(&video(&[(8, 3, 0), (8, 4, 0)], 10)),
            Some(NotVideo::Overrun {
                announced: 16,
                data: 10
            })
        );
        assert_eq!(inspect(&video(&[(8, 3, 0), (8, 4, 0)], 16)), Ok(2));
    }

    #[test]
    fn the_raster_seen_is_held_to_the_size_given() {
        // 1280x720 4:2:2 8-bit: 2560 bytes a line; a packet ends line 719
        // and one starts it at pixel 640.
        let mut r = RasterSeen::default();
        let a = video(&[(1280, 718, 640), (1280, 719, 0)], 2560);
        let b = video(&[(1280, 719, 640)], 1280);
        for d in [&a, &b] {
            raster(&mut r, d, Some(PixelFormat::Uyvy422));
        }
        assert_eq!(
            (r.lines, r.max_offset, r.width),
            (Some(720), 640, Some(1280))
        );
        assert_eq!(r.check(Some(1280), 720, true), None);
        let m = r.check(Some(1920), 1080, true).unwrap();
        assert_eq!(
            m.to_string(),
            "the packets carry lines 0..=719 and 1280 pixels a line, not the 1920x1080 given: the stream is most likely 1280x720"
        );
        // Before a whole frame, a raster not yet filled is no evidence...
        assert_eq!(r.check(Some(1920), 1080, false), None);
        // ...but packets beyond the raster are.
        let m = r.check(Some(640), 480, false).unwrap();
        assert_eq!(m.given_lines, 480);
        // Without the pixel format, offsets and lines still tell.
        let mut r = RasterSeen::default();
        raster(&mut r, &b, None);
        assert_eq!(
            r.check(None, 1080, true).unwrap().to_string(),
            "the packets carry lines 0..=719 and pixel offsets up to 640, not the 1080 lines given"
        );
        assert_eq!(
            r.check(Some(640), 720, true).map(|m| m.seen.max_offset),
            Some(640)
        );
    }
}
