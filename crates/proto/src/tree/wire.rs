//! Control messages of the tree protocol (join, placement, repair,
//! attach), framed as [`crate::framing`] describes; the screen codec's
//! frame messages share the framing and live in [`crate::screen`].
//! Admission proofs are in [`super::auth`]. Everything after the
//! challenge and the join or attach request travels encrypted
//! ([`super::secure`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::Error;
use super::auth::{Nonce, Proof};
use crate::framing::{self, Kind, Reader, Writer};
use crate::video::format::{PixelFormat, VideoFormat};

/// Longest refusal reason carried.
pub const MAX_REASON: usize = 512;

/// A peer of the tree, numbered by the coordinator in joining order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

impl PeerId {
    /// The source, root of the tree.
    pub const SOURCE: PeerId = PeerId(0);
}

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == PeerId::SOURCE {
            f.write_str("source")
        } else {
            write!(f, "peer {}", self.0)
        }
    }
}

/// A control message of the tree protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Peer → coordinator: join, proving the key; children reach me on
    /// `relay_port` at the address the coordinator sees me on.
    Join {
        /// Answer to the coordinator's challenge, [`super::Role::Join`].
        proof: Proof,
        /// TCP port of the peer's relay listener.
        relay_port: u16,
    },
    /// Coordinator → peer: attach to `parent` at `parent_addr`.
    Placed {
        /// The peer's own id.
        peer: PeerId,
        /// Breadth-first slot (0 is the source).
        slot: u32,
        /// Hops from the source.
        depth: u32,
        /// The parent.
        parent: PeerId,
        /// Where the parent's relay listens (unspecified for the source:
        /// the peer uses the address it joined on).
        parent_addr: SocketAddr,
    },
    /// Peer → coordinator: my parent vanished.
    Orphaned {
        /// The parent that vanished.
        parent: PeerId,
    },
    /// Refusal with a reason for the user.
    Refused {
        /// Why.
        reason: String,
    },
    /// Child → parent: stream to me; I hold frame `version`.
    Attach {
        /// Answer to the parent's challenge, [`super::Role::Attach`].
        proof: Proof,
        /// The child's id.
        peer: PeerId,
        /// Frame the child holds, so the parent sends only what changed.
        version: Option<u64>,
    },
    /// Parent → child: accepted; frames have this format.
    Welcome {
        /// Format of the screen.
        format: VideoFormat,
    },
    /// Parent → child: no more frames.
    End,
    /// Peer → coordinator: attached and welcomed.
    Ready,
    /// Accepting side → newcomer: answer this with [`super::proof`].
    Challenge {
        /// Fresh random bytes.
        nonce: Nonce,
    },
}

fn pixel_format_code(pf: PixelFormat) -> u8 {
    match pf {
        PixelFormat::Uyvy422 => 0,
        PixelFormat::Uyvp => 1,
        PixelFormat::Rgb24 => 2,
    }
}

fn write_addr(w: &mut Writer, a: SocketAddr) {
    match a.ip() {
        IpAddr::V4(ip) => {
            w.u8(4);
            w.bytes(&ip.octets());
        }
        IpAddr::V6(ip) => {
            w.u8(6);
            w.bytes(&ip.octets());
        }
    }
    w.u16(a.port());
}

fn read_addr(r: &mut Reader<'_>) -> Result<SocketAddr, Error> {
    let ip = match r.u8()? {
        4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
        6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
        family => return Err(Error::AddressFamily(family)),
    };
    Ok(SocketAddr::new(ip, r.u16()?))
}

fn read_welcome(r: &mut Reader<'_>) -> Result<Control, Error> {
    let width = r.u32()?;
    let height = r.u32()?;
    let pixel_format = match r.u8()? {
        0 => PixelFormat::Uyvy422,
        1 => PixelFormat::Uyvp,
        2 => PixelFormat::Rgb24,
        code => return Err(Error::PixelFormatCode(code)),
    };
    let format = VideoFormat::new(width, height, pixel_format).map_err(|_| Error::Format {
        width,
        height,
        pixel_format,
    })?;
    Ok(Control::Welcome { format })
}

impl Control {
    /// The kind byte this message is framed with.
    pub fn kind(&self) -> Kind {
        match self {
            Control::Join { .. } => Kind::Join,
            Control::Placed { .. } => Kind::Placed,
            Control::Orphaned { .. } => Kind::Orphaned,
            Control::Refused { .. } => Kind::Refused,
            Control::Attach { .. } => Kind::Attach,
            Control::Welcome { .. } => Kind::Welcome,
            Control::End => Kind::End,
            Control::Ready => Kind::Ready,
            Control::Challenge { .. } => Kind::Challenge,
        }
    }

