//! Receiving straight into frame memory: where the next datagrams of a
//! stream should land, and whether they did.
//!
//! A stream packed as nagare packs it (a uniform [`Packetizer`]: every
//! packet but a frame's last exactly `packet_size` bytes, one contiguous
//! frame range each) is predictable: after packet `i` of a frame comes
//! packet `i + 1`, with the next sequence number, the same timestamp,
//! headers the layout knows and data for the next range of the frame. So
//! a read can be planned as alternating slices, `[headers of packet
//! i][frame bytes of packet i][padding of packet i]...`, followed by a
//! spill buffer for anything beyond the plan. The kernel fills them in
//! order, one GRO segment after another, and where the prediction held,
//! each packet's data is already in its frame: nothing is copied.
//!
//! After the read, each planned packet is verified (length, every header
//! byte, padding). The verified prefix is committed in place; the rest
//! of the read (a lost or reordered packet, a foreign one, a frame
//! boundary, any other layout) is gathered back into one buffer from
//! where it landed and goes through the copying path, so frames come out
//! byte-identical either way. A plan only aims at frame bytes no packet
//! has written yet (see [`super::coverage`]), so a packet that landed in
//! the wrong place overwrote nothing: the bytes it left there are
//! overwritten by their own packet, or zeroed as a hole, like any bytes
//! a recycled buffer held.
//!
//! The layout is learned from the stream's packets (its packet size, SSRC
//! and payload type), so nothing has to be configured; a stream packed
//! any other way never verifies and is simply copied.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::ops::Range;

use super::format::VideoFormat;
use super::st2110_20::{Packetizer, PayloadView};
use crate::rtp;
use crate::units::{ExtSeq, MediaTime, Nanos, Ssrc};

/// Most bytes one read brings: a GRO batch, like a GSO train, is at most
/// 64 KiB. The spill buffer holds a whole one, so nothing is truncated.
pub const MAX_READ: usize = 65_536;

/// Most packets one plan covers (the kernel's GSO and GRO segment limit).
const MAX_SEGMENTS: usize = 64;

/// Packet sizes tried as a layout before giving up on a stream packed
/// some other way (building a layout walks a whole frame).
const MAX_TRIES: u32 = 16;

/// What one read brought.
#[derive(Debug, Clone, Copy)]
pub struct Landed {
    /// Bytes written across the slices, in order.
    pub len: usize,
    /// GRO segment size: every segment is this long but the last, which
    /// may be shorter (`len` for a single datagram; 0 counts as `len`).
    pub segment: usize,
    /// The kernel's receive stamp.
    pub at: Nanos,
    /// Who sent it.
    pub from: Option<SocketAddr>,
}

/// Counters of a [`Landing`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LandingStats {
    /// Packets whose data the kernel wrote straight into their frame.
    pub in_place: u64,
    /// Packets gathered from where they landed and copied.
    pub copied: u64,
    /// Reads made with a plan.
    pub planned_reads: u64,
    /// Reads made without one (no layout yet, a frame boundary, bytes
    /// already written where the next packets would go).
    pub unplanned_reads: u64,
}

/// The stream's packet layout, learned from its packets.
#[derive(Debug)]
struct Layout {
    packets: Packetizer,
    payload_type: u8,
}

/// The packet the stream should send next.
#[derive(Debug, Clone, Copy)]
struct Next {
    /// Its 32-bit sequence number (ESN and RTP sequence number).
    wire: u32,
    timestamp: u32,
    /// Its place in the frame.
    index: usize,
}

/// Packets `index..index + count` of the frame at `timestamp`, expected
/// with sequence numbers from `wire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// RTP timestamp of the frame.
    pub timestamp: u32,
    /// First packet's place in the frame.
    pub index: usize,
    /// Packets planned.
    pub count: usize,
    /// First packet's 32-bit sequence number.
    pub wire: u32,
}

