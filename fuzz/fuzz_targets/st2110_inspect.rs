//! Any bytes as a datagram offered to `st2110_21::inspect::{rtp, payload}`,
//! the checks every datagram `analyze` sees goes through before it is judged:
//! no panic, and what it takes as RFC 4175 video announces no more sample
//! bytes than it carries; the raster its headers describe is recorded for
//! every pixel format and held against a size without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::video::PixelFormat;
use nagare_proto::video::st2110_21::RasterSeen;
use nagare_proto::video::st2110_21::inspect::{payload, rtp};

fuzz_target!(|data: &[u8]| {
    let Ok(pkt) = rtp(data) else {
        return;
    };
    let Ok(view) = payload(pkt.payload_type(), pkt.payload()) else {
        return;
    };
    assert!(pkt.payload_type() >= 96);
    let announced: usize = view.srds().map(|(s, _)| usize::from(s.length)).sum();
    assert!(announced <= view.data().len());
    assert!(view.srds().all(|(s, _)| s.length > 0));
    for format in PixelFormat::ALL.map(Some).into_iter().chain([None]) {
        let mut raster = RasterSeen::default();
        raster.record(&view, format);
        let lines = raster.lines.expect("a header was seen");
        assert!((1..=0x8000).contains(&lines));
        for whole in [false, true] {
            if let Some(m) = raster.check(Some(1920), 1080, whole) {
                let _ = m.to_string();
            }
        }
    }
});
