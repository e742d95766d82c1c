//! A cluster leg over IS-05: what `nagare cluster` asks of a node whose
//! API is NMOS, and when.
//!
//! IS-05 cannot create senders, so such a node offers one sender per
//! stripe of a path ([`stripe_label`](crate::nmos::model::stripe_label)),
//! and a leg is that sender activated: `master_enable` true, leg 0 to the
//! stripe's address, at the TAI instant its epoch frame starts
//! ([`frame_time`]). The node prepares the stream ahead of that instant,
//! so legs activated on several nodes for one frame begin on it together
//! and carry one RTP timestamp, as legs asked for through serve's own API
//! with `epoch_frame` do. A halt is the sender disabled at once, after
//! cancelling anything scheduled.
//!
//! A request not answered in time may have landed; before every PATCH the
//! driver reads the sender's `/staged` and `/active`, and [`enable`] and
//! [`halt`] say which PATCHes are still needed (none when an earlier try
//! already did it), so a retry never starts a second activation, as the
//! idempotency key does for serve's API.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::FrameRate;
use crate::nmos::TaiTime;
use crate::nmos::connection::Mode;

/// The TAI instant epoch frame `frame` of `rate` starts.
pub fn frame_time(rate: FrameRate, frame: u64) -> TaiTime {
    TaiTime::from_utc_ns(rate.frame_start_ns(frame))
}

/// The first epoch frame of `rate` starting at or after TAI `at`: the
/// frame a stripe sender activated for `at` begins with.
pub fn frame_at(rate: FrameRate, at: TaiTime) -> u64 {
    rate.frame_at_or_after_ns(at.to_utc_ns())
}

/// The PATCHes (in order) that make a stripe sender whose `/staged` and
/// `/active` are as given send to `destination` from TAI `at` (`None`:
/// from the next frame it can make). None when it already does, or an
/// earlier try scheduled exactly that; a cancel first when another
/// activation is scheduled (IS-05 locks the sender until then).
pub fn enable(
    staged: &Value,
    active: &Value,
    destination: SocketAddr,
    at: Option<TaiTime>,
) -> Vec<Value> {
    let pending = !staged["activation"]["mode"].is_null();
    if pending && at.is_some() && holds(staged, destination, at) {
        return Vec::new();
    }
    if !pending && holds(active, destination, at) {
        return Vec::new();
    }
    let activation = match at {
        Some(t) => json!({"mode": Mode::ScheduledAbsolute.name(), "requested_time": t.to_string()}),
        None => json!({"mode": Mode::Immediate.name()}),
    };
    let body = json!({
        "master_enable": true,
        "transport_params": [{
            "destination_ip": destination.ip().to_string(),
            "destination_port": destination.port(),
            "rtp_enabled": true,
        }],
        "activation": activation,
    });
    if pending {
        vec![json!({"activation": {"mode": null}}), body]
    } else {
        vec![body]
    }
}

/// The PATCHes (in order) that stop a stripe sender whose `/staged` and
/// `/active` are as given, whatever it does: a scheduled activation
/// cancelled, then `master_enable` false at once (which removes a failed
/// stream too). None for a sender that is idle: nothing scheduled,
/// nothing active, and no stream of it `listed` in the node's table.
pub fn halt(staged: &Value, active: &Value, listed: bool) -> Vec<Value> {
    let off = json!({"master_enable": false, "activation": {"mode": Mode::Immediate.name()}});
    let pending = !staged["activation"]["mode"].is_null();
    if !pending && !listed && active["master_enable"] != json!(true) {
        return Vec::new();
    }
    if !pending {
        vec![off]
    } else {
        vec![
            json!({"master_enable": false, "activation": {"mode": null}}),
            off,
        ]
    }
}

