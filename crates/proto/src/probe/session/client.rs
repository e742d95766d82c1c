//! The client side of a [`Session`]: hello, idle RTT, the stream in either
//! direction, and the results.

use std::net::SocketAddr;

use super::{
    ClientConfig, DRAIN, Event, HANDSHAKE_TIMEOUT, IDLE_ECHOES, IDLE_WAIT, INTERRUPT_GRACE, Leg,
    Phase, RESULTS_TIMEOUT, Results, Session, TEST_GRACE, Test,
};
use crate::probe::control::{ControlMessage, Frame};
use crate::probe::error::{Error, MessageKind, Stage};
use crate::probe::params::Direction;
use crate::probe::report::{Arrival, ReceiverReport, RttSummary, SenderReport};
use crate::probe::wire::PROTOCOL_VERSION;
use crate::units::Nanos;

impl Session {
    /// A client session asking the server at `peer` for the test in
    /// `config`; the hello is queued. Refuses parameters out of range
    /// before anything is sent.
    pub fn client(now: Nanos, peer: SocketAddr, config: ClientConfig) -> Result<Session, Error> {
        let params = config.params;
        let schedule = params.validate()?;
        let deadline = now + HANDSHAKE_TIMEOUT;
        let mut s = Session::new(peer, Phase::Welcome { deadline }, None);
        s.test = Some(Test {
            id: 0,
            params,
            schedule,
        });
        s.send(&ControlMessage::Hello {
            version: PROTOCOL_VERSION,
            token: config.token,
            params,
        });
        Ok(s)
    }

    pub(super) fn client_frame(&mut self, now: Nanos, frame: Frame) {
        let msg = match frame {
            Frame::Records(records) => return self.client_records(now, records),
            Frame::Message(m) => m,
        };
        let got = msg.kind();
        match (self.phase, msg) {
            (_, ControlMessage::Abort { message }) => self.end(Event::Aborted { message }),
            // The server counted an interval of the streams it receives.
            (_, ControlMessage::Interval { intervals }) if !self.reverse() => {
                self.events.push_back(Event::Interval {
                    direction: Direction::ClientToServer,
                    intervals,
                });
            }
            (
                Phase::Stream { .. }
                | Phase::Settle { .. }
                | Phase::Results { .. }
                | Phase::Draining { .. },
                ControlMessage::Done { sender },
            ) if self.bidir() && self.server_done.is_none() => {
                self.server_done = Some((sender, now));
                if let Phase::Draining { deadline } = &mut self.phase {
                    *deadline = now + DRAIN;
                }
            }
            (Phase::Welcome { .. }, ControlMessage::Welcome { version, session }) => {
                self.client_welcome(now, version, session);
            }
            (
                Phase::Welcome { .. },
                ControlMessage::Refused {
                    version,
                    reason,
                    message,
                },
            ) => self.end(Event::Refused {
                reason,
                version,
                message,
            }),
            (Phase::Stream { done: None, .. }, ControlMessage::Done { sender })
                if self.reverse() =>
            {
                self.sender = Some(sender);
                if let Phase::Stream { done, .. } = &mut self.phase {
                    *done = Some(now);
                }
            }
            (
                Phase::Results {
                    announced: None, ..
                },
                ControlMessage::Report { receiver, records },
            ) => self.client_report(now, receiver, records),
            _ => {
                let stage = self.stage();
                self.fail(Error::Unexpected { got, stage });
            }
        }
    }

    fn client_welcome(&mut self, now: Nanos, version: u32, session: u64) {
        if version != PROTOCOL_VERSION {
            return self.fail(Error::Version {
                got: version,
                want: PROTOCOL_VERSION,
            });
        }
        let Some(t) = &mut self.test else { return };
        t.id = session;
        let t = *t;
        let cap = if t.params.server_sends() {
            t.schedule.record_cap()
        } else {
            0
        };
        self.meter_for(&t, cap);
        self.events.push_back(Event::Accepted { session });
        self.phase = Phase::IdleRtt { last: None };
        self.meter.next_echo = now;
        if self.interrupted {
            self.client_start_test(now);
        }
    }

