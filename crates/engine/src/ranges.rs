//! Sets of ranges `[start, end)` (pages or addresses) kept in a sorted `Vec`, apart: no
//! two overlap or touch. A region's holes are one ([`crate::region`]); the simulator's
//! unmapped address ranges another.

/// Adds `[start, end)`, merged with every range it overlaps or touches.
pub fn insert(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    let from = ranges.partition_point(|&(_, e)| e < start);
    let to = ranges.partition_point(|&(s, _)| s <= end);
    let merged = match ranges.get(from..to) {
        Some([head, .., tail]) => (head.0.min(start), tail.1.max(end)),
        Some([one]) => (one.0.min(start), one.1.max(end)),
        _ => (start, end),
    };
    ranges.splice(from..to, [merged]);
}

/// Takes `[start, end)` out: ranges inside it go, ranges across its edges are cut there.
pub fn remove(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    let mut kept = Vec::with_capacity(ranges.len() + 1);
    for &(s, e) in ranges.iter() {
        if e <= start || s >= end {
            kept.push((s, e));
            continue;
        }
        if s < start {
            kept.push((s, start));
        }
        if e > end {
            kept.push((end, e));
        }
    }
    *ranges = kept;
}

/// Whether a range overlaps `[start, end)`.
pub fn overlaps(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
    let at = ranges.partition_point(|&(_, e)| e <= start);
    ranges.get(at).is_some_and(|&(s, _)| s < end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_they_touch_and_split_when_cut() {
        let mut r = Vec::new();
        insert(&mut r, 10, 20);
        insert(&mut r, 30, 40);
        insert(&mut r, 20, 25);
        assert_eq!(r, [(10, 25), (30, 40)], "touching ranges merge");
        insert(&mut r, 5, 35);
        assert_eq!(r, [(5, 40)]);
        remove(&mut r, 12, 18);
        assert_eq!(r, [(5, 12), (18, 40)]);
        remove(&mut r, 0, 6);
        remove(&mut r, 39, 50);
        assert_eq!(r, [(6, 12), (18, 39)]);
        assert!(overlaps(&r, 11, 13) && overlaps(&r, 0, 7) && overlaps(&r, 38, 100));
        assert!(!overlaps(&r, 12, 18) && !overlaps(&r, 0, 6) && !overlaps(&r, 39, 40));
        remove(&mut r, 0, 100);
        assert!(r.is_empty());
    }
}
