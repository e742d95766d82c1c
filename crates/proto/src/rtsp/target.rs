//! What a request URL names: the stream's path, the track, `?loop=1`.

use percent_encoding::percent_decode_str;
use rtsp_types::Url;

use super::Error;

/// The last path segment that names a track: nagare's SDP gives media `n`
/// the control URL `trackID=n`, relative to the stream's URL.
pub const TRACK_PREFIX: &str = "trackID=";

/// A request URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// Percent-decoded path without leading or trailing `/` and without
    /// the track segment.
    pub(crate) path: String,
    /// `trackID=n`, if the URL named one.
    pub(crate) track: Option<u16>,
    /// `?loop=1` (or `true`, `yes`).
    pub(crate) looping: bool,
}

impl Target {
    /// Reads `url`; a path that is not UTF-8 once decoded names nothing.
    pub(crate) fn parse(url: &Url) -> Result<Target, Error> {
        let raw = url.path().trim_matches('/');
        let (rest, track) = match raw.rsplit_once('/') {
            Some((rest, last)) => match track_of(last) {
                Some(t) => (rest, Some(t)),
                None => (raw, None),
            },
            None => match track_of(raw) {
                Some(t) => ("", Some(t)),
                None => (raw, None),
            },
        };
        let path = percent_decode_str(rest)
            .decode_utf8()
            .map_err(|_| Error::NotFound)?
            .into_owned();
        let looping = url
            .query_pairs()
            .any(|(k, v)| k == "loop" && matches!(v.as_ref(), "1" | "true" | "yes"));
        Ok(Target {
            path,
            track,
            looping,
        })
    }
}

/// `trackID=7` -> 7.
fn track_of(segment: &str) -> Option<u16> {
    segment.strip_prefix(TRACK_PREFIX)?.parse().ok()
}

/// The `Content-Base` of a DESCRIBE answer: the URL without query and
/// with a trailing `/`, so that `trackID=n` resolves below it.
pub(crate) fn content_base(url: &Url) -> String {
    let mut base = url.clone();
    // Credentials in the request URL are not echoed back.
    let _ = base.set_username("");
    let _ = base.set_password(None);
    base.set_query(None);
    base.set_fragment(None);
    let mut s = base.to_string();
    if !s.ends_with('/') {
        s.push('/');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> Target {
        Target::parse(&Url::parse(s).unwrap()).unwrap()
    }

    #[test]
    fn paths_tracks_and_loop() {
        let t = target("rtsp://127.0.0.1:8554/clip.ts?loop=1");
        assert_eq!(
            (t.path.as_str(), t.track, t.looping),
            ("clip.ts", None, true)
        );
        let t = target("rtsp://127.0.0.1:8554/clip.ts/trackID=0");
        assert_eq!(
            (t.path.as_str(), t.track, t.looping),
            ("clip.ts", Some(0), false)
        );
        let t = target("rtsp://h/a/b%20c/trackID=3/");
        assert_eq!((t.path.as_str(), t.track), ("a/b c", Some(3)));
        let t = target("rtsp://h/clip.ts/");
        assert_eq!((t.path.as_str(), t.track), ("clip.ts", None));
        let t = target("rtsp://h/trackID=1");
        assert_eq!((t.path.as_str(), t.track), ("", Some(1)));
        let t = target("rtsp://h/clip/trackID=99999");
        assert_eq!((t.path.as_str(), t.track), ("clip/trackID=99999", None));
        let t = target("rtsp://h/clip?loop=0");
        assert!(!t.looping);
        assert_eq!(
            Target::parse(&Url::parse("rtsp://h/%ff").unwrap()),
            Err(Error::NotFound)
        );
    }

    #[test]
    fn content_base_drops_the_query() {
        let u = Url::parse("rtsp://127.0.0.1:8554/clip.ts?loop=1").unwrap();
        assert_eq!(content_base(&u), "rtsp://127.0.0.1:8554/clip.ts/");
        let u = Url::parse("rtsp://h/clip/").unwrap();
        assert_eq!(content_base(&u), "rtsp://h/clip/");
        let u = Url::parse("rtsp://user:secret@h:8554/clip").unwrap();
        assert_eq!(content_base(&u), "rtsp://h:8554/clip/");
    }
}