    /// Ends the idle RTT phase: the stream starts (or, interrupted
    /// before it began, the test goes straight to its report).
    pub(super) fn client_start_test(&mut self, now: Nanos) {
        let Some(t) = self.test else { return };
        self.phase = self.stream_phase(now);
        self.meter.next_echo = now;
        if t.params.reverse {
            if self.interrupted {
                self.client_stop_reverse(now);
            }
        } else if self.interrupted {
            if t.params.bidir {
                self.ask_to_stop();
            }
            self.sender = Some(vec![SenderReport::default(); t.params.streams as usize]);
            self.phase = Phase::Settle { until: now };
        } else {
            // Bidir: the echo requests open the path for the server's
            // stream until it flows.
            self.start_stream(self.peer);
        }
    }

    /// Asks the server to stop the stream it sends; it answers with done
    /// and its report of what it sent.
    fn ask_to_stop(&mut self) {
        self.send(&ControlMessage::Abort {
            message: "interrupted (Ctrl-C) at the client".into(),
        });
    }

    /// Asks the server to stop its stream; it answers with done and its
    /// report of what it sent.
    fn client_stop_reverse(&mut self, now: Nanos) {
        self.ask_to_stop();
        if let Phase::Stream { stopping, .. } = &mut self.phase {
            *stopping = Some(now);
        }
    }

    pub(super) fn client_interrupt(&mut self, now: Nanos) {
        if self.bidir() {
            return self.client_interrupt_bidir(now);
        }
        match self.phase {
            Phase::Stream {
                stopping: None,
                done: None,
                ..
            } if self.reverse() => self.client_stop_reverse(now),
            Phase::Stream { .. } => self.stop_stream(),
            Phase::IdleRtt { .. } => self.client_start_test(now),
            // Before the welcome the flag is enough; after the stream the
            // results are on their way.
            _ => {}
        }
    }

    /// Bidir: stops this side's stream, and asks the server to stop its
    /// own unless it said done already.
    fn client_interrupt_bidir(&mut self, now: Nanos) {
        match self.phase {
            // Before the welcome the flag is enough.
            Phase::Welcome { .. } | Phase::Ended => {}
            Phase::IdleRtt { .. } => self.client_start_test(now),
            _ => {
                self.stop_stream();
                if self.server_done.is_none() {
                    self.ask_to_stop();
                }
            }
        }
    }

