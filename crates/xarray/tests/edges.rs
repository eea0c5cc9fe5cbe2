//! Named edge cases: index 0, `u64::MAX`, every order 0..=63 where it fits, the boundary
//! indices of `lib/test_xarray.c` (`1 << i`, `(1 << i) - 1`), bad input, dissolve-on-erase,
//! marks, memory accounting, and the regressions found by the model test.

use std::sync::Arc;
use xarray::{Entry, EntryRef, Error, Mark, NoItems, XArray, MAX_VALUE};

fn values(xa: &XArray<NoItems>) -> Vec<(u64, u32, u64)> {
    xa.iter().map(|(f, o, e)| (f, o, e.value().expect("value"))).collect()
}

fn aligned_top(order: u32) -> u64 {
    !((1u64 << order) - 1)
}

#[test]
fn index_zero_alone() {
    let mut xa = XArray::<NoItems>::new();
    assert!(xa.store(0, Entry::Value(7)).expect("store").is_none());
    xa.check_invariants();
    assert_eq!(xa.load(0).and_then(EntryRef::value), Some(7));
    assert_eq!(xa.load(1), None);
    assert_eq!(xa.get_order(0), Some(0));
    assert_eq!(xa.node_count(), 1);
    assert_eq!(xa.erase(0), Some(Entry::Value(7)));
    xa.check_invariants();
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

#[test]
fn u64_max_index() {
    let mut xa = XArray::<NoItems>::new();
    xa.store(u64::MAX, Entry::Value(1)).expect("store");
    xa.store(0, Entry::Value(2)).expect("store");
    xa.check_invariants();
    assert_eq!(xa.load(u64::MAX).and_then(EntryRef::value), Some(1));
    assert_eq!(xa.load(u64::MAX - 1), None);
    assert_eq!(values(&xa), [(0, 0, 2), (u64::MAX, 0, 1)]);
    assert_eq!(xa.iter_range(u64::MAX..=u64::MAX).count(), 1);
    // 11 levels: a root at shift 60 down to a leaf on each side.
    assert_eq!(xa.node_count(), 1 + 2 * 10);
    assert_eq!(xa.erase(u64::MAX), Some(Entry::Value(1)));
    xa.check_invariants();
    assert_eq!(xa.node_count(), 1, "erase trims the path and shrinks the height");
}

#[test]
fn every_order_at_both_ends() {
    for order in 0..=63 {
        for first in [0, aligned_top(order)] {
            let mut xa = XArray::<NoItems>::new();
            xa.store_order(first, order, Entry::Value(u64::from(order))).expect("store");
            xa.check_invariants();
            let last = first + ((1u64 << order) - 1);
            let middle = first + ((1u64 << order) >> 1);
            for index in [first, middle, last] {
                assert_eq!(xa.load_order(index).map(|(f, o, _)| (f, o)), Some((first, order)));
            }
            if first > 0 {
                assert_eq!(xa.load(first - 1), None, "order {order}");
            }
            if last < u64::MAX {
                assert_eq!(xa.load(last + 1), None, "order {order}");
            }
            assert_eq!(xa.len(), 1);
            assert_eq!(xa.iter().count(), 1);
            // Storing nothing into the last index dissolves the whole entry.
            assert_eq!(xa.erase(last), Some(Entry::Value(u64::from(order))));
            xa.check_invariants();
            assert!(xa.is_empty(), "order {order} at {first:#x}");
        }
    }
}

#[test]
fn boundary_indices() {
    let mut xa = XArray::<NoItems>::new();
    let mut keys: Vec<u64> = (0..64).flat_map(|i| [1u64 << i, (1u64 << i) - 1]).collect();
    keys.push(u64::MAX);
    keys.sort_unstable();
    keys.dedup();
    for &key in &keys {
        xa.store(key, Entry::Value(key >> 1)).expect("store");
        xa.check_invariants();
    }
    let got: Vec<u64> = xa.iter().map(|(f, _, _)| f).collect();
    assert_eq!(got, keys);
    for &key in &keys {
        assert_eq!(xa.load(key).and_then(EntryRef::value), Some(key >> 1));
        assert_eq!(xa.erase(key), Some(Entry::Value(key >> 1)));
        xa.check_invariants();
    }
    assert!(xa.is_empty());
}

#[test]
fn bad_input_is_an_error_and_changes_nothing() {
    let mut xa = XArray::<Arc<u64>>::new();
    xa.store_order(4096, 9, Entry::Value(3)).expect("store");
    let before: Vec<_> = xa.iter().map(|(f, o, e)| (f, o, e.value())).collect();
    let item = Arc::new(11u64);
    let cases: Vec<(u64, u32, Error)> = vec![
        (4097, 9, Error::Misaligned { index: 4097, order: 9 }),
        (0, 64, Error::OrderTooLarge { order: 64 }),
        (0, u32::MAX, Error::OrderTooLarge { order: u32::MAX }),
        (4096 + 8, 3, Error::Covered { index: 4096, order: 9 }),
        (4096 + 511, 0, Error::Covered { index: 4096, order: 9 }),
    ];
    for (index, order, error) in cases {
        let refused = xa.store_order(index, order, Entry::Item(Arc::clone(&item)));
        let refused = refused.expect_err("bad store accepted");
        assert_eq!(refused.error, error);
        assert!(matches!(refused.entry, Some(Entry::Item(ref p)) if Arc::ptr_eq(p, &item)));
        xa.check_invariants();
    }
    assert_eq!(Arc::strong_count(&item), 1, "refused entries come back, nothing leaks");
    let too_big = xa.store(1, Entry::Value(MAX_VALUE + 1)).expect_err("63-bit values");
    assert_eq!(too_big.error, Error::ValueTooLarge { value: MAX_VALUE + 1 });
    xa.store(1, Entry::Value(MAX_VALUE)).expect("the largest value fits");
    assert_eq!(xa.erase(1), Some(Entry::Value(MAX_VALUE)));
    assert_eq!(xa.split(4096, 10), Err(Error::SplitToLarger { order: 9, new_order: 10 }));
    assert_eq!(xa.split(0, 0), Err(Error::NotPresent { index: 0 }));
    xa.store_order(1 << 20, 20, Entry::Value(1)).expect("store");
    assert_eq!(xa.split(1 << 20, 7), Err(Error::SplitTooLarge { order: 20, new_order: 7 }));
    assert_eq!(xa.erase(1 << 20), Some(Entry::Value(1)));
    let after: Vec<_> = xa.iter().map(|(f, o, e)| (f, o, e.value())).collect();
    assert_eq!(before, after);
    xa.check_invariants();
    let stats = *xa.stats();
    assert_eq!(stats.refused_misaligned, 1);
    assert_eq!(stats.refused_order, 2);
    assert_eq!(stats.refused_covered, 2);
    assert_eq!(stats.refused_value, 1);
    assert_eq!(stats.refused_split, 2);
    assert_eq!(stats.refused_not_present, 1);
}

#[test]
fn storing_nothing_into_any_index_dissolves_the_entry() {
    let mut xa = XArray::<NoItems>::new();
    xa.store_order(512, 9, Entry::Value(9)).expect("store");
    xa.store(0, Entry::Value(1)).expect("store");
    assert_eq!(xa.erase(512 + 300), Some(Entry::Value(9)));
    xa.check_invariants();
    assert_eq!(values(&xa), [(0, 0, 1)]);
    // A range erase that touches one index of an entry erases all of it.
    xa.store_order(1024, 6, Entry::Value(6)).expect("store");
    let mut erased = Vec::new();
    let n = xa.erase_range(1087..=2000, |f, o, e| erased.push((f, o, e)));
    assert_eq!((n, erased), (1, vec![(1024, 6, Entry::Value(6))]));
    xa.check_invariants();
}

#[test]
fn store_over_smaller_entries_replaces_them_all() {
    let mut xa = XArray::<Box<u64>>::new();
    for index in 0..512 {
        xa.store(index, Entry::Item(Box::new(index))).expect("store");
    }
    xa.set_mark(100, Mark::M1);
    let mut replaced = 0;
    xa.store_order_with(0, 9, Entry::Value(5), |first, order, old| {
        assert_eq!((order, old), (0, Entry::Item(Box::new(first))));
        replaced += 1;
    })
    .expect("store");
    assert_eq!(replaced, 512);
    xa.check_invariants();
    assert_eq!(xa.len(), 1);
    assert!(xa.get_mark(0, Mark::M1), "the new entry keeps the union of the marks");
    assert_eq!(xa.node_count(), 1, "the leaves were freed; the order-9 entry sits at shift 6");
}

#[test]
fn split_shares_the_item_and_copies_marks() {
    let mut xa = XArray::<Arc<u64>>::new();
    let folio = Arc::new(42u64);
    xa.store_order(1 << 9, 9, Entry::Item(Arc::clone(&folio))).expect("store");
    xa.set_mark(1 << 9, Mark::M2);
    assert_eq!(XArray::<Arc<u64>>::split_nodes_needed(9, 0), 8);
    let before = xa.node_count();
    xa.split(700, 0).expect("split");
    xa.check_invariants();
    assert_eq!(xa.node_count() - before, 8);
    assert_eq!(xa.len(), 512);
    assert_eq!(Arc::strong_count(&folio), 513);
    for index in 512..1024 {
        let (first, order, entry) = xa.load_order(index).expect("piece");
        assert_eq!((first, order), (index, 0));
        assert!(std::ptr::eq(entry.item().expect("item"), &*folio));
        assert!(xa.get_mark(index, Mark::M2));
    }
    assert_eq!(xa.iter_marked(0..=u64::MAX, Mark::M2).count(), 512);
    drop(xa);
    assert_eq!(Arc::strong_count(&folio), 1, "dropping the array drops every piece");
}

#[test]
fn split_within_one_level() {
    let mut xa = XArray::<NoItems>::new();
    xa.store_order(0, 11, Entry::Value(1)).expect("store");
    xa.split(0, 8).expect("split");
    xa.check_invariants();
    assert_eq!(values(&xa), (0..8).map(|i| (i << 8, 8, 1)).collect::<Vec<_>>());
    assert_eq!(xa.node_count(), 1, "order 11 and order 8 both live at shift 6");
}

#[test]
fn replace_keeps_order_and_marks() {
    let mut xa = XArray::<Arc<u64>>::new();
    let folio = Arc::new(1u64);
    xa.store_order(1024, 4, Entry::Item(Arc::clone(&folio))).expect("store");
    xa.set_mark(1030, Mark::M0);
    let old = xa.replace(1033, Entry::Value(99)).expect("replace");
    assert!(matches!(old, Entry::Item(ref p) if Arc::ptr_eq(p, &folio)));
    assert_eq!(xa.load_order(1039).map(|(f, o, e)| (f, o, e.value())), Some((1024, 4, Some(99))));
    assert!(xa.get_mark(1024, Mark::M0));
    xa.check_invariants();
}

#[test]
fn compare_exchange_compares_items_by_identity() {
    let mut xa = XArray::<Arc<u64>>::new();
    let held = Arc::new(5u64);
    let twin = Arc::new(5u64);
    xa.store(77, Entry::Item(Arc::clone(&held))).expect("store");
    let refused = xa
        .compare_exchange(77, Some(EntryRef::Item(&twin)), Some(Entry::Value(1)))
        .expect_err("an equal value in another allocation is not the same entry");
    assert_eq!(refused.error, Error::Mismatch { index: 77 });
    assert_eq!(refused.entry, Some(Entry::Value(1)));
    let old = xa.compare_exchange(77, Some(EntryRef::Item(&held)), None).expect("cmpxchg");
    assert!(matches!(old, Some(Entry::Item(ref p)) if Arc::ptr_eq(p, &held)));
    assert!(xa.is_empty());
    assert_eq!(xa.compare_exchange(77, None, Some(Entry::Value(3))).expect("into empty"), None);
    assert_eq!(xa.load(77).and_then(EntryRef::value), Some(3));
    xa.check_invariants();
}

#[test]
fn marks_propagate_and_search_skips_unmarked_subtrees() {
    let mut xa = XArray::<NoItems>::new();
    for index in (0..1 << 18).step_by(97) {
        xa.store(index, Entry::Value(index)).expect("store");
    }
    let marked = [97 * 5, 97 * 1000, 97 * 2700];
    for index in marked {
        assert!(xa.set_mark(index, Mark::M1));
    }
    assert!(!xa.set_mark(1, Mark::M1), "no entry, no mark");
    xa.check_invariants();
    let found: Vec<u64> = xa.iter_marked(0..=u64::MAX, Mark::M1).map(|(f, _, _)| f).collect();
    assert_eq!(found, marked);
    assert_eq!(xa.find_marked(97 * 6, u64::MAX, Mark::M1).map(|(f, _, _)| f), Some(97 * 1000));
    assert_eq!(xa.find_marked(0, u64::MAX, Mark::M0), None);
    assert!(xa.clear_mark(97 * 1000, Mark::M1));
    xa.check_invariants();
    assert_eq!(xa.find_marked(97 * 6, 97 * 2000, Mark::M1), None);
    assert_eq!(xa.erase(97 * 2700), Some(Entry::Value(97 * 2700)));
    xa.check_invariants();
    assert_eq!(xa.iter_marked(0..=u64::MAX, Mark::M1).count(), 1);
}

#[test]
fn dense_array_costs_under_twelve_bytes_per_entry() {
    let mut xa = XArray::<NoItems>::new();
    let n = 1u64 << 16;
    for index in 0..n {
        xa.store(index, Entry::Value(index)).expect("store");
    }
    xa.check_invariants();
    // 1024 leaves + 16 + 1 interior nodes.
    assert_eq!(xa.node_count(), 1024 + 16 + 1);
    let per_entry = xa.memory_bytes() as f64 / n as f64;
    assert!(per_entry <= 12.0, "{per_entry} bytes per entry");
}

#[test]
fn multi_index_folios_use_a_fraction_of_the_nodes() {
    // The seed's experiment: 64 folios of 2 MiB (order 9).
    let mut multi = XArray::<NoItems>::new();
    let mut single = XArray::<NoItems>::new();
    for folio in 0..64u64 {
        multi.store_order(folio << 9, 9, Entry::Value(folio)).expect("store");
        for page in 0..512 {
            single.store((folio << 9) + page, Entry::Value(folio)).expect("store");
        }
    }
    multi.check_invariants();
    single.check_invariants();
    assert_eq!(multi.node_count(), 8 + 1);
    assert_eq!(single.node_count(), 512 + 8 + 1);
    assert!(multi.node_bytes() * 10 <= single.node_bytes());
}

#[test]
fn value_only_arrays_allocate_nothing_per_entry() {
    let mut xa = XArray::<NoItems>::new();
    xa.store_order(0, 6, Entry::Value(1)).expect("store");
    xa.store(64, Entry::Value(2)).expect("store");
    assert_eq!(xa.node_count(), 2);
    assert_eq!(xa.node_bytes(), 2 * 544);
}

#[test]
fn arrays_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<XArray<Arc<u64>>>();
    send_sync::<XArray<Box<u64>>>();
    send_sync::<XArray<NoItems>>();
}

