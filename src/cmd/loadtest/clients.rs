//! The load: virtual RTSP clients (DESCRIBE, SETUP to the test's one
//! receiving port, PLAY; TEARDOWN at the end), or push streams created
//! through `nagare serve`'s HTTP API. Both only ask; the streams' packets
//! go to the [`super::flows::Sink`].

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::rtsp::{Client, ClientConfig, ClientError, ClientEvent, ClientInput, PortPair};
use nagare_proto::units::Nanos;

/// What asking an RTSP server for a session came to.
pub(super) enum Admitted {
    /// The session plays (boxed: the client machine is large, a refusal
    /// a string).
    Playing(Box<RtspClient>),
    /// The server's admission said no, for this reason.
    Refused(String),
}

/// One virtual RTSP client: proto's client machine on a blocking socket.
pub(super) struct RtspClient {
    stream: TcpStream,
    machine: Client,
    /// The machine's time zero.
    origin: Instant,
}

/// The host:port of an `rtsp://` or `http://` URL.
pub(super) fn authority(url: &str) -> Result<SocketAddr> {
    let rest = url
        .split_once("://")
        .map(|x| x.1)
        .ok_or_else(|| anyhow!("'{url}' is not a URL like rtsp://127.0.0.1:8554/clip.ts"))?;
    let host = rest.split('/').next().unwrap_or("");
    host.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| anyhow!("cannot resolve '{host}' in '{url}': give HOST:PORT"))
}

impl RtspClient {
    /// [`RtspClient::start`], asking again (on a new connection) after a
    /// `503` with `Retry-After`, as [`push`] does; a refusal that time does
    /// not lift (`453`, or `503` without `Retry-After`) is the server's
    /// own limit.
    pub(super) fn admitted(url: &str, sink: SocketAddr) -> Result<Admitted> {
        let started = Instant::now();
        loop {
            match RtspClient::start(url, sink) {
                Ok(c) => return Ok(Admitted::Playing(Box::new(c))),
                Err(e) => match e.downcast_ref::<ClientError>() {
                    Some(ClientError::Refused {
                        status: 503,
                        retry_after: Some(secs),
                        ..
                    }) if started.elapsed() + Duration::from_secs(u64::from(*secs))
                        <= RETRY_BUDGET =>
                    {
                        std::thread::sleep(Duration::from_secs(u64::from(*secs).min(5)));
                    }
                    Some(ClientError::Refused {
                        status: 453 | 503,
                        body,
                        reason,
                        ..
                    }) => {
                        let why = if body.is_empty() { reason } else { body };
                        return Ok(Admitted::Refused(why.clone()));
                    }
                    _ => return Err(e),
                },
            }
        }
    }

    /// Connects, DESCRIBEs, SETUPs UDP to `sink`'s port and PLAYs.
    pub(super) fn start(url: &str, sink: SocketAddr) -> Result<RtspClient> {
        let stream =
            TcpStream::connect(authority(url)?).with_context(|| format!("connecting to {url}"))?;
        let _ = stream.set_nodelay(true);
        let ports = PortPair {
            rtp: sink.port(),
            rtcp: sink.port().wrapping_add(1),
        };
        let mut config = ClientConfig::new(ports);
        config.user_agent = "nagare-loadtest".into();
        let machine = Client::new(Nanos::ZERO, url, config)?;
        let mut c = RtspClient {
            stream,
            machine,
            origin: Instant::now(),
        };
        match c.pump()? {
            ClientEvent::Playing { .. } => Ok(c),
            ClientEvent::Failed(e) => Err(e.into()),
            ClientEvent::Closed => bail!("{url}: the session closed before PLAY"),
        }
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }

