//! Named edge cases of the allocator.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zpool::{ClassIndex, Error, Handle, PoolConfig, ZsPool, PAGE_SIZE};

fn pool() -> ZsPool {
    ZsPool::new(PoolConfig::with_max_bytes(64 << 20)).expect("valid config")
}

fn pattern(size: usize, seed: u8) -> Vec<u8> {
    (0..size).map(|i| (i as u8) ^ seed.wrapping_add((i >> 8) as u8)).collect()
}

fn store(pool: &ZsPool, size: usize, seed: u8) -> Handle {
    let handle = pool.malloc(size).expect("malloc");
    pool.write(handle, &pattern(size, seed));
    pool.check_invariants();
    handle
}

fn assert_holds(pool: &ZsPool, handle: Handle, size: usize, seed: u8) {
    let mut buf = vec![0u8; PAGE_SIZE];
    assert_eq!(pool.read(handle, &mut buf), size);
    assert_eq!(&buf[..size], &pattern(size, seed)[..]);
}

#[test]
fn sizes_at_class_edges_round_trip() {
    let pool = pool();
    let sizes = [1, 31, 32, 33, 4080, 4095, 4096];
    let handles: Vec<_> = sizes.iter().map(|&s| (s, store(&pool, s, s as u8))).collect();
    for &(size, handle) in &handles {
        assert_holds(&pool, handle, size, size as u8);
        let class = pool.classes().geometry(handle.class());
        assert!(class.size_bytes >= size && class.size_bytes < size.max(32) + 16 * 64);
        assert_eq!(pool.object_size(handle), size);
    }
    // 1, 31 and 32 share the smallest class; 33 goes to the next.
    assert_eq!(handles[0].1.class(), ClassIndex(0));
    assert_eq!(handles[2].1.class(), ClassIndex(0));
    assert_ne!(handles[3].1.class(), ClassIndex(0));
    // 4080..4096 are stored one per page.
    for &(_, handle) in &handles[4..] {
        assert!(pool.classes().geometry(handle.class()).is_huge());
    }
}

#[test]
fn invalid_sizes_are_refused_and_counted() {
    let pool = pool();
    assert_eq!(pool.malloc(0), Err(Error::InvalidSize { size: 0 }));
    assert_eq!(pool.malloc(4097), Err(Error::InvalidSize { size: 4097 }));
    assert_eq!(pool.counters().invalid_size, 2);
    assert_eq!(pool.pages_held(), 0);
    pool.check_invariants();
}

#[test]
fn invalid_config_is_refused() {
    let zero = ZsPool::new(PoolConfig::with_max_bytes(0));
    assert!(matches!(zero, Err(Error::InvalidConfig { what: "max_pages", .. })));
}

#[test]
fn objects_straddling_page_boundaries() {
    let pool = pool();
    // A 48-byte class: object 85 spans bytes 4080..4128 of the chain.
    let mut straddlers = Vec::new();
    for i in 0..300u32 {
        let handle = store(&pool, 48, i as u8);
        if pool.locate(handle).straddles {
            straddlers.push((handle, i as u8));
        }
    }
    assert!(!straddlers.is_empty(), "no object straddled a page edge");
    for &(handle, seed) in &straddlers {
        let at = pool.locate(handle);
        assert!(at.offset_bytes % PAGE_SIZE > PAGE_SIZE - 48);
        assert_holds(&pool, handle, 48, seed);
    }
}

#[test]
fn last_object_of_a_multipage_zspage() {
    let pool = pool();
    // The first class whose zspage chains more than one page and leaves a tail.
    let (index, geometry) = pool
        .classes()
        .iter()
        .find(|(_, g)| g.pages_per_zspage > 1 && g.size_bytes > 1000)
        .expect("a multi-page class");
    assert_eq!(pool.classes().class_of_size(geometry.size_bytes), Some(index));
    let size = geometry.size_bytes;
    let handles: Vec<_> =
        (0..geometry.objs_per_zspage).map(|i| store(&pool, size, i as u8)).collect();
    assert_eq!(pool.pages_held(), geometry.pages_per_zspage, "one zspage");
    let last = *handles.last().expect("objects");
    let at = pool.locate(last);
    assert!(at.last_in_zspage);
    assert_eq!(at.offset_bytes + size, geometry.objs_per_zspage * size);
    assert!(at.offset_bytes + size <= geometry.pages_per_zspage * PAGE_SIZE);
    assert!(at.offset_bytes / PAGE_SIZE == geometry.pages_per_zspage - 1 || at.straddles);
    for (i, &handle) in handles.iter().enumerate() {
        assert_holds(&pool, handle, size, i as u8);
    }
    // One more object needs a second zspage.
    let _extra = store(&pool, size, 0xee);
    assert_eq!(pool.pages_held(), 2 * geometry.pages_per_zspage);
}

