//! A `nagare serve` under test, and the minimal HTTP and RTSP clients the
//! tests speak to it with (std only: what is tested is the server).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::common::{Running, Scratch, nagare, noise};

pub const W: usize = 320;
pub const H: usize = 240;
pub const FRAMES: usize = 10;
/// A raw clip: `FRAMES` frames of 320x240 uyvy422 at 25 fps.
pub const FRAME_BYTES: usize = W * H * 2;

/// A media directory with `clip.yuv` (+ sidecar) and, when FFmpeg is
/// there, `clip.ts`.
pub struct Media {
    pub dir: Scratch,
    pub clip: Vec<u8>,
}

impl Media {
    pub fn new(tag: &str) -> Media {
        let dir = Scratch::new(tag);
        let clip = noise(FRAME_BYTES * FRAMES, 91);
        std::fs::write(dir.path("clip.yuv"), &clip).unwrap();
        std::fs::write(
            dir.path("clip.yuv.toml"),
            "size = \"320x240\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n",
        )
        .unwrap();
        Media { dir, clip }
    }

    /// Adds `clip.ts`: 4 s of MPEG-2 test video at a 1.5 Mbit/s mux rate.
    pub fn with_ts(self) -> Media {
        let out = std::process::Command::new("ffmpeg")
            .args(["-loglevel", "error", "-f", "lavfi", "-i"])
            .args([
                "testsrc=size=320x240:rate=25",
                "-t",
                "4",
                "-c:v",
                "mpeg2video",
            ])
            .args(["-b:v", "1M", "-f", "mpegts", "-muxrate", "1500000", "-y"])
            .arg(self.dir.path("clip.ts"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self
    }

    /// Offers `count` stripes of `clip.yuv` split by `split` as IS-05
    /// senders (`[stripes]` in its sidecar), 1200-byte packets.
    pub fn with_stripes(self, split: &str, count: usize) -> Media {
        self.with_stripes_in(split, count, 1200)
    }

    /// [`Media::with_stripes`], sent in `packet_size`-byte packets.
    pub fn with_stripes_in(self, split: &str, count: usize, packet_size: usize) -> Media {
        std::fs::write(
            self.dir.path("clip.yuv.toml"),
            format!(
                "size = \"320x240\"\npix_fmt = \"uyvy422\"\nfps = \"25\"\n\
                 [stripes]\nsplit = \"{split}\"\ncount = {count}\npacket_size = {packet_size}\n"
            ),
        )
        .unwrap();
        self
    }

    pub fn path(&self) -> String {
        self.dir.0.to_str().unwrap().to_string()
    }
}

/// Asserts that `got` is whole frames of `clip`, each the clip's next
/// (looping); the loop may have been joined at any frame.
pub fn assert_clip_frames(clip: &[u8], got: &[u8]) {
    assert_eq!(got.len() % FRAME_BYTES, 0, "whole frames only");
    let frame = |k: usize| &clip[k * FRAME_BYTES..(k + 1) * FRAME_BYTES];
    let first = (0..FRAMES)
        .find(|&k| frame(k) == &got[..FRAME_BYTES])
        .expect("the first frame received is a frame of the clip");
    for (i, chunk) in got.chunks(FRAME_BYTES).enumerate() {
        assert!(chunk == frame((first + i) % FRAMES), "frame {i} differs");
    }
}

/// A running server on ephemeral loopback ports.
pub struct Serve {
    run: Option<Running>,
    pub rtsp: SocketAddr,
    pub http: SocketAddr,
    pub token: Option<String>,
}

impl Serve {
    pub fn start(media: &Media, extra: &[&str]) -> Serve {
        Serve::start_with(media, extra, |_| {})
    }

    /// [`Serve::start`], with `configure` applied to the command first
    /// (limits, environment).
    pub fn start_with(
        media: &Media,
        extra: &[&str],
        configure: impl FnOnce(&mut std::process::Command),
    ) -> Serve {
        let mut cmd = nagare();
        cmd.args(["serve", "--media", &media.path()])
            .args(["--rtsp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(extra);
        configure(&mut cmd);
        let mut run = Running::spawn(cmd);
        let addr = |run: &mut Running, what: &str| -> SocketAddr {
            let needle = format!("{what} listening on ");
            let line = run.wait_for(&needle);
            // The address follows the words (with -v the fields come after).
            let (_, rest) = line.split_once(&needle).unwrap();
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        let rtsp = addr(&mut run, "rtsp");
        let http = addr(&mut run, "http");
        let token = extra
            .iter()
            .position(|a| *a == "--token")
            .map(|i| extra[i + 1].to_string());
        Serve {
            run: Some(run),
            rtsp,
            http,
            token,
        }
    }

    /// The server's process id (for /proc/PID/status).
    pub fn pid(&self) -> u32 {
        self.run.as_ref().expect("running").child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("rtsp://{}/{path}", self.rtsp)
    }

    /// An API call with the server's token (if any).
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(self.http, method, path, body, self.token.as_deref())
    }

    /// A typed API answer, asserting the status.
    pub fn api_json<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        status: u16,
    ) -> T {
        let (got, text) = self.api(method, path, body);
        assert_eq!(got, status, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// One metric's value (summed over its series) from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (status, text) = self.api("GET", "/metrics", None);
        assert_eq!(status, 200, "{text}");
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| {
                let rest = &l[name.len()..];
                rest.starts_with(' ') || rest.starts_with('{')
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits (up to 10 s) for a stderr line containing `needle`; the line
    /// stays in the stderr [`Serve::terminate`] returns.
    pub fn wait_for_log(&mut self, needle: &str) -> String {
        self.run.as_mut().expect("running").wait_for(needle)
    }

    /// Waits (up to 10 s) until serve has said each of `needles`, in any
    /// order.
    pub fn wait_for_all(&mut self, needles: &[&str]) {
        self.run.as_mut().expect("running").wait_for_all(needles)
    }

    /// Whether serve has said `needle` on stderr yet (no waiting).
    pub fn has_said(&mut self, needle: &str) -> bool {
        self.run.as_mut().expect("running").has_said(needle)
    }

    /// The stderr lines seen so far.
    pub fn lines(&self) -> &[String] {
        &self.run.as_ref().expect("running").stderr
    }

    /// SIGTERM, then the exit status and all of stderr.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String, String) {
        let run = self.run.take().expect("running");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(run.child.id() as i32, libc::SIGTERM);
        }
        run.finish()
    }
}

impl Drop for Serve {
    /// A test that fails (or never terminates it) leaves no server behind.
    fn drop(&mut self) {
        if let Some(run) = self.run.as_mut() {
            let _ = run.child.kill();
            let _ = run.child.wait();
        }
    }
}

/// One HTTP/1.1 request (Connection: close); returns status and body.
pub fn http(
    to: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    let (status, _, body) = http_with_head(to, method, path, body, token);
    (status, body)
}

/// [`http`], also returning the head (status line and headers).
pub fn http_with_head(
    to: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = body.unwrap_or("");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

/// A TCP connection to `to` from the loopback address `from`.
pub fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    sock.connect(&to.into()).unwrap();
    sock.into()
}

/// An RTSP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The session id of a SETUP answer.
    pub fn session(&self) -> String {
        let s = self.header("Session").expect("Session header");
        s.split(';').next().unwrap().trim().to_string()
    }
}

/// A bare RTSP/1.0 client on one connection.
pub struct Rtsp {
    pub reader: BufReader<TcpStream>,
    pub stream: TcpStream,
    cseq: u32,
}

impl Rtsp {
    pub fn connect(to: SocketAddr) -> Rtsp {
        Rtsp::over(TcpStream::connect(to).unwrap())
    }

    /// A client on an open connection.
    pub fn over(stream: TcpStream) -> Rtsp {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Rtsp {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
            cseq: 0,
        }
    }

    pub fn request(&mut self, method: &str, url: &str, headers: &[(&str, &str)]) -> Reply {
        self.cseq += 1;
        let mut text = format!("{method} {url} RTSP/1.0\r\nCSeq: {}\r\n", self.cseq);
        for (n, v) in headers {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
        text.push_str("\r\n");
        self.stream.write_all(text.as_bytes()).unwrap();
        self.reply()
    }

    /// Sends raw bytes (for malformed requests).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next response, skipping interleaved `$` frames.
    pub fn reply(&mut self) -> Reply {
        loop {
            let buf = self.reader.fill_buf().unwrap();
            assert!(!buf.is_empty(), "connection closed before a response");
            if buf[0] == b'$' {
                let mut head = [0u8; 4];
                self.reader.read_exact(&mut head).unwrap();
                let len = u16::from_be_bytes([head[2], head[3]]) as usize;
                let mut skip = vec![0u8; len];
                self.reader.read_exact(&mut skip).unwrap();
                continue;
            }
            break;
        }
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).unwrap();
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
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body).unwrap();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// DESCRIBE, SETUP (with `transport`) and PLAY of `url`; returns the
    /// session id.
    pub fn play(&mut self, url: &str, transport: &str) -> String {
        let d = self.request("DESCRIBE", url, &[("Accept", "application/sdp")]);
        assert_eq!(d.status, 200, "{d:?}");
        let s = self.request(
            "SETUP",
            &format!("{url}/trackID=0"),
            &[("Transport", transport)],
        );
        assert_eq!(s.status, 200, "{s:?}");
        let session = s.session();
        let p = self.request("PLAY", url, &[("Session", &session), ("Range", "npt=0-")]);
        assert_eq!(p.status, 200, "{p:?}");
        session
    }
}

/// FFmpeg pulls `url` over RTSP `transport` (udp, tcp) into `out` as raw
/// UYVY, exactly the clip's frames: with `?loop=1` in `url` that is the
/// first pass (a clip played once ends with serve's RTCP BYE instead;
/// `serve::rtcp` tests that).
pub fn ffmpeg_pull(url: &str, transport: &str, out: &std::path::Path) {
    let mut ff = std::process::Command::new("ffmpeg")
        .args(["-loglevel", "error", "-rtsp_transport", transport])
        .args(["-i", url])
        .args(["-frames:v", &FRAMES.to_string()])
        .args([
            "-c:v", "rawvideo", "-pix_fmt", "uyvy422", "-f", "rawvideo", "-y",
        ])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = crate::common::wait_bounded(&mut ff, 60, "ffmpeg");
    assert!(
        status.success(),
        "ffmpeg -rtsp_transport {transport} failed"
    );
}

/// Starts serve on `media` with the path `tiny`: the pattern at 64x36
/// 4:2:2, 25 fps (4 packets a frame, 100 packets a second a stream).
pub fn start_with_tiny(media: &Media) -> Serve {
    start_with_tiny_and(media, &[])
}

/// [`start_with_tiny`], with `extra` flags.
pub fn start_with_tiny_and(media: &Media, extra: &[&str]) -> Serve {
    start_with_pattern(media, ("tiny", "64x36", "uyvy422", "25"), extra)
}

/// Starts serve on `media` with one more path, `name`: the test pattern
/// of `size`, `pix_fmt` and `fps`; and `extra` flags.
pub fn start_with_pattern(
    media: &Media,
    (name, size, pix_fmt, fps): (&str, &str, &str, &str),
    extra: &[&str],
) -> Serve {
    let config = media.dir.path(&format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[[media]]\nname = \"{name}\"\nsource = \"pattern:bars\"\nsize = \"{size}\"\n\
             pix_fmt = \"{pix_fmt}\"\nfps = \"{fps}\"\n"
        ),
    )
    .unwrap();
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    Serve::start(media, &args)
}

/// Runs a `gst-launch-1.0` pipeline (bounded by `secs`) whose end is an
/// EOS, and returns its stderr once it ended well.
///
/// "Well" includes one race inside rtspsrc 1.22 at that end: on EOS,
/// gst-launch takes the pipeline down, and rtspsrc's PLAYING→PAUSED
/// queues a PAUSE on its own thread while PAUSED→READY at once queues
/// the close, which flushes the PAUSE still waiting for its answer.
/// rtspsrc then reports the flushed PAUSE as "Could not send message.
/// (Received end-of-file)" and gst-launch exits 1; the TEARDOWN that
/// follows goes out on the same connection, which was never closed
/// (seen with `GST_DEBUG=rtspsrc:6` under load: PAUSE written, the
/// flush, the error 93 µs later, TEARDOWN answered). Every other
/// failure fails the test with gst-launch's own messages.
pub fn gst_launch(mut cmd: std::process::Command, secs: u64) -> String {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = String::new();
        let _ = err.read_to_string(&mut v);
        v
    });
    let status = crate::common::wait_bounded(&mut child, secs, "gst-launch");
    let log = reader.join().unwrap();
    if status.success() {
        return log;
    }
    if only_the_pause_race(&log) {
        eprintln!("gst-launch {status}: rtspsrc's flushed PAUSE at EOS, passed over");
        return log;
    }
    // Debug lines, when asked for, drown gst-launch's own messages.
    let own: Vec<&str> = log.lines().filter(|l| !l.contains(" DEBUG ")).collect();
    let tail = &own[own.len().saturating_sub(30)..];
    panic!("gst-launch {status}; its messages:\n{}", tail.join("\n"));
}

