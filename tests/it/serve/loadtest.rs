//! `nagare loadtest` against `nagare serve`'s push API on loopback: raw
//! video streams are measured against their own schedule, and a ramp
//! that broke nothing says it found no limit.

use nagare_api::serve::LoadReport;

use super::harness::{Media, start_with_tiny};
use crate::common::{Scratch, nagare};

#[test]
fn a_ramp_of_raw_video_reports_its_schedule_and_an_honest_ceiling() {
    let media = Media::new("serve-loadtest");
    let serve = start_with_tiny(&media);
    let dir = Scratch::new("loadtest-plot");
    let plot = dir.path("ramp.png");
    let out = nagare()
        .args(["loadtest", &format!("http://{}", serve.http)])
        .args(["--source", "tiny", "--ramp", "1:2:1"])
        .args(["--duration", "2", "--warmup", "1", "--json"])
        .args(["--plot", plot.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r: LoadReport =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(!r.steps.is_empty(), "{err}");
    for s in &r.steps {
        assert_eq!(s.streams_received, s.streams, "{err}");
        assert!(s.frames > 0 && s.packets >= 4 * s.frames, "{s:?}");
    }
    // The ceiling is said as what the steps show: a ramp whose every
    // step stayed within 1 % found no limit, and its last count is a floor.
    let over = r.steps.iter().position(|s| s.frame_drop_ratio > 0.01);
    match over {
        None => {
            assert!(!r.limit_found);
            assert_eq!(r.ceiling, Some(2));
            assert_eq!(r.ceiling_text, "≥ 2 (no limit found within the ramp)");
            assert!(
                err.contains(
                    "loadtest: ceiling (frame drop <= 1%) ≥ 2 (no limit found within the ramp); "
                ),
                "{err}"
            );
        }
        Some(k) => {
            assert!(r.limit_found);
            assert_eq!(r.ceiling, k.checked_sub(1).map(|k| r.steps[k].streams));
        }
    }
    // The plot draws the 1 % ceiling and the 250 µs clean line (the
    // limits' orange) in its first two panels, and a third for CPU.
    let img = image::open(&plot).unwrap().to_rgb8();
    // Under a title block of one or two subtitle lines.
    let top = img.height() - 3 * 300;
    assert!(top == 80 || top == 106, "{}", img.height());
    let orange_in = |y0: u32| {
        (0..img.width())
            .flat_map(|x| (y0..y0 + 300).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == [255, 127, 14])
            .count()
    };
    assert!(orange_in(top) > 200, "no 1 % line");
    assert!(orange_in(top + 300) > 200, "no clean line");
    assert_eq!(orange_in(top + 600), 0);
}
