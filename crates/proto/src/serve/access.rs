//! Who may make the server send where: address blocks, the destination
//! allow-list and the API token. How much is [`super::budget`]'s.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use subtle::ConstantTimeEq;

pub use super::cidr::{Cidr, canonical};

use super::Error;
use crate::rtsp::Credentials;

/// Shortest `--token` accepted: shorter ones can be guessed.
pub const MIN_TOKEN_LEN: usize = 8;

impl Cidr {
    /// Parses `--allow` text: `ADDR/PREFIX` or a bare address. An
    /// IPv4-mapped IPv6 block is kept as its IPv4 block.
    pub fn parse(text: &str) -> Result<Cidr, Error> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|_| Error::BadCidr {
            text: text.to_string(),
        })?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| Error::CidrPrefix {
                    text: text.to_string(),
                    max,
                })?,
        };
        Ok(Cidr::from_parts(net, prefix))
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(text: &str) -> Result<Cidr, Error> {
        Cidr::parse(text)
    }
}

/// Destinations a client may name: its own address, always; others only
/// inside `--allow`. So nobody can turn the server on a third party.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    blocks: Vec<Cidr>,
}

impl AllowList {
    /// The `--allow` blocks.
    pub fn new(blocks: Vec<Cidr>) -> AllowList {
        AllowList { blocks }
    }

    /// Whether `client` may have media sent to `destination`.
    pub fn permits(&self, client: IpAddr, destination: IpAddr) -> bool {
        canonical(client) == canonical(destination)
            || self.blocks.iter().any(|b| b.contains(destination))
    }

    /// [`AllowList::permits`] with the refusal that names the blocks.
    pub fn check(&self, client: IpAddr, destination: IpAddr) -> Result<(), Error> {
        if self.permits(client, destination) {
            return Ok(());
        }
        Err(Error::DestinationNotAllowed {
            client,
            destination,
            allowed: self.blocks.clone(),
        })
    }
}

/// The API token; `None` when the API is bound to loopback and no token
/// was given.
#[derive(Clone, Default)]
pub struct Token(Option<Vec<u8>>);

impl fmt::Debug for Token {
    // The secret stays out of logs and panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.0.is_some() { "set" } else { "none" };
        f.debug_tuple("Token").field(&shown).finish()
    }
}

impl Token {
    /// `token` as given; one is required when the API is not bound to
    /// loopback (`http_is_loopback` false).
    pub fn new(token: Option<String>, http_is_loopback: bool) -> Result<Token, Error> {
        match token {
            Some(t) if t.len() < MIN_TOKEN_LEN => Err(Error::TokenTooShort { len: t.len() }),
            // A client's header is trimmed and split at spaces, so such a
            // token could never be matched: refuse it at start.
            Some(t) if !t.bytes().all(|b| b.is_ascii_graphic()) => Err(Error::TokenNotPrintable),
            Some(t) => Ok(Token(Some(t.into_bytes()))),
            None if http_is_loopback => Ok(Token(None)),
            None => Err(Error::TokenNeeded),
        }
    }

    /// The credentials RTSP clients must give, if any: the token as
    /// password, off loopback (`rtsp_is_loopback` false) always, on
    /// loopback when `asked` (`--rtsp-auth`). Without a token where one
    /// is needed, the server must not start.
    pub fn rtsp_credentials(
        &self,
        rtsp_is_loopback: bool,
        asked: bool,
    ) -> Result<Option<Credentials>, Error> {
        match (&self.0, rtsp_is_loopback, asked) {
            (Some(t), false, _) | (Some(t), true, true) => Ok(Some(Credentials::new(t.clone()))),
            (Some(_), true, false) | (None, true, false) => Ok(None),
            (None, false, _) => Err(Error::RtspTokenNeeded),
            (None, true, true) => Err(Error::RtspAuthWithoutToken),
        }
    }

    /// Whether an `Authorization` header value passes: `Bearer TOKEN`,
    /// compared in constant time so the time taken tells nothing about
    /// how much of a guess was right.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(want) = &self.0 else {
            return true;
        };
        let given = authorization
            .and_then(|v| v.trim().strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("");
        bool::from(given.as_bytes().ct_eq(want))
    }
}
