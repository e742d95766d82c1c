//! Any bytes as a capture file, offered to `CaptureParser` the way
//! `nagare analyze --pcap` does (in pieces, taking whole records), each
//! datagram into the ST 2110-21 `Monitor`: no panic, records never longer
//! than the bytes offered, offsets only forward, and the monitor bounded.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::capture::CaptureParser;
use nagare_proto::video::st2110_21::{Monitor, Scan, StreamShape};
use nagare_proto::video::{FrameRate, PixelFormat};

fuzz_target!(|data: &[u8]| {
    // The first byte picks how many bytes each read brings.
    let Some((&step, file)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1) * 7;
    let mut monitor = Monitor::new(StreamShape {
        rate: FrameRate::new(60000, 1001).expect("rate"),
        lines: 1080,
        width: Some(1920),
        format: Some(PixelFormat::Uyvp),
        scan: Scan::Progressive,
        packets: None,
        tr_offset: None,
        // None: the monitor infers MAXUDP from the datagrams it learns on.
        max_udp: None,
    });
    let (mut start, mut end) = (0usize, step.min(file.len()));
    let mut parser = loop {
        match CaptureParser::new(&file[start..end]) {
            Ok(Some((p, used))) => {
                assert!(used <= end - start);
                start += used;
                break p;
            }
            Ok(None) if end < file.len() => end = (end + step).min(file.len()),
            _ => return,
        }
    };
    loop {
        match parser.next_record(&file[start..end]) {
            Ok(Some((r, used))) => {
                assert!(used > 0 && used <= end - start);
                if let Some(d) = r.datagram {
                    monitor.handle_input(r.at, d.payload);
                }
                start += used;
                while monitor.poll_event().is_some() {}
            }
            Ok(None) if end < file.len() => end = (end + step).min(file.len()),
            _ => break,
        }
    }
    assert_eq!(parser.offset() as usize, start);
    monitor.flush();
    while monitor.poll_event().is_some() {}
    let _ = monitor.size_mismatch().map(|m| m.to_string());
});
