//! A node driven over NMOS IS-05 (`api = "nmos"`): its stripe senders
//! found once by label in its Node API, a leg started or halted by
//! PATCHing that sender's `/staged`. Which PATCHes, and for which
//! instant, is nagare-proto's `cluster::is05`; this reads the sender's
//! `/staged` and `/active` and sends what it says.

use std::net::SocketAddr;
use std::time::Duration;

use nagare_proto::cluster::is05;
use nagare_proto::nmos::TaiTime;
use serde_json::Value;

use super::client::{Failure, NodeClient};

const SENDERS: &str = "/x-nmos/node/v1.3/senders/";
const CONNECTION: &str = "/x-nmos/connection/v1.1/single/senders";

/// The id of the node's sender labelled with each of `labels` (in
/// order), `None` where it has none.
pub(super) fn find_senders(
    client: &NodeClient,
    labels: &[String],
    timeout: Duration,
) -> Result<Vec<Option<String>>, Failure> {
    let all = client.get_json(SENDERS, timeout)?;
    let Some(all) = all.as_array() else {
        return Err(Failure::Unanswered(
            "its IS-04 senders/ is not a JSON array".into(),
        ));
    };
    Ok(labels
        .iter()
        .map(|l| {
            all.iter()
                .find(|s| s["label"].as_str() == Some(l))
                .and_then(|s| s["id"].as_str())
                .map(str::to_string)
        })
        .collect())
}

fn staged_and_active(
    client: &NodeClient,
    sender: &str,
    timeout: Duration,
) -> Result<(Value, Value), Failure> {
    let staged = client.get_json(&format!("{CONNECTION}/{sender}/staged"), timeout)?;
    let active = client.get_json(&format!("{CONNECTION}/{sender}/active"), timeout)?;
    Ok((staged, active))
}

fn patch_all(
    client: &NodeClient,
    sender: &str,
    patches: &[Value],
    timeout: Duration,
) -> Result<(), Failure> {
    let staged = format!("{CONNECTION}/{sender}/staged");
    for body in patches {
        client.patch_json(&staged, body, timeout)?;
    }
    Ok(())
}

/// Has `sender` send to `destination` from TAI `at` (`None`: from the
/// next frame it can make).
pub(super) fn enable(
    client: &NodeClient,
    sender: &str,
    destination: SocketAddr,
    at: Option<TaiTime>,
    timeout: Duration,
) -> Result<(), Failure> {
    let (staged, active) = staged_and_active(client, sender, timeout)?;
    let patches = is05::enable(&staged, &active, destination, at);
    patch_all(client, sender, &patches, timeout)
}

/// Stops `sender`, whatever it does; `listed` when the node's stream
/// table holds a stream it started.
pub(super) fn halt(
    client: &NodeClient,
    sender: &str,
    listed: bool,
    timeout: Duration,
) -> Result<(), Failure> {
    let (staged, active) = staged_and_active(client, sender, timeout)?;
    let patches = is05::halt(&staged, &active, listed);
    patch_all(client, sender, &patches, timeout)
}
