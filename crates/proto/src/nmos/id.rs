//! Resource ids: one random id per node, kept by the driver, and every
//! other id derived from it by name (UUID v5), so a path keeps its ids
//! across restarts without a table of them on disk.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The id of one NMOS resource (a UUID, lower-case hyphenated on the wire,
/// version 1 to 5 as the IS-04 schemas demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceId(Uuid);

impl ResourceId {
    /// A node id from 16 random bytes (the driver's random source): a
    /// version 4 UUID.
    pub fn from_random_bytes(bytes: [u8; 16]) -> ResourceId {
        ResourceId(uuid::Builder::from_random_bytes(bytes).into_uuid())
    }

    /// The id named `name` under this one (UUID v5 with this id as the
    /// namespace): the same node id and name give the same id on every
    /// start.
    pub fn derive(self, name: &str) -> ResourceId {
        ResourceId(Uuid::new_v5(&self.0, name.as_bytes()))
    }

    /// Parses the hyphenated text form (as kept in the state directory);
    /// `None` for anything else or a version outside 1 to 5.
    pub fn parse(text: &str) -> Option<ResourceId> {
        let id = Uuid::try_parse(text.trim()).ok()?;
        (1..=5)
            .contains(&id.get_version_num())
            .then_some(ResourceId(id))
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}
