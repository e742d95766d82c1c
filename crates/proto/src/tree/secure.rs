//! Encrypted, authenticated tree links (Noise, through the `snow` crate).
//!
//! Admission ([`super::auth`]) proves that a newcomer holds the session
//! key, but on its own leaves the stream readable and forgeable by anyone
//! on the path. So right after the join or attach request, every link
//! runs a Noise `NNpsk0_25519_ChaChaPoly_BLAKE2s` handshake, dialer as
//! initiator:
//!
//! - the pre-shared key is HKDF-SHA256(salt = the link's challenge nonce,
//!   key = session key, info = context || role): fresh for every link,
//!   and useless to anyone without the session key;
//! - both sides' ephemeral X25519 keys (drawn from the seed the driver
//!   hands in with each link) make the transport keys fresh on both ends,
//!   so a recorded link cannot be replayed into another;
//! - the prologue binds the cleartext challenge and request, so tampering
//!   with them (say, a rewritten relay port) fails the handshake.
//!
//! After the handshake each framed message travels as one or more
//! [`Kind::Sealed`] records of at most 65535 bytes (Noise's limit): one
//! flag byte (more / last) and a piece of the message, ChaCha20-Poly1305
//! sealed under an implicit counter. A flipped, replayed, dropped or
//! reordered record fails authentication: the link is dropped with
//! [`Error::Tampered`].
//!
//! [`SecureLink`] is one link's machine (public, for tests and fuzzing);
//! [`Secure`] puts it between a tree machine and its driver: every
//! transmit and link input passes through it, so the machines keep
//! speaking cleartext messages and the driver only moves bytes.

use std::collections::{BTreeMap, VecDeque};

use hkdf::Hkdf;
use sha2::{Digest, Sha256};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use snow::{HandshakeState, TransportState};

use super::Error;
use super::admission::HANDSHAKE_TIMEOUT;
use super::auth::{Nonce, Role, SessionKey};
use super::link::{Close, LinkId, LinkInput, Seed, Transmit};
use super::wire::Control;
use crate::framing::{self, HEADER_LEN, Kind, MAX_MESSAGE, Writer};
use crate::units::Nanos;

/// The Noise protocol every tree link speaks.
pub const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";

/// Largest Noise message (the spec's limit), tag included.
pub const MAX_RECORD: usize = 65535;

/// Bytes of the authentication tag of every record.
const TAG_LEN: usize = 16;

/// Bytes of a message carried in one record: the rest of the record is
/// the tag and the flag byte.
pub const RECORD_PIECE: usize = MAX_RECORD - TAG_LEN - 1;

const PSK_INFO: &[u8] = b"nagare tree v1 noise psk ";
const PROLOGUE: &[u8] = b"nagare tree v1 noise";
const MORE: u8 = 0;
const LAST: u8 = 1;

/// The link's pre-shared key: HKDF-SHA256 over the session key, salted
/// with the link's challenge and bound to what the newcomer asked to be.
fn psk(key: &SessionKey, nonce: &Nonce, role: Role) -> [u8; 32] {
    let hk = Hkdf::<Sha256>::new(Some(nonce), key);
    let mut out = [0u8; 32];
    let info = [PSK_INFO, role_context(role)].concat();
    // Invariant: 32 bytes is far below HKDF-SHA256's 8160-byte limit, the
    // only error expand() has.
    #[allow(clippy::expect_used)]
    hk.expand(&info, &mut out)
        .expect("HKDF-SHA256 expands to 32 bytes");
    out
}

fn role_context(role: Role) -> &'static [u8] {
    match role {
        Role::Join => b"join",
        Role::Attach => b"attach",
    }
}

/// The bytes both sides saw in the clear, in order.
fn prologue(challenge: &[u8], request: &[u8]) -> Vec<u8> {
    [PROLOGUE, challenge, request].concat()
}

/// Ephemeral-key randomness from the driver's seed: SHA-256 in counter
/// mode, so proto stays free of any random source (and tests are
/// repeatable).
struct SeededRandom {
    seed: Seed,
    counter: u64,
}

