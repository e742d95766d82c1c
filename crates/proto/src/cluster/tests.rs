//! The controller on virtual time: nodes are simulated by a table of
//! what each sends; every poll answers from it.

use super::*;

const MS: u64 = 1_000_000;
const T: Nanos = Nanos(50 * MS);

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
        dup: vec![false; 4],
        nodes: vec![
            node("a", &[0, 1], false),
            node("b", &[2, 3], false),
            node("spare", &[], true),
        ],
        failover,
        poll_interval: Nanos(100 * MS),
        dead_after: Nanos(300 * MS),
        clock_tolerance: Nanos(MS),
        timeout: T,
    }
}

/// Simulated nodes: which stripes each sends (with packet counters and
/// path) and which of its legs failed; `dead` nodes never answer; `dry`
/// ones report growing underruns; `late` counts sends a node still
/// carries out but whose answer is lost, `lost` sends that never arrive,
/// `deaf` halts that never arrive.
struct World {
    sending: Vec<Vec<(usize, u64, Path)>>,
    failed: Vec<Vec<(usize, String)>>,
    dead: Vec<bool>,
    dry: Vec<bool>,
    late: Vec<u32>,
    lost: Vec<u32>,
    deaf: Vec<u32>,
    underruns: u64,
    log: Vec<Transmit>,
    events: Vec<Event>,
}

impl World {
    fn new(nodes: usize) -> World {
        World {
            sending: vec![Vec::new(); nodes],
            failed: vec![Vec::new(); nodes],
            dead: vec![false; nodes],
            dry: vec![false; nodes],
            late: vec![0; nodes],
            lost: vec![0; nodes],
            deaf: vec![0; nodes],
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
                    s.iter_mut().for_each(|(_, p, _)| *p += 100);
                }
            }
            self.step(c, now);
            t += 10;
        }
    }

    /// Carries out everything due at `now`.
    fn step(&mut self, c: &mut Controller, now: Nanos) {
        while let Some(cmd) = c.poll_transmit(now) {
            self.log.push(cmd);
            let input = self.carry_out(cmd);
            c.handle_input(now, input).unwrap();
        }
        while let Some(e) = c.poll_event() {
            self.events.push(e);
        }
    }

    fn carry_out(&mut self, cmd: Transmit) -> Input {
        let node = match cmd {
            Transmit::Poll { node, .. }
            | Transmit::Send { node, .. }
            | Transmit::Halt { node, .. } => node,
        };
        let unanswered = |request| Input::Unanswered {
            node,
            request,
            reason: "timed out".into(),
        };
        match cmd {
            Transmit::Send { stripe, .. } if self.dead[node] || take(&mut self.lost[node]) => {
                unanswered(Request::Send { stripe })
            }
            Transmit::Send { stripe, path, .. } => {
                // The key makes a second send of a leg a replay.
                if !self.sending[node].iter().any(|s| s.0 == stripe) {
                    self.sending[node].push((stripe, 0, path));
                }
                if take(&mut self.late[node]) {
                    unanswered(Request::Send { stripe })
                } else {
                    Input::Done {
                        node,
                        request: Request::Send { stripe },
                    }
                }
            }
            Transmit::Halt { stripe, .. } if self.dead[node] || take(&mut self.deaf[node]) => {
                unanswered(Request::Halt { stripe })
            }
            Transmit::Halt { stripe, .. } => {
                let gone = |k: usize| stripe.is_none_or(|s| s == k);
                self.sending[node].retain(|s| !gone(s.0));
                self.failed[node].retain(|s| !gone(s.0));
                Input::Done {
                    node,
                    request: Request::Halt { stripe },
                }
            }
            Transmit::Poll { .. } if self.dead[node] => unanswered(Request::Poll),
            Transmit::Poll { .. } => Input::Status {
                node,
                status: self.status(node),
            },
        }
    }

    fn status(&mut self, node: usize) -> NodeStatus {
        if self.dry[node] {
            self.underruns += 1;
        }
        let underruns = if self.dry[node] { self.underruns } else { 0 };
        let stripes: Vec<StripeStatus> = self.sending[node]
            .iter()
            .filter(|s| s.1 > 0)
            .map(|&(stripe, packets, path)| StripeStatus {
                stripe,
                packets,
                underruns,
                path,
            })
            .collect();
        let failed: Vec<FailedLeg> = self.failed[node]
            .iter()
            .map(|(stripe, reason)| FailedLeg {
                stripe: *stripe,
                reason: reason.clone(),
            })
            .collect();
        let mut held: Vec<usize> = self.sending[node].iter().map(|s| s.0).collect();
        held.extend(failed.iter().map(|f| f.stripe));
        held.sort_unstable();
        held.dedup();
        NodeStatus {
            stripes,
            failed,
            held,
            clock_offset_ns: Some(0),
        }
    }

    fn senders(&self, stripe: usize) -> Vec<usize> {
        (0..self.sending.len())
            .filter(|&n| self.sending[n].iter().any(|s| s.0 == stripe))
            .collect()
    }

    /// The sends of `stripe` to `node`, as (retry, timeout).
    fn sends(&self, node: usize, stripe: usize) -> Vec<(bool, Nanos)> {
        self.log
            .iter()
            .filter_map(|c| match *c {
                Transmit::Send {
                    node: n,
                    stripe: s,
                    retry,
                    timeout,
                    ..
                } if (n, s) == (node, stripe) => Some((retry, timeout)),
                _ => None,
            })
            .collect()
    }

    /// The halts sent to `node`, as (stripe, timeout).
    fn halts(&self, node: usize) -> Vec<(Option<usize>, Nanos)> {
        self.log
            .iter()
            .filter_map(|c| match *c {
                Transmit::Halt {
                    node: n,
                    stripe,
                    timeout,
                } if n == node => Some((stripe, timeout)),
                _ => None,
            })
            .collect()
    }

    fn failed_reason(&self, node: usize) -> Option<String> {
        self.events.iter().find_map(|e| match e {
            Event::NodeFailed { node: n, reason } if *n == node => Some(reason.clone()),
            _ => None,
        })
    }

    /// Stops and runs until settled (bounded).
    fn stop(&mut self, c: &mut Controller, at: u64) {
        c.handle_input(Nanos(at * MS), Input::Stop).unwrap();
        self.run(c, at, 2000);
        assert!(c.is_settled(), "{c:?}");
        assert_eq!(c.poll_timeout(), None);
    }
}

