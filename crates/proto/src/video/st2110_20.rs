//! RFC 4175 / ST 2110-20 raw video: frame → datagrams and back.
//!
//! Payload layout after the 12-byte RTP header:
//! `ESN (16) | SRD headers (6 bytes each) | sample data`, where each SRD
//! header is `length (16) | F (1) line (15) | C (1) offset (15)` and C says
//! another header follows. Lines are 0-based, offsets count pixels.
//!
//! Because frames are stored without row padding, the data of one packet,
//! even when it spans the end of one line and the start of the next, is a
//! single contiguous range of the frame. The packetizer exposes that range
//! so drivers can gather header + frame slice without copying.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut, Range};

use super::Error;
use crate::rtp::{self, RtpHeader, RtpPacket};
use crate::units::{ExtSeq, MediaTime, Ssrc};
use crate::video::aligned::Part;
use crate::video::coverage::Coverage;
use crate::video::format::VideoFormat;
use crate::video::prefaulted;

/// Largest UDP payload nagare sends (9000-byte jumbo MTU less IP/UDP
/// headers and some room for tunnels).
pub const MAX_PACKET_SIZE: usize = 8960;
/// Default UDP payload: fits a 1500-byte MTU over IPv4 or IPv6.
pub const DEFAULT_PACKET_SIZE: usize = 1440;
/// Extended sequence number field.
pub const ESN_LEN: usize = 2;
/// One sample row data header.
pub const SRD_LEN: usize = 6;
/// Payload type nagare uses (dynamic range).
pub const DEFAULT_PAYLOAD_TYPE: u8 = 96;

/// One sample row data header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Srd {
    /// Bytes of sample data for this segment.
    pub length: u16,
    /// 0-based line number.
    pub line: u16,
    /// Offset of the first pixel in the line.
    pub offset: u16,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    srd_start: u32,
    srd_count: u16,
    data_start: usize,
    data_len: u32,
    padding: u8,
}

/// Largest RTP padding a uniform plan adds: a packet is only left short
/// when its room is below one SRD header plus one pixel group.
const MAX_PADDING: usize = 16;

/// `PADDING[k][..k]` is valid RTP padding of k bytes (last byte = count).
const PADDING: [[u8; MAX_PADDING]; MAX_PADDING] = {
    let mut t = [[0u8; MAX_PADDING]; MAX_PADDING];
    let mut k = 1;
    while k < MAX_PADDING {
        t[k][k - 1] = k as u8;
        k += 1;
    }
    t
};

/// Splits frames of one format into RFC 4175 packets of at most
/// `packet_size` bytes of UDP payload.
///
/// The split is the same for every frame, so it is planned once: each
/// packet is a list of SRD headers and one contiguous data range.
#[derive(Debug, Clone)]
pub struct Packetizer {
    format: VideoFormat,
    packet_size: usize,
    payload_type: u8,
    ssrc: Ssrc,
    srds: Vec<Srd>,
    slots: Vec<Slot>,
}

impl Packetizer {
    /// Plans the packets for `format` at `packet_size` bytes of UDP payload.
    pub fn new(format: VideoFormat, packet_size: usize, ssrc: Ssrc) -> Result<Self, Error> {
        let pf = format.pixel_format;
        let pg_bytes = pf.pgroup_bytes();
        let pg_pixels = pf.pgroup_pixels();
        let min = rtp::HEADER_LEN + ESN_LEN + SRD_LEN + pg_bytes;
        if packet_size < min || packet_size > MAX_PACKET_SIZE {
            return Err(Error::BadPacketSize {
                size: packet_size,
                min,
                max: MAX_PACKET_SIZE,
            });
        }
        let line_bytes = format.line_bytes();
        let mut srds = Vec::new();
        let mut slots = Vec::new();
        let (mut line, mut offset_bytes) = (0usize, 0usize);
        let height = format.height as usize;
        while line < height {
            let mut room = packet_size - rtp::HEADER_LEN - ESN_LEN;
            let srd_start = srds.len();
            let data_start = line * line_bytes + offset_bytes;
            let mut data_len = 0usize;
            while line < height && room >= SRD_LEN + pg_bytes {
                // A segment may not exceed the 16-bit length field.
                let fit = (room - SRD_LEN).min(u16::MAX as usize) / pg_bytes * pg_bytes;
                let len = fit.min(line_bytes - offset_bytes);
                srds.push(Srd {
                    length: len as u16,
                    line: line as u16,
                    offset: (offset_bytes / pg_bytes * pg_pixels) as u16,
                });
                room -= SRD_LEN + len;
                data_len += len;
                offset_bytes += len;
                if offset_bytes == line_bytes {
                    line += 1;
                    offset_bytes = 0;
                }
            }
            slots.push(Slot {
                srd_start: srd_start as u32,
                srd_count: (srds.len() - srd_start) as u16,
                data_start,
                data_len: data_len as u32,
                padding: 0,
            });
        }
        Ok(Packetizer {
            format,
            packet_size,
            payload_type: DEFAULT_PAYLOAD_TYPE,
            ssrc,
            srds,
            slots,
        })
    }