impl Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        for chunk in dest.chunks_mut(32) {
            let block = Sha256::new()
                .chain_update(self.seed)
                .chain_update(self.counter.to_be_bytes())
                .finalize();
            self.counter += 1;
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

/// snow's own primitives, with the seeded randomness.
struct Resolver(Seed);

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRandom {
            seed: self.0,
            counter: 0,
        }))
    }
    fn resolve_dh(&self, choice: &snow::params::DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &snow::params::HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &snow::params::CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

fn handshake(
    psk: &[u8; 32],
    prologue: &[u8],
    seed: Seed,
    initiator: bool,
) -> Result<HandshakeState, Error> {
    // PATTERN is a Noise name built into snow; were it refused, the
    // handshake fails like any other.
    let params = PATTERN.parse().map_err(|_| Error::Handshake)?;
    let b = snow::Builder::with_resolver(params, Box::new(Resolver(seed)))
        .psk(0, psk)
        .and_then(|b| b.prologue(prologue))
        .map_err(|_| Error::Handshake)?;
    let hs = if initiator {
        b.build_initiator()
    } else {
        b.build_responder()
    };
    hs.map_err(|_| Error::Handshake)
}

fn framed(kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new(kind);
    w.bytes(body);
    w.finish()
}

#[derive(Debug)]
enum State {
    /// Dialer: the first handshake message is out; waiting for the answer.
    Initiating(Box<HandshakeState>),
    /// Acceptor: waiting for the dialer's handshake message.
    Responding(Box<HandshakeState>),
    /// Handshake done: records flow; `partial` holds the pieces of a
    /// message whose last record has not come yet.
    Open {
        transport: Box<TransportState>,
        partial: Vec<u8>,
    },
    /// Failed: nothing more is read or written.
    Broken,
}

/// What one message from the other side amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The handshake message to send back (acceptor); the link is open.
    Reply(Vec<u8>),
    /// The other side's answer completed the handshake (dialer).
    Established,
    /// A whole framed message, decrypted.
    Message(Vec<u8>),
    /// A piece of a longer message; more records follow.
    Partial,
    /// A cleartext refusal, which the acceptor may still send a dialer
    /// in place of its handshake answer.
    Refusal(Vec<u8>),
}

/// One link's secure channel; see the module docs.
#[derive(Debug)]
pub struct SecureLink {
    state: State,
}

impl SecureLink {
    /// The dialer's side, after it sent `request` (its join or attach)
    /// in answer to `challenge` (both framed, as on the wire); also
    /// returns the framed handshake message to send right after it.
    pub fn initiator(
        key: &SessionKey,
        nonce: &Nonce,
        role: Role,
        challenge: &[u8],
        request: &[u8],
        seed: Seed,
    ) -> Result<(SecureLink, Vec<u8>), Error> {
        let psk = psk(key, nonce, role);
        let mut hs = handshake(&psk, &prologue(challenge, request), seed, true)?;
        let mut buf = [0u8; 96];
        let n = hs
            .write_message(&[], &mut buf)
            .map_err(|_| Error::Handshake)?;
        let link = SecureLink {
            state: State::Initiating(Box::new(hs)),
        };
        Ok((link, framed(Kind::Handshake, &buf[..n])))
    }

    /// The acceptor's side, once `request` (framed) answered the
    /// challenge for `nonce` correctly.
    pub fn responder(
        key: &SessionKey,
        nonce: &Nonce,
        role: Role,
        request: &[u8],
        seed: Seed,
    ) -> Result<SecureLink, Error> {
        let psk = psk(key, nonce, role);
        let challenge = Control::Challenge { nonce: *nonce }.to_bytes();
        let hs = handshake(&psk, &prologue(&challenge, request), seed, false)?;
        Ok(SecureLink {
            state: State::Responding(Box::new(hs)),
        })
    }

    /// Whether the handshake is done and messages can be sealed.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Handles one framed message from the other side. Any error leaves
    /// the link broken: the caller drops it.
    pub fn open(&mut self, msg: &[u8]) -> Result<Opened, Error> {
        let result = self.open_inner(msg);
        if result.is_err() {
            self.state = State::Broken;
        }
        result
    }