#[test]
fn freeing_the_last_object_frees_the_zspage() {
    let pool = pool();
    let a = store(&pool, 700, 1);
    let b = store(&pool, 700, 2);
    assert!(pool.pages_held() > 0);
    pool.free(a);
    pool.check_invariants();
    assert!(pool.pages_held() > 0);
    pool.free(b);
    pool.check_invariants();
    assert_eq!(pool.pages_held(), 0);
    let counters = pool.counters();
    assert_eq!((counters.zspages_allocated, counters.zspages_freed), (1, 1));
}

#[test]
fn free_many_frees_runs_of_classes_and_keeps_the_rest() {
    let pool = pool();
    // Mixed classes, more than one batch (16), whole pages among them (one zspage each).
    let sizes = [PAGE_SIZE, PAGE_SIZE, 700, 700, PAGE_SIZE, 100, 100, 100, PAGE_SIZE];
    let stored: Vec<(Handle, usize, u8)> = (0..40u8)
        .map(|seed| {
            let size = sizes[usize::from(seed) % sizes.len()];
            (store(&pool, size, seed), size, seed)
        })
        .collect();
    let (freed, kept): (Vec<_>, Vec<_>) = stored.iter().partition(|(_, _, seed)| seed % 3 != 0);
    let handles: Vec<Handle> = freed.iter().map(|(handle, _, _)| *handle).collect();
    let before = pool.counters();
    pool.free_many(&handles);
    pool.check_invariants();
    let after = pool.counters();
    assert_eq!(after.frees - before.frees, handles.len() as u64);
    assert!(after.zspages_freed > before.zspages_freed, "whole-page objects free their zspages");
    for &(handle, size, seed) in &kept {
        assert_holds(&pool, handle, size, seed);
    }
    assert_eq!(pool.stats().objects, kept.len());
    let rest: Vec<Handle> = kept.iter().map(|(handle, _, _)| *handle).collect();
    pool.free_many(&rest);
    pool.check_invariants();
    assert_eq!(pool.pages_held(), 0);
}

#[test]
#[should_panic(expected = "stale handle")]
fn free_many_catches_a_double_free() {
    let pool = pool();
    let a = store(&pool, 100, 1);
    let b = store(&pool, 100, 2);
    pool.free_many(&[a, b, a]);
}

#[test]
#[should_panic(expected = "stale handle")]
fn double_free_is_caught() {
    let pool = pool();
    let a = store(&pool, 100, 1);
    let _keep = store(&pool, 100, 2);
    pool.free(a);
    pool.free(a);
}

#[test]
#[should_panic(expected = "stale handle")]
fn stale_handle_is_caught_after_slot_reuse() {
    let pool = pool();
    let a = store(&pool, 100, 1);
    pool.free(a);
    let _b = store(&pool, 100, 2); // reuses a's slot with a new generation
    let mut buf = [0u8; 100];
    pool.read(a, &mut buf);
}

#[test]
fn pool_full_is_refused_counted_and_harmless() {
    let pool = ZsPool::new(PoolConfig::with_max_bytes(2 * PAGE_SIZE)).expect("config");
    let a = store(&pool, 4096, 1);
    let b = store(&pool, 4096, 2);
    assert_eq!(pool.malloc(4096), Err(Error::PoolFull { size: 4096, limit_pages: 2 }));
    assert_eq!(pool.counters().pool_full, 1);
    pool.check_invariants();
    assert_holds(&pool, a, 4096, 1);
    pool.free(b);
    let c = store(&pool, 4096, 3);
    assert_holds(&pool, c, 4096, 3);
}

#[test]
fn accounting_counts_pages_and_metadata() {
    let pool = pool();
    let empty = pool.total_bytes();
    assert!(empty > 0 && empty < 64 << 10, "fixed metadata {empty}");
    let size = 1000;
    let geometry = pool.classes().geometry(pool.classes().class_of_size(size).expect("class"));
    let handles: Vec<_> = (0..100).map(|i| store(&pool, size, i as u8)).collect();
    let stats = pool.stats();
    let zspages = 100usize.div_ceil(geometry.objs_per_zspage);
    assert_eq!(stats.pages, zspages * geometry.pages_per_zspage);
    assert_eq!(stats.total_bytes, pool.total_bytes());
    assert_eq!(stats.total_bytes, (stats.pages * PAGE_SIZE + stats.metadata_bytes) as u64);
    assert_eq!(stats.object_bytes, 100 * size);
    assert_eq!(pool.object_bytes(), 100 * size as u64);
    // Metadata: the fixed part plus a few words per object and per zspage.
    assert!(stats.metadata_bytes < empty as usize + 100 * 64, "{}", stats.metadata_bytes);
    for handle in handles {
        pool.free(handle);
    }
    assert_eq!(pool.pages_held(), 0);
    pool.check_invariants();
}

