//! UDP sockets for multi-gigabit streams: address and interface parsing,
//! unicast and multicast (any-source and source-specific, IPv4 and IPv6)
//! setup, large buffers, and batched I/O: `sendmsg` with UDP GSO trains or
//! `sendmmsg`, and `recvmmsg` with UDP GRO and the kernel's drop counter.

use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, SockAddr, Socket, Type};

// Linux generic values (every architecture nagare targets: x86_64, aarch64).
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
const SO_RXQ_OVFL: libc::c_int = 40;
const SO_MEMINFO: libc::c_int = 55;
/// Index of the drop counter in SO_MEMINFO's array (SK_MEMINFO_DROPS).
const SK_MEMINFO_DROPS: usize = 8;
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Largest datagram a GSO train or GRO batch carries (the kernel's limit
/// for one UDP super-packet).
pub const MAX_GSO_BYTES: usize = 65_000;
/// Most segments the kernel accepts in one GSO send.
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Datagrams per `sendmmsg` call when GSO is off.
const SENDMMSG_BATCH: usize = 64;

/// Most datagrams of `packet_size` bytes one send call carries: what fits
/// in a GSO train, or a `sendmmsg` batch.
pub fn train_cap(gso: bool, packet_size: usize) -> usize {
    if gso {
        (MAX_GSO_BYTES / packet_size.max(1)).clamp(1, MAX_GSO_SEGMENTS)
    } else {
        SENDMMSG_BATCH
    }
}

/// Parses `HOST:PORT` (`127.0.0.1:5004`, `[::1]:5004`, `localhost:5004`).
pub fn parse_addr(text: &str, what: &str) -> Result<SocketAddr> {
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

/// A network interface named by address or by name.
#[derive(Debug, Clone)]
pub struct Interface {
    /// What the user typed, for messages.
    pub label: String,
    /// Kernel interface index.
    pub index: u32,
    /// Its first IPv4 address, if any.
    pub ipv4: Option<Ipv4Addr>,
}

/// Resolves `--interface ADDR|NAME` against the machine's interfaces.
pub fn parse_interface(text: &str) -> Result<Interface> {
    let ifaces = interfaces().context("listing network interfaces")?;
    let known = || {
        let mut names: Vec<&str> = ifaces.iter().map(|i| i.0.as_str()).collect();
        names.dedup();
        names.join(", ")
    };
    if let Ok(ip) = text.parse::<IpAddr>() {
        let found = ifaces.iter().find(|(_, _, a)| *a == ip).ok_or_else(|| {
            anyhow!(
                "no interface has the address {ip}: give an address of this machine or an \
                 interface name ({})",
                known()
            )
        })?;
        return Ok(Interface {
            label: text.to_string(),
            index: found.1,
            ipv4: match ip {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => first_ipv4(&ifaces, found.1),
            },
        });
    }
    let found = ifaces
        .iter()
        .find(|(name, _, _)| name == text)
        .ok_or_else(|| anyhow!("no interface named '{text}' (known: {})", known()))?;
    Ok(Interface {
        label: text.to_string(),
        index: found.1,
        ipv4: first_ipv4(&ifaces, found.1),
    })
}

fn first_ipv4(ifaces: &[(String, u32, IpAddr)], index: u32) -> Option<Ipv4Addr> {
    ifaces.iter().find_map(|(_, i, a)| match a {
        IpAddr::V4(v4) if *i == index => Some(*v4),
        _ => None,
    })
}

/// (name, index, address) for every address of every interface.
fn interfaces() -> io::Result<Vec<(String, u32, IpAddr)>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points to a sockaddr whose family we check.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: family says this is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family says this is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        let cname = std::ffi::CString::new(name.clone()).unwrap_or_default();
        // SAFETY: cname is a valid C string.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        out.push((name, index, addr));
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn setsockopt_int(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passing a pointer to a c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks for a socket buffer of `bytes`, forcing past `net.core.*mem_max`
/// when running as root. Returns a warning when the kernel granted less.
pub fn size_buffer(sock: &Socket, bytes: usize, receive: bool) -> Option<String> {
    let want = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let forced = setsockopt_int(
        sock,
        libc::SOL_SOCKET,
        if receive {
            SO_RCVBUFFORCE
        } else {
            SO_SNDBUFFORCE
        },
        want,
    )
    .is_ok();
    if !forced {
        let _ = if receive {
            sock.set_recv_buffer_size(want as usize)
        } else {
            sock.set_send_buffer_size(want as usize)
        };
    }
    let got = if receive {
        sock.recv_buffer_size()
    } else {
        sock.send_buffer_size()
    }
    .unwrap_or(0);
    // Linux reports double the requested size (bookkeeping overhead).
    (got < want as usize).then(|| {
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

/// Options for a sending socket.
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    /// Multicast interface.
    pub interface: Option<Interface>,
    /// TTL / hop limit (multicast or unicast).
    pub ttl: Option<u32>,
    /// Send buffer to ask for.
    pub buffer_bytes: usize,
}

/// A connected sending socket and what it supports.
pub struct Sender {
    sock: Socket,
    /// Whether UDP GSO is available.
    pub gso: bool,
    /// Warnings worth one line each.
    pub notices: Vec<String>,
}

impl Sender {
    /// Opens a socket towards `dest`.
    pub fn open(dest: SocketAddr, opts: &SendOptions) -> Result<Sender> {
        let sock = Socket::new(Domain::for_address(dest), Type::DGRAM, Some(Protocol::UDP))
            .context("creating a UDP socket")?;
        let mut notices = Vec::new();
        if dest.ip().is_multicast() {
            match (dest.ip(), &opts.interface) {
                (IpAddr::V4(_), Some(i)) => {
                    let r = match i.ipv4 {
                        Some(a) => sock.set_multicast_if_v4(&a),
                        None => set_multicast_if_index_v4(&sock, i.index),
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
            && let Some(w) = size_buffer(&sock, opts.buffer_bytes, false)
        {
            notices.push(w);
        }
        sock.connect(&SockAddr::from(dest))
            .with_context(|| format!("no route to {dest}"))?;
        let gso = gso_available(&sock);
        Ok(Sender { sock, gso, notices })
    }

    /// The local address the socket sends from.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()?.as_socket()
    }

    /// Sends one train on the connected socket; see [`send_train`].
    pub fn send_train(
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

/// Sends one train of datagrams, each `parts` iovecs of `iov`, to `dest`
/// or the connected peer: as one GSO send when `*gso` is on and the
/// caller gives the common `segment` size, else with `sendmmsg`. Where
/// the kernel refuses GSO (no support, or a path MTU below the segment)
/// it prints a one-line note as `who`, turns `*gso` off for later trains
/// and sends this one with `sendmmsg`. Returns how many datagrams left.
#[allow(clippy::too_many_arguments)] // one call's worth of borrowed state
pub fn send_train(
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
    match segment {
        Some(seg) if *gso => match send_gso(sock, iov, seg, dest) {
            Ok(_) => Ok(count),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT)
                ) =>
            {
                eprintln!("{who}: note: UDP GSO failed ({e}); sending packet by packet");
                *gso = false;
                send_many(sock, iov, parts, hdrs, dest)
            }
            Err(e) => Err(e),
        },
        _ => send_many(sock, iov, parts, hdrs, dest),
    }
}

/// An iovec over `b` for the send calls here, which only read through it
/// (the C struct wants a *mut).
pub fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}

/// Whether the kernel supports UDP GSO on `sock`: setting a segment size
/// on the socket fails where it lacks it. Leaves the socket's default
/// segment size at 0 (trains name theirs per call).
pub fn gso_available(sock: &impl AsRawFd) -> bool {
    setsockopt_int(sock, SOL_UDP, UDP_SEGMENT, 1400).is_ok()
        && setsockopt_int(sock, SOL_UDP, UDP_SEGMENT, 0).is_ok()
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
pub fn send_gso(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    segment: usize,
    dest: Option<&SockAddr>,
) -> io::Result<usize> {
    let mut cmsg = [0u64; 4]; // aligned room for one cmsghdr + u16
    let mut msg: libc::msghdr = unsafe_zeroed_msghdr();
    set_name(&mut msg, dest);
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as usize;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points to `space` bytes we own; CMSG_FIRSTHDR
    // returns a header inside it, and CMSG_DATA leaves room for a u16.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment as u16);
    }
    // SAFETY: msg describes valid iovecs, control data and (optional) name,
    // all borrowed for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Sends datagrams with `sendmmsg` on `sock`, to `dest` or the connected
/// peer: datagram `k` is the iovecs `iov[parts * k .. parts * (k + 1)]`.
/// Returns how many were sent (an error only when none were).
pub fn send_many(
    sock: &impl AsRawFd,
    iov: &[libc::iovec],
    parts: usize,
    hdrs: &mut Vec<libc::mmsghdr>,
    dest: Option<&SockAddr>,
) -> io::Result<usize> {
    hdrs.clear();
    for chunk in iov.chunks(parts) {
        let mut msg: libc::msghdr = unsafe_zeroed_msghdr();
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
        // SAFETY: every mmsghdr points at iovecs (and a name) borrowed for
        // this call.
        let n = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                hdrs[done..].as_mut_ptr(),
                (hdrs.len() - done) as u32,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if done > 0 {
                return Ok(done);
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(done)
}

fn unsafe_zeroed_msghdr() -> libc::msghdr {
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    unsafe { MaybeUninit::<libc::msghdr>::zeroed().assume_init() }
}

fn set_multicast_if_index_v4(sock: &Socket, index: u32) -> io::Result<()> {
    let mreqn = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: index as libc::c_int,
    };
    // SAFETY: passing a pointer to an ip_mreqn of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            (&mreqn as *const libc::ip_mreqn).cast(),
            mem::size_of::<libc::ip_mreqn>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Options for a receiving socket.
#[derive(Debug, Clone, Default)]
pub struct ReceiveOptions {
    /// Multicast interface to join on.
    pub interface: Option<Interface>,
    /// Source for source-specific multicast.
    pub source: Option<IpAddr>,
    /// Receive buffer to ask for.
    pub buffer_bytes: usize,
}

/// A bound receiving socket with batch buffers.
pub struct Receiver {
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
}

/// Aligned room for the control messages of one datagram: GRO segment
/// size, drop counter and a receive timestamp (24 + 24 + 32 bytes); a
/// smaller buffer would truncate them (MSG_CTRUNC) and lose the stamp.
type Control = [u64; 12];

/// Datagrams (or GRO batches) taken per receive call.
const RECV_BATCH: usize = 32;

/// One datagram (or GRO batch of equal-sized datagrams) from a batch.
pub struct Datagram<'a> {
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
}

impl Datagram<'_> {
    /// The individual datagrams (splits a GRO batch).
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.chunks(self.segment.max(1))
    }
}

impl Receiver {
    /// Binds `listen` (joining it when it is a multicast group).
    pub fn open(listen: SocketAddr, opts: &ReceiveOptions) -> Result<Receiver> {
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
                    "joined the group on the default-route interface; pin it with --interface"
                        .into(),
                );
            }
        }
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
    pub fn from_socket(sock: Socket, notices: Vec<String>) -> Result<Receiver> {
        setsockopt_int(&sock, libc::SOL_SOCKET, SO_RXQ_OVFL, 1).ok();
        let gro = setsockopt_int(&sock, SOL_UDP, UDP_GRO, 1).is_ok();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .context("setting the receive timeout")?;
        let size = if gro { 65_536 } else { 9_216 };
        Ok(Receiver {
            sock,
            gro,
            notices,
            bufs: (0..RECV_BATCH).map(|_| vec![0u8; size]).collect(),
            ctrl: vec![[0u64; 12]; RECV_BATCH],
            // SAFETY: sockaddr_storage is plain data; zero is valid.
            names: vec![unsafe { mem::zeroed() }; RECV_BATCH],
            kernel_drops: 0,
            stamps: false,
        })
    }

    /// Asks the kernel to stamp each datagram's arrival (SO_TIMESTAMPNS),
    /// so receive times do not include how long this thread took to get
    /// to the datagram. Returns whether it is on.
    pub fn enable_timestamps(&mut self) -> bool {
        self.stamps = setsockopt_int(&self.sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).is_ok();
        self.stamps
    }

    /// Sets how long [`Receiver::recv_batch`] waits for the first datagram
    /// (at least 1 µs: zero would mean forever).
    pub fn set_wait(&self, wait: Duration) -> io::Result<()> {
        self.sock
            .set_read_timeout(Some(wait.max(Duration::from_micros(1))))
    }

    /// Sends one datagram from this socket, to `to` or the connected peer
    /// (a reply leaves from the address the request came to).
    pub fn send_to(&self, buf: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
        match to {
            Some(a) => self.sock.send_to(buf, &SockAddr::from(a)),
            None => self.sock.send(buf),
        }
    }

    /// The kernel's drop counter of this socket now (SO_MEMINFO), which,
    /// unlike the per-datagram SO_RXQ_OVFL value, also counts drops after
    /// the last datagram read. `None` where the kernel lacks it.
    pub fn drops_now(&self) -> Option<u32> {
        let mut info = [0u32; 16];
        let mut len = mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `info`.
        let rc = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let have = len as usize / mem::size_of::<u32>();
        (rc == 0 && have > SK_MEMINFO_DROPS).then(|| info[SK_MEMINFO_DROPS])
    }

    /// The bound address (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()?.as_socket()
    }

    /// Waits up to 100 ms for datagrams and hands each to `each`.
    /// Returns the number of receive calls' messages (0 on timeout).
    pub fn recv_batch(&mut self, mut each: impl FnMut(Datagram<'_>)) -> io::Result<usize> {
        // Built per call so the struct holds no raw pointers (and is Send).
        let mut iovs: [libc::iovec; RECV_BATCH] = std::array::from_fn(|k| libc::iovec {
            iov_base: self.bufs[k].as_mut_ptr().cast(),
            iov_len: self.bufs[k].len(),
        });
        let mut hdrs: [libc::mmsghdr; RECV_BATCH] = std::array::from_fn(|_| libc::mmsghdr {
            msg_hdr: unsafe_zeroed_msghdr(),
            msg_len: 0,
        });
        for (k, h) in hdrs.iter_mut().enumerate() {
            let msg = &mut h.msg_hdr;
            msg.msg_iov = &mut iovs[k];
            msg.msg_iovlen = 1;
            msg.msg_control = self.ctrl[k].as_mut_ptr().cast();
            msg.msg_controllen = mem::size_of::<Control>() as _;
            msg.msg_name = (&mut self.names[k] as *mut libc::sockaddr_storage).cast();
            msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as _;
        }
        // SAFETY: every header points at buffers owned by self, alive for
        // the call; MSG_WAITFORONE returns once at least one arrived.
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                RECV_BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        // One pair of clock readings per batch turns the kernel's
        // wall-clock stamps into Instants: only their distance from now
        // matters, so a wall-clock step between batches does no harm.
        let (mono_now, wall_now) = (Instant::now(), SystemTime::now());
        for (k, h) in hdrs.iter().enumerate().take(n) {
            let len = h.msg_len as usize;
            let mut segment = len;
            let mut at = mono_now;
            // SAFETY: the kernel filled msg_control with msg_controllen
            // bytes of well-formed cmsgs; the CMSG_* walk stays inside.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (SOL_UDP, UDP_GRO) => {
                            segment = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as usize;
                        }
                        (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                            self.kernel_drops = std::ptr::read_unaligned(data.cast::<u32>());
                        }
                        (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) if self.stamps => {
                            let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                            at = stamp_to_instant(&ts, mono_now, wall_now);
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
            let from = sockaddr_to_std(&self.names[k]);
            each(Datagram {
                bytes: &self.bufs[k][..len],
                segment: if segment == 0 { len } else { segment },
                from,
                at,
            });
        }
        Ok(n)
    }
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

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: family says sockaddr_in, which fits in the storage.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: family says sockaddr_in6, which fits in the storage.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
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
    fn storage(ip: Ipv6Addr) -> libc::sockaddr_storage {
        // SAFETY: plain data; we fill the sockaddr_in6 prefix.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let sin6 = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
        // SAFETY: sockaddr_in6 fits in sockaddr_storage.
        unsafe {
            (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
            (*sin6).sin6_addr.s6_addr = ip.octets();
        }
        ss
    }
    #[repr(C)]
    struct GroupSourceReq {
        interface: u32,
        group: libc::sockaddr_storage,
        source: libc::sockaddr_storage,
    }
    let req = GroupSourceReq {
        interface: index,
        group: storage(group),
        source: storage(source),
    };
    // SAFETY: passing a pointer to a group_source_req of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::MCAST_JOIN_SOURCE_GROUP,
            (&req as *const GroupSourceReq).cast(),
            mem::size_of::<GroupSourceReq>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Rejects an address family mix early with a clear message.
pub fn check_family(group: IpAddr, source: Option<IpAddr>) -> Result<()> {
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
