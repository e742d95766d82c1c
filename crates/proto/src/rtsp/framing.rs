//! Cutting the client's TCP byte stream into RTSP messages, with limits.
//!
//! rtsp-types parses one message out of a complete buffer and answers
//! `Incomplete` otherwise. It keeps no state between calls, has no size
//! limits, and can only step over an interleaved `$` frame once the whole
//! frame (up to 64 KiB) is in memory. A server facing the network needs
//! more, so this wrapper adds it without writing a second RTSP grammar:
//! - bytes are buffered only up to the header-section and body limits;
//! - the end of the header section is searched incrementally, so input
//!   that arrives a byte at a time costs linear time, not quadratic;
//! - `$ ch len` frames no longer than the body limit (a client's RTCP:
//!   receiver reports of a few dozen bytes) are kept whole until the next
//!   call, so the connection can hand them on; longer ones are discarded
//!   as they stream past, never buffered;
//! - the body length comes from rtsp-types itself: parsing the head alone
//!   stops at `Content-Length` with `Incomplete(n)`, which is that length.

use std::num::NonZeroUsize;

use rtsp_types::{Message, ParseError};

use super::{Error, Limits};

/// What the framer found at the front of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole message of `len` bytes at the front of the buffer; read it
    /// with [`Framer::message`], then drop it with [`Framer::consume`].
    Message {
        /// Bytes of head and body.
        len: usize,
    },
    /// An interleaved binary frame (client RTCP, usually): its payload is
    /// [`Framer::interleaved_payload`] until the next call if it was kept
    /// (no longer than the body limit), else it is being skipped.
    Interleaved {
        /// Its channel.
        channel: u8,
        /// Its payload length.
        len: u16,
    },
}

/// Appends one interleaved frame to `out`: `$`, `channel`, the 16-bit
/// length and the payload gathered from `parts` (an RTP header and its
/// data need not be joined first). The server's way to send media on the
/// RTSP connection (RFC 2326 10.12); [`Framer`] skips such frames when a
/// client sends them. A payload over 65535 bytes cannot be framed and
/// leaves `out` as it was.
pub fn write_interleaved(channel: u8, parts: &[&[u8]], out: &mut Vec<u8>) -> Result<(), Error> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len16 = u16::try_from(len).map_err(|_| Error::InterleavedTooLong { len })?;
    out.reserve(4 + len);
    out.push(b'$');
    out.push(channel);
    out.extend_from_slice(&len16.to_be_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
    Ok(())
}

/// The head of the message being assembled.
#[derive(Debug, Clone, Copy)]
struct Head {
    len: usize,
    body: usize,
}

/// Incremental framer for one connection.
#[derive(Debug)]
pub(crate) struct Framer {
    limits: Limits,
    buf: Vec<u8>,
    // Bytes of interleaved payload still to discard from the stream.
    skip: usize,
    // How far `buf` was searched for the end of the head.
    scanned: usize,
    head: Option<Head>,
    // A whole interleaved frame at the front of `buf` (its length with
    // the 4-byte header), dropped at the next call.
    kept: Option<usize>,
}

const HEAD_END: &[u8] = b"\r\n\r\n";

/// Buffer capacity an idle connection may keep between messages: a
/// server holds tens of thousands of idle connections, so a large
/// request's buffer is given back once it is consumed.
const IDLE_CAPACITY: usize = 512;

impl Framer {
    pub(crate) fn new(limits: Limits) -> Framer {
        Framer {
            limits,
            buf: Vec::new(),
            skip: 0,
            scanned: 0,
            head: None,
            kept: None,
        }
    }

    /// Most bytes the buffer ever holds: a full head and a full body.
    fn capacity(&self) -> usize {
        self.limits
            .header_bytes
            .saturating_add(self.limits.body_bytes)
            .max(4)
    }

    /// Bytes held, for tests of the memory bound.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes what it can of `input`: interleaved payload is discarded,
    /// other bytes are buffered up to the capacity. Returns how many bytes
    /// were taken; call [`Framer::next`] until it yields `None`, then
    /// offer the rest again.
    pub(crate) fn fill(&mut self, input: &[u8]) -> usize {
        if self.skip > 0 {
            let n = self.skip.min(input.len());
            self.skip -= n;
            return n;
        }
        let room = self.capacity().saturating_sub(self.buf.len());
        let n = room.min(input.len());
        self.buf.extend_from_slice(&input[..n]);
        n
    }

