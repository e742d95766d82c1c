//! How a cluster marks its legs on the nodes. Every stream the controller
//! creates carries the label `NAME/stripe K`, so `status`, `move` and
//! `stop` run from another process find the legs again, and a node's
//! stream table (which other users of the node share) tells which of its
//! streams are which stripe of this cluster. Each leg's idempotency key
//! adds the epoch frame it was asked to start at.

/// The label of stripe `stripe`'s legs of cluster `name`.
pub fn label(name: &str, stripe: usize) -> String {
    format!("{name}/stripe {stripe}")
}

/// The idempotency key of a leg of stripe `stripe` of cluster `name`
/// asked to start at `epoch_frame`: its label and the frame, so each leg
/// the controller asks for has its own key and every retry of it the
/// same one.
pub fn key(name: &str, stripe: usize, epoch_frame: u64) -> String {
    format!("{}@{epoch_frame}", label(name, stripe))
}

/// The stripe a node's stream labelled `label` sends for cluster `name`
/// of `stripes` stripes. None for anybody else's stream: another
/// cluster's, a label this cluster never writes (`+3`, `03`, spaces), or
/// a stripe beyond the split.
pub fn stripe_of(name: &str, stripes: usize, label: &str) -> Option<usize> {
    let digits = label.strip_prefix(name)?.strip_prefix("/stripe ")?;
    // Only the canonical spelling: the label is ours only if we wrote it.
    if !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    let k: usize = digits.parse().ok()?;
    (k < stripes).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_clusters_canonical_labels_name_a_stripe() {
        assert_eq!(label("wall", 3), "wall/stripe 3");
        assert_eq!(key("wall", 3, 44_000_000_000), "wall/stripe 3@44000000000");
        assert_eq!(stripe_of("wall", 8, "wall/stripe 3"), Some(3));
        assert_eq!(stripe_of("wall", 8, "wall/stripe 0"), Some(0));
        for other in [
            "wall/stripe 8",
            "wall/stripe +3",
            "wall/stripe 03",
            "wall/stripe  3",
            "wall/stripe 3 ",
            "wall/stripe ",
            "walls/stripe 3",
            "wal/stripe 3",
            "other/stripe 3",
            "wall/stripe 99999999999999999999999",
        ] {
            assert_eq!(stripe_of("wall", 8, other), None, "{other}");
        }
    }
}