/// Counts one down; true if there was one.
fn take(n: &mut u32) -> bool {
    let had = *n > 0;
    *n = n.saturating_sub(1);
    had
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
        .filter(|c| matches!(c, Transmit::Poll { node: 0, .. }))
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
            request: Request::Poll,
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
        Err(Error::AlreadySending {
            stripe: 0,
            node: "a".into()
        })
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
            clock_offset_ns: Some(5 * MS as i64),
            ..NodeStatus::default()
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
                path: Path::Main,
            })
            .collect(),
        held: stripes.to_vec(),
        ..NodeStatus::default()
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
        Some(Transmit::Send {
            node: 2,
            stripe: 1,
            path: Path::Main,
            retry: false,
            timeout: T
        })
    );
    // Taking over what runs is the starting picture, not news.
    assert_eq!(c.poll_event(), None);
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
    w.sending[2].push((0, 5000, Path::Main));
    w.sending[0].retain(|s| s.0 != 0);
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
    w.sending[1].retain(|s| s.0 != 3);
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
    w.sending[1].retain(|s| s.0 != 3);
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

/// A node did what it was asked but its answer was lost: the follow-up
/// poll (twice the patience) finds the leg, which stands; nothing is
/// sent twice.
#[test]
fn an_unanswered_send_that_landed_is_found_and_kept() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    w.late[0] = 1;
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 500);
    assert_eq!(w.sends(0, 0), vec![(false, T)]);
    assert!(w.events.contains(&Event::SendUnanswered {
        stripe: 0,
        node: 0,
        reason: "timed out".into()
    }));
    // The follow-up is the very next request to the node, with 2T.
    let after = w
        .log
        .iter()
        .skip_while(|t| !matches!(t, Transmit::Send { node: 0, .. }))
        .find(|t| matches!(t, Transmit::Poll { node: 0, .. }));
    assert_eq!(
        after,
        Some(&Transmit::Poll {
            node: 0,
            timeout: Nanos(2 * T.0)
        })
    );
    assert_eq!(w.senders(0), vec![0]);
    assert_eq!(c.senders(0), vec![0]);
    assert!(c.is_settled());
    assert!(w.events.contains(&Event::Sending { stripe: 0, node: 0 }));
}

