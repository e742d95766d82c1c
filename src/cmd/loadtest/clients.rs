//! The load: virtual RTSP clients (DESCRIBE, SETUP to the test's one
//! receiving port, PLAY; TEARDOWN at the end), or push streams created
//! through `nagare serve`'s HTTP API. Both only ask; the streams' packets
//! go to the [`super::flows::Sink`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// One virtual RTSP client with its session.
pub(super) struct RtspClient {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    url: String,
    session: String,
    cseq: u32,
    /// Body of the last response.
    body: String,
}

/// The SETUP URL of the first media: its `a=control` resolved against
/// Content-Base (nagare says `trackID=0`, GStreamer `stream=0`).
fn track_url(url: &str, headers: &[(String, String)], sdp: &str) -> String {
    let base = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("Content-Base"))
        .map_or_else(
            || url.split('?').next().unwrap_or(url).to_string(),
            |(_, v)| v.clone(),
        );
    let control = sdp
        .split("m=")
        .nth(1)
        .and_then(|m| m.lines().find_map(|l| l.trim().strip_prefix("a=control:")))
        .map(str::trim);
    match control {
        Some(c) if c.contains("://") => c.to_string(),
        Some("*") | None => base,
        Some(c) if base.ends_with('/') => format!("{base}{c}"),
        Some(c) => format!("{base}/{c}"),
    }
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
    /// Connects, DESCRIBEs, SETUPs UDP to `sink`'s port and PLAYs.
    pub(super) fn start(url: &str, sink: SocketAddr) -> Result<RtspClient> {
        let stream =
            TcpStream::connect(authority(url)?).with_context(|| format!("connecting to {url}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let _ = stream.set_nodelay(true);
        let mut c = RtspClient {
            reader: BufReader::new(stream.try_clone()?),
            stream,
            url: url.to_string(),
            session: String::new(),
            cseq: 0,
            body: String::new(),
        };
        let (status, headers) = c.request("DESCRIBE", url, "Accept: application/sdp\r\n")?;
        if status != 200 {
            bail!("DESCRIBE {url}: status {status}");
        }
        let track = track_url(url, &headers, &c.body);
        let port = sink.port();
        let transport = format!(
            "Transport: RTP/AVP;unicast;client_port={port}-{}\r\n",
            port.wrapping_add(1)
        );
        let (status, headers) = c.request("SETUP", &track, &transport)?;
        if status != 200 {
            bail!("SETUP {track}: status {status}");
        }
        c.session = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Session"))
            .map(|(_, v)| v.split(';').next().unwrap_or("").trim().to_string())
            .context("SETUP answer without a Session")?;
        let session = format!("Session: {}\r\nRange: npt=0-\r\n", c.session);
        let (status, _) = c.request("PLAY", url, &session)?;
        if status != 200 {
            bail!("PLAY {url}: status {status}");
        }
        Ok(c)
    }

    /// GET_PARAMETER, so the server keeps the session.
    pub(super) fn keep_alive(&mut self) -> Result<()> {
        let url = self.url.clone();
        let h = format!("Session: {}\r\n", self.session);
        self.request("GET_PARAMETER", &url, &h).map(|_| ())
    }

    /// TEARDOWN (answer not awaited beyond the read timeout).
    pub(super) fn stop(mut self) {
        let url = self.url.clone();
        let h = format!("Session: {}\r\n", self.session);
        let _ = self.request("TEARDOWN", &url, &h);
    }

    fn request(
        &mut self,
        method: &str,
        url: &str,
        headers: &str,
    ) -> Result<(u16, Vec<(String, String)>)> {
        self.cseq += 1;
        write!(
            self.stream,
            "{method} {url} RTSP/1.0\r\nCSeq: {}\r\nUser-Agent: nagare-loadtest\r\n{headers}\r\n",
            self.cseq
        )?;
        self.reply()
    }

    /// One line of a reply, at most `MAX_LINE` bytes: a server under test
    /// that never ends its line must not grow the client without bound.
    fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        (&mut self.reader).take(MAX_LINE).read_line(&mut line)?;
        Ok(line)
    }

    fn reply(&mut self) -> Result<(u16, Vec<(String, String)>)> {
        let line = self.line()?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("not an RTSP response: {line:?}"))?;
        let mut headers = Vec::new();
        while headers.len() < MAX_HEADERS {
            let h = self.line()?;
            if h.is_empty() {
                break;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        let len = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0);
        std::io::copy(
            &mut (&mut self.reader).take(len.min(1 << 20)),
            &mut std::io::sink(),
        )?;
        Ok((status, headers))
    }
}

/// Longest reply line and most reply headers read from a server.
const MAX_LINE: u64 = 8 << 10;
const MAX_HEADERS: usize = 64;

/// One HTTP/1.0 request to `api`; returns status and body.
pub(super) fn http(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    let mut s =
        TcpStream::connect(api).with_context(|| format!("connecting to the API at {api}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {api}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP response from {api}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |b| b.1).to_string();
    Ok((status, body))
}

/// A push stream of `source` to `sink`, through the API; returns its id.
pub(super) fn push(
    api: SocketAddr,
    source: &str,
    sink: SocketAddr,
    token: Option<&str>,
) -> Result<u64> {
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
    let (status, text) = http(api, "POST", "/v1/streams", &body, token)?;
    if status != 201 {
        bail!("creating a push stream: HTTP {status}: {text}");
    }
    let info: nagare_api::serve::StreamInfo = serde_json::from_str(&text)?;
    Ok(info.id)
}

/// Stops push stream `id`.
pub(super) fn unpush(api: SocketAddr, id: u64, token: Option<&str>) {
    let _ = http(api, "DELETE", &format!("/v1/streams/{id}"), "", token);
}

/// `process_cpu_seconds_total` from a server's /metrics.
pub(super) fn server_cpu(api: SocketAddr, token: Option<&str>) -> Option<f64> {
    let (status, text) = http(api, "GET", "/metrics", "", token).ok()?;
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
