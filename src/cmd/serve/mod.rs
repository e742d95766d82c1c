//! `nagare serve`: a stream server. Files and the test pattern from a
//! media directory are played to RTSP clients (`rtsp://HOST:PORT/NAME`)
//! and pushed to destinations created through the HTTP API or the config
//! file. One read-ahead thread fills every stream's ring by deadline and
//! priority; one pacing thread per core sends every stream's packets from
//! one schedule; RTSP connections (all on one event loop thread) and the
//! API (on another) only edit the stream table.
//!
//! Safety: everything binds loopback by default; an API or RTSP on
//! another address needs a token (RTSP clients give it as password); no
//! stream goes anywhere but the requesting
//! client's own address or inside `--allow`; admission refuses what
//! `--max-rate` or the pacing threads cannot carry.

mod front;
mod hub;
mod nmos;
mod stream;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use nagare_api::serve::{ServeConfig, ServeReport};
use nagare_proto::BitRate;
use tracing::{info, warn};

use crate::cli;
use crate::net::udp::Interface;
use hub::access::Admission;
use hub::server::{Server, Settings, Stats};
use nagare_proto::rtsp::Credentials;
use nagare_proto::serve::{AllowList, Budget, Cidr, Token};

/// Command-line arguments of `nagare serve`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Directory of media: NAME.ts files, raw files with a NAME.toml
    /// sidecar (size, pix_fmt, fps) or NAME.sdp beside them.
    #[arg(long)]
    pub media: Option<PathBuf>,
    /// TOML config: extra [[media]] paths and [[streams]] to push at start.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// RTSP listen address (`:8554` is every interface).
    #[arg(long, default_value = "127.0.0.1:8554", value_parser = cli::parse_listen_address)]
    pub rtsp: SocketAddr,
    /// HTTP API listen address (`:8080` is every interface, and needs
    /// --token).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = cli::parse_listen_address)]
    pub http: SocketAddr,
    /// API token (or NAGARE_TOKEN): required when --http or --rtsp is
    /// not loopback; API clients send 'Authorization: Bearer TOKEN', RTSP
    /// clients use it as password (rtsp://USER:TOKEN@HOST:PORT/NAME).
    #[arg(long)]
    pub token: Option<String>,
    /// Ask RTSP clients for credentials (Basic or Digest, any user name,
    /// --token as password) even on a loopback --rtsp; off loopback they
    /// are always asked for.
    #[arg(long)]
    pub rtsp_auth: bool,
    /// Address block media may be sent to besides the client's own address
    /// (repeatable), e.g. 239.0.0.0/8 or 127.0.0.0/8.
    #[arg(long, value_parser = Cidr::parse)]
    pub allow: Vec<Cidr>,
    /// Refuse streams beyond this total rate (e.g. 2G, 500M).
    #[arg(long, value_parser = cli::parse_bit_rate)]
    pub max_rate: Option<u64>,
    /// Refuse streams that would keep a pacing or the read-ahead thread
    /// working more than this share of its time (0 to 1), measured or
    /// predicted from the admitted streams' datagrams and bytes a second.
    #[arg(long, default_value_t = 0.9)]
    pub max_load: f64,
    /// Refuse streams whose read-ahead rings would hold more than this in
    /// all (e.g. 4G, 512M; default: a quarter of the machine's memory).
    #[arg(long, value_parser = cli::parse_memory)]
    pub max_memory: Option<nagare_proto::ByteSize>,
    /// Pacing threads (default: one per core).
    #[arg(long)]
    pub pacers: Option<usize>,
    /// Insist on real-time (SCHED_FIFO) pacing threads and reader, failing
    /// without root or CAP_SYS_NICE. By default the pacing threads run
    /// SCHED_FIFO wherever that is allowed and safe, each placed on its
    /// own CPU from the highest down (docs/pacing.md).
    #[arg(long, conflicts_with = "no_realtime")]
    pub realtime: bool,
    /// Pace at normal priority even where real-time is allowed.
    #[arg(long)]
    pub no_realtime: bool,
    /// Where the pacing threads run: 'auto' places pacer k on the k-th
    /// highest CPU, 'none' places nothing.
    #[arg(long, default_value = "auto", value_name = "auto|none")]
    pub cpu: crate::net::placement::CpuChoice,
    /// RTSP sessions without a request or keep-alive this long are reaped.
    #[arg(long, default_value = "60", value_parser = cli::parse_seconds)]
    pub session_timeout: Duration,
    /// Play time each MPEG-TS ring reads ahead, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub read_ahead_ms: u64,
    /// Frames each raw video ring reads ahead.
    #[arg(long, default_value_t = 4)]
    pub ring_frames: usize,
    /// Interleaved packets queued per TCP reader; a reader that lets it
    /// fill is dropped.
    #[arg(long, default_value_t = 2048)]
    pub write_queue: usize,
    /// RTSP connections served at once (all on one thread, each a few
    /// KB and a descriptor); past it the longest idle is closed.
    #[arg(long, default_value_t = 16384)]
    pub max_connections: usize,
    /// Serve symbolic links in --media that lead out of it (refused by
    /// default: a link to /etc/passwd would be sent to any client).
    #[arg(long)]
    pub follow_symlinks: bool,
    /// RTSP connections from one client address at once (default: an
    /// eighth of --max-connections); past it that address's longest idle
    /// is closed, so one address cannot hold every slot.
    #[arg(long)]
    pub max_connections_per_address: Option<usize>,
    /// Rate of MPEG-TS files without PCR (e.g. 6M).
    #[arg(long, default_value = "6M", value_parser = cli::parse_bit_rate)]
    pub ts_rate: u64,
    /// Interface for multicast sends, by address (127.0.0.1) or name (lo).
    #[arg(long, value_parser = cli::parse_interface)]
    pub multicast_interface: Option<Interface>,
    /// The legs of each path's IS-05 sender: 2 offers an ST 2022-7 pair
    /// (two transport_params entries; an activation sends every packet
    /// to both, and the transport file has a=group:DUP). Stripe senders
    /// keep one: a cluster's second leg is another node's.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2), value_name = "1|2")]
    pub nmos_legs: u8,
    /// Print the final report as JSON on stdout when stopped.
    #[arg(long)]
    pub json: bool,
    /// NMOS registration and the node id's state directory.
    #[command(flatten)]
    pub registration: crate::nmos::register::RegistrationArgs,
}