#[test]
fn dropping_the_array_drops_every_item_once() {
    let item = Arc::new(3u64);
    let mut xa = XArray::new();
    for index in [0, 5, 1 << 30, u64::MAX] {
        xa.store(index, Entry::Item(Arc::clone(&item))).expect("store");
    }
    xa.store_order(4096, 12, Entry::Item(Arc::clone(&item))).expect("store");
    assert_eq!(Arc::strong_count(&item), 6);
    xa.clear();
    xa.check_invariants();
    assert_eq!((xa.len(), xa.node_count()), (0, 0));
    assert_eq!(Arc::strong_count(&item), 1);
    xa.store(9, Entry::Item(Arc::clone(&item))).expect("store after clear");
    drop(xa);
    assert_eq!(Arc::strong_count(&item), 1);
}

// postmortem: the forward scan computed the next index after a node's last slot and read
// its offset in the parent with `& 63`, which wrapped to slot 0 of the same parent when the
// child sat in the parent's last slot; iteration then reported the entry again at a
// phantom index (4032 seen as 4032 and 8128). The climb now moves by the child's offset in
// its parent and keeps climbing past a parent's last slot.
#[test]
fn iteration_does_not_wrap_past_a_node_end() {
    let mut xa = XArray::<NoItems>::new();
    xa.store(4032, Entry::Value(0)).expect("store");
    assert_eq!(values(&xa), [(4032, 0, 0)]);
    xa.store(u64::MAX - 63, Entry::Value(1)).expect("store");
    assert_eq!(values(&xa), [(4032, 0, 0), (u64::MAX - 63, 0, 1)]);
    assert_eq!(xa.iter_range(4033..=u64::MAX - 64).count(), 0);
}

