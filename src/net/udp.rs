//! UDP sockets for multi-gigabit streams: address parsing, unicast and
//! multicast (any-source and source-specific, IPv4 and IPv6) setup, large
//! buffers, and batched I/O: `sendmsg` with UDP GSO trains or `sendmmsg`,
//! and `recvmmsg` with UDP GRO and the kernel's drop counter.
//!
//! Setup goes through socket2 and nix's safe socket options. The batch
//! calls stay raw libc: nix's `sendmsg` allocates a control buffer per call
//! when it carries a cmsg (every GSO train), its `sendmmsg`/`recvmmsg`
//! need a `MultiHeaders` whose raw pointers would make [`Receiver`] lose
//! `Send`, and this module's public functions hand out `libc::iovec` and
//! `libc::mmsghdr` batches that other drivers fill.

use std::io::{self, IoSliceMut};
use std::mem::{self, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::socket::{setsockopt, sockopt};
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, SockAddr, Socket, Type};

#[allow(
    unused_imports,
    reason = "kept in udp's stable API for subcommands that still resolve interfaces through it"
)]
pub(crate) use super::iface::{Interface, parse_interface};

/// Largest datagram a GSO train or GRO batch carries (the kernel's limit
/// for one UDP super-packet).
pub(crate) const MAX_GSO_BYTES: usize = 65_000;
/// Most segments the kernel accepts in one GSO send.
pub(crate) const MAX_GSO_SEGMENTS: usize = 64;

/// Datagrams per `sendmmsg` call when GSO is off.
const SENDMMSG_BATCH: usize = 64;

/// GSO super-datagrams per `sendmmsg` call: a train longer than one
/// super-datagram (64 KB, 7 packets of 8800 bytes) still leaves in one
/// syscall, after one wake-up.
const GSO_MESSAGES: usize = 4;

/// Most datagrams of `packet_size` bytes one send call carries: what fits
/// in a GSO train, or a `sendmmsg` batch.
pub(crate) fn train_cap(gso: bool, packet_size: usize) -> usize {
    if gso {
        (MAX_GSO_BYTES / packet_size.max(1)).clamp(1, MAX_GSO_SEGMENTS)
    } else {
        SENDMMSG_BATCH
    }
}

/// Most datagrams of `packet_size` bytes one send call carries when a
/// train may span several GSO super-datagrams ([`send_train`] splits it).
pub(crate) fn train_cap_batched(gso: bool, packet_size: usize) -> usize {
    if gso {
        train_cap(gso, packet_size) * GSO_MESSAGES
    } else {
        SENDMMSG_BATCH
    }
}

/// Parses `HOST:PORT` (`127.0.0.1:5004`, `[::1]:5004`, `localhost:5004`).
pub(crate) fn parse_addr(text: &str, what: &str) -> Result<SocketAddr> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = text.to_socket_addrs().map_err(|_| {
        anyhow!(
            "{what} '{text}' does not parse: expected HOST:PORT such as 127.0.0.1:5004, \
             239.10.10.1:5004 or [::1]:5004"
        )
    })?;
    addrs
        .next()
        .ok_or_else(|| anyhow!("{what} '{text}' resolves to no address"))
}

/// Sets an integer socket option on a descriptor known only by its raw
/// number (the `AsRawFd` functions below): nix's `setsockopt` wants an
/// `AsFd`, and borrowing a raw descriptor as one is itself unsafe.
fn set_int_option(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the kernel reads exactly size_of::<c_int>() bytes from the
    // pointer, which points at `value` on this stack frame; a stale
    // descriptor only makes the call fail with EBADF.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            socklen_of::<libc::c_int>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The size of a C type as the socket calls take it; every type passed
/// here is a few hundred bytes at most, which the assert checks when the
/// constant is evaluated.
#[allow(clippy::cast_possible_truncation)] // asserted to fit just above
const fn socklen_of<T>() -> libc::socklen_t {
    assert!(mem::size_of::<T>() <= 4096);
    mem::size_of::<T>() as libc::socklen_t
}

/// Largest socket buffer asked for: the kernel doubles the value into an
/// int, so anything above this would overflow there.
const MAX_BUFFER: usize = 0x3fff_ffff;

/// Asks for a socket buffer of `bytes`, forcing past `net.core.*mem_max`
/// when running as root. Returns a warning when the kernel granted less.
pub(crate) fn size_buffer(sock: &Socket, bytes: usize, receive: bool) -> Option<String> {
    let want = bytes.min(MAX_BUFFER);
    let forced = if receive {
        setsockopt(sock, sockopt::RcvBufForce, &want)
    } else {
        setsockopt(sock, sockopt::SndBufForce, &want)
    }
    .is_ok();
    if !forced {
        let _ = if receive {
            sock.set_recv_buffer_size(want)
        } else {
            sock.set_send_buffer_size(want)
        };
    }
    let got = if receive {
        sock.recv_buffer_size()
    } else {
        sock.send_buffer_size()
    }
    .unwrap_or(0);
    // Linux reports double the requested size (bookkeeping overhead).
    (got < want).then(|| {
        let knob = if receive { "rmem_max" } else { "wmem_max" };
        format!(
            "{} buffer is {} KiB, asked for {} KiB: bursts may be dropped. Run as root, or \
             raise it with: sysctl -w net.core.{knob}={}",
            if receive { "receive" } else { "send" },
            got / 2048,
            want / 1024,
            want
        )
    })
}

/// Buffers of a socket from [`bind_buffered`].
const BUFFER_BYTES: usize = 64 << 20;

/// A UDP socket with big buffers, bound to `addr`.
pub(crate) fn bind_buffered(addr: SocketAddr) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    // A multi-gigabit stream needs big buffers; where the kernel grants
    // less, say so, since the loss it causes would read as the path's.
    for receive in [true, false] {
        if let Some(w) = size_buffer(&s, BUFFER_BYTES, receive) {
            eprintln!("nagare probe: note: {w}");
        }
    }
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}: is the port taken?"))?;
    Ok(s.into())
}

