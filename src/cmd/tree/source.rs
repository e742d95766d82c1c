//! `nagare tree source`: capture, encode, coordinate the tree and relay
//! to the source's own (at most two) children.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crossbeam_channel::{Receiver, Sender, unbounded};
use nagare_proto::FrameRate;
use nagare_proto::screen::Encoder;
use nagare_proto::tree::relay::{Chunk, Limits};
use nagare_proto::tree::wire::{Control, PeerId, Role, SessionKey, proof_matches};
use nagare_proto::tree::{Placement, Topology};
use serde::Serialize;

use super::capture::Capture;
use super::fanout::{Fanout, Message};
use super::{
    SourceArgs, challenge, format_key, now_us, parse_key, random_key, read_control, refuse, send,
};

/// How long a new connection may take to say who it is.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

enum CoordEvent {
    Join(TcpStream, SocketAddr),
    Orphaned(PeerId, PeerId),
    Ready(PeerId),
    Left(PeerId),
}

struct Child(TcpStream, PeerId, Option<u64>);

#[derive(Serialize, Default)]
struct SourceReport {
    width: u32,
    height: u32,
    pixel_format: String,
    frames: u64,
    key_frames: u64,
    tiles: u64,
    bytes: u64,
    raw_bytes: u64,
    seconds: f64,
    fps: f64,
    mbit_per_s: f64,
    capture_ms_mean: f64,
    encode_ms_mean: f64,
    cpu_seconds: f64,
    lag_drops: u64,
    refreshes: u64,
    fingerprints: Vec<(u64, u64)>,
}