    fn open_inner(&mut self, msg: &[u8]) -> Result<Opened, Error> {
        let (kind, body) = framing::split(msg)?;
        match (&mut self.state, kind) {
            (State::Initiating(_), Kind::Refused) => Ok(Opened::Refusal(msg.to_vec())),
            (State::Initiating(hs), Kind::Handshake) => {
                let mut scratch = [0u8; 96];
                hs.read_message(body, &mut scratch)
                    .map_err(|_| Error::Handshake)?;
                self.establish()?;
                Ok(Opened::Established)
            }
            (State::Responding(hs), Kind::Handshake) => {
                let mut scratch = [0u8; 96];
                hs.read_message(body, &mut scratch)
                    .map_err(|_| Error::Handshake)?;
                let mut buf = [0u8; 96];
                let n = hs
                    .write_message(&[], &mut buf)
                    .map_err(|_| Error::Handshake)?;
                self.establish()?;
                Ok(Opened::Reply(framed(Kind::Handshake, &buf[..n])))
            }
            (State::Open { transport, partial }, Kind::Sealed) => {
                Self::record(transport, partial, body)
            }
            (State::Broken, _) => Err(Error::Broken),
            (_, kind) => Err(Error::Unencrypted(kind)),
        }
    }

    fn establish(&mut self) -> Result<(), Error> {
        let state = std::mem::replace(&mut self.state, State::Broken);
        let (State::Initiating(hs) | State::Responding(hs)) = state else {
            return Err(Error::Broken);
        };
        let transport = hs.into_transport_mode().map_err(|_| Error::Handshake)?;
        self.state = State::Open {
            transport: Box::new(transport),
            partial: Vec::new(),
        };
        Ok(())
    }

    fn record(
        transport: &mut TransportState,
        partial: &mut Vec<u8>,
        body: &[u8],
    ) -> Result<Opened, Error> {
        if body.len() > MAX_RECORD || body.len() < TAG_LEN + 1 {
            return Err(Error::Tampered);
        }
        let mut plain = vec![0u8; body.len()];
        let n = transport
            .read_message(body, &mut plain)
            .map_err(|_| Error::Tampered)?;
        let (&flag, piece) = plain[..n].split_first().ok_or(Error::Tampered)?;
        if partial.len() + piece.len() > HEADER_LEN + MAX_MESSAGE {
            return Err(Error::SealedTooLarge);
        }
        partial.extend_from_slice(piece);
        match flag {
            MORE => Ok(Opened::Partial),
            LAST => {
                let whole = std::mem::take(partial);
                framing::split(&whole)?;
                Ok(Opened::Message(whole))
            }
            other => Err(Error::RecordFlag(other)),
        }
    }

    /// Seals a framed message into records, framed and concatenated (one
    /// write for the driver).
    pub fn seal(&mut self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let State::Open { transport, .. } = &mut self.state else {
            return Err(Error::Broken);
        };
        let pieces = msg.len().div_ceil(RECORD_PIECE).max(1);
        let mut out = Vec::with_capacity(msg.len() + pieces * (HEADER_LEN + 1 + TAG_LEN + 1));
        let mut plain = Vec::with_capacity(msg.len().min(RECORD_PIECE) + 1);
        let mut chunks = msg.chunks(RECORD_PIECE).peekable();
        while let Some(piece) = chunks.next() {
            plain.clear();
            plain.push(if chunks.peek().is_some() { MORE } else { LAST });
            plain.extend_from_slice(piece);
            // Encrypt straight into the output, after a header to fill in.
            let start = out.len();
            let body = start + HEADER_LEN + 1;
            out.resize(body + plain.len() + TAG_LEN, 0);
            let n = transport
                .write_message(&plain, &mut out[body..])
                .map_err(|_| Error::Broken)?;
            out.truncate(body + n);
            // n ≤ 65535, so the length always fits the prefix.
            out[start..start + HEADER_LEN].copy_from_slice(&((n + 1) as u32).to_be_bytes());
            out[start + HEADER_LEN] = Kind::Sealed as u8;
        }
        Ok(out)
    }
}

