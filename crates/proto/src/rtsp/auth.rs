//! Who may use the server: RTSP's HTTP authentication (RFC 7826 §19.1,
//! RFC 7235), checked against one password (serve's `--token`; any user
//! name).
//!
//! A request without credentials, or with wrong ones, is answered `401`
//! with three challenges in order of preference (RFC 7616 §3.7): Digest
//! SHA-256, Digest MD5, Basic. Clients take the first they speak; FFmpeg
//! takes the last Digest one (MD5), as it does with MediaMTX and cameras.
//!
//! Digest nonces carry their issue time and an HMAC-SHA256 tag under a
//! key of the connection's own (random bytes from the driver): a nonce
//! works only on the connection that issued it, so a response captured on
//! another connection cannot be replayed here, and only for
//! [`Credentials::nonce_lifetime`] after `now`. An expired nonce with an
//! otherwise right answer gets `stale=true` (RFC 7616 §3.3), on which
//! clients retry at once without asking their user. No nonce state is
//! kept, so the check allocates nothing per nonce. Secrets are compared
//! in constant time (`subtle`).

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use md5::Md5;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::authorization::{Algorithm, Authorization, DigestAnswer, Qop, parse_authorization};
use super::error::AuthFailure;
use crate::units::Nanos;

/// The realm of every challenge.
pub const REALM: &str = "nagare";

/// How long a nonce is good for by default. Long: FFmpeg sends its
/// keep-alives without waiting for the answer, so it never renews a nonce
/// on them (a refused keep-alive still keeps the session alive).
pub const NONCE_LIFETIME: Nanos = Nanos::from_secs(600);

/// Length of a connection's nonce key.
pub const NONCE_KEY_LEN: usize = 32;

/// Hex digits of a nonce: 16 of issue time, 32 of tag.
const NONCE_HEX: usize = 48;

/// What a client must prove it knows: one password, with any user name.
/// Built once by the driver and shared by every connection's [`Guard`].
#[derive(Clone)]
pub struct Credentials {
    password: Vec<u8>,
    /// How long a Digest nonce stays valid after it is issued.
    pub nonce_lifetime: Nanos,
}

impl fmt::Debug for Credentials {
    // The password stays out of logs and panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("nonce_lifetime", &self.nonce_lifetime)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Credentials with `password` and the default nonce lifetime.
    pub fn new(password: impl Into<Vec<u8>>) -> Credentials {
        Credentials {
            password: password.into(),
            nonce_lifetime: NONCE_LIFETIME,
        }
    }
}

/// One connection's check of its requests' credentials.
#[derive(Clone)]
pub struct Guard {
    credentials: Arc<Credentials>,
    key: [u8; NONCE_KEY_LEN],
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// A guard for one connection; `nonce_key` is random bytes from the
    /// driver, drawn for this connection alone.
    pub fn new(credentials: Arc<Credentials>, nonce_key: [u8; NONCE_KEY_LEN]) -> Guard {
        Guard {
            credentials,
            key: nonce_key,
        }
    }

    /// Whether a request of `method` (as written, `DESCRIBE`) for `uri`
    /// (the request line's, as written) with this `Authorization` value
    /// may go on at `now`.
    pub fn check(
        &self,
        now: Nanos,
        method: &str,
        uri: &str,
        authorization: Option<&str>,
    ) -> Result<(), AuthFailure> {
        let value = authorization.ok_or(AuthFailure::Missing)?;
        match parse_authorization(value)? {
            Authorization::Basic { password, .. } => {
                match bool::from(password.ct_eq(&self.credentials.password)) {
                    true => Ok(()),
                    false => Err(AuthFailure::WrongCredentials),
                }
            }
            Authorization::Digest(d) => self.check_digest(now, method, uri, &d),
        }
    }

    fn check_digest(
        &self,
        now: Nanos,
        method: &str,
        uri: &str,
        d: &DigestAnswer<'_>,
    ) -> Result<(), AuthFailure> {
        if d.realm != REALM {
            return Err(AuthFailure::WrongRealm);
        }
        let issued = self.issued(&d.nonce).ok_or(AuthFailure::ForeignNonce)?;
        if d.uri != uri {
            return Err(AuthFailure::UriMismatch);
        }
        let want = response(d.algorithm, d, &self.credentials.password, method);
        let given = d.response.to_ascii_lowercase();
        if !bool::from(given.as_bytes().ct_eq(want.as_bytes())) {
            return Err(AuthFailure::WrongCredentials);
        }
        // Only a right answer learns that its nonce is stale (the client
        // then retries without asking its user).
        if now.saturating_sub(issued) > self.credentials.nonce_lifetime {
            return Err(AuthFailure::StaleNonce);
        }
        Ok(())
    }

