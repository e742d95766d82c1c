//! Pipes, as FFmpeg users chain tools: `ffmpeg … -f rawvideo - | nagare
//! send -` into `nagare recv -o - | ffmpeg -f rawvideo … -f framemd5 -`,
//! every frame's checksum equal to FFmpeg's own of the same frames.

use std::process::{Command, Stdio};

use crate::common::{Running, nagare, require, wait_bounded};

const SIZE: &str = "64x48";
const FRAMES: usize = 12;

/// FFmpeg's test source as raw UYVY frames.
fn testsrc() -> Command {
    let mut c = Command::new("ffmpeg");
    c.args(["-loglevel", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=size={SIZE}:rate=30"))
        .args(["-frames:v", &FRAMES.to_string(), "-pix_fmt", "uyvy422"]);
    c
}

/// The md5 column of framemd5 output, one per frame.
fn hashes(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(',').next())
        .map(|h| h.trim().to_string())
        .collect()
}

#[test]
fn ffmpeg_pipes_into_send_and_recv_pipes_into_ffmpeg() {
    if !require("ffmpeg") {
        return;
    }
    // What FFmpeg says the frames are.
    let want = testsrc().args(["-f", "framemd5", "-"]).output().unwrap();
    let want = hashes(&String::from_utf8_lossy(&want.stdout));
    assert_eq!(want.len(), FRAMES);
    // nagare recv -o - | ffmpeg … -f framemd5 -
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0", "--size", SIZE])
        .args(["--pix-fmt", "uyvy422", "--frames", &FRAMES.to_string()])
        .args(["--timeout", "10", "-o", "-"]);
    let mut r = Running::spawn(recv);
    let port = r.listening().port();
    let frames_out = r.child.stdout.take().unwrap();
    let md5 = Command::new("ffmpeg")
        .args([
            "-loglevel",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "uyvy422",
        ])
        .args(["-s", SIZE, "-r", "30", "-i", "-", "-f", "framemd5", "-"])
        .stdin(Stdio::from(frames_out))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // ffmpeg … -f rawvideo - | nagare send -
    let mut src = testsrc()
        .args(["-f", "rawvideo", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let raw = src.stdout.take().unwrap();
    let send = nagare()
        .args(["send", "-", "--to", &format!("127.0.0.1:{port}")])
        .args(["--size", SIZE, "--pix-fmt", "uyvy422", "--fps", "30"])
        .stdin(Stdio::from(raw))
        .output()
        .unwrap();
    assert!(
        send.status.success(),
        "{}",
        String::from_utf8_lossy(&send.stderr)
    );
    assert!(wait_bounded(&mut src, 30, "ffmpeg testsrc").success());
    let (status, _, err) = r.finish();
    assert!(status.success(), "{err}");
    let out = md5.wait_with_output().unwrap();
    let got = hashes(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(got, want, "frames differ after the pipes");
}

#[test]
fn a_pipe_that_ends_mid_frame_says_so() {
    // 1.5 frames of 64x48 UYVY (6144 bytes each).
    let mut send = nagare()
        .args(["send", "-", "--to", "127.0.0.1:9", "--size", SIZE])
        .args(["--pix-fmt", "uyvy422", "--fps", "30"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = send.stdin.take().unwrap();
        stdin.write_all(&vec![7u8; 6144 + 3072]).unwrap();
    }
    let status = wait_bounded(&mut send, 30, "nagare send -");
    let mut err = String::new();
    use std::io::Read;
    send.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("ended within frame 1: 3072 of its 6144 bytes"),
        "{err}"
    );
    // --loop cannot replay a pipe; --json and -o - both want stdout.
    let out = nagare()
        .args(["send", "-", "--to", "127.0.0.1:9", "--size", SIZE, "--loop"])
        .args(["--pix-fmt", "uyvy422", "--fps", "30"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("drop --loop"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = nagare()
        .args(["recv", "--listen", "127.0.0.1:0", "--size", SIZE])
        .args(["--pix-fmt", "uyvy422", "--json", "-o", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop one"));
}