/// Runs the source until the input ends, --frames is reached, or Ctrl-C.
pub fn run(args: SourceArgs) -> anyhow::Result<ExitCode> {
    let rate: FrameRate = args
        .fps
        .parse()
        .with_context(|| format!("--fps {:?}; use e.g. 12 or 30000/1001", args.fps))?;
    let key = match &args.key {
        Some(k) => parse_key(k)?,
        None => random_key()?,
    };
    let (mut capture, format) = Capture::open(
        args.capture.as_deref(),
        args.input.as_deref(),
        &args.size,
        &args.pixel_format,
    )?;
    let mut encoder = Encoder::new(format, args.key_interval)
        .with_context(|| format!("screen {}x{}", format.width, format.height))?;
    let listener = TcpListener::bind(&args.listen).with_context(|| {
        format!(
            "listening on {}; pick another --listen HOST:PORT (port 0 picks a free one)",
            args.listen
        )
    })?;
    let local = listener.local_addr()?;
    let shown = if local.ip().is_unspecified() {
        format!("<this host's address>:{}", local.port())
    } else {
        local.to_string()
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening {local}")?;
        writeln!(out, "key {}", format_key(&key))?;
        writeln!(
            out,
            "join with: nagare tree join {shown} --key {}",
            format_key(&key)
        )?;
        if let Capture::X11(x) = &capture {
            writeln!(
                out,
                "capturing {}x{} through {}",
                format.width,
                format.height,
                if x.uses_shm() {
                    "MIT-SHM"
                } else {
                    "GetImage (no MIT-SHM)"
                }
            )?;
        }
        out.flush()?;
    }

    let (coord_tx, coord_rx) = unbounded();
    let (child_tx, child_rx) = unbounded();
    let ready = Arc::new(AtomicUsize::new(0));
    // Once the last frame is out peers leave on their own; repairing the
    // tree then would only pull them away from the end of the stream.
    let ending = Arc::new(AtomicBool::new(false));
    {
        let coord_tx = coord_tx.clone();
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || accept_loop(listener, key, coord_tx, child_tx))?;
    }
    {
        let (ready, ending) = (ready.clone(), ending.clone());
        std::thread::Builder::new()
            .name("coordinator".into())
            .spawn(move || coordinate(coord_rx, coord_tx, ready, ending))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed));
    }

    let mut fanout = Fanout::new(match args.lag_limit_kib {
        Some(kib) => Limits {
            lag: kib.saturating_mul(1024),
            resume: kib.saturating_mul(1024) / 8,
        },
        None => Limits::default(),
    });
    let welcome = Control::Welcome { format }.to_bytes();
    let admit = |fanout: &mut Fanout, rx: &Receiver<Child>| {
        for Child(mut stream, peer, version) in rx.try_iter() {
            if stream.write_all(&welcome).is_ok() {
                let _ = fanout.add(peer, stream, version);
            }
        }
    };
    if args.wait_peers > 0 {
        eprintln!("waiting for {} peers to attach", args.wait_peers);
        while ready.load(Ordering::Relaxed) < args.wait_peers {
            if stop.load(Ordering::Relaxed) {
                return Ok(ExitCode::from(130));
            }
            admit(&mut fanout, &child_rx);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    let mut report = SourceReport {
        width: format.width,
        height: format.height,
        pixel_format: format.pixel_format.to_string(),
        ..SourceReport::default()
    };
    let mut frame = vec![0u8; format.frame_bytes()];
    let (mut capture_s, mut encode_s) = (0.0, 0.0);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let mut n = 0u64;
    while args.frames.is_none_or(|f| n < f) && !stop.load(Ordering::Relaxed) {
        let due = start + Duration::from_nanos(rate.frame_start_ns(n) as u64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t0 = Instant::now();
        let captured_us = now_us();
        if !capture.next(&mut frame)? {
            break;
        }
        let t1 = Instant::now();
        admit(&mut fanout, &child_rx);
        fanout.catch_up(encoder.canvas());
        let encoded = encoder.encode(&frame, n, captured_us)?;
        let t2 = Instant::now();
        let base = if encoded.key { None } else { n.checked_sub(1) };
        let last = encoded.messages.len() - 1;
        for (i, m) in encoded.messages.into_iter().enumerate() {
            let chunk = match i {
                0 => Chunk::Start { number: n, base },
                _ if i == last => Chunk::End { number: n },
                _ => Chunk::Tiles,
            };
            fanout.offer(chunk, &Message::from(m));
        }
        capture_s += (t1 - t0).as_secs_f64();
        encode_s += (t2 - t1).as_secs_f64();
        report.frames += 1;
        report.key_frames += u64::from(encoded.key);
        report.tiles += encoded.tiles as u64;
        report.bytes += encoded.bytes as u64;
        report.raw_bytes += format.frame_bytes() as u64;
        if args.report.is_some() {
            report.fingerprints.push((n, super::fingerprint(&frame)));
        }
        n += 1;
    }
    ending.store(true, Ordering::Relaxed);
    fanout.finish(&Message::from(Control::End.to_bytes()));
    let secs = start.elapsed().as_secs_f64();
    report.seconds = secs;
    report.fps = report.frames as f64 / secs.max(1e-9);
    report.mbit_per_s = report.bytes as f64 * 8.0 / secs.max(1e-9) / 1e6;
    report.capture_ms_mean = capture_s * 1e3 / report.frames.max(1) as f64;
    report.encode_ms_mean = encode_s * 1e3 / report.frames.max(1) as f64;
    report.cpu_seconds = cpu_seconds() - cpu0;
    report.lag_drops = fanout.lag_drops;
    report.refreshes = fanout.refreshes;
    eprintln!(
        "sent {} frames in {:.1} s ({:.1} fps), {:.2} Mbit/s, {:.1}:1 compression",
        report.frames,
        secs,
        report.fps,
        report.mbit_per_s,
        report.raw_bytes as f64 / report.bytes.max(1) as f64
    );
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing report {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// CPU time this process used, user plus system.
pub fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; zeroed is valid.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn accept_loop(
    listener: TcpListener,
    key: SessionKey,
    coord: Sender<CoordEvent>,
    children: Sender<Child>,
) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (coord, children) = (coord.clone(), children.clone());
        let _ = std::thread::Builder::new()
            .name("handshake".into())
            .spawn(move || {
                if let Err(e) = handshake(stream, key, &coord, &children) {
                    eprintln!("refused a connection: {e:#}");
                }
            });
    }
}

fn handshake(
    mut stream: TcpStream,
    key: SessionKey,
    coord: &Sender<CoordEvent>,
    children: &Sender<Child>,
) -> anyhow::Result<()> {
    let peer_addr = stream.peer_addr()?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let nonce = challenge(&mut stream)?;
    let first = read_control(&mut stream)?;
    match first {
        Control::Join { proof, relay_port } => {
            if !proof_matches(&key, &nonce, Role::Join, &proof) {
                refuse(
                    &mut stream,
                    "wrong session key: use the key `nagare tree source` printed",
                );
                bail!("{peer_addr} tried to join with a wrong key");
            }
            stream.set_read_timeout(None)?;
            let _ = coord.send(CoordEvent::Join(
                stream,
                SocketAddr::new(peer_addr.ip(), relay_port),
            ));
        }
        Control::Attach {
            proof,
            peer,
            version,
        } => {
            if !proof_matches(&key, &nonce, Role::Attach, &proof) {
                refuse(
                    &mut stream,
                    "wrong session key: use the key `nagare tree source` printed",
                );
                bail!("{peer_addr} tried to attach with a wrong key");
            }
            let _ = children.send(Child(stream, peer, version));
        }
        other => bail!("{peer_addr} opened with {other:?} instead of join or attach"),
    }
    Ok(())
}

struct Member {
    control: TcpStream,
    relay: SocketAddr,
}

/// The coordinator: owns the topology, places joining peers and tells
/// exactly the peers whose parent changed after a leave or a failure.
fn coordinate(
    events: Receiver<CoordEvent>,
    tx: Sender<CoordEvent>,
    ready_count: Arc<AtomicUsize>,
    ending: Arc<AtomicBool>,
) {
    let mut topo = Topology::new();
    let mut members: BTreeMap<PeerId, Member> = BTreeMap::new();
    let mut ready: BTreeSet<PeerId> = BTreeSet::new();
    let place = |members: &mut BTreeMap<PeerId, Member>, p: Placement| {
        let parent_addr = match members.get(&p.parent) {
            Some(m) => m.relay,
            // The source: peers use the address they joined on.
            None => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        if let Some(m) = members.get_mut(&p.peer) {
            let msg = Control::Placed {
                peer: p.peer,
                slot: p.slot as u32,
                depth: p.depth,
                parent: p.parent,
                parent_addr,
            };
            let _ = send(&mut m.control, &msg);
        }
        println!(
            "placed {} slot {} depth {} under {}",
            p.peer, p.slot, p.depth, p.parent
        );
    };
    for ev in events {
        let repair = match ev {
            CoordEvent::Join(mut control, relay) => {
                let Some(p) = topo.join() else {
                    refuse(&mut control, "the tree is full");
                    continue;
                };
                let Ok(reader) = control.try_clone() else {
                    topo.leave(p.peer);
                    continue;
                };
                members.insert(p.peer, Member { control, relay });
                println!("joined {} from {relay}", p.peer);
                place(&mut members, p);
                let tx = tx.clone();
                let peer = p.peer;
                let _ = std::thread::Builder::new()
                    .name(format!("control-{}", peer.0))
                    .spawn(move || control_reader(reader, peer, tx));
                continue;
            }
            CoordEvent::Ready(peer) => {
                if topo.contains(peer) && ready.insert(peer) {
                    ready_count.store(ready.len(), Ordering::Relaxed);
                }
                continue;
            }
            CoordEvent::Left(_) | CoordEvent::Orphaned(..) if ending.load(Ordering::Relaxed) => {
                continue;
            }
            CoordEvent::Left(peer) => {
                if !topo.contains(peer) {
                    continue;
                }
                println!("left {peer}");
                topo.leave(peer)
            }
            CoordEvent::Orphaned(child, parent) => {
                println!("orphaned {child} reports {parent} gone");
                topo.orphaned(child, parent)
            }
        };
        if let Some(gone) = repair.removed {
            ready.remove(&gone);
            ready_count.store(ready.len(), Ordering::Relaxed);
            if let Some(m) = members.remove(&gone) {
                // Whether it left or was found dead, it is out of the tree;
                // closing its control link tells it so if it still runs.
                let _ = m.control.shutdown(Shutdown::Both);
            }
            println!(
                "removed {gone}; {} peers, depth {}",
                topo.len(),
                topo.depth()
            );
        }
        for p in repair.moves {
            place(&mut members, p);
        }
        debug_assert!(topo.check().is_ok());
    }
}

fn control_reader(mut stream: TcpStream, peer: PeerId, tx: Sender<CoordEvent>) {
    loop {
        match read_control(&mut stream) {
            Ok(Control::Orphaned { parent }) => {
                let _ = tx.send(CoordEvent::Orphaned(peer, parent));
            }
            Ok(Control::Ready) => {
                let _ = tx.send(CoordEvent::Ready(peer));
            }
            Ok(_) => {}
            Err(_) => {
                let _ = tx.send(CoordEvent::Left(peer));
                return;
            }
        }
    }
}