// postmortem: splitting an entry that sat alone in the root's slot 0 (order 12 at index 0)
// into smaller entries turned slot 0 into a child node and left a root holding only that
// child, which `xas_shrink` would have removed; check_invariants caught it in the model
// test. The split now shrinks the tree afterwards.
#[test]
fn split_of_the_root_entry_shrinks_the_tree() {
    let mut xa = XArray::<NoItems>::new();
    xa.store_order(0, 12, Entry::Value(0)).expect("store");
    xa.split(0, 0).expect("split");
    xa.check_invariants();
    assert_eq!(xa.node_count(), 1 + 64);
    assert_eq!(xa.len(), 4096);
}

/// Iteration and range erasure go on from the last entry's node (`scan_after`): across
/// leaf boundaries, up two levels and back down, and past a root that a removal shrinks.
#[test]
fn runs_of_entries_cross_node_boundaries_at_every_level() {
    let mut xa = XArray::<NoItems>::new();
    let dense = 0..3 * 4096 + 100;
    for index in dense.clone() {
        xa.store(index, Entry::Value(index)).expect("store");
    }
    let seen: Vec<u64> = xa.iter_range(60..=9000).map(|(first, _, _)| first).collect();
    assert_eq!(seen, (60..=9000).collect::<Vec<_>>());
    // Crosses the boundary of a top-level child (4095 -> 4096) and of leaves.
    let mut erased = Vec::new();
    let n = xa.erase_range(4000..=8200, |first, order, _| erased.push((first, order)));
    assert_eq!(n, 4201);
    assert_eq!(erased, (4000..=8200).map(|first| (first, 0)).collect::<Vec<_>>());
    xa.check_invariants();
    let left: Vec<u64> = xa.iter().map(|(first, _, _)| first).collect();
    let expected: Vec<u64> = dense.filter(|index| !(4000..=8200).contains(index)).collect();
    assert_eq!(left, expected);
    // Everything above the first leaf goes: the root shrinks while the erasure runs.
    let n = xa.erase_range(64..=u64::MAX, |_, _, _| {});
    assert_eq!(n, expected.len() - 64);
    xa.check_invariants();
    assert_eq!(xa.iter().count(), 64);
}