/// `nagare serve`. Everything a user can get wrong (the config file,
/// the media, flag values, the token, the addresses) is checked before
/// anything is announced as listening, so an error is the last line and
/// the exit status is not 0.
pub(crate) fn main(args: ServeArgs) -> Result<ExitCode> {
    let config = match &args.config {
        Some(p) => read_config(p)?,
        None => ServeConfig::default(),
    };
    let media = hub::media::Catalog::scan(
        args.media.as_deref(),
        &config.media,
        BitRate(args.ts_rate),
        args.follow_symlinks,
    )?;
    let token = Token::new(
        args.token
            .clone()
            .or_else(|| std::env::var("NAGARE_TOKEN").ok()),
        args.http.ip().is_loopback(),
    )?;
    // Before anything is bound: RTSP reachable from the network without
    // credentials never listens, not even for a moment.
    let credentials = token
        .rtsp_credentials(args.rtsp.ip().is_loopback(), args.rtsp_auth)?
        .map(Arc::new);
    raise_descriptor_limit(args.max_connections);
    let rtsp_listener = TcpListener::bind(args.rtsp).with_context(|| {
        format!(
            "cannot listen for RTSP on {}: pick another --rtsp HOST:PORT",
            args.rtsp
        )
    })?;
    let http = TcpListener::bind(args.http).with_context(|| {
        format!(
            "cannot listen for HTTP on {}: pick another --http HOST:PORT",
            args.http
        )
    })?;
    let rtsp_addr = rtsp_listener.local_addr()?;
    let http_addr = http.local_addr()?;
    // The NMOS node names the API's bound address, so the server is built
    // once both are held; nothing accepts on them until `spawn`, and a
    // flag the server refuses ends serve before any "listening" line.
    let node = nmos_node(&args, http_addr, &token)?;
    let server = Arc::new(build(&args, media, token, node)?);
    // The config's streams start once both addresses are held (a busy
    // port is a config error too) and before either is announced: one
    // that cannot start ends serve before a client could connect.
    start_configured(&server, &config)?;
    let loops = front_loops()?;
    announce(&server, rtsp_addr, http_addr, credentials.is_some());
    let threads = spawn(&server, (rtsp_listener, http), credentials, loops)?;
    let registration = nmos_registration(&server, &args)?;
    while !server.stopping() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let report = shut_down(&server);
    for t in threads {
        let _ = t.join();
    }
    if let Some(r) = registration {
        r.finish();
    }
    print_report(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The lines saying serve is up (scripts wait for "rtsp listening on
/// ADDR" and "http listening on ADDR", the address last).
fn announce(server: &Server, rtsp_addr: SocketAddr, http_addr: SocketAddr, credentials: bool) {
    info!(
        paths = server.media.len(),
        pacers = server.pacers.threads(),
        "{} paths; RTSP listening on rtsp://{rtsp_addr}/NAME; HTTP API listening on \
         http://{http_addr}/; {} pacing threads",
        server.media.len(),
        server.pacers.threads()
    );
    info!(addr = %rtsp_addr, "rtsp listening on {rtsp_addr}");
    info!(addr = %http_addr, "http listening on {http_addr}");
    if credentials {
        info!("RTSP clients must give credentials (the --token as password)");
    }
}

fn read_config(path: &std::path::Path) -> Result<ServeConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --config '{}'", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "--config '{}' does not parse: it holds [[media]] and [[streams]] tables (see docs/serve.md)",
            path.display()
        )
    })
}

