//! Admission by challenge-response, so the session key never crosses the
//! wire: whoever accepts a connection (the source, or a relay parent)
//! first sends a fresh random nonce; the newcomer answers with [`proof`]
//! = HMAC-SHA256(key, nonce || role), checked in constant time by
//! [`proof_matches`] (hmac's `verify_slice`, which compares with the
//! `subtle` crate). A recorded answer is worthless against the next nonce.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of a session key.
pub const KEY_LEN: usize = 16;

/// A session key: peers prove they hold it to join and to attach.
pub type SessionKey = [u8; KEY_LEN];

/// Length of a challenge nonce.
pub const NONCE_LEN: usize = 32;

/// A challenge: random bytes the accepting side never uses twice. The
/// driver draws them (proto has no random source) and hands them in with
/// each accepted link.
pub type Nonce = [u8; NONCE_LEN];

/// Length of a proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;

/// An answer to a challenge.
pub type Proof = [u8; PROOF_LEN];

/// What a proof admits its sender as, so an answer given to join cannot
/// be replayed to attach and the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A peer joining through the coordinator.
    Join,
    /// A child attaching to a relay parent.
    Attach,
}

impl Role {
    fn context(self) -> &'static [u8] {
        match self {
            Role::Join => b"nagare tree v1 join",
            Role::Attach => b"nagare tree v1 attach",
        }
    }
}

fn mac(key: &SessionKey, nonce: &Nonce, role: Role) -> Hmac<Sha256> {
    // Invariant: HMAC takes keys of any length, so this cannot fail.
    #[allow(clippy::expect_used)]
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(nonce);
    mac.update(role.context());
    mac
}

/// The answer to `nonce` from a holder of `key` acting as `role`:
/// HMAC-SHA256(key, nonce || context of role).
pub fn proof(key: &SessionKey, nonce: &Nonce, role: Role) -> Proof {
    mac(key, nonce, role).finalize().into_bytes().into()
}

/// Whether `answer` is the proof for `nonce` and `role` under `key`,
/// compared in time independent of where it differs.
pub fn proof_matches(key: &SessionKey, nonce: &Nonce, role: Role, answer: &Proof) -> bool {
    mac(key, nonce, role).verify_slice(answer).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_key_nonce_and_role() {
        let key = [1; KEY_LEN];
        let nonce = [2; NONCE_LEN];
        let p = proof(&key, &nonce, Role::Join);
        assert!(proof_matches(&key, &nonce, Role::Join, &p));
        // Another key, a replay against a new nonce, or the other role.
        let mut other_key = key;
        other_key[15] ^= 1;
        assert!(!proof_matches(&other_key, &nonce, Role::Join, &p));
        let mut new_nonce = nonce;
        new_nonce[0] ^= 1;
        assert!(!proof_matches(&key, &new_nonce, Role::Join, &p));
        assert!(!proof_matches(&key, &nonce, Role::Attach, &p));
        let mut flipped = p;
        flipped[31] ^= 0x80;
        assert!(!proof_matches(&key, &nonce, Role::Join, &flipped));
    }

    #[test]
    fn proof_is_rfc_2104_hmac_sha256() {
        // The definition of HMAC (RFC 2104) with SHA-256 over nonce || context,
        // checked against the same computation done by hand with sha2.
        use sha2::Digest;
        let key = [0x0b; KEY_LEN];
        let nonce = [0x5a; NONCE_LEN];
        let mut k = [0u8; 64];
        k[..KEY_LEN].copy_from_slice(&key);
        let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
        let inner = Sha256::new()
            .chain_update(&ipad)
            .chain_update(nonce)
            .chain_update(b"nagare tree v1 attach")
            .finalize();
        let outer: [u8; 32] = Sha256::new()
            .chain_update(&opad)
            .chain_update(inner)
            .finalize()
            .into();
        assert_eq!(proof(&key, &nonce, Role::Attach), outer);
    }
}