#[test]
fn full_zspages_are_counted_unlisted_and_freed_from() {
    // Full zspages sit in no list: stats still count them, a free from one lists it again,
    // an allocation never lands in one, and a whole page is a full zspage from its store.
    let pool = pool();
    let size = 1000;
    let class = pool.classes().class_of_size(size).expect("class");
    let per = pool.classes().geometry(class).objs_per_zspage;
    let fullness = |pool: &ZsPool| {
        let stats = pool.stats();
        stats.classes.iter().find(|c| c.index == class).expect("class").fullness
    };
    let mut handles: Vec<_> = (0..3 * per + 1).map(|i| store(&pool, size, i as u8)).collect();
    let groups = fullness(&pool);
    assert_eq!(groups[groups.len() - 1], 3, "three full zspages: {groups:?}");
    assert_eq!(groups.iter().sum::<usize>(), 4, "and the one begun: {groups:?}");
    // Free from the first (full) zspage: it is listed again, below full.
    let freed = handles.remove(0);
    pool.free(freed);
    pool.check_invariants();
    let groups = fullness(&pool);
    assert_eq!(groups[groups.len() - 1], 2, "{groups:?}");
    assert_eq!(groups.iter().sum::<usize>(), 4, "{groups:?}");
    // The next allocation fills the fullest zspage with room: the one freed from.
    let before = pool.pages_held();
    handles.push(store(&pool, size, 200));
    assert_eq!(pool.pages_held(), before, "a zspage with room was used");
    let groups = fullness(&pool);
    assert_eq!(groups[groups.len() - 1], 3, "full again: {groups:?}");
    let page = store(&pool, PAGE_SIZE, 7);
    let huge = pool.stats().classes.into_iter().find(|c| c.geometry.is_huge() && c.objects == 1);
    let huge = huge.expect("the page's class");
    assert_eq!(huge.fullness[huge.fullness.len() - 1], 1, "a stored page is a full zspage");
    pool.free(page);
    for (i, handle) in handles.into_iter().enumerate() {
        if i > 0 {
            pool.free(handle);
        }
    }
    pool.check_invariants();
    assert_eq!(fullness(&pool).iter().sum::<usize>(), 1, "one object left, one zspage");
}

#[test]
fn compaction_frees_sparse_zspages_and_keeps_data() {
    let pool = pool();
    let size = 500;
    let handles: Vec<_> = (0..400).map(|i| store(&pool, size, i as u8)).collect();
    let before = pool.pages_held();
    // Free three of every four objects: every zspage becomes sparse.
    let mut kept = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        if i % 4 == 0 {
            kept.push((handle, i as u8));
        } else {
            pool.free(handle);
        }
    }
    pool.check_invariants();
    let stats = pool.compact();
    pool.check_invariants();
    assert!(stats.objects_moved > 0 && stats.zspages_freed > 0, "{stats:?}");
    assert!(pool.pages_held() <= before / 4 + 2, "{} of {before} pages", pool.pages_held());
    for &(handle, seed) in &kept {
        assert_holds(&pool, handle, size, seed);
    }
    // A second compaction finds nothing to do.
    assert_eq!(pool.compact().objects_moved, 0);
}

#[test]
fn compaction_moves_an_object_while_a_neighbour_is_read() {
    let pool = Arc::new(pool());
    let size = 200;
    let per_zspage = pool.classes().geometry(pool.classes().class_of_size(size).expect("class"));
    let n = per_zspage.objs_per_zspage;
    assert!(n >= 8, "B must end fuller than A");
    // Zspage A: fill it, then free all but two objects; zspage B: full minus two slots.
    let a: Vec<_> = (0..n).map(|i| store(&pool, size, i as u8)).collect();
    let b: Vec<_> = (0..n).map(|i| store(&pool, size, 100 + i as u8)).collect();
    for &h in &a[2..] {
        pool.free(h);
    }
    pool.free(b[0]);
    pool.free(b[1]);
    let (moving, neighbour) = (a[0], a[1]);
    let zspage_before = pool.locate(moving).zspage;
    assert_eq!(pool.locate(neighbour).zspage, zspage_before);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) || reads < 1000 {
                assert_holds(&pool, neighbour, size, 1);
                assert_holds(&pool, moving, size, 0);
                reads += 1;
            }
            reads
        })
    };
    let stats = pool.compact();
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().expect("reader");
    assert!(reads >= 1000);
    assert_eq!(stats.objects_moved, 2, "{stats:?}");
    assert_eq!(stats.zspages_freed, 1);
    assert_ne!(pool.locate(moving).zspage, zspage_before, "the object moved");
    assert_holds(&pool, moving, size, 0);
    assert_holds(&pool, neighbour, size, 1);
    pool.check_invariants();
}