    /// Pads every packet but each frame's last to exactly `packet_size`
    /// bytes with RTP padding (at most a few bytes), so that a run of
    /// packets can leave as one UDP GSO train, which needs equal segments.
    pub fn uniform(mut self) -> Self {
        let last = self.slots.len().saturating_sub(1);
        for i in 0..last {
            let used = self.header_len(i) + self.data_range(i).len();
            let pad = self.packet_size - used;
            debug_assert!(pad < MAX_PADDING);
            self.slots[i].padding = pad.min(MAX_PADDING - 1) as u8;
        }
        self
    }

    /// The RTP padding that ends packet `index` (empty when none).
    pub fn padding(&self, index: usize) -> &'static [u8] {
        let k = self.slots.get(index).map_or(0, |s| usize::from(s.padding));
        &PADDING[k][..k]
    }

    /// The format being packetized.
    pub fn format(&self) -> VideoFormat {
        self.format
    }

    /// The configured UDP payload size limit.
    pub fn packet_size(&self) -> usize {
        self.packet_size
    }

    /// The SSRC written into every packet.
    pub fn ssrc(&self) -> Ssrc {
        self.ssrc
    }

    /// Packets per frame.
    pub fn packets_per_frame(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of RTP + RFC 4175 headers in packet `index` of a frame.
    pub fn header_len(&self, index: usize) -> usize {
        self.slots.get(index).map_or(0, |s| {
            rtp::HEADER_LEN + ESN_LEN + SRD_LEN * usize::from(s.srd_count)
        })
    }

    /// The range of the frame carried by packet `index`.
    pub fn data_range(&self, index: usize) -> Range<usize> {
        self.slots
            .get(index)
            .map_or(0..0, |s| s.data_start..s.data_start + s.data_len as usize)
    }

    /// The packet whose data starts at frame byte `start`, if any.
    pub fn packet_at(&self, start: usize) -> Option<usize> {
        self.slots
            .binary_search_by_key(&start, |s| s.data_start)
            .ok()
    }

    /// Total length of packet `index`, padding included.
    pub fn packet_len(&self, index: usize) -> usize {
        self.header_len(index) + self.data_range(index).len() + self.padding(index).len()
    }

    /// Writes the headers of packet `index`: RTP with the low 16 bits of
    /// `seq`, ESN with the next 16, the SRDs, and the marker on the last
    /// packet of the frame. Returns the header length.
    pub fn write_header(
        &self,
        index: usize,
        seq: ExtSeq,
        timestamp: MediaTime,
        buf: &mut [u8],
    ) -> Result<usize, Error> {
        let ext_seq = seq.wire32();
        let slot = self.slots.get(index).ok_or(Error::NoSuchPacket(index))?;
        let len = self.header_len(index);
        let out = buf
            .get_mut(..len)
            .ok_or(Error::BufferTooSmall { needed: len })?;
        RtpHeader {
            marker: index + 1 == self.slots.len(),
            payload_type: self.payload_type,
            sequence_number: seq.wire(),
            timestamp: timestamp.0,
            ssrc: self.ssrc.0,
        }
        .write(out)?;
        if slot.padding > 0 {
            out[0] |= 0x20;
        }
        out[12..14].copy_from_slice(&((ext_seq >> 16) as u16).to_be_bytes());
        let srds = &self.srds[slot.srd_start as usize..][..usize::from(slot.srd_count)];
        for (k, (srd, chunk)) in srds
            .iter()
            .zip(out[14..].chunks_exact_mut(SRD_LEN))
            .enumerate()
        {
            let more = k + 1 < srds.len();
            chunk[0..2].copy_from_slice(&srd.length.to_be_bytes());
            chunk[2..4].copy_from_slice(&(srd.line & 0x7fff).to_be_bytes());
            let off = (srd.offset & 0x7fff) | if more { 0x8000 } else { 0 };
            chunk[4..6].copy_from_slice(&off.to_be_bytes());
        }
        Ok(len)
    }

    /// Writes the whole packet `index` (headers and a copy of its frame
    /// data) into `buf`, returning its length.
    pub fn write_packet(
        &self,
        index: usize,
        frame: &[u8],
        seq: ExtSeq,
        timestamp: MediaTime,
        buf: &mut [u8],
    ) -> Result<usize, Error> {
        if frame.len() != self.format.frame_bytes() {
            return Err(Error::FrameSize {
                expected: self.format.frame_bytes(),
                got: frame.len(),
            });
        }
        let h = self.write_header(index, seq, timestamp, buf)?;
        let range = self.data_range(index);
        let pad = self.padding(index);
        let total = h + range.len() + pad.len();
        let out = buf
            .get_mut(h..total)
            .ok_or(Error::BufferTooSmall { needed: total })?;
        let (data, tail) = out.split_at_mut(range.len());
        data.copy_from_slice(&frame[range]);
        tail.copy_from_slice(pad);
        Ok(total)
    }

    /// Every packet of one frame as owned datagrams, packet `i` carrying
    /// sequence number `first_seq + i`. Allocates per packet: for tests,
    /// tools and seed corpora; the sender gathers headers and frame slices
    /// instead of copying.
    pub fn frame_packets(
        &self,
        frame: &[u8],
        first_seq: ExtSeq,
        timestamp: MediaTime,
    ) -> Result<Vec<Vec<u8>>, Error> {
        (0..self.packets_per_frame())
            .map(|i| {
                let mut buf = vec![0u8; self.packet_len(i)];
                let seq = first_seq.add(i as u64);
                self.write_packet(i, frame, seq, timestamp, &mut buf)?;
                Ok(buf)
            })
            .collect()
    }
}

