//! `RtpPacket::new_checked` on arbitrary bytes: it must never panic, every
//! accessor of an accepted packet must be infallible, and the payload it
//! finds must match an independent reading of RFC 3550's header rules.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::rtp::{HEADER_LEN, RtpHeader, RtpPacket};

/// Where the payload lies by RFC 3550 §5.1/§5.3.1, or None if the header
/// does not fit.
fn expected_payload(b: &[u8]) -> Option<(usize, usize)> {
    if b.len() < HEADER_LEN || b[0] >> 6 != 2 {
        return None;
    }
    let mut start = HEADER_LEN + 4 * usize::from(b[0] & 0x0f);
    if b[0] & 0x10 != 0 {
        let ext = b.get(start..start + 4)?;
        start += 4 + 4 * usize::from(u16::from_be_bytes([ext[2], ext[3]]));
    }
    if start > b.len() {
        return None;
    }
    let mut end = b.len();
    if b[0] & 0x20 != 0 {
        let pad = usize::from(b[end - 1]);
        if pad == 0 || pad > end - start {
            return None;
        }
        end -= pad;
    }
    Some((start, end))
}

fuzz_target!(|data: &[u8]| {
    let parsed = RtpPacket::new_checked(data);
    let expected = expected_payload(data);
    let Ok(p) = parsed else {
        assert!(expected.is_none(), "rejected a valid header: {parsed:?}");
        return;
    };
    let (start, end) = expected.expect("accepted a header RFC 3550 rejects");

    let payload = p.payload();
    let offset = payload.as_ptr() as usize - data.as_ptr() as usize;
    assert_eq!((offset, offset + payload.len()), (start, end));

    assert_eq!(p.marker(), data[1] & 0x80 != 0);
    assert_eq!(p.payload_type(), data[1] & 0x7f);
    assert!(p.payload_type() < 128);
    assert_eq!(p.sequence_number(), u16::from_be_bytes([data[2], data[3]]));
    assert_eq!(
        p.timestamp(),
        u32::from_be_bytes([data[4], data[5], data[6], data[7]])
    );
    assert_eq!(
        p.ssrc(),
        u32::from_be_bytes([data[8], data[9], data[10], data[11]])
    );

    // Rewriting the fields as a plain 12-byte header in front of the same
    // payload reads back identically.
    let header = RtpHeader {
        marker: p.marker(),
        payload_type: p.payload_type(),
        sequence_number: p.sequence_number(),
        timestamp: p.timestamp(),
        ssrc: p.ssrc(),
    };
    let mut buf = vec![0u8; HEADER_LEN + payload.len()];
    assert_eq!(header.write(&mut buf), Ok(HEADER_LEN));
    buf[HEADER_LEN..].copy_from_slice(payload);
    let q = RtpPacket::new_checked(&buf[..]).expect("rewritten header parses");
    assert_eq!(q.marker(), p.marker());
    assert_eq!(q.payload_type(), p.payload_type());
    assert_eq!(q.sequence_number(), p.sequence_number());
    assert_eq!(q.timestamp(), p.timestamp());
    assert_eq!(q.ssrc(), p.ssrc());
    assert_eq!(q.payload(), payload);

    // A short buffer is refused, never written past.
    let mut short = vec![0u8; usize::from(data[0]) % HEADER_LEN];
    assert!(header.write(&mut short).is_err());
});