/// The send never reached the node: the follow-up finds nothing and the
/// same leg is asked again (same key) with twice the patience.
#[test]
fn an_unanswered_send_that_did_not_land_is_sent_again_as_a_retry() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    w.lost[1] = 1;
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 500);
    assert_eq!(w.sends(1, 2), vec![(false, T), (true, Nanos(2 * T.0))]);
    assert_eq!(w.sends(1, 3), vec![(false, T)]);
    assert_eq!(w.senders(2), vec![1]);
    assert!(w.events.contains(&Event::Sending { stripe: 2, node: 1 }));
    assert!(c.is_settled());
}

/// A node that answers polls but never a send is given up after
/// [`TRIES`] sends, each with more patience, and fails over.
#[test]
fn a_node_that_never_answers_a_send_fails_after_three_tries() {
    let mut c = Controller::new(plan(Failover::Cold)).unwrap();
    let mut w = World::new(3);
    w.lost[1] = 99;
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 800);
    let t2 = Nanos(2 * T.0);
    let t4 = Nanos(4 * T.0);
    assert_eq!(w.sends(1, 2), vec![(false, T), (true, t2), (true, t4)]);
    let reason = w.failed_reason(1).unwrap();
    assert!(
        reason.starts_with("no answer to 3 requests to send stripe 2: timed out"),
        "{reason}"
    );
    assert_eq!(c.senders(2), vec![2], "the spare took over");
    assert_eq!(w.senders(2), vec![2]);
}

/// Stop clears every node, failed ones too, and tries a node that does
/// not confirm again with doubling patience until it does.
#[test]
fn stop_halts_every_node_until_each_confirms() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 300);
    w.deaf[1] = 2;
    w.stop(&mut c, 310);
    assert_eq!(w.halts(0), vec![(None, T)]);
    assert_eq!(w.halts(2), vec![(None, T)]);
    let t2 = Nanos(2 * T.0);
    let t4 = Nanos(4 * T.0);
    assert_eq!(w.halts(1), vec![(None, T), (None, t2), (None, t4)]);
    assert!(w.sending.iter().all(Vec::is_empty), "{:?}", w.sending);
    assert!(
        !w.events
            .iter()
            .any(|e| matches!(e, Event::NotHalted { .. }))
    );
    assert!((0..3).all(|n| c.held(n).is_empty()));
}

/// A node that never confirms is named with every stripe it may still
/// send, including a leg whose send went unanswered before it failed.
#[test]
fn a_halt_never_confirmed_names_the_stripes_the_node_may_hold() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    w.late[0] = 1;
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.step(&mut c, Nanos::ZERO);
    // Node a made stripe 0 but its answer was lost, then went silent.
    w.dead[0] = true;
    w.run(&mut c, 10, 600);
    assert!(c.is_failed(0));
    w.stop(&mut c, 620);
    assert_eq!(w.halts(0).len(), TRIES as usize);
    let left: Vec<&Event> = w
        .events
        .iter()
        .filter(|e| matches!(e, Event::NotHalted { .. }))
        .collect();
    assert_eq!(
        left,
        vec![&Event::NotHalted {
            node: 0,
            stripes: vec![0, 1],
            reason: "timed out".into()
        }]
    );
    assert!(w.sending[1].is_empty());
}

/// A refused halt is not repeated: the node said no (a wrong token).
#[test]
fn a_refused_halt_is_reported_at_once() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 200);
    c.handle_input(Nanos(300 * MS), Input::Stop).unwrap();
    let mut refused = 0;
    while let Some(t) = c.poll_transmit(Nanos(300 * MS)) {
        let Transmit::Halt { node, stripe, .. } = t else {
            panic!("{t:?} after a stop");
        };
        let reason = "401 wrong token".to_string();
        let request = Request::Halt { stripe };
        let input = if node == 1 {
            refused += 1;
            Input::Refused {
                node,
                request,
                reason,
            }
        } else {
            Input::Done { node, request }
        };
        c.handle_input(Nanos(300 * MS), input).unwrap();
    }
    assert_eq!(refused, 1);
    assert!(c.is_settled());
    let events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(events.contains(&Event::NotHalted {
        node: 1,
        stripes: vec![2, 3],
        reason: "401 wrong token".into()
    }));
}