/// A planned packet that arrived as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Its 32-bit sequence number.
    pub wire: u32,
    /// Its RTP timestamp.
    pub timestamp: u32,
    /// Bytes of the datagram.
    pub len: usize,
    /// The frame bytes its data was written to.
    pub range: Range<usize>,
}

/// Plans reads into frame memory and verifies them (see the module docs).
#[derive(Debug)]
pub struct Landing {
    layout: Option<Layout>,
    /// Packet size and SSRC last built a layout for.
    tried: Option<(usize, Ssrc)>,
    tries: u32,
    next: Option<Next>,
    heads: Vec<u8>,
    pads: Vec<u8>,
    spill: Vec<u8>,
    gathered: Vec<u8>,
    expect: Vec<u8>,
    stats: LandingStats,
}

impl Default for Landing {
    fn default() -> Landing {
        Landing::new()
    }
}

impl Landing {
    /// No layout known yet.
    pub fn new() -> Landing {
        Landing {
            layout: None,
            tried: None,
            tries: 0,
            next: None,
            heads: Vec::new(),
            pads: Vec::new(),
            spill: vec![0; MAX_READ],
            gathered: Vec::with_capacity(MAX_READ),
            expect: Vec::new(),
            stats: LandingStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> LandingStats {
        self.stats
    }

    /// Forgets what comes next (a new take: its sequence numbers and
    /// frames start over).
    pub fn reset(&mut self) {
        self.next = None;
    }

    /// Learns from a packet of the stream that went through the copying
    /// path and was the newest so far: the layout, if it is one nagare's
    /// packetizer makes, and so the packet after it.
    pub fn learn(&mut self, format: VideoFormat, ssrc: Ssrc, bytes: &[u8]) {
        self.next = None;
        let Ok(pkt) = rtp::RtpPacket::new_checked(bytes) else {
            return;
        };
        let esn = pkt
            .payload_slice()
            .get(..2)
            .map_or(0, |b| u32::from(u16::from_be_bytes([b[0], b[1]])));
        let wire = (esn << 16) | u32::from(pkt.sequence_number());
        let (timestamp, pt) = (pkt.timestamp(), pkt.payload_type());
        let Some(start) = first_byte(format, bytes) else {
            return;
        };
        let fits = |l: &Layout, me: &mut Vec<u8>| {
            l.packets.ssrc() == ssrc
                && l.payload_type == pt
                && l.packets
                    .packet_at(start)
                    .is_some_and(|i| matches(l, i, wire, timestamp, bytes, me))
        };
        if !self
            .layout
            .as_ref()
            .is_some_and(|l| fits(l, &mut self.expect))
        {
            let want = (bytes.len(), ssrc);
            if self.tried == Some(want) || self.tries >= MAX_TRIES {
                return;
            }
            self.tried = Some(want);
            self.tries += 1;
            let Ok(packets) = Packetizer::new(format, bytes.len(), ssrc) else {
                return;
            };
            let l = Layout {
                packets: packets.uniform(),
                payload_type: pt,
            };
            if !fits(&l, &mut self.expect) {
                return;
            }
            self.layout = Some(l);
        }
        let Some(l) = &self.layout else {
            return;
        };
        let Some(index) = l.packets.packet_at(start) else {
            return;
        };
        self.next = (index + 1 < l.packets.packets_per_frame()).then_some(Next {
            wire: wire.wrapping_add(1),
            timestamp,
            index: index + 1,
        });
    }

    /// The next read's plan for a stream locked on `stream`: the rest of
    /// the frame's packets, as many as one read brings. `None` when the
    /// next packet is not known.
    pub fn plan(&self, stream: Option<Ssrc>) -> Option<Plan> {
        let (l, next) = (self.layout.as_ref()?, self.next?);
        if stream != Some(l.packets.ssrc()) {
            return None;
        }
        let count = (l.packets.packets_per_frame() - next.index)
            .min(MAX_READ / l.packets.packet_size())
            .min(MAX_SEGMENTS);
        (count > 0).then_some(Plan {
            timestamp: next.timestamp,
            index: next.index,
            count,
            wire: next.wire,
        })
    }

    /// The frame bytes `plan` aims at (one range: consecutive packets
    /// carry consecutive bytes).
    pub fn region(&self, plan: &Plan) -> Range<usize> {
        let Some(l) = self.layout.as_ref().filter(|_| plan.count > 0) else {
            return 0..0;
        };
        let p = &l.packets;
        p.data_range(plan.index).start..p.data_range(plan.index + plan.count - 1).end
    }

    /// The slices of one read: with a plan, each planned packet's headers,
    /// its bytes of `region` (the frame bytes [`Landing::region`] names)
    /// and its padding; then the spill buffer. Without one, the spill
    /// buffer alone.
    pub fn slices<'a>(
        &'a mut self,
        plan: Option<&Plan>,
        region: Option<&'a mut [u8]>,
    ) -> Vec<IoSliceMut<'a>> {
        let Landing {
            layout,
            heads,
            pads,
            spill,
            ..
        } = self;
        let mut out = Vec::with_capacity(3 * MAX_SEGMENTS + 1);
        if let (Some(plan), Some(l), Some(mut region)) = (plan, layout.as_ref(), region) {
            let p = &l.packets;
            let span = plan.index..plan.index + plan.count;
            heads.resize(span.clone().map(|i| p.header_len(i)).sum(), 0);
            pads.resize(span.clone().map(|i| p.padding(i).len()).sum(), 0);
            let (mut h, mut d) = (&mut heads[..], &mut pads[..]);
            for i in span {
                let (head, rest) = std::mem::take(&mut h).split_at_mut(p.header_len(i));
                h = rest;
                let data_len = p.data_range(i).len();
                let (data, rest) = std::mem::take(&mut region).split_at_mut(data_len);
                region = rest;
                let (pad, rest) = std::mem::take(&mut d).split_at_mut(p.padding(i).len());
                d = rest;
                out.push(IoSliceMut::new(head));
                out.push(IoSliceMut::new(data));
                if !pad.is_empty() {
                    out.push(IoSliceMut::new(pad));
                }
            }
        }
        out.push(IoSliceMut::new(&mut spill[..]));
        out
    }