/// The unspecified address of `peer`'s family, port 0.
pub(crate) fn any_for(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap_or(peer),
        SocketAddr::V6(_) => "[::]:0".parse().unwrap_or(peer),
    }
}

/// Options for a sending socket.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendOptions {
    /// Multicast interface.
    pub interface: Option<Interface>,
    /// TTL / hop limit (multicast or unicast).
    pub ttl: Option<u32>,
    /// Send buffer to ask for.
    pub buffer_bytes: usize,
}

/// A connected sending socket and what it supports.
pub(crate) struct Sender {
    sock: Socket,
    /// Whether UDP GSO is available.
    pub gso: bool,
    /// Warnings worth one line each.
    pub notices: Vec<String>,
}

impl Sender {
    /// Opens a socket towards `dest`.
    pub(crate) fn open(dest: SocketAddr, opts: &SendOptions) -> Result<Sender> {
        let sock = Socket::new(Domain::for_address(dest), Type::DGRAM, Some(Protocol::UDP))
            .context("creating a UDP socket")?;
        Sender::open_on(sock, dest, opts)
    }

    /// A sender to `dest` on `sock`, a UDP socket the caller made (and
    /// perhaps bound to a port it must send from).
    pub(crate) fn open_on(sock: Socket, dest: SocketAddr, opts: &SendOptions) -> Result<Sender> {
        let notices = prepare(&sock, dest, opts)?;
        sock.connect(&SockAddr::from(dest))
            .with_context(|| format!("no route to {dest}"))?;
        let gso = gso_available(&sock);
        Ok(Sender { sock, gso, notices })
    }

    /// The local address the socket sends from.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()?.as_socket()
    }

    /// Sends one datagram to the connected peer.
    pub(crate) fn send(&self, datagram: &[u8]) -> io::Result<usize> {
        self.sock.send(datagram)
    }

    /// Sends one train on the connected socket; see [`send_train`].
    pub(crate) fn send_train(
        &self,
        iov: &[libc::iovec],
        parts: usize,
        segment: Option<usize>,
        gso: &mut bool,
        hdrs: &mut Vec<libc::mmsghdr>,
    ) -> io::Result<usize> {
        send_train(
            &self.sock,
            iov,
            parts,
            segment,
            gso,
            hdrs,
            None,
            "nagare send",
        )
    }
}

/// Sets `sock` up to send to `dest` as `opts` say: the multicast
/// interface, TTL and loop, or the unicast TTL, and the send buffer.
/// Returns warnings worth one line each.
fn prepare(sock: &Socket, dest: SocketAddr, opts: &SendOptions) -> Result<Vec<String>> {
    let mut notices = Vec::new();
    if dest.ip().is_multicast() {
        match (dest.ip(), &opts.interface) {
            (IpAddr::V4(_), Some(i)) => {
                let r = match i.ipv4 {
                    Some(a) => sock.set_multicast_if_v4(&a),
                    None => set_multicast_if_index_v4(sock, i.index),
                };
                r.with_context(|| format!("using interface {} for multicast", i.label))?;
            }
            (IpAddr::V6(_), Some(i)) => sock
                .set_multicast_if_v6(i.index)
                .with_context(|| format!("using interface {} for multicast", i.label))?,
            (_, None) => notices.push(
                "multicast without --interface follows the default route; pin it with \
                 --interface"
                    .into(),
            ),
        }
        let ttl = opts.ttl.unwrap_or(1);
        if dest.is_ipv4() {
            sock.set_multicast_ttl_v4(ttl)
                .context("setting multicast TTL")?;
            sock.set_multicast_loop_v4(true)
                .context("enabling multicast loop")?;
        } else {
            sock.set_multicast_hops_v6(ttl)
                .context("setting multicast hops")?;
            sock.set_multicast_loop_v6(true)
                .context("enabling multicast loop")?;
        }
    } else if let Some(ttl) = opts.ttl {
        if dest.is_ipv4() {
            sock.set_ttl(ttl).context("setting TTL")?;
        } else {
            sock.set_unicast_hops_v6(ttl).context("setting hop limit")?;
        }
    }
    if opts.buffer_bytes > 0
        && let Some(w) = size_buffer(sock, opts.buffer_bytes, false)
    {
        notices.push(w);
    }
    Ok(notices)
}

/// An unconnected UDP socket on an ephemeral port that sends to `dest`
/// as `opts` say and takes answers from anyone (RTCP: receiver reports
/// come from each receiver's own address).
pub(crate) fn open_unconnected(dest: SocketAddr, opts: &SendOptions) -> Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(dest), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    prepare(&sock, dest, opts)?;
    sock.bind(&SockAddr::from(any_for(dest)))
        .with_context(|| format!("binding a socket to send to {dest}"))?;
    Ok(sock.into())
}

