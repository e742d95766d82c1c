//! What `nagare cluster` reads from its serve nodes: the JSON of
//! `GET /healthz` (`Health`), `POST /v1/streams` (`StreamInfo`), an error
//! answer (`ApiError`) and `GET /v1/streams` (`StreamList`), and what the
//! controller makes of a node's stream table (`cluster::label::stripe_of`,
//! `NodeStatus::from_table`, then `cluster::Controller`).
//!
//! Input: one selector byte, then the JSON text. Selector % 4: 0 Health,
//! 1 StreamInfo, 2 ApiError, 3 StreamList; (selector / 4) % 3 picks the
//! failover rule (manual, cold, hot) the stream list is fed under.
//! Invariants: no panic; whatever parses survives a JSON round trip
//! unchanged. For a stream list: a label names stripe k exactly when it
//! is `wall/stripe k` with k < 4; the node status holds exactly the live
//! streams with packets of such labels, in table order. Fed as every
//! node's answer for several polls (each node sees the streams whose id
//! mod 3 is its index, counters growing per poll, some running dry, some
//! failed; some sends answered, some not), the controller accepts every
//! status and answer, only ever names nodes and stripes of its plan,
//! never lists a node twice as a sender of a stripe nor a failed node as
//! one, and after `Stop` issues only one halt per node and, once they
//! are confirmed, is settled and quiet.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_api::serve::{ApiError, Health, StreamInfo, StreamList, StreamState};
use nagare_proto::Nanos;
use nagare_proto::cluster::{
    Controller, Event, Failover, Input, Listed, NodeSpec, NodeStatus, Path, Plan, Request,
    Transmit, label,
};

const NAME: &str = "wall";
const STRIPES: usize = 4;
const NODES: usize = 3;
const POLLS: u64 = 6;
const MS: u64 = 1_000_000;

fn round_trip<T>(text: &str) -> Option<T>
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let value: T = serde_json::from_str(text).ok()?;
    let again = serde_json::to_string(&value).expect("a parsed answer serialises");
    let back: T = serde_json::from_str(&again).expect("and parses again");
    assert_eq!(back, value);
    Some(value)
}

/// What the driver hands the controller of one stream (as
/// `src/cmd/cluster/driver.rs` does), after `poll` polls: packets grow by
/// id mod 7 a poll, and the underruns of every fifth id grow too (a node
/// running dry).
fn listed(s: &StreamInfo, poll: u64) -> Listed<'_> {
    let dry = u64::from(s.id % 5 == 0) * poll;
    Listed {
        label: s.label.as_deref(),
        live: matches!(s.state, StreamState::Playing | StreamState::Ready),
        failure: (s.state == StreamState::Failed).then(|| s.error.as_deref().unwrap_or("?")),
        packets: s.counters.packets.saturating_add(poll * (s.id % 7)),
        underruns: s.counters.underruns.saturating_add(dry),
        path: if s.id % 2 == 0 { Path::Main } else { Path::Dup },
    }
}

/// The node status must be exactly what an independent reading gives.
fn check_status(list: &StreamList) {
    let stripe = |s: &StreamInfo| {
        let l = s.label.as_deref()?;
        (0..STRIPES).find(|&k| format!("{NAME}/stripe {k}") == l)
    };
    let expect: Vec<(usize, u64)> = list
        .streams
        .iter()
        .filter(|s| {
            matches!(s.state, StreamState::Playing | StreamState::Ready) && s.counters.packets > 0
        })
        .filter_map(|s| Some((stripe(s)?, s.counters.packets)))
        .collect();
    let failed: Vec<usize> = list
        .streams
        .iter()
        .filter(|s| s.state == StreamState::Failed)
        .filter_map(stripe)
        .collect();
    let mut held: Vec<usize> = list.streams.iter().filter_map(stripe).collect();
    held.sort_unstable();
    held.dedup();
    for s in &list.streams {
        let Some(l) = s.label.as_deref() else {
            continue;
        };
        let k = label::stripe_of(NAME, STRIPES, l);
        assert_eq!(k.map(|k| label::label(NAME, k)).as_deref(), k.map(|_| l));
        if k.is_none() {
            assert!((0..STRIPES).all(|k| label::label(NAME, k) != l));
        }
    }
    let status = NodeStatus::from_table(
        NAME,
        STRIPES,
        list.streams.iter().map(|s| listed(s, 0)),
        Some(1),
    );
    let got: Vec<(usize, u64)> = status
        .stripes
        .iter()
        .map(|s| (s.stripe, s.packets))
        .collect();
    assert_eq!(got, expect);
    let got_failed: Vec<usize> = status.failed.iter().map(|f| f.stripe).collect();
    assert_eq!(got_failed, failed);
    assert_eq!(status.held, held);
    assert_eq!(status.clock_offset_ns, Some(1));
}

