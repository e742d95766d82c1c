//! The `Authorization` header of a request, read (RFC 7235 §2.1):
//! `Basic` with its base64 `user:password` (RFC 7617), or `Digest` with
//! its parameters (RFC 7616 §3.4). A pure parser of client input, bounded
//! by the header's own length: no state, no allocation beyond the
//! parameters it returns, at most [`MAX_PARAMS`] of them.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::error::AuthFailure;

/// Most parameters a Digest header may carry (RFC 7616 defines eleven).
pub const MAX_PARAMS: usize = 16;

/// A Digest hash function (RFC 7616 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// MD5, the default when the header names none (RFC 2617, what
    /// FFmpeg, VLC and most cameras speak).
    Md5,
    /// SHA-256.
    Sha256,
}

impl Algorithm {
    /// The name in `algorithm=`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA-256",
        }
    }
}

/// The `qop` a Digest answer used (RFC 7616 §3.4): none (RFC 2069
/// style, what cameras and MediaMTX ask for), or `auth`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Qop<'a> {
    /// No `qop`: the response covers nonce, method and URI only.
    None,
    /// `qop=auth` with its nonce count and client nonce.
    Auth {
        /// `nc`: eight hex digits.
        nc: Cow<'a, str>,
        /// `cnonce`.
        cnonce: Cow<'a, str>,
    },
}

/// The parameters of a `Digest` answer that the check needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestAnswer<'a> {
    /// `username`.
    pub username: Cow<'a, str>,
    /// `realm`.
    pub realm: Cow<'a, str>,
    /// `nonce`: the server's, echoed.
    pub nonce: Cow<'a, str>,
    /// `uri`: the request URI the client hashed.
    pub uri: Cow<'a, str>,
    /// `response`: the hex digest to check.
    pub response: Cow<'a, str>,
    /// `algorithm` (MD5 when absent).
    pub algorithm: Algorithm,
    /// `qop` with its `nc` and `cnonce`.
    pub qop: Qop<'a>,
}

/// What an `Authorization` header claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization<'a> {
    /// `Basic`: the user name and password in clear.
    Basic {
        /// The user name (anything before the first `:`).
        user: String,
        /// The password bytes (everything after it).
        password: Vec<u8>,
    },
    /// `Digest`: a hash over the password, the server's nonce and the
    /// request.
    Digest(DigestAnswer<'a>),
}

/// Reads an `Authorization` header value.
pub fn parse_authorization(value: &str) -> Result<Authorization<'_>, AuthFailure> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    let (scheme, rest) = match value.find([' ', '\t']) {
        Some(i) => (&value[..i], value[i..].trim_start_matches([' ', '\t'])),
        None => (value, ""),
    };
    if scheme.eq_ignore_ascii_case("Basic") {
        basic(rest)
    } else if scheme.eq_ignore_ascii_case("Digest") {
        digest(rest).map(Authorization::Digest)
    } else {
        Err(AuthFailure::UnsupportedScheme)
    }
}

fn basic(token68: &str) -> Result<Authorization<'static>, AuthFailure> {
    let bytes = STANDARD
        .decode(token68.trim_end())
        .map_err(|_| AuthFailure::Malformed)?;
    let colon = bytes
        .iter()
        .position(|&b| b == b':')
        .ok_or(AuthFailure::Malformed)?;
    let user = String::from_utf8_lossy(&bytes[..colon]).into_owned();
    Ok(Authorization::Basic {
        user,
        password: bytes[colon + 1..].to_vec(),
    })
}

fn digest(params: &str) -> Result<DigestAnswer<'_>, AuthFailure> {
    let params = auth_params(params)?;
    let get = |name: &str| {
        params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let need = |name: &str| get(name).ok_or(AuthFailure::Malformed);
    let algorithm = match get("algorithm") {
        None => Algorithm::Md5,
        Some(a) if a.eq_ignore_ascii_case("MD5") => Algorithm::Md5,
        Some(a) if a.eq_ignore_ascii_case("SHA-256") => Algorithm::Sha256,
        Some(_) => return Err(AuthFailure::UnsupportedAlgorithm),
    };
    let qop = match get("qop") {
        None => Qop::None,
        Some(q) if q.eq_ignore_ascii_case("auth") => Qop::Auth {
            nc: need("nc")?,
            cnonce: need("cnonce")?,
        },
        Some(_) => return Err(AuthFailure::UnsupportedQop),
    };
    Ok(DigestAnswer {
        username: need("username")?,
        realm: need("realm")?,
        nonce: need("nonce")?,
        uri: need("uri")?,
        response: need("response")?,
        algorithm,
        qop,
    })
}

type Param<'a> = (&'a str, Cow<'a, str>);