    /// The next complete frame, `None` if more bytes are needed, or an
    /// error after which the stream cannot be framed any more.
    pub(crate) fn next(&mut self) -> Result<Option<Frame>, Error> {
        if let Some(n) = self.kept.take() {
            self.drop_front(n);
        }
        if self.skip > 0 {
            return Ok(None);
        }
        if self.head.is_none() {
            // Stray CRLFs between messages are allowed (RFC 2326 15.1).
            let blank = self
                .buf
                .iter()
                .take_while(|b| **b == b'\r' || **b == b'\n')
                .count();
            self.drop_front(blank);
            if self.buf.first() == Some(&b'$') {
                return Ok(self.interleaved());
            }
        }
        let head = match self.head {
            Some(h) => h,
            None => match self.find_head()? {
                Some(h) => h,
                None => return Ok(None),
            },
        };
        let len = head.len + head.body;
        if self.buf.len() < len {
            return Ok(None);
        }
        Ok(Some(Frame::Message { len }))
    }

    /// The message [`Framer::next`] announced.
    pub(crate) fn message(&self) -> &[u8] {
        let len = self.head.map_or(0, |h| h.len + h.body);
        &self.buf[..len.min(self.buf.len())]
    }

    /// Drops the announced message from the buffer.
    pub(crate) fn consume(&mut self) {
        if let Some(h) = self.head.take() {
            self.drop_front(h.len + h.body);
        }
    }

    fn drop_front(&mut self, n: usize) {
        if n > 0 {
            self.buf.drain(..n.min(self.buf.len()));
            self.scanned = self.scanned.saturating_sub(n);
            if self.buf.is_empty() && self.buf.capacity() > IDLE_CAPACITY {
                self.buf = Vec::new();
            }
        }
    }

    /// The payload of the interleaved frame [`Framer::next`] just
    /// announced, if it was short enough to keep.
    pub(crate) fn interleaved_payload(&self) -> Option<&[u8]> {
        self.kept.and_then(|n| self.buf.get(4..n))
    }

    /// `$`, channel, 16-bit length: a frame within the body limit is kept
    /// whole once it is all in (`None` until then); of a longer one, drop
    /// the header and whatever payload is already buffered, and skip the
    /// rest as it arrives.
    fn interleaved(&mut self) -> Option<Frame> {
        let b = self.buf.get(..4)?;
        let channel = b[1];
        let len = u16::from_be_bytes([b[2], b[3]]);
        let whole = 4 + usize::from(len);
        if usize::from(len) <= self.limits.body_bytes && whole <= self.capacity() {
            if self.buf.len() < whole {
                return None;
            }
            self.kept = Some(whole);
            return Some(Frame::Interleaved { channel, len });
        }
        self.drop_front(4);
        let have = usize::from(len).min(self.buf.len());
        self.drop_front(have);
        self.skip = usize::from(len) - have;
        Some(Frame::Interleaved { channel, len })
    }

    /// Searches for the end of the head from where the last search
    /// stopped; checks the limits and reads the body length.
    fn find_head(&mut self) -> Result<Option<Head>, Error> {
        let from = self.scanned.saturating_sub(HEAD_END.len() - 1);
        let found = self.buf[from..]
            .windows(HEAD_END.len())
            .position(|w| w == HEAD_END);
        // A head ended by bare line feeds would never see its CRLF CRLF:
        // answer 400 at once instead of waiting for the size limit.
        let bare = self.buf[from..].windows(2).position(|w| w == b"\n\n");
        if bare.is_some_and(|b| found.is_none_or(|f| b < f)) {
            return Err(Error::Malformed);
        }
        let Some(pos) = found else {
            self.scanned = self.buf.len();
            if self.buf.len() > self.limits.header_bytes {
                return Err(Error::HeaderTooLarge {
                    limit: self.limits.header_bytes,
                });
            }
            return Ok(None);
        };
        let len = from + pos + HEAD_END.len();
        if len > self.limits.header_bytes {
            return Err(Error::HeaderTooLarge {
                limit: self.limits.header_bytes,
            });
        }
        // Request line and final blank line are not headers; folded
        // continuation lines count (an overestimate is harmless).
        let lines = self.buf[..len].windows(2).filter(|w| w == b"\r\n").count();
        let count = lines.saturating_sub(2);
        if count > self.limits.headers {
            return Err(Error::TooManyHeaders {
                count,
                limit: self.limits.headers,
            });
        }
        if conflicting_lengths(&self.buf[..len]) {
            return Err(Error::Malformed);
        }
        let body = body_length(&self.buf[..len])?;
        if body > self.limits.body_bytes {
            return Err(Error::BodyTooLarge {
                length: body,
                limit: self.limits.body_bytes,
            });
        }
        let head = Head { len, body };
        self.head = Some(head);
        Ok(Some(head))
    }
}

