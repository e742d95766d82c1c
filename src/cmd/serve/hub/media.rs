//! The media catalog: every path `serve` plays, found once at start.
//!
//! - `NAME.ts`: an MPEG-TS file, paced by its PCR (or at a constant rate
//!   without one), served as `NAME.ts`.
//! - `NAME` (any other file) with a sidecar `NAME.toml` or `STEM.toml`
//!   (`size`, `pix_fmt`, `fps`) or nagare's SDP `NAME.sdp`/`STEM.sdp`
//!   beside it: raw video frames back to back, served as `NAME`. A
//!   sidecar's `[stripes]` table offers one NMOS IS-05 sender per stripe
//!   of the frame (for `nagare cluster` nodes driven over IS-05).
//! - `bars`: the moving test pattern (`pattern:bars` in the API too).
//!
//! Paths come from the directory listing and the config file, never from
//! a request: a client's path is looked up here, never opened.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::serve::{MediaEntry, PathSource};
use nagare_proto::mpegts::{self, PACKET_LEN, Schedule, ScheduleConfig};
use nagare_proto::rtsp::{MulticastGroup, PortPair};
use nagare_proto::sdp::SdpStream;
use nagare_proto::serve::describe::{self, Track};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::video::stripe::Rule;
use nagare_proto::{BitRate, ByteSize, FrameRate, Nanos, Ssrc, VideoFormat};
use serde::Deserialize;
use tracing::{info, warn};

use crate::cli;

/// The built-in pattern's path, format and rate: small, so a hundred
/// flows of it stay light.
pub(crate) const PATTERN_PATH: &str = "bars";
const PATTERN_SIZE: &str = "320x180";
const PATTERN_FPS: &str = "25";

/// How much of a `.ts` file is scanned for its PCR rate at start.
const TS_PROBE_BYTES: u64 = 16 << 20;

/// What a path plays.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// Raw frames back to back in a file.
    Raw {
        /// The file.
        path: PathBuf,
        /// Frame format.
        format: VideoFormat,
        /// Frame rate.
        rate: FrameRate,
        /// Whole frames in the file.
        frames: u64,
    },
    /// The test pattern, rendered by the reader.
    Pattern {
        /// Frame format.
        format: VideoFormat,
        /// Frame rate.
        rate: FrameRate,
    },
    /// An MPEG-TS file.
    Ts {
        /// The file.
        path: PathBuf,
        /// Bytes of whole TS packets in it.
        bytes: u64,
        /// Its rate, from its PCRs (or the fallback).
        rate: BitRate,
    },
}

/// One path of the catalog.
#[derive(Debug, Clone)]
pub(crate) struct Media {
    /// The path under which RTSP and the API know it.
    pub name: String,
    /// What it plays.
    pub kind: Kind,
    /// The group RTSP clients may SETUP multicast on.
    pub multicast: Option<MulticastGroup>,
    /// The stripe senders it offers over IS-05, if its sidecar says so.
    pub stripes: Option<StripeOffer>,
}

/// What a raw path's `[stripes]` table offers: one IS-05 sender per
/// stripe `k` of `count` by `rule`, each sending what a `nagare cluster`
/// leg of that stripe sends through the API (the same packet size, SSRC
/// `ssrc + k` with sequence numbers locked to the epoch), so legs made
/// either way are identical and a receiver merges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StripeOffer {
    /// How the frame is split.
    pub rule: Rule,
    /// Stripes per frame.
    pub count: usize,
    /// One stripe's geometry.
    pub format: VideoFormat,
    /// RTP payload bytes per packet (`None`: serve's default).
    pub packet_size: Option<usize>,
    /// SSRC of stripe 0.
    pub ssrc: u32,
}

