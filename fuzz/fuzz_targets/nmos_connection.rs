//! Any bytes as an IS-05 PATCH of a sender's and a receiver's `/staged`
//! (the body a controller sends `nagare serve`): no panic, a refusal
//! changes nothing, and `/active` never shows `"auto"`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_proto::nmos::TaiTime;
use nagare_proto::nmos::connection::{Connection, Constraints, Event, Leg, Patched, Role};

fuzz_target!(|data: &[u8]| {
    let now = TaiTime {
        secs: 1_800_000_000,
        nanos: 0,
    };
    for role in [Role::Sender, Role::Receiver] {
        let legs = vec![Constraints::default(); 2];
        let mut c = Connection::new(role, legs, vec![Leg::defaults(role); 2]);
        let before = c.staged_json();
        match c.patch(now, data) {
            Err(_) => assert_eq!(c.staged_json(), before),
            Ok(Patched::Activate(a)) => {
                c.complete(now, a, Ok(())).unwrap();
            }
            Ok(_) => {
                c.handle_timeout(TaiTime {
                    secs: u64::MAX,
                    nanos: 0,
                });
                while let Some(Event::Activate(a)) = c.poll_event() {
                    c.complete(now, a, Ok(())).unwrap();
                }
            }
        }
        let active = c.active_json().to_string();
        assert!(!active.contains("\"auto\""), "{active}");
    }
});