    /// Counts a read made with a plan or without.
    pub fn note_read(&mut self, planned: bool) {
        if planned {
            self.stats.planned_reads += 1;
        } else {
            self.stats.unplanned_reads += 1;
        }
    }

    /// How many of `plan`'s packets arrived as planned, in order from the
    /// first, and the bytes of the read they took.
    pub fn verify(&mut self, plan: &Plan, landed: &Landed) -> (usize, usize) {
        let Some(l) = &self.layout else {
            return (0, 0);
        };
        let p = &l.packets;
        let segment = if landed.segment == 0 {
            landed.len
        } else {
            landed.segment
        };
        let (mut at, mut head_at, mut pad_at) = (0, 0, 0);
        for j in 0..plan.count {
            let i = plan.index + j;
            let len = segment.min(landed.len - at);
            let (h, pad) = (p.header_len(i), p.padding(i));
            if at >= landed.len
                || len != p.packet_len(i)
                || !fill_header(
                    l,
                    i,
                    plan.wire.wrapping_add(j as u32),
                    plan.timestamp,
                    &mut self.expect,
                )
                || self.heads[head_at..head_at + h] != self.expect[..h]
                || self.pads[pad_at..pad_at + pad.len()] != *pad
            {
                return (j, at);
            }
            at += len;
            head_at += h;
            pad_at += pad.len();
        }
        (plan.count, at)
    }

    /// Packet `j` of `plan`, verified.
    pub fn verified(&self, plan: &Plan, j: usize) -> Option<Verified> {
        let p = &self.layout.as_ref()?.packets;
        let i = plan.index + j;
        Some(Verified {
            wire: plan.wire.wrapping_add(j as u32),
            timestamp: plan.timestamp,
            len: p.packet_len(i),
            range: p.data_range(i),
        })
    }