impl Media {
    /// Whether the file behind this path can still be played as listed:
    /// it opens and holds the bytes the catalog counted. Checked as a
    /// stream is asked for, so a file deleted or cut short since the
    /// catalog was made is refused with the reason, not started and then
    /// failed. Errors name the path, never the server's file.
    pub(crate) fn check_readable(&self) -> Result<(), String> {
        let (path, need) = match &self.kind {
            Kind::Pattern { .. } => return Ok(()),
            Kind::Raw {
                path,
                format,
                frames,
                ..
            } => (path, frames.saturating_mul(format.frame_bytes() as u64)),
            Kind::Ts { path, bytes, .. } => (path, *bytes),
        };
        let name = &self.name;
        let file = std::fs::File::open(path).map_err(|e| format!("opening '{name}': {e}"))?;
        let len = file
            .metadata()
            .map_err(|e| format!("reading '{name}': {e}"))?
            .len();
        if len < need {
            return Err(format!(
                "'{name}' holds {len} bytes where serve listed {need}: the file was cut short \
                 after serve listed it"
            ));
        }
        Ok(())
    }

    /// Nominal payload rate (RTP payload of raw video, TS bytes).
    pub(crate) fn rate(&self) -> BitRate {
        match &self.kind {
            Kind::Raw { format, rate, .. } | Kind::Pattern { format, rate } => {
                BitRate((format.frame_bytes() as f64 * 8.0 * rate.as_f64()) as u64)
            }
            Kind::Ts { rate, .. } => *rate,
        }
    }

    /// Frame format and rate of raw video and patterns.
    pub(crate) fn raw_format(&self) -> Option<(VideoFormat, FrameRate)> {
        match &self.kind {
            Kind::Raw { format, rate, .. } | Kind::Pattern { format, rate } => {
                Some((*format, *rate))
            }
            Kind::Ts { .. } => None,
        }
    }

    /// Whether it is an MPEG-TS path.
    pub(crate) fn is_ts(&self) -> bool {
        matches!(self.kind, Kind::Ts { .. })
    }

    /// The source as `/v3/paths/list` shows it.
    pub(crate) fn source(&self) -> PathSource {
        // The catalog name, never the server's file path: clients have
        // no business knowing the server's directory layout.
        let (kind, id) = match &self.kind {
            Kind::Raw { .. } => ("rawFile", self.name.clone()),
            Kind::Pattern { .. } => ("pattern", "bars".to_string()),
            Kind::Ts { .. } => ("mpegtsFile", self.name.clone()),
        };
        PathSource {
            kind: kind.into(),
            id,
        }
    }

    /// Codec name of its one track.
    pub(crate) fn codec(&self) -> &'static str {
        if self.is_ts() { "MP2T" } else { "raw" }
    }

    /// The SDP of DESCRIBE: one media, `a=control:trackID=0`.
    pub(crate) fn sdp(&self, session_id: u64) -> String {
        let track = match &self.kind {
            // RTSP sends in serve's default packets, within the standard
            // UDP size.
            Kind::Raw { format, rate, .. } | Kind::Pattern { format, rate } => Track::Raw {
                format: *format,
                rate: *rate,
                max_udp: None,
            },
            Kind::Ts { .. } => Track::Ts,
        };
        describe::sdp(&self.name, track, session_id)
    }
}

/// A raw file's sidecar `NAME.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sidecar {
    size: String,
    pix_fmt: String,
    fps: String,
    #[serde(default)]
    multicast: Option<String>,
    #[serde(default)]
    stripes: Option<StripesSection>,
}

/// A sidecar's `[stripes]`: the cluster file's `split`, `stripes`,
/// `packet_size` and `ssrc`, which every node offering the path must
/// share with it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StripesSection {
    split: Rule,
    count: usize,
    #[serde(default)]
    packet_size: Option<usize>,
    #[serde(default)]
    ssrc: Option<u32>,
}

