//! The arena's unit tests.

use super::*;
use proptest::prelude::*;

#[test]
fn pages_join_back_to_back_within_a_chunk_only() {
    // Two chunks side by side in one allocation: the pages around their edge lie back
    // to back in memory, yet belong to two chunks (two allocations in the arena).
    let layout = Layout::from_size_align(2 * CHUNK_BYTES, CHUNK_BYTES).unwrap();
    // SAFETY: a non-zero size; freed below.
    let base = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!base.is_null());
    // PoolPage has no Drop: these are views, the allocation is freed once below.
    let page = |i: usize| {
        // SAFETY: in bounds of the allocation.
        let ptr = unsafe { base.add(i * PAGE_SIZE) };
        // SAFETY: each page's first byte, through the allocation's own pointer.
        unsafe { *ptr = i as u8 };
        PoolPage(NonNull::new(ptr.cast()).unwrap())
    };
    let (a, b, c) = (page(10), page(11), page(12));
    assert!(follows(&a, &b) && follows(&b, &c) && !follows(&a, &c) && !follows(&b, &a));
    let joined = join(&[&a, &b, &c]).expect("three pages back to back");
    assert_eq!(joined.len(), 3 * PAGE_SIZE);
    assert_eq!([joined[0], joined[PAGE_SIZE], joined[2 * PAGE_SIZE]], [10, 11, 12]);
    assert_eq!(join(&[&a, &c]), None, "a gap");
    assert_eq!(join(&[&b, &a]), None, "out of order");
    assert_eq!(join(&[]), None);
    let (last, next) = (page(CHUNK_PAGES - 1), page(CHUNK_PAGES));
    assert!(!follows(&last, &next), "across two chunks");
    assert_eq!(join(&[&last, &next]), None);
    assert_eq!(join(&[&last]).map(<[u8]>::len), Some(PAGE_SIZE));
    // SAFETY: allocated above with this layout; the views are not used after.
    unsafe { std::alloc::dealloc(base, layout) };
}

#[test]
fn resident_runs_are_found_across_words_and_stop_at_released_pages() {
    let mut state = ArenaState::default();
    let mut chunk =
        Chunk { free: [0; WORDS], released: [0; WORDS], free_pages: 0, huge: false, seq: 0 };
    let mut set = |pages: std::ops::Range<usize>, released: bool| {
        for page in pages {
            let (word, mask) = bit(page);
            chunk.free[word] |= mask;
            if released {
                chunk.released[word] |= mask;
            }
        }
    };
    set(10..20, true); // free but released: not resident
    set(60..200, false); // crosses two word edges
    set(200..201, true); // ends the run
    set(300..512, false); // runs to the chunk's end
    state.chunks.insert(CHUNK_BYTES, chunk);
    state.by_seq.insert(0, CHUNK_BYTES);
    assert_eq!(first_resident_run(&state), Some((CHUNK_BYTES, 60, 140)));
    let chunk = state.chunks.get_mut(&CHUNK_BYTES).unwrap();
    for page in 60..200 {
        let (word, mask) = bit(page);
        chunk.released[word] |= mask;
    }
    assert_eq!(first_resident_run(&state), Some((CHUNK_BYTES, 300, 212)));
}

