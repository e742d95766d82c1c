//! The node id, kept in the state directory so a restarted node is the
//! same node to its registry and controllers; every other id is derived
//! from it (nagare-proto `nmos::ResourceId::derive`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use nagare_proto::nmos::ResourceId;

/// The default state directory: `$XDG_STATE_HOME/nagare`, else
/// `~/.local/state/nagare`.
pub(crate) fn default_state_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty());
    match xdg {
        Some(dir) => Some(PathBuf::from(dir).join("nagare")),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state/nagare")),
    }
}

/// A fresh random node id.
fn random_id() -> Result<ResourceId> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("drawing a node id: {e}"))?;
    Ok(ResourceId::from_random_bytes(bytes))
}

/// The id of the node whose API listens on `port`: read from
/// `DIR/nmos-node-PORT.id`, or drawn and written there the first time.
/// An ephemeral port (0) names no lasting node: its id is drawn each
/// start and kept nowhere.
pub(crate) fn node_id(state_dir: Option<&Path>, port: u16) -> Result<ResourceId> {
    let Some(dir) = state_dir.filter(|_| port != 0) else {
        return random_id();
    };
    let file = dir.join(format!("nmos-node-{port}.id"));
    match std::fs::read_to_string(&file) {
        Ok(text) => ResourceId::parse(&text).ok_or_else(|| {
            anyhow!(
                "'{}' does not hold a node id (a UUID); delete it to draw a new one",
                file.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = random_id()?;
            write_new(dir, &file, id).with_context(|| {
                format!(
                    "cannot keep the NMOS node id in '{}': give a writable --state-dir",
                    dir.display()
                )
            })?;
            Ok(id)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read '{}'", file.display())),
    }
}

fn write_new(dir: &Path, file: &Path, id: ResourceId) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    // Written aside and renamed: a crash never leaves half an id.
    let tmp = file.with_extension("id.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{id}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_survives_a_restart_and_port_zero_keeps_none() {
        let dir = std::env::temp_dir().join(format!("nagare-nmos-id-{}", std::process::id()));
        let a = node_id(Some(&dir), 8080).unwrap();
        let b = node_id(Some(&dir), 8080).unwrap();
        assert_eq!(a, b);
        assert_ne!(node_id(Some(&dir), 8081).unwrap(), a);
        assert_ne!(
            node_id(Some(&dir), 0).unwrap(),
            node_id(Some(&dir), 0).unwrap()
        );
        std::fs::write(dir.join("nmos-node-9.id"), "nonsense").unwrap();
        assert!(
            node_id(Some(&dir), 9)
                .unwrap_err()
                .to_string()
                .contains("delete it")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