impl StripesSection {
    /// The offer for frames of `format`, or why these values do not fit.
    fn offer(&self, format: VideoFormat) -> Result<StripeOffer> {
        let (stripes, _) = nagare_proto::serve::leg::stripe(format, self.split, self.count, 0)
            .map_err(|e| anyhow!("[stripes]: {e}"))?;
        let stripe = stripes.stripe_format();
        if let Some(p) = self.packet_size {
            Packetizer::new(stripe, p, Ssrc(0))
                .map_err(|e| anyhow!("[stripes] packet_size {p}: {e}"))?;
        }
        let ssrc = self.ssrc.unwrap_or(nagare_proto::cluster::DEFAULT_SSRC);
        let last = u32::try_from(self.count.saturating_sub(1)).unwrap_or(u32::MAX);
        if ssrc.checked_add(last).is_none() {
            bail!(
                "[stripes] ssrc {ssrc:#010x}: stripe k sends ssrc + k, which wraps past 0xffffffff"
            );
        }
        Ok(StripeOffer {
            rule: self.split,
            count: self.count,
            format: stripe,
            packet_size: self.packet_size,
            ssrc,
        })
    }
}

/// Every path, by name.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    media: BTreeMap<String, Arc<Media>>,
}

impl Catalog {
    /// The pattern, the media of `dir` and the config file's `entries`;
    /// `ts_rate` paces `.ts` files without PCR. Files that are not media
    /// are skipped with a note; a broken sidecar is an error.
    pub(crate) fn scan(
        dir: Option<&Path>,
        entries: &[MediaEntry],
        ts_rate: BitRate,
        follow_symlinks: bool,
    ) -> Result<Catalog> {
        let mut c = Catalog::default();
        let pattern = MediaEntry {
            name: PATTERN_PATH.into(),
            source: "pattern:bars".into(),
            size: Some(PATTERN_SIZE.into()),
            pix_fmt: Some("uyvy422".into()),
            fps: Some(PATTERN_FPS.into()),
            multicast: None,
        };
        c.insert(from_entry(&pattern, ts_rate)?)?;
        if let Some(dir) = dir {
            for m in scan_dir(dir, ts_rate, follow_symlinks)? {
                c.insert(m)?;
            }
        }
        for e in entries {
            let m = from_entry(e, ts_rate).with_context(|| format!("media '{}'", e.name))?;
            c.insert(m)?;
        }
        Ok(c)
    }

    fn insert(&mut self, m: Media) -> Result<()> {
        if self.media.contains_key(&m.name) {
            bail!(
                "two media are named '{}': rename one (paths must be unique)",
                m.name
            );
        }
        self.media.insert(m.name.clone(), Arc::new(m));
        Ok(())
    }

    /// The path `name` (`pattern:bars` names the pattern too).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Media>> {
        let name = if name == "pattern:bars" {
            PATTERN_PATH
        } else {
            name
        };
        self.media.get(name).cloned()
    }

    /// Every path, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Media>> {
        self.media.values()
    }

    /// Number of paths.
    pub(crate) fn len(&self) -> usize {
        self.media.len()
    }
}

/// The media files of `dir` (not recursive).
fn scan_dir(dir: &Path, ts_rate: BitRate, follow_symlinks: bool) -> Result<Vec<Media>> {
    let listing = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot list --media directory '{}': give a directory of .ts and raw files",
            dir.display()
        )
    })?;
    let root = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut files: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && inside(&root, p, follow_symlinks))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in &files {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // One bad file costs its own path, never the server.
        match media_of(name, path, ts_rate) {
            Ok(Some(m)) => out.push(m),
            Ok(None) => {}
            Err(e) => warn!(file = %path.display(), "skipping '{name}': {e:#}"),
        }
    }
    Ok(out)
}

/// Whether `path` (an entry of `--media`) may be served: a symbolic link
/// that leads out of the directory is not, unless `--follow-symlinks`
/// (a link to /etc/passwd would otherwise be sent to anyone who asks).
fn inside(root: &Path, path: &Path, follow_symlinks: bool) -> bool {
    let is_link = path
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink());
    if !is_link || follow_symlinks {
        return true;
    }
    match path.canonicalize() {
        Ok(target) if target.starts_with(root) => true,
        Ok(target) => {
            warn!(
                file = %path.display(),
                target = %target.display(),
                "skipping '{}': a symbolic link out of --media (to '{}'); \
                 pass --follow-symlinks to serve it",
                path.display(),
                target.display()
            );
            false
        }
        Err(_) => false,
    }
}