/// Parsed RFC 4175 payload headers of one packet.
#[derive(Debug, Clone, Copy)]
pub struct PayloadView<'a> {
    /// High 16 bits of the extended sequence number.
    pub esn: u16,
    headers: &'a [u8],
    data: &'a [u8],
}

impl<'a> PayloadView<'a> {
    /// Splits an RTP payload into ESN, SRD headers and data, checking only
    /// the framing (headers present, continuation chain terminated).
    pub fn parse(payload: &'a [u8]) -> Result<Self, Error> {
        if payload.len() < ESN_LEN + SRD_LEN {
            return Err(Error::Truncated {
                needed: ESN_LEN + SRD_LEN,
                got: payload.len(),
            });
        }
        let esn = u16::from_be_bytes([payload[0], payload[1]]);
        let mut end = ESN_LEN;
        loop {
            let h = payload.get(end..end + SRD_LEN).ok_or(Error::Truncated {
                needed: end + SRD_LEN,
                got: payload.len(),
            })?;
            end += SRD_LEN;
            if h[4] & 0x80 == 0 {
                break;
            }
        }
        Ok(PayloadView {
            esn,
            headers: &payload[ESN_LEN..end],
            data: &payload[end..],
        })
    }

    /// The SRD headers in order (length, field bit stripped, line, offset).
    pub fn srds(&self) -> impl Iterator<Item = (Srd, bool)> + '_ {
        self.headers.chunks_exact(SRD_LEN).map(|h| {
            let line_field = u16::from_be_bytes([h[2], h[3]]);
            (
                Srd {
                    length: u16::from_be_bytes([h[0], h[1]]),
                    line: line_field & 0x7fff,
                    offset: u16::from_be_bytes([h[4], h[5]]) & 0x7fff,
                },
                line_field & 0x8000 != 0,
            )
        })
    }

    /// The sample data following the headers.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Validates every segment against `format` and returns, for each, the
    /// destination byte offset in the frame; the caller then copies. A
    /// packet that fails any check writes nothing.
    pub fn placements(
        &self,
        format: &VideoFormat,
        out: &mut Vec<(usize, Range<usize>)>,
    ) -> Result<usize, Error> {
        out.clear();
        let pf = format.pixel_format;
        let (pg_bytes, pg_pixels) = (pf.pgroup_bytes(), pf.pgroup_pixels());
        let line_bytes = format.line_bytes();
        let mut cursor = 0usize;
        for (srd, field) in self.srds() {
            let len = usize::from(srd.length);
            let (line, offset) = (usize::from(srd.line), usize::from(srd.offset));
            if field {
                return Err(Error::Interlaced);
            }
            if len % pg_bytes != 0 || offset % pg_pixels != 0 {
                return Err(Error::Misaligned);
            }
            let start_in_line = offset / pg_pixels * pg_bytes;
            // `>=`: an empty segment at offset == width would otherwise be
            // placed at the start of the next line (or past the frame).
            if line >= format.height as usize
                || start_in_line >= line_bytes
                || start_in_line + len > line_bytes
            {
                return Err(Error::OutsideFrame { line, offset });
            }
            if cursor + len > self.data.len() {
                return Err(Error::Truncated {
                    needed: cursor + len,
                    got: self.data.len(),
                });
            }
            out.push((line * line_bytes + start_in_line, cursor..cursor + len));
            cursor += len;
        }
        Ok(cursor)
    }
}

/// A packet whose headers passed [`Depacketizer::prepare`].
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    timestamp: u32,
    data: &'a [u8],
}

/// A frame handed out by the [`Depacketizer`].
#[derive(Debug)]
pub struct Frame {
    /// Position in the stream: 0 for the first frame received, counting
    /// frame periods (so lost frames leave gaps).
    pub index: u64,
    /// RTP timestamp shared by the frame's packets.
    pub timestamp: MediaTime,
    /// The frame's bytes (`frame_bytes` long); for incomplete frames the
    /// missing regions hold zeros when zero-fill is on. Empty when the
    /// frame was written in `lent` memory instead.
    pub data: Vec<u8>,
    /// The frame's bytes, when they were written in memory a [`Lender`]
    /// lent: they already lie in the bigger frame it belongs to; give the
    /// part back to that frame's owner.
    pub lent: Option<Part>,
    /// Every byte of the frame arrived.
    pub complete: bool,
    /// Bytes of sample data received.
    pub bytes_received: usize,
    /// Distinct packets received.
    pub packets: u32,
}

/// What the depacketizer has to say, in stream order.
#[derive(Debug)]
pub enum Output {
    /// A finished frame (complete or not); hand its buffer back with
    /// [`Depacketizer::recycle`].
    Frame(Frame),
    /// Frames of which no packet arrived: indices `first..first + count`.
    Lost {
        /// Index of the first missing frame.
        first: u64,
        /// How many.
        count: u64,
    },
}