    /// A nonce issued at `now`: its time in hex, then its tag.
    pub fn nonce(&self, now: Nanos) -> String {
        let mut out = format!("{:016x}", now.as_nanos());
        out.push_str(&hex(&self.tag(now)));
        out
    }

    /// When `nonce` was issued, if this connection issued it.
    fn issued(&self, nonce: &str) -> Option<Nanos> {
        if nonce.len() != NONCE_HEX || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let issued = Nanos(u64::from_str_radix(&nonce[..16], 16).ok()?);
        let tag = hex(&self.tag(issued));
        let given = nonce[16..].to_ascii_lowercase();
        bool::from(given.as_bytes().ct_eq(tag.as_bytes())).then_some(issued)
    }

    fn tag(&self, issued: Nanos) -> [u8; 16] {
        // Invariant: HMAC takes keys of any length, so this cannot fail.
        #[allow(clippy::expect_used)]
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC accepts any key");
        mac.update(b"nagare rtsp nonce v1");
        mac.update(&issued.as_nanos().to_be_bytes());
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&full[..16]);
        tag
    }

    /// The `WWW-Authenticate` values of a `401` at `now`, most preferred
    /// first; `stale` marks the Digest ones `stale=true`.
    pub fn challenges(&self, now: Nanos, stale: bool) -> [String; 3] {
        let nonce = self.nonce(now);
        let stale = if stale { ", stale=true" } else { "" };
        let digest = |a: Algorithm| {
            format!(
                "Digest realm=\"{REALM}\", nonce=\"{nonce}\", algorithm={}{stale}",
                a.name()
            )
        };
        [
            digest(Algorithm::Sha256),
            digest(Algorithm::Md5),
            format!("Basic realm=\"{REALM}\""),
        ]
    }
}

/// The `response` a client knowing `password` sends (RFC 7616 §3.4.1):
/// H(H(user:realm:password):nonce[:nc:cnonce:qop]:H(method:uri)), hex.
fn response(algorithm: Algorithm, d: &DigestAnswer<'_>, password: &[u8], method: &str) -> String {
    let h = |parts: &[&[u8]]| digest_hex(algorithm, parts);
    let ha1 = h(&[d.username.as_bytes(), d.realm.as_bytes(), password]);
    let ha2 = h(&[method.as_bytes(), d.uri.as_bytes()]);
    match &d.qop {
        Qop::None => h(&[ha1.as_bytes(), d.nonce.as_bytes(), ha2.as_bytes()]),
        Qop::Auth { nc, cnonce } => h(&[
            ha1.as_bytes(),
            d.nonce.as_bytes(),
            nc.as_bytes(),
            cnonce.as_bytes(),
            b"auth",
            ha2.as_bytes(),
        ]),
    }
}