    pub(super) fn client_time(&mut self, now: Nanos) {
        let duration = self.test.map_or(Nanos::ZERO, |t| t.params.duration());
        match self.phase {
            Phase::Welcome { deadline } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Welcome,
                after: HANDSHAKE_TIMEOUT,
            }),
            Phase::IdleRtt { last: Some(last) }
                if self.meter.requests >= IDLE_ECHOES && now >= last + IDLE_WAIT =>
            {
                self.client_start_test(now);
            }
            Phase::Stream { done: Some(d), .. } if now >= d + DRAIN => {
                self.client_reverse_results()
            }
            Phase::Stream {
                done: None,
                stopping: Some(s),
                ..
            } if now >= s + INTERRUPT_GRACE => self.fail(Error::Timeout {
                stage: Stage::Stopping,
                after: INTERRUPT_GRACE,
            }),
            Phase::Stream { deadline, .. } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Stream,
                after: duration + TEST_GRACE,
            }),
            Phase::Settle { until } if now >= until => {
                let sender = self.sender.clone().unwrap_or_default();
                self.send(&ControlMessage::Done { sender });
                self.phase = Phase::Results {
                    deadline: now + RESULTS_TIMEOUT,
                    announced: None,
                };
            }
            Phase::Results { deadline, .. } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Results,
                after: RESULTS_TIMEOUT,
            }),
            Phase::Draining { deadline } if now >= deadline => {
                if self.server_done.is_some() {
                    self.client_bidir_results();
                } else {
                    self.fail(Error::Timeout {
                        stage: Stage::Results,
                        after: RESULTS_TIMEOUT,
                    });
                }
            }
            _ => {}
        }
    }

    fn client_report(&mut self, now: Nanos, receiver: Vec<ReceiverReport>, announced: u64) {
        let Some(t) = self.test else { return };
        if receiver.len() != t.params.streams as usize {
            return self.fail(Error::Streams {
                got: receiver.len(),
                want: t.params.streams,
            });
        }
        // Records of every packet planned, duplicates included, at most;
        // none unless asked for.
        let max = if t.params.records {
            t.schedule.record_cap() as u64
        } else {
            0
        };
        if announced > max {
            return self.fail(Error::TooManyRecords { announced, max });
        }
        self.report_in = Some(receiver);
        self.phase = Phase::Results {
            deadline: now + RESULTS_TIMEOUT,
            announced: Some(announced),
        };
        self.client_check_records(now);
    }

    fn client_records(&mut self, now: Nanos, mut records: Vec<Arrival>) {
        let Phase::Results {
            announced: Some(n), ..
        } = self.phase
        else {
            let stage = self.stage();
            return self.fail(Error::Unexpected {
                got: MessageKind::Records,
                stage,
            });
        };
        if (self.records_in.len() + records.len()) as u64 > n {
            return self.fail(Error::ExtraRecords { announced: n });
        }
        self.records_in.append(&mut records);
        self.phase = Phase::Results {
            deadline: now + RESULTS_TIMEOUT,
            announced: Some(n),
        };
        self.client_check_records(now);
    }

    fn client_check_records(&mut self, now: Nanos) {
        let Phase::Results {
            announced: Some(n), ..
        } = self.phase
        else {
            return;
        };
        if self.records_in.len() as u64 != n {
            return;
        }
        if self.bidir() {
            // The server's stream drains for its own time after its done.
            let deadline = match self.server_done {
                Some((_, at)) => at + DRAIN,
                None => now + RESULTS_TIMEOUT,
            };
            self.phase = Phase::Draining { deadline };
            return;
        }
        let receiver = self.report_in.take().unwrap_or_default();
        let sender = self.sender.take().unwrap_or_default();
        let records = std::mem::take(&mut self.records_in);
        self.client_finish(sender, receiver, records, None);
    }

    /// Bidir: the server's report of the client's stream is in, and the
    /// server's stream drained; the client analyzes that one.
    fn client_bidir_results(&mut self) {
        let back_sender = self
            .server_done
            .as_ref()
            .map(|(s, _)| s.clone())
            .unwrap_or_default();
        self.finish_live(&back_sender);
        let back = Leg {
            receiver: self.analyze(&back_sender),
            sender: back_sender,
        };
        let receiver = self.report_in.take().unwrap_or_default();
        let sender = self.sender.take().unwrap_or_default();
        let records = std::mem::take(&mut self.records_in);
        self.client_finish(sender, receiver, records, Some(back));
    }

    /// Reverse mode: the client received the stream and analyzes it.
    fn client_reverse_results(&mut self) {
        let sender = self.sender.take().unwrap_or_default();
        self.finish_live(&sender);
        let receiver = self.analyze(&sender);
        let records = self
            .meter
            .arrivals
            .first_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        self.client_finish(sender, receiver, records, None);
    }

    fn client_finish(
        &mut self,
        sender: Vec<SenderReport>,
        receiver: Vec<ReceiverReport>,
        records: Vec<Arrival>,
        back: Option<Leg>,
    ) {
        let m = &self.meter;
        let idle = m.requests.min(IDLE_ECHOES);
        let results = Results {
            sender,
            receiver,
            back,
            rtt_idle: RttSummary::of(&m.rtt_idle, idle),
            rtt_loaded: RttSummary::of(&m.rtt_loaded, m.requests - idle),
            records,
        };
        self.end(Event::Results(Box::new(results)));
    }
}
