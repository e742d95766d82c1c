//! A table of values named by generational ids: what the multi-flow
//! senders (`video::Sender`, `mpegts::Sender`) keep their flows in. A
//! removed value's slot is reused under a new generation, so an old id
//! (or a heap entry that still carries it) finds nothing instead of the
//! value that took its place.

/// Names a value of a [`Slots`]: its slot and that slot's generation.
/// Ordered by slot, then generation, so heap entries that carry it sort
/// as they did with the two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SlotId {
    index: u32,
    generation: u32,
}

impl SlotId {
    /// The slot: small and dense, reused after a removal.
    pub(crate) fn index(self) -> usize {
        self.index as usize
    }
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Values in reusable slots (see the module docs).
#[derive(Debug)]
pub(crate) struct Slots<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    /// Stores `value` in a free slot (or a new one) and names it.
    pub(crate) fn insert(&mut self, value: T) -> SlotId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        SlotId {
            index,
            generation: slot.generation,
        }
    }

    /// Takes the value `id` names out; its slot moves to a new generation.
    pub(crate) fn remove(&mut self, id: SlotId) -> Option<T> {
        let slot = self.slots.get_mut(id.index())?;
        if slot.generation != id.generation {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        Some(value)
    }

    /// The value `id` names, if it is still there.
    pub(crate) fn get(&self, id: SlotId) -> Option<&T> {
        let slot = self.slots.get(id.index())?;
        (slot.generation == id.generation)
            .then_some(slot.value.as_ref())
            .flatten()
    }

    /// The value `id` names, if it is still there.
    pub(crate) fn get_mut(&mut self, id: SlotId) -> Option<&mut T> {
        let slot = self.slots.get_mut(id.index())?;
        (slot.generation == id.generation)
            .then_some(slot.value.as_mut())
            .flatten()
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_its_old_id() {
        let mut s = Slots::default();
        let a = s.insert("a");
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.index(), b.index());
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 1);
    }
}
