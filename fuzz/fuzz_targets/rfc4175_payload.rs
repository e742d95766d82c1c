//! `PayloadView::parse`, `srds()` and `placements()` on an arbitrary RTP
//! payload, checked against a small format picked by the first three
//! bytes. Placements that are accepted must be safe to copy into a frame
//! buffer exactly as the depacketizer does.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{Reader, small_format};
use nagare_proto::video::st2110_20::{ESN_LEN, PayloadView, SRD_LEN};

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = small_format(r.u8(), r.u8(), r.u8());
    let payload = r.rest();

    let Ok(view) = PayloadView::parse(payload) else {
        return;
    };
    assert_eq!(view.esn, u16::from_be_bytes([payload[0], payload[1]]));

    // Framing: ESN, n >= 1 headers, data; every header but the last has
    // the continuation bit, the last has not.
    let srds: Vec<_> = view.srds().collect();
    assert!(!srds.is_empty());
    let header_end = ESN_LEN + SRD_LEN * srds.len();
    assert_eq!(header_end + view.data().len(), payload.len());
    assert_eq!(view.data(), &payload[header_end..]);
    for (k, (srd, field)) in srds.iter().enumerate() {
        let h = &payload[ESN_LEN + SRD_LEN * k..][..SRD_LEN];
        let continued = h[4] & 0x80 != 0;
        assert_eq!(continued, k + 1 < srds.len());
        assert_eq!(srd.length, u16::from_be_bytes([h[0], h[1]]));
        assert_eq!(srd.line, u16::from_be_bytes([h[2], h[3]]) & 0x7fff);
        assert_eq!(srd.offset, u16::from_be_bytes([h[4], h[5]]) & 0x7fff);
        assert_eq!(*field, h[2] & 0x80 != 0);
    }

    // A stale entry must not survive a failed call.
    let mut out = vec![(usize::MAX, 0..1)];
    let Ok(total) = view.placements(&format, &mut out) else {
        return;
    };
    assert_eq!(out.len(), srds.len());
    assert!(total <= view.data().len());
    let frame_bytes = format.frame_bytes();
    let line_bytes = format.line_bytes();
    let pg = format.pixel_format.pgroup_bytes();
    let mut cursor = 0;
    for ((dst, src), (srd, field)) in out.iter().zip(&srds) {
        assert!(!field);
        // Sample data is consumed in order, without gaps.
        assert_eq!(src.start, cursor);
        assert_eq!(src.len(), usize::from(srd.length));
        cursor = src.end;
        // Inside one line of the frame, on pixel-group boundaries.
        assert!(dst + src.len() <= frame_bytes);
        assert_eq!(dst / line_bytes, usize::from(srd.line));
        assert!(dst % line_bytes + src.len() <= line_bytes);
        assert_eq!(dst % pg, 0);
        assert_eq!(src.len() % pg, 0);
    }
    assert_eq!(cursor, total);

    let mut frame = vec![0u8; frame_bytes];
    for (dst, src) in &out {
        frame[*dst..*dst + src.len()].copy_from_slice(&view.data()[src.clone()]);
    }
});
