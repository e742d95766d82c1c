//! The controller on virtual time: nodes are simulated by a table of
//! what each sends; every poll answers from it.

use super::*;

const MS: u64 = 1_000_000;

fn node(name: &str, stripes: &[usize], alternate: bool) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        stripes: stripes.to_vec(),
        alternate,
    }
}

fn plan(failover: Failover) -> Plan {
    Plan {
        stripes: 4,
        nodes: vec![
            node("a", &[0, 1], false),
            node("b", &[2, 3], false),
            node("spare", &[], true),
        ],
        failover,
        poll_interval: Nanos(100 * MS),
        dead_after: Nanos(300 * MS),
        clock_tolerance: Nanos(MS),
    }
}

/// Simulated nodes: which stripes each sends and its packet counters;
/// `dead` nodes never answer; `dry` ones report growing underruns.
struct World {
    sending: Vec<Vec<(usize, u64)>>,
    dead: Vec<bool>,
    dry: Vec<bool>,
    underruns: u64,
    log: Vec<Transmit>,
    events: Vec<Event>,
}

impl World {
    fn new(nodes: usize) -> World {
        World {
            sending: vec![Vec::new(); nodes],
            dead: vec![false; nodes],
            dry: vec![false; nodes],
            underruns: 0,
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Runs the controller for `ms` of virtual time in 10 ms steps.
    fn run(&mut self, c: &mut Controller, from: u64, ms: u64) {
        let mut t = from;
        while t <= from + ms {
            let now = Nanos(t * MS);
            // Every node that sends, sends 100 packets per step.
            for (n, s) in self.sending.iter_mut().enumerate() {
                if !self.dead[n] {
                    s.iter_mut().for_each(|(_, p)| *p += 100);
                }
            }
            while let Some(cmd) = c.poll_transmit(now) {
                self.log.push(cmd);
                self.carry_out(c, now, cmd);
            }
            while let Some(e) = c.poll_event() {
                self.events.push(e);
            }
            t += 10;
        }
    }

    fn carry_out(&mut self, c: &mut Controller, now: Nanos, cmd: Transmit) {
        match cmd {
            Transmit::Send { node, stripe } => self.sending[node].push((stripe, 0)),
            Transmit::Halt { node, stripe } => self.sending[node].retain(|&(s, _)| s != stripe),
            Transmit::Poll { node } if self.dead[node] => c
                .handle_input(
                    now,
                    Input::Unreachable {
                        node,
                        reason: "connection refused".into(),
                    },
                )
                .unwrap(),
            Transmit::Poll { node } => {
                if self.dry[node] {
                    self.underruns += 1;
                }
                let stripes = self.sending[node]
                    .iter()
                    .map(|&(stripe, packets)| StripeStatus {
                        stripe,
                        packets,
                        underruns: if self.dry[node] { self.underruns } else { 0 },
                    })
                    .collect();
                let status = NodeStatus {
                    stripes,
                    clock_offset_ns: Some(0),
                };
                c.handle_input(now, Input::Status { node, status }).unwrap();
            }
        }
    }

    fn senders(&self, stripe: usize) -> Vec<usize> {
        (0..self.sending.len())
            .filter(|&n| self.sending[n].iter().any(|&(s, _)| s == stripe))
            .collect()
    }
}

#[test]
fn start_sends_every_stripe_from_its_primary_only() {
    let mut c = Controller::new(plan(Failover::Cold)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 500);
    assert_eq!(w.senders(0), vec![0]);
    assert_eq!(w.senders(3), vec![1]);
    assert!(w.sending[2].is_empty(), "a cold spare stays idle");
    let sending = w
        .events
        .iter()
        .filter(|e| matches!(e, Event::Sending { .. }))
        .count();
    assert_eq!(sending, 4);
    // Polled every 100 ms: 6 polls of each node in 0..=500 ms.
    let polls = w
        .log
        .iter()
        .filter(|c| matches!(c, Transmit::Poll { node: 0 }))
        .count();
    assert_eq!(polls, 6);
}

#[test]
fn hot_standby_runs_a_second_leg_and_takes_over_without_a_new_send() {
    let mut p = plan(Failover::Hot);
    p.nodes[2].stripes = vec![0, 1];
    let mut c = Controller::new(p).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 300);
    assert_eq!(w.senders(0), vec![0, 2]);
    w.dead[0] = true;
    let sends_before = w
        .log
        .iter()
        .filter(|c| matches!(c, Transmit::Send { .. }))
        .count();
    w.run(&mut c, 310, 1000);
    assert!(c.is_failed(0));
    assert_eq!(c.senders(0), vec![2]);
    assert!(w.events.contains(&Event::FailedOver {
        stripe: 0,
        from: 0,
        to: 2,
        hot: true
    }));
    // No other alternate is free, so no new leg was started.
    let sends_after = w
        .log
        .iter()
        .filter(|c| matches!(c, Transmit::Send { .. }))
        .count();
    assert_eq!(sends_before, sends_after);
}

#[test]
fn cold_failover_starts_the_alternate_after_the_dead_time() {
    let mut c = Controller::new(plan(Failover::Cold)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 200);
    w.dead[1] = true;
    w.run(&mut c, 210, 1000);
    assert_eq!(w.senders(2), vec![1, 2]);
    assert_eq!(w.senders(3), vec![1, 2]);
    let failed = w
        .events
        .iter()
        .filter(|e| matches!(e, Event::NodeFailed { node: 1, .. }))
        .count();
    assert_eq!(failed, 1);
    assert!(w.events.contains(&Event::FailedOver {
        stripe: 2,
        from: 1,
        to: 2,
        hot: false
    }));
}

#[test]
fn a_dry_ring_fails_the_node_by_name_of_the_cause() {
    let mut c = Controller::new(plan(Failover::Cold)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 200);
    w.dry[0] = true;
    w.run(&mut c, 210, 300);
    let reason = w.events.iter().find_map(|e| match e {
        Event::NodeFailed { node: 0, reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(reason.unwrap().contains("ran dry"));
    assert_eq!(c.senders(0), vec![2]);
}

#[test]
fn manual_failover_only_reports_and_orphans() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 100);
    c.handle_input(
        Nanos(150 * MS),
        Input::Refused {
            node: 1,
            reason: "401 wrong token".into(),
        },
    )
    .unwrap();
    w.run(&mut c, 150, 100);
    assert!(w.events.contains(&Event::Orphaned { stripe: 2 }));
    assert!(w.sending[2].is_empty());
}

#[test]
fn a_move_halts_the_old_leg_only_after_the_new_one_grew_twice() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 200);
    c.handle_input(Nanos(205 * MS), Input::Move { stripe: 1, to: 2 })
        .unwrap();
    // The next step sends; polls at 300 (seen), 400 (grew once), 500
    // (grew twice: halt).
    w.run(&mut c, 210, 180);
    assert_eq!(w.senders(1), vec![0, 2], "both legs overlap first");
    w.run(&mut c, 400, 200);
    assert_eq!(w.senders(1), vec![2]);
    assert!(w.events.contains(&Event::Moved {
        stripe: 1,
        from: 0,
        to: 2
    }));
    assert!(!c.is_moving());
    assert_eq!(w.senders(0), vec![0], "other stripes stay put");
}

