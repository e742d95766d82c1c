//! The DNS-SD browse for registries: UDP queries to `--nmos-dns`
//! (unicast), or to the mDNS group on `--nmos-mdns`'s interface
//! (multicast), answers read into nagare-proto's `nmos::discovery`,
//! which decides what they mean either way.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use nagare_proto::nmos::Registry;
use nagare_proto::nmos::discovery::{self, Discovery};

use crate::net::udp::Interface;

/// mDNS's group and port (RFC 6762).
const MDNS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(224, 0, 0, 251), 5353);
/// How long the answers to one round of mDNS questions are gathered:
/// every responder on the link may answer, each after up to 120 ms
/// (RFC 6762 §6).
const MDNS_WAIT: Duration = Duration::from_millis(500);

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
    ask_in_rounds(
        &mut found,
        |id, query, found| {
            socket
                .send(query)
                .with_context(|| format!("sending a DNS query to --nmos-dns {server}"))?;
            await_answer(&socket, id, found);
            Ok(())
        },
        |_| {},
    )?;
    Ok(found.registries())
}

/// Asks `found`'s questions, round by round, until it has its answers or
/// [`ROUNDS`] have passed: `ask` sends one query (and may read its answer),
/// `after_round` reads what a round's queries brought.
fn ask_in_rounds(
    found: &mut Discovery,
    mut ask: impl FnMut(u16, &[u8], &mut Discovery) -> Result<()>,
    mut after_round: impl FnMut(&mut Discovery),
) -> Result<()> {
    let mut id: u16 = (std::process::id() & 0xffff) as u16;
    for _ in 0..ROUNDS {
        let questions = found.queries();
        if questions.is_empty() {
            break;
        }
        for (name, kind) in questions {
            id = id.wrapping_add(1);
            let query = discovery::query(id, &name, kind)?;
            ask(id, &query, found)?;
        }
        after_round(found);
        if found.complete() {
            break;
        }
    }
    Ok(())
}

/// The registries multicast DNS finds on `interface`
/// (`_nmos-register._tcp.local`), best first. The questions are one-shot
/// queries from an ephemeral port (RFC 6762 §5.1), which every responder
/// answers by unicast to that port (§6.7); all answers within the wait
/// are read, since several responders may answer.
pub(crate) fn browse_mdns(interface: &Interface) -> Result<Vec<Registry>> {
    let ip = interface.ipv4.ok_or_else(|| {
        anyhow!(
            "--nmos-mdns {}: the interface has no IPv4 address to ask from",
            interface.label
        )
    })?;
    let socket = UdpSocket::bind((ip, 0)).context("binding a socket for mDNS")?;
    socket2::SockRef::from(&socket)
        .set_multicast_if_v4(&ip)
        .with_context(|| format!("sending mDNS on --nmos-mdns {}", interface.label))?;
    // RFC 6762 §11: link-local, TTL 255.
    socket.set_multicast_ttl_v4(255)?;
    let mut found = Discovery::new("local");
    ask_in_rounds(
        &mut found,
        |_, query, _| {
            socket
                .send_to(query, MDNS)
                .with_context(|| format!("sending mDNS on --nmos-mdns {}", interface.label))?;
            Ok(())
        },
        |found| gather(&socket, found),
    )?;
    Ok(found.registries())
}

/// Reads every answer for [`MDNS_WAIT`].
fn gather(socket: &UdpSocket, found: &mut Discovery) {
    let deadline = Instant::now() + MDNS_WAIT;
    let mut buf = vec![0u8; MAX_ANSWER];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match socket.recv(&mut buf) {
            // One that does not parse tells nothing.
            Ok(n) => {
                let _ = found.absorb(&buf[..n]);
            }
            Err(_) => return,
        }
    }
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
