//! What `nagare serve` reads from its users: the `--config` TOML file
//! (`ServeConfig`) and the body of `POST /v1/streams` (`StreamRequest`).
//!
//! Input: one selector byte, then the text. Even: parsed as TOML config;
//! odd: as a JSON stream request.
//! Invariants: no panic; whatever parses survives a round trip through its
//! own format unchanged (so what the server echoes back, and what a tool
//! writes for it, means what was read). A request's idempotency key is
//! taken exactly when it is 1 to 200 printable ASCII bytes, and a request
//! replays itself under its key but conflicts with any other request.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_api::serve::{ServeConfig, StreamRequest};
use nagare_proto::serve::Error;
use nagare_proto::serve::idempotency::{self, Replay};

/// The key rules, against an independent reading of them.
fn check_key(req: &StreamRequest) {
    let Some(key) = req.idempotency_key.as_deref() else {
        return;
    };
    let good = (1..=200).contains(&key.len()) && key.bytes().all(|b| (b' '..=b'~').contains(&b));
    assert_eq!(idempotency::check_key(key).is_ok(), good, "{key:?}");
    if !good {
        return;
    }
    let mut other = req.clone();
    other.priority = other.priority.wrapping_add(1);
    let table = [(9, key, req)];
    assert_eq!(
        idempotency::replay(key, req, table),
        Ok(Replay::Existing(9))
    );
    assert!(matches!(
        idempotency::replay(key, &other, table),
        Err(Error::KeyReused { id: 9, .. })
    ));
    assert_eq!(idempotency::replay(key, req, []), Ok(Replay::New));
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if selector % 2 == 0 {
        if let Ok(config) = toml::from_str::<ServeConfig>(text) {
            let again = toml::to_string(&config).expect("a parsed config serialises");
            let back: ServeConfig = toml::from_str(&again).expect("and parses again");
            assert_eq!(back, config);
            config.streams.iter().for_each(check_key);
        }
    } else if let Ok(req) = serde_json::from_str::<StreamRequest>(text) {
        let again = serde_json::to_string(&req).expect("a parsed request serialises");
        let back: StreamRequest = serde_json::from_str(&again).expect("and parses again");
        assert_eq!(back, req);
        check_key(&req);
    }
});
