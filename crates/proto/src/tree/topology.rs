//! Topology of the relay tree (seed 004): a balanced binary tree kept by
//! the coordinator (the source), with no I/O.
//!
//! Peers occupy slots in breadth-first order: slot 0 is the source, the
//! children of slot `s` are `2s+1` and `2s+2`. The slots in use are
//! always exactly `0..=N`, so the depth is `ceil(log2(N+1))` at most and
//! no parent has more than two children. A joining peer takes slot `N+1`
//! (the first free one in breadth-first order). When a peer leaves or
//! fails, the peer in the last slot (a leaf) moves into the hole: the
//! orphans re-attach to it, one hop from their old grandparent, and the
//! tree stays compact. Every change returns the peers whose parent
//! changed, so the coordinator can tell exactly those.

use std::collections::BTreeMap;

use super::wire::PeerId;

/// Most peers one tree takes; ids are never reused within a session.
pub const MAX_PEERS: usize = 1 << 16;

/// Where a peer sits and whom it streams from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The peer.
    pub peer: PeerId,
    /// Breadth-first slot (0 is the source).
    pub slot: usize,
    /// Hops from the source.
    pub depth: u32,
    /// The peer to attach to.
    pub parent: PeerId,
}

/// What a repair changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Repair {
    /// Peer removed from the tree, if one was.
    pub removed: Option<PeerId>,
    /// Peers that must attach to a new parent.
    pub moves: Vec<Placement>,
}

/// Depth of a breadth-first slot.
pub fn slot_depth(slot: usize) -> u32 {
    (slot + 1).ilog2()
}

/// The balanced binary tree of peers.
#[derive(Debug, Clone)]
pub struct Topology {
    slots: Vec<PeerId>,
    slot_of: BTreeMap<PeerId, usize>,
    next_id: u32,
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

impl Topology {
    /// A tree holding only the source.
    pub fn new() -> Self {
        Topology {
            slots: vec![PeerId::SOURCE],
            slot_of: BTreeMap::new(),
            next_id: 1,
        }
    }

    /// Peers in the tree (the source not counted).
    pub fn len(&self) -> usize {
        self.slots.len() - 1
    }

    /// Whether no peer has joined.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Depth of the deepest peer.
    pub fn depth(&self) -> u32 {
        slot_depth(self.slots.len() - 1)
    }

    /// Adds a peer in the first free slot; `None` when the tree is full.
    pub fn join(&mut self) -> Option<Placement> {
        if self.len() >= MAX_PEERS {
            return None;
        }
        let peer = PeerId(self.next_id);
        self.next_id = self.next_id.checked_add(1)?;
        let slot = self.slots.len();
        self.slots.push(peer);
        self.slot_of.insert(peer, slot);
        self.placement(peer)
    }

    /// Where `peer` sits, if it is in the tree.
    pub fn placement(&self, peer: PeerId) -> Option<Placement> {
        let slot = *self.slot_of.get(&peer)?;
        Some(Placement {
            peer,
            slot,
            depth: slot_depth(slot),
            parent: self.slots[(slot - 1) / 2],
        })
    }

    /// Whether `peer` is in the tree.
    pub fn contains(&self, peer: PeerId) -> bool {
        self.slot_of.contains_key(&peer)
    }

    /// Children of `peer` (or of the source).
    pub fn children(&self, peer: PeerId) -> Vec<PeerId> {
        let slot = if peer == PeerId::SOURCE {
            0
        } else {
            match self.slot_of.get(&peer) {
                Some(&s) => s,
                None => return Vec::new(),
            }
        };
        [2 * slot + 1, 2 * slot + 2]
            .into_iter()
            .filter_map(|c| self.slots.get(c).copied())
            .collect()
    }

    /// Peers in breadth-first order.
    pub fn peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.slots[1..].iter().copied()
    }

    /// Removes `peer` (left or failed) and moves the last peer into its
    /// slot. Returns the peers whose parent changed.
    pub fn leave(&mut self, peer: PeerId) -> Repair {
        let Some(slot) = self.slot_of.remove(&peer) else {
            return Repair::default();
        };
        // Invariant: slots holds the source plus every peer in slot_of,
        // and `peer` was there, so there is a last slot >= 1.
        let last = self.slots.len() - 1;
        let moved = self.slots.pop().unwrap_or(PeerId::SOURCE);
        let mut moves = Vec::new();
        if slot != last {
            self.slots[slot] = moved;
            self.slot_of.insert(moved, slot);
            moves.extend(self.placement(moved));
            for child in self.children(moved) {
                moves.extend(self.placement(child));
            }
        }
        Repair {
            removed: Some(peer),
            moves,
        }
    }

    /// `child` reports that its parent `parent` vanished. If the tree
    /// still has that link the parent is taken as failed and removed;
    /// otherwise the report is stale and `child` just hears its current
    /// placement again.
    pub fn orphaned(&mut self, child: PeerId, parent: PeerId) -> Repair {
        let Some(p) = self.placement(child) else {
            return Repair::default();
        };
        if p.parent == parent && parent != PeerId::SOURCE {
            let mut repair = self.leave(parent);
            if !repair.moves.iter().any(|m| m.peer == child) {
                repair.moves.extend(self.placement(child));
            }
            repair
        } else {
            Repair {
                removed: None,
                moves: vec![p],
            }
        }
    }