/// Whether `head` has Content-Length headers that disagree: where the
/// body ends is then unknown (RFC 7230 §3.3.3 answers 400), while equal
/// duplicates say one thing.
fn conflicting_lengths(head: &[u8]) -> bool {
    let mut seen: Option<&[u8]> = None;
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if !line[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(b"content-length")
        {
            continue;
        }
        let value = line[colon + 1..].trim_ascii();
        match seen {
            Some(v) if v != value => return true,
            _ => seen = Some(value),
        }
    }
    false
}

/// The body length of a message whose head is `head`, read by rtsp-types.
fn body_length(head: &[u8]) -> Result<usize, Error> {
    if let Some(n) = announced_body(head) {
        return Ok(n);
    }
    // rtsp-types checks the URI last, so a request whose only fault is its
    // URI still has a known length: frame it, and let the request handler
    // answer 400 and go on with the next request.
    with_star_uri(head)
        .and_then(|probe| announced_body(&probe))
        .ok_or(Error::Malformed)
}

/// `Some(body length)` if `head` parses as a complete head.
fn announced_body(head: &[u8]) -> Option<usize> {
    match Message::<&[u8]>::parse(head) {
        Ok((_, consumed)) if consumed == head.len() => Some(0),
        // The head is complete, so the only thing still missing is the
        // body that Content-Length announced.
        Err(ParseError::Incomplete(Some(n))) => Some(NonZeroUsize::get(n)),
        _ => None,
    }
}