/// The medium of file `path`, named `name`: `None` for a file that is
/// not media (a sidecar, or raw data without one).
fn media_of(name: &str, path: &Path, ts_rate: BitRate) -> Result<Option<Media>> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("ts") {
        return ts_media(name, path, ts_rate, None).map(Some);
    }
    if matches!(ext, "toml" | "sdp") {
        return Ok(None);
    }
    match raw_description(path)? {
        Some((format, rate, multicast, stripes)) => {
            let mut m = raw_media(name, path, format, rate, multicast)?;
            m.stripes = stripes;
            Ok(Some(m))
        }
        None => {
            info!(
                file = %path.display(),
                "skipping '{}': not .ts and no {name}.toml, NAME.toml or .sdp beside it",
                path.display()
            );
            Ok(None)
        }
    }
}

/// The sidecar or SDP of raw file `path`, if it has one.
#[allow(clippy::type_complexity)]
fn raw_description(
    path: &Path,
) -> Result<
    Option<(
        VideoFormat,
        FrameRate,
        Option<MulticastGroup>,
        Option<StripeOffer>,
    )>,
> {
    let mut candidates = vec![path.with_extension("toml"), path.with_extension("sdp")];
    let mut whole = path.as_os_str().to_owned();
    whole.push(".toml");
    candidates.insert(0, PathBuf::from(&whole));
    let mut whole = path.as_os_str().to_owned();
    whole.push(".sdp");
    candidates.insert(1, PathBuf::from(whole));
    let Some(side) = candidates.into_iter().find(|c| c.is_file() && c != path) else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(&side).with_context(|| format!("reading '{}'", side.display()))?;
    if side.extension().is_some_and(|e| e == "sdp") {
        let s = SdpStream::parse(&text).map_err(|e| anyhow!("'{}': {e}", side.display()))?;
        let rate = s.rate.ok_or_else(|| {
            anyhow!(
                "'{}' has no frame rate: add exactframerate= to its fmtp",
                side.display()
            )
        })?;
        return Ok(Some((s.format, rate, None, None)));
    }
    let car: Sidecar = toml::from_str(&text).with_context(|| {
        format!(
            "'{}' does not parse: it needs size = \"1920x1080\", pix_fmt = \"uyvy422\", fps = \"25\"",
            side.display()
        )
    })?;
    let format = cli::parse_format(&car.size, &car.pix_fmt)
        .with_context(|| format!("in '{}'", side.display()))?;
    let rate = cli::parse_rate(&car.fps).with_context(|| format!("in '{}'", side.display()))?;
    let group = car
        .multicast
        .map(|m| multicast_group(&m))
        .transpose()
        .with_context(|| format!("in '{}'", side.display()))?;
    let stripes = car
        .stripes
        .map(|s| s.offer(format))
        .transpose()
        .with_context(|| format!("in '{}'", side.display()))?;
    Ok(Some((format, rate, group, stripes)))
}

/// A media entry of the config file.
fn from_entry(e: &MediaEntry, ts_rate: BitRate) -> Result<Media> {
    let multicast = e.multicast.as_deref().map(multicast_group).transpose()?;
    if e.name.is_empty() || e.name.contains(['/', '?', '#']) || e.name.chars().any(char::is_control)
    {
        bail!(
            "media name '{}' must be non-empty without '/', '?' or '#'",
            e.name
        );
    }
    let path = Path::new(&e.source);
    if !e.source.starts_with("pattern:")
        && path
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("ts"))
    {
        return ts_media(&e.name, path, ts_rate, multicast);
    }
    let need = |v: &Option<String>, what: &str| {
        v.clone().ok_or_else(|| {
            anyhow!(
                "media '{}' is raw video: give {what} (size, pix_fmt and fps)",
                e.name
            )
        })
    };
    let format = cli::parse_format(&need(&e.size, "size")?, &need(&e.pix_fmt, "pix_fmt")?)?;
    let rate = cli::parse_rate(&need(&e.fps, "fps")?)?;
    if let Some(p) = e.source.strip_prefix("pattern:") {
        if p != "bars" {
            bail!("unknown pattern '{p}': the built-in pattern is pattern:bars");
        }
        return Ok(Media {
            name: e.name.clone(),
            kind: Kind::Pattern { format, rate },
            multicast,
            stripes: None,
        });
    }
    raw_media(&e.name, path, format, rate, multicast)
}