/// Sends one train of datagrams, each `parts` iovecs of `iov`, to `dest`
/// or the connected peer: as one GSO send when `*gso` is on and the
/// caller gives the common `segment` size, else with `sendmmsg`. Where
/// the kernel refuses GSO (no support, or a path MTU below the segment)
/// it prints a one-line note as `who`, turns `*gso` off for later trains
/// and sends this one with `sendmmsg`. Returns how many datagrams left.
#[allow(clippy::too_many_arguments)] // one call's worth of borrowed state
pub(crate) fn send_train(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    parts: usize,
    segment: Option<usize>,
    gso: &mut bool,
    hdrs: &mut Vec<libc::mmsghdr>,
    dest: Option<&SockAddr>,
    who: &str,
) -> io::Result<usize> {
    let count = iov.len().div_ceil(parts.max(1));
    let per_message = train_cap(true, segment.unwrap_or(1));
    match segment {
        Some(seg) if *gso && count > per_message => {
            match send_gso_batch(sock, iov, parts, seg, hdrs, dest) {
                Err(e) if gso_refused(&e) => {
                    eprintln!("{who}: note: UDP GSO failed ({e}); sending packet by packet");
                    *gso = false;
                    send_many(sock, iov, parts, hdrs, dest)
                }
                other => other,
            }
        }
        Some(seg) if *gso => match send_gso(sock, iov, seg, dest) {
            Ok(_) => Ok(count),
            Err(e) if gso_refused(&e) => {
                eprintln!("{who}: note: UDP GSO failed ({e}); sending packet by packet");
                *gso = false;
                send_many(sock, iov, parts, hdrs, dest)
            }
            Err(e) => Err(e),
        },
        _ => send_many(sock, iov, parts, hdrs, dest),
    }
}

/// Whether a GSO send failed because the kernel or path refuses GSO (then
/// sending packet by packet works).
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT)
    )
}

/// An iovec over `b` for the send calls here, which only read through it
/// (the C struct wants a *mut).
pub(crate) fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}

/// Whether the kernel supports UDP GSO on `sock`: setting a segment size
/// on the socket fails where it lacks it. Leaves the socket's default
/// segment size at 0 (trains name theirs per call).
pub(crate) fn gso_available(sock: &impl AsRawFd) -> bool {
    set_int_option(sock, libc::SOL_UDP, libc::UDP_SEGMENT, 1400).is_ok()
        && set_int_option(sock, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok()
}

/// Points `msg` at `dest` (for an unconnected socket); `None` leaves the
/// name empty, which a connected socket needs.
fn set_name(msg: &mut libc::msghdr, dest: Option<&SockAddr>) {
    if let Some(d) = dest {
        // The kernel only reads the name; the cast to *mut is what the
        // C struct asks for.
        msg.msg_name = d.as_ptr().cast_mut().cast();
        msg.msg_namelen = d.len();
    }
}

/// Sends one GSO train on `sock`, to `dest` or the connected peer: `iov`
/// holds the gathered bytes of the train's datagrams, each `segment`
/// bytes long except possibly the last. The kernel splits it; one
/// syscall and one trip down the stack for the whole train.
pub(crate) fn send_gso(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    segment: usize,
    dest: Option<&SockAddr>,
) -> io::Result<usize> {
    let segment = u16::try_from(segment).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("GSO segment of {segment} bytes is above a UDP datagram's 65535"),
        )
    })?;
    let mut cmsg = [0u64; 4]; // aligned room for one cmsghdr + u16
    let msg = gso_msghdr(iov, segment, &mut cmsg, dest);
    // SAFETY: msg points at the caller's iovecs, our control data and the
    // optional name, all borrowed for the duration of the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A message header for one GSO super-datagram of `iov` cut into
/// `segment`-byte datagrams, its UDP_SEGMENT control message in `cmsg`.
/// The header points into `iov`, `cmsg` and `dest`: use it while they are
/// borrowed.
fn gso_msghdr(
    iov: &[libc::iovec],
    segment: u16,
    cmsg: &mut [u64; 4],
    dest: Option<&SockAddr>,
) -> libc::msghdr {
    let mut msg = zeroed_msghdr();
    set_name(&mut msg, dest);
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_LEN are size computations. msg_control
    // points at `cmsg`, 32 bytes borrowed from the caller and at least
    // CMSG_SPACE(2) = 24 long, so CMSG_FIRSTHDR returns a header inside it
    // and CMSG_DATA leaves room for the u16 written unaligned.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(SEGMENT_LEN) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(SEGMENT_LEN) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment);
    }
    msg
}

/// Sends a train longer than one GSO super-datagram as several, up to
/// [`GSO_MESSAGES`] per `sendmmsg`: datagram `k` is the iovecs
/// `iov[parts * k .. parts * (k + 1)]`, every one `segment` bytes but the
/// last. Returns how many datagrams were sent (an error only when none).
fn send_gso_batch(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    parts: usize,
    segment: usize,
    hdrs: &mut Vec<libc::mmsghdr>,
    dest: Option<&SockAddr>,
) -> io::Result<usize> {
    let seg = u16::try_from(segment).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("GSO segment of {segment} bytes is above a UDP datagram's 65535"),
        )
    })?;
    let per = train_cap(true, segment) * parts.max(1);
    let mut cmsgs = [[0u64; 4]; GSO_MESSAGES];
    let mut sent = 0;
    for group in iov.chunks(per * GSO_MESSAGES) {
        hdrs.clear();
        let mut datagrams = [0usize; GSO_MESSAGES];
        for ((chunk, cmsg), count) in group.chunks(per).zip(cmsgs.iter_mut()).zip(&mut datagrams) {
            *count = chunk.len().div_ceil(parts.max(1));
            hdrs.push(libc::mmsghdr {
                msg_hdr: gso_msghdr(chunk, seg, cmsg, dest),
                msg_len: 0,
            });
        }
        let mut done = 0;
        while done < hdrs.len() {
            let left = &mut hdrs[done..];
            // SAFETY: `left` holds at most GSO_MESSAGES mmsghdrs, each
            // pointing at iovecs, control data (`cmsgs`) and a name
            // borrowed for the duration of the call.
            let n =
                unsafe { libc::sendmmsg(sock.as_raw_fd(), left.as_mut_ptr(), left.len() as _, 0) };
            match usize::try_from(n) {
                Ok(0) => return Ok(sent),
                Ok(n) => {
                    sent += datagrams[done..(done + n).min(GSO_MESSAGES)]
                        .iter()
                        .sum::<usize>();
                    done += n;
                }
                Err(_) if sent > 0 => return Ok(sent),
                Err(_) => return Err(io::Error::last_os_error()),
            }
        }
    }
    Ok(sent)
}