/// `head` with its request URI replaced by `*`.
pub(crate) fn with_star_uri(head: &[u8]) -> Option<Vec<u8>> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let mut parts = head[..line_end].splitn(3, |b| *b == b' ');
    let (method, _uri, version) = (parts.next()?, parts.next()?, parts.next()?);
    let mut probe = Vec::with_capacity(head.len());
    probe.extend_from_slice(method);
    probe.extend_from_slice(b" * ");
    probe.extend_from_slice(version);
    probe.extend_from_slice(&head[line_end..]);
    Some(probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            header_bytes: 256,
            headers: 8,
            body_bytes: 64,
            pending_responses: 4,
        }
    }

    /// Feeds `input` in pieces of `step` bytes and collects every frame.
    fn frames(input: &[u8], step: usize) -> Result<Vec<(Frame, Vec<u8>)>, Error> {
        let mut f = Framer::new(limits());
        let mut out = Vec::new();
        for chunk in input.chunks(step) {
            let mut rest = chunk;
            loop {
                let n = f.fill(rest);
                rest = &rest[n..];
                while let Some(frame) = f.next()? {
                    let bytes = match frame {
                        Frame::Message { .. } => f.message().to_vec(),
                        Frame::Interleaved { .. } => {
                            f.interleaved_payload().unwrap_or_default().to_vec()
                        }
                    };
                    if let Frame::Message { .. } = frame {
                        f.consume();
                    }
                    out.push((frame, bytes));
                }
                assert!(f.buffered() <= 256 + 64);
                if rest.is_empty() {
                    break;
                }
                assert!(n > 0 || f.skip > 0, "no progress");
            }
        }
        Ok(out)
    }

    const OPTIONS: &[u8] = b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n";

    #[test]
    fn an_idle_framer_gives_a_large_buffer_back() {
        let mut f = Framer::new(Limits::default());
        let big = format!(
            "OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nX: {}\r\n\r\n",
            "a".repeat(4000)
        );
        assert_eq!(f.fill(big.as_bytes()), big.len());
        assert_eq!(f.next(), Ok(Some(Frame::Message { len: big.len() })));
        f.consume();
        assert_eq!((f.buffered(), f.buf.capacity()), (0, 0));
        // A small one keeps its few bytes for the next.
        f.fill(OPTIONS);
        assert!(f.next().unwrap().is_some());
        f.consume();
        assert!(f.buf.capacity() <= IDLE_CAPACITY);
    }

    #[test]
    fn split_and_pipelined_messages_come_out_whole() {
        let body = b"GET_PARAMETER * RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 5\r\n\r\nhello";
        let mut input = b"\r\n".to_vec();
        input.extend_from_slice(OPTIONS);
        input.extend_from_slice(&[b'$', 1, 0, 3, 9, 9, 9]);
        input.extend_from_slice(body);
        for step in [1, 2, 3, 7, 1000] {
            let got = frames(&input, step).unwrap();
            assert_eq!(got.len(), 3, "step {step}");
            assert_eq!(got[0].1, OPTIONS);
            assert_eq!(got[1].0, Frame::Interleaved { channel: 1, len: 3 });
            assert_eq!(got[1].1, [9, 9, 9], "kept whole, step {step}");
            assert_eq!(got[2].1, body);
        }
    }

    #[test]
    fn written_interleaved_frames_parse_back() {
        let mut input = Vec::new();
        write_interleaved(0, &[&[0x80, 96], &[1, 2, 3]], &mut input).unwrap();
        assert_eq!(input, [b'$', 0, 0, 5, 0x80, 96, 1, 2, 3]);
        let full = vec![7u8; 0xffff];
        write_interleaved(3, &[&full], &mut input).unwrap();
        assert_eq!(input[9..13], [b'$', 3, 0xff, 0xff]);
        input.extend_from_slice(OPTIONS);
        for step in [1, 4, 1000] {
            let got = frames(&input, step).unwrap();
            assert_eq!(got.len(), 3, "step {step}");
            assert_eq!(got[0].0, Frame::Interleaved { channel: 0, len: 5 });
            assert_eq!(got[0].1, [0x80, 96, 1, 2, 3]);
            assert_eq!(got[1].1, b"", "a long frame is skipped, not kept");
            assert_eq!(
                got[1].0,
                Frame::Interleaved {
                    channel: 3,
                    len: 0xffff
                }
            );
            assert_eq!(got[2].1, OPTIONS);
        }
    }

    #[test]
    fn interleaved_payload_over_65535_is_refused() {
        let mut out = vec![1, 2];
        let half = vec![0u8; 0x8000];
        assert_eq!(
            write_interleaved(1, &[&half, &half], &mut out),
            Err(Error::InterleavedTooLong { len: 0x10000 })
        );
        assert_eq!(out, [1, 2]);
        assert_eq!(Error::InterleavedTooLong { len: 0x10000 }.status(), 500);
    }

    #[test]
    fn interleaved_payload_is_skipped_without_buffering() {
        let mut input = vec![b'$', 0, 0xff, 0xff];
        input.extend(std::iter::repeat_n(0xaa, 0xffff));
        input.extend_from_slice(OPTIONS);
        let got = frames(&input, 1000).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].1, OPTIONS);
    }

    #[test]
    fn limits_end_the_stream() {
        let big = vec![b'A'; 300];
        assert_eq!(
            frames(&big, 10).unwrap_err(),
            Error::HeaderTooLarge { limit: 256 }
        );
        let many: Vec<u8> = [
            &b"OPTIONS * RTSP/1.0\r\n"[..],
            &b"A: b\r\n".repeat(9),
            b"\r\n",
        ]
        .concat();
        assert_eq!(
            frames(&many, 5).unwrap_err(),
            Error::TooManyHeaders { count: 9, limit: 8 }
        );
        let body = b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 65\r\n\r\n";
        assert_eq!(
            frames(body, 3).unwrap_err(),
            Error::BodyTooLarge {
                length: 65,
                limit: 64
            }
        );
        let huge = b"OPTIONS * RTSP/1.0\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert_eq!(frames(huge, 100).unwrap_err(), Error::Malformed);
        assert_eq!(
            frames(b"\x16\x03\x01 garbage\r\n\r\n", 100).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn a_bad_uri_alone_keeps_the_framing() {
        let input = b"OPTIONS /relative RTSP/1.0\r\nCSeq: 1\r\n\r\n\
            SETUP rel RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 2\r\n\r\nhi\
            OPTIONS * RTSP/1.0\r\nCSeq: 3\r\n\r\n";
        let got = frames(input, 4).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got[1].1.ends_with(b"hi"));
    }

    #[test]
    fn bare_line_feeds_and_conflicting_lengths_are_refused_at_once() {
        assert_eq!(
            frames(b"OPTIONS * RTSP/1.0\nCSeq: 1\n\n", 100).unwrap_err(),
            Error::Malformed
        );
        assert_eq!(
            frames(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\n", 100).unwrap_err(),
            Error::Malformed
        );
        let two = b"GET_PARAMETER * RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 0\r\n\
            Content-Length: 5\r\n\r\nhello";
        assert_eq!(frames(two, 100).unwrap_err(), Error::Malformed);
        // The same length twice says one thing.
        let same = b"GET_PARAMETER * RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 5\r\n\
            content-length:5\r\n\r\nhello";
        assert!(frames(same, 100).is_ok());
    }
}