/// Whether a sender's `/staged` or `/active` (`setting`) enables leg 0 to
/// `destination`, asked for `at` when that is given.
fn holds(setting: &Value, destination: SocketAddr, at: Option<TaiTime>) -> bool {
    let leg = &setting["transport_params"][0];
    let to = leg["destination_ip"].as_str() == Some(&destination.ip().to_string())
        && leg["destination_port"].as_u64() == Some(u64::from(destination.port()))
        && leg["rtp_enabled"] != json!(false);
    let when =
        at.is_none_or(|t| setting["activation"]["requested_time"].as_str() == Some(&t.to_string()));
    setting["master_enable"] == json!(true) && to && when
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate() -> FrameRate {
        FrameRate::new(25, 1).unwrap()
    }

    fn dest() -> SocketAddr {
        "127.0.0.1:5000".parse().unwrap()
    }

    fn setting(enabled: bool, to: &str, mode: Option<&str>, requested: Option<&str>) -> Value {
        let (ip, port) = to.split_once(':').unwrap();
        json!({
            "master_enable": enabled,
            "receiver_id": null,
            "activation": {"mode": mode, "requested_time": requested, "activation_time": null},
            "transport_params": [{"destination_ip": ip,
                "destination_port": port.parse::<u16>().unwrap(), "rtp_enabled": true}],
        })
    }

    #[test]
    fn an_epoch_frame_and_its_tai_instant_name_each_other() {
        for frame in [0, 1, 44_123_456_789, 44_123_456_790] {
            let t = frame_time(rate(), frame);
            assert_eq!(frame_at(rate(), t), frame);
        }
        // 25 fps: frame 25 starts one second after the epoch, 37 s TAI.
        assert_eq!(frame_time(rate(), 25).to_string(), "38:0");
        // A time between two frames begins with the later one.
        assert_eq!(frame_at(rate(), TaiTime { secs: 38, nanos: 1 }), 26);
    }

    #[test]
    fn enable_sends_one_absolute_activation_and_nothing_once_it_landed() {
        let at = frame_time(rate(), 1000);
        let idle = setting(false, "239.255.1.2:5004", None, None);
        let p = enable(&idle, &idle, dest(), Some(at));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0]["master_enable"], true);
        assert_eq!(p[0]["transport_params"][0]["destination_ip"], "127.0.0.1");
        assert_eq!(p[0]["transport_params"][0]["destination_port"], 5000);
        assert_eq!(p[0]["activation"]["mode"], "activate_scheduled_absolute");
        assert_eq!(p[0]["activation"]["requested_time"], at.to_string());
        // The first try landed but went unanswered: scheduled, or done.
        let t = at.to_string();
        let scheduled = setting(
            true,
            "127.0.0.1:5000",
            Some("activate_scheduled_absolute"),
            Some(&t),
        );
        assert!(enable(&scheduled, &idle, dest(), Some(at)).is_empty());
        let done = setting(
            true,
            "127.0.0.1:5000",
            Some("activate_scheduled_absolute"),
            Some(&t),
        );
        let staged_after = setting(true, "127.0.0.1:5000", None, None);
        assert!(enable(&staged_after, &done, dest(), Some(at)).is_empty());
        // Running, but for another frame or address: activated again.
        let other = frame_time(rate(), 999).to_string();
        let old = setting(
            true,
            "127.0.0.1:5000",
            Some("activate_scheduled_absolute"),
            Some(&other),
        );
        assert_eq!(enable(&staged_after, &old, dest(), Some(at)).len(), 1);
        let elsewhere = setting(true, "127.0.0.1:5001", Some("activate_immediate"), None);
        assert_eq!(enable(&staged_after, &elsewhere, dest(), None).len(), 1);
        // At the next frame it can make: immediate, and done once running.
        let p = enable(&idle, &idle, dest(), None);
        assert_eq!(p[0]["activation"], json!({"mode": "activate_immediate"}));
        assert!(enable(&staged_after, &done, dest(), None).is_empty());
    }

    #[test]
    fn another_scheduled_activation_is_cancelled_first() {
        let at = frame_time(rate(), 1000);
        let later = frame_time(rate(), 5000).to_string();
        let staged = setting(
            true,
            "127.0.0.1:5000",
            Some("activate_scheduled_absolute"),
            Some(&later),
        );
        let idle = setting(false, "239.255.1.2:5004", None, None);
        let p = enable(&staged, &idle, dest(), Some(at));
        assert_eq!(p.len(), 2);
        assert_eq!(p[0], json!({"activation": {"mode": null}}));
        assert_eq!(p[1]["activation"]["requested_time"], at.to_string());
    }

    #[test]
    fn a_halt_cancels_what_is_scheduled_then_disables_at_once() {
        let running = setting(true, "127.0.0.1:5000", None, None);
        let off =
            vec![json!({"master_enable": false, "activation": {"mode": "activate_immediate"}})];
        assert_eq!(halt(&running, &running, true), off);
        // Parked, but its stream failed and sits in the table: removed.
        let parked = setting(false, "127.0.0.1:5000", None, None);
        assert_eq!(halt(&parked, &parked, true), off);
        // Idle: nothing to do, so nothing changes on the node.
        assert!(halt(&parked, &parked, false).is_empty());
        let t = frame_time(rate(), 1000).to_string();
        let pending = setting(
            true,
            "127.0.0.1:5000",
            Some("activate_scheduled_absolute"),
            Some(&t),
        );
        let p = halt(&pending, &parked, false);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0]["activation"]["mode"], Value::Null);
        assert_eq!(p[0]["master_enable"], false);
        assert_eq!(p[1]["activation"]["mode"], "activate_immediate");
    }
}