/// Counters kept by the depacketizer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DepacketizerStats {
    /// Packets whose payload headers were invalid for the format.
    pub malformed: u64,
    /// Packets for a frame already handed out (arrived too late).
    pub late: u64,
    /// Frames handed out with every byte present.
    pub frames_complete: u64,
    /// Frames handed out with bytes missing.
    pub frames_incomplete: u64,
    /// Frames of which nothing arrived (by timestamp gap).
    pub frames_lost: u64,
}

/// Lends a [`Depacketizer`] the memory a frame is written in: the part
/// of a bigger frame this stream's frame belongs in (a `lines` stripe's
/// place in its whole frame, [`crate::video::assembler::Assembler::lend`]),
/// so the frame is never copied there.
pub trait Lender: Send {
    /// Memory for the frame at `timestamp`, exactly one frame long, or
    /// `None`: the depacketizer uses a buffer of its own.
    fn lend(&mut self, timestamp: MediaTime) -> Option<Part>;
}

/// Where a frame is assembled.
enum Memory {
    /// A buffer of the depacketizer's own, recycled.
    Own(Vec<u8>),
    /// A part of a bigger frame, from a [`Lender`].
    Lent(Part),
}

impl Deref for Memory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Memory::Own(v) => v,
            Memory::Lent(p) => p,
        }
    }
}

impl DerefMut for Memory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Memory::Own(v) => v,
            Memory::Lent(p) => p,
        }
    }
}

struct Assembly {
    timestamp: u32,
    data: Memory,
    /// Which bytes packets wrote: what a complete frame covers, and the
    /// holes an incomplete one has zeroed.
    coverage: Coverage,
    bytes: usize,
    packets: u32,
}

impl Assembly {
    /// Every byte written (counting bytes alone would take overlapping
    /// packets for a whole frame).
    fn complete(&self) -> bool {
        self.bytes >= self.data.len() && self.coverage.covers(self.data.len())
    }
}

/// Reassembles frames from RFC 4175 packets, keyed by RTP timestamp.
///
/// At most `in_flight` frames are assembled at once, which bounds memory
/// and sets how much reordering across a frame boundary is tolerated:
/// frame N is handed out incomplete once frame N+1 completes or frame N+2
/// starts. Duplicates must be filtered by the caller (a
/// [`crate::stats::SequenceTracker`] does that), because bytes are
/// counted, not mapped.
pub struct Depacketizer {
    format: VideoFormat,
    in_flight: usize,
    /// Incomplete frames wait for their eviction (see
    /// [`Depacketizer::set_patient`]).
    patient: bool,
    zero_fill: bool,
    period_ticks: Option<f64>,
    assemblies: VecDeque<Assembly>,
    free: Vec<Vec<u8>>,
    ready: VecDeque<Output>,
    last: Option<(u32, u64)>,
    scratch: Vec<(usize, Range<usize>)>,
    stats: DepacketizerStats,
    /// Lends the memory frames are written in, when set.
    lender: Option<Box<dyn Lender>>,
}

impl Depacketizer {
    /// A depacketizer for `format`. `period_ticks` is the frame period in
    /// 90 kHz ticks when known (it is learned from the first two frames
    /// otherwise) and is used to number frames and count lost ones. A
    /// period under one tick (above 90000 fps) or not finite is treated as
    /// unknown: dividing a timestamp gap by it would count more lost frames
    /// than a `u64` holds.
    pub fn new(format: VideoFormat, period_ticks: Option<f64>) -> Self {
        Depacketizer {
            format,
            in_flight: 2,
            patient: false,
            zero_fill: false,
            period_ticks: period_ticks.filter(|p| p.is_finite() && *p >= 1.0),
            assemblies: VecDeque::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            last: None,
            scratch: Vec::new(),
            stats: DepacketizerStats::default(),
            lender: None,
        }
    }

    /// Writes every frame it can in memory `lender` lends, from the next
    /// frame on (the rest in its own buffers, as without one).
    pub fn set_lender(&mut self, lender: Box<dyn Lender>) {
        self.lender = Some(lender);
    }

    /// The lender, taken out (for the depacketizer that replaces this one).
    pub fn take_lender(&mut self) -> Option<Box<dyn Lender>> {
        self.lender.take()
    }

    /// Zero what no packet wrote in an incomplete frame, so its missing
    /// regions are zeros rather than a recycled buffer's stale bytes
    /// (complete frames cost nothing).
    pub fn set_zero_fill(&mut self, on: bool) {
        self.zero_fill = on;
    }

    /// Frames assembled concurrently (at least 2).
    pub fn set_in_flight(&mut self, frames: usize) {
        self.in_flight = frames.max(2);
    }

    /// Patient mode: an incomplete frame is handed out only when a frame
    /// beyond `in_flight` starts, not as soon as a newer frame completes,
    /// so a packet made good by a second ST 2022-7 leg running up to
    /// `in_flight - 1` frame periods behind still lands in its frame.
    /// Frames still leave in order (a complete frame waits for older
    /// incomplete ones).
    pub fn set_patient(&mut self, on: bool) {
        self.patient = on;
    }

    /// Counters so far.
    pub fn stats(&self) -> DepacketizerStats {
        self.stats
    }

    /// The format frames are assembled in.
    pub fn format(&self) -> VideoFormat {
        self.format
    }