/// Whether gst-launch's errors are all rtspsrc's flushed PAUSE at the
/// pipeline's end (see [`gst_launch`]), and there is one.
fn only_the_pause_race(log: &str) -> bool {
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("ERROR: ") || l.contains("Could not"))
        .collect();
    let flushed = "Could not send message. (Received end-of-file)";
    let pause = log
        .lines()
        .any(|l| l.contains("gst_rtspsrc_pause ()") && l.contains("rtspsrc"));
    pause
        && errors.iter().all(|l| {
            l.starts_with("ERROR: from element /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0: Could not write to resource.")
                || l.trim() == flushed
        })
}

#[test]
fn the_pause_race_is_told_from_other_gst_failures() {
    // gst-launch's stderr from the race, as a full run once had it.
    let race = "ERROR: from element /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0: Could not write to resource.
Additional debug info:
../gst/rtsp/gstrtspsrc.c(6766): gst_rtspsrc_try_send (): /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0:
Could not send message. (Received end-of-file)
ERROR: from element /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0: Could not write to resource.
Additional debug info:
../gst/rtsp/gstrtspsrc.c(9240): gst_rtspsrc_pause (): /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0:
Could not send message. (Received end-of-file)
";
    assert!(only_the_pause_race(race));
    // The same error from PLAY is a real failure, as is any other.
    let play = race.replace("9240): gst_rtspsrc_pause", "9100): gst_rtspsrc_play");
    assert!(!only_the_pause_race(&play));
    let refused = "ERROR: from element /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0: Not found
Additional debug info:
../gst/rtsp/gstrtspsrc.c(6906): gst_rtspsrc_send (): /GstPipeline:pipeline0/GstRTSPSrc:rtspsrc0:
Not Found (404)
";
    assert!(!only_the_pause_race(refused));
    assert!(!only_the_pause_race(&format!("{race}{refused}")));
}
