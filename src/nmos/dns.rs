//! The unicast DNS-SD browse for registries: UDP queries to
//! `--nmos-dns`, answers read into nagare-proto's `nmos::discovery`,
//! which decides what they mean.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nagare_proto::nmos::Registry;
use nagare_proto::nmos::discovery::{self, Discovery};

/// Rounds of questions (PTR, then SRV and TXT, then A): three suffice;
/// the fourth takes a server that answers in pieces.
const ROUNDS: usize = 4;
/// How long one answer is waited for.
const ANSWER_WAIT: Duration = Duration::from_secs(1);
/// Largest DNS answer read (EDNS0's usual ceiling).
const MAX_ANSWER: usize = 4096;

/// The registries the DNS server `server` names in `domain`, best first.
pub(crate) fn browse(server: SocketAddr, domain: &str) -> Result<Vec<Registry>> {
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(bind).context("binding a socket for DNS-SD")?;
    socket.connect(server)?;
    socket.set_read_timeout(Some(ANSWER_WAIT))?;
    let mut found = Discovery::new(domain);
    let mut id: u16 = (std::process::id() & 0xffff) as u16;
    for _ in 0..ROUNDS {
        let questions = found.queries();
        if questions.is_empty() {
            break;
        }
        for (name, ask) in questions {
            id = id.wrapping_add(1);
            let query = discovery::query(id, &name, ask)?;
            socket
                .send(&query)
                .with_context(|| format!("sending a DNS query to --nmos-dns {server}"))?;
            await_answer(&socket, id, &mut found);
        }
        if found.complete() {
            break;
        }
    }
    Ok(found.registries())
}

/// Reads answers until the one to `id` (others are stale) or the wait
/// runs out.
fn await_answer(socket: &UdpSocket, id: u16, found: &mut Discovery) {
    let deadline = Instant::now() + ANSWER_WAIT;
    let mut buf = vec![0u8; MAX_ANSWER];
    while Instant::now() < deadline {
        let Ok(n) = socket.recv(&mut buf) else {
            return;
        };
        let answer = &buf[..n];
        if answer.len() >= 2 && u16::from_be_bytes([answer[0], answer[1]]) == id {
            // An answer that does not parse tells nothing; the browse
            // goes on with what it has.
            let _ = found.absorb(answer);
            return;
        }
    }
}
