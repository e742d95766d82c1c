//! The server side of a [`Session`]: the hello and its checks (version,
//! token, rate cap, parameters), then receiving the stream and reporting
//! (forward) or streaming to the address the client opened (reverse),
//! or both at once (bidir).

use std::net::SocketAddr;

use subtle::ConstantTimeEq;

use super::{
    DRAIN, Event, HELLO_TIMEOUT, OPEN_TIMEOUT, Phase, SETTLE, ServerConfig, Session, TEST_GRACE,
    Test,
};
use crate::probe::control::{ControlMessage, Frame, RECORDS_PER_FRAME, Refusal, records_frame};
use crate::probe::error::{Error, MessageKind, Stage};
use crate::probe::params::{Direction, Schedule, TestParams};
use crate::probe::report::SenderReport;
use crate::probe::wire::PROTOCOL_VERSION;
use crate::units::Nanos;

impl Session {
    /// A server session for the client connected from `peer`: it checks
    /// the hello against `config` and, if it accepts, runs the test as
    /// `session` (an id the driver draws at random, so datagrams of an
    /// earlier test never count in this one).
    pub fn server(now: Nanos, peer: SocketAddr, config: ServerConfig, session: u64) -> Session {
        let deadline = now + HELLO_TIMEOUT;
        let phase = Phase::Hello {
            deadline,
            busy: false,
        };
        let mut s = Session::new(peer, phase, Some(config));
        s.offered_id = session;
        s
    }

    /// A server session that only tells the client at `peer` that another
    /// test is running, once its hello has come (or its time is up), so
    /// closing does not reset the connection before the client reads it.
    pub fn busy(now: Nanos, peer: SocketAddr) -> Session {
        let deadline = now + HELLO_TIMEOUT;
        let phase = Phase::Hello {
            deadline,
            busy: true,
        };
        Session::new(peer, phase, Some(ServerConfig::default()))
    }

    pub(super) fn refuse_busy(&mut self) {
        self.refuse(
            Refusal::Busy,
            "another test is running on this server; try again when it ends".into(),
        );
    }

    fn refuse(&mut self, reason: Refusal, message: String) {
        self.send(&ControlMessage::Refused {
            version: PROTOCOL_VERSION,
            reason,
            message: message.clone(),
        });
        self.end(Event::Refused {
            reason,
            version: PROTOCOL_VERSION,
            message,
        });
    }

    pub(super) fn server_frame(&mut self, now: Nanos, frame: Frame) {
        match self.phase {
            Phase::Hello { busy: true, .. } => self.refuse_busy(),
            Phase::Hello { .. } => self.server_hello(now, frame),
            _ if self.bidir() => self.server_bidir_frame(now, frame),
            Phase::Open { .. } => match frame {
                // Stopped before it began: report that nothing was sent.
                Frame::Message(ControlMessage::Abort { .. }) => {
                    let n = self.test.map_or(1, |t| t.params.streams as usize);
                    self.server_stream_finished(now, vec![SenderReport::default(); n]);
                }
                other => self.server_unexpected(other),
            },
            // Reverse: the client's live intervals are for the log;
            // anything else from it during the stream (an abort) means stop.
            Phase::Stream { .. } | Phase::Closing { .. } if self.reverse() => match frame {
                Frame::Message(ControlMessage::Interval { intervals }) => {
                    self.events.push_back(Event::Interval {
                        direction: Direction::ServerToClient,
                        intervals,
                    });
                }
                _ if matches!(self.phase, Phase::Stream { .. }) => self.stop_stream(),
                _ => {}
            },
            Phase::Stream { done: None, .. } => match frame {
                Frame::Message(ControlMessage::Done { sender }) => {
                    self.sender = Some(sender);
                    if let Phase::Stream { done, .. } = &mut self.phase {
                        *done = Some(now);
                    }
                }
                Frame::Message(ControlMessage::Abort { message }) => {
                    self.end(Event::Aborted { message });
                }
                other => self.server_unexpected(other),
            },
            Phase::Closing { .. } => {}
            _ => self.server_unexpected(frame),
        }
    }

