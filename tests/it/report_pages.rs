//! Plots and HTML pages fit for a report: `probe --plot` is a real PNG
//! with a title, axes and lines, and `probe --html` is one self-contained
//! page that headless Chromium opens, renders and screenshots, with the
//! verdict and the plot in its text.

use std::process::{Command, Stdio};

use nagare_api::probe::Report;

use crate::common::{Running, Scratch, nagare, require, wait_bounded};

/// A probe server on a free port; killed on drop.
struct Server(Running, u16);

impl Server {
    fn start() -> Server {
        let mut cmd = nagare();
        cmd.args(["probe", "server", "--listen", "127.0.0.1:0"]);
        let mut run = Running::spawn(cmd);
        let line = run.wait_for("port ");
        let port = line.rsplit("port ").next().unwrap().trim().parse().unwrap();
        Server(run, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

/// Runs a short test (3.2 s in 1 s intervals: a 0.2 s partial last one)
/// writing `extra` outputs; returns the report.
fn probe(extra: &[&str]) -> Report {
    let s = Server::start();
    let out = nagare()
        .args(["probe", "client", &format!("127.0.0.1:{}", s.1), "-J"])
        .args(["-b", "1.6M", "-l", "200", "-t", "3.2"])
        .args(extra)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("no report ({e}): {text}"))
}

#[test]
fn plot_is_a_titled_png_with_axes_and_lines() {
    let dir = Scratch::new("plot");
    let path = dir.path("probe.png");
    let r = probe(&["--plot", path.to_str().unwrap()]);
    let img = image::open(&path).unwrap().to_rgb8();
    // Three panels under a title block.
    assert_eq!((img.width(), img.height()), (1200, 80 + 3 * 300));
    let px = |x: u32, y: u32| img.get_pixel(x, y).0;
    // Text in the title block (dark pixels), white elsewhere in it.
    let title_dark = (0..img.width())
        .flat_map(|x| (0..40).map(move |y| (x, y)))
        .filter(|&(x, y)| px(x, y)[0] < 80)
        .count();
    assert!(title_dark > 300, "no title text: {title_dark}");
    // The set rate's own colour (orange) and the received line (blue).
    let count = |c: [u8; 3]| img.pixels().filter(|p| p.0 == c).count();
    assert!(count([255, 127, 14]) > 200, "no set-rate line");
    assert!(count([31, 119, 180]) > 200, "no received line");
    assert_eq!(r.receiver.intervals.len(), 4);
}

#[test]
fn html_page_renders_in_chromium_with_verdict_and_plot() {
    if !require("chromium") {
        return;
    }
    let dir = Scratch::new("html");
    let page = dir.path("report.html");
    let r = probe(&["--html", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    let word = if r.verdict.pass { "PASS" } else { "FAIL" };
    assert!(html.contains(&format!(r#"id="verdict">{word}<"#)), "{html}");
    assert!(html.contains(r#"src="data:image/png;base64,iVBOR"#));
    // Self-contained: nothing to fetch.
    assert!(!html.contains("http://") && !html.contains("https://"));
    let shot = dir.path("shot.png");
    let url = format!("file://{}", page.display());
    let profile = dir.path("chromium-profile");
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--window-size=1280,1600",
    ];
    let user_dir = format!("--user-data-dir={}", profile.display());
    let mut shoot = Command::new("chromium")
        .args(flags)
        .arg(&user_dir)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut shoot, 120, "chromium --screenshot");
    assert!(status.success(), "{status:?}");
    let bytes = std::fs::read(&shot).unwrap();
    assert!(bytes.len() > 1000 && &bytes[1..4] == b"PNG");
    let img = image::load_from_memory(&bytes).unwrap();
    assert_eq!((img.width(), img.height()), (1280, 1600));
    // The page as Chromium parsed it: the verdict and the decoded plot.
    let dom_file = dir.path("dom.html");
    let mut dump = Command::new("chromium")
        .args(flags)
        .arg(&user_dir)
        .arg("--dump-dom")
        .arg(&url)
        .stdout(std::fs::File::create(&dom_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut dump, 120, "chromium --dump-dom");
    assert!(status.success(), "{status:?}");
    let dom = std::fs::read_to_string(&dom_file).unwrap();
    assert!(dom.contains(&format!(">{word}</p>")), "{dom}");
    assert!(dom.contains("<img id=\"plot\""), "no plot in the DOM");
    for why in &r.verdict.reasons {
        assert!(dom.contains(why.as_str()), "reason {why:?} missing");
    }
}

#[test]
fn a_bidir_plot_and_page_show_both_ways() {
    let dir = Scratch::new("plot-bidir");
    let (png, page) = (dir.path("bidir.png"), dir.path("bidir.html"));
    let r = probe(&[
        "--bidir",
        "--plot",
        png.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(r.directions.len(), 2);
    let img = image::open(&png).unwrap().to_rgb8();
    // Both ways' numbers make the subtitle two lines: the title block
    // grows by one line (26 px) rather than clipping it.
    assert_eq!((img.width(), img.height()), (1200, 80 + 26 + 3 * 300));
    // The rate panel holds both ways' received lines: blue for client to
    // server, red for server to client (drawn over the blue where the two
    // received alike: the blue keeps its legend swatch and dots).
    let rate = |c: [u8; 3]| {
        (0..1200)
            .flat_map(|x| (106..406).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == c)
            .count()
    };
    assert!(rate([31, 119, 180]) > 40, "no client-to-server line");
    assert!(rate([214, 39, 40]) > 200, "no server-to-client line");
    // The page has a column per way, each with its own received rate.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<tr><th></th><th>client to server</th><th>server to client</th></tr>"),
        "{html}"
    );
    let received = |d: &nagare_api::probe::DirectionReport| {
        format!("{:.3} Mbit/s", d.receiver.effective_bandwidth_bps / 1e6)
    };
    let row = format!(
        "<tr><th>received</th><td>{}</td><td>{}</td></tr>",
        received(&r.directions[0]),
        received(&r.directions[1])
    );
    assert!(html.contains(&row), "{row} not in {html}");
}