#[test]
fn bad_moves_and_plans_are_refused_with_reasons() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    assert_eq!(
        c.handle_input(Nanos::ZERO, Input::Move { stripe: 0, to: 2 }),
        Err(Error::NotSent { stripe: 0 })
    );
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    assert_eq!(
        c.handle_input(Nanos::ZERO, Input::Move { stripe: 9, to: 2 }),
        Err(Error::NoSuchStripe { stripe: 9 })
    );
    assert_eq!(
        c.handle_input(Nanos::ZERO, Input::Move { stripe: 0, to: 0 }),
        Err(Error::AlreadySending { stripe: 0, node: 0 })
    );
    let mut p = plan(Failover::Manual);
    p.nodes[1].stripes = vec![1, 2, 3];
    assert_eq!(
        Controller::new(p).unwrap_err(),
        Error::Primaries {
            stripe: 1,
            primaries: 2
        }
    );
    let mut p = plan(Failover::Manual);
    p.nodes[2].name = "a".into();
    assert!(matches!(
        Controller::new(p),
        Err(Error::DuplicateNode { .. })
    ));
}

#[test]
fn a_clock_off_beyond_tolerance_is_reported_once() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    for t in 0..3 {
        let status = NodeStatus {
            stripes: Vec::new(),
            clock_offset_ns: Some(5 * MS as i64),
        };
        c.handle_input(Nanos(t * 100 * MS), Input::Status { node: 1, status })
            .unwrap();
    }
    let mut offs = Vec::new();
    while let Some(e) = c.poll_event() {
        if let Event::ClockOff { node, offset_ns } = e {
            offs.push((node, offset_ns));
        }
    }
    assert_eq!(offs, vec![(1, 5 * MS as i64)]);
}

