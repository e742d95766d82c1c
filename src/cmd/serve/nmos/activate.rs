//! Carrying out IS-05 activations of serve's senders through the stream
//! table, exactly as `POST /v1/streams` does (the same destination
//! allow-list and admission, so IS-05 never sends where the HTTP API
//! would not): a path's sender starts a looping push stream of its path
//! to the activated destinations; `master_enable` false stops it. A
//! stripe's sender starts a `nagare cluster` leg: that stripe, its SSRC
//! and packet size from the path's `[stripes]`, beginning with the epoch
//! frame at the activation's instant. The `serve-is05` thread runs the
//! scheduled ones when due (a stripe's [`STRIPE_LEAD`] early).
//!
//! [`STRIPE_LEAD`]: super::senders::STRIPE_LEAD

use std::time::Duration;

use nagare_api::serve::{StreamRequest, StripeSpec};
use nagare_proto::cluster::is05;
use nagare_proto::nmos::connection::{Activation, Event};
use nagare_proto::nmos::model::activation_label;
use nagare_proto::nmos::{ResourceId, TaiTime};
use tracing::{info, warn};

use crate::cmd::serve::hub::server::{Pushed, Server, stopped};
use crate::cmd::serve::nmos::senders::{Sender, Target, tai_now};

/// How often the scheduler looks for a due activation at most (it sleeps
/// until the next one is due, but wakes this often for the stop flag).
const SCHEDULER_TICK: Duration = Duration::from_millis(20);

/// Priority of a stripe's reads: a cluster leg's, as `nagare cluster`
/// asks through the API.
const LEG_PRIORITY: u8 = 200;

/// Carries out `activation` for sender `id`: the old stream stops (IS-05
/// re-applies on every activation), a new one starts when
/// `master_enable` is true. The reason when it cannot.
pub(crate) fn apply(
    server: &Server,
    id: ResourceId,
    sender: &mut Sender,
    activation: &Activation,
) -> Result<(), String> {
    let (path, stripe) = match &sender.target {
        Target::Path(p) => (p.clone(), None),
        Target::Stripe { path, index } => (path.clone(), Some(*index)),
        Target::Push(stream, _) => {
            return Err(format!(
                "sender {id} is push stream {stream}, made through /v1/streams: stop or \
                 change it there, or connect its path's sender instead"
            ));
        }
    };
    if let Some(old) = sender.stream.take() {
        if let Some(info) = server.stop_stream(old) {
            stopped(&info, &format!("an IS-05 activation of sender {id}"));
        }
    }
    let setting = &activation.setting;
    let destinations: Vec<String> = setting
        .legs
        .iter()
        .filter(|l| l.enabled())
        .filter_map(|l| {
            Some(
                std::net::SocketAddr::new(l.ip("destination_ip")?, l.port("destination_port")?)
                    .to_string(),
            )
        })
        .collect();
    if !setting.master_enable || destinations.is_empty() {
        return Ok(());
    }
    // Built as a client's JSON is, so it takes every default a push
    // request takes.
    let mut request: StreamRequest = serde_json::from_value(serde_json::json!({
        "source": path,
        "destinations": destinations,
        "loop": true,
        "label": activation_label(id),
    }))
    .map_err(|e| format!("building the push request: {e}"))?;
    if let Some(k) = stripe {
        as_stripe(server, &path, k, activation.at, &mut request)?;
    }
    match server.push(&request, sender.client) {
        Ok(Pushed::Started(stream) | Pushed::Replayed(stream)) => {
            sender.stream = Some(stream);
            info!(
                stream, %id, path = %path,
                "IS-05: sender {id} sends '{path}' to {} (stream {stream})",
                destinations.join(", ")
            );
            Ok(())
        }
        Err(refusal) => {
            // The old stream is gone too: /active must say so.
            sender.conn.stopped();
            Err(refusal.parts().1)
        }
    }
}

/// Makes `request` a cluster leg: stripe `k` of what path `path` offers,
/// beginning with the epoch frame that starts at `at` (an immediate
/// activation: the next one the pacer can make).
fn as_stripe(
    server: &Server,
    path: &str,
    k: usize,
    at: Option<TaiTime>,
    request: &mut StreamRequest,
) -> Result<(), String> {
    let media = server
        .media
        .get(path)
        .ok_or_else(|| format!("path '{path}' is gone"))?;
    let (Some(offer), Some((_, rate))) = (media.stripes, media.raw_format()) else {
        return Err(format!("path '{path}' offers no stripes"));
    };
    request.stripe = Some(StripeSpec {
        split: offer.rule,
        count: offer.count,
        index: k,
    });
    request.ssrc = Some(offer.ssrc.wrapping_add(k as u32));
    if let Some(p) = offer.packet_size {
        request.pacing.packet_size = p;
    }
    request.priority = LEG_PRIORITY;
    request.epoch_frame = at.map(|t| is05::frame_at(rate, t));
    Ok(())
}

/// Carries out every scheduled activation when due, until the server
/// stops.
pub(crate) fn run_scheduler(server: std::sync::Arc<Server>) {
    while !server.stopping() {
        let now = tai_now();
        let next = server.nmos.connections(&server.media, &server.table.infos(), |table| {
            let mut next: Option<TaiTime> = None;
            for (id, sender) in table.iter_mut() {
                sender.conn.handle_timeout(now);
                while let Some(Event::Activate(a)) = sender.conn.poll_event() {
                    let result = apply(&server, *id, sender, &a);
                    if let Err(e) = sender.conn.complete(tai_now(), a, result) {
                        warn!(%id, "IS-05: the scheduled activation of sender {id} failed: {e}");
                    }
                }
                next = match (next, sender.conn.poll_timeout()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            next
        });
        let wait = next.map_or(SCHEDULER_TICK, |t| {
            let ns = tai_now().nanos_until(t);
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        });
        std::thread::sleep(wait.min(SCHEDULER_TICK));
    }
}