/// The size of UDP_SEGMENT's value, a u16.
const SEGMENT_LEN: libc::c_uint = socklen_of::<u16>();

/// Sends datagrams with `sendmmsg` on `sock`, to `dest` or the connected
/// peer: datagram `k` is the iovecs `iov[parts * k .. parts * (k + 1)]`.
/// Returns how many were sent (an error only when none were).
pub(crate) fn send_many(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    parts: usize,
    hdrs: &mut Vec<libc::mmsghdr>,
    dest: Option<&SockAddr>,
) -> io::Result<usize> {
    hdrs.clear();
    for chunk in iov.chunks(parts) {
        let mut msg = zeroed_msghdr();
        set_name(&mut msg, dest);
        msg.msg_iov = chunk.as_ptr().cast_mut();
        msg.msg_iovlen = chunk.len() as _;
        hdrs.push(libc::mmsghdr {
            msg_hdr: msg,
            msg_len: 0,
        });
    }
    let mut done = 0;
    while done < hdrs.len() {
        let left = &mut hdrs[done..];
        // A batch longer than u32 goes out over several calls.
        let count = u32::try_from(left.len()).unwrap_or(u32::MAX);
        // SAFETY: `left` holds `count` or more mmsghdrs, each pointing at
        // iovecs (and a name) borrowed for the duration of the call.
        let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), left.as_mut_ptr(), count, 0) };
        match usize::try_from(n) {
            // Nothing taken (never seen from a blocking socket): report
            // what went rather than spin.
            Ok(0) => return Ok(done),
            Ok(n) => done += n,
            Err(_) if done > 0 => return Ok(done),
            Err(_) => return Err(io::Error::last_os_error()),
        }
    }
    Ok(done)
}

/// An empty message header. Built zeroed because libc's msghdr has
/// private padding fields on some targets (musl), so no literal compiles
/// everywhere.
fn zeroed_msghdr() -> libc::msghdr {
    // SAFETY: msghdr is plain data (integers and raw pointers); all-zero
    // is a valid empty header.
    unsafe { MaybeUninit::<libc::msghdr>::zeroed().assume_init() }
}

/// Socket options socket2 lacks, declared with nix's `sockopt_impl!`,
/// which writes the setsockopt call (and its pointer and length) for a
/// plain C struct.
mod options {
    use nix::{setsockopt_impl, sockopt_impl};

    sockopt_impl!(
        /// IP_MULTICAST_IF by interface index (socket2 takes an address).
        MulticastIfV4,
        SetOnly,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_IF,
        libc::ip_mreqn
    );
    sockopt_impl!(
        /// MCAST_JOIN_SOURCE_GROUP, for IPv6 source-specific multicast
        /// (socket2 only joins IPv4 sources).
        JoinSourceGroup,
        SetOnly,
        libc::IPPROTO_IPV6,
        libc::MCAST_JOIN_SOURCE_GROUP,
        libc::group_source_req
    );
}

fn set_multicast_if_index_v4(sock: &Socket, index: u32) -> io::Result<()> {
    let mreqn = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: libc::c_int::try_from(index)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?,
    };
    Ok(setsockopt(sock, options::MulticastIfV4, &mreqn)?)
}

/// Options for a receiving socket.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReceiveOptions {
    /// Multicast interface to join on.
    pub interface: Option<Interface>,
    /// Source for source-specific multicast.
    pub source: Option<IpAddr>,
    /// Receive buffer to ask for.
    pub buffer_bytes: usize,
}

/// A bound receiving socket with batch buffers.
pub(crate) struct Receiver {
    sock: Socket,
    /// Whether UDP GRO is on (datagrams may arrive coalesced).
    pub gro: bool,
    /// Warnings worth one line each.
    pub notices: Vec<String>,
    bufs: Vec<Vec<u8>>,
    ctrl: Vec<Control>,
    names: Vec<libc::sockaddr_storage>,
    /// Kernel's cumulative count of datagrams dropped for lack of buffer.
    pub kernel_drops: u32,
    /// Whether the kernel stamps each datagram's arrival (SO_TIMESTAMPNS).
    stamps: bool,
    /// How long [`Receiver::recv_batch`] waits for a first datagram.
    wait: Duration,
    /// When the last datagram was read: while a stream flows, the
    /// thread reads on a timer instead of sleeping on the socket.
    last_data: Option<Instant>,
    /// Whether to read on a timer while a stream flows
    /// ([`Receiver::read_on_a_timer`]).
    timer: bool,
}

/// While a stream flows, a receive thread reads every `POLL_EVERY`
/// instead of sleeping on the socket. A thread asleep on the socket is
/// woken by the sending CPU for nearly every datagram (one read per GSO
/// train was measured), and on a VM each wake-up is an inter-processor
/// interrupt sent from inside the sender's `sendmsg`, which the
/// hypervisor sometimes holds for a millisecond (a 1.18 ms NET_RX
/// softirq on the pacer's CPU was traced). 200 µs of a 2.5 Gbit/s
/// stream is 62 KB, far inside the receive buffer, and the kernel's
/// receive stamps, not the read times, are what analysis uses.
pub(crate) const POLL_EVERY: Duration = Duration::from_micros(200);

