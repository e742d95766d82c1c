//! Packet captures, pcap and pcapng as tcpdump and Wireshark write them,
//! read into the UDP datagrams they hold with their capture times: what
//! `nagare analyze` reads in place of a socket.
//!
//! Sans-IO: the caller keeps a buffer of the file's bytes and hands it to
//! [`CaptureParser::next_record`], which says how many bytes one record
//! took, or that it needs more. A record never needs more than
//! [`MAX_RECORD`] bytes, so a corrupt length cannot make the caller read
//! the whole file into memory.

mod link;

pub use link::{UdpDatagram, udp_datagram};

use pcap_file::PcapError;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};

use crate::units::Nanos;

/// Longest record (pcap packet or pcapng block) read: a 64 KiB datagram
/// with its headers and options fits many times over.
pub const MAX_RECORD: usize = 1 << 20;

/// Why a capture cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The file does not start like a pcap or pcapng file.
    #[error(
        "not a pcap or pcapng capture (the first bytes are no capture header); write one with tcpdump -w FILE"
    )]
    NotACapture,
    /// A record is malformed (the parser's reason).
    #[error("the capture is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// Where the record starts in the file.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A record claims more than [`MAX_RECORD`] bytes.
    #[error("the capture is corrupt at byte {offset}: a record longer than 1 MiB")]
    TooLarge {
        /// Where the record starts in the file.
        offset: u64,
    },
}

/// One captured frame's UDP datagram, if it held one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub at: Nanos,
    /// The datagram, or `None` for a frame that is not UDP over IP (or a
    /// block that is no packet).
    pub datagram: Option<UdpDatagram<'a>>,
}

enum Format {
    Pcap { parser: PcapParser, link: u32 },
    PcapNg(Box<PcapNgParser>),
}

/// Reads records from a capture's bytes (see the module docs).
pub struct CaptureParser {
    format: Format,
    offset: u64,
}

fn corrupt(offset: u64, e: PcapError) -> Error {
    let reason = match e {
        PcapError::InvalidField(r) => r,
        PcapError::IncompleteBuffer => "cut short",
        _ => "unreadable record",
    };
    Error::Corrupt { offset, reason }
}

