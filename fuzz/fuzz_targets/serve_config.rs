//! What `nagare serve` reads from its users: the `--config` TOML file
//! (`ServeConfig`) and the body of `POST /v1/streams` (`StreamRequest`).
//!
//! Input: one selector byte, then the text. Even: parsed as TOML config;
//! odd: as a JSON stream request.
//! Invariants: no panic; whatever parses survives a round trip through its
//! own format unchanged (so what the server echoes back, and what a tool
//! writes for it, means what was read).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_api::serve::{ServeConfig, StreamRequest};

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
        }
    } else if let Ok(req) = serde_json::from_str::<StreamRequest>(text) {
        let again = serde_json::to_string(&req).expect("a parsed request serialises");
        let back: StreamRequest = serde_json::from_str(&again).expect("and parses again");
        assert_eq!(back, req);
    }
});