    /// Makes up to `frames` frame buffers now, every page touched (at most
    /// what [`Depacketizer::recycle`] keeps), so a stream's first frames
    /// reuse them instead of faulting fresh memory in while packets come.
    pub fn warm(&mut self, frames: usize) {
        let n = self.format.frame_bytes();
        while self.free.len() < frames.min(2 * self.in_flight) {
            self.free.push(prefaulted(n));
        }
    }

    /// Every spare frame buffer, taken out (for the depacketizer that
    /// replaces this one).
    pub fn take_spares(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.free)
    }

    /// Returns a frame buffer for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        // Room for the frames in assembly and as many on their way back:
        // a buffer dropped here is a fresh allocation (page faults and
        // the kernel zeroing every page) for a later frame.
        if buf.len() == self.format.frame_bytes() && self.free.len() < 2 * self.in_flight {
            self.free.push(buf);
        }
    }

    /// Feeds one RTP packet (already de-duplicated). Errors mean the packet
    /// was dropped and counted; they are never fatal.
    pub fn push(&mut self, packet: &RtpPacket<&[u8]>) -> Result<(), Error> {
        let prepared = self.prepare(packet)?;
        self.commit(prepared)
    }

    /// Validates a packet's payload headers against the format (counting
    /// it malformed if they are not valid) without touching any frame, so a
    /// receiver can refuse garbage before it reaches its sequence
    /// statistics. Pass the result to [`Depacketizer::commit`] next.
    pub fn prepare<'a>(&mut self, packet: &RtpPacket<&'a [u8]>) -> Result<Prepared<'a>, Error> {
        let checked = PayloadView::parse(packet.payload_slice()).and_then(|view| {
            view.placements(&self.format, &mut self.scratch)
                .map(|_| view)
        });
        match checked {
            Ok(view) => Ok(Prepared {
                timestamp: packet.timestamp(),
                data: view.data(),
            }),
            Err(e) => {
                self.stats.malformed += 1;
                Err(e)
            }
        }
    }

    /// Copies a packet validated by the last [`Depacketizer::prepare`] into
    /// its frame.
    pub fn commit(&mut self, prepared: Prepared<'_>) -> Result<(), Error> {
        let scratch = std::mem::take(&mut self.scratch);
        let result = self.place(prepared.timestamp, Some(prepared.data), &scratch);
        self.scratch = scratch;
        result
    }

    /// Frame bytes `r` of the frame at `timestamp` being assembled, when
    /// no packet has written any of them yet: where a read may land
    /// packets of it straight away (see [`crate::video::landing`]).
    pub fn landing_region(&mut self, timestamp: u32, r: Range<usize>) -> Option<&mut [u8]> {
        let a = self
            .assemblies
            .iter_mut()
            .find(|a| a.timestamp == timestamp)?;
        if !a.coverage.is_clear(r.clone()) {
            return None;
        }
        a.data.get_mut(r)
    }

    /// The same bytes, to read what landed there.
    pub fn region(&self, timestamp: u32, r: Range<usize>) -> Option<&[u8]> {
        let a = self.assemblies.iter().find(|a| a.timestamp == timestamp)?;
        a.data.get(r)
    }

    /// Books a packet of the frame at `timestamp` whose data already lies
    /// at frame bytes `r` (it landed there), as [`Depacketizer::commit`]
    /// would after copying it.
    pub fn commit_in_place(&mut self, timestamp: u32, r: Range<usize>) -> Result<(), Error> {
        self.place(timestamp, None, &[(r.start, 0..r.len())])
    }

    /// Books a packet's `placements` in its frame, copying them from
    /// `data` unless they are in place already.
    fn place(
        &mut self,
        ts: u32,
        data: Option<&[u8]>,
        placements: &[(usize, Range<usize>)],
    ) -> Result<(), Error> {
        if let Some((last_ts, _)) = self.last
            && ts_diff(ts, last_ts) <= 0
        {
            self.stats.late += 1;
            return Err(Error::LatePacket);
        }
        let pos = match self.assemblies.iter().position(|a| a.timestamp == ts) {
            Some(p) => p,
            None => {
                // Opening a frame older than every frame in assembly would
                // evict newer ones and break output order: it is too late.
                if self.assemblies.len() >= self.in_flight
                    && ts_diff(ts, self.assemblies[0].timestamp) < 0
                {
                    self.stats.late += 1;
                    return Err(Error::LatePacket);
                }
                self.open(ts)
            }
        };
        let a = &mut self.assemblies[pos];
        let mut bytes = 0;
        for (dst, src) in placements {
            if let Some(data) = data {
                a.data[*dst..*dst + src.len()].copy_from_slice(&data[src.clone()]);
            }
            a.coverage.add(*dst..*dst + src.len(), &mut a.data);
            bytes += src.len();
        }
        a.bytes += bytes;
        a.packets += 1;
        if a.complete() {
            if self.patient {
                // In order: the complete frames at the front.
                while self.assemblies.front().is_some_and(Assembly::complete) {
                    self.finish_oldest();
                }
            } else {
                // Older frames cannot complete any more: hand them out first.
                for _ in 0..=pos {
                    self.finish_oldest();
                }
            }
        }
        Ok(())
    }

    fn open(&mut self, ts: u32) -> usize {
        while self.assemblies.len() >= self.in_flight {
            self.finish_oldest();
        }
        let size = self.format.frame_bytes();
        // A recycled buffer keeps its last frame's bytes: packets overwrite
        // them, and an incomplete frame has its holes zeroed when it goes.
        // So does lent memory.
        let lent = self
            .lender
            .as_mut()
            .and_then(|l| l.lend(MediaTime(ts)))
            .filter(|p| p.len() == size);
        let data = match lent {
            Some(p) => Memory::Lent(p),
            None => Memory::Own(self.free.pop().unwrap_or_else(|| vec![0; size])),
        };
        let pos = self
            .assemblies
            .iter()
            .position(|a| ts_diff(ts, a.timestamp) < 0)
            .unwrap_or(self.assemblies.len());
        self.assemblies.insert(
            pos,
            Assembly {
                timestamp: ts,
                data,
                coverage: Coverage::new(),
                bytes: 0,
                packets: 0,
            },
        );
        pos
    }

    fn finish_oldest(&mut self) {
        let Some(mut a) = self.assemblies.pop_front() else {
            return;
        };
        let index = match self.last {
            None => 0,
            Some((last_ts, last_index)) => {
                let gap = ts_diff(a.timestamp, last_ts).max(1) as f64;
                let period = *self.period_ticks.get_or_insert(gap);
                let steps = ((gap / period).round() as u64).max(1);
                if steps > 1 {
                    self.stats.frames_lost += steps - 1;
                    self.ready.push_back(Output::Lost {
                        first: last_index + 1,
                        count: steps - 1,
                    });
                }
                last_index + steps
            }
        };
        self.last = Some((a.timestamp, index));
        let complete = a.complete();
        if !complete && self.zero_fill {
            a.coverage.zero_holes(&mut a.data);
        }
        if complete {
            self.stats.frames_complete += 1;
        } else {
            self.stats.frames_incomplete += 1;
        }
        let (data, lent) = match a.data {
            Memory::Own(v) => (v, None),
            Memory::Lent(p) => (Vec::new(), Some(p)),
        };
        self.ready.push_back(Output::Frame(Frame {
            index,
            timestamp: MediaTime(a.timestamp),
            data,
            lent,
            complete,
            bytes_received: a.bytes,
            packets: a.packets,
        }));
    }

    /// Hands out the next frame or lost-frame run, in stream order.
    pub fn poll(&mut self) -> Option<Output> {
        self.ready.pop_front()
    }

    /// Finishes every frame still being assembled (end of stream).
    pub fn flush(&mut self) {
        while !self.assemblies.is_empty() {
            self.finish_oldest();
        }
    }

    /// Index of the last frame handed out, if any.
    pub fn last_index(&self) -> Option<u64> {
        self.last.map(|(_, i)| i)
    }
}