#[test]
fn adopt_takes_over_running_legs_for_a_move_from_another_process() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    c.handle_input(Nanos::ZERO, Input::Adopt).unwrap();
    let running = |stripes: &[usize]| NodeStatus {
        stripes: stripes
            .iter()
            .map(|&stripe| StripeStatus {
                stripe,
                packets: 1000,
                underruns: 0,
            })
            .collect(),
        clock_offset_ns: None,
    };
    c.handle_input(
        Nanos::ZERO,
        Input::Status {
            node: 0,
            status: running(&[0, 1]),
        },
    )
    .unwrap();
    c.handle_input(
        Nanos::ZERO,
        Input::Status {
            node: 1,
            status: running(&[2, 3]),
        },
    )
    .unwrap();
    assert_eq!(c.senders(1), vec![0]);
    c.handle_input(Nanos::ZERO, Input::Move { stripe: 1, to: 2 })
        .unwrap();
    assert_eq!(
        c.poll_transmit(Nanos::ZERO),
        Some(Transmit::Send { node: 2, stripe: 1 })
    );
}

/// Another process (`nagare cluster move`) moved stripe 0 from node a to
/// the spare and halted the old leg between two of our polls: polling a
/// first, the controller finds its leg gone before it has seen the new
/// one. The stripe is not orphaned; the spare's leg is taken over.
#[test]
fn a_leg_moved_by_another_process_is_adopted_without_an_orphan() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    c.handle_input(Nanos::ZERO, Input::Adopt).unwrap();
    w.run(&mut c, 0, 200);
    assert_eq!(w.senders(0), vec![0]);
    // The other process's move, all between polls 200 and 300.
    w.sending[2].push((0, 5000));
    w.sending[0].retain(|&(s, _)| s != 0);
    w.run(&mut c, 210, 300);
    assert!(
        !w.events.iter().any(|e| matches!(e, Event::Orphaned { .. })),
        "{:?}",
        w.events
    );
    assert_eq!(c.senders(0), vec![2]);
    assert!(w.events.contains(&Event::Sending { stripe: 0, node: 2 }));
}

/// A leg stopped elsewhere with no other sender: once every node has
/// answered without it since, it is reported, once.
#[test]
fn a_vanished_leg_nobody_took_over_is_orphaned_once_every_node_answered() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    c.handle_input(Nanos::ZERO, Input::Adopt).unwrap();
    w.run(&mut c, 0, 200);
    w.sending[1].retain(|&(s, _)| s != 3);
    let orphans = |w: &World| {
        w.events
            .iter()
            .filter(|e| **e == Event::Orphaned { stripe: 3 })
            .count()
    };
    // The 300 ms round polls a, then b (leg gone), then the spare: a has
    // not answered since.
    w.run(&mut c, 210, 90);
    assert_eq!(orphans(&w), 0);
    // At 400 a answers without it too.
    w.run(&mut c, 310, 90);
    assert_eq!(orphans(&w), 1);
    w.run(&mut c, 410, 500);
    assert_eq!(orphans(&w), 1);
    assert!(c.senders(3).is_empty());
}

/// The answer that would confirm an orphan never comes: the silent node
/// is declared failed, and then the stripe is reported.
#[test]
fn an_orphan_waits_for_a_silent_node_until_it_has_failed() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    c.handle_input(Nanos::ZERO, Input::Adopt).unwrap();
    w.run(&mut c, 0, 200);
    w.dead[2] = true;
    w.sending[1].retain(|&(s, _)| s != 3);
    w.run(&mut c, 210, 200);
    assert!(!w.events.contains(&Event::Orphaned { stripe: 3 }));
    w.run(&mut c, 410, 300);
    let failed = w
        .events
        .iter()
        .position(|e| matches!(e, Event::NodeFailed { node: 2, .. }));
    let orphaned = w
        .events
        .iter()
        .position(|e| *e == Event::Orphaned { stripe: 3 });
    assert!(failed.unwrap() < orphaned.unwrap(), "{:?}", w.events);
}

#[test]
fn a_node_table_gives_the_live_sending_legs_of_this_cluster_only() {
    let row = |label: Option<&'static str>, live: bool, packets: u64| Listed {
        label,
        live,
        packets,
        underruns: 7,
    };
    let table = [
        row(Some("wall/stripe 2"), true, 10),
        row(Some("wall/stripe 1"), false, 10), // paused or finished
        row(Some("wall/stripe 3"), true, 0),   // not started yet
        row(Some("other/stripe 0"), true, 10), // another cluster
        row(None, true, 10),                   // somebody's plain stream
        row(Some("wall/stripe 4"), true, 10),  // beyond the split
        row(Some("wall/stripe 0"), true, 3),
    ];
    let s = NodeStatus::from_table("wall", 4, table, Some(-5));
    assert_eq!(
        s.stripes,
        vec![
            StripeStatus {
                stripe: 2,
                packets: 10,
                underruns: 7
            },
            StripeStatus {
                stripe: 0,
                packets: 3,
                underruns: 7
            }
        ]
    );
    assert_eq!(s.clock_offset_ns, Some(-5));
}
