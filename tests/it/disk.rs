//! Recording onto a disk that fills up, and into segment files: recv
//! names the OS error and the path, leaves whole frames on disk (cutting
//! or padding the partial one), still prints its report, and exits 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use nagare_api::video::{EndedBy, RecvReport, SendReport};

use crate::common::{Running, Scratch, nagare, noise, parse_report};

const SIZE: &str = "320x18";
/// Bytes of one 320x18 UYVY frame: not a whole number of pages, so the
/// frame that does not fit is written in part before the disk is full.
const FRAME: usize = 320 * 18 * 2;

/// A small filesystem mounted for one test, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    /// Mounts `kib` KiB of tmpfs under `dir`; `None` (after saying why)
    /// where mounting is not allowed (not root, or no CAP_SYS_ADMIN).
    fn tmpfs(dir: &Path, kib: u64) -> Option<Mount> {
        let size = format!("size={kib}k");
        Mount::at(dir.join("tmpfs"), &["-t", "tmpfs", "-o", &size, "tmpfs"])
    }

    /// Mounts a `kib` KiB ext4 image (tmpfs takes no O_DIRECT before
    /// Linux 6.6) under `dir`; `None` where loop mounts are not allowed.
    fn ext4(dir: &Path, kib: u64) -> Option<Mount> {
        if !crate::common::require("mkfs.ext4") {
            return None;
        }
        let img = dir.join("ext4.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(kib * 1024)
            .unwrap();
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^has_journal"])
            .arg(&img)
            .status()
            .is_ok_and(|s| s.success());
        assert!(made, "mkfs.ext4 failed on {}", img.display());
        Mount::at(dir.join("ext4"), &["-o", "loop", img.to_str().unwrap()])
    }

    /// Runs `mount ARGS AT`.
    fn at(at: PathBuf, args: &[&str]) -> Option<Mount> {
        std::fs::create_dir_all(&at).unwrap();
        let ok = Command::new("mount")
            .args(args)
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "skipping: cannot mount at {} (needs root with CAP_SYS_ADMIN, and loop devices for an image)",
                at.display()
            );
            return None;
        }
        Some(Mount(at))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Sends `frames` frames of `input` to a recv started with `recv_args`;
/// returns recv's status, report, stderr, and send's report.
fn record(
    input: &Path,
    frames: u64,
    recv_args: &[&str],
) -> (std::process::ExitStatus, RecvReport, String, SendReport) {
    let n = frames.to_string();
    let mut recv = nagare();
    recv.args(["recv", "--listen", "127.0.0.1:0", "--size", SIZE])
        .args(["--pix-fmt", "uyvy422", "--fps", "100", "--frames", &n])
        .args(["--timeout", "5", "--json"])
        .args(recv_args);
    let mut r = Running::spawn(recv);
    let addr = r.listening().to_string();
    let send = nagare()
        .arg("send")
        .arg(input)
        .args(["--to", &addr, "--size", SIZE, "--pix-fmt", "uyvy422"])
        .args(["--fps", "100", "--frames", &n, "--json"])
        .output()
        .unwrap();
    assert!(send.status.success(), "{send:?}");
    let sent = parse_report(&String::from_utf8_lossy(&send.stdout));
    let (status, out, err) = r.finish();
    (status, parse_report(&out), err, sent)
}

#[test]
fn a_full_disk_is_named_and_the_file_keeps_whole_frames() {
    let s = Scratch::new("full-disk");
    let input = noise(FRAME * 8, 3);
    std::fs::write(s.path("in.uyvy"), &input).unwrap();
    // 64 KiB holds 5 frames of 11,520 bytes and 7,936 bytes of the 6th.
    let Some(fs) = Mount::tmpfs(&s.0, 64) else {
        return;
    };
    let copy = fs.0.join("copy.uyvy");
    let (status, report, err, _) = record(&s.path("in.uyvy"), 8, &["-o", copy.to_str().unwrap()]);
    assert_eq!(status.code(), Some(2), "{err}");
    let want = format!(
        "No space left on device (os error 28) writing {} after 5 frames (cut the partial frame)",
        copy.display()
    );
    assert!(err.contains(&want), "expected {want:?} in: {err}");
    assert_eq!(report.ended_by, EndedBy::OutputError);
    assert_eq!(
        report.output_error.as_deref().map(|e| e.contains(&want)),
        Some(true)
    );
    assert_eq!(report.frames_written, 5);
    assert!(!report.all_complete);
    // The report is printed in full even so.
    assert!(report.frames_complete >= 6, "{report:?}");
    let on_disk = std::fs::read(&copy).unwrap();
    assert_eq!(on_disk.len(), 5 * FRAME);
    assert!(
        on_disk == input[..5 * FRAME],
        "the 5 frames differ from the input"
    );
    drop(fs);

    // With --incomplete keep the partial frame is padded with zeros.
    let Some(fs) = Mount::tmpfs(&s.0, 64) else {
        return;
    };
    let copy = fs.0.join("copy.uyvy");
    let args = ["-o", copy.to_str().unwrap(), "--incomplete", "keep"];
    let (status, report, err, _) = record(&s.path("in.uyvy"), 8, &args);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("after 5 frames (padded the partial frame with zeros)"),
        "{err}"
    );
    assert_eq!(report.frames_written, 6);
    let on_disk = std::fs::read(&copy).unwrap();
    assert_eq!(on_disk.len(), 6 * FRAME);
    assert!(on_disk[..5 * FRAME] == input[..5 * FRAME]);
    let written = 16 * 4096 - 5 * FRAME; // what the 6th write got onto the disk
    assert!(on_disk[5 * FRAME..5 * FRAME + written] == input[5 * FRAME..5 * FRAME + written]);
    assert!(on_disk[5 * FRAME + written..].iter().all(|&b| b == 0));
}

