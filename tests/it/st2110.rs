//! ST 2110 conformance: the SDP nagare writes passes AMWA's sdpoker with
//! its strictest ST 2110 checks.

use nagare_proto::sdp::{RefClock, SdpStream};
use nagare_proto::video::st2110_21::SenderType;

use crate::common::{Scratch, assert_ok, free_udp_port, nagare, require};

/// sdpoker's strict run on `path`: its complaints, if any.
fn sdpoker(path: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new("sdpoker")
        .args([
            "--shaping",
            "true",
            "--whitespace",
            "true",
            "--should",
            "true",
        ])
        .arg(path)
        .output()
        .expect("running sdpoker");
    let err = String::from_utf8_lossy(&out.stderr);
    // sdpoker exits 0 on some internal failures, printing the exception.
    if out.status.success() && !err.contains("Error") {
        Ok(())
    } else {
        Err(format!("{err}{}", String::from_utf8_lossy(&out.stdout)))
    }
}

/// Sends one frame with `args` and returns the SDPs written (`sdps`
/// names them, relative to the scratch directory).
fn send_sdps(s: &Scratch, args: &[&str], sdps: &[&str]) -> Vec<(std::path::PathBuf, SdpStream)> {
    let sdp = s.path("out.sdp");
    let out = nagare()
        .args(["send", "pattern:bars", "--frames", "1"])
        .args(["--sdp", sdp.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    assert_ok(&out);
    sdps.iter()
        .map(|name| {
            let path = s.path(name);
            let text = std::fs::read_to_string(&path).unwrap();
            (path, SdpStream::parse(&text).unwrap())
        })
        .collect()
}

#[test]
fn every_sdp_send_writes_passes_sdpoker() {
    if !require("sdpoker") {
        return;
    }
    let s = Scratch::new("sdpoker");
    let port = free_udp_port().to_string();
    let to = format!("127.0.0.1:{port}");
    let group = format!("239.255.21.10:{port}");
    let v6 = format!("[::1]:{port}");
    let ptp = "39-A7-94-FF-FE-07-CB-D0:37";
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &[
                "--to",
                &to,
                "--size",
                "1920x1080",
                "--pix-fmt",
                "uyvp",
                "--fps",
                "60000/1001",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "64x48",
                "--pix-fmt",
                "rgb24",
                "--fps",
                "50",
                "--ptp",
                ptp,
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &group,
                "--interface",
                "lo",
                "--ttl",
                "4",
                "--size",
                "720x576",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &v6,
                "--size",
                "320x240",
                "--pix-fmt",
                "uyvy422",
                "--fps",
                "30000/1001",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "3840x2160",
                "--pix-fmt",
                "uyvp",
                "--fps",
                "50",
            ],
            &["out.sdp"],
        ),
        (
            &[
                "--to",
                &to,
                "--size",
                "640x480",
                "--pix-fmt",
                "rgb24",
                "--fps",
                "25",
            ],
            &["out-0.sdp", "out-1.sdp"],
        ),
    ];
    for (k, (args, sdps)) in cases.iter().enumerate() {
        let mut args = args.to_vec();
        if k == 2 {
            args.extend(["--pix-fmt", "uyvy422", "--fps", "25"]);
        }
        if k == 5 {
            args.extend(["--stripes", "2"]);
        }
        let want = match k {
            0 => SenderType::N,
            3 => SenderType::NL,
            _ => SenderType::W,
        };
        let tp = want.name().to_lowercase();
        if k != 4 {
            args.extend(["--tp", &tp]);
        }
        for (path, stream) in send_sdps(&s, &args, sdps) {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = sdpoker(&path) {
                panic!("sdpoker refuses the SDP of send {args:?}:\n{e}\n{text}");
            }
            assert!(text.contains("; \r\na=ts-refclk:"), "{text}");
            assert_eq!(stream.sender_type, Some(want), "{text}");
            match stream.clock {
                Some(RefClock::Ptp(p)) if k == 1 => assert_eq!(p.to_string(), ptp),
                Some(RefClock::LocalMac(_)) if k != 1 => {}
                other => panic!("case {k}: clock {other:?} in\n{text}"),
            }
        }
    }
}

#[test]
fn a_train_longer_than_the_type_allows_is_refused_with_the_limits() {
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "1920x1080",
        ])
        .args([
            "--pix-fmt",
            "uyvp",
            "--fps",
            "60000/1001",
            "--packet-size",
            "1220",
        ])
        .args(["--tp", "n", "--train", "7"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--train 7 with --tp n: a train of 7 packets is out of range 1..=6"),
        "{err}"
    );
    assert!(
        err.contains("(CMAX 6, VRX_FULL 9 for 4320 packets a frame)"),
        "{err}"
    );
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "64x48",
        ])
        .args(["--pix-fmt", "rgb24", "--fps", "25", "--tp", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("give n (narrow gapped), nl (narrow linear) or w (wide)"),
        "{err}"
    );
}

#[test]
fn a_bad_ptp_clock_is_refused_with_the_form_to_use() {
    let out = nagare()
        .args([
            "send",
            "pattern:bars",
            "--to",
            "127.0.0.1:9",
            "--size",
            "64x48",
        ])
        .args(["--pix-fmt", "rgb24", "--fps", "25", "--ptp", "39:A7:94:FF"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("39-A7-94-FF-FE-07-CB-D0"), "{err}");
}