    /// Checks the invariants (for tests and debug assertions).
    pub fn check(&self) -> Result<(), String> {
        if self.slots.first() != Some(&PeerId::SOURCE) {
            return Err("slot 0 is not the source".into());
        }
        if self.slot_of.len() != self.len() {
            return Err("slot map and slots disagree in size".into());
        }
        for (s, p) in self.slots.iter().enumerate().skip(1) {
            if self.slot_of.get(p) != Some(&s) {
                return Err(format!("{p} in slot {s} is not mapped there"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn joins_fill_breadth_first() {
        let mut t = Topology::new();
        let p: Vec<Placement> = (0..7).map(|_| t.join().unwrap()).collect();
        let parents: Vec<u32> = p.iter().map(|p| p.parent.0).collect();
        assert_eq!(parents, [0, 0, 1, 1, 2, 2, 3]);
        let depths: Vec<u32> = p.iter().map(|p| p.depth).collect();
        assert_eq!(depths, [1, 1, 2, 2, 2, 2, 3]);
        assert_eq!(t.depth(), 3);
        assert_eq!(t.children(PeerId(1)), [PeerId(3), PeerId(4)]);
        assert_eq!(t.children(PeerId::SOURCE), [PeerId(1), PeerId(2)]);
    }

    #[test]
    fn inner_failure_moves_the_last_leaf_into_the_hole() {
        let mut t = Topology::new();
        for _ in 0..7 {
            t.join();
        }
        // Peer 2 (slot 2, children 5 and 6) fails; peer 7 (slot 7) is last.
        let r = t.leave(PeerId(2));
        assert_eq!(r.removed, Some(PeerId(2)));
        let moved: Vec<(u32, u32)> = r.moves.iter().map(|m| (m.peer.0, m.parent.0)).collect();
        assert_eq!(moved, [(7, 0), (5, 7), (6, 7)]);
        assert_eq!(t.children(PeerId(3)), []);
        t.check().unwrap();
    }

    #[test]
    fn leaving_last_peer_moves_nobody() {
        let mut t = Topology::new();
        for _ in 0..3 {
            t.join();
        }
        assert!(t.leave(PeerId(3)).moves.is_empty());
        assert_eq!(t.len(), 2);
        assert_eq!(t.leave(PeerId(99)), Repair::default());
    }

    #[test]
    fn leaving_parent_of_last_peer() {
        let mut t = Topology::new();
        for _ in 0..3 {
            t.join();
        }
        // Peer 3 is the only child of peer 1; it moves into slot 1.
        let r = t.leave(PeerId(1));
        let moved: Vec<(u32, u32)> = r.moves.iter().map(|m| (m.peer.0, m.parent.0)).collect();
        assert_eq!(moved, [(3, 0)]);
        t.check().unwrap();
    }

    #[test]
    fn orphan_report_removes_the_parent_once() {
        let mut t = Topology::new();
        for _ in 0..6 {
            t.join();
        }
        let r = t.orphaned(PeerId(3), PeerId(1));
        assert_eq!(r.removed, Some(PeerId(1)));
        assert!(
            r.moves
                .iter()
                .any(|m| m.peer == PeerId(3) && m.parent == PeerId(6))
        );
        // The sibling's report arrives late: it only hears its placement.
        let r = t.orphaned(PeerId(4), PeerId(1));
        assert_eq!(r.removed, None);
        assert_eq!(r.moves[0].parent, PeerId(6));
        // A child of the source cannot remove the source.
        let r = t.orphaned(PeerId(2), PeerId::SOURCE);
        assert_eq!(r.removed, None);
        t.check().unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join,
        Leave(usize),
        Orphan(usize),
    }

    proptest! {
        /// Through any sequence of joins, leaves and failures the tree
        /// stays compact and balanced, and every peer whose parent changed
        /// is told: peers that follow the returned moves always agree with
        /// the coordinator.
        #[test]
        fn peers_that_follow_moves_agree_with_the_tree(ops in prop::collection::vec(
            prop_oneof![3 => Just(Op::Join), 1 => any::<usize>().prop_map(Op::Leave), 1 => any::<usize>().prop_map(Op::Orphan)],
            0..200,
        )) {
            let mut t = Topology::new();
            let mut believed: BTreeMap<PeerId, PeerId> = BTreeMap::new();
            for op in ops {
                let peers: Vec<PeerId> = t.peers().collect();
                match op {
                    Op::Join => {
                        let p = t.join().unwrap();
                        believed.insert(p.peer, p.parent);
                    }
                    Op::Leave(i) if !peers.is_empty() => {
                        let gone = peers[i % peers.len()];
                        let r = t.leave(gone);
                        believed.remove(&gone);
                        for m in r.moves { believed.insert(m.peer, m.parent); }
                    }
                    Op::Orphan(i) if !peers.is_empty() => {
                        let child = peers[i % peers.len()];
                        let parent = believed[&child];
                        let r = t.orphaned(child, parent);
                        if let Some(gone) = r.removed { believed.remove(&gone); }
                        for m in r.moves { believed.insert(m.peer, m.parent); }
                    }
                    _ => {}
                }
                t.check().unwrap();
                let n = t.len();
                prop_assert_eq!(believed.len(), n);
                let max_depth = (n as u64 + 1).next_power_of_two().ilog2();
                for p in t.peers() {
                    let pl = t.placement(p).unwrap();
                    prop_assert_eq!(believed[&p], pl.parent);
                    prop_assert!(pl.depth <= max_depth);
                    prop_assert!(t.children(p).len() <= 2);
                }
            }
        }
    }
}