#[test]
fn segments_are_whole_files_named_with_a_counter() {
    let s = Scratch::new("segments");
    let input = noise(FRAME * 8, 4);
    std::fs::write(s.path("in.uyvy"), &input).unwrap();
    let copy = s.path("copy.uyvy");
    let args = ["-o", copy.to_str().unwrap(), "--segment-frames", "3"];
    let (status, report, err, _) = record(&s.path("in.uyvy"), 8, &args);
    assert!(status.success(), "{err}");
    assert_eq!(report.frames_written, 8);
    let mut names: Vec<String> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("copy"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["copy-000000.uyvy", "copy-000001.uyvy", "copy-000002.uyvy"]
    );
    let joined: Vec<u8> = names
        .iter()
        .flat_map(|n| std::fs::read(s.path(n)).unwrap())
        .collect();
    assert_eq!(
        std::fs::metadata(s.path(&names[2])).unwrap().len(),
        2 * FRAME as u64
    );
    assert!(joined == input, "segments joined differ from the input");
}

#[test]
fn a_direct_recording_is_byte_identical_and_keeps_whole_frames_on_a_full_disk() {
    let s = Scratch::new("direct");
    let input = noise(FRAME * 100, 5);
    std::fs::write(s.path("in.uyvy"), &input).unwrap();
    // 11,520-byte frames are no whole number of 4 KiB blocks: every frame
    // but the first starts mid-block, so the staged tails must carry over.
    let copy = s.path("copy.uyvy");
    let args = ["-o", copy.to_str().unwrap(), "--direct"];
    let (status, report, err, _) = record(&s.path("in.uyvy"), 9, &args);
    assert!(status.success(), "{err}");
    assert_eq!(report.frames_written, 9);
    assert!(std::fs::read(&copy).unwrap() == input[..9 * FRAME]);

    // 100 frames (1.15 MB) do not fit: the error is named and what stays
    // is whole frames, each the input's.
    let Some(fs) = Mount::ext4(&s.0, 1024) else {
        return;
    };
    let copy = fs.0.join("copy.uyvy");
    let args = ["-o", copy.to_str().unwrap(), "--direct"];
    let (status, report, err, _) = record(&s.path("in.uyvy"), 100, &args);
    assert_eq!(status.code(), Some(2), "{err}");
    let want = format!(
        "No space left on device (os error 28) writing {}",
        copy.display()
    );
    assert!(err.contains(&want), "expected {want:?} in: {err}");
    assert_eq!(report.ended_by, EndedBy::OutputError);
    let on_disk = std::fs::read(&copy).unwrap();
    assert_eq!(on_disk.len() % FRAME, 0, "a partial frame was left");
    assert_eq!(report.frames_written, (on_disk.len() / FRAME) as u64);
    assert!(report.frames_written > 10, "{report:?}");
    assert!(on_disk == input[..on_disk.len()]);
    assert!(
        err.contains(&format!("after {} frames", report.frames_written)),
        "{err}"
    );
}

#[test]
fn direct_is_refused_where_it_cannot_work_and_says_why() {
    let s = Scratch::new("direct-refused");
    let out = nagare()
        .args(["recv", "--listen", "127.0.0.1:0", "--size", SIZE])
        .args([
            "--pix-fmt",
            "uyvy422",
            "--frames",
            "1",
            "--direct",
            "-o",
            "-",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("it takes neither -o - nor --append"), "{err}");
    let out = nagare()
        .args([
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--direct",
            "--append",
            "-o",
        ])
        .arg(s.path("x"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--append"));
}