    /// Sends a keep-alive when the machine says one is due, and waits for
    /// its reply; a no-op otherwise.
    pub(super) fn tend(&mut self) -> Result<()> {
        let now = self.now();
        if self.machine.is_over() || self.machine.poll_timeout().is_none_or(|t| t > now) {
            return Ok(());
        }
        self.machine.handle_input(now, ClientInput::Timer);
        self.flush()?;
        while self.machine.is_waiting() {
            self.read_once()?;
        }
        match self.machine.poll_event() {
            Some(ClientEvent::Failed(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// TEARDOWN, its reply awaited up to the machine's reply timeout.
    pub(super) fn stop(mut self) {
        self.machine.close(self.now());
        let _ = self.pump();
    }

    fn flush(&mut self) -> Result<()> {
        while let Some(bytes) = self.machine.poll_transmit(self.now()) {
            self.stream
                .write_all(&bytes)
                .context("writing to the RTSP server")?;
        }
        Ok(())
    }

    /// Writes, reads and wakes the machine until it says something.
    fn pump(&mut self) -> Result<ClientEvent> {
        loop {
            self.flush()?;
            if let Some(e) = self.machine.poll_event() {
                return Ok(e);
            }
            self.read_once()?;
        }
    }

    /// One read, bounded by the machine's next deadline.
    fn read_once(&mut self) -> Result<()> {
        let now = self.now();
        let Some(deadline) = self.machine.poll_timeout() else {
            bail!("the RTSP client has nothing to wait for");
        };
        let wait = Duration::from(deadline.saturating_sub(now)).max(Duration::from_millis(1));
        self.stream.set_read_timeout(Some(wait))?;
        let mut buf = [0u8; 4096];
        match self.stream.read(&mut buf) {
            Ok(0) => self.machine.handle_input(self.now(), ClientInput::Closed),
            Ok(n) => self
                .machine
                .handle_input(self.now(), ClientInput::Bytes(&buf[..n])),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                self.machine.handle_input(self.now(), ClientInput::Timer);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => self.machine.handle_input(self.now(), ClientInput::Closed),
        }
        Ok(())
    }
}

/// An answer of the API.
pub(super) struct Answer {
    pub status: u16,
    pub text: String,
    /// A 503's `Retry-After` in seconds: a refusal that time alone lifts.
    pub retry_after: Option<Duration>,
}

/// One HTTP request to the API at `api`.
pub(super) fn http(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> Result<Answer> {
    let mut req = ureq::request(method, &format!("http://{api}{path}"))
        .timeout(Duration::from_secs(10))
        .set("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let sent = if body.is_empty() {
        req.call()
    } else {
        req.send_string(body)
    };
    let resp = match sent {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => bail!("the API at {api}: {t}"),
    };
    let status = resp.status();
    let retry_after = resp
        .header("Retry-After")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    // ureq reads at most 10 MB of a body into a string.
    let text = resp
        .into_string()
        .with_context(|| format!("reading the API's answer to {method} {path}"))?;
    Ok(Answer {
        status,
        text,
        retry_after,
    })
}

/// What a push request came to.
pub(super) enum Push {
    /// Running, with this id.
    Started(u64),
    /// The server's admission said no (503), for a reason that waiting
    /// does not lift: the server's own limit.
    Refused(String),
}

/// The longest a push waits on `Retry-After` answers in all: the server
/// measures new streams within a second or two, so more means it is
/// stuck, and the ramp should say so rather than wait on.
const RETRY_BUDGET: Duration = Duration::from_secs(30);

/// A push stream of `source` to `sink`, through the API. A 503 with
/// `Retry-After` (streams admitted just before are not yet measured) is
/// asked again after the time it names, as a client of any
/// load-measuring server must.
pub(super) fn push(
    api: SocketAddr,
    source: &str,
    sink: SocketAddr,
    token: Option<&str>,
) -> Result<Push> {
    let body = serde_json::to_string(&nagare_api::serve::StreamRequest {
        source: source.to_string(),
        destinations: vec![sink.to_string()],
        encapsulation: nagare_api::serve::Encapsulation::Rtp,
        pacing: nagare_api::serve::Pacing::default(),
        priority: 0,
        looping: true,
        interface: None,
        stripe: None,
        ssrc: None,
        label: None,
        epoch_frame: None,
        ttl: None,
        idempotency_key: None,
    })?;
    let started = Instant::now();
    loop {
        let a = http(api, "POST", "/v1/streams", &body, token)?;
        match (a.status, a.retry_after) {
            (201, _) => {
                let info: nagare_api::serve::StreamInfo = serde_json::from_str(&a.text)?;
                return Ok(Push::Started(info.id));
            }
            (503, Some(wait)) if started.elapsed() + wait <= RETRY_BUDGET => {
                std::thread::sleep(wait.min(Duration::from_secs(5)));
            }
            (503, _) => return Ok(Push::Refused(refusal_text(&a.text))),
            (status, _) => bail!("creating a push stream: HTTP {status}: {}", a.text),
        }
    }
}

/// The `error` of an API error body, or the body itself.
fn refusal_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_string())
}

/// Stops push stream `id`.
pub(super) fn unpush(api: SocketAddr, id: u64, token: Option<&str>) {
    let _ = http(api, "DELETE", &format!("/v1/streams/{id}"), "", token);
}

/// `process_cpu_seconds_total` from a server's /metrics.
pub(super) fn server_cpu(api: SocketAddr, token: Option<&str>) -> Option<f64> {
    let Answer { status, text, .. } = http(api, "GET", "/metrics", "", token).ok()?;
    (status == 200).then_some(())?;
    text.lines()
        .find(|l| l.starts_with("process_cpu_seconds_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// CPU seconds of process `pid` (user + system) from /proc.
pub(super) fn process_cpu(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(ticks / hz as f64)
}