/// A dense run of mixed orders, walked by an iterator that takes each next slot directly
/// (no search) while it holds an entry: every entry once, with its order, in a leaf and in a
/// node above leaves, ending inside the last entry, and resuming by a search after a gap.
#[test]
fn dense_runs_of_mixed_orders_are_walked_slot_by_slot() {
    let mut xa = XArray::<NoItems>::new();
    // Leaf: 0 (order 0), 1 (0), 2..=3 (1), 4..=7 (2), 8 (0); gap at 9; 10 (0), 11 (0).
    for (first, order) in [(0, 0), (1, 0), (2, 1), (4, 2), (8, 0), (10, 0), (11, 0)] {
        xa.store_order(first, order, Entry::Value(first)).expect("store");
    }
    // Above leaves: 4096..=4159 (6), 4160..=4223 (6), 4224..=4351 (7), then 4352 (0), in a
    // leaf below.
    for (first, order) in [(4096, 6), (4160, 6), (4224, 7), (4352, 0)] {
        xa.store_order(first, order, Entry::Value(first)).expect("store");
    }
    xa.check_invariants();
    let walk = |range: std::ops::RangeInclusive<u64>| -> Vec<(u64, u32, u64)> {
        let items = xa.iter_range(range);
        items.map(|(first, order, entry)| (first, order, entry.value().expect("a value"))).collect()
    };
    let leaf = [(0, 0, 0), (1, 0, 1), (2, 1, 2), (4, 2, 4), (8, 0, 8), (10, 0, 10), (11, 0, 11)];
    assert_eq!(walk(0..=11), leaf);
    assert_eq!(walk(1..=5), [(1, 0, 1), (2, 1, 2), (4, 2, 4)], "ends inside the last entry");
    assert_eq!(walk(3..=8), [(2, 1, 2), (4, 2, 4), (8, 0, 8)], "starts inside an entry");
    let high = [(4096, 6, 4096), (4160, 6, 4160), (4224, 7, 4224), (4352, 0, 4352)];
    assert_eq!(walk(4096..=4352), high);
    assert_eq!(walk(4100..=4230), [(4096, 6, 4096), (4160, 6, 4160), (4224, 7, 4224)]);
    let all: Vec<_> = leaf.iter().chain(high.iter()).copied().collect();
    assert_eq!(walk(0..=u64::MAX), all);
}
