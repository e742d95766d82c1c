//! `GET /metrics`: the stream table and the server counters in the
//! Prometheus/OpenMetrics text format, encoded by prometheus-client. The
//! values live in the table's atomics; a scrape copies them into a fresh
//! registry, so the media path never knows it is being watched.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cmd::serve::hub::server::Server;

/// Labels of a per-stream series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: String,
    path: String,
    kind: String,
}

/// Labels of a per-reader series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReaderLabels {
    stream: String,
    path: String,
    reader: String,
}

/// Labels of a per-path series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
}

type Counters = Family<StreamLabels, Counter>;
type Gauges = Family<StreamLabels, Gauge>;

/// The exposition text.
pub(crate) fn render(server: &Server) -> String {
    let mut reg = Registry::default();
    streams(server, &mut reg);
    readers(server, &mut reg);
    paths(server, &mut reg);
    totals(server, &mut reg);
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        out.clear();
    }
    out
}

fn streams(server: &Server, reg: &mut Registry) {
    let counter = |reg: &mut Registry, name: &str, help: &str| {
        let f = Counters::default();
        reg.register(name, help, f.clone());
        f
    };
    let packets = counter(reg, "nagare_stream_packets", "Datagrams sent");
    let bytes = counter(reg, "nagare_stream_outbound_bytes", "Payload bytes sent");
    let late = counter(
        reg,
        "nagare_stream_late_packets",
        "Datagrams sent over 100 us after their slot",
    );
    let underruns = counter(
        reg,
        "nagare_stream_underruns",
        "Frames or chunks the reader had not filled in time",
    );
    let errors = counter(
        reg,
        "nagare_stream_send_errors",
        "Datagrams the kernel refused",
    );
    let drops = counter(
        reg,
        "nagare_stream_queue_drops",
        "Interleaved packets dropped for a full TCP write queue",
    );
    let fill = Gauges::default();
    reg.register(
        "nagare_stream_ring_fill",
        "Chunks waiting in the read-ahead ring",
        fill.clone(),
    );
    for (id, e) in server.table.entries() {
        let l = StreamLabels {
            stream: id.to_string(),
            path: e.source.clone(),
            kind: format!("{:?}", e.kind).to_lowercase(),
        };
        let c = e.counters.snapshot();
        packets.get_or_create(&l).inc_by(c.packets);
        bytes.get_or_create(&l).inc_by(c.bytes);
        late.get_or_create(&l).inc_by(c.late);
        underruns.get_or_create(&l).inc_by(c.underruns);
        errors.get_or_create(&l).inc_by(c.send_errors);
        drops.get_or_create(&l).inc_by(c.queue_drops);
        fill.get_or_create(&l).set(c.ring_fill as i64);
    }
}

/// What each reader said in its latest RTCP receiver report.
fn readers(server: &Server, reg: &mut Registry) {
    let reports = Family::<ReaderLabels, Counter>::default();
    reg.register(
        "nagare_reader_reports",
        "RTCP receiver report blocks a reader sent about the stream",
        reports.clone(),
    );
    let ratio = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<ReaderLabels, Gauge<f64, AtomicU64>>::default();
        reg.register(name, help, f.clone());
        f
    };
    let fraction = ratio(
        reg,
        "nagare_reader_fraction_lost",
        "Share of packets lost between the reader's last two reports (0 to 1)",
    );
    let jitter = ratio(
        reg,
        "nagare_reader_jitter_seconds",
        "Interarrival jitter the reader reported",
    );
    let lost = Family::<ReaderLabels, Gauge>::default();
    reg.register(
        "nagare_reader_cumulative_lost",
        "Packets the reader lost since it began to receive",
        lost.clone(),
    );
    for (id, e) in server.table.entries() {
        for r in e.counters.readers() {
            let l = ReaderLabels {
                stream: id.to_string(),
                path: e.source.clone(),
                reader: r.reader.clone(),
            };
            reports.get_or_create(&l).inc_by(r.reports);
            fraction
                .get_or_create(&l)
                .set(f64::from(r.fraction_lost) / 256.0);
            jitter
                .get_or_create(&l)
                .set(f64::from(r.jitter) / f64::from(nagare_proto::rtcp::VIDEO_CLOCK_RATE));
            lost.get_or_create(&l).set(i64::from(r.cumulative_lost));
        }
    }
}

