//! The IS-05 machine on virtual TAI time: a scripted controller PATCHes,
//! the test plays the driver.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::*;

const T0: TaiTime = TaiTime {
    secs: 1_800_000_000,
    nanos: 0,
};

fn at(secs: u64, nanos: u32) -> TaiTime {
    T0.plus(TaiTime { secs, nanos })
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A sender whose `"auto"` means source 192.0.2.10, destination
/// 239.1.2.3, ports 5004; `legs` legs.
fn sender(legs: usize) -> Connection {
    let mut auto = Leg::defaults(Role::Sender);
    auto.set("source_ip", Param::Ip(ip("192.0.2.10")));
    auto.set("destination_ip", Param::Ip(ip("239.1.2.3")));
    auto.set("source_port", Param::Port(5004));
    auto.set("destination_port", Param::Port(5004));
    let limits = Constraints::default().with(
        Role::Sender,
        "source_ip",
        Constraint {
            allowed: Some(vec![Param::Ip(ip("192.0.2.10"))]),
            ..Constraint::default()
        },
    );
    Connection::new(Role::Sender, vec![limits; legs], vec![auto; legs])
}

fn receiver(legs: usize) -> Connection {
    let mut auto = Leg::defaults(Role::Receiver);
    auto.set("interface_ip", Param::Ip(ip("127.0.0.1")));
    auto.set("destination_port", Param::Port(5004));
    Connection::new(
        Role::Receiver,
        vec![Constraints::default(); legs],
        vec![auto; legs],
    )
}

fn patch(c: &mut Connection, now: TaiTime, body: Value) -> Result<Patched, ConnectionError> {
    c.patch(now, body.to_string().as_bytes())
}

/// Plays the driver: carries every activation out successfully.
fn drive(c: &mut Connection, now: TaiTime) -> Vec<Setting> {
    c.handle_timeout(now);
    let mut done = Vec::new();
    while let Some(Event::Activate(a)) = c.poll_event() {
        done.push(a.setting.clone());
        c.complete(now, a, Ok(())).unwrap();
    }
    done
}

#[test]
fn an_immediate_activation_resolves_auto_in_active_and_keeps_it_in_staged() {
    let mut c = sender(1);
    let body = json!({
        "master_enable": true,
        "receiver_id": "0a174530-e3cf-11e6-bf01-fe55135034f3",
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": 5010}],
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("an immediate activation goes to the driver");
    };
    assert!(a.setting.master_enable);
    let leg = &a.setting.legs[0];
    assert_eq!(leg.ip("destination_ip"), Some(ip("127.0.0.1")));
    assert_eq!(leg.port("destination_port"), Some(5010));
    assert_eq!(leg.ip("source_ip"), Some(ip("192.0.2.10")), "auto resolved");
    let reply = c.complete(at(0, 5), a, Ok(())).unwrap();
    assert_eq!(reply["activation"]["mode"], "activate_immediate");
    assert_eq!(reply["activation"]["activation_time"], "1800000000:5");
    assert_eq!(reply["activation"]["requested_time"], Value::Null);
    let staged = c.staged_json();
    assert_eq!(staged["activation"]["mode"], Value::Null, "back to null");
    assert_eq!(staged["transport_params"][0]["source_ip"], "auto");
    let active = c.active_json();
    assert_eq!(active["master_enable"], true);
    assert_eq!(active["transport_params"][0]["source_ip"], "192.0.2.10");
    assert_eq!(active["transport_params"][0]["source_port"], 5004);
    assert_eq!(
        active["receiver_id"], "0a174530-e3cf-11e6-bf01-fe55135034f3",
        "the peer goes active with the parameters"
    );
    assert_eq!(active["activation"]["mode"], "activate_immediate");
    assert!(!active.to_string().contains("auto"));
}

#[test]
fn a_relative_activation_fires_after_its_span_and_not_before() {
    let mut c = sender(1);
    let body = json!({
        "master_enable": true,
        "activation": {"mode": "activate_scheduled_relative", "requested_time": "2:500000000"}
    });
    assert_eq!(patch(&mut c, T0, body).unwrap(), Patched::Scheduled);
    let staged = c.staged_json();
    assert_eq!(staged["activation"]["requested_time"], "2:500000000");
    assert_eq!(
        staged["activation"]["activation_time"],
        "1800000002:500000000"
    );
    assert_eq!(c.poll_timeout(), Some(at(2, 500_000_000)));
    assert!(drive(&mut c, at(2, 499_999_999)).is_empty());
    assert!(!c.active().master_enable);
    let done = drive(&mut c, at(2, 500_000_000));
    assert_eq!(done.len(), 1);
    assert!(c.active().master_enable);
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.staged_json()["activation"]["mode"], Value::Null);
    let active = c.active_json();
    assert_eq!(active["activation"]["mode"], "activate_scheduled_relative");
    assert_eq!(active["activation"]["requested_time"], "2:500000000");
}

#[test]
fn an_absolute_activation_fires_at_its_tai_time_and_a_past_one_at_once() {
    let mut c = sender(1);
    let body = json!({
        "master_enable": true,
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": "1800000010:0"}
    });
    assert_eq!(patch(&mut c, T0, body).unwrap(), Patched::Scheduled);
    assert_eq!(c.poll_timeout(), Some(at(10, 0)));
    assert!(drive(&mut c, at(9, 999_999_999)).is_empty());
    assert_eq!(drive(&mut c, at(10, 0)).len(), 1);
    assert_eq!(
        c.active_json()["activation"]["requested_time"],
        "1800000010:0"
    );

    let past = json!({
        "master_enable": false,
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": "1:0"}
    });
    assert_eq!(patch(&mut c, at(20, 0), past).unwrap(), Patched::Scheduled);
    assert_eq!(drive(&mut c, at(20, 0)).len(), 1);
    assert!(!c.active().master_enable);
}

#[test]
fn with_a_lead_an_enabling_activation_comes_early_and_a_disabling_one_on_time() {
    // A cluster leg's sender: its stream must exist before its first
    // frame is due, so the activation is handed out 200 ms early and
    // names the instant the stream begins.
    let mut c = sender(1);
    c.set_lead(crate::Nanos::from_millis(200));
    let on = json!({
        "master_enable": true,
        "transport_params": [{"destination_ip": "127.0.0.1", "destination_port": 5010}],
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": "1800000010:0"}
    });
    assert_eq!(patch(&mut c, T0, on).unwrap(), Patched::Scheduled);
    assert_eq!(c.poll_timeout(), Some(at(9, 800_000_000)));
    c.handle_timeout(at(9, 799_999_999));
    assert_eq!(c.poll_event(), None, "not a nanosecond before the lead");
    c.handle_timeout(at(9, 800_000_000));
    let Some(Event::Activate(a)) = c.poll_event() else {
        panic!("due at its time less the lead");
    };
    assert_eq!(a.at, Some(at(10, 0)), "the driver starts the stream then");
    c.complete(at(9, 800_000_100), a, Ok(())).unwrap();
    let active = c.active_json();
    assert_eq!(active["activation"]["activation_time"], "1800000010:0");
    assert_eq!(active["master_enable"], true);

    let off = json!({
        "master_enable": false,
        "activation": {"mode": "activate_scheduled_absolute", "requested_time": "1800000020:0"}
    });
    assert_eq!(patch(&mut c, at(11, 0), off).unwrap(), Patched::Scheduled);
    assert_eq!(c.poll_timeout(), Some(at(20, 0)), "a stop is never early");
    assert!(drive(&mut c, at(19, 999_999_999)).is_empty());
    assert_eq!(drive(&mut c, at(20, 0)).len(), 1);
    assert!(!c.active().master_enable);
}

#[test]
fn a_patch_while_scheduled_is_locked_until_cancelled() {
    let mut c = sender(1);
    let body = json!({
        "master_enable": true,
        "activation": {"mode": "activate_scheduled_relative", "requested_time": "5:0"}
    });
    patch(&mut c, T0, body).unwrap();
    let err = patch(&mut c, at(1, 0), json!({"master_enable": false})).unwrap_err();
    assert_eq!(err.status(), 423);
    assert!(err.to_string().contains("1800000005:0"), "{err}");
    let immediate = json!({"activation": {"mode": "activate_immediate"}});
    assert_eq!(
        patch(&mut c, at(1, 0), immediate).unwrap_err().status(),
        423
    );
    // A cancel may carry other changes with it.
    let cancel = json!({"master_enable": false, "activation": {"mode": null}});
    assert_eq!(patch(&mut c, at(2, 0), cancel).unwrap(), Patched::Staged);
    assert_eq!(c.poll_timeout(), None);
    assert!(
        drive(&mut c, at(10, 0)).is_empty(),
        "cancelled: never fires"
    );
    assert!(!c.active().master_enable);
    assert!(!c.staged().master_enable);
    assert_eq!(
        patch(&mut c, at(11, 0), json!({"master_enable": true})).unwrap(),
        Patched::Staged,
        "unlocked"
    );
}

#[test]
fn bad_bodies_are_400_and_change_nothing() {
    let mut c = sender(1);
    let before = c.staged_json();
    let bodies = [
        json!([1, 2]),
        json!({"nonsense": 1}),
        json!({"master_enable": "yes"}),
        json!({"receiver_id": "not-a-uuid"}),
        json!({"transport_params": {}}),
        json!({"transport_params": [{}, {}]}),
        json!({"transport_params": [{"destination_port": 0}]}),
        json!({"transport_params": [{"destination_port": 70000}]}),
        json!({"transport_params": [{"destination_ip": "300.1.1.1"}]}),
        json!({"transport_params": [{"fec_enabled": true}]}),
        json!({"transport_params": [{"source_ip": "192.0.2.99"}]}),
        json!({"transport_params": [{"rtp_enabled": 1}]}),
        json!({"transport_file": {"data": null, "type": null}}),
        json!({"activation": {"mode": "now"}}),
        json!({"activation": {"mode": "activate_scheduled_relative"}}),
        json!({"activation": {"mode": "activate_scheduled_absolute", "requested_time": "1.5"}}),
        json!({"activation": {"requested_time": "1:0"}}),
        json!({"master_enable": true, "transport_params": [{"destination_port": -1}]}),
    ];
    for body in bodies {
        let err = patch(&mut c, T0, body.clone()).unwrap_err();
        assert_eq!(err.status(), 400, "{body}: {err}");
        assert_eq!(
            c.staged_json(),
            before,
            "{body} changed the staged resource"
        );
    }
    assert_eq!(c.patch(T0, b"{\"master").unwrap_err().status(), 400);
    let huge = vec![b' '; MAX_PATCH + 1];
    assert_eq!(c.patch(T0, &huge).unwrap_err().status(), 400);
}

#[test]
fn a_refused_activation_leaves_active_and_staged_as_they_were() {
    let mut c = sender(1);
    let body = json!({
        "master_enable": true,
        "transport_params": [{"destination_ip": "203.0.113.7"}],
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    let err = c
        .complete(T0, a, Err("203.0.113.7 is outside --allow".into()))
        .unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.to_string().contains("--allow"));
    assert!(!c.active().master_enable);
    assert!(!c.staged().master_enable);
    assert_eq!(
        c.staged_json()["transport_params"][0]["destination_ip"],
        "auto"
    );
}

#[test]
fn two_legs_for_st_2022_7_are_staged_and_constrained_each() {
    let mut c = sender(2);
    assert_eq!(c.constraints_json().as_array().unwrap().len(), 2);
    assert_eq!(
        c.constraints_json()[1]["source_ip"]["enum"][0],
        "192.0.2.10"
    );
    let body = json!({
        "transport_params": [
            {"destination_ip": "239.1.1.1"},
            {"destination_ip": "239.2.2.2", "rtp_enabled": false}
        ],
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    assert!(a.setting.legs[0].enabled());
    assert!(!a.setting.legs[1].enabled());
    c.complete(T0, a, Ok(())).unwrap();
    assert_eq!(
        c.active_json()["transport_params"][1]["destination_ip"],
        "239.2.2.2"
    );
}

const SDP_2022_7: &str = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=nagare\r\nt=0 0\r\n\
a=group:DUP a b\r\n\
m=video 5004 RTP/AVP 96\r\nc=IN IP4 239.10.0.1/32\r\n\
a=source-filter: incl IN IP4 239.10.0.1 192.0.2.10\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=64; height=32; depth=8; exactframerate=25\r\na=mid:a\r\n\
m=video 5006 RTP/AVP 96\r\nc=IN IP4 239.20.0.1/32\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=64; height=32; depth=8; exactframerate=25\r\na=mid:b\r\n";

#[test]
fn a_receivers_transport_file_fills_its_legs_and_params_override_it() {
    let mut c = receiver(2);
    let body = json!({
        "sender_id": "0a174530-e3cf-11e6-bf01-fe55135034f3",
        "master_enable": true,
        "transport_file": {"data": SDP_2022_7, "type": "application/sdp"},
        "transport_params": [{}, {"destination_port": 6000}],
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    let legs = &a.setting.legs;
    assert_eq!(legs[0].ip("multicast_ip"), Some(ip("239.10.0.1")));
    assert_eq!(legs[0].ip("source_ip"), Some(ip("192.0.2.10")));
    assert_eq!(legs[0].port("destination_port"), Some(5004));
    assert_eq!(legs[0].ip("interface_ip"), Some(ip("127.0.0.1")), "auto");
    assert_eq!(legs[1].ip("multicast_ip"), Some(ip("239.20.0.1")));
    assert_eq!(legs[1].port("destination_port"), Some(6000), "params win");
    c.complete(T0, a, Ok(())).unwrap();
    let active = c.active_json();
    assert_eq!(active["transport_file"]["type"], "application/sdp");
    assert_eq!(active["sender_id"], "0a174530-e3cf-11e6-bf01-fe55135034f3");

    // A one-leg unicast SDP: the second leg is disabled.
    let unicast = SDP_2022_7
        .replace("a=group:DUP a b\r\n", "")
        .replace("239.10.0.1/32", "127.0.0.1");
    let body = json!({"transport_file": {"data": unicast, "type": "application/sdp"}});
    patch(&mut c, T0, body).unwrap();
    let staged = &c.staged().legs;
    assert_eq!(staged[0].ip("interface_ip"), Some(ip("127.0.0.1")));
    assert_eq!(staged[0].get("multicast_ip"), Some(Param::Null));
    assert!(!staged[1].enabled());
}

#[test]
fn a_receivers_leg_says_where_it_listens() {
    let mut c = receiver(2);
    let body = json!({
        "master_enable": true,
        "transport_file": {"data": SDP_2022_7, "type": "application/sdp"},
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    let group = a.setting.legs[0].listen().unwrap();
    assert_eq!(group.address, "239.10.0.1:5004".parse().unwrap());
    assert_eq!(group.source, Some(ip("192.0.2.10")));
    assert_eq!(group.interface, Some(ip("127.0.0.1")), "auto's interface");
    c.complete(T0, a, Ok(())).unwrap();
    // Unicast: the interface's own address, its port; a disabled leg
    // listens nowhere.
    let unicast = SDP_2022_7
        .replace("a=group:DUP a b\r\n", "")
        .replace("239.10.0.1/32", "127.0.0.1");
    let body = json!({"transport_file": {"data": unicast, "type": "application/sdp"},
        "activation": {"mode": "activate_immediate"}});
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    let one = a.setting.legs[0].listen().unwrap();
    assert_eq!(one.address, "127.0.0.1:5004".parse().unwrap());
    assert_eq!((one.source, one.interface), (None, None));
    assert_eq!(a.setting.legs[1].listen(), None);
}

#[test]
fn a_transport_file_that_is_not_an_sdp_nagare_reads_is_refused() {
    let mut c = receiver(1);
    let not_sdp = json!({"transport_file": {"data": "hello", "type": "application/sdp"}});
    assert_eq!(patch(&mut c, T0, not_sdp).unwrap_err().status(), 500);
    let other_type = json!({"transport_file": {"data": "v=0", "type": "text/plain"}});
    assert_eq!(patch(&mut c, T0, other_type).unwrap_err().status(), 400);
    let cleared = json!({"transport_file": {"data": null, "type": null}});
    assert_eq!(patch(&mut c, T0, cleared).unwrap(), Patched::Staged);
    assert_eq!(c.staged_json()["transport_file"]["data"], Value::Null);
    // A receiver has no destination_ip; a sender has no multicast_ip.
    let wrong = json!({"transport_params": [{"destination_ip": "1.2.3.4"}]});
    assert_eq!(patch(&mut c, T0, wrong).unwrap_err().status(), 400);
    let null_source = json!({"transport_params": [{"source_ip": null, "multicast_ip": null}]});
    assert_eq!(patch(&mut c, T0, null_source).unwrap(), Patched::Staged);
}

#[test]
fn a_senders_transport_file_is_the_sdp_of_its_active_legs() {
    use crate::serve::describe::Track;
    use crate::{FrameRate, PixelFormat, VideoFormat};
    let track = Track::Raw {
        format: VideoFormat::new(64, 32, PixelFormat::Uyvy422).unwrap(),
        rate: FrameRate::new(25, 1).unwrap(),
        max_udp: None,
    };
    let mut c = sender(2);
    let none = sender_sdp("bars", track, &[], None, 1);
    assert_eq!(none, None, "no enabled leg: no transport file");
    let body = json!({
        "transport_params": [
            {"destination_ip": "127.0.0.1", "destination_port": 5010},
            {"destination_ip": "239.2.2.2"}
        ],
        "activation": {"mode": "activate_immediate"}
    });
    let Patched::Activate(a) = patch(&mut c, T0, body).unwrap() else {
        panic!("immediate");
    };
    c.complete(T0, a, Ok(())).unwrap();
    let sdp = sender_sdp("bars", track, &c.active().legs, None, 7).unwrap();
    let legs = crate::sdp::SdpStream::parse_legs(&sdp).unwrap();
    assert_eq!(legs.len(), 2, "{sdp}");
    assert_eq!((legs[0].address, legs[0].port), (ip("127.0.0.1"), 5010));
    assert_eq!(legs[1].address, ip("239.2.2.2"));
    assert_eq!(legs[1].source, Some(ip("192.0.2.10")));
    assert!(sdp.contains("a=group:DUP primary secondary"), "{sdp}");

    // The same SDP staged on a receiver connects it to this sender.
    let mut r = receiver(2);
    let body = json!({"transport_file": {"data": sdp, "type": "application/sdp"}});
    patch(&mut r, T0, body).unwrap();
    assert_eq!(r.staged().legs[0].port("destination_port"), Some(5010));
    assert_eq!(r.staged().legs[1].ip("multicast_ip"), Some(ip("239.2.2.2")));

    let ts = sender_sdp("clip.ts", Track::Ts, &c.active().legs[..1], None, 7).unwrap();
    assert!(ts.contains("a=rtpmap:33 MP2T/90000"), "{ts}");
}
