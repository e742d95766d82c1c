//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A `Command` for the nagare binary under test.
/// Starts `nagare args…` with stdout piped and stderr discarded; returns
/// it with the first line it printed (a daemon's "listening ADDR"). The
/// rest of stdout is drained on a thread, so it never blocks on a full
/// pipe.
pub fn spawn_first_line(args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = nagare()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, line)
}

pub fn nagare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nagare"))
}

/// A fresh scratch directory under the target dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A UDP port that was free a moment ago on 127.0.0.1 (for peers such as
/// GStreamer that cannot report the port they bound).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether an external program is installed (CI installs them; a developer
/// machine may not have them).
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program} >/dev/null 2>&1"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Like `have`, but in CI (where .ci/run installs the program) a missing
/// program is a failure, not a skip.
pub fn require(program: &str) -> bool {
    if have(program) {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{program} is not installed, but CI must have it (see .ci/run)");
    }
    eprintln!("skipping: {program} is not installed");
    false
}

/// A nagare process whose stderr is read line by line in the background.
pub struct Running {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub stderr: Vec<String>,
}

impl Running {
    /// Spawns `cmd` with piped stdout/stderr.
    pub fn spawn(mut cmd: Command) -> Running {
        use std::io::BufRead;
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("spawning nagare");
        let err = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            stderr: Vec::new(),
        }
    }

    /// Waits (up to 10 s) for a stderr line containing `needle`.
    pub fn wait_for(&mut self, needle: &str) -> String {
        self.wait_for_within(needle, std::time::Duration::from_secs(10))
    }

    /// Waits (up to 10 s) until every one of `needles` has been on stderr,
    /// in any order, counting lines already seen: lines of threads or
    /// nodes that run at once come in any order on a loaded machine.
    pub fn wait_for_all(&mut self, needles: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let missing: Vec<&str> = needles
                .iter()
                .copied()
                .filter(|n| !self.stderr.iter().any(|l| l.contains(n)))
                .collect();
            if missing.is_empty() {
                return;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.stderr.push(l),
                Err(_) => panic!("no {missing:?} on stderr; got: {:#?}", self.stderr),
            }
        }
    }

    /// Whether a stderr line containing `needle` has come yet, taking in
    /// what has arrived without waiting.
    pub fn has_said(&mut self, needle: &str) -> bool {
        while let Ok(l) = self.lines.try_recv() {
            self.stderr.push(l);
        }
        self.stderr.iter().any(|l| l.contains(needle))
    }

    /// Waits up to `timeout` for a stderr line containing `needle` and
    /// returns it; fails the test with every line seen so far when none
    /// came in time (or the process closed stderr first).
    pub fn wait_for_within(&mut self, needle: &str, timeout: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stderr.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!("no '{needle}' on stderr; got: {:#?}", self.stderr),
            }
        }
    }

    /// The address a `recv --listen ...:0` bound (from its stderr).
    pub fn listening(&mut self) -> std::net::SocketAddr {
        let line = self.wait_for("listening on ");
        line.rsplit("listening on ")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits for exit (bounded: killed after 60 s); returns status, stdout
    /// and all of stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        use std::io::Read;
        let status = wait_bounded(&mut self.child, 60, "nagare");
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out).unwrap();
        }
        while let Ok(l) = self
            .lines
            .recv_timeout(std::time::Duration::from_millis(500))
        {
            self.stderr.push(l);
        }
        (status, out, self.stderr.join("\n"))
    }
}

/// A test that fails before `finish` must not leave its process running:
/// a serve node and a cluster controller left behind by a failed test
/// went on sending through the rest of a run here.
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Deterministic bytes that look nothing like the test pattern.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3] // bits 24..32
        })
        .collect()
}

/// A network namespace made for one test, with a veth pair v0/v1 (up,
/// multicast-capable) and fd00::1/64 on v0; deleted on drop. Needs root.
pub struct Netns(pub String);

impl Netns {
    pub fn new(tag: &str) -> Option<Netns> {
        let name = format!("nagare-{tag}-{}", std::process::id());
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        if !ip(&["netns", "add", &name]) {
            if std::env::var_os("CI").is_some() {
                panic!("cannot create a network namespace (CI runs as root with iproute2)");
            }
            eprintln!("skipping: cannot create a network namespace (not root?)");
            return None;
        }
        let ns = Netns(name.clone());
        for args in [
            vec!["-n", &name, "link", "set", "lo", "up"],
            vec![
                "-n", &name, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
            ],
            vec!["-n", &name, "link", "set", "v0", "up"],
            vec!["-n", &name, "link", "set", "v1", "up"],
            vec![
                "-n",
                &name,
                "-6",
                "addr",
                "add",
                "fd00::1/64",
                "dev",
                "v0",
                "nodad",
            ],
        ] {
            assert!(ip(&args), "ip {args:?} failed");
        }
        Some(ns)
    }