/// Between chunks as full as each other, a page comes from the one taken first from
/// the global allocator, wherever the allocator put it: an arena keyed by address
/// chose by address, and the simulator replayed a seed to another digest when the
/// allocator's addresses came in another order (they do: its mappings grow downwards,
/// its heap upwards).
#[test]
fn the_first_chunk_taken_serves_first_wherever_it_lies() {
    let arena = PageArena::new();
    let mut pages: Vec<PoolPage> = (0..2 * CHUNK_PAGES + 1).filter_map(|_| arena.alloc()).collect();
    let chunk_of = |page: &PoolPage| page.addr() & !(CHUNK_BYTES - 1);
    let (first, second) = (chunk_of(&pages[0]), chunk_of(&pages[CHUNK_PAGES]));
    assert_ne!(first, second);
    // A hundred pages free in each of the two full chunks: the same bucket.
    let mut freed = 0;
    for chunk in [second, first] {
        while let Some(i) = pages.iter().position(|p| chunk_of(p) == chunk) {
            arena.free(pages.swap_remove(i));
            freed += 1;
            if freed % 100 == 0 {
                break;
            }
        }
    }
    arena.check_invariants();
    let next = arena.alloc().unwrap();
    assert_eq!(chunk_of(&next), first, "first {first:#x}, second {second:#x}");
    pages.push(next);
    for page in pages.drain(..) {
        arena.free(page);
    }
    arena.check_invariants();
}

#[test]
fn pages_are_distinct_aligned_and_come_back() {
    let arena = PageArena::new();
    let mut pages: Vec<PoolPage> = (0..CHUNK_PAGES + 3).filter_map(|_| arena.alloc()).collect();
    assert_eq!(pages.len(), CHUNK_PAGES + 3);
    for (i, page) in pages.iter_mut().enumerate() {
        assert_eq!(page.addr() % PAGE_SIZE, 0);
        assert!(page.iter().all(|&b| b == 0), "a fresh page is zeroed");
        page[0] = i as u8;
        page[PAGE_SIZE - 1] = (i >> 8) as u8;
    }
    arena.check_invariants();
    assert_eq!(arena.stats().chunks, 2);
    for (i, page) in pages.iter().enumerate() {
        assert_eq!((page[0], page[PAGE_SIZE - 1]), (i as u8, (i >> 8) as u8));
    }
    for page in pages.drain(..) {
        arena.free(page);
        arena.check_invariants();
    }
    let stats = arena.stats();
    assert_eq!((stats.chunks, stats.chunks_empty, stats.pages_in_use), (2, 2, 0));
    assert_eq!((stats.chunks_freed, stats.pages_free_resident), (0, 0), "kept, released");
    // A kept chunk serves again: its pages come back zeroed (the kernel's, after the
    // release), and no new chunk is taken.
    let again: Vec<PoolPage> = (0..3).filter_map(|_| arena.alloc()).collect();
    assert!(again.iter().all(|p| p.iter().all(|&b| b == 0)));
    let stats = arena.stats();
    assert_eq!((stats.chunks, stats.chunks_empty, stats.chunks_allocated), (2, 1, 2));
    arena.check_invariants();
    again.into_iter().for_each(|page| arena.free(page));
    arena.check_invariants();
    assert_eq!(arena.stats().chunks_empty, 2);
}

#[test]
fn allocation_fills_the_fullest_chunk_and_trim_releases() {
    let arena = PageArena::new();
    let pages: Vec<PoolPage> = (0..2 * CHUNK_PAGES).filter_map(|_| arena.alloc()).collect();
    let first_base = pages[0].addr() & !(CHUNK_BYTES - 1);
    let (first, second): (Vec<_>, Vec<_>) =
        pages.into_iter().partition(|p| p.addr() & !(CHUNK_BYTES - 1) == first_base);
    // Free most of the first chunk and two pages of the second: a new page comes from
    // the second (fuller) chunk.
    let mut first = first;
    let keep = first.split_off(CHUNK_PAGES - 4);
    let mut second = second;
    for page in first {
        arena.free(page);
    }
    arena.free(second.pop().unwrap());
    arena.free(second.pop().unwrap());
    arena.check_invariants();
    let again = arena.alloc().unwrap();
    let second_base = second[0].addr() & !(CHUNK_BYTES - 1);
    assert_eq!(again.addr() & !(CHUNK_BYTES - 1), second_base, "fullest chunk first");
    assert!(arena.trim() > 0);
    arena.check_invariants();
    let stats = arena.stats();
    assert_eq!(stats.pages_free_resident, 0);
    // A released page comes back zeroed.
    let mut reused: Vec<PoolPage> = (0..2).filter_map(|_| arena.alloc()).collect();
    assert!(reused.iter().all(|p| p.iter().all(|&b| b == 0)));
    reused.iter_mut().for_each(|p| p[7] = 7);
    for page in keep.into_iter().chain(second).chain(reused).chain([again]) {
        arena.free(page);
    }
    arena.check_invariants();
    assert_eq!(arena.stats().chunks, arena.stats().chunks_empty);
}