fn build(
    args: &ServeArgs,
    media: hub::media::Catalog,
    token: Token,
    nmos: nmos::Node,
) -> Result<Server> {
    if !(args.max_load > 0.0 && args.max_load <= 1.0) {
        anyhow::bail!("--max-load {} is out of range: 0 < L <= 1", args.max_load);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let crate::net::placement::CpuChoice::Cpu(c) = args.cpu {
        anyhow::bail!(
            "--cpu {c}: serve places one pacing thread per CPU itself; give --cpu auto or none"
        );
    }
    let pacers = stream::pacer::Pacers::start(
        args.pacers.unwrap_or(cores).clamp(1, 64),
        crate::net::tuning::Realtime::from_flags(args.realtime, args.no_realtime),
        crate::net::placement::Placement::new(args.cpu),
    )?;
    let reader = stream::reader::Reader::start(
        Duration::from_millis(args.read_ahead_ms),
        args.ring_frames,
        args.realtime,
    )
    .context("starting the read-ahead thread")?;
    Ok(Server {
        media,
        table: hub::table::Table::default(),
        pacers,
        reader,
        admission: Arc::new(Admission::new(Budget {
            max_rate: args.max_rate.map(BitRate),
            max_load: args.max_load,
            max_memory: Some(args.max_memory.unwrap_or_else(default_memory_budget)),
        })),
        allow: AllowList::new(args.allow.clone()),
        token,
        nmos,
        stats: Stats::default(),
        settings: Settings {
            session_timeout: args.session_timeout,
            write_queue: args.write_queue,
            multicast_interface: args.multicast_interface.clone(),
            send_buffer: 1 << 20,
            max_connections: args.max_connections,
            max_connections_per_address: args
                .max_connections_per_address
                .unwrap_or(args.max_connections / 8)
                .max(1),
        },
        started: Instant::now(),
        stop: crate::signal::stop_flag(),
        keyed: std::sync::Mutex::new(()),
    })
}

/// Starts the config file's streams; their client is the host itself.
fn start_configured(server: &Server, config: &ServeConfig) -> Result<()> {
    let me = IpAddr::from([127, 0, 0, 1]);
    for (k, req) in config.streams.iter().enumerate() {
        let pushed = server.push(req, me).map_err(|r| {
            anyhow!(
                "--config stream {} ('{}'): {}",
                k + 1,
                req.source,
                r.parts().1
            )
        })?;
        let destinations = req.destinations.join(", ");
        info!(
            stream = pushed.id(),
            source = %req.source,
            destinations = %destinations,
            "stream {}: {} to {destinations} (from --config)",
            pushed.id(),
            req.source,
        );
    }
    Ok(())
}

/// The NMOS node: its id from the state directory, its API where the
/// HTTP listener listens.
fn nmos_node(args: &ServeArgs, http: SocketAddr, token: &Token) -> Result<nmos::Node> {
    let dir = args.registration.state_dir();
    // The port asked for, not the one bound: 0 names no lasting node.
    let id = crate::nmos::identity::node_id(dir.as_deref(), args.http.port())?;
    let interface = args.multicast_interface.as_ref().map(|i| i.index);
    let legs = usize::from(args.nmos_legs);
    Ok(nmos::Node::new(
        id,
        http,
        !token.admits(None),
        interface,
        legs,
    ))
}

/// Starts NMOS registration when `--registry` or `--nmos-dns` asks for it.
fn nmos_registration(
    server: &Arc<Server>,
    args: &ServeArgs,
) -> Result<Option<crate::nmos::register::Registration>> {
    let (s, r) = (server.clone(), server.clone());
    let t = crate::nmos::register::start(
        &args.registration,
        server.nmos.id(),
        "serve-nmos",
        move || s.stopping(),
        move || r.nmos.resources(&r.media, &r.table.infos()),
    )?;
    Ok(t)
}

/// The front ends' event loops (RTSP's, the API's), built before either
/// address is announced: each takes descriptors, and a client that
/// connects as soon as it reads "listening" may take the last ones (a
/// full test run once had 247 RTSP connections in before the API's loop
/// was built, and the API never started).
fn front_loops() -> Result<(tokio::runtime::Runtime, tokio::runtime::Runtime)> {
    let rtsp = front::rtsp::runtime().context("RTSP cannot start")?;
    let http = front::listener::runtime().context("the HTTP API cannot start")?;
    Ok((rtsp, http))
}

/// Starts the two front ends, each on its own thread with its own event
/// loop.
fn spawn(
    server: &Arc<Server>,
    (rtsp_listener, http): (TcpListener, TcpListener),
    credentials: Option<Arc<Credentials>>,
    (rtsp_loop, http_loop): (tokio::runtime::Runtime, tokio::runtime::Runtime),
) -> Result<Vec<std::thread::JoinHandle<()>>> {
    let s = server.clone();
    let rtsp = std::thread::Builder::new()
        .name("serve-rtsp".into())
        .spawn(move || front::rtsp::serve(s, rtsp_listener, credentials, rtsp_loop))?;
    let s = server.clone();
    let api = std::thread::Builder::new()
        .name("serve-http".into())
        .spawn(move || front::listener::serve(s, http, http_loop))?;
    let s = server.clone();
    let is05 = std::thread::Builder::new()
        .name("serve-is05".into())
        .spawn(move || nmos::activate::run_scheduler(s))?;
    Ok(vec![rtsp, api, is05])
}

/// Raises the soft limit on open descriptors to the hard limit: each RTSP
/// connection holds one, and the default soft limit (1024) is far below
/// `--max-connections`. Says so when even the hard limit is lower.
fn raise_descriptor_limit(max_connections: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    // Files, pacing sockets and the API need some of them too.
    let wanted = max_connections as u64 + 256;
    if limit < wanted {
        warn!(
            limit,
            wanted,
            "at most {limit} open files (ulimit -n), fewer than the {wanted} that \
             --max-connections {max_connections} needs: past them RTSP stops accepting until \
             some close; raise the limit (ulimit -Hn, LimitNOFILE=) or lower --max-connections"
        );
    }
}

/// Stops every flow and collects the final counters.
fn shut_down(server: &Server) -> ServeReport {
    let streams = server.stop_all();
    for s in streams
        .iter()
        .filter(|s| s.kind == nagare_api::serve::StreamKind::Push)
    {
        hub::server::stopped(s, "the server stops");
    }
    let s = &server.stats;
    ServeReport {
        streams,
        rtsp_connections: s.rtsp_connections.load(Ordering::Relaxed),
        rtsp_refused: s.rtsp_refused.load(Ordering::Relaxed),
        rtsp_evicted: s.rtsp_evicted.load(Ordering::Relaxed),
        slow_readers_dropped: s.slow_readers.load(Ordering::Relaxed),
        api_refused: s.api_refused.load(Ordering::Relaxed),
        seconds: server.started.elapsed().as_secs_f64(),
        cpu_seconds: crate::clock::cpu_seconds(),
    }
}

/// The final report: serve's output (like send's summary), not a log,
/// so `-q` keeps it.
fn print_report(r: &ServeReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    eprintln!(
        "serve: stopped after {:.1} s ({:.2} CPU s); RTSP connections {}, refused requests {}, \
         evicted {}, slow readers dropped {}, API refusals {}",
        r.seconds,
        r.cpu_seconds,
        r.rtsp_connections,
        r.rtsp_refused,
        r.rtsp_evicted,
        r.slow_readers_dropped,
        r.api_refused
    );
    for s in &r.streams {
        let c = &s.counters;
        eprintln!(
            "serve: stream {} ({:?}, {}): packets {}, bytes {}, late {}, underruns {}, send errors {}, \
             queue drops {}, loops {}",
            s.id,
            s.kind,
            s.source,
            c.packets,
            c.bytes,
            c.late,
            c.underruns,
            c.send_errors,
            c.queue_drops,
            c.loops
        );
    }
    Ok(())
}

/// A quarter of the machine's memory: rings past it would leave the page
/// cache, which the read-ahead thread lives on, too little.
fn default_memory_budget() -> nagare_proto::ByteSize {
    // SAFETY: sysconf reads a value and has no other effect.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let total = u64::try_from(pages).unwrap_or(0) * u64::try_from(page).unwrap_or(0);
    // Unknown (sysconf failed): 1 GiB, enough for 2,000 small streams.
    nagare_proto::ByteSize(if total == 0 { 1 << 30 } else { total / 4 })
}