/// One link as [`Secure`] sees it.
#[derive(Debug)]
struct Link {
    seed: Seed,
    channel: Option<SecureLink>,
    /// What the machine wanted sent before the handshake finished.
    held: Vec<Transmit>,
    /// When an admitted newcomer's handshake must be done by.
    deadline: Option<Nanos>,
    /// Writes given to the driver and not reported yet, oldest first:
    /// `true` for this layer's own (handshake) writes, whose
    /// [`LinkInput::Sent`] the machine must not see.
    writes: VecDeque<bool>,
}

/// The secure channels of one tree machine: the layer between it and its
/// driver. See the module docs.
#[derive(Debug, Default)]
pub struct Secure {
    links: BTreeMap<LinkId, Link>,
    out: VecDeque<Transmit>,
}

impl Secure {
    /// No links yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes a link input before the machine: handshake messages are
    /// consumed here, records decrypted, the layer's own writes' `Sent`
    /// swallowed. `Err` names a link whose channel failed; the caller
    /// aborts it and treats it as closed.
    pub fn input(&mut self, input: LinkInput) -> Result<Option<LinkInput>, (LinkId, Error)> {
        match input {
            LinkInput::Accepted { link, seed, .. } | LinkInput::Connected { link, seed, .. } => {
                self.links.insert(
                    link,
                    Link {
                        seed,
                        channel: None,
                        held: Vec::new(),
                        deadline: None,
                        writes: VecDeque::new(),
                    },
                );
                Ok(Some(input))
            }
            LinkInput::Received { link, msg } => {
                let Some(l) = self.links.get_mut(&link) else {
                    return Ok(None);
                };
                let Some(channel) = &mut l.channel else {
                    // Challenge and request travel in the clear.
                    return Ok(Some(LinkInput::Received { link, msg }));
                };
                match channel.open(&msg) {
                    Ok(Opened::Message(m)) => Ok(Some(LinkInput::Received {
                        link,
                        msg: m.into(),
                    })),
                    Ok(Opened::Refusal(m)) => Ok(Some(LinkInput::Received {
                        link,
                        msg: m.into(),
                    })),
                    Ok(Opened::Partial) => Ok(None),
                    Ok(Opened::Established) => {
                        self.release(link);
                        Ok(None)
                    }
                    Ok(Opened::Reply(reply)) => {
                        self.own(link, reply);
                        self.release(link);
                        Ok(None)
                    }
                    Err(e) => {
                        self.links.remove(&link);
                        Err((link, e))
                    }
                }
            }
            LinkInput::Sent { link } => {
                let own = self
                    .links
                    .get_mut(&link)
                    .and_then(|l| l.writes.pop_front())
                    .unwrap_or(false);
                Ok((!own).then_some(input))
            }
            LinkInput::Closed { link } => {
                self.links.remove(&link);
                Ok(Some(input))
            }
            LinkInput::ConnectFailed { .. } => Ok(Some(input)),
        }
    }

    /// The dialer sent `request` (already given to [`Secure::push`]) in
    /// answer to `challenge`: the handshake starts.
    pub fn initiate(
        &mut self,
        link: LinkId,
        key: &SessionKey,
        role: Role,
        challenge: &[u8],
        request: &[u8],
    ) -> Result<(), Error> {
        let Some(l) = self.links.get_mut(&link) else {
            return Err(Error::Broken);
        };
        let Ok((Kind::Challenge, body)) = framing::split(challenge) else {
            return Err(Error::Handshake);
        };
        let nonce: Nonce = body.try_into().map_err(|_| Error::Handshake)?;
        let (channel, hello) =
            SecureLink::initiator(key, &nonce, role, challenge, request, l.seed)?;
        l.channel = Some(channel);
        self.own(link, hello);
        Ok(())
    }

