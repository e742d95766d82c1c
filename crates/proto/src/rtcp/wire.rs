//! RTCP on the wire: the compounds a sender writes (SR+SDES, and
//! SR+SDES+BYE at the end) and what a reader's compounds say. The layout
//! is `rtcp-types`'; the checks RFC 3550 A.2 asks of a receiver that the
//! crate leaves to its user (version of every packet, a report first)
//! are here.

use rtcp_types::prelude::*;
use rtcp_types::{
    Bye, Compound, CompoundBuilder, ReceiverReport, Sdes, SdesBuilder, SdesChunk, SdesItem,
    SenderReport, SenderReportBuilder,
};

use super::clock::NtpTime;
use super::error::Error;
use crate::units::{MediaTime, Ssrc};

/// Packets of one compound above which the rest are not read: a
/// datagram of 64 KiB could otherwise hold 16 Ki empty ones.
const MAX_PACKETS: usize = 64;

/// What a sender report says of its sender (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderInfo {
    /// Wall-clock time of the report.
    pub ntp: NtpTime,
    /// RTP time of the same instant.
    pub rtp: MediaTime,
    /// RTP packets sent so far (modulo 2^32).
    pub packets: u32,
    /// Payload octets sent so far (modulo 2^32).
    pub octets: u32,
}

/// One reception report block: what a reader saw of one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlock {
    /// The source reported on.
    pub source: Ssrc,
    /// Packets lost since the previous report, in 256ths.
    pub fraction_lost: u8,
    /// Packets lost since reception began (24-bit signed: duplicates can
    /// make it negative).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter, in RTP timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the last SR's NTP time (0: none yet).
    pub last_sr: u32,
    /// Delay since that SR, in 1/65536 s.
    pub delay_since_last_sr: u32,
}

/// One packet of a compound, as far as a sender cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A sender report.
    SenderReport {
        /// Its sender.
        ssrc: Ssrc,
        /// What it says of its sending.
        info: SenderInfo,
        /// What it received.
        blocks: Vec<ReportBlock>,
    },
    /// A receiver report.
    ReceiverReport {
        /// Its reader.
        ssrc: Ssrc,
        /// What it received.
        blocks: Vec<ReportBlock>,
    },
    /// Source descriptions (not kept).
    Sdes,
    /// Sources leaving.
    Bye {
        /// Who leaves.
        sources: Vec<Ssrc>,
    },
    /// Any other type (APP, feedback, XR), by its packet type.
    Other {
        /// The packet type.
        packet_type: u8,
    },
}

/// An SR+SDES(CNAME) compound from `ssrc`.
pub fn sender_report(ssrc: Ssrc, cname: &str, info: SenderInfo) -> Vec<u8> {
    write(report_and_sdes(ssrc, cname, info))
}

/// The compound that ends a stream: SR+SDES(CNAME)+BYE (RFC 3550 §6.1:
/// a BYE rides in a compound that opens with a report). `info` is `None`
/// for a stream that never sent, whose report is then an empty RR.
pub fn bye(ssrc: Ssrc, cname: &str, info: Option<SenderInfo>) -> Vec<u8> {
    let leave = Bye::builder().add_source(ssrc.0);
    let compound = match info {
        Some(info) => report_and_sdes(ssrc, cname, info),
        None => CompoundBuilder::default()
            .add_packet(ReceiverReport::builder(ssrc.0))
            .add_packet(sdes(ssrc, cname)),
    };
    write(compound.add_packet(leave))
}

/// An RR+SDES(CNAME) compound from reader `ssrc` with one report block
/// (RFC 3550 §6.4.2). The block's cumulative loss is written as 24-bit
/// two's complement.
pub fn receiver_report(ssrc: Ssrc, cname: &str, block: ReportBlock) -> Vec<u8> {
    let b = rtcp_types::ReportBlock::builder(block.source.0)
        .fraction_lost(block.fraction_lost)
        .cumulative_lost((block.cumulative_lost as u32) & 0xff_ffff)
        .extended_sequence_number(block.highest_seq)
        .interarrival_jitter(block.jitter)
        .last_sender_report_timestamp(block.last_sr)
        .delay_since_last_sender_report_timestamp(block.delay_since_last_sr);
    let rr = ReceiverReport::builder(ssrc.0).add_report_block(b);
    write(
        CompoundBuilder::default()
            .add_packet(rr)
            .add_packet(sdes(ssrc, cname)),
    )
}