/// The hash of `parts` joined with `:`, in lower-case hex.
fn digest_hex(algorithm: Algorithm, parts: &[&[u8]]) -> String {
    fn joined<D: Digest>(parts: &[&[u8]]) -> String {
        let mut d = D::new();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                d.update(b":");
            }
            d.update(p);
        }
        hex(&d.finalize())
    }
    match algorithm {
        Algorithm::Md5 => joined::<Md5>(parts),
        Algorithm::Sha256 => joined::<Sha256>(parts),
    }
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    const KEY: [u8; NONCE_KEY_LEN] = [7; NONCE_KEY_LEN];
    const URI: &str = "rtsp://127.0.0.1:8554/clip.ts";

    fn guard() -> Guard {
        Guard::new(Arc::new(Credentials::new("s3cret-token")), KEY)
    }

    /// A Digest header as a client knowing `password` writes it.
    fn answer(a: Algorithm, nonce: &str, password: &str, qop: bool) -> String {
        let d = DigestAnswer {
            username: "anyone".into(),
            realm: REALM.into(),
            nonce: nonce.into(),
            uri: URI.into(),
            response: "".into(),
            algorithm: a,
            qop: match qop {
                true => Qop::Auth {
                    nc: "00000001".into(),
                    cnonce: "0a4f113b".into(),
                },
                false => Qop::None,
            },
        };
        let r = response(a, &d, password.as_bytes(), "DESCRIBE");
        let extra = if qop {
            ", qop=auth, nc=00000001, cnonce=\"0a4f113b\""
        } else {
            ""
        };
        format!(
            "Digest username=\"anyone\", realm=\"{REALM}\", nonce=\"{nonce}\", uri=\"{URI}\", \
             response=\"{r}\", algorithm={}{extra}",
            a.name()
        )
    }

    #[test]
    fn rfc_7616_example_responses() {
        // RFC 7616 §3.9.1: the same request with SHA-256 and with MD5.
        let d = |a| DigestAnswer {
            username: "Mufasa".into(),
            realm: "http-auth@example.org".into(),
            nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v".into(),
            uri: "/dir/index.html".into(),
            response: "".into(),
            algorithm: a,
            qop: Qop::Auth {
                nc: "00000001".into(),
                cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ".into(),
            },
        };
        assert_eq!(
            response(
                Algorithm::Sha256,
                &d(Algorithm::Sha256),
                b"Circle of Life",
                "GET"
            ),
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"
        );
        assert_eq!(
            response(Algorithm::Md5, &d(Algorithm::Md5), b"Circle of Life", "GET"),
            "8ca523f5e9506fed4657c9700eebdbec"
        );
    }

    #[test]
    fn digest_with_and_without_qop_passes_and_a_wrong_password_does_not() {
        let g = guard();
        let now = Nanos::from_secs(5);
        let nonce = g.nonce(now);
        for a in [Algorithm::Md5, Algorithm::Sha256] {
            for qop in [false, true] {
                let ok = answer(a, &nonce, "s3cret-token", qop);
                assert_eq!(g.check(now, "DESCRIBE", URI, Some(&ok)), Ok(()), "{ok}");
                let bad = answer(a, &nonce, "s3cret-tokeN", qop);
                assert_eq!(
                    g.check(now, "DESCRIBE", URI, Some(&bad)),
                    Err(AuthFailure::WrongCredentials)
                );
                // The method and the URI are in the hash, and the URI must
                // be the request's.
                assert_eq!(
                    g.check(now, "SETUP", URI, Some(&ok)),
                    Err(AuthFailure::WrongCredentials)
                );
                assert_eq!(
                    g.check(now, "DESCRIBE", "rtsp://127.0.0.1:8554/other", Some(&ok)),
                    Err(AuthFailure::UriMismatch)
                );
            }
        }
    }

    #[test]
    fn basic_compares_the_password_and_ignores_the_user() {
        let g = guard();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ok = format!("Basic {}", b64("whoever:s3cret-token"));
        assert_eq!(g.check(Nanos::ZERO, "PLAY", URI, Some(&ok)), Ok(()));
        for wrong in ["whoever:s3cret-toke", "whoever:s3cret-token2", ":"] {
            let h = format!("Basic {}", b64(wrong));
            assert_eq!(
                g.check(Nanos::ZERO, "PLAY", URI, Some(&h)),
                Err(AuthFailure::WrongCredentials)
            );
        }
        assert_eq!(
            g.check(Nanos::ZERO, "PLAY", URI, None),
            Err(AuthFailure::Missing)
        );
    }

    #[test]
    fn nonces_belong_to_their_connection_and_go_stale() {
        let g = guard();
        let issued = Nanos::from_secs(1);
        let nonce = g.nonce(issued);
        assert_eq!(nonce.len(), NONCE_HEX);
        let ok = answer(Algorithm::Md5, &nonce, "s3cret-token", false);
        let late = issued + NONCE_LIFETIME;
        assert_eq!(g.check(late, "DESCRIBE", URI, Some(&ok)), Ok(()));
        assert_eq!(
            g.check(late + Nanos(1), "DESCRIBE", URI, Some(&ok)),
            Err(AuthFailure::StaleNonce)
        );
        // Stale is only told to a right answer.
        let bad = answer(Algorithm::Md5, &nonce, "guess-guess", false);
        assert_eq!(
            g.check(late + Nanos(1), "DESCRIBE", URI, Some(&bad)),
            Err(AuthFailure::WrongCredentials)
        );
        // Another connection's key does not know this nonce, nor a forged
        // one, nor a tampered time.
        let other = Guard::new(Arc::new(Credentials::new("s3cret-token")), [8; 32]);
        assert_eq!(
            other.check(issued, "DESCRIBE", URI, Some(&ok)),
            Err(AuthFailure::ForeignNonce)
        );
        let mut tampered = nonce.clone();
        tampered.replace_range(..16, &format!("{:016x}", late.as_nanos()));
        for n in [tampered.as_str(), "00", &"0".repeat(NONCE_HEX)] {
            let h = answer(Algorithm::Md5, n, "s3cret-token", false);
            assert_eq!(
                g.check(issued, "DESCRIBE", URI, Some(&h)),
                Err(AuthFailure::ForeignNonce),
                "{n}"
            );
        }
    }

    #[test]
    fn challenges_offer_sha256_then_md5_then_basic() {
        let g = guard();
        let [sha, md5, basic] = g.challenges(Nanos::from_secs(3), true);
        let nonce = g.nonce(Nanos::from_secs(3));
        assert_eq!(
            sha,
            format!("Digest realm=\"nagare\", nonce=\"{nonce}\", algorithm=SHA-256, stale=true")
        );
        assert!(md5.ends_with("algorithm=MD5, stale=true"), "{md5}");
        assert_eq!(basic, "Basic realm=\"nagare\"");
        assert!(!g.challenges(Nanos::ZERO, false)[0].contains("stale"));
        assert!(!format!("{g:?}").contains("s3cret"));
    }
}
