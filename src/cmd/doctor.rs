//! `nagare doctor`: checks that this host is set up for the planned
//! stream — socket buffer limits, UDP memory, backlog, MTU, a multicast
//! route, clock synchronization — and prints the exact fixes. Seed 000's
//! Table 4 (the kernel parameters that made 8 × 3 Gbit/s stable for days)
//! is the reference profile.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use nagare_proto::sdp::SdpStream;
use serde::Serialize;

use crate::cli::parse_bit_rate;
use crate::progress::bitrate;

/// Command-line arguments of `nagare doctor`.
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Planned stream rate in bit/s, like 3.2G or 24G.
    #[arg(long, conflicts_with = "sdp")]
    pub rate: Option<String>,
    /// Take rate, destination and group from the stream's SDP.
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// UDP payload per packet (checked against the MTU).
    #[arg(long, default_value_t = 8800)]
    pub packet_size: usize,
    /// Where the stream goes (unicast host or multicast group), HOST:PORT;
    /// picks the interface to check.
    #[arg(long)]
    pub to: Option<String>,
    /// Interface to check, by name or address (default: the route to --to).
    #[arg(long)]
    pub interface: Option<String>,
    /// Apply the sysctl fixes (root only).
    #[arg(long)]
    pub apply: bool,
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// What the host has.
    pub current: String,
    /// What the stream needs.
    pub needed: String,
    /// Whether it is enough.
    pub ok: bool,
    /// The command that fixes it, if any.
    pub fix: Option<String>,
}

/// A sysctl with the value seed 000 settled on and the floor this stream
/// needs.
#[derive(Debug, Clone, Copy)]
struct Knob {
    key: &'static str,
    /// Seed 000, Table 4.
    table4: &'static str,
}

const RMEM_MAX: Knob = Knob {
    key: "net.core.rmem_max",
    table4: "2147483638",
};
const WMEM_MAX: Knob = Knob {
    key: "net.core.wmem_max",
    table4: "2147483638",
};
const BACKLOG: Knob = Knob {
    key: "net.core.netdev_max_backlog",
    table4: "4000",
};
const UDP_MEM: Knob = Knob {
    key: "net.ipv4.udp_mem",
    table4: "1535898 2047887 3071798",
};

/// Socket buffer a receiver wants for `bps`: 100 ms of stream, so a
/// scheduling hiccup of the receiving thread loses nothing, and never
/// below 16 MiB (a 4K frame from an unpaced sender arrives as one burst).
pub fn buffer_need(bps: f64) -> u64 {
    ((bps / 8.0 * 0.1) as u64).max(16 << 20)
}

/// Packets the kernel may queue per CPU before a softirq runs: 10 ms of
/// packets, at least Table 4's 4000.
pub fn backlog_need(bps: f64, packet_size: usize) -> u64 {
    ((bps / 8.0 / packet_size.max(1) as f64 * 0.01) as u64).max(4000)
}

/// Evaluates the sysctl checks from their current values (pure, so the
/// rules are unit-tested without touching the host).
pub fn sysctl_checks(
    bps: f64,
    packet_size: usize,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Check> {
    let buf = buffer_need(bps);
    let mut out = Vec::new();
    let mut scalar = |knob: Knob, need: u64, why: &str| {
        let cur = read(knob.key).and_then(|v| v.trim().parse::<u64>().ok());
        let ok = cur.is_some_and(|c| c >= need);
        out.push(Check {
            name: format!("{} ({why})", knob.key),
            current: cur.map_or("unreadable".into(), |c| c.to_string()),
            needed: format!(">= {need} (seed 000 Table 4: {})", knob.table4),
            ok,
            fix: (!ok).then(|| format!("sysctl -w {}={need}", knob.key)),
        });
    };
    scalar(RMEM_MAX, buf, "largest receive buffer");
    scalar(WMEM_MAX, buf, "largest send buffer");
    scalar(
        BACKLOG,
        backlog_need(bps, packet_size),
        "packets queued per CPU",
    );
    // udp_mem is in pages: min pressure max. Four streams' buffers must
    // fit under the pressure threshold.
    let pages = buf * 4 / 4096;
    let cur = read(UDP_MEM.key);
    let parsed: Option<Vec<u64>> = cur.as_deref().map(|v| {
        v.split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    });
    let (ok, fix) = match parsed.as_deref() {
        Some([min, pressure, max]) if *pressure >= pages && *max >= pages * 2 => (true, None),
        Some([min, pressure, max]) => (
            false,
            Some(format!(
                "sysctl -w {}=\"{} {} {}\"",
                UDP_MEM.key,
                (*min).max(pages / 2),
                (*pressure).max(pages),
                (*max).max(pages * 2)
            )),
        ),
        _ => (
            false,
            Some(format!(
                "sysctl -w {}=\"{} {} {}\"",
                UDP_MEM.key,
                pages / 2,
                pages,
                pages * 2
            )),
        ),
    };
    out.push(Check {
        name: format!("{} (UDP memory, pages)", UDP_MEM.key),
        current: cur.unwrap_or_else(|| "unreadable".into()),
        needed: format!("pressure >= {pages} (seed 000 Table 4: {})", UDP_MEM.table4),
        ok,
        fix,
    });
    out
}

fn read_sysctl(key: &str) -> Option<String> {
    let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("writing {} = {value}", path.display()))
}