    /// The acceptor found `request` a correct answer to `nonce` at `now`:
    /// the link waits (at most [`HANDSHAKE_TIMEOUT`]) for the dialer's
    /// handshake; what the machine sends meanwhile is held.
    pub fn respond(
        &mut self,
        now: Nanos,
        link: LinkId,
        key: &SessionKey,
        nonce: &Nonce,
        role: Role,
        request: &[u8],
    ) -> Result<(), Error> {
        let Some(l) = self.links.get_mut(&link) else {
            return Err(Error::Broken);
        };
        l.channel = Some(SecureLink::responder(key, nonce, role, request, l.seed)?);
        l.deadline = Some(now + HANDSHAKE_TIMEOUT);
        Ok(())
    }

    /// When the earliest admitted newcomer's handshake is due.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.links
            .values()
            .filter(|l| l.channel.as_ref().is_some_and(|c| !c.is_open()))
            .filter_map(|l| l.deadline)
            .min()
    }

    /// Forgets the links whose handshake is overdue at `now` and returns
    /// them: the caller drops them ([`Error::HandshakeTimeout`]).
    pub fn expire(&mut self, now: Nanos) -> Vec<LinkId> {
        let late: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, l)| l.channel.as_ref().is_some_and(|c| !c.is_open()))
            .filter(|(_, l)| l.deadline.is_some_and(|d| d <= now))
            .map(|(&link, _)| link)
            .collect();
        for link in &late {
            self.links.remove(link);
        }
        late
    }

    /// Takes a transmit from the machine: sends are sealed (or held until
    /// the handshake is done), sends to unknown links dropped, closes
    /// passed on in order.
    pub fn push(&mut self, t: Transmit) {
        match t {
            Transmit::Send { link, msg } => {
                let Some(l) = self.links.get_mut(&link) else {
                    // Never write to a link whose channel is unknown.
                    return;
                };
                let sealed = match &mut l.channel {
                    None => msg,
                    Some(c) if !c.is_open() => {
                        l.held.push(Transmit::Send { link, msg });
                        return;
                    }
                    Some(c) => match c.seal(&msg) {
                        Ok(s) => s.into(),
                        Err(_) => {
                            self.links.remove(&link);
                            let how = Close::Abort;
                            self.out.push_back(Transmit::Close { link, how });
                            return;
                        }
                    },
                };
                l.writes.push_back(false);
                self.out.push_back(Transmit::Send { link, msg: sealed });
            }
            Transmit::Close {
                link,
                how: Close::Flush,
            } if self.holds(link) => {
                // After what was held (a refusal, say "the tree is full",
                // goes out sealed once the handshake is done).
                if let Some(l) = self.links.get_mut(&link) {
                    l.held.push(t);
                }
            }
            Transmit::Close { link, .. } => {
                self.links.remove(&link);
                self.out.push_back(t);
            }
            Transmit::Connect { .. } => self.out.push_back(t),
        }
    }

    /// The next transmit for the driver at `now`. Transmits are due as
    /// soon as they are queued; `now` is the verb set's.
    pub fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// Whether `link` has finished its handshake.
    pub fn is_open(&self, link: LinkId) -> bool {
        self.links
            .get(&link)
            .and_then(|l| l.channel.as_ref())
            .is_some_and(SecureLink::is_open)
    }

    /// Whether `link` is in its handshake (what is sent waits).
    fn holds(&self, link: LinkId) -> bool {
        self.links
            .get(&link)
            .and_then(|l| l.channel.as_ref())
            .is_some_and(|c| !c.is_open())
    }

    fn own(&mut self, link: LinkId, msg: Vec<u8>) {
        if let Some(l) = self.links.get_mut(&link) {
            l.writes.push_back(true);
            self.out.push_back(Transmit::Send {
                link,
                msg: msg.into(),
            });
        }
    }

    fn release(&mut self, link: LinkId) {
        let held = self
            .links
            .get_mut(&link)
            .map(|l| std::mem::take(&mut l.held))
            .unwrap_or_default();
        for t in held {
            self.push(t);
        }
    }
}

#[cfg(test)]
mod tests;
