//! `nagare recv --nmos`: an NMOS node with one IS-05 receiver. It serves
//! the IS-04 Node API and the IS-05 Connection API (the shared routes of
//! `crate::nmos` on their own small listener), registers with a registry
//! when asked (`--registry`, `--nmos-dns`), and receives what a
//! controller connects it to: an activation with `master_enable` true
//! starts the same receive as `recv --sdp` with the staged transport
//! file ([`session`]), or, with none staged, as `recv --listen` with the
//! format `--size`, `--pix-fmt` and `--fps` fix (the receiver's caps then
//! name only that format); `master_enable` false, a new activation or a stop
//! signal ends it, the recording flushed. Each receive writes `-o` anew
//! (or appends, with `--append`).

mod node;
mod session;

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nagare_proto::serve::Token;

use crate::engine::recv::RecvArgs;
use crate::nmos::host::Host;
use crate::nmos::{api, http, identity, register};
use node::RecvNode;

/// How often scheduled activations and a session's end are looked for
/// at most (and the stop flag).
const TICK: Duration = Duration::from_millis(20);

/// `nagare recv --nmos`.
pub(crate) fn main(args: RecvArgs) -> Result<ExitCode> {
    if args.json && args.output.as_deref().is_some_and(crate::cli::is_stdio) {
        bail!("--json prints on stdout, where -o - writes the frames: drop one, or give -o a file");
    }
    // A format fixed by --size and --pix-fmt must be one recv takes
    // before any controller connects the receiver.
    let fixed = args.fixed_format()?.map(|f| (f, args.fps));
    let given = args
        .token
        .clone()
        .or_else(|| std::env::var("NAGARE_TOKEN").ok());
    let loopback = args.nmos_http.ip().is_loopback();
    if given.is_none() && !loopback {
        bail!(
            "--nmos-http {} is not loopback, so anyone who reaches it could connect the \
             receiver: give --token TOKEN (or NAGARE_TOKEN), or bind it with --nmos-http \
             127.0.0.1:8081",
            args.nmos_http
        );
    }
    let token = Token::new(given, loopback)?;
    let listener = TcpListener::bind(args.nmos_http).with_context(|| {
        format!(
            "cannot listen for the NMOS APIs on {}: pick another --nmos-http ADDR:PORT",
            args.nmos_http
        )
    })?;
    let http_addr = listener.local_addr()?;
    // The port asked for, not the one bound: 0 names no lasting node.
    let dir = args.registration.state_dir();
    let id = identity::node_id(dir.as_deref(), args.nmos_http.port())?;
    let interface = args.interface.as_ref().map(|i| i.index);
    let host = Host::read(id, "nagare recv", http_addr, !token.admits(None), interface);
    let node = Arc::new(RecvNode::new(args.clone(), host, fixed));
    let stop = crate::signal::stop_flag();
    let stopping = move || stop.load(Ordering::Relaxed);

    let n = Arc::clone(&node);
    let handler: Arc<http::Handler> =
        Arc::new(move |req: &api::Request<'_>| api::answer(&*n, &token, req));
    let api_thread = std::thread::Builder::new()
        .name("recv-nmos-http".into())
        .spawn(move || http::serve(listener, stopping, handler))?;
    eprintln!("nagare recv: http listening on {http_addr}");
    eprintln!(
        "nagare recv: NMOS receiver {} (node {}); connect it through \
         http://{http_addr}/x-nmos/connection/v1.1/single/receivers/{}/staged",
        node.receiver(),
        node.id(),
        node.receiver()
    );
    let n = Arc::clone(&node);
    let registration = register::start(
        &args.registration,
        node.id(),
        "recv-nmos",
        stopping,
        move || n.resources(),
    )?;
    while !stopping() {
        node.tick();
        std::thread::sleep(node.next_due().map_or(TICK, |d| d.min(TICK)));
    }
    node.shut_down();
    let _ = api_thread.join();
    if let Some(r) = registration {
        r.finish();
    }
    Ok(ExitCode::SUCCESS)
}