/// `#auth-param`: `name=token` or `name="quoted"`, comma separated with
/// optional white space; each name at most once.
fn auth_params(mut s: &str) -> Result<Vec<Param<'_>>, AuthFailure> {
    let mut out: Vec<Param<'_>> = Vec::new();
    loop {
        s = s.trim_start_matches([' ', '\t', ',']);
        if s.is_empty() {
            return Ok(out);
        }
        if out.len() == MAX_PARAMS {
            return Err(AuthFailure::Malformed);
        }
        let (name, rest) = split_token(s);
        let rest = rest.trim_start_matches([' ', '\t']);
        let rest = rest.strip_prefix('=').ok_or(AuthFailure::Malformed)?;
        let rest = rest.trim_start_matches([' ', '\t']);
        let (value, rest) = match rest.strip_prefix('"') {
            Some(quoted) => quoted_string(quoted)?,
            None => {
                let (t, rest) = split_token(rest);
                (Cow::Borrowed(t), rest)
            }
        };
        if name.is_empty() || out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return Err(AuthFailure::Malformed);
        }
        out.push((name, value));
        s = rest.trim_start_matches([' ', '\t']);
        if !(s.is_empty() || s.starts_with(',')) {
            return Err(AuthFailure::Malformed);
        }
    }
}

/// The leading token (RFC 9110 tchar) of `s`, and what follows it.
fn split_token(s: &str) -> (&str, &str) {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    let end = s.find(|c: char| !tchar(c)).unwrap_or(s.len());
    s.split_at(end)
}

/// The rest of a quoted string after its opening quote: its value with
/// `\` escapes undone, and what follows the closing quote.
fn quoted_string(s: &str) -> Result<(Cow<'_, str>, &str), AuthFailure> {
    for (i, c) in s.char_indices() {
        match c {
            // Rare: only then is the value copied.
            '\\' => return unescape(s),
            '"' => return Ok((Cow::Borrowed(&s[..i]), &s[i + 1..])),
            c if c.is_control() && c != '\t' => return Err(AuthFailure::Malformed),
            _ => {}
        }
    }
    Err(AuthFailure::Malformed)
}

/// [`quoted_string`] for a value with escapes: built up char by char.
fn unescape(s: &str) -> Result<(Cow<'_, str>, &str), AuthFailure> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e)) if !e.is_control() || e == '\t' => value.push(e),
                _ => return Err(AuthFailure::Malformed),
            },
            '"' => return Ok((Cow::Owned(value), &s[i + 1..])),
            c if c.is_control() && c != '\t' => return Err(AuthFailure::Malformed),
            c => value.push(c),
        }
    }
    Err(AuthFailure::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_is_base64_of_user_colon_password() {
        // RFC 7617 §2's example.
        let a = parse_authorization("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==").unwrap();
        assert_eq!(
            a,
            Authorization::Basic {
                user: "Aladdin".into(),
                password: b"open sesame".to_vec()
            }
        );
        // A password may hold colons; the scheme is case-insensitive.
        let a = parse_authorization("basic dTpwOnE=").unwrap();
        assert!(matches!(a, Authorization::Basic { ref password, .. } if password == b"p:q"));
        for bad in ["Basic", "Basic !!!", "Basic dXNlcg=="] {
            assert_eq!(
                parse_authorization(bad),
                Err(AuthFailure::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn digest_reads_quoted_and_bare_values_in_any_order() {
        let v = r#"Digest username="Mufasa", realm="http-auth@example.org",
 uri="/dir/index.html", algorithm=SHA-256,
 nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", nc=00000001,
 cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", qop=auth,
 response="753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
 opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#;
        let v = v.replace('\n', "");
        let Authorization::Digest(d) = parse_authorization(&v).unwrap() else {
            panic!("not digest");
        };
        assert_eq!(d.username, "Mufasa");
        assert_eq!(d.uri, "/dir/index.html");
        assert_eq!(d.algorithm, Algorithm::Sha256);
        assert_eq!(
            d.qop,
            Qop::Auth {
                nc: "00000001".into(),
                cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ".into()
            }
        );
        let Authorization::Digest(d) = parse_authorization(
            r#"Digest username="a\"b", realm=r, nonce=n, uri="rtsp://h/p", response=00"#,
        )
        .unwrap() else {
            panic!("not digest");
        };
        assert_eq!((d.username.as_ref(), d.realm.as_ref()), ("a\"b", "r"));
        assert_eq!((d.algorithm, d.qop), (Algorithm::Md5, Qop::None));
    }

    #[test]
    fn broken_or_unknown_digests_are_refused() {
        let base = r#"username="u", realm="r", nonce="n", uri="u", response="x""#;
        let cases = [
            (
                format!("Digest {base}, algorithm=SHA-512"),
                AuthFailure::UnsupportedAlgorithm,
            ),
            (
                format!("Digest {base}, qop=auth-int"),
                AuthFailure::UnsupportedQop,
            ),
            (format!("Digest {base}, qop=auth"), AuthFailure::Malformed),
            (
                format!("Digest {base}, realm=again"),
                AuthFailure::Malformed,
            ),
            (
                r#"Digest username="u, realm=r"#.to_string(),
                AuthFailure::Malformed,
            ),
            (
                r#"Digest username="u" realm=r"#.to_string(),
                AuthFailure::Malformed,
            ),
            (r#"Digest username"u""#.to_string(), AuthFailure::Malformed),
            ("Digest realm=r".to_string(), AuthFailure::Malformed),
            (
                format!(
                    "Digest {}",
                    (0..17).map(|i| format!("p{i}=v,")).collect::<String>()
                ),
                AuthFailure::Malformed,
            ),
            ("Bearer abc".to_string(), AuthFailure::UnsupportedScheme),
            (String::new(), AuthFailure::UnsupportedScheme),
        ];
        for (text, want) in cases {
            assert_eq!(parse_authorization(&text), Err(want), "{text}");
        }
    }
}
