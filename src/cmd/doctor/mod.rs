//! `nagare doctor`: checks that this host is set up for the planned
//! stream — socket buffer limits, UDP memory, backlog, MTU, a multicast
//! route, clock synchronization — and prints the exact fixes. Seed 000's
//! Table 4 (the kernel parameters that made 8 × 3 Gbit/s stable for days)
//! is the reference profile.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use nagare_api::doctor::{Check, CheckKind, Report};
use nagare_proto::sdp::SdpStream;
use nagare_proto::video::st2110_20::DEFAULT_PACKET_SIZE;
use nagare_proto::{BitRate, ByteSize};

use crate::cli::{parse_address, parse_bit_rate, parse_interface, parse_packet_size};
use crate::net::copy_rate::CopyRate;
use crate::net::host::{self, ClockSync};
use crate::net::iface::{self, Interface, Link};

mod timing;

/// Command-line arguments of `nagare doctor`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DoctorArgs {
    /// Planned stream rate in bit/s, like 3.2G or 24G.
    #[arg(long, conflicts_with = "sdp", value_parser = parse_bit_rate)]
    pub rate: Option<u64>,
    /// Take rate, destination and group from the stream's SDP.
    #[arg(long)]
    pub sdp: Option<PathBuf>,
    /// UDP payload per packet (checked against the MTU); the default is
    /// send's, 1440 (a 1500-byte MTU); give 8800 for jumbo frames.
    #[arg(long, default_value_t = DEFAULT_PACKET_SIZE, value_parser = parse_packet_size)]
    pub packet_size: usize,
    /// Where the stream goes (unicast host or multicast group), HOST:PORT;
    /// picks the interface to check.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_address)]
    pub to: Option<SocketAddr>,
    /// Interface to check, by name or address (default: the route to --to).
    #[arg(long, value_parser = parse_interface)]
    pub interface: Option<Interface>,
    /// Apply the sysctl fixes (root only).
    #[arg(long)]
    pub apply: bool,
    /// Measure the timer floor this long on every CPU (a cyclictest-like
    /// sample: a real-time thread per CPU waking every 200 µs), then keep
    /// the pacer's CPU busy this long with the others idle, then every CPU
    /// at once, noting how long the host stops each; 0 skips all three.
    #[arg(long, default_value = "5", value_parser = parse_timer_seconds)]
    pub timer_seconds: std::time::Duration,
    /// Frame size of the stream the sender type is judged for (with
    /// --pix-fmt and --fps; default the demo's 1920x1080 uyvp at 59.94).
    #[arg(long, value_parser = crate::cli::parse_size)]
    pub size: Option<crate::cli::Size>,
    /// Pixel format of that stream.
    #[arg(long = "pix-fmt", value_parser = crate::cli::parse_pix_fmt)]
    pub pix_fmt: Option<nagare_proto::PixelFormat>,
    /// Frame rate of that stream.
    #[arg(long, value_parser = crate::cli::parse_rate)]
    pub fps: Option<nagare_proto::FrameRate>,
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--timer-seconds`: any duration `parse_seconds` takes, or 0 to skip.
fn parse_timer_seconds(s: &str) -> Result<std::time::Duration> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(std::time::Duration::ZERO);
    }
    crate::cli::parse_seconds(s)
}

/// The stream the checks are for.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rate: BitRate,
    packet_size: usize,
    dest: Option<SocketAddr>,
}

impl Plan {
    /// IP and UDP header bytes on top of each payload.
    fn header_bytes(&self) -> u64 {
        if self.dest.is_some_and(|d| d.is_ipv6()) {
            48
        } else {
            28
        }
    }
}

/// A sysctl with the value seed 000 settled on.
#[derive(Debug, Clone, Copy)]
struct Knob {
    kind: CheckKind,
    key: &'static str,
    /// Seed 000, Table 4.
    table4: &'static str,
}

const RMEM_MAX: Knob = Knob {
    kind: CheckKind::RmemMax,
    key: "net.core.rmem_max",
    table4: "2147483638",
};
const WMEM_MAX: Knob = Knob {
    kind: CheckKind::WmemMax,
    key: "net.core.wmem_max",
    table4: "2147483638",
};
const BACKLOG: Knob = Knob {
    kind: CheckKind::NetdevBacklog,
    key: "net.core.netdev_max_backlog",
    table4: "4000",
};
const UDP_MEM: Knob = Knob {
    kind: CheckKind::UdpMem,
    key: "net.ipv4.udp_mem",
    table4: "1535898 2047887 3071798",
};

/// A sysctl value that fixes a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    key: &'static str,
    value: String,
}

impl Setting {
    /// The shell command that applies it.
    fn command(&self) -> String {
        if self.value.contains(' ') {
            format!("sysctl -w {}=\"{}\"", self.key, self.value)
        } else {
            format!("sysctl -w {}={}", self.key, self.value)
        }
    }
}

/// A check, and for a short sysctl the setting that fixes it.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    /// The check as reported.
    pub check: Check,
    /// What `--apply` writes.
    pub setting: Option<Setting>,
}

/// Socket buffer a receiver wants at `rate`: 100 ms of stream, so a
/// scheduling hiccup of the receiving thread loses nothing, and never
/// below 16 MiB (a 4K frame from an unpaced sender arrives as one burst).
pub(crate) fn buffer_need(rate: BitRate) -> ByteSize {
    ByteSize((rate.bps() / 8 / 10).max(16 << 20))
}

/// Packets the kernel may queue per CPU before a softirq runs: 10 ms of
/// packets, at least Table 4's 4000.
pub(crate) fn backlog_need(rate: BitRate, packet_size: usize) -> u64 {
    let packet = u64::try_from(packet_size.max(1)).unwrap_or(u64::MAX);
    (rate.bps() / 8 / packet / 100).max(4000)
}

/// Checks one integer sysctl against its floor.
fn scalar_check(
    knob: Knob,
    need: u64,
    why: &str,
    read: &dyn Fn(&str) -> Option<String>,
) -> Finding {
    let cur = read(knob.key).and_then(|v| v.trim().parse::<u64>().ok());
    let ok = cur.is_some_and(|c| c >= need);
    let setting = (!ok).then(|| Setting {
        key: knob.key,
        value: need.to_string(),
    });
    Finding {
        check: Check {
            kind: knob.kind,
            name: format!("{} ({why})", knob.key),
            current: cur.map_or("unreadable".into(), |c| c.to_string()),
            needed: format!(
                ">= {need} (the 8K stream server paper's Table 4: {})",
                knob.table4
            ),
            ok,
            fix: setting.as_ref().map(Setting::command),
        },
        setting,
    }
}

/// Checks `udp_mem` (pages: min pressure max): four streams' buffers must
/// fit under the pressure threshold.
fn udp_mem_check(buffer: ByteSize, read: &dyn Fn(&str) -> Option<String>) -> Finding {
    let pages = buffer.bytes() * 4 / 4096;
    let cur = read(UDP_MEM.key);
    let parsed: Option<Vec<u64>> = cur.as_deref().map(|v| {
        v.split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    });
    let (ok, [min, pressure, max]) = match parsed.as_deref() {
        Some(&[min, pressure, max]) => (
            pressure >= pages && max >= pages * 2,
            [min.max(pages / 2), pressure.max(pages), max.max(pages * 2)],
        ),
        _ => (false, [pages / 2, pages, pages * 2]),
    };
    let setting = (!ok).then(|| Setting {
        key: UDP_MEM.key,
        value: format!("{min} {pressure} {max}"),
    });
    Finding {
        check: Check {
            kind: UDP_MEM.kind,
            name: format!("{} (UDP memory, pages)", UDP_MEM.key),
            current: cur.unwrap_or_else(|| "unreadable".into()),
            needed: format!(
                "pressure >= {pages} (the 8K stream server paper's Table 4: {})",
                UDP_MEM.table4
            ),
            ok,
            fix: setting.as_ref().map(Setting::command),
        },
        setting,
    }
}

/// Evaluates the sysctl checks from their current values (pure, so the
/// rules are unit-tested without touching the host).
pub(crate) fn sysctl_checks(
    rate: BitRate,
    packet_size: usize,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Finding> {
    let buf = buffer_need(rate);
    vec![
        scalar_check(RMEM_MAX, buf.bytes(), "largest receive buffer", read),
        scalar_check(WMEM_MAX, buf.bytes(), "largest send buffer", read),
        scalar_check(
            BACKLOG,
            backlog_need(rate, packet_size),
            "packets queued per CPU",
            read,
        ),
        udp_mem_check(buf, read),
    ]
}

/// The interface a datagram to `dest` would leave by (no packet is sent:
/// connecting a UDP socket only consults the routing table).
fn route_interface(dest: SocketAddr) -> Result<Option<Link>> {
    let bind = if dest.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
    if let Err(e) = sock.connect(dest) {
        bail!("no route to {dest}: {e}");
    }
    let local = sock.local_addr()?.ip();
    let links = iface::links().context("listing network interfaces")?;
    Ok(links.into_iter().find(|l| l.addrs.contains(&local)))
}

/// Whether `link` carries packets of the planned size.
fn mtu_check(link: &Link, plan: &Plan) -> Check {
    let mtu = link.mtu().ok();
    let headers = plan.header_bytes();
    let need = u64::try_from(plan.packet_size).unwrap_or(u64::MAX) + headers;
    let ok = mtu.is_some_and(|m| u64::from(m) >= need);
    let name = &link.name;
    Check {
        kind: CheckKind::Mtu,
        name: format!(
            "MTU of {name} ({}-byte packets + IP/UDP headers)",
            plan.packet_size
        ),
        current: mtu.map_or("unreadable".into(), |m| m.to_string()),
        needed: format!(">= {need}"),
        ok,
        fix: (!ok).then(|| {
            let fits = u64::from(mtu.unwrap_or(1500)).saturating_sub(headers);
            format!("ip link set dev {name} mtu {need}   # or send with --packet-size {fits}")
        }),
    }
}

/// Whether `link` may carry multicast to `group`.
fn multicast_flag_check(link: &Link, group: IpAddr) -> Check {
    // Loopback delivers multicast locally without the flag.
    let ok = link.multicast || link.loopback;
    let name = &link.name;
    Check {
        kind: CheckKind::MulticastFlag,
        name: format!("{name} can carry multicast group {group}"),
        current: match (link.multicast, link.loopback) {
            (true, _) => "MULTICAST flag set".into(),
            (false, true) => "no MULTICAST flag; loopback delivers multicast on this host".into(),
            (false, false) => "no MULTICAST flag".into(),
        },
        needed: if link.loopback {
            "MULTICAST flag, or loopback".into()
        } else {
            "MULTICAST flag".into()
        },
        ok,
        fix: (!ok).then(|| format!("ip link set dev {name} multicast on")),
    }
}

/// Whether a route leads to the multicast group `dest`.
fn multicast_route_check(dest: SocketAddr) -> Check {
    let routed = route_interface(dest);
    let via = match &routed {
        Ok(Some(l)) => format!("routed via {}", l.name),
        Ok(None) => "routed via an unknown interface".into(),
        Err(e) => format!("{e:#}"),
    };
    let ok = matches!(routed, Ok(Some(_)));
    let range = match dest.ip() {
        IpAddr::V4(_) => "224.0.0.0/4",
        IpAddr::V6(_) => "ff00::/8",
    };
    Check {
        kind: CheckKind::MulticastRoute,
        name: format!("multicast route for {}", dest.ip()),
        current: via,
        needed: "a route (or pin the interface with --interface on send and recv)".into(),
        ok,
        fix: (!ok).then(|| format!("ip route add {range} dev IFACE")),
    }
}

fn clock_check(sync: ClockSync) -> Check {
    Check {
        kind: CheckKind::Clock,
        name: "system clock synchronized (RTP timestamps count from the epoch)".into(),
        current: if sync.synced {
            format!("synchronized, max error {} µs", sync.max_error_us)
        } else {
            "not synchronized".into()
        },
        needed: "synchronized (NTP, or PTP for ST 2110)".into(),
        ok: sync.synced,
        fix: (!sync.synced).then(|| {
            "run a time service: chronyd (NTP) or ptp4l + phc2sys (PTP); senders on different \
             hosts only agree frame by frame with synchronized clocks"
                .into()
        }),
    }
}

/// One core's memory copy rate against the stream: every copy a receiver
/// makes of the stream (the kernel's, a reassembly) costs
/// `1 Gbit / rate` CPU-seconds per Gbit.
fn copy_check(rate: BitRate, copy: CopyRate) -> Check {
    let per_gbit = 1e9 / 8.0 / copy.bytes_per_second;
    let stream = rate.as_f64() / 8.0;
    let share = stream / copy.bytes_per_second;
    Check {
        kind: CheckKind::CopyRate,
        name: format!(
            "memory copy on one core (memcpy, {} MiB, best of {})",
            copy.round_bytes >> 20,
            copy.rounds
        ),
        current: format!("{:.1} GB/s per core", copy.bytes_per_second / 1e9),
        needed: format!(
            "one copy of the stream ({:.1} GB/s) within a core: each copy costs {per_gbit:.4} \
             CPU-s per Gbit, {:.0}% of a core at {}",
            stream / 1e9,
            100.0 * share,
            crate::progress::bitrate(rate.as_f64())
        ),
        ok: share < 1.0,
        fix: (share >= 1.0).then(|| {
            format!(
                "one copy of {} takes {share:.1} cores here: spread the stream over more receive \
                 cores or hosts (recv --stripes, --threads)",
                crate::progress::bitrate(rate.as_f64())
            )
        }),
    }
}

/// Where a VM's kernel sets which freed blocks it reports to the host.
const PAGE_REPORTING_ORDER: &str = "/sys/module/page_reporting/parameters/page_reporting_order";
/// The largest buddy order (4 MiB blocks on x86-64): reporting above it
/// never happens.
const MAX_PAGE_ORDER: u32 = 10;

/// The page reporting order, where the kernel has free page reporting.
fn page_reporting_order() -> Option<u32> {
    std::fs::read_to_string(PAGE_REPORTING_ORDER)
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn apply_page_reporting() -> Result<()> {
    if !host::is_root() {
        bail!("--apply changes kernel settings and needs root; run the printed lines with sudo");
    }
    std::fs::write(PAGE_REPORTING_ORDER, (MAX_PAGE_ORDER + 1).to_string())
        .with_context(|| format!("writing {PAGE_REPORTING_ORDER}"))?;
    eprintln!(
        "doctor: applied page_reporting_order = {}",
        MAX_PAGE_ORDER + 1
    );
    Ok(())
}

/// Free page reporting hands freed guest memory back to the hypervisor;
/// the kernel's next use of it (a sender's socket buffers) faults on the
/// host and stalls the vCPU. Measured on a 2-vCPU Firecracker VM: the
/// demo's pacer lost 5-20 ms at a time inside sendmsg, and the demo
/// passed 3 of 20 runs; with reporting off, 14 of 20.
fn page_reporting_check(order: u32) -> Check {
    let on = order <= MAX_PAGE_ORDER;
    Check {
        kind: CheckKind::PageReporting,
        name: "free page reporting to the hypervisor (virtio-balloon)".into(),
        current: if on {
            format!(
                "on: freed blocks of {} KiB go back to the host",
                4u64 << order
            )
        } else {
            format!("off (page_reporting_order {order})")
        },
        needed: "off: reused memory must not fault on the host mid-stream".into(),
        ok: !on,
        fix: on.then(|| format!("echo {} > {PAGE_REPORTING_ORDER}", MAX_PAGE_ORDER + 1)),
    }
}

/// The interface checks: the one named with `--interface`, else the
/// route to a unicast `--to`; for a multicast group without an interface,
/// whether a route to it exists.
fn interface_checks(args: &DoctorArgs, plan: &Plan) -> Result<Vec<Check>> {
    let link = match (&args.interface, plan.dest) {
        (Some(i), _) => Some(
            iface::find(i.index)
                .context("listing network interfaces")?
                .ok_or_else(|| anyhow!("interface {} disappeared while checking it", i.label))?,
        ),
        (None, Some(d)) if !d.ip().is_multicast() => route_interface(d)?,
        _ => None,
    };
    let mut out = Vec::new();
    if let Some(l) = &link {
        out.push(mtu_check(l, plan));
        if let Some(d) = plan.dest.filter(|d| d.ip().is_multicast()) {
            out.push(multicast_flag_check(l, d.ip()));
        }
    }
    if let (Some(d), None) = (plan.dest, &args.interface)
        && d.ip().is_multicast()
    {
        out.push(multicast_route_check(d));
    }
    Ok(out)
}

/// Rate and destination from an SDP file.
fn sdp_plan(path: &Path) -> Result<(BitRate, SocketAddr)> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read SDP file '{shown}'"))?;
    let s = SdpStream::parse(&text).map_err(|e| anyhow!("SDP file '{shown}': {e}"))?;
    let fps = s
        .rate
        .ok_or_else(|| anyhow!("SDP file '{shown}' has no exactframerate; give --rate instead"))?;
    let bits = u128::from(ByteSize::of_len(s.format.frame_bytes()).bytes()) * 8;
    let bps = bits * u128::from(fps.num) / u128::from(fps.den);
    let rate = BitRate(u64::try_from(bps).unwrap_or(u64::MAX));
    Ok((rate, SocketAddr::new(s.address, s.port)))
}

fn plan(args: &DoctorArgs) -> Result<Plan> {
    let (rate, sdp_dest) = match (args.rate, &args.sdp) {
        (Some(bps), None) => (BitRate(bps), None),
        (None, Some(p)) => {
            let (rate, dest) = sdp_plan(p)?;
            (rate, Some(dest))
        }
        _ => bail!("give the planned stream: --rate 3.2G, or --sdp FILE"),
    };
    Ok(Plan {
        rate,
        packet_size: args.packet_size,
        dest: args.to.or(sdp_dest),
    })
}

/// Writes the settings of the short sysctl checks and checks them again.
fn apply(findings: &mut [Finding], plan: &Plan) -> Result<()> {
    if !host::is_root() {
        bail!(
            "--apply changes kernel settings and needs root; run the printed sysctl lines with \
             sudo instead"
        );
    }
    for s in findings.iter().filter_map(|f| f.setting.as_ref()) {
        host::set_sysctl(s.key, &s.value)?;
        eprintln!("doctor: applied {} = {}", s.key, s.value);
    }
    let again = sysctl_checks(plan.rate, plan.packet_size, &host::sysctl);
    for (old, new) in findings.iter_mut().zip(again) {
        *old = new;
    }
    Ok(())
}

fn print_text(report: &Report) {
    println!(
        "doctor: planning {} with {}-byte packets",
        report.rate,
        report.packet_size.bytes()
    );
    for c in &report.checks {
        let mark = if c.ok { " ok " } else { "SHORT" };
        println!("  [{mark}] {}: {} (needs {})", c.name, c.current, c.needed);
    }
    if report.short == 0 {
        println!("doctor: everything this stream needs is in place");
        return;
    }
    println!("\nTo fix, as root:");
    for f in report.checks.iter().filter_map(|c| c.fix.as_ref()) {
        println!("  {f}");
    }
    println!("(or run nagare doctor --apply as root for the sysctl lines)");
}

/// `nagare doctor`.
pub(crate) fn main(args: DoctorArgs) -> Result<ExitCode> {
    let plan = plan(&args)?;
    let mut findings = sysctl_checks(plan.rate, plan.packet_size, &host::sysctl);
    if args.apply {
        apply(&mut findings, &plan)?;
    }
    let mut checks: Vec<Check> = findings.into_iter().map(|f| f.check).collect();
    checks.extend(interface_checks(&args, &plan)?);
    checks.push(clock_check(host::clock_sync()));
    if let Some(order) = page_reporting_order() {
        if args.apply && order <= MAX_PAGE_ORDER {
            apply_page_reporting()?;
        }
        checks.extend(page_reporting_order().map(page_reporting_check));
    }
    let copy = crate::net::copy_rate::measure();
    checks.push(copy_check(plan.rate, copy));
    if !args.timer_seconds.is_zero() {
        let planned = timing::Planned {
            size: args.size,
            pix_fmt: args.pix_fmt,
            fps: args.fps,
            packet_size: plan.packet_size,
        };
        checks.extend(timing::checks(planned, args.timer_seconds)?);
    }
    let mut report = Report::new(plan.rate, ByteSize::of_len(plan.packet_size), checks);
    report.copy_bytes_per_second = Some(copy.bytes_per_second as u64);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if report.short == 0 {
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

    fn fixes(findings: &[Finding]) -> Vec<String> {
        findings
            .iter()
            .filter(|f| !f.check.ok)
            .map(|f| f.check.fix.clone().unwrap())
            .collect()
    }

    #[test]
    fn debian_defaults_are_short_for_a_3_gbit_stripe() {
        let read = host(&[
            ("net.core.rmem_max", "212992"),
            ("net.core.wmem_max", "212992"),
            ("net.core.netdev_max_backlog", "1000"),
            ("net.ipv4.udp_mem", "188361 251151 376722"),
        ]);
        let findings = sysctl_checks(BitRate(3_200_000_000), 8800, &read);
        assert_eq!(
            fixes(&findings),
            [
                "sysctl -w net.core.rmem_max=40000000",
                "sysctl -w net.core.wmem_max=40000000",
                "sysctl -w net.core.netdev_max_backlog=4000",
            ]
        );
        assert_eq!(
            findings[0].setting,
            Some(Setting {
                key: "net.core.rmem_max",
                value: "40000000".into()
            })
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
        let all = sysctl_checks(BitRate(3_000_000_000), 8800, &read);
        assert!(all.iter().all(|f| f.check.ok && f.setting.is_none()));
        // but 24 Gbit/s of 1500-MTU packets needs a deeper backlog
        let c = sysctl_checks(BitRate(24_000_000_000), 1440, &read);
        assert_eq!(fixes(&c), ["sysctl -w net.core.netdev_max_backlog=20833"]);
    }

    #[test]
    fn unreadable_values_are_short_with_a_fix() {
        let read = |_: &str| None;
        let findings = sysctl_checks(BitRate(100_000_000), 1440, &read);
        assert!(findings.iter().all(|f| !f.check.ok && f.setting.is_some()));
        // 16 MiB floor, four streams' worth in pages, halved and doubled
        assert_eq!(
            fixes(&findings)[3],
            "sysctl -w net.ipv4.udp_mem=\"8192 16384 32768\""
        );
    }

    #[test]
    fn udp_mem_fix_keeps_the_larger_current_values() {
        let read = host(&[("net.ipv4.udp_mem", "100000 10 20")]);
        let f = udp_mem_check(ByteSize(40_000_000), &read);
        assert!(!f.check.ok);
        assert_eq!(f.setting.unwrap().value, "100000 39062 78124");
    }

    #[test]
    fn needs_scale_with_the_rate() {
        assert_eq!(buffer_need(BitRate(3_200_000_000)), ByteSize(40_000_000));
        assert_eq!(buffer_need(BitRate(1_000)), ByteSize(16 << 20));
        assert_eq!(backlog_need(BitRate(24_000_000_000), 1440), 20_833);
        assert_eq!(backlog_need(BitRate(1_000), 0), 4000);
    }

    #[test]
    fn mtu_and_multicast_checks_name_the_interface_and_the_fix() {
        let link = Link {
            name: "nagare-none".into(),
            index: 0,
            addrs: Vec::new(),
            multicast: false,
            loopback: false,
        };
        let plan = Plan {
            rate: BitRate(1_000_000),
            packet_size: 8800,
            dest: Some("[ff15::1]:5004".parse().unwrap()),
        };
        // no such interface in sysfs: the MTU is unreadable, 1500 assumed
        let c = mtu_check(&link, &plan);
        assert_eq!((c.ok, c.needed.as_str()), (false, ">= 8848"));
        assert_eq!(
            c.fix.as_deref(),
            Some("ip link set dev nagare-none mtu 8848   # or send with --packet-size 1452")
        );
        let c = multicast_flag_check(&link, "ff15::1".parse().unwrap());
        assert_eq!(
            c.fix.as_deref(),
            Some("ip link set dev nagare-none multicast on")
        );
    }
}
