//! Length-prefixed messages over TCP, shared by the tree protocol's
//! control messages ([`crate::tree::wire`]) and the screen codec's frame
//! messages ([`crate::screen`]).
//!
//! Every message is `u32 length (big-endian) | u8 kind | body`, where the
//! length counts kind and body and never exceeds [`MAX_MESSAGE`]; a
//! reader checks the length with [`body_len`] before allocating. The
//! [`Kind`] byte is one namespace for both users, so a relay can tell a
//! control message from a frame chunk without parsing the body.
//!
//! This module sits below both `tree` and `screen` so that neither has
//! to import the other to frame its messages.

use thiserror::Error;

/// Largest message accepted: a screen chunk is about 64 KiB, so 1 MiB
/// leaves room while refusing a hostile length long before it hurts.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why bytes are not a well-framed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// Input shorter than the field being read.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A length prefix of zero: every message has at least a kind byte.
    #[error("empty message (length 0)")]
    Empty,
    /// A length prefix above [`MAX_MESSAGE`]: a hostile or confused peer.
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Length announced.
        len: usize,
        /// Largest accepted.
        max: usize,
    },
    /// A kind byte no message has.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// A length prefix that does not match the bytes given.
    #[error("length prefix says {announced} bytes, {got} follow it")]
    LengthMismatch {
        /// Length in the prefix.
        announced: usize,
        /// Bytes after the prefix.
        got: usize,
    },
    /// Bytes left over after the last field of a body.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
}

/// Message kinds: the control messages of the tree protocol and the
/// frame messages of the screen codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Peer → coordinator: let me in.
    Join = 1,
    /// Coordinator → peer: your place in the tree.
    Placed = 2,
    /// Peer → coordinator: my parent vanished.
    Orphaned = 3,
    /// Either way: no, and why.
    Refused = 4,
    /// Child → parent: stream to me.
    Attach = 5,
    /// Parent → child: accepted, this is the format.
    Welcome = 6,
    /// Parent → child: the stream has ended.
    End = 7,
    /// Peer → coordinator: attached and welcomed, frames can flow.
    Ready = 8,
    /// Accepting side → newcomer: prove you hold the key.
    Challenge = 9,
    /// A Noise handshake message ([`crate::tree::secure`]).
    Handshake = 10,
    /// A Noise transport record: a piece of an encrypted message
    /// ([`crate::tree::secure`]).
    Sealed = 11,
    /// Screen codec: frame start.
    FrameStart = 16,
    /// Screen codec: a chunk of tiles.
    Tiles = 17,
    /// Screen codec: frame end.
    FrameEnd = 18,
}

impl Kind {
    /// Whether this kind belongs to the screen codec (a frame chunk).
    pub fn is_screen(self) -> bool {
        matches!(self, Kind::FrameStart | Kind::Tiles | Kind::FrameEnd)
    }
}

impl TryFrom<u8> for Kind {
    type Error = Error;
    fn try_from(v: u8) -> Result<Self, Error> {
        Ok(match v {
            1 => Kind::Join,
            2 => Kind::Placed,
            3 => Kind::Orphaned,
            4 => Kind::Refused,
            5 => Kind::Attach,
            6 => Kind::Welcome,
            7 => Kind::End,
            8 => Kind::Ready,
            9 => Kind::Challenge,
            10 => Kind::Handshake,
            11 => Kind::Sealed,
            16 => Kind::FrameStart,
            17 => Kind::Tiles,
            18 => Kind::FrameEnd,
            _ => return Err(Error::UnknownKind(v)),
        })
    }
}

/// Validates the 4-byte length header and returns how many bytes follow.
pub fn body_len(header: [u8; HEADER_LEN]) -> Result<usize, Error> {
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 {
        return Err(Error::Empty);
    }
    if len > MAX_MESSAGE {
        return Err(Error::TooLarge {
            len,
            max: MAX_MESSAGE,
        });
    }
    Ok(len)
}

/// Splits a whole framed message (header included) into kind and body.
pub fn split(msg: &[u8]) -> Result<(Kind, &[u8]), Error> {
    let header: [u8; HEADER_LEN] = msg
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(Error::Truncated {
            needed: HEADER_LEN,
            got: msg.len(),
        })?;
    let len = body_len(header)?;
    if msg.len() != HEADER_LEN + len {
        return Err(Error::LengthMismatch {
            announced: len,
            got: msg.len() - HEADER_LEN,
        });
    }
    Ok((Kind::try_from(msg[HEADER_LEN])?, &msg[HEADER_LEN + 1..]))
}

/// The framed messages laid end to end in `bytes` (as an encrypted
/// message's records are written in one go), up to the first one that is
/// cut short or malformed.
pub fn messages(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let header: [u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
        let end = HEADER_LEN + body_len(header).ok()?;
        let msg = bytes.get(..end)?;
        bytes = &bytes[end..];
        Some(msg)
    })
}

/// Checked big-endian reader over a message body.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(Error::Truncated {
                needed: n,
                got: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Fails unless everything was read.
    pub fn end(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::TrailingBytes(self.buf.len()))
        }
    }
}

/// Builds one framed message.
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Starts a message of `kind`.
    pub fn new(kind: Kind) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[0, 0, 0, 0, kind as u8]);
        Writer { buf }
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a big-endian u16.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a big-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a big-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }

    /// The framed message.
    pub fn finish(mut self) -> Vec<u8> {
        // Writers only produce messages of at most MAX_MESSAGE bytes
        // (screen chunks close at 64 KiB), far below u32::MAX.
        let len = (self.buf.len() - HEADER_LEN) as u32;
        self.buf[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hostile_lengths_are_refused() {
        assert_eq!(
            body_len(u32::MAX.to_be_bytes()),
            Err(Error::TooLarge {
                len: u32::MAX as usize,
                max: MAX_MESSAGE
            })
        );
        assert_eq!(body_len(0u32.to_be_bytes()), Err(Error::Empty));
        assert_eq!(body_len(5u32.to_be_bytes()), Ok(5));
    }

    #[test]
    fn split_checks_length_and_kind() {
        let mut w = Writer::new(Kind::Ready);
        w.u16(7);
        let m = w.finish();
        assert_eq!(split(&m), Ok((Kind::Ready, &[0, 7][..])));
        assert_eq!(
            split(&m[..5]),
            Err(Error::LengthMismatch {
                announced: 3,
                got: 1
            })
        );
        assert_eq!(split(&[0, 0, 0, 1, 99]), Err(Error::UnknownKind(99)));
        assert_eq!(split(&[0, 0]), Err(Error::Truncated { needed: 4, got: 2 }));
    }

    #[test]
    fn reader_reports_what_is_missing_or_left() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.end(), Err(Error::TrailingBytes(1)));
        assert_eq!(r.u32(), Err(Error::Truncated { needed: 4, got: 1 }));
    }

    proptest! {
        #[test]
        fn split_accepts_exactly_well_framed_input(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let ok = bytes.len() >= 5
                && u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize == bytes.len() - 4
                && Kind::try_from(bytes[4]).is_ok();
            prop_assert_eq!(split(&bytes).is_ok(), ok);
        }
    }
}