/// A leg the node reports failed fails the node with the node's reason;
/// the stripe is no longer counted as sent, and stop removes the entry.
#[test]
fn a_failed_leg_fails_its_node_with_the_nodes_reason() {
    let mut c = Controller::new(plan(Failover::Manual)).unwrap();
    let mut w = World::new(3);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 200);
    w.sending[1].retain(|s| s.0 != 3);
    w.failed[1].push((3, "opening 'clip.yuv': No such file".into()));
    w.run(&mut c, 210, 200);
    assert_eq!(
        w.failed_reason(1).as_deref(),
        Some("its leg of stripe 3 failed: opening 'clip.yuv': No such file")
    );
    assert!(c.senders(3).is_empty() && c.senders(2).is_empty());
    assert_eq!(c.held(1), vec![2, 3]);
    w.stop(&mut c, 420);
    assert!(w.failed[1].is_empty() && w.sending[1].is_empty());
}

fn hot_plan(dup: bool) -> Plan {
    let mut p = plan(Failover::Hot);
    p.dup = vec![dup; 4];
    p.nodes[2].stripes = vec![0, 1];
    p.nodes.push(node("c", &[], true));
    p
}

/// Under hot standby the spare already sends stripe 0: a move to it
/// starts nothing, halts the other leg once the spare's is seen growing,
/// and says the stripe has no standby left.
#[test]
fn a_move_to_the_hot_standby_halts_the_other_leg() {
    let mut c = Controller::new(hot_plan(true)).unwrap();
    let mut w = World::new(4);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 300);
    let sends = w.log.len();
    c.handle_input(Nanos(305 * MS), Input::Move { stripe: 0, to: 2 })
        .unwrap();
    w.run(&mut c, 310, 300);
    assert!(
        !w.log[sends..]
            .iter()
            .any(|t| matches!(t, Transmit::Send { .. }))
    );
    assert_eq!(w.senders(0), vec![2]);
    assert_eq!(w.halts(0), vec![(Some(0), T)]);
    let i = w.events.iter().position(|e| {
        *e == Event::Moved {
            stripe: 0,
            from: 0,
            to: 2,
        }
    });
    assert_eq!(
        w.events.get(i.unwrap() + 1),
        Some(&Event::NoStandby { stripe: 0, node: 2 })
    );
    assert_eq!(
        c.handle_input(Nanos(700 * MS), Input::Move { stripe: 0, to: 2 }),
        Err(Error::AlreadySending {
            stripe: 0,
            node: "spare".into()
        })
    );
}

/// The primary sends to `to`, the standby to `dup`; a move of the
/// primary's leg to another node takes the primary's address, so the two
/// legs left still cross the network apart.
#[test]
fn a_move_keeps_the_two_legs_on_two_addresses() {
    let mut c = Controller::new(hot_plan(true)).unwrap();
    let mut w = World::new(4);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 300);
    assert_eq!(w.sending[0][0].2, Path::Main);
    assert_eq!(w.sending[2][0].2, Path::Dup);
    c.handle_input(Nanos(305 * MS), Input::Move { stripe: 0, to: 3 })
        .unwrap();
    w.run(&mut c, 310, 400);
    assert_eq!(w.senders(0), vec![2, 3]);
    assert_eq!(w.sending[3][0].2, Path::Main);
    assert!(w.events.contains(&Event::Moved {
        stripe: 0,
        from: 0,
        to: 3
    }));
    // A plan without second addresses sends every leg to `to`.
    let mut c = Controller::new(hot_plan(false)).unwrap();
    let mut w = World::new(4);
    c.handle_input(Nanos::ZERO, Input::Start).unwrap();
    w.run(&mut c, 0, 100);
    assert_eq!(w.sending[2][0].2, Path::Main);
}