fn raw_media(
    name: &str,
    path: &Path,
    format: VideoFormat,
    rate: FrameRate,
    multicast: Option<MulticastGroup>,
) -> Result<Media> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("cannot read raw media '{}'", path.display()))?
        .len();
    let frame = format.frame_bytes() as u64;
    if len < frame || len % frame != 0 {
        bail!(
            "raw media '{}' is {len} bytes, not a whole number of {frame}-byte {}x{} {} frames; \
             fix its size/pix_fmt",
            path.display(),
            format.width,
            format.height,
            format.pixel_format
        );
    }
    Ok(Media {
        name: name.to_string(),
        kind: Kind::Raw {
            path: path.to_path_buf(),
            format,
            rate,
            frames: len / frame,
        },
        multicast,
        stripes: None,
    })
}

/// A `.ts` file: whole packets, sync bytes in place, rate from its PCRs.
fn ts_media(
    name: &str,
    path: &Path,
    fallback: BitRate,
    multicast: Option<MulticastGroup>,
) -> Result<Media> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("cannot read MPEG-TS media '{}'", path.display()))?
        .len();
    let bytes = len - len % PACKET_LEN as u64;
    let rate = ts_rate(path, bytes, fallback)?;
    Ok(Media {
        name: name.to_string(),
        kind: Kind::Ts {
            path: path.to_path_buf(),
            bytes,
            rate,
        },
        multicast,
        stripes: None,
    })
}

/// The rate of the first [`TS_PROBE_BYTES`] of a TS file, as proto's
/// schedule times them.
fn ts_rate(path: &Path, bytes: u64, fallback: BitRate) -> Result<BitRate> {
    let mut head = Vec::new();
    File::open(path)
        .and_then(|f| f.take(bytes.min(TS_PROBE_BYTES)).read_to_end(&mut head))
        .with_context(|| format!("reading '{}'", path.display()))?;
    if head.len() < PACKET_LEN || head[0] != mpegts::SYNC_BYTE {
        bail!(
            "'{}' is not an MPEG-TS file (no 0x47 sync byte at its start); remove it from --media \
             or rename it",
            path.display()
        );
    }
    // Noise with its sync bytes in place would "play" 0 packets: refuse
    // it here, with the reason, instead.
    mpegts::psi::check_stream(&head).map_err(|e| {
        anyhow!(
            "'{}' is not a playable MPEG-TS file: {e}; remove it from --media or rename it",
            path.display()
        )
    })?;
    let mut schedule = Schedule::new(ScheduleConfig::new(fallback));
    for p in head.chunks_exact(PACKET_LEN) {
        schedule.feed(p);
    }
    schedule.finish();
    let span = schedule.duration().unwrap_or(Nanos::ZERO);
    Ok(if span > Nanos::ZERO {
        BitRate::of(ByteSize(head.len() as u64), span)
    } else {
        fallback
    })
}

/// `239.1.2.3:5000` as the group RTSP multicast SETUPs get.
fn multicast_group(text: &str) -> Result<MulticastGroup> {
    let a: SocketAddr = text
        .parse()
        .map_err(|_| anyhow!("multicast '{text}' is not ADDR:PORT such as 239.255.0.1:5000"))?;
    if !a.ip().is_multicast() {
        bail!("multicast '{text}' is not a multicast address (224.0.0.0/4 or ff00::/8)");
    }
    let ports = PortPair::from_rtp(a.port())
        .ok_or_else(|| anyhow!("multicast '{text}': port must be 1..65534"))?;
    Ok(MulticastGroup {
        group: a.ip(),
        ports,
        ttl: 1,
    })
}
