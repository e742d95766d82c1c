//! Whether bytes are a transport stream at all: a file whose every 188th
//! byte is 0x47 may still be noise. A real stream carries a Program
//! Association Table (PID 0, table_id 0) whose CRC-32 checks out; noise
//! with sync bytes in place passes the packet view, but its chance of a
//! PAT with a valid CRC is one in four billion per candidate.

use crc::{CRC_32_MPEG_2, Crc};

use super::{Error, PACKET_LEN, Packet, Pid};

/// The PID of the Program Association Table.
pub const PAT_PID: Pid = Pid(0);

const MPEG_CRC: Crc<u32> = Crc::<u32>::new(&CRC_32_MPEG_2);

/// What [`check_stream`] found in the head of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCheck {
    /// Whole packets looked at.
    pub packets: usize,
    /// The first packet that carries a valid PAT section.
    pub pat_at: usize,
}

/// Checks that `head` (whole 188-byte packets from the start of a file)
/// is a transport stream: every packet a valid TS packet (else that
/// packet's error), and a PAT with a valid CRC among them (else
/// [`Error::NoProgramTable`]).
pub fn check_stream(head: &[u8]) -> Result<StreamCheck, Error> {
    let packets = head.len() / PACKET_LEN;
    let mut pat_at = None;
    for (i, bytes) in head.chunks_exact(PACKET_LEN).enumerate() {
        let p = Packet::new_checked(bytes)?;
        if pat_at.is_none() && p.pid() == PAT_PID && p.payload_unit_start() && is_pat(p.payload()) {
            pat_at = Some(i);
        }
    }
    match pat_at {
        Some(pat_at) => Ok(StreamCheck { packets, pat_at }),
        None => Err(Error::NoProgramTable { packets }),
    }
}

/// Whether a payload that starts a section holds a whole PAT section
/// (table_id 0, section syntax set) whose CRC-32 is right.
fn is_pat(payload: &[u8]) -> bool {
    let Some((&pointer, rest)) = payload.split_first() else {
        return false;
    };
    let Some(section) = rest.get(usize::from(pointer)..) else {
        return false;
    };
    let [table_id, b1, b2, ..] = *section else {
        return false;
    };
    let length = (usize::from(b1 & 0x0f) << 8) | usize::from(b2);
    if table_id != 0 || b1 & 0x80 == 0 || length < 9 {
        return false;
    }
    let Some(whole) = section.get(..3 + length) else {
        return false;
    };
    let (body, crc) = whole.split_at(whole.len() - 4);
    MPEG_CRC.checksum(body).to_be_bytes() == crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpegts::synth;
    use crate::splitmix::splitmix64;

    /// A PAT of one program (number 1, PMT on PID 0x1000) in a packet.
    fn pat_packet() -> [u8; PACKET_LEN] {
        let mut section = vec![
            0x00, 0xb0, 13, 0x00, 0x01, 0xc1, 0x00, 0x00, 0x00, 0x01, 0xf0, 0x00,
        ];
        let crc = MPEG_CRC.checksum(&section);
        section.extend_from_slice(&crc.to_be_bytes());
        // Payload from byte 4: pointer_field 0, then the section.
        let mut p = synth::packet(0, 0, None, false, 0xff);
        p[4] = 0;
        p[5..5 + section.len()].copy_from_slice(&section);
        p
    }

    #[test]
    fn a_stream_with_a_pat_passes_and_noise_with_sync_bytes_does_not() {
        let mut ts = synth::stream(50, 1_500_000, 10, 0);
        ts.extend_from_slice(&pat_packet());
        let got = check_stream(&ts).unwrap();
        assert_eq!(
            got,
            StreamCheck {
                packets: 51,
                pat_at: 50
            }
        );
        // Noise with every sync byte in place, and PID 0 starting
        // sections: no CRC matches.
        let mut x = 7u64;
        let mut noise = vec![0u8; 2_000 * PACKET_LEN];
        for (i, b) in noise.iter_mut().enumerate() {
            x = splitmix64(x);
            *b = x as u8;
            match i % PACKET_LEN {
                0 => *b = 0x47,
                1 => *b = 0x40,
                2 => *b = 0x00,
                3 => *b = 0x10 | (*b & 0x0f),
                _ => {}
            }
        }
        assert_eq!(
            check_stream(&noise),
            Err(Error::NoProgramTable { packets: 2_000 })
        );
        // A PAT whose CRC is off by one bit is no PAT.
        let mut bad = pat_packet();
        bad[12] ^= 1;
        assert!(check_stream(&bad).is_err());
        // A lost sync byte is the packet's own error.
        let mut lost = ts.clone();
        lost[PACKET_LEN * 3] = 0x48;
        assert_eq!(check_stream(&lost), Err(Error::SyncByte { found: 0x48 }));
    }
}
