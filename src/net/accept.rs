//! The accept loop of every HTTP and RTSP listener (serve's two front
//! ends, the NMOS API of `recv --nmos`), on its tokio event loop: accept
//! until told to stop, and survive running out of file descriptors (say
//! so once a second, wait for descriptors to come back, go on
//! accepting).

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use tracing::{error, warn};

/// How often the accept loop looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// Back-off after a failed accept (file descriptors exhausted).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Hands every connection `listener` accepts to `admit` until `stopping`
/// says so; `what` (HTTP, RTSP) names the front end in its messages.
pub(crate) async fn until_stopped(
    stopping: impl Fn() -> bool,
    listener: TcpListener,
    what: &str,
    mut admit: impl FnMut(tokio::net::TcpStream, SocketAddr),
) {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            error!(
                front = what,
                "the {what} listener cannot start ({e}); {what} is off"
            );
            return;
        }
    };
    let mut last_complaint: Option<Instant> = None;
    while !stopping() {
        let accepted = match tokio::time::timeout(STOP_CHECK, listener.accept()).await {
            Err(_) => continue,
            Ok(a) => a,
        };
        match accepted {
            Ok((stream, peer)) => admit(stream, peer),
            Err(e) => {
                if last_complaint.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    warn!(front = what, error = %e, "{what} accept failed: {e}; retrying");
                    last_complaint = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}
