//! The node's resources with their versions: a resource keeps its version
//! while its content stays the same and gets the current TAI time when it
//! changes, as IS-04 asks ("when an attribute of the resource last
//! changed"), so a registry and a controller see exactly what moved.

use super::id::ResourceId;
use super::resource::{Kind, Resource};
use super::version::TaiTime;

/// The current resources, in parent order.
#[derive(Debug, Clone, Default)]
pub struct Store {
    resources: Vec<Resource>,
}

impl Store {
    /// Replaces the resources with `fresh` (built with any version) at
    /// TAI time `now`: unchanged ones keep their version, new and changed
    /// ones get `now` (or one nanosecond past their old version, should
    /// the clock have stepped back). Answers whether anything changed.
    pub fn update(&mut self, now: TaiTime, fresh: Vec<Resource>) -> bool {
        let mut changed = fresh.len() != self.resources.len();
        let mut next = Vec::with_capacity(fresh.len());
        for mut r in fresh {
            match self.get(r.id()) {
                Some(old) if r.same_content(old) => r.core_mut().version = old.core().version,
                Some(old) => {
                    r.core_mut().version = now.max(old.core().version.next());
                    changed = true;
                }
                None => {
                    r.core_mut().version = now;
                    changed = true;
                }
            }
            next.push(r);
        }
        next.sort_by_key(Resource::kind);
        self.resources = next;
        changed
    }

    /// Moves resource `id`'s version to `at` if it is older: IS-05 asks
    /// for a new IS-04 version on every activation, even one that changed
    /// nothing the resource shows. Answers whether it moved.
    pub fn bump(&mut self, id: ResourceId, at: TaiTime) -> bool {
        match self.resources.iter_mut().find(|r| r.id() == id) {
            Some(r) if r.core().version < at => {
                r.core_mut().version = at;
                true
            }
            _ => false,
        }
    }

    /// Every resource, in parent order.
    pub fn all(&self) -> &[Resource] {
        &self.resources
    }

    /// The resource with this id.
    pub fn get(&self, id: ResourceId) -> Option<&Resource> {
        self.resources.iter().find(|r| r.id() == id)
    }

    /// The resources of one kind.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Resource> {
        self.resources.iter().filter(move |r| r.kind() == kind)
    }

    /// The node resource.
    pub fn node(&self) -> Option<&Resource> {
        self.of_kind(Kind::Node).next()
    }
}
