//! What every evidence family keeps of processes that exited, after their live state is
//! dropped: their final reports, the [`MAX_ARCHIVED`] largest by what they moved or
//! registered; past that the smallest goes and is only counted. One bound and one rule for the
//! families (`mr::aggregate`, `storage::archive`). A leaf: imports nothing of the crate.

/// Final reports of exited processes kept, per family.
pub const MAX_ARCHIVED: usize = 256;

/// Which of the kept reports goes: the smallest by weight, of equals the one kept last.
/// `kept`: (what it is, its weight, the order it came in).
pub fn to_drop<T>(kept: impl Iterator<Item = (T, u64, u64)>) -> Option<T> {
    kept.min_by_key(|(_, weight, order)| (*weight, std::cmp::Reverse(*order))).map(|(t, _, _)| t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_smallest_goes_and_of_equals_the_newest() {
        let kept = [("a", 5, 0), ("b", 1, 1), ("c", 1, 2), ("d", 9, 3)];
        assert_eq!(super::to_drop(kept.into_iter()), Some("c"));
        assert_eq!(super::to_drop(std::iter::empty::<((), u64, u64)>()), None);
    }
}