fn report_and_sdes<'a>(ssrc: Ssrc, cname: &'a str, info: SenderInfo) -> CompoundBuilder<'a> {
    let sr: SenderReportBuilder = SenderReport::builder(ssrc.0)
        .ntp_timestamp(info.ntp.0)
        .rtp_timestamp(info.rtp.0)
        .packet_count(info.packets)
        .octet_count(info.octets);
    CompoundBuilder::default()
        .add_packet(sr)
        .add_packet(sdes(ssrc, cname))
}

fn sdes(ssrc: Ssrc, cname: &str) -> SdesBuilder<'_> {
    // An SDES item holds at most 255 bytes.
    let cname = truncate(cname, 255);
    Sdes::builder()
        .add_chunk(SdesChunk::builder(ssrc.0).add_item(SdesItem::builder(SdesItem::CNAME, cname)))
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn write(compound: CompoundBuilder<'_>) -> Vec<u8> {
    let size = compound.calculate_size().unwrap_or(0);
    let mut out = vec![0u8; size];
    // Every part was checked by `calculate_size`: SR without blocks, one
    // chunk of one item of at most 255 bytes, one BYE source.
    match compound.write_into(&mut out) {
        Ok(n) => out.truncate(n),
        Err(_) => out.clear(),
    }
    out
}

/// Reads a compound packet, checking what RFC 3550 A.2 asks: every packet
/// of version 2, the lengths adding up to the datagram, padding only in
/// the last, and a sender or receiver report first. At most 64 packets
/// are read; the rest of a longer compound is ignored.
pub fn parse(bytes: &[u8]) -> Result<Vec<Packet>, Error> {
    let first = bytes
        .get(1)
        .copied()
        .ok_or_else(|| Error::Malformed(format!("{} bytes, under an RTCP header", bytes.len())))?;
    let compound = Compound::parse(bytes)?;
    if first != SenderReport::PACKET_TYPE && first != ReceiverReport::PACKET_TYPE {
        return Err(Error::FirstNotReport(first));
    }
    let mut out = Vec::new();
    for packet in compound.take(MAX_PACKETS) {
        out.push(packet_of(packet?)?);
    }
    Ok(out)
}

fn packet_of(p: rtcp_types::Packet<'_>) -> Result<Packet, Error> {
    use rtcp_types::Packet as P;
    // `Compound::parse` checks the version of the first packet only.
    let version = p.version();
    if version != 2 {
        return Err(Error::Version(version));
    }
    Ok(match p {
        P::Sr(sr) => Packet::SenderReport {
            ssrc: Ssrc(sr.ssrc()),
            info: SenderInfo {
                ntp: NtpTime(sr.ntp_timestamp()),
                rtp: MediaTime(sr.rtp_timestamp()),
                packets: sr.packet_count(),
                octets: sr.octet_count(),
            },
            blocks: sr.report_blocks().map(|b| block(&b)).collect(),
        },
        P::Rr(rr) => Packet::ReceiverReport {
            ssrc: Ssrc(rr.ssrc()),
            blocks: rr.report_blocks().map(|b| block(&b)).collect(),
        },
        P::Sdes(_) => Packet::Sdes,
        P::Bye(b) => Packet::Bye {
            sources: b.ssrcs().map(Ssrc).collect(),
        },
        other => Packet::Other {
            packet_type: other.type_(),
        },
    })
}

fn block(b: &rtcp_types::ReportBlock<'_>) -> ReportBlock {
    // 24-bit two's complement, sign-extended.
    let lost = ((b.cumulative_lost() << 8) as i32) >> 8;
    ReportBlock {
        source: Ssrc(b.ssrc()),
        fraction_lost: b.fraction_lost(),
        cumulative_lost: lost,
        highest_seq: b.extended_sequence_number(),
        jitter: b.interarrival_jitter(),
        last_sr: b.last_sender_report_timestamp(),
        delay_since_last_sr: b.delay_since_last_sender_report_timestamp(),
    }
}