    /// The framed bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new(self.kind());
        match self {
            Control::Join { proof, relay_port } => {
                w.bytes(proof);
                w.u16(*relay_port);
            }
            Control::Placed {
                peer,
                slot,
                depth,
                parent,
                parent_addr,
            } => {
                for v in [peer.0, *slot, *depth, parent.0] {
                    w.u32(v);
                }
                write_addr(&mut w, *parent_addr);
            }
            Control::Orphaned { parent } => w.u32(parent.0),
            Control::Refused { reason } => {
                let mut end = reason.len().min(MAX_REASON);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                w.bytes(&reason.as_bytes()[..end]);
            }
            Control::Attach {
                proof,
                peer,
                version,
            } => {
                w.bytes(proof);
                w.u32(peer.0);
                match version {
                    None => w.u8(0),
                    Some(v) => {
                        w.u8(1);
                        w.u64(*v);
                    }
                }
            }
            Control::Welcome { format } => {
                w.u32(format.width);
                w.u32(format.height);
                w.u8(pixel_format_code(format.pixel_format));
            }
            Control::End | Control::Ready => {}
            Control::Challenge { nonce } => w.bytes(nonce),
        }
        w.finish()
    }

    /// Parses a control message body; `None` for the screen codec's kinds.
    pub fn parse(kind: Kind, body: &[u8]) -> Result<Option<Control>, Error> {
        let mut r = Reader::new(body);
        let msg = match kind {
            Kind::Join => Control::Join {
                proof: r.array()?,
                relay_port: r.u16()?,
            },
            Kind::Placed => Control::Placed {
                peer: PeerId(r.u32()?),
                slot: r.u32()?,
                depth: r.u32()?,
                parent: PeerId(r.u32()?),
                parent_addr: read_addr(&mut r)?,
            },
            Kind::Orphaned => Control::Orphaned {
                parent: PeerId(r.u32()?),
            },
            Kind::Refused => {
                let bytes = r.take(body.len().min(MAX_REASON))?;
                let reason = std::str::from_utf8(bytes).map_err(|_| Error::ReasonNotUtf8)?;
                Control::Refused {
                    reason: reason.to_owned(),
                }
            }
            Kind::Attach => Control::Attach {
                proof: r.array()?,
                peer: PeerId(r.u32()?),
                version: match r.u8()? {
                    0 => None,
                    1 => Some(r.u64()?),
                    flag => return Err(Error::VersionFlag(flag)),
                },
            },
            Kind::Welcome => read_welcome(&mut r)?,
            Kind::End => Control::End,
            Kind::Ready => Control::Ready,
            Kind::Challenge => Control::Challenge { nonce: r.array()? },
            Kind::FrameStart | Kind::Tiles | Kind::FrameEnd => return Ok(None),
            // The secure layer's own records never reach the machines.
            Kind::Handshake | Kind::Sealed => return Err(Error::Unexpected(kind)),
        };
        r.end()?;
        Ok(Some(msg))
    }

    /// Parses a whole framed message that must be a control message.
    pub fn parse_framed(msg: &[u8]) -> Result<Control, Error> {
        let (kind, body) = framing::split(msg)?;
        Control::parse(kind, body)?.ok_or(Error::Unexpected(kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::split;
    use crate::tree::auth::{NONCE_LEN, PROOF_LEN};
    use proptest::prelude::*;

    fn round_trip(c: Control) {
        let bytes = c.to_bytes();
        let (kind, body) = split(&bytes).unwrap();
        assert_eq!(Control::parse(kind, body).unwrap(), Some(c.clone()));
        assert_eq!(Control::parse_framed(&bytes), Ok(c));
    }

    #[test]
    fn control_messages_round_trip() {
        let proof = [7; PROOF_LEN];
        round_trip(Control::Join {
            proof,
            relay_port: 4000,
        });
        round_trip(Control::Placed {
            peer: PeerId(3),
            slot: 3,
            depth: 2,
            parent: PeerId(1),
            parent_addr: "127.0.0.1:9".parse().unwrap(),
        });
        round_trip(Control::Placed {
            peer: PeerId(3),
            slot: 3,
            depth: 2,
            parent: PeerId::SOURCE,
            parent_addr: "[::1]:9".parse().unwrap(),
        });
        round_trip(Control::Orphaned { parent: PeerId(9) });
        round_trip(Control::Refused {
            reason: "wrong key".into(),
        });
        round_trip(Control::Attach {
            proof,
            peer: PeerId(2),
            version: Some(77),
        });
        round_trip(Control::Attach {
            proof,
            peer: PeerId(2),
            version: None,
        });
        round_trip(Control::Welcome {
            format: VideoFormat::new(320, 240, PixelFormat::Rgb24).unwrap(),
        });
        round_trip(Control::End);
        round_trip(Control::Ready);
        round_trip(Control::Challenge {
            nonce: [9; NONCE_LEN],
        });
    }

    #[test]
    fn bad_fields_name_what_is_wrong() {
        let mut w = Writer::new(Kind::Welcome);
        w.u32(u32::MAX);
        w.u32(u32::MAX);
        w.u8(2);
        assert!(matches!(
            Control::parse_framed(&w.finish()),
            Err(Error::Format { .. })
        ));
        let mut w = Writer::new(Kind::Welcome);
        w.u32(64);
        w.u32(64);
        w.u8(9);
        assert_eq!(
            Control::parse_framed(&w.finish()),
            Err(Error::PixelFormatCode(9))
        );
        let mut w = Writer::new(Kind::Placed);
        for v in [1, 1, 1, 0] {
            w.u32(v);
        }
        w.u8(5);
        assert_eq!(
            Control::parse_framed(&w.finish()),
            Err(Error::AddressFamily(5))
        );
        let mut w = Writer::new(Kind::Ready);
        w.u8(0);
        assert_eq!(
            Control::parse_framed(&w.finish()),
            Err(Error::Framing(framing::Error::TrailingBytes(1)))
        );
        let screen = crate::screen::ScreenMessage::FrameEnd { number: 1 }.to_bytes();
        assert_eq!(
            Control::parse_framed(&screen),
            Err(Error::Unexpected(Kind::FrameEnd))
        );
    }

    #[test]
    fn long_refusals_are_cut_on_a_char_boundary() {
        let reason = "é".repeat(MAX_REASON);
        let bytes = Control::Refused { reason }.to_bytes();
        let Ok(Control::Refused { reason }) = Control::parse_framed(&bytes) else {
            panic!("refusal does not parse");
        };
        assert_eq!(reason.len(), MAX_REASON);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            if let Ok((kind, body)) = split(&bytes) {
                let _ = Control::parse(kind, body);
            }
        }
    }
}