#[test]
fn handle_raw_round_trip_through_the_pool() {
    let pool = pool();
    let handle = store(&pool, 321, 9);
    let raw = handle.to_raw();
    assert!(raw < 1 << 63);
    let back = Handle::from_raw(raw).expect("valid raw handle");
    assert_holds(&pool, back, 321, 9);
}

/// Every call `read_each` makes: (first index, objects, their bytes).
fn read_each_calls(pool: &ZsPool, handles: &[Handle]) -> Vec<(usize, usize, Vec<u8>)> {
    let (mut calls, mut scratch) = (Vec::new(), vec![0u8; PAGE_SIZE]);
    let result = pool.read_each::<()>(handles, &mut scratch, |i, n, bytes| {
        calls.push((i, n, bytes.to_vec()));
        Ok(())
    });
    assert_eq!(result, Ok(()));
    calls
}

#[test]
fn read_each_joins_whole_pages_lying_back_to_back() {
    let pool = pool();
    // Whole pages stored in turn into a fresh pool take consecutive pages of one chunk.
    let raw: Vec<Handle> = (0..16u8).map(|seed| store(&pool, PAGE_SIZE, seed)).collect();
    let small = store(&pool, 700, 99);
    let pages = |seeds: &[u8]| -> Vec<u8> {
        seeds.iter().flat_map(|&seed| pattern(PAGE_SIZE, seed)).collect()
    };
    let all: Vec<u8> = (0..16).collect();
    assert_eq!(read_each_calls(&pool, &raw), [(0, 16, pages(&all))], "one run, one slice");
    assert_eq!(pool.counters().pages_read_joined, 16);
    // An object that is not a whole page splits the run; it comes alone.
    let mixed = [raw[0], raw[1], small, raw[2], raw[3]];
    let want = [(0, 2, pages(&[0, 1])), (2, 1, pattern(700, 99)), (3, 2, pages(&[2, 3]))];
    assert_eq!(read_each_calls(&pool, &mixed), want);
    assert_eq!(pool.counters().pages_read_joined, 20);
    // Pages out of address order, or with a gap between them, come one by one.
    let reversed = [raw[3], raw[2], raw[1]];
    let want = [(0, 1, pages(&[3])), (1, 1, pages(&[2])), (2, 1, pages(&[1]))];
    assert_eq!(read_each_calls(&pool, &reversed), want);
    let gap = [raw[4], raw[6], raw[7]];
    assert_eq!(read_each_calls(&pool, &gap), [(0, 1, pages(&[4])), (1, 2, pages(&[6, 7]))]);
    assert_eq!(pool.counters().pages_read_joined, 22);
    pool.check_invariants();
}

#[test]
fn read_each_stops_at_the_first_error() {
    let pool = pool();
    let raw: Vec<Handle> = (0..4u8).map(|seed| store(&pool, PAGE_SIZE, seed)).collect();
    let (small, last) = (store(&pool, 100, 9), store(&pool, 100, 10));
    let handles = [small, raw[0], raw[1], raw[2], last];
    let mut seen = Vec::new();
    let mut scratch = vec![0u8; PAGE_SIZE];
    let result = pool.read_each(&handles, &mut scratch, |i, n, _| {
        seen.push((i, n));
        if i == 1 {
            Err("bad")
        } else {
            Ok(())
        }
    });
    assert_eq!(result, Err("bad"));
    assert_eq!(seen, [(0, 1), (1, 3)], "the run came whole, and nothing after the error");
}

#[test]
fn whole_pages_stored_again_from_the_spares_lie_back_to_back() {
    let pool = pool();
    // A folio's pages freed together become spares; the next folio stored takes them in
    // address order, so its read is one copy too (taken in reverse, none joined).
    let first: Vec<Handle> = (0..16u8).map(|seed| store(&pool, PAGE_SIZE, seed)).collect();
    pool.free_many(&first);
    let again: Vec<Handle> = (16..32u8).map(|seed| store(&pool, PAGE_SIZE, seed)).collect();
    let joined = pool.counters().pages_read_joined;
    let calls = read_each_calls(&pool, &again);
    assert_eq!(calls.len(), 1, "one slice, not {}", calls.len());
    assert_eq!(pool.counters().pages_read_joined - joined, 16);
    let want: Vec<u8> = (16..32u8).flat_map(|seed| pattern(PAGE_SIZE, seed)).collect();
    assert_eq!(calls[0].2, want);
    pool.check_invariants();
}