    /// A frame of a bidir test: the client's live intervals (for the log,
    /// whenever they come), a stop request, the client's done.
    fn server_bidir_frame(&mut self, now: Nanos, frame: Frame) {
        match (self.phase, frame) {
            (_, Frame::Message(ControlMessage::Interval { intervals })) => {
                self.events.push_back(Event::Interval {
                    direction: Direction::ServerToClient,
                    intervals,
                });
            }
            // Ctrl-C at the client: it stops its stream and says done;
            // this side stops its own (or reports that it never began).
            (Phase::Open { .. }, Frame::Message(ControlMessage::Abort { .. })) => {
                let n = self.test.map_or(1, |t| t.params.streams as usize);
                self.phase = self.stream_phase(now);
                self.server_stream_finished(now, vec![SenderReport::default(); n]);
            }
            (_, Frame::Message(ControlMessage::Abort { .. })) => self.stop_stream(),
            (Phase::Stream { done: None, .. }, Frame::Message(ControlMessage::Done { sender })) => {
                self.sender = Some(sender);
                if let Phase::Stream { done, .. } = &mut self.phase {
                    *done = Some(now);
                }
            }
            (Phase::Closing { .. }, _) => {}
            (_, other) => self.server_unexpected(other),
        }
    }

    fn server_unexpected(&mut self, frame: Frame) {
        let got = match frame {
            Frame::Message(m) => m.kind(),
            Frame::Records(_) => MessageKind::Records,
        };
        let stage = self.stage();
        self.fail(Error::Unexpected { got, stage });
    }

    fn server_hello(&mut self, now: Nanos, frame: Frame) {
        let Frame::Message(ControlMessage::Hello {
            version,
            token,
            params,
        }) = frame
        else {
            return self.refuse(Refusal::Other, "expected a hello first".into());
        };
        if version != PROTOCOL_VERSION {
            return self.refuse(
                Refusal::Version,
                format!(
                    "client speaks probe protocol version {version}, this server speaks \
                     {PROTOCOL_VERSION}: run the same nagare release on both ends"
                ),
            );
        }
        let config = self.server.clone().unwrap_or_default();
        if let Some(want) = &config.token
            && !token_matches(token.as_deref(), want)
        {
            return self.refuse(Refusal::Token, Error::Token.to_string());
        }
        if let Err(e) = check_rate(&params, config.max_rate_bps) {
            return self.refuse(Refusal::Params, e.to_string());
        }
        match params.validate() {
            Ok(schedule) => self.accept(now, params, schedule),
            Err(e) => self.refuse(Refusal::Params, e.to_string()),
        }
    }

    fn accept(&mut self, now: Nanos, params: TestParams, schedule: Schedule) {
        let id = self.offered_id;
        self.test = Some(Test {
            id,
            params,
            schedule,
        });
        self.events.push_back(Event::Accepted { session: id });
        self.send(&ControlMessage::Welcome {
            version: PROTOCOL_VERSION,
            session: id,
        });
        let t = Test {
            id,
            params,
            schedule,
        };
        if params.server_sends() {
            let cap = if params.bidir {
                schedule.record_cap()
            } else {
                0
            };
            self.meter_for(&t, cap);
            self.phase = Phase::Open {
                deadline: now + OPEN_TIMEOUT,
            };
        } else {
            self.meter_for(&t, schedule.record_cap());
            self.phase = self.stream_phase(now);
        }
    }

    /// A reverse-mode client opened the path from `from` (the TCP peer's
    /// address, checked already): stream there, and nowhere else.
    pub(super) fn on_open(&mut self, now: Nanos, from: SocketAddr) {
        if self.server.is_some() && matches!(self.phase, Phase::Open { .. }) {
            self.phase = self.stream_phase(now);
            self.start_stream(from);
        }
    }

    pub(super) fn server_stream_finished(&mut self, now: Nanos, report: Vec<SenderReport>) {
        if !matches!(
            self.phase,
            Phase::Open { .. } | Phase::Stream { .. } | Phase::Finishing { .. }
        ) {
            return;
        }
        if self.control_closed {
            // Nobody left to tell.
            return self.end(Event::Finished);
        }
        self.told.0 = Some(report.clone());
        self.send(&ControlMessage::Done { sender: report });
        if self.bidir() {
            // The client's stream is still to drain and report (Stream),
            // or its report is out and only this side's done was missing.
            if let Phase::Finishing { .. } = self.phase {
                self.phase = Phase::Sending;
            }
            return;
        }
        // Answer echo requests already on their way, then end: the server
        // is free for the next test before this client reports.
        self.phase = Phase::Closing {
            deadline: now + SETTLE,
        };
    }