    /// Notes that packet `j` of `plan` went in place: the one after it
    /// comes next.
    pub fn advance(&mut self, plan: &Plan, j: usize) {
        self.stats.in_place += 1;
        let ppf = self
            .layout
            .as_ref()
            .map_or(0, |l| l.packets.packets_per_frame());
        let index = plan.index + j + 1;
        self.next = (index < ppf).then_some(Next {
            wire: plan.wire.wrapping_add(j as u32 + 1),
            timestamp: plan.timestamp,
            index,
        });
    }

    /// Bytes `from..len` of the read, gathered from the slices they
    /// landed in (`region` as given to [`Landing::slices`]) into one
    /// buffer, which [`Landing::take_gathered`] hands out.
    pub fn gather(&mut self, plan: Option<&Plan>, region: Option<&[u8]>, from: usize, len: usize) {
        let Landing {
            layout,
            heads,
            pads,
            spill,
            gathered,
            ..
        } = self;
        gathered.clear();
        let mut at = 0;
        let mut take = |piece: &[u8]| {
            let (lo, hi) = (from.max(at), len.min(at + piece.len()));
            if lo < hi {
                gathered.extend_from_slice(&piece[lo - at..hi - at]);
            }
            at += piece.len();
        };
        if let (Some(plan), Some(l), Some(region)) = (plan, layout.as_ref(), region) {
            let p = &l.packets;
            let (mut h, mut d, mut r) = (0, 0, 0);
            for i in plan.index..plan.index + plan.count {
                let (hl, dl, pl) = (p.header_len(i), p.data_range(i).len(), p.padding(i).len());
                take(&heads[h..h + hl]);
                take(&region[r..r + dl]);
                take(&pads[d..d + pl]);
                (h, r, d) = (h + hl, r + dl, d + pl);
            }
        }
        take(&spill[..]);
    }

    /// The gathered bytes (give the buffer back with
    /// [`Landing::put_gathered`]), counted as copied packets of
    /// `segment` bytes.
    pub fn take_gathered(&mut self, segment: usize) -> Vec<u8> {
        let g = std::mem::take(&mut self.gathered);
        self.stats.copied += g.len().div_ceil(segment.max(1)).max(1) as u64;
        g
    }

    /// Gives the gathered buffer back for the next read.
    pub fn put_gathered(&mut self, buf: Vec<u8>) {
        self.gathered = buf;
    }
}

/// The frame byte a packet's first sample row lands at.
fn first_byte(format: VideoFormat, bytes: &[u8]) -> Option<usize> {
    let view = PayloadView::parse(bytes.get(rtp::HEADER_LEN..)?).ok()?;
    let (srd, _) = view.srds().next()?;
    let pf = format.pixel_format;
    let offset = usize::from(srd.offset) / pf.pgroup_pixels() * pf.pgroup_bytes();
    Some(usize::from(srd.line) * format.line_bytes() + offset)
}

/// Writes the headers packet `index` would carry into `out`; false when
/// the layout has no such packet.
fn fill_header(l: &Layout, index: usize, wire: u32, timestamp: u32, out: &mut Vec<u8>) -> bool {
    let p = &l.packets;
    out.resize(p.header_len(index), 0);
    if p.write_header(index, ExtSeq(u64::from(wire)), MediaTime(timestamp), out)
        .is_err()
    {
        return false;
    }
    out[1] = (out[1] & 0x80) | (l.payload_type & 0x7f);
    true
}