#[test]
fn a_chunk_is_huge_and_resident_whole_only_from_sixteen_mib_in_use() {
    let arena = PageArena::new();
    let small: Vec<PoolPage> = (0..HUGE_FROM_PAGES).filter_map(|_| arena.alloc()).collect();
    let stats = arena.stats();
    assert_eq!((stats.chunks_huge, stats.pages_free_resident), (0, 0), "4 KiB pages");
    assert_eq!(arena.resident_pages(), HUGE_FROM_PAGES, "only what is handed out");
    // The next chunk starts at the threshold: a huge page, every page resident.
    let mut big: Vec<PoolPage> = (0..2).filter_map(|_| arena.alloc()).collect();
    let stats = arena.stats();
    assert_eq!(stats.chunks_huge, 1);
    assert_eq!(stats.pages_free_resident, CHUNK_PAGES as u64 - 2);
    assert_eq!(arena.resident_pages(), HUGE_FROM_PAGES + CHUNK_PAGES as u64);
    arena.check_invariants();
    // Emptied, it is released and kept; reused below the threshold, it is small again.
    big.drain(..).for_each(|page| arena.free(page));
    assert_eq!(arena.stats().chunks_huge, 0);
    let freed = small.len() / 2;
    let mut small = small;
    small.drain(..freed).for_each(|page| arena.free(page));
    arena.trim();
    let kept = arena.stats().chunks_empty;
    assert!(kept >= 1, "the emptied chunks are kept");
    let again: Vec<PoolPage> = (0..freed).filter_map(|_| arena.alloc()).collect();
    let stats = arena.stats();
    assert_eq!((stats.chunks_huge, stats.chunks_allocated), (0, 9), "kept ones, small");
    assert_eq!(arena.resident_pages(), stats.pages_in_use);
    arena.check_invariants();
    small.into_iter().chain(again).for_each(|page| arena.free(page));
    arena.check_invariants();
}

// A huge page released in part frees none of its memory (module essay): the arena used
// to release a huge chunk's free pages past its bound, so the pool's charge and the
// process's resident set dropped while the kernel still held the whole huge page.
#[test]
fn a_huge_chunk_goes_back_whole_or_not_at_all() {
    let arena = PageArena::new();
    let small: Vec<PoolPage> = (0..HUGE_FROM_PAGES).filter_map(|_| arena.alloc()).collect();
    let mut huge: Vec<PoolPage> = (0..CHUNK_PAGES).filter_map(|_| arena.alloc()).collect();
    assert_eq!(arena.stats().chunks_huge, 1);
    small.into_iter().for_each(|page| arena.free(page));
    let madvised = arena.stats().pages_madvised;
    // Free all but one page of the huge chunk: far past the bound on free pages (one
    // page in use), yet none is released, and all stay charged.
    let last = huge.pop().unwrap();
    huge.into_iter().for_each(|page| arena.free(page));
    assert!(CHUNK_PAGES as u64 - 1 > resident_free_limit(&arena.stats()));
    assert_eq!(arena.trim(), 0, "trim leaves a huge chunk alone");
    let stats = arena.stats();
    assert_eq!(stats.pages_madvised, madvised, "no page of the huge chunk released");
    assert_eq!(stats.pages_free_huge, CHUNK_PAGES as u64 - 1);
    assert_eq!(arena.resident_pages(), CHUNK_PAGES as u64, "the whole chunk is charged");
    arena.check_invariants();
    // Its last page frees it whole: one release of the chunk, nothing left charged.
    arena.free(last);
    let stats = arena.stats();
    assert_eq!(stats.pages_madvised, madvised + CHUNK_PAGES as u64);
    assert_eq!((stats.chunks_huge, stats.pages_free_huge), (0, 0));
    assert_eq!(arena.resident_pages(), 0);
    arena.check_invariants();
}