/// A stream counts as flowing this long after its last datagram; then
/// the thread sleeps on the socket again, so a waiting receiver costs
/// nothing.
const FLOW_GAP: Duration = Duration::from_millis(20);

/// Aligned room for the control messages of one datagram: GRO segment
/// size, drop counter and a receive timestamp (24 + 24 + 32 bytes); a
/// smaller buffer would truncate them (MSG_CTRUNC) and lose the stamp.
type Control = [u64; 12];

/// Datagrams (or GRO batches) taken per receive call.
const RECV_BATCH: libc::c_uint = 32;
/// [`RECV_BATCH`] as a count of buffers.
pub(crate) const RECV_SLOTS: usize = RECV_BATCH as usize;

/// Index of the drop counter in SO_MEMINFO's array (SK_MEMINFO_DROPS).
const SK_MEMINFO_DROPS: usize = 8;

/// One datagram (or GRO batch of equal-sized datagrams) from a batch.
pub(crate) struct Datagram<'a> {
    /// The bytes received.
    pub bytes: &'a [u8],
    /// Segment size when GRO coalesced several datagrams, else `bytes.len()`.
    pub segment: usize,
    /// Sender address.
    pub from: Option<SocketAddr>,
    /// When it arrived: the kernel's receive stamp where
    /// [`Receiver::enable_timestamps`] succeeded, else when the batch was
    /// read. Every segment of a GRO batch shares it.
    pub at: Instant,
    /// The same moment on the system clock (the kernel's stamp itself
    /// when there is one): what ST 2110 analysis measures frame
    /// boundaries against.
    pub wall: SystemTime,
}

/// What one [`Receiver::recv_into`] brought.
pub(crate) struct Read {
    /// Bytes written across the slices.
    pub len: usize,
    /// Segment size when GRO coalesced several datagrams, else `len`.
    pub segment: usize,
    /// Sender address.
    pub from: Option<SocketAddr>,
    /// When it arrived (see [`Datagram::at`]).
    pub at: Instant,
}

impl Datagram<'_> {
    /// The individual datagrams (splits a GRO batch).
    pub(crate) fn segments(&self) -> impl Iterator<Item = &[u8]> {
        // A zero-length datagram is one (empty) datagram, not none, so
        // the machine counts it as malformed.
        let empty = self.bytes.is_empty().then_some(self.bytes);
        self.bytes.chunks(self.segment.max(1)).chain(empty)
    }
}

/// A socket on multicast group `at` that takes what is sent to the group
/// (joined as `opts` say) and sends to it on the same interface with
/// `ttl`: a receiver's RTCP, whose reports go to the session's group
/// (RFC 3550 §6). Loop is on, so other receivers on this host hear them.
pub(crate) fn open_group(at: SocketAddr, opts: &ReceiveOptions, ttl: u32) -> Result<UdpSocket> {
    let opts = ReceiveOptions {
        buffer_bytes: 0,
        ..opts.clone()
    };
    let (sock, _) = bind_joined(at, &opts)?;
    let send = SendOptions {
        interface: opts.interface.clone(),
        ttl: Some(ttl),
        buffer_bytes: 0,
    };
    prepare(&sock, at, &send)?;
    Ok(sock.into())
}

/// A socket bound on `listen`, joined to it when it is a multicast group;
/// with notices worth one line each.
fn bind_joined(listen: SocketAddr, opts: &ReceiveOptions) -> Result<(Socket, Vec<String>)> {
    let sock = Socket::new(
        Domain::for_address(listen),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .context("creating a UDP socket")?;
    let group = listen.ip();
    let mut notices = Vec::new();
    if group.is_multicast() {
        // Several receivers of one group on a host share the port.
        sock.set_reuse_address(true)
            .context("setting SO_REUSEADDR")?;
        if listen.is_ipv6() {
            sock.set_only_v6(true).ok();
        }
    }
    let bind_addr = if group.is_multicast() && listen.is_ipv6() {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), listen.port())
    } else {
        listen
    };
    sock.bind(&SockAddr::from(bind_addr)).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            anyhow!(
                "port {} on {} is in use: pick another port, or stop the program using it \
                     (ss -ulpn | grep {})",
                listen.port(),
                bind_addr.ip(),
                listen.port()
            )
        } else if e.kind() == io::ErrorKind::AddrNotAvailable {
            anyhow!("cannot listen on {listen}: the address is not on this machine")
        } else {
            anyhow!("cannot listen on {listen}: {e}")
        }
    })?;
    if group.is_multicast() {
        join(&sock, group, opts).map_err(|e| {
            anyhow!(
                "joining multicast group {group}{} on interface {} failed: {e}; check the \
                     interface has multicast enabled (ip link set DEV multicast on) and a route \
                     for the group",
                opts.source
                    .map(|s| format!(" from source {s}"))
                    .unwrap_or_default(),
                opts.interface
                    .as_ref()
                    .map_or("(default route)".to_string(), |i| i.label.clone())
            )
        })?;
        if opts.interface.is_none() {
            notices.push(
                "joined the group on the default-route interface; pin it with --interface".into(),
            );
        }
    }
    Ok((sock, notices))
}

impl Receiver {
    /// Binds `listen` (joining it when it is a multicast group).
    pub(crate) fn open(listen: SocketAddr, opts: &ReceiveOptions) -> Result<Receiver> {
        let (sock, mut notices) = bind_joined(listen, opts)?;
        if opts.buffer_bytes > 0
            && let Some(w) = size_buffer(&sock, opts.buffer_bytes, true)
        {
            notices.push(w);
        }
        Receiver::from_socket(sock, notices)
    }

