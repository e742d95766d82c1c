//! Any bytes as a DNS-SD answer to the registry browse of `nagare serve
//! --nmos-dns`: no panic, and what it names is bounded by what it says.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::nmos::discovery::Discovery;

fuzz_target!(|data: &[u8]| {
    let mut d = Discovery::new("example.com");
    let _ = d.queries();
    if d.absorb(data).is_ok() {
        let _ = d.queries();
        let _ = d.complete();
        // Every registry is one instance of the answer, so no more than
        // its records could name.
        assert!(d.registries().len() <= data.len() / 12 + 1);
    }
});