    /// A nagare command run inside the namespace.
    pub fn nagare(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, env!("CARGO_BIN_EXE_nagare")]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Waits for `child` to exit, killing it and failing the test after
/// `secs` seconds: every wait in these tests is bounded.
pub fn wait_bounded(
    child: &mut std::process::Child,
    secs: u64,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Parses a `--json` report into its nagare-api type.
pub fn parse_report<T: serde::de::DeserializeOwned>(out: &str) -> T {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("bad JSON report ({e}): {out}"))
}

/// Asserts that a finished command succeeded, showing its stderr if not.
pub fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `probe` every 10 ms until it returns `Some`, for at most
/// `timeout`; fails the test naming `what` when time runs out. The one
/// bounded wait the helpers below build on: tests wait on a port, a file
/// or a line, never on a fixed sleep.
pub fn wait_until<T>(
    what: &str,
    timeout: std::time::Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if std::time::Instant::now() >= deadline {
            panic!("{what}: not within {timeout:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether a socket of this network namespace is bound to local `port` in
/// `/proc/net/<table>` (udp, udp6, tcp, tcp6), in TCP state `state`
/// (`0A` is LISTEN) when given. Reading the table never disturbs the
/// process under test, unlike binding or connecting to find out.
fn port_in_table(table: &str, port: u16, state: Option<&str>) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/net/{table}")) else {
        return false;
    };
    text.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let local_port = cols
            .get(1)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        local_port == Some(port) && state.is_none_or(|s| cols.get(3) == Some(&s))
    })
}

/// Waits (up to `timeout`) until some process has a UDP socket bound to
/// `port` (any address, IPv4 or IPv6), e.g. a peer told to listen on a
/// [`free_udp_port`].
pub fn wait_for_udp_port(port: u16, timeout: std::time::Duration) {
    wait_until(
        &format!("a UDP socket bound to port {port}"),
        timeout,
        || (port_in_table("udp", port, None) || port_in_table("udp6", port, None)).then_some(()),
    )
}

/// Waits (up to `timeout`) until some process listens on TCP `port` (any
/// address, IPv4 or IPv6). Nothing connects, so a server under test
/// sees no extra client.
pub fn wait_for_tcp_port(port: u16, timeout: std::time::Duration) {
    const LISTEN: Option<&str> = Some("0A");
    wait_until(&format!("a TCP listener on port {port}"), timeout, || {
        (port_in_table("tcp", port, LISTEN) || port_in_table("tcp6", port, LISTEN)).then_some(())
    })
}

/// Waits (up to `timeout`) until `path` exists with at least `len` bytes;
/// returns its size then.
pub fn wait_for_file_size(path: &std::path::Path, len: u64, timeout: std::time::Duration) -> u64 {
    wait_until(
        &format!("{} reaching {len} bytes", path.display()),
        timeout,
        || {
            std::fs::metadata(path)
                .ok()
                .map(|m| m.len())
                .filter(|&n| n >= len)
        },
    )
}

#[test]
fn waits_see_bound_ports_and_growing_files() {
    use std::time::Duration;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    wait_for_udp_port(udp.local_addr().unwrap().port(), Duration::from_secs(5));
    let tcp = std::net::TcpListener::bind("[::1]:0").unwrap();
    wait_for_tcp_port(tcp.local_addr().unwrap().port(), Duration::from_secs(5));
    let s = Scratch::new("wait-size");
    let file = s.path("grows");
    let writer = {
        let file = file.clone();
        std::thread::spawn(move || {
            for _ in 0..4 {
                let mut old = std::fs::read(&file).unwrap_or_default();
                old.extend_from_slice(&[1u8; 1000]);
                std::fs::write(&file, old).unwrap();
            }
        })
    };
    assert!(wait_for_file_size(&file, 4000, Duration::from_secs(5)) >= 4000);
    writer.join().unwrap();
}

#[test]
#[should_panic(expected = "a UDP socket bound to port")]
fn waits_fail_when_time_runs_out() {
    // A port just released by its only socket is not bound.
    let port = free_udp_port();
    wait_for_udp_port(port, std::time::Duration::from_millis(50));
}

#[test]
fn a_udp_port_is_not_a_tcp_listener() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    assert!(port_in_table("udp", port, None));
    assert!(!port_in_table("tcp", port, Some("0A")));
}

/// Sends SIGTERM to `child`, as `timeout`, systemd or `docker stop` do.
pub fn sigterm(child: &std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    kill(pid, Signal::SIGTERM).expect("sending SIGTERM");
}
