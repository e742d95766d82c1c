//! `probe::Datagram::parse` on any bytes, and the datagram writers on any
//! field values.
//!
//! Input: the datagram itself. Its first 25 bytes (zero-padded) are also
//! read as `session (8) | seq (8) | sent_at (8) | flags (1)` for the
//! write side.
//! Invariants: no panic; a datagram parses exactly when an independent
//! reading of the layout accepts it (echo: magic, this version, kind 1..=3,
//! 32 bytes; data: RTP v2 with payload type 98, magic and version after
//! its header); the parsed fields are the bytes at their offsets; writing
//! what was parsed and parsing it again gives the same value, and the
//! written bytes equal the input where the layout has no reserved bits;
//! any field values survive write + parse.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::Reader;
use nagare_proto::Nanos;
use nagare_proto::probe::{
    DATA_HEADER_LEN, DATA_MAGIC, DataHeader, Datagram, ECHO_LEN, ECHO_MAGIC, Echo, EchoKind,
    PAYLOAD_TYPE, PROTOCOL_VERSION,
};
use nagare_proto::rtp::{HEADER_LEN, RtpPacket};

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

fn check_echo(data: &[u8], parsed: Option<Echo>) {
    let accept = data.len() >= ECHO_LEN
        && data[..4] == ECHO_MAGIC
        && u32::from(data[4]) == PROTOCOL_VERSION
        && (1..=3).contains(&data[5]);
    assert_eq!(parsed.is_some(), accept, "echo acceptance");
    let Some(e) = parsed else { return };
    let kind = match data[5] {
        1 => EchoKind::Request,
        2 => EchoKind::Reply,
        _ => EchoKind::Open,
    };
    assert_eq!(e.kind, kind);
    assert_eq!(e.session, be64(&data[8..]));
    assert_eq!(e.id, be64(&data[16..]));
    assert_eq!(e.sent_at, Nanos(be64(&data[24..])));
    let mut buf = [0u8; ECHO_LEN];
    assert_eq!(e.write(&mut buf), Ok(ECHO_LEN));
    // Bytes 6..8 are reserved: written as zero, ignored when read.
    assert_eq!(buf[..6], data[..6]);
    assert_eq!(buf[8..], data[8..ECHO_LEN]);
    assert_eq!(Datagram::parse(&buf), Ok(Datagram::Echo(e)));
}

fn check_data(data: &[u8], parsed: Option<DataHeader>) {
    let rtp = RtpPacket::new_checked(data).ok();
    let payload = rtp
        .as_ref()
        .filter(|p| p.payload_type() == PAYLOAD_TYPE)
        .map(|p| p.payload())
        .filter(|p| p.len() >= DATA_HEADER_LEN - HEADER_LEN)
        .filter(|p| p[..4] == DATA_MAGIC && u32::from(p[4]) == PROTOCOL_VERSION);
    assert_eq!(parsed.is_some(), payload.is_some(), "data acceptance");
    let (Some(h), Some(p), Some(rtp)) = (parsed, payload, rtp) else {
        return;
    };
    assert_eq!(h.session, be64(&p[8..]));
    assert_eq!(h.seq, be64(&p[16..]));
    assert_eq!(h.sent_at, Nanos(be64(&p[24..])));
    assert_eq!(h.marker, rtp.marker());
    round_trip_data(h);
}

fn round_trip_data(h: DataHeader) {
    let mut buf = [0x5au8; DATA_HEADER_LEN + 3];
    assert!(h.write(&mut buf[..DATA_HEADER_LEN - 1]).is_err());
    assert_eq!(h.write(&mut buf), Ok(DATA_HEADER_LEN));
    assert_eq!(Datagram::parse(&buf), Ok(Datagram::Data(h)));
    let rtp = RtpPacket::new_checked(&buf[..]).expect("written header is RTP");
    assert_eq!(rtp.sequence_number(), h.seq as u16);
    assert_eq!(rtp.ssrc(), h.session as u32);
    assert_eq!(rtp.payload_type(), PAYLOAD_TYPE);
}

fuzz_target!(|data: &[u8]| {
    match Datagram::parse(data) {
        Ok(Datagram::Echo(e)) => check_echo(data, Some(e)),
        Ok(Datagram::Data(h)) => {
            assert!(data.len() < 4 || data[..4] != ECHO_MAGIC);
            check_data(data, Some(h));
        }
        Err(_) => {
            if data.len() >= 4 && data[..4] == ECHO_MAGIC {
                check_echo(data, None);
            } else {
                check_data(data, None);
            }
        }
    }

    // Any field values survive the writers.
    let mut r = Reader::new(data);
    let (session, seq, sent_at, flags) = (r.u64(), r.u64(), Nanos(r.u64()), r.u8());
    round_trip_data(DataHeader {
        session,
        seq,
        sent_at,
        marker: flags & 1 != 0,
    });
    let e = Echo {
        kind: [EchoKind::Request, EchoKind::Reply, EchoKind::Open][usize::from(flags >> 1) % 3],
        session,
        id: seq,
        sent_at,
    };
    let mut buf = [0u8; ECHO_LEN + 1];
    assert!(e.write(&mut buf[..ECHO_LEN - 1]).is_err());
    assert_eq!(e.write(&mut buf), Ok(ECHO_LEN));
    assert_eq!(Datagram::parse(&buf), Ok(Datagram::Echo(e)));
});