#[test]
fn empty_chunks_past_the_bound_go_back() {
    let arena = PageArena::new();
    let chunks = EMPTY_CHUNKS_MAX as usize + 2;
    let pages: Vec<PoolPage> = (0..chunks * CHUNK_PAGES).filter_map(|_| arena.alloc()).collect();
    assert_eq!(arena.stats().chunks, chunks as u64);
    pages.into_iter().for_each(|page| arena.free(page));
    arena.check_invariants();
    let stats = arena.stats();
    assert_eq!((stats.chunks, stats.chunks_empty), (EMPTY_CHUNKS_MAX, EMPTY_CHUNKS_MAX));
    assert_eq!((stats.chunks_freed, stats.pages_free_resident), (2, 0));
}

// postmortem: a release dropped the lock before its MADV_DONTNEED, so another thread
// could be handed the page meanwhile and have its fresh bytes zeroed by the kernel
// (caught by the zpool stress test as all-zero reads).
#[test]
fn a_page_is_never_handed_out_while_being_released() {
    let arena = std::sync::Arc::new(PageArena::new());
    let workers: Vec<_> = (0..3u8)
        .map(|id| {
            let arena = std::sync::Arc::clone(&arena);
            std::thread::spawn(move || {
                for round in 0..3000u32 {
                    let tag = id.wrapping_mul(61).wrapping_add(round as u8) | 1;
                    let mut pages: Vec<PoolPage> = (0..8).filter_map(|_| arena.alloc()).collect();
                    pages.iter_mut().for_each(|p| p.fill(tag));
                    std::thread::yield_now();
                    for page in pages {
                        assert!(page.iter().all(|&b| b == tag), "a live page changed");
                        arena.free(page);
                    }
                    if round % 4 == 0 {
                        arena.trim();
                    }
                }
            })
        })
        .collect();
    // A few long-lived pages keep the chunk (and its released pages) around.
    let keep: Vec<PoolPage> = (0..4).filter_map(|_| arena.alloc()).collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    arena.check_invariants();
    keep.into_iter().for_each(|page| arena.free(page));
}

#[test]
#[should_panic(expected = "not the arena's")]
fn a_foreign_page_is_caught() {
    let (a, b) = (PageArena::new(), PageArena::new());
    let page = a.alloc().unwrap();
    b.free(page);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Against a model (the live pages and the byte each one holds): random allocs,
    /// frees and trims keep every live page's contents and the invariants.
    #[test]
    fn model(ops in proptest::collection::vec((0u8..10, any::<u16>()), 1..1500)) {
        let arena = PageArena::new();
        let mut live: Vec<(PoolPage, u8)> = Vec::new();
        for (op, arg) in ops {
            match op {
                0..=5 => {
                    let mut page = arena.alloc().unwrap();
                    let tag = arg as u8;
                    page.fill(tag);
                    live.push((page, tag));
                }
                6..=8 if !live.is_empty() => {
                    let (page, tag) = live.swap_remove(usize::from(arg) % live.len());
                    prop_assert!(page.iter().all(|&b| b == tag));
                    arena.free(page);
                }
                _ => {
                    arena.trim();
                }
            }
            arena.check_invariants();
        }
        prop_assert_eq!(arena.stats().pages_in_use, live.len() as u64);
        for (page, tag) in live {
            prop_assert!(page.iter().all(|&b| b == tag));
            arena.free(page);
        }
        let stats = arena.stats();
        prop_assert_eq!(stats.chunks, stats.chunks_empty);
        prop_assert_eq!(stats.pages_free_resident, 0);
    }
}