/// `raw` timestamp units of a pcapng interface as nanoseconds
/// (`if_tsresol`: 10^-n or 2^-n seconds, microseconds by default).
fn pcapng_nanos(raw: u128, resolution: u8) -> Nanos {
    let n = u32::from(resolution & 0x7f);
    let ns = if resolution & 0x80 == 0 {
        match n.checked_sub(9) {
            Some(k) => raw / 10u128.saturating_pow(k),
            None => raw.saturating_mul(10u128.pow(9 - n)),
        }
    } else {
        raw.saturating_mul(1_000_000_000) >> n.min(127)
    };
    Nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

impl CaptureParser {
    /// Reads the file header from the start of `head`. `Ok(None)` means
    /// more bytes are needed; otherwise the parser and the bytes taken.
    pub fn new(head: &[u8]) -> Result<Option<(CaptureParser, usize)>, Error> {
        let magic = head
            .get(..4)
            .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        let result = match magic {
            None => return Ok(None),
            Some(0x0a0d_0d0a) => {
                PcapNgParser::new(head).map(|(rest, p)| (Format::PcapNg(Box::new(p)), rest.len()))
            }
            Some(_) => PcapParser::new(head).map(|(rest, parser)| {
                let link = u32::from(parser.header().datalink);
                (Format::Pcap { parser, link }, rest.len())
            }),
        };
        match result {
            Ok((format, rest)) => {
                let used = head.len() - rest;
                let offset = used as u64;
                Ok(Some((CaptureParser { format, offset }, used)))
            }
            Err(PcapError::IncompleteBuffer) if head.len() < MAX_RECORD => Ok(None),
            Err(_) => Err(Error::NotACapture),
        }
    }

    /// The next record at the start of `buf`: `Ok(None)` when `buf` holds
    /// only part of it (read more, or the file ends mid-record), else the
    /// record and the bytes it took.
    pub fn next_record<'a>(&mut self, buf: &'a [u8]) -> Result<Option<(Record<'a>, usize)>, Error> {
        let offset = self.offset;
        let result = match &mut self.format {
            Format::Pcap { parser, link } => parser.next_packet(buf).map(|(rest, p)| {
                let at = Nanos(u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX));
                let datagram = match p.data {
                    std::borrow::Cow::Borrowed(d) => udp_datagram(*link, d),
                    std::borrow::Cow::Owned(_) => None,
                };
                (Record { at, datagram }, rest.len())
            }),
            Format::PcapNg(parser) => match parser.next_block(buf) {
                Ok((rest, Block::EnhancedPacket(p))) => {
                    let iface = parser.packet_interface(&p);
                    let link = iface.map(|i| u32::from(i.linktype));
                    let resolution = iface.map_or(6, |i| {
                        i.options.iter().fold(6, |r, o| match o {
                            InterfaceDescriptionOption::IfTsResol(v) => *v,
                            _ => r,
                        })
                    });
                    let at = pcapng_nanos(p.timestamp.as_nanos(), resolution);
                    let datagram = match (link, p.data) {
                        (Some(l), std::borrow::Cow::Borrowed(d)) => udp_datagram(l, d),
                        _ => None,
                    };
                    Ok((Record { at, datagram }, rest.len()))
                }
                Ok((rest, _)) => Ok((
                    Record {
                        at: Nanos::ZERO,
                        datagram: None,
                    },
                    rest.len(),
                )),
                Err(e) => Err(e),
            },
        };
        match result {
            Ok((record, rest)) => {
                let used = buf.len() - rest;
                self.offset += used as u64;
                Ok(Some((record, used)))
            }
            Err(PcapError::IncompleteBuffer) if buf.len() >= MAX_RECORD => {
                Err(Error::TooLarge { offset })
            }
            Err(PcapError::IncompleteBuffer) => Ok(None),
            Err(e) => Err(corrupt(offset, e)),
        }
    }

    /// Bytes of the file taken so far.
    pub const fn offset(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::link::tests::ethernet_udp;
    use super::*;

    /// A little-endian nanosecond pcap of Ethernet frames.
    pub(crate) fn pcap(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for (ns, data) in frames {
            f.extend_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
            f.extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
            f.extend_from_slice(&(data.len() as u32).to_le_bytes());
            f.extend_from_slice(&(data.len() as u32).to_le_bytes());
            f.extend_from_slice(data);
        }
        f
    }

    #[test]
    fn a_nanosecond_pcap_read_in_pieces() {
        let dst = "127.0.0.1:5004".parse().unwrap();
        let file = pcap(&[
            (1_700_000_000_123_456_789, ethernet_udp(dst, b"one")),
            (1_700_000_000_123_460_000, vec![0u8; 20]),
            (1_700_000_000_200_000_001, ethernet_udp(dst, b"two")),
        ]);
        assert!(CaptureParser::new(&file[..10]).unwrap().is_none());
        let (mut p, mut at) = CaptureParser::new(&file).unwrap().unwrap();
        assert_eq!(at, 24);
        let mut got = Vec::new();
        // Offer the bytes one more at a time: a record is taken only whole.
        let mut end = at;
        while at < file.len() {
            match p.next_record(&file[at..end]).unwrap() {
                None => end += 1,
                Some((r, used)) => {
                    got.push((r.at, r.datagram.map(|d| d.payload.to_vec())));
                    at += used;
                }
            }
        }
        assert_eq!(
            got,
            [
                (Nanos(1_700_000_000_123_456_789), Some(b"one".to_vec())),
                (Nanos(1_700_000_000_123_460_000), None),
                (Nanos(1_700_000_000_200_000_001), Some(b"two".to_vec())),
            ]
        );
        assert_eq!(p.offset(), file.len() as u64);
    }

    #[test]
    fn garbage_and_huge_records_are_errors() {
        assert_eq!(
            CaptureParser::new(b"GIF89a.....................").err(),
            Some(Error::NotACapture)
        );
        let dst = "127.0.0.1:5004".parse().unwrap();
        let mut file = pcap(&[(1, ethernet_udp(dst, b"x"))]);
        // Claim a 4 GB record.
        file[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let (mut p, at) = CaptureParser::new(&file).unwrap().unwrap();
        let r = p.next_record(&file[at..]);
        assert!(
            matches!(r, Err(Error::Corrupt { offset: 24, .. }) | Ok(None)),
            "{r:?}"
        );
        let big = vec![0xffu8; MAX_RECORD + 16];
        let mut body = file[at..at + 8].to_vec();
        body.extend_from_slice(&(MAX_RECORD as u32 * 2).to_le_bytes());
        body.extend_from_slice(&(MAX_RECORD as u32 * 2).to_le_bytes());
        body.extend_from_slice(&big);
        let r = p.next_record(&body);
        assert!(
            matches!(
                r,
                Err(Error::TooLarge { offset: 24 }) | Err(Error::Corrupt { .. })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn pcapng_resolutions() {
        assert_eq!(pcapng_nanos(1_500_000, 6), Nanos(1_500_000_000));
        assert_eq!(pcapng_nanos(1_500_000_000, 9), Nanos(1_500_000_000));
        assert_eq!(pcapng_nanos(15, 10), Nanos(1));
        assert_eq!(pcapng_nanos(1 << 30, 0x80 | 30), Nanos(1_000_000_000));
        assert_eq!(pcapng_nanos(u128::MAX, 0), Nanos(u64::MAX));
        assert_eq!(pcapng_nanos(u128::MAX, 0x80), Nanos(u64::MAX));
    }
}
