//! Putting 7 TS packets into one datagram: over RTP (RFC 2250, payload
//! type 33, the MP2T format) or bare, as plain UDP (what TSDuck's `-O ip`
//! and multicat send without RTP).

use super::Error;
use super::packet::{PACKET_LEN, SYNC_BYTE};
use super::schedule::{DATAGRAM_LEN, Departure};
use crate::rtp::{HEADER_LEN, RtpHeader};
use crate::units::Ssrc;

/// The static RTP payload type of MPEG-2 transport streams (RFC 3551).
pub const MP2T_PAYLOAD_TYPE: u8 = 33;

/// How TS datagrams are wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encapsulation {
    /// A 12-byte RTP header, payload type 33.
    Rtp,
    /// Nothing: the UDP payload is the TS packets.
    Udp,
}

/// Writes the datagrams of one flow: RTP sequence numbers count on across
/// calls (and across loops of the file), timestamps come from the
/// schedule's PCR-derived 90 kHz time plus a random offset.
#[derive(Debug, Clone)]
pub struct DatagramWriter {
    encapsulation: Encapsulation,
    ssrc: Ssrc,
    sequence: u16,
    timestamp_offset: u32,
}

impl DatagramWriter {
    /// A writer; `first_sequence` and `timestamp_offset` should be random
    /// (RFC 3550 5.1), drawn by the driver.
    pub fn new(
        encapsulation: Encapsulation,
        ssrc: Ssrc,
        first_sequence: u16,
        timestamp_offset: u32,
    ) -> DatagramWriter {
        DatagramWriter {
            encapsulation,
            ssrc,
            sequence: first_sequence,
            timestamp_offset,
        }
    }

    /// The largest datagram this writer produces.
    pub fn max_len(&self) -> usize {
        match self.encapsulation {
            Encapsulation::Rtp => HEADER_LEN + DATAGRAM_LEN,
            Encapsulation::Udp => DATAGRAM_LEN,
        }
    }

    /// The sequence number the next RTP datagram gets.
    pub fn next_sequence(&self) -> u16 {
        self.sequence
    }

    /// Writes the datagram carrying `packets` (1 to 7 whole TS packets,
    /// the ones `departure` times) into `out`; returns its length. The
    /// marker bit stays clear: RFC 2250 gives it no use for MP2T here.
    pub fn write(
        &mut self,
        departure: &Departure,
        packets: &[u8],
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let whole = packets.len() % PACKET_LEN == 0;
        if packets.is_empty() || packets.len() > DATAGRAM_LEN || !whole {
            return Err(Error::DatagramLength { len: packets.len() });
        }
        if let Some(bad) = packets.chunks(PACKET_LEN).find(|p| p[0] != SYNC_BYTE) {
            return Err(Error::SyncByte { found: bad[0] });
        }
        let header = match self.encapsulation {
            Encapsulation::Rtp => HEADER_LEN,
            Encapsulation::Udp => 0,
        };
        let needed = header + packets.len();
        let got = out.len();
        let out = out
            .get_mut(..needed)
            .ok_or(Error::BufferTooSmall { needed, got })?;
        if self.encapsulation == Encapsulation::Rtp {
            let h = RtpHeader {
                marker: false,
                payload_type: MP2T_PAYLOAD_TYPE,
                sequence_number: self.sequence,
                timestamp: departure.media_time.0.wrapping_add(self.timestamp_offset),
                ssrc: self.ssrc.0,
            };
            h.write(out)
                .map_err(|_| Error::BufferTooSmall { needed, got })?;
            self.sequence = self.sequence.wrapping_add(1);
        }
        out[header..].copy_from_slice(packets);
        Ok(needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpegts::synth;
    use crate::rtp::RtpPacket;
    use crate::units::{MediaTime, Nanos};

    fn departure(media: u32) -> Departure {
        Departure {
            datagram: 0,
            at: Nanos::ZERO,
            media_time: MediaTime(media),
        }
    }

    #[test]
    fn rtp_mp2t_datagrams_carry_seven_packets_behind_a_pt33_header() {
        let ts = synth::stream(14, 6_000_000, 5, 0);
        let mut w = DatagramWriter::new(Encapsulation::Rtp, Ssrc(0xabcd), 65535, 10);
        let mut buf = [0u8; 1400];
        let n = w
            .write(&departure(u32::MAX), &ts[..DATAGRAM_LEN], &mut buf)
            .unwrap();
        assert_eq!(n, 12 + 1316);
        let p = RtpPacket::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.payload_type(), 33);
        assert!(!p.marker());
        assert_eq!(p.sequence_number(), 65535);
        assert_eq!(p.timestamp(), 9, "wraps");
        assert_eq!(p.ssrc(), 0xabcd);
        assert_eq!(p.payload(), &ts[..DATAGRAM_LEN]);
        let n = w
            .write(
                &departure(0),
                &ts[DATAGRAM_LEN..DATAGRAM_LEN + 188],
                &mut buf,
            )
            .unwrap();
        assert_eq!(n, 200);
        assert_eq!(
            RtpPacket::new_checked(&buf[..n]).unwrap().sequence_number(),
            0
        );
    }

    #[test]
    fn plain_udp_is_the_packets_alone() {
        let ts = synth::stream(7, 6_000_000, 5, 0);
        let mut w = DatagramWriter::new(Encapsulation::Udp, Ssrc(1), 0, 0);
        let mut buf = [0u8; 1316];
        assert_eq!(w.write(&departure(0), &ts, &mut buf), Ok(1316));
        assert_eq!(&buf[..], &ts[..]);
        assert_eq!(w.next_sequence(), 0);
    }

    #[test]
    fn bad_datagrams_are_refused() {
        let ts = synth::stream(8, 6_000_000, 5, 0);
        let mut w = DatagramWriter::new(Encapsulation::Rtp, Ssrc(1), 0, 0);
        let mut buf = [0u8; 2000];
        let d = departure(0);
        assert_eq!(
            w.write(&d, &[], &mut buf),
            Err(Error::DatagramLength { len: 0 })
        );
        assert_eq!(
            w.write(&d, &ts[..100], &mut buf),
            Err(Error::DatagramLength { len: 100 })
        );
        assert_eq!(
            w.write(&d, &ts, &mut buf),
            Err(Error::DatagramLength { len: 1504 })
        );
        let mut bad = ts[..188].to_vec();
        bad[0] = 0;
        assert_eq!(
            w.write(&d, &bad, &mut buf),
            Err(Error::SyncByte { found: 0 })
        );
        assert_eq!(
            w.write(&d, &ts[..188], &mut buf[..150]),
            Err(Error::BufferTooSmall {
                needed: 200,
                got: 150
            })
        );
        assert_eq!(w.next_sequence(), 0, "refusals use no sequence number");
    }
}