    /// Wraps an already-bound socket (buffers sized and groups joined by
    /// the caller): turns on the drop counter and GRO, and a 100 ms
    /// receive timeout. The socket may be a duplicate of one the caller
    /// keeps sending on; the options apply to the shared socket.
    pub(crate) fn from_socket(sock: Socket, notices: Vec<String>) -> Result<Receiver> {
        // Without the drop counter, only kernel_drops stays at zero.
        let _ = setsockopt(&sock, sockopt::RxqOvfl, &1);
        let gro = setsockopt(&sock, sockopt::UdpGroSegment, &true).is_ok();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .context("setting the receive timeout")?;
        let size = if gro { 65_536 } else { 9_216 };
        Ok(Receiver {
            sock,
            gro,
            notices,
            bufs: (0..RECV_SLOTS).map(|_| vec![0u8; size]).collect(),
            ctrl: vec![[0u64; 12]; RECV_SLOTS],
            names: vec![blank_name(); RECV_SLOTS],
            kernel_drops: 0,
            stamps: false,
            wait: Duration::from_millis(100),
            last_data: None,
            timer: false,
        })
    }

    /// Asks the kernel to stamp each datagram's arrival (SO_TIMESTAMPNS),
    /// so receive times do not include how long this thread took to get
    /// to the datagram. Returns whether it is on.
    pub(crate) fn enable_timestamps(&mut self) -> bool {
        self.stamps = setsockopt(&self.sock, sockopt::ReceiveTimestampns, &true).is_ok();
        self.stamps
    }

    /// Turns UDP GRO off, so every datagram comes with its own receive
    /// stamp (a GRO batch shares one, which would read as a burst).
    pub(crate) fn disable_gro(&mut self) {
        if self.gro && setsockopt(&self.sock, sockopt::UdpGroSegment, &false).is_ok() {
            self.gro = false;
        }
    }

    /// Sets how long [`Receiver::recv_batch`] waits for the first datagram
    /// (at least 1 µs: zero would mean forever).
    pub(crate) fn set_wait(&mut self, wait: Duration) -> io::Result<()> {
        self.wait = wait.max(Duration::from_micros(1));
        self.sock.set_read_timeout(Some(self.wait))
    }

    /// Reads on a timer of [`POLL_EVERY`] while a stream flows, instead
    /// of sleeping on the socket. Only for a socket whose receive buffer
    /// holds many times `POLL_EVERY` of its stream (recv sizes its
    /// buffers to frames): a small buffer overflows while the thread
    /// sleeps (loadtest's 208 KiB default did at 3 Gbit/s).
    pub(crate) fn read_on_a_timer(&mut self) {
        self.timer = true;
    }

    /// Whether this socket reads on a timer now: it was asked to, and a
    /// datagram came within the flow gap.
    pub(crate) fn flowing(&self) -> bool {
        self.timer && self.last_data.is_some_and(|t| t.elapsed() < FLOW_GAP)
    }

    /// Waits up to `wait` for a datagram, to the microsecond (the socket
    /// timeout of [`Receiver::set_wait`] is rounded up to the kernel's
    /// tick); see [`super::wait`].
    pub(crate) fn readable_within(&self, wait: Duration) -> io::Result<bool> {
        super::wait::readable_within(&self.sock, wait)
    }

    /// Sends one datagram from this socket, to `to` or the connected peer
    /// (a reply leaves from the address the request came to).
    pub(crate) fn send_to(&self, buf: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
        match to {
            Some(a) => self.sock.send_to(buf, &SockAddr::from(a)),
            None => self.sock.send(buf),
        }
    }

    /// The kernel's drop counter of this socket now (SO_MEMINFO), which,
    /// unlike the per-datagram SO_RXQ_OVFL value, also counts drops after
    /// the last datagram read. `None` where the kernel lacks it.
    pub(crate) fn drops_now(&self) -> Option<u32> {
        // Room for more SK_MEMINFO_* values than any kernel has; the
        // kernel writes what it has and says how much in `len`. (nix's
        // getsockopt for a struct panics when the kernel writes less.)
        let mut info = [0u32; 16];
        let mut len = socklen_of::<[u32; 16]>();
        // SAFETY: `info` is `len` writable bytes and the kernel writes at
        // most `len` bytes into it, then stores the count in `len`.
        let rc = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let have = usize::try_from(len).unwrap_or(0) / mem::size_of::<u32>();
        (rc == 0 && have > SK_MEMINFO_DROPS).then(|| info[SK_MEMINFO_DROPS])
    }