/// Signed distance `a - b` between RTP timestamps, modulo 2^32.
pub fn ts_diff(a: u32, b: u32) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::format::{PixelFormat, VideoFormat};
    use proptest::prelude::*;

    fn frame_of(format: &VideoFormat, seed: u8) -> Vec<u8> {
        (0..format.frame_bytes())
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn packets(p: &Packetizer, frame: &[u8], seq0: u32, ts: u32) -> Vec<Vec<u8>> {
        p.frame_packets(frame, ExtSeq(u64::from(seq0)), MediaTime(ts))
            .unwrap()
    }

    fn feed(d: &mut Depacketizer, pkts: &[Vec<u8>]) -> Vec<Output> {
        for p in pkts {
            let v = RtpPacket::new_checked(&p[..]).unwrap();
            let _ = d.push(&v);
        }
        let mut out = Vec::new();
        while let Some(o) = d.poll() {
            out.push(o);
        }
        out
    }

    /// Feeds `pkts`, ends the stream and returns the first frame out.
    fn feed_to_end(d: &mut Depacketizer, pkts: &[Vec<u8>]) -> Frame {
        let mut out = feed(d, pkts);
        d.flush();
        out.extend(std::iter::from_fn(|| d.poll()));
        match out.into_iter().next() {
            Some(Output::Frame(f)) => f,
            other => panic!("a frame, not {other:?}"),
        }
    }

    /// Zeroes in `frame` the bytes packet `pk` carries.
    fn zero_where(pk: &[u8], format: &VideoFormat, frame: &mut [u8]) {
        let v = RtpPacket::new_checked(pk).unwrap();
        let mut places = Vec::new();
        PayloadView::parse(v.payload())
            .unwrap()
            .placements(format, &mut places)
            .unwrap();
        for (dst, src) in places {
            frame[dst..dst + src.len()].fill(0);
        }
    }

    /// A recycled buffer holds the last frame's bytes: a whole frame
    /// overwrites them all, an incomplete one gets zeros exactly where its
    /// lost packets were, and a warmed buffer behaves the same.
    #[test]
    fn recycled_buffers_are_zeroed_only_in_the_holes_of_incomplete_frames() {
        let format = VideoFormat::new(64, 8, PixelFormat::Uyvp).unwrap();
        let p = Packetizer::new(format, 200, Ssrc(7)).unwrap();
        let mut d = Depacketizer::new(format, Some(1500.0));
        d.set_zero_fill(true);
        d.warm(1);
        let first = frame_of(&format, 1);
        let Output::Frame(f) = feed(&mut d, &packets(&p, &first, 0, 0)).remove(0) else {
            panic!("a frame");
        };
        assert!(f.complete);
        assert_eq!(f.data, first);
        d.recycle(f.data);
        // The next frame loses packets 2 and 5.
        let second = frame_of(&format, 2);
        let mut pkts = packets(&p, &second, 100, 1500);
        let lost = [pkts.remove(5), pkts.remove(2)];
        let f = feed_to_end(&mut d, &pkts);
        assert!(!f.complete);
        let mut want = second.clone();
        for pk in &lost {
            zero_where(pk, &format, &mut want);
        }
        assert_eq!(f.data, want);
    }

    /// Bytes add up to a frame, but two packets wrote the same region and
    /// one never came: the frame is incomplete and its hole is zeros.
    #[test]
    fn overlapping_packets_never_make_a_frame_complete() {
        let format = VideoFormat::new(64, 8, PixelFormat::Uyvp).unwrap();
        let p = Packetizer::new(format, 200, Ssrc(7)).unwrap().uniform();
        let mut d = Depacketizer::new(format, Some(1500.0));
        d.set_zero_fill(true);
        d.recycle(vec![0xee; format.frame_bytes()]);
        let frame = frame_of(&format, 4);
        let mut pkts = packets(&p, &frame, 0, 0);
        let mut want = frame.clone();
        zero_where(&pkts[3], &format, &mut want);
        // Packet 3's payload replaced by packet 2's (same size, same
        // placement), renumbered so it is no duplicate.
        let mut copy = pkts[2].clone();
        copy[2..4].copy_from_slice(&pkts[3][2..4]);
        copy[12..14].copy_from_slice(&pkts[3][12..14]);
        pkts[3] = copy;
        let f = feed_to_end(&mut d, &pkts);
        assert!(!f.complete);
        assert_eq!(f.data, want);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn round_trip_every_format(
            pf in prop::sample::select(PixelFormat::ALL.to_vec()),
            half_w in 1u32..400,
            h in 1u32..64,
            packet_size in 30usize..=MAX_PACKET_SIZE,
            seq0 in any::<u32>(),
            ts in any::<u32>(),
            uniform in any::<bool>(),
        ) {
            let format = VideoFormat::new(half_w * 2, h, pf).unwrap();
            let mut p = Packetizer::new(format, packet_size, Ssrc(7)).unwrap();
            if uniform {
                p = p.uniform();
            }
            let frame = frame_of(&format, 3);
            let pkts = packets(&p, &frame, seq0, ts);
            // Count: enough packets to carry the frame, none oversized, and
            // only the last one marked.
            for (i, pk) in pkts.iter().enumerate() {
                prop_assert!(pk.len() <= packet_size);
                if uniform && i + 1 < pkts.len() {
                    prop_assert_eq!(pk.len(), packet_size);
                }
                let v = RtpPacket::new_checked(&pk[..]).unwrap();
                prop_assert_eq!(v.marker(), i + 1 == pkts.len());
                prop_assert_eq!(v.timestamp(), ts);
                let esn = u16::from_be_bytes([v.payload()[0], v.payload()[1]]);
                let ext = (u32::from(esn) << 16) | u32::from(v.sequence_number());
                prop_assert_eq!(ext, seq0.wrapping_add(i as u32));
            }
            let payload_room = packet_size - 14 - SRD_LEN;
            let per_packet = payload_room / pf.pgroup_bytes() * pf.pgroup_bytes();
            prop_assert!(pkts.len() >= format.frame_bytes().div_ceil(per_packet.max(1)));
            let mut d = Depacketizer::new(format, None);
            let out = feed(&mut d, &pkts);
            prop_assert_eq!(out.len(), 1);
            match &out[0] {
                Output::Frame(f) => {
                    prop_assert!(f.complete);
                    prop_assert!(f.data == frame);
                }
                Output::Lost { .. } => prop_assert!(false, "lost"),
            }
        }

        #[test]
        fn hostile_payloads_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let format = VideoFormat::new(64, 8, PixelFormat::Uyvp).unwrap();
            let mut d = Depacketizer::new(format, None);
            let mut pkt = vec![0x80, 96, 0, 1, 0, 0, 0, 9, 0, 0, 0, 1];
            pkt.extend_from_slice(&bytes);
            let v = RtpPacket::new_checked(&pkt[..]).unwrap();
            let _ = d.push(&v);
            d.flush();
            while d.poll().is_some() {}
        }
    }

    #[test]
    fn lines_continue_within_a_packet() {
        // 8 pixels of uyvy = 16 bytes a line; 1440-byte packets carry many lines.
        let format = VideoFormat::new(8, 100, PixelFormat::Uyvy422).unwrap();
        let p = Packetizer::new(format, 200, Ssrc(1)).unwrap();
        let mut buf = [0u8; 200];
        let n = p
            .write_header(0, ExtSeq(0), MediaTime(0), &mut buf)
            .unwrap();
        let view = PayloadView::parse(&buf[12..]).unwrap();
        let srds: Vec<_> = view.srds().map(|(s, _)| s).collect();
        assert!(srds.len() > 1);
        assert_eq!(n, 14 + 6 * srds.len());
        assert_eq!(
            srds[0],
            Srd {
                length: 16,
                line: 0,
                offset: 0
            }
        );
        assert_eq!(srds[1].line, 1);
        let total: usize = srds.iter().map(|s| usize::from(s.length)).sum();
        assert_eq!(p.data_range(0), 0..total);
        assert_eq!(srds.last().unwrap().length, 4); // a partial line fills the rest
    }

    #[test]
    fn reordered_across_frames_and_lost_frames() {
        let format = VideoFormat::new(32, 4, PixelFormat::Rgb24).unwrap();
        let p = Packetizer::new(format, 100, Ssrc(1)).unwrap();
        let f0 = frame_of(&format, 0);
        let f1 = frame_of(&format, 1);
        let f3 = frame_of(&format, 3);
        let mut a = packets(&p, &f0, 0, 1000);
        let b = packets(&p, &f1, 100, 4000);
        let c = packets(&p, &f3, 300, 10000);
        // the last packet of frame 0 arrives after the first of frame 1
        let last = a.pop().unwrap();
        let mut all = a;
        all.push(b[0].clone());
        all.push(last);
        all.extend_from_slice(&b[1..]);
        all.extend(c);
        let mut d = Depacketizer::new(format, Some(3000.0));
        let out = feed(&mut d, &all);
        let kinds: Vec<String> = out
            .iter()
            .map(|o| match o {
                Output::Frame(f) => format!("f{}{}", f.index, if f.complete { "" } else { "!" }),
                Output::Lost { first, count } => format!("lost{first}+{count}"),
            })
            .collect();
        assert_eq!(kinds, ["f0", "f1", "lost2+1", "f3"]);
        assert_eq!(d.stats().frames_lost, 1);
    }

    #[test]
    fn incomplete_frame_is_handed_out_when_the_next_completes() {
        let format = VideoFormat::new(32, 4, PixelFormat::Rgb24).unwrap();
        let p = Packetizer::new(format, 100, Ssrc(1)).unwrap();
        let mut a = packets(&p, &frame_of(&format, 0), 0, 0);
        a.remove(1);
        let b = packets(&p, &frame_of(&format, 1), 100, 3000);
        a.extend(b);
        let mut d = Depacketizer::new(format, None);
        let out = feed(&mut d, &a);
        assert_eq!(out.len(), 2);
        assert!(matches!(&out[0], Output::Frame(f) if !f.complete && f.index == 0));
        assert!(matches!(&out[1], Output::Frame(f) if f.complete && f.index == 1));
        // a straggler for frame 0 is late now
        let straggler = packets(&p, &frame_of(&format, 0), 0, 0).remove(1);
        let v = RtpPacket::new_checked(&straggler[..]).unwrap();
        assert!(d.push(&v).is_err());
        assert_eq!(d.stats().late, 1);
    }

    #[test]
    fn empty_segment_past_the_line_end_is_outside_the_frame() {
        // Found by fuzz target rfc4175_payload: length 0 at offset == width
        // passed the bounds check and was placed at byte 5 of a 5-byte frame.
        let format = VideoFormat::new(2, 1, PixelFormat::Uyvp).unwrap();
        let payload = [0, 0, 0, 0, 0, 0, 0, 2];
        let view = PayloadView::parse(&payload).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            view.placements(&format, &mut out),
            Err(Error::OutsideFrame { line: 0, offset: 2 })
        );
        // An empty segment inside the line is still fine.
        let payload = [0, 0, 0, 0, 0, 0, 0, 0];
        let view = PayloadView::parse(&payload).unwrap();
        assert_eq!(view.placements(&format, &mut out), Ok(0));
        assert_eq!(out, [(0, 0..0)]);
    }

    #[test]
    fn absurd_periods_count_as_unknown() {
        // Found by fuzz target depacketizer: with a period of 1e-308 ticks
        // the gap/period step count saturated to u64::MAX and the frame
        // index overflowed (a panic in debug, indices going back in release).
        let format = VideoFormat::new(32, 4, PixelFormat::Rgb24).unwrap();
        let p = Packetizer::new(format, 100, Ssrc(1)).unwrap();
        let mut all = packets(&p, &frame_of(&format, 0), 0, 0);
        all.extend(packets(&p, &frame_of(&format, 1), 100, 3000));
        all.extend(packets(&p, &frame_of(&format, 3), 300, 9000));
        for period in [1e-308, 0.5, f64::INFINITY, f64::NAN] {
            let mut d = Depacketizer::new(format, Some(period));
            let out = feed(&mut d, &all);
            let kinds: Vec<String> = out
                .iter()
                .map(|o| match o {
                    Output::Frame(f) => format!("f{}", f.index),
                    Output::Lost { first, count } => format!("lost{first}+{count}"),
                })
                .collect();
            assert_eq!(kinds, ["f0", "f1", "lost2+1", "f3"], "period {period}");
        }
    }

    #[test]
    fn bad_packet_sizes() {
        let format = VideoFormat::new(32, 4, PixelFormat::Uyvp).unwrap();
        assert!(Packetizer::new(format, 24, Ssrc(0)).is_err());
        assert!(Packetizer::new(format, 25, Ssrc(0)).is_ok());
        assert!(Packetizer::new(format, 8961, Ssrc(0)).is_err());
    }
}