/// Whether `bytes` is packet `index` of layout `l`, exactly.
fn matches(
    l: &Layout,
    index: usize,
    wire: u32,
    timestamp: u32,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    let p = &l.packets;
    let (h, pad) = (p.header_len(index), p.padding(index));
    bytes.len() == p.packet_len(index)
        && fill_header(l, index, wire, timestamp, out)
        && bytes[..h] == out[..h]
        && bytes[bytes.len() - pad.len()..] == *pad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::format::{FrameRate, PixelFormat};
    use crate::video::receiver::{Config, Datagram, Event, Incomplete, Receiver};
    use proptest::prelude::*;

    /// Lines of 160 bytes and 200-byte packets (21 a frame): most
    /// packets carry the end of one line and the start of the next (two
    /// SRDs), and the uniform layout pads some.
    fn format() -> VideoFormat {
        VideoFormat::new(64, 24, PixelFormat::Uyvp).unwrap()
    }

    fn frame(seed: u8) -> Vec<u8> {
        (0..format().frame_bytes())
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Packets of frames `0..n` as nagare sends them.
    fn stream(n: u64, ssrc: u32, uniform: bool) -> Vec<Vec<u8>> {
        let mut p = Packetizer::new(format(), 200, Ssrc(ssrc)).unwrap();
        if uniform {
            p = p.uniform();
        }
        let rate = FrameRate::new(30, 1).unwrap();
        let ppf = p.packets_per_frame() as u64;
        (0..n)
            .flat_map(|f| {
                let ts = MediaTime(rate.rtp_timestamp(f));
                p.frame_packets(&frame(f as u8), ExtSeq(65_000 + f * ppf), ts)
                    .unwrap()
            })
            .collect()
    }

    fn receiver() -> Receiver {
        let mut r = Receiver::new(Config {
            format: format(),
            rate: Some(FrameRate::new(30, 1).unwrap()),
            incomplete: Incomplete::Keep,
            frame_limit: None,
        });
        r.enable_landing();
        r
    }

    /// Datagrams in GRO batches as the kernel makes them: equal sizes,
    /// but the last may be shorter; at most `most` each.
    fn batches(datagrams: &[Vec<u8>], most: &[usize]) -> Vec<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut k = 0;
        for d in datagrams {
            let open = out.last().is_some_and(|b| {
                b.len() < most[k % most.len()].max(1)
                    && b.last().is_some_and(|l| l.len() == b[0].len())
                    && d.len() <= b[0].len()
                    && !d.is_empty()
            });
            if open {
                out.last_mut().unwrap().push(d.clone());
            } else {
                k += 1;
                out.push(vec![d.clone()]);
            }
        }
        out
    }

    /// Writes one batch across `slices` in order, as `recvmsg` does.
    fn kernel(slices: &mut [IoSliceMut<'_>], batch: &[Vec<u8>], at: Nanos) -> Landed {
        let bytes = batch.concat();
        let mut done = 0;
        for s in slices.iter_mut() {
            let n = s.len().min(bytes.len() - done);
            s[..n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        assert_eq!(done, bytes.len(), "the spill buffer holds any batch");
        Landed {
            len: done,
            segment: batch[0].len(),
            at,
            from: None,
        }
    }

    /// Events as comparable text, frames with their bytes.
    fn drain(r: &mut Receiver) -> Vec<(String, Vec<u8>)> {
        std::iter::from_fn(|| r.poll_event())
            .map(|e| match e {
                Event::Frame(f) => (format!("f{} {}", f.index, f.complete), f.data),
                other => (format!("{other:?}"), Vec::new()),
            })
            .collect()
    }

    /// The same batches through the copying path and through landing:
    /// events, frame bytes and counters must be identical.
    fn same_both_ways(batches: &[Vec<Vec<u8>>]) -> LandingStats {
        let (mut copying, mut landing) = (receiver(), receiver());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (k, batch) in batches.iter().enumerate() {
            let at = Nanos::from_micros(50 * k as u64);
            for bytes in batch {
                copying.handle_input(at, Datagram { bytes, from: None });
            }
            let got = landing
                .land(|s| Ok::<_, ()>(Some(kernel(s, batch, at))))
                .unwrap();
            assert!(got.is_some());
            a.extend(drain(&mut copying));
            b.extend(drain(&mut landing));
        }
        copying.finish();
        landing.finish();
        a.extend(drain(&mut copying));
        b.extend(drain(&mut landing));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.0, y.0);
            assert!(x.1 == y.1, "{}: bytes differ", x.0);
        }
        assert_eq!(copying.stats(), landing.stats());
        landing.landing_stats()
    }

    #[test]
    fn an_in_order_stream_lands_in_place() {
        let pk = stream(4, 5, true);
        let s = same_both_ways(&batches(&pk, &[4]));
        // All but the packets that taught the layout and each frame's
        // first batch.
        assert!(s.in_place as usize >= pk.len() / 2, "{s:?} of {}", pk.len());
        assert_eq!(s.in_place + s.copied, pk.len() as u64);
    }

    #[test]
    fn a_stream_packed_without_padding_is_the_same_both_ways() {
        // Unpadded packets of 196 bytes are the uniform layout of that
        // size: learned and landed like any other.
        let pk = stream(3, 5, false);
        let s = same_both_ways(&batches(&pk, &[1]));
        assert_eq!(s.in_place + s.copied, pk.len() as u64);
    }

    #[test]
    fn a_stream_in_reverse_is_copied() {
        let mut pk = stream(3, 5, true);
        pk.reverse();
        let s = same_both_ways(&batches(&pk, &[3]));
        assert_eq!((s.in_place, s.copied), (0, pk.len() as u64));
    }

    #[test]
    fn nothing_to_read_books_nothing() {
        let mut r = receiver();
        let got = r.land(|_| Ok::<_, ()>(None)).unwrap();
        assert!(got.is_none());
        assert_eq!(r.stats().packets_received, 0);
        assert_eq!(r.land(|_| Err::<Option<Landed>, _>(7)).unwrap_err(), 7);
    }

    #[test]
    fn a_lost_packet_inside_a_batch_is_moved_to_its_place() {
        let mut pk = stream(3, 5, true);
        pk.remove(pk.len() / 2);
        let s = same_both_ways(&batches(&pk, &[4]));
        assert!(s.in_place > 0 && s.copied > 0, "{s:?}");
    }

    #[derive(Debug, Clone)]
    enum Harm {
        Drop,
        Duplicate,
        SwapWithNext,
        Foreign,
        Garbage,
        Truncate,
    }

    fn harm() -> impl Strategy<Value = Harm> {
        prop_oneof![
            Just(Harm::Drop),
            Just(Harm::Duplicate),
            Just(Harm::SwapWithNext),
            Just(Harm::Foreign),
            Just(Harm::Garbage),
            Just(Harm::Truncate),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Loss, duplicates, reordering, foreign and broken datagrams, in
        /// GRO batches of any size: landing gives the copying path's
        /// frames, bytes and counters exactly.
        #[test]
        fn landing_matches_copying(
            frames in 2u64..5,
            harms in prop::collection::vec((any::<prop::sample::Index>(), harm()), 0..6),
            most in prop::collection::vec(1usize..9, 1..6),
        ) {
            let mut pk = stream(frames, 5, true);
            let foreign = stream(1, 6, true);
            for (at, h) in harms {
                let k = at.index(pk.len());
                match h {
                    Harm::Drop => { pk.remove(k); }
                    Harm::Duplicate => { let d = pk[k].clone(); pk.insert(k, d); }
                    Harm::SwapWithNext if k + 1 < pk.len() => pk.swap(k, k + 1),
                    Harm::SwapWithNext => {}
                    Harm::Foreign => pk.insert(k, foreign[k % foreign.len()].clone()),
                    Harm::Garbage => pk.insert(k, vec![0x80; 30]),
                    Harm::Truncate => { let n = pk[k].len() / 2; pk[k].truncate(n); }
                }
                if pk.is_empty() {
                    break;
                }
            }
            same_both_ways(&batches(&pk, &most));
        }
    }
}