    pub(super) fn server_closed(&mut self, _now: Nanos) {
        match self.phase {
            Phase::Hello { busy: true, .. } | Phase::Closing { .. } => self.end(Event::Finished),
            Phase::Stream { .. } if self.reverse() => self.stop_stream(),
            _ => {
                let stage = self.stage();
                self.fail(Error::Closed { stage });
            }
        }
    }

    pub(super) fn server_time(&mut self, now: Nanos) {
        let duration = self.test.map_or(Nanos::ZERO, |t| t.params.duration());
        match self.phase {
            Phase::Hello { deadline, busy } if now >= deadline => {
                if busy {
                    self.refuse_busy();
                } else {
                    self.fail(Error::Timeout {
                        stage: Stage::Hello,
                        after: HELLO_TIMEOUT,
                    });
                }
            }
            Phase::Open { deadline } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Open,
                after: OPEN_TIMEOUT,
            }),
            Phase::Stream { done: Some(d), .. } if now >= d + DRAIN => self.server_results(now),
            Phase::Stream { deadline, .. } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Stream,
                after: duration + TEST_GRACE,
            }),
            Phase::Finishing { deadline } if now >= deadline => self.fail(Error::Timeout {
                stage: Stage::Stream,
                after: duration + TEST_GRACE,
            }),
            Phase::Closing { deadline } if now >= deadline => self.end(Event::Finished),
            _ => {}
        }
    }

    /// Forward mode, the stream drained: the report, then the records if
    /// the client asked for them.
    fn server_results(&mut self, now: Nanos) {
        let deadline = match self.phase {
            Phase::Stream { deadline, .. } => deadline,
            _ => return,
        };
        let sender = self.sender.take().unwrap_or_default();
        self.finish_live(&sender);
        let report = self.analyze(&sender);
        // Records are kept for the first stream only (the client asks for
        // them with one stream).
        let records = match self.meter.arrivals.first_mut() {
            Some(a) if self.test.is_some_and(|t| t.params.records) => std::mem::take(a),
            _ => Vec::new(),
        };
        self.told.1 = Some(report.clone());
        self.send(&ControlMessage::Report {
            receiver: report,
            records: records.len() as u64,
        });
        self.records_out = Some((records, 0));
        // Bidir: its own stream may still run; its done is the last word.
        self.phase = if self.bidir() && self.told.0.is_none() {
            if now >= deadline {
                let after = self.test.map_or(Nanos::ZERO, |t| t.params.duration()) + TEST_GRACE;
                return self.fail(Error::Timeout {
                    stage: Stage::Stream,
                    after,
                });
            }
            Phase::Finishing { deadline }
        } else {
            Phase::Sending
        };
    }

    /// The next frame of records to send; once everything is out, the
    /// session ends (bidir: after [`SETTLE`], as the client may still be
    /// writing the live intervals it counted before the done reached it).
    pub(super) fn next_records_frame(&mut self, now: Nanos) -> Option<Vec<u8>> {
        if let Some((records, sent)) = &mut self.records_out
            && *sent < records.len()
        {
            let end = (*sent + RECORDS_PER_FRAME).min(records.len());
            let frame = records_frame(&records[*sent..end]);
            *sent = end;
            return Some(frame);
        }
        if self.phase == Phase::Sending {
            self.records_out = None;
            if self.bidir() {
                self.phase = Phase::Closing {
                    deadline: now + SETTLE,
                };
            } else {
                self.end(Event::Finished);
            }
        }
        None
    }
}

/// Whether `given` is the token, in time that does not depend on where
/// the two first differ (only on their lengths), so timing the refusal
/// does not reveal the token byte by byte.
fn token_matches(given: Option<&str>, want: &str) -> bool {
    given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(want.as_bytes())))
}

fn check_rate(params: &TestParams, max: Option<u64>) -> Result<(), Error> {
    match max {
        Some(max) if params.rate_bps > max => Err(Error::AboveMaxRate {
            rate: params.rate_bps,
            max,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(token_matches(Some("s3cret"), "s3cret"));
        assert!(!token_matches(Some("s3creT"), "s3cret"));
        assert!(!token_matches(Some("s3cre"), "s3cret"));
        assert!(!token_matches(Some("s3crett"), "s3cret"));
        assert!(!token_matches(Some(""), "s3cret"));
        assert!(!token_matches(None, "s3cret"));
    }
}