    /// The bound address (with the port chosen when 0 was asked for).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()?.as_socket()
    }

    /// Waits up to the wait ([`Receiver::set_wait`], 100 ms unless set)
    /// for datagrams and hands each to `each`: on a timer of
    /// [`POLL_EVERY`] while a stream flows (where asked to, see
    /// [`Receiver::read_on_a_timer`]), asleep on the socket otherwise. Returns the number of messages read (0 on timeout).
    pub(crate) fn recv_batch(&mut self, mut each: impl FnMut(Datagram<'_>)) -> io::Result<usize> {
        let start = Instant::now();
        loop {
            let flowing = self.flowing();
            let flags = if flowing {
                libc::MSG_DONTWAIT
            } else {
                libc::MSG_WAITFORONE
            };
            let n = self.read(flags, &mut each)?;
            let waited = start.elapsed();
            if n > 0 || !flowing || waited >= self.wait {
                return Ok(n);
            }
            std::thread::sleep(POLL_EVERY.min(self.wait - waited));
        }
    }

    /// Hands each datagram the socket holds now to `each`, without
    /// waiting; the number of messages read (0 when none).
    pub(crate) fn recv_ready(&mut self, mut each: impl FnMut(Datagram<'_>)) -> io::Result<usize> {
        self.read(libc::MSG_DONTWAIT, &mut each)
    }

    /// One `recvmsg` of one datagram (or GRO batch) into `slices`, filled
    /// in order, without waiting: for a caller that aims the bytes where
    /// they belong (see nagare-proto's `video::landing`). `None` when
    /// nothing is waiting.
    pub(crate) fn recv_into(&mut self, slices: &mut [IoSliceMut<'_>]) -> io::Result<Option<Read>> {
        let mut msg = zeroed_msghdr();
        // IoSliceMut is ABI-compatible with iovec on Unix.
        msg.msg_iov = slices.as_mut_ptr().cast();
        msg.msg_iovlen = slices.len() as _;
        msg.msg_control = self.ctrl[0].as_mut_ptr().cast();
        msg.msg_controllen = mem::size_of::<Control>() as _;
        msg.msg_name = (&raw mut self.names[0]).cast();
        msg.msg_namelen = socklen_of::<libc::sockaddr_storage>();
        // SAFETY: `msg` points at `slices` (each a live, writable buffer
        // borrowed for the call), a control buffer and a name owned by
        // self; MSG_DONTWAIT returns at once.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        let Ok(len) = usize::try_from(n) else {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        };
        let (mono_now, wall_now) = (Instant::now(), SystemTime::now());
        self.last_data = Some(mono_now);
        let meta = read_cmsgs(&msg);
        if let Some(d) = meta.drops {
            self.kernel_drops = d;
        }
        let at = match meta.stamp {
            Some(ts) if self.stamps => stamp_to_instant(&ts, mono_now, wall_now),
            _ => mono_now,
        };
        Ok(Some(Read {
            len,
            segment: meta.segment.filter(|&s| s > 0).unwrap_or(len),
            from: sockaddr_to_std(&self.names[0]),
            at,
        }))
    }

    /// One `recvmmsg` with `flags`; notes when data last came.
    fn read(
        &mut self,
        flags: libc::c_int,
        each: &mut impl FnMut(Datagram<'_>),
    ) -> io::Result<usize> {
        // Built per call so the struct holds no raw pointers (and is Send).
        let mut iovs: [libc::iovec; RECV_SLOTS] = std::array::from_fn(|k| libc::iovec {
            iov_base: self.bufs[k].as_mut_ptr().cast(),
            iov_len: self.bufs[k].len(),
        });
        let mut hdrs: [libc::mmsghdr; RECV_SLOTS] = std::array::from_fn(|_| libc::mmsghdr {
            msg_hdr: zeroed_msghdr(),
            msg_len: 0,
        });
        for (k, h) in hdrs.iter_mut().enumerate() {
            let msg = &mut h.msg_hdr;
            msg.msg_iov = &mut iovs[k];
            msg.msg_iovlen = 1;
            msg.msg_control = self.ctrl[k].as_mut_ptr().cast();
            msg.msg_controllen = mem::size_of::<Control>() as _;
            msg.msg_name = (&raw mut self.names[k]).cast();
            msg.msg_namelen = socklen_of::<libc::sockaddr_storage>();
        }
        // SAFETY: `hdrs` holds RECV_BATCH headers, each pointing at an
        // iovec, control buffer and name owned by self and alive for the
        // call (MSG_WAITFORONE returns once one arrived, MSG_DONTWAIT at
        // once).
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                RECV_BATCH,
                flags,
                std::ptr::null_mut(),
            )
        };
        let Ok(n) = usize::try_from(n) else {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        };
        // One pair of clock readings per batch turns the kernel's
        // wall-clock stamps into Instants: only their distance from now
        // matters, so a wall-clock step between batches does no harm.
        let (mono_now, wall_now) = (Instant::now(), SystemTime::now());
        if n > 0 {
            self.last_data = Some(mono_now);
        }
        for (k, h) in hdrs.iter().enumerate().take(n) {
            let len = h.msg_len as usize;
            let meta = read_cmsgs(&h.msg_hdr);
            if let Some(d) = meta.drops {
                self.kernel_drops = d;
            }
            let (at, wall) = match meta.stamp {
                Some(ts) if self.stamps => (
                    stamp_to_instant(&ts, mono_now, wall_now),
                    timespec_to_system(&ts),
                ),
                _ => (mono_now, wall_now),
            };
            each(Datagram {
                bytes: &self.bufs[k][..len],
                segment: meta.segment.filter(|&s| s > 0).unwrap_or(len),
                from: sockaddr_to_std(&self.names[k]),
                at,
                wall,
            });
        }
        Ok(n)
    }
}

/// One thread can wait on the sockets of several streams at once
/// (`poll`), then read whichever is ready.
impl std::os::fd::AsFd for Receiver {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// What the control messages of one received datagram said.
#[derive(Default)]
struct CmsgMeta {
    /// GRO segment size.
    segment: Option<usize>,
    /// The socket's cumulative drop counter (SO_RXQ_OVFL).
    drops: Option<u32>,
    /// The kernel's receive stamp (SO_TIMESTAMPNS).
    stamp: Option<libc::timespec>,
}

/// Walks the control messages the kernel left in `msg`.
fn read_cmsgs(msg: &libc::msghdr) -> CmsgMeta {
    let mut meta = CmsgMeta::default();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed cmsgs (truncated ones are cut off by msg_controllen);
    // CMSG_FIRSTHDR/CMSG_NXTHDR never step outside them, and each read
    // is unaligned and of the type the (level, type) pair promises.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let seg = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    meta.segment = usize::try_from(seg).ok();
                }
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                    meta.drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                    meta.stamp = Some(std::ptr::read_unaligned(data.cast::<libc::timespec>()));
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    meta
}

/// A kernel wall-clock stamp as a `SystemTime`.
fn timespec_to_system(ts: &libc::timespec) -> SystemTime {
    SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
}

/// The Instant of a kernel wall-clock stamp, given both clocks read
/// together after it; a stamp "in the future" (clock stepped back) reads
/// as now.
fn stamp_to_instant(ts: &libc::timespec, mono_now: Instant, wall_now: SystemTime) -> Instant {
    let stamp = SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        );
    let age = wall_now.duration_since(stamp).unwrap_or(Duration::ZERO);
    mono_now.checked_sub(age).unwrap_or(mono_now)
}

