//! Any text as an RTSP `Authorization` header value, to
//! `rtsp::parse_authorization` and to a connection's `rtsp::Guard`.
//!
//! Input: the header value (UTF-8; other bytes are skipped).
//! Invariants: no panic; what parses holds no more text than was given
//! (a Basic user and password come from the base64, Digest values are
//! pieces of the text with escapes undone), at most `MAX_PARAMS`
//! parameters are read; a Digest answer names MD5 or SHA-256 and `qop`
//! only as `auth`; the guard admits only what parses, and an answer it
//! admits by Digest hashed the request's own URI; heap use is linear in
//! the text.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::CountingAlloc;
use nagare_proto::Nanos;
use nagare_proto::rtsp::{
    Authorization, Credentials, Guard, NONCE_KEY_LEN, Qop, parse_authorization,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const URI: &str = "rtsp://127.0.0.1:8554/clip.ts";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let parsed = parse_authorization(text);
    match &parsed {
        Ok(Authorization::Basic { user, password }) => {
            // Invalid UTF-8 in the user name becomes U+FFFD: count chars.
            let held = user.chars().count() + password.len();
            assert!(held < text.len().max(1), "{text:?}");
        }
        Ok(Authorization::Digest(d)) => {
            let mut held = d.username.len() + d.realm.len() + d.nonce.len();
            held += d.uri.len() + d.response.len();
            if let Qop::Auth { nc, cnonce } = &d.qop {
                held += nc.len() + cnonce.len();
            }
            assert!(held <= text.len(), "{text:?}");
        }
        Err(_) => {}
    }
    let guard = Guard::new(
        Arc::new(Credentials::new("s3cret-token")),
        [9; NONCE_KEY_LEN],
    );
    let verdict = guard.check(Nanos::from_secs(1), "DESCRIBE", URI, Some(text));
    if verdict.is_ok() {
        match &parsed {
            Ok(Authorization::Basic { password, .. }) => assert_eq!(password, b"s3cret-token"),
            Ok(Authorization::Digest(d)) => assert_eq!(d.uri, URI),
            Err(e) => panic!("admitted what does not parse: {e}"),
        }
    }
    let used = CountingAlloc::peak().saturating_sub(base);
    assert!(
        used <= 8 * text.len() + 4096,
        "{used} bytes of heap for {} of text",
        text.len()
    );
});