/// The interface a datagram to `dest` would leave by (no packet is sent:
/// connecting a UDP socket only consults the routing table).
fn route_interface(dest: SocketAddr) -> Result<Option<crate::net::udp::Interface>> {
    let bind: SocketAddr = if dest.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = UdpSocket::bind(bind)?;
    if let Err(e) = sock.connect(dest) {
        bail!("no route to {dest}: {e}");
    }
    let local = sock.local_addr()?.ip();
    Ok(crate::net::udp::parse_interface(&local.to_string()).ok())
}

fn iface_name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into buf.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn read_u64(path: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    s.strip_prefix("0x")
        .map_or_else(|| s.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
}

fn clock_check() -> Check {
    // SAFETY: adjtimex with modes 0 only reads the kernel's NTP state.
    let (state, maxerror) = unsafe {
        let mut tx: libc::timex = std::mem::zeroed();
        let state = libc::adjtimex(&mut tx);
        (state, tx.maxerror)
    };
    let synced = state >= 0 && state != libc::TIME_ERROR;
    Check {
        name: "system clock synchronized (RTP timestamps count from the epoch)".into(),
        current: if synced {
            format!("synchronized, max error {maxerror} µs")
        } else {
            "not synchronized".into()
        },
        needed: "synchronized (NTP, or PTP for ST 2110)".into(),
        ok: synced,
        fix: (!synced).then(|| {
            "run a time service: chronyd (NTP) or ptp4l + phc2sys (PTP); senders on different \
             hosts only agree frame by frame with synchronized clocks"
                .into()
        }),
    }
}

/// `nagare doctor`.
pub fn main(args: DoctorArgs) -> Result<ExitCode> {
    let (bps, dest, sdp_packet) = match (&args.rate, &args.sdp) {
        (Some(r), None) => (parse_bit_rate(r)? as f64, None, None),
        (None, Some(p)) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read SDP file '{}'", p.display()))?;
            let s =
                SdpStream::parse(&text).map_err(|e| anyhow!("SDP file '{}': {e}", p.display()))?;
            let rate = s.rate.ok_or_else(|| {
                anyhow!(
                    "SDP file '{}' has no exactframerate; give --rate instead",
                    p.display()
                )
            })?;
            let bps = s.format.frame_bytes() as f64 * 8.0 * rate.as_f64();
            (bps, Some(SocketAddr::new(s.address, s.port)), None::<usize>)
        }
        _ => bail!("give the planned stream: --rate 3.2G, or --sdp FILE"),
    };
    let packet_size = sdp_packet.unwrap_or(args.packet_size);
    let dest = match (&args.to, dest) {
        (Some(t), _) => Some(crate::net::udp::parse_addr(t, "destination")?),
        (None, d) => d,
    };
    let mut checks = sysctl_checks(bps, packet_size, &read_sysctl);
    let iface = match (&args.interface, dest) {
        (Some(i), _) => Some(crate::net::udp::parse_interface(i)?),
        (None, Some(d)) if d.ip().is_multicast() => None,
        (None, Some(d)) => route_interface(d)?,
        (None, None) => None,
    };
    if let Some(i) = &iface {
        let name = iface_name(i.index).unwrap_or_else(|| i.label.clone());
        let sys = PathBuf::from("/sys/class/net").join(&name);
        let mtu = read_u64(&sys.join("mtu"));
        let ipv6 = dest.is_some_and(|d| d.is_ipv6());
        let need = packet_size as u64 + if ipv6 { 48 } else { 28 };
        let ok = mtu.is_some_and(|m| m >= need);
        checks.push(Check {
            name: format!("MTU of {name} ({packet_size}-byte packets + IP/UDP headers)"),
            current: mtu.map_or("unreadable".into(), |m| m.to_string()),
            needed: format!(">= {need}"),
            ok,
            fix: (!ok).then(|| {
                format!(
                    "ip link set dev {name} mtu {need}   # or send with --packet-size {}",
                    mtu.unwrap_or(1500)
                        .saturating_sub(if ipv6 { 48 } else { 28 })
                )
            }),
        });
        if let Some(d) = dest.filter(|d| d.ip().is_multicast()) {
            let flags = read_u64(&sys.join("flags")).unwrap_or(0);
            // Loopback delivers multicast locally without the flag.
            let multicast = flags & libc::IFF_MULTICAST as u64 != 0 || name == "lo";
            checks.push(Check {
                name: format!("{name} can carry multicast group {}", d.ip()),
                current: if multicast {
                    "MULTICAST flag set".into()
                } else {
                    "no MULTICAST flag".into()
                },
                needed: "MULTICAST flag".into(),
                ok: multicast,
                fix: (!multicast).then(|| format!("ip link set dev {name} multicast on")),
            });
        }
    }
    if let (Some(d), None) = (dest, &args.interface)
        && d.ip().is_multicast()
    {
        let routed = route_interface(d);
        let ok = matches!(routed, Ok(Some(_)));
        let via = match &routed {
            Ok(Some(i)) => format!(
                "routed via {}",
                iface_name(i.index).unwrap_or_else(|| i.label.clone())
            ),
            Ok(None) => "routed via an unknown interface".into(),
            Err(e) => format!("{e:#}"),
        };
        let group = match d.ip() {
            IpAddr::V4(_) => "224.0.0.0/4",
            IpAddr::V6(_) => "ff00::/8",
        };
        checks.push(Check {
            name: format!("multicast route for {}", d.ip()),
            current: via,
            needed: "a route (or pin the interface with --interface on send and recv)".into(),
            ok,
            fix: (!ok).then(|| format!("ip route add {group} dev IFACE")),
        });
    }
    checks.push(clock_check());
    if args.apply {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!(
                "--apply changes kernel settings and needs root; run the printed sysctl lines with sudo instead"
            );
        }
        for c in checks.iter().filter(|c| !c.ok) {
            if let Some(fix) = c.fix.as_deref().and_then(|f| f.strip_prefix("sysctl -w ")) {
                let (key, value) = fix.split_once('=').unwrap_or((fix, ""));
                write_sysctl(key, value.trim_matches('"'))?;
                eprintln!("doctor: applied {key} = {}", value.trim_matches('"'));
            }
        }
        checks = {
            let mut again = sysctl_checks(bps, packet_size, &read_sysctl);
            again.extend(checks.into_iter().skip(again.len()));
            again
        };
    }
    let short = checks.iter().filter(|c| !c.ok).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rate_bps": bps,
                "packet_size": packet_size,
                "checks": checks,
                "short": short,
            }))?
        );
    } else {
        println!(
            "doctor: planning {} with {packet_size}-byte packets",
            bitrate(bps)
        );
        for c in &checks {
            println!(
                "  [{}] {}: {} (needs {})",
                if c.ok { " ok " } else { "SHORT" },
                c.name,
                c.current,
                c.needed
            );
        }
        if short > 0 {
            println!("\nTo fix, as root:");
            for f in checks.iter().filter_map(|c| c.fix.as_ref()) {
                println!("  {f}");
            }
            println!("(or run nagare doctor --apply as root for the sysctl lines)");
        } else {
            println!("doctor: everything this stream needs is in place");
        }
    }
    Ok(if short == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(values: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            values
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn debian_defaults_are_short_for_a_3_gbit_stripe() {
        let read = host(&[
            ("net.core.rmem_max", "212992"),
            ("net.core.wmem_max", "212992"),
            ("net.core.netdev_max_backlog", "1000"),
            ("net.ipv4.udp_mem", "188361 251151 376722"),
        ]);
        let checks = sysctl_checks(3.2e9, 8800, &read);
        let bad: Vec<_> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.fix.clone().unwrap())
            .collect();
        assert_eq!(
            bad,
            [
                "sysctl -w net.core.rmem_max=40000000",
                "sysctl -w net.core.wmem_max=40000000",
                "sysctl -w net.core.netdev_max_backlog=4000",
            ]
        );
    }

    #[test]
    fn table_4_is_enough_for_one_stripe() {
        let read = host(&[
            ("net.core.rmem_max", "2147483638"),
            ("net.core.wmem_max", "2147483638"),
            ("net.core.netdev_max_backlog", "4000"),
            ("net.ipv4.udp_mem", "1535898 2047887 3071798"),
        ]);
        assert!(sysctl_checks(3.0e9, 8800, &read).iter().all(|c| c.ok));
        // but 24 Gbit/s of 1500-MTU packets needs a deeper backlog
        let c = sysctl_checks(24e9, 1440, &read);
        assert!(!c.iter().find(|c| c.name.contains("backlog")).unwrap().ok);
    }

    #[test]
    fn unreadable_values_are_short_with_a_fix() {
        let read = |_: &str| None;
        let checks = sysctl_checks(1e8, 1440, &read);
        assert!(checks.iter().all(|c| !c.ok && c.fix.is_some()));
    }
}