fn paths(server: &Server, reg: &mut Registry) {
    let readers = Family::<PathLabels, Gauge>::default();
    reg.register(
        "nagare_paths_readers",
        "Streams reading each path (RTSP sessions and push streams)",
        readers.clone(),
    );
    let entries = server.table.entries();
    for m in server.media.iter() {
        let n = entries.iter().filter(|(_, e)| e.source == m.name).count();
        readers
            .get_or_create(&PathLabels {
                path: m.name.clone(),
            })
            .set(n as i64);
    }
}

fn totals(server: &Server, reg: &mut Registry) {
    let s = &server.stats;
    let counter = |reg: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    gauge(
        reg,
        "nagare_streams",
        "Streams in the table",
        server.table.len() as i64,
    );
    gauge(
        reg,
        "nagare_rtsp_sessions",
        "RTSP sessions open",
        s.rtsp_sessions.load(Ordering::Relaxed),
    );
    let totals = [
        (
            "nagare_rtsp_connections",
            "RTSP connections accepted",
            &s.rtsp_connections,
        ),
        (
            "nagare_rtsp_refused",
            "RTSP requests answered 4xx/5xx",
            &s.rtsp_refused,
        ),
        (
            "nagare_rtsp_evicted",
            "RTSP connections closed to make room under a connection cap, the longest idle first",
            &s.rtsp_evicted,
        ),
        (
            "nagare_rtsp_stalled",
            "RTSP connections closed for leaving their responses or media unread 10 s",
            &s.rtsp_stalled,
        ),
        (
            "nagare_slow_readers_dropped",
            "TCP readers dropped for a full write queue",
            &s.slow_readers,
        ),
        ("nagare_api_refused", "API requests refused", &s.api_refused),
        (
            "nagare_api_evicted",
            "API connections closed to make room under a connection cap, the longest idle first",
            &s.api_evicted,
        ),
    ];
    for (name, help, total) in totals {
        counter(reg, name, help, load(total));
    }
    admission(server, reg);
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(crate::clock::cpu_seconds());
    reg.register(
        "process_cpu_seconds",
        "CPU time used by the server, user plus system",
        cpu,
    );
    kernel(reg);
}

/// Registers a gauge of whole numbers set to `v`.
fn gauge(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    reg.register(name, help, g);
}

/// What admission sees: the reserved budget, the measured and predicted
/// load, and the measured cost of a datagram.
fn admission(server: &Server, reg: &mut Registry) {
    let share = |reg: &mut Registry, name: &str, help: &str, v: f64| {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(v);
        reg.register(name, help, g);
    };
    let reserved = server.admission.reserved();
    gauge(
        reg,
        "nagare_admitted_rate_bps",
        "Rate reserved by admitted streams, bits per second",
        reserved.rate.bps() as i64,
    );
    gauge(
        reg,
        "nagare_admitted_ring_bytes",
        "Read-ahead ring memory reserved by admitted streams, bytes",
        reserved.ring.bytes() as i64,
    );
    let work = server.work();
    share(
        reg,
        "nagare_pacer_predicted_load",
        "Share of each pacing thread's time the admitted streams will take, at the measured cost of a datagram",
        work.pacing_share(&reserved),
    );
    share(
        reg,
        "nagare_pacer_seconds_per_datagram",
        "Working time of a pacing thread per datagram sent (measured, or assumed until measured)",
        work.cost.per_packet.as_secs_f64(),
    );
    share(
        reg,
        "nagare_reader_load",
        "Read-ahead thread's working share of the last second",
        work.reader_load,
    );
    share(
        reg,
        "nagare_pacer_load",
        "Busiest pacing thread's working share of the last second",
        work.pacer_load,
    );
}

/// Host-wide UDP buffer drops.
fn kernel(reg: &mut Registry) {
    let counter = |reg: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    };
    if let Some((sndbuf, rcvbuf)) = kernel_udp_drops() {
        counter(
            reg,
            "nagare_kernel_udp_sndbuf_errors",
            "Host-wide UDP datagrams dropped for a full send buffer (/proc/net/snmp)",
            sndbuf,
        );
        counter(
            reg,
            "nagare_kernel_udp_rcvbuf_errors",
            "Host-wide UDP datagrams dropped for a full receive buffer (/proc/net/snmp)",
            rcvbuf,
        );
    }
}

/// `SndbufErrors` and `RcvbufErrors` of the `Udp:` lines of
/// /proc/net/snmp.
fn kernel_udp_drops() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = udp.next()?.split_whitespace().collect();
    let values: Vec<&str> = udp.next()?.split_whitespace().collect();
    let get = |key: &str| -> Option<u64> {
        let i = names.iter().position(|n| *n == key)?;
        values.get(i)?.parse().ok()
    };
    Some((get("SndbufErrors")?, get("RcvbufErrors")?))
}
