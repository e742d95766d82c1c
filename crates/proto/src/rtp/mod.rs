//! RTP (RFC 3550) fixed header: a checked read-only view and a writer.
//!
//! The view follows smoltcp's wire style: `RtpPacket::new_checked` validates
//! lengths once, after which every accessor is infallible and never panics,
//! whatever bytes arrived from the network.

/// Why bytes are not an RTP packet, or a header does not fit its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Input shorter than the header it announces.
    #[error("RTP packet truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// RTP version other than 2.
    #[error("RTP version {0}, expected 2")]
    Version(u8),
    /// RTP padding count of zero or larger than the payload.
    #[error("RTP padding of {0} bytes does not fit the packet")]
    BadPadding(usize),
    /// Output buffer too small for the header.
    #[error("buffer too small: {needed} bytes needed for the RTP header")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
    },
}

/// Length of the fixed RTP header (no CSRCs, no extension).
pub const HEADER_LEN: usize = 12;

/// A validated view of one RTP packet.
#[derive(Debug, Clone, Copy)]
pub struct RtpPacket<T: AsRef<[u8]>> {
    buffer: T,
    payload_start: usize,
    payload_end: usize,
}

impl<T: AsRef<[u8]>> RtpPacket<T> {
    /// Checks version, CSRC list, header extension and padding against the
    /// buffer length, so that later accessors cannot read out of bounds.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated {
                needed: HEADER_LEN,
                got: b.len(),
            });
        }
        let version = b[0] >> 6;
        if version != 2 {
            return Err(Error::Version(version));
        }
        let csrc_count = usize::from(b[0] & 0x0f);
        let mut start = HEADER_LEN + 4 * csrc_count;
        if b.len() < start {
            return Err(Error::Truncated {
                needed: start,
                got: b.len(),
            });
        }
        if b[0] & 0x10 != 0 {
            // Extension: 16-bit profile, 16-bit length in 32-bit words.
            if b.len() < start + 4 {
                return Err(Error::Truncated {
                    needed: start + 4,
                    got: b.len(),
                });
            }
            let words = usize::from(u16::from_be_bytes([b[start + 2], b[start + 3]]));
            start += 4 + 4 * words;
            if b.len() < start {
                return Err(Error::Truncated {
                    needed: start,
                    got: b.len(),
                });
            }
        }
        let mut end = b.len();
        if b[0] & 0x20 != 0 {
            let pad = usize::from(b[end - 1]);
            if pad == 0 || end - start < pad {
                return Err(Error::BadPadding(pad));
            }
            end -= pad;
        }
        Ok(RtpPacket {
            buffer,
            payload_start: start,
            payload_end: end,
        })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The marker bit: for raw video, set on the last packet of a frame.
    pub fn marker(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }

    /// The 7-bit payload type.
    pub fn payload_type(&self) -> u8 {
        self.b()[1] & 0x7f
    }

    /// The low 16 bits of the sequence number.
    pub fn sequence_number(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }

    /// The media timestamp (90 kHz for video).
    pub fn timestamp(&self) -> u32 {
        u32::from_be_bytes([self.b()[4], self.b()[5], self.b()[6], self.b()[7]])
    }

    /// The synchronization source identifier.
    pub fn ssrc(&self) -> u32 {
        u32::from_be_bytes([self.b()[8], self.b()[9], self.b()[10], self.b()[11]])
    }

    /// The payload, after CSRCs and extension and without padding.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.payload_start..self.payload_end]
    }
}

impl<'a> RtpPacket<&'a [u8]> {
    /// The payload, borrowed for the buffer's lifetime rather than the
    /// view's, so it can outlive the view.
    pub fn payload_slice(&self) -> &'a [u8] {
        &self.buffer[self.payload_start..self.payload_end]
    }
}

/// The fields nagare writes into a fixed 12-byte RTP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    /// Marker bit.
    pub marker: bool,
    /// Payload type (0..=127).
    pub payload_type: u8,
    /// Low 16 bits of the sequence number.
    pub sequence_number: u16,
    /// Media timestamp.
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
}

impl RtpHeader {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// Returns `Error::BufferTooSmall` instead of panicking on a short buffer.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf
            .get_mut(..HEADER_LEN)
            .ok_or(Error::BufferTooSmall { needed: HEADER_LEN })?;
        out[0] = 0x80;
        out[1] = (u8::from(self.marker) << 7) | (self.payload_type & 0x7f);
        out[2..4].copy_from_slice(&self.sequence_number.to_be_bytes());
        out[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = RtpHeader {
            marker: true,
            payload_type: 96,
            sequence_number: 0xbeef,
            timestamp: 0xdead_cafe,
            ssrc: 0x0102_0304,
        };
        let mut buf = [0u8; 20];
        assert_eq!(h.write(&mut buf).unwrap(), 12);
        let p = RtpPacket::new_checked(&buf[..]).unwrap();
        assert!(p.marker());
        assert_eq!(p.payload_type(), 96);
        assert_eq!(p.sequence_number(), 0xbeef);
        assert_eq!(p.timestamp(), 0xdead_cafe);
        assert_eq!(p.ssrc(), 0x0102_0304);
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn hostile_headers_are_rejected() {
        assert!(RtpPacket::new_checked(&[0x80u8; 5][..]).is_err());
        // version 1
        assert!(RtpPacket::new_checked(&[0x40u8; 12][..]).is_err());
        // 15 CSRCs announced, none present
        let mut b = [0u8; 12];
        b[0] = 0x8f;
        assert!(RtpPacket::new_checked(&b[..]).is_err());
        // extension announcing 65535 words
        let mut b = [0u8; 16];
        b[0] = 0x90;
        b[14] = 0xff;
        b[15] = 0xff;
        assert!(RtpPacket::new_checked(&b[..]).is_err());
        // padding larger than the payload
        let mut b = [0u8; 14];
        b[0] = 0xa0;
        b[13] = 200;
        assert!(RtpPacket::new_checked(&b[..]).is_err());
    }

    #[test]
    fn padding_and_csrcs_are_skipped() {
        let mut b = [0u8; 12 + 4 + 3 + 2];
        b[0] = 0xa1; // padding, 1 CSRC
        b[16..19].copy_from_slice(b"abc");
        b[19] = 0;
        b[20] = 2;
        let p = RtpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), b"abc");
    }
}
