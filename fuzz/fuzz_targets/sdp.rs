//! `Session::parse` and `SdpStream::parse` on any UTF-8 text: no panic,
//! and whatever parses survives `to_sdp` and `parse` again unchanged (so
//! nagare can relay an SDP it read without altering what it describes);
//! the legs of an `a=group:DUP` parse without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::sdp::{SdpStream, Session};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(session) = Session::parse(text) {
        let written = session.to_sdp();
        match Session::parse(&written) {
            Ok(again) => assert_eq!(again, session, "SDP written:\n{written}"),
            Err(e) => panic!("nagare cannot read its own session ({e}):\n{written}"),
        }
    }
    // The legs of a=group:DUP: never none, and the first video's format
    // when there is no group.
    if let Ok(legs) = SdpStream::parse_legs(text) {
        assert!(!legs.is_empty());
    }
    let Ok(stream) = SdpStream::parse(text) else {
        return;
    };
    let written = stream.to_sdp(u64::from(stream.port));
    match SdpStream::parse(&written) {
        Ok(again) => assert_eq!(again, stream, "SDP written:\n{written}"),
        Err(e) => panic!("nagare cannot read its own SDP ({e}):\n{written}"),
    }
});