/// A valid placeholder for a receive name slot (the kernel overwrites it).
fn blank_name() -> libc::sockaddr_storage {
    SockAddr::from(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).as_storage()
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in,
            // which is smaller and no more aligned than sockaddr_storage.
            let sin = unsafe { &*(&raw const *ss).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6,
            // which is smaller and no more aligned than sockaddr_storage.
            let sin6 = unsafe { &*(&raw const *ss).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

fn join(sock: &Socket, group: IpAddr, opts: &ReceiveOptions) -> io::Result<()> {
    match (group, opts.source) {
        (IpAddr::V4(g), None) => {
            let iface = match &opts.interface {
                Some(i) => InterfaceIndexOrAddress::Index(i.index),
                None => InterfaceIndexOrAddress::Address(Ipv4Addr::UNSPECIFIED),
            };
            sock.join_multicast_v4_n(&g, &iface)
        }
        (IpAddr::V4(g), Some(IpAddr::V4(s))) => {
            let iface = opts
                .interface
                .as_ref()
                .and_then(|i| i.ipv4)
                .unwrap_or(Ipv4Addr::UNSPECIFIED);
            sock.join_ssm_v4(&s, &g, &iface)
        }
        (IpAddr::V6(g), None) => {
            sock.join_multicast_v6(&g, opts.interface.as_ref().map_or(0, |i| i.index))
        }
        (IpAddr::V6(g), Some(IpAddr::V6(s))) => {
            join_ssm_v6(sock, g, s, opts.interface.as_ref().map_or(0, |i| i.index))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "group and source must both be IPv4 or both IPv6",
        )),
    }
}

fn join_ssm_v6(sock: &Socket, group: Ipv6Addr, source: Ipv6Addr, index: u32) -> io::Result<()> {
    let storage = |ip| SockAddr::from(SocketAddrV6::new(ip, 0, 0, 0)).as_storage();
    let req = libc::group_source_req {
        gsr_interface: index,
        gsr_group: storage(group),
        gsr_source: storage(source),
    };
    Ok(setsockopt(sock, options::JoinSourceGroup, &req)?)
}

/// Rejects an address family mix early with a clear message.
pub(crate) fn check_family(group: IpAddr, source: Option<IpAddr>) -> Result<()> {
    if let Some(s) = source
        && s.is_ipv4() != group.is_ipv4()
    {
        bail!("source {s} and group {group} must both be IPv4 or both IPv6");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_interface_by_index_reaches_the_kernel() {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        let lo = parse_interface("127.0.0.1").unwrap();
        set_multicast_if_index_v4(&sock, lo.index).unwrap();
        // The kernel checks the index: a missing interface is refused.
        let e = set_multicast_if_index_v4(&sock, 999_999).unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL | libc::ENODEV)),
            "{e}"
        );
    }

    #[test]
    fn gso_trains_and_batches_arrive_datagram_by_datagram() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let payload: Vec<u8> = (0..=255).cycle().take(1000).collect();
        let iov = [iovec(&payload[..400]), iovec(&payload[400..])];
        let mut gso = gso_available(&tx);
        let mut hdrs = Vec::new();
        // Two datagrams of 500 bytes, as one GSO train where the kernel
        // has it and two gathered sendmmsg datagrams where not.
        let sent = if gso {
            send_train(&tx, &iov, 1, Some(500), &mut gso, &mut hdrs, None, "test").unwrap()
        } else {
            let halves = [iovec(&payload[..500]), iovec(&payload[500..])];
            send_train(&tx, &halves, 1, None, &mut gso, &mut hdrs, None, "test").unwrap()
        };
        assert_eq!(sent, 2);
        let mut buf = [0u8; 2000];
        for half in payload.chunks(500) {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], half);
        }
    }

    #[test]
    fn drop_counter_counts_what_a_full_buffer_refused() {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        // The smallest buffer the kernel grants holds one or two datagrams.
        sock.set_recv_buffer_size(0).unwrap();
        sock.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], 0))))
            .unwrap();
        let rx = Receiver::from_socket(sock, Vec::new()).unwrap();
        let to = rx.local_addr().unwrap();
        assert_eq!(rx.drops_now(), Some(0));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..50 {
            tx.send_to(&[7u8; 1000], to).unwrap();
        }
        // Loopback usually delivers within the send call; a loaded host may
        // defer it to ksoftirqd, so wait (bounded) for the count to settle.
        let until = Instant::now() + Duration::from_secs(5);
        while rx.drops_now().unwrap() < 40 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(rx.drops_now().unwrap() >= 40, "{:?}", rx.drops_now());
    }
}
