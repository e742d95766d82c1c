//! Packetizer → RTP bytes → Depacketizer must give back the frame exactly,
//! for any small format, packet size, sequence number, timestamp, frame
//! content and order of the packets within the frame.
//!
//! Input: `format (3) | packet size (2) | ext seq (4) | timestamp (4) |
//! ssrc (4) | order seed (4) | frame bytes...` (repeated to fill a frame).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{Reader, small_format};
use nagare_proto::rtp::{self, RtpPacket};
use nagare_proto::video::st2110_20::{
    Depacketizer, ESN_LEN, MAX_PACKET_SIZE, Output, Packetizer, SRD_LEN,
};
use nagare_proto::{ExtSeq, MediaTime, Ssrc};

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let format = small_format(r.u8(), r.u8(), r.u8());
    let packet_size = usize::from(r.u16());
    let ext_seq = r.u32();
    let timestamp = r.u32();
    let ssrc = r.u32();
    let mut order = r.u32();
    let content = r.rest();

    let min = rtp::HEADER_LEN + ESN_LEN + SRD_LEN + format.pixel_format.pgroup_bytes();
    let p = match Packetizer::new(format, packet_size, Ssrc(ssrc)) {
        Ok(p) => {
            assert!((min..=MAX_PACKET_SIZE).contains(&packet_size));
            p
        }
        Err(_) => {
            assert!(!(min..=MAX_PACKET_SIZE).contains(&packet_size));
            return;
        }
    };

    let frame_bytes = format.frame_bytes();
    let frame: Vec<u8> = if content.is_empty() {
        vec![0; frame_bytes]
    } else {
        content.iter().copied().cycle().take(frame_bytes).collect()
    };

    // The packets' data ranges tile the frame in order.
    let n = p.packets_per_frame();
    assert!(n >= 1);
    let mut covered = 0;
    let mut packets = Vec::with_capacity(n);
    for i in 0..n {
        let range = p.data_range(i);
        assert_eq!(range.start, covered);
        assert!(!range.is_empty());
        covered = range.end;
        let mut buf = vec![0u8; packet_size];
        let len = p
            .write_packet(
                i,
                &frame,
                ExtSeq(u64::from(ext_seq)).add(i as u64),
                MediaTime(timestamp),
                &mut buf,
            )
            .expect("buffer of packet_size fits every packet");
        assert_eq!(len, p.packet_len(i));
        assert!(len <= packet_size);
        buf.truncate(len);
        let v = RtpPacket::new_checked(&buf[..]).expect("own packet parses");
        assert_eq!(v.marker(), i + 1 == n);
        assert_eq!(v.timestamp(), timestamp);
        assert_eq!(v.ssrc(), ssrc);
        let esn = u16::from_be_bytes([v.payload()[0], v.payload()[1]]);
        let ext = (u32::from(esn) << 16) | u32::from(v.sequence_number());
        assert_eq!(ext, ext_seq.wrapping_add(i as u32));
        packets.push(buf);
    }
    assert_eq!(covered, frame_bytes);
    assert!(
        p.write_header(n, ExtSeq(0), MediaTime(0), &mut [0u8; 64])
            .is_err()
    );

    // Any order within the frame reassembles the same bytes.
    for i in (1..packets.len()).rev() {
        order = order.wrapping_mul(1_103_515_245).wrapping_add(12345);
        packets.swap(i, (order >> 8) as usize % (i + 1));
    }

    let mut d = Depacketizer::new(format, None);
    for pkt in &packets {
        let v = RtpPacket::new_checked(&pkt[..]).expect("own packet parses");
        d.push(&v).expect("own packet is accepted");
    }
    let Some(Output::Frame(f)) = d.poll() else {
        panic!("no frame after every packet of it arrived");
    };
    assert!(d.poll().is_none());
    assert!(f.complete);
    assert_eq!(f.index, 0);
    assert_eq!(f.timestamp, MediaTime(timestamp));
    assert_eq!(f.packets as usize, n);
    assert_eq!(f.bytes_received, frame_bytes);
    assert!(f.data == frame, "reassembled frame differs");
});
