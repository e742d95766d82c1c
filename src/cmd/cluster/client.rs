//! One serve node's HTTP API as the cluster driver uses it: create and
//! delete streams, list them, read the node's clock, and GET or PATCH
//! JSON of its NMOS APIs, each request within the timeout the controller
//! gives it. Every failure comes back as a [`Failure`] naming what the
//! node said.

use std::time::Duration;

use nagare_api::serve::{ApiError, Health, StreamInfo, StreamList, StreamRequest};

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// The node answered with an error status (wrong token, refusal).
    Refused {
        /// The HTTP status.
        code: u16,
        /// The status and the node's words.
        why: String,
    },
    /// No answer in time, connection refused, or garbage: the node may or
    /// may not have done it.
    Unanswered(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused { why, .. } | Failure::Unanswered(why) => f.write_str(why),
        }
    }
}

/// A node's API.
pub(super) struct NodeClient {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

/// The node's clock and what it sends, from one poll.
pub(super) struct Snapshot {
    /// Node clock minus ours, ns, from the midpoint of the request.
    pub clock_offset_ns: i64,
    /// Every stream of its table.
    pub streams: Vec<StreamInfo>,
    /// Our clock when the list came, ns since the Unix epoch.
    pub at_ns: u128,
}

impl NodeClient {
    /// A client of the API at `url` (`http://HOST:PORT`).
    pub(super) fn new(url: &str, token: Option<String>) -> NodeClient {
        NodeClient {
            // A fresh connection per request: a poll a few times a second
            // gains nothing from reuse, and serve closes any connection
            // after 60 s anyway.
            agent: ureq::AgentBuilder::new().max_idle_connections(0).build(),
            base: url.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// Clock offset (from `/healthz`) and the stream table.
    pub(super) fn snapshot(&self, timeout: Duration) -> Result<Snapshot, Failure> {
        let t0 = crate::clock::epoch_ns();
        let health: Health = self.call(self.agent.get(&self.url("/healthz")), None, timeout)?;
        let t1 = crate::clock::epoch_ns();
        let mid = (t0 + t1) / 2;
        let clock_offset_ns = i128::from(health.time_ns) - mid as i128;
        let streams = self.list(timeout)?;
        Ok(Snapshot {
            clock_offset_ns: clock_offset_ns.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            streams,
            at_ns: crate::clock::epoch_ns(),
        })
    }

    /// The stream table.
    pub(super) fn list(&self, timeout: Duration) -> Result<Vec<StreamInfo>, Failure> {
        let list: StreamList =
            self.call(self.agent.get(&self.url("/v1/streams")), None, timeout)?;
        Ok(list.streams)
    }

    /// Creates a stream (or, for a repeated idempotency key, gets the one
    /// the first request made).
    pub(super) fn create(
        &self,
        req: &StreamRequest,
        timeout: Duration,
    ) -> Result<StreamInfo, Failure> {
        let body = serde_json::to_string(req).map_err(|e| Failure::Refused {
            code: 0,
            why: e.to_string(),
        })?;
        let r = self
            .agent
            .post(&self.url("/v1/streams"))
            .set("Content-Type", "application/json");
        self.call(r, Some(&body), timeout)
    }

    /// Stops and removes stream `id`; one already gone is no failure.
    pub(super) fn delete(&self, id: u64, timeout: Duration) -> Result<(), Failure> {
        let r = self.agent.delete(&self.url(&format!("/v1/streams/{id}")));
        match self.call::<serde_json::Value>(r, None, timeout) {
            Ok(_) | Err(Failure::Refused { code: 404, .. }) => Ok(()),
            Err(f) => Err(f),
        }
    }

    /// The JSON at `path` (`/x-nmos/...`).
    pub(super) fn get_json(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<serde_json::Value, Failure> {
        self.call(self.agent.get(&self.url(path)), None, timeout)
    }

    /// PATCHes `body` to `path`; the answer's JSON.
    pub(super) fn patch_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, Failure> {
        let r = self
            .agent
            .request("PATCH", &self.url(path))
            .set("Content-Type", "application/json");
        self.call(r, Some(&body.to_string()), timeout)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `r` (with the token and `body`) within `timeout`, parses the
    /// JSON answer.
    fn call<T: serde::de::DeserializeOwned>(
        &self,
        mut r: ureq::Request,
        body: Option<&str>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        r = r.timeout(timeout);
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        let answer = match body {
            Some(b) => r.send_string(b),
            None => r.call(),
        };
        match answer {
            Ok(resp) => {
                let text = resp
                    .into_string()
                    .map_err(|e| Failure::Unanswered(format!("reading the answer: {e}")))?;
                serde_json::from_str(&text).map_err(|e| {
                    Failure::Unanswered(format!("the answer is not serve's JSON: {e}"))
                })
            }
            Err(ureq::Error::Status(code, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                let why = serde_json::from_str::<ApiError>(&text).map_or(text, |e| e.error);
                Err(Failure::Refused {
                    code,
                    why: format!("{code} {why}"),
                })
            }
            Err(ureq::Error::Transport(t)) => Err(Failure::Unanswered(t.to_string())),
        }
    }
}