fn plan(failover: Failover) -> Plan {
    let node = |name: &str, stripes: &[usize], alternate: bool| NodeSpec {
        name: name.into(),
        stripes: stripes.to_vec(),
        alternate,
    };
    Plan {
        stripes: STRIPES,
        dup: vec![true, false, true, false],
        nodes: vec![
            node("a", &[0, 1], false),
            node("b", &[2, 3], false),
            node("spare", &[], true),
        ],
        failover,
        poll_interval: Nanos(100 * MS),
        dead_after: Nanos(300 * MS),
        clock_tolerance: Nanos(MS),
        timeout: Nanos(50 * MS),
    }
}

/// Senders and events name only the plan's nodes and stripes; no stripe
/// lists a node twice or a failed node.
fn check_controller(c: &Controller, events: &[Event]) {
    for stripe in 0..STRIPES {
        let senders = c.senders(stripe);
        for (i, &n) in senders.iter().enumerate() {
            assert!(n < NODES && !c.is_failed(n), "{senders:?}");
            assert!(!senders[..i].contains(&n), "{senders:?}");
        }
    }
    for e in events {
        match e {
            Event::Sending { stripe, node }
            | Event::SendUnanswered { stripe, node, .. }
            | Event::NoStandby { stripe, node } => assert!(*stripe < STRIPES && *node < NODES),
            Event::NodeFailed { node, .. } | Event::ClockOff { node, .. } => assert!(*node < NODES),
            Event::NotHalted { node, stripes, .. } => {
                assert!(*node < NODES && stripes.iter().all(|&k| k < STRIPES))
            }
            Event::FailedOver {
                stripe, from, to, ..
            }
            | Event::Moved { stripe, from, to } => {
                assert!(*stripe < STRIPES && *from < NODES && *to < NODES)
            }
            Event::Orphaned { stripe } => assert!(*stripe < STRIPES),
        }
    }
}

fn drive(list: &StreamList, failover: Failover) {
    let mut c = Controller::new(plan(failover)).expect("a valid plan");
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    c.handle_input(Nanos::ZERO, Input::Adopt).unwrap();
    for poll in 0..POLLS {
        let now = Nanos(poll * 100 * MS);
        while let Some(cmd) = c.poll_transmit(now) {
            match cmd {
                Transmit::Poll { node, .. } => {
                    assert!(node < NODES);
                    let table = list
                        .streams
                        .iter()
                        .filter(|s| s.id % NODES as u64 == node as u64)
                        .map(|s| listed(s, poll));
                    let offset = list.streams.first().map(|s| s.counters.late as i64);
                    let status = NodeStatus::from_table(NAME, STRIPES, table, offset);
                    c.handle_input(now, Input::Status { node, status }).unwrap();
                }
                Transmit::Send { node, stripe, .. } => {
                    assert!(node < NODES && stripe < STRIPES);
                    // Every third send goes unanswered (by the data).
                    let request = Request::Send { stripe };
                    let input = if (node + stripe) as u64 % 3 == poll % 3 {
                        Input::Unanswered {
                            node,
                            request,
                            reason: "timed out".into(),
                        }
                    } else {
                        Input::Done { node, request }
                    };
                    c.handle_input(now, input).unwrap();
                }
                Transmit::Halt { node, stripe, .. } => {
                    assert!(node < NODES && stripe.is_none_or(|k| k < STRIPES));
                    let request = Request::Halt { stripe };
                    c.handle_input(now, Input::Done { node, request }).unwrap();
                }
            }
            let events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
            check_controller(&c, &events);
        }
    }
    c.handle_input(Nanos(POLLS * 100 * MS), Input::Stop)
        .unwrap();
    let mut halted = [false; NODES];
    let end = Nanos(POLLS * 100 * MS);
    while let Some(cmd) = c.poll_transmit(end) {
        let Transmit::Halt { node, stripe, .. } = cmd else {
            panic!("{cmd:?} after Stop");
        };
        assert!(stripe.is_none() && !halted[node], "{cmd:?}");
        halted[node] = true;
        let request = Request::Halt { stripe };
        c.handle_input(end, Input::Done { node, request }).unwrap();
    }
    assert_eq!(halted, [true; NODES]);
    assert!(c.is_settled());
    assert_eq!(c.poll_timeout(), None);
    assert!((0..STRIPES).all(|k| c.senders(k).is_empty()));
    assert!((0..NODES).all(|n| c.held(n).is_empty()));
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match selector % 4 {
        0 => {
            round_trip::<Health>(text);
        }
        1 => {
            round_trip::<StreamInfo>(text);
        }
        2 => {
            round_trip::<ApiError>(text);
        }
        _ => {
            if let Some(list) = round_trip::<StreamList>(text) {
                check_status(&list);
                let failover = [Failover::Manual, Failover::Cold, Failover::Hot]
                    [usize::from(selector / 4) % 3];
                drive(&list, failover);
            }
        }
    }
});
