//! The pool charges what it holds: `memory_bytes` against the process's own resident
//! anonymous memory, at a small pool (4 KiB pages, each resident once used) and past
//! `HUGE_FROM_PAGES` (a new chunk is one huge page, resident whole). One test in its own
//! binary, so no other test's memory moves RssAnon meanwhile.

use zpool::{PoolConfig, ZsPool, HUGE_FROM_PAGES, PAGE_SIZE};

fn rss_anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).expect("RssAnon line");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("kB");
    kib << 10
}

/// Allocator headers and the test's own vectors: what may separate the two figures.
const SLACK: u64 = 512 << 10;

fn assert_charged_is_resident(pool: &ZsPool, baseline: u64, when: &str) {
    let grown = rss_anon_bytes() - baseline;
    let charged = pool.memory_bytes();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    assert!(
        grown.abs_diff(charged) <= SLACK,
        "{when}: RssAnon grew {:.2} MiB, the pool charges {:.2} MiB",
        mib(grown),
        mib(charged)
    );
}

#[test]
fn a_pool_charges_the_memory_it_holds_small_or_on_huge_pages() {
    let mut handles = Vec::with_capacity(HUGE_FROM_PAGES as usize + 1024);
    let page = vec![0x5au8; PAGE_SIZE];
    let baseline = rss_anon_bytes();
    let pool = ZsPool::new(PoolConfig::with_max_bytes(64 << 20)).expect("valid config");
    // 300 pages: a small pool, well under one 2 MiB chunk.
    for _ in 0..300 {
        let handle = pool.malloc(PAGE_SIZE).expect("malloc");
        pool.write(handle, &page);
        handles.push(handle);
    }
    assert_charged_is_resident(&pool, baseline, "300 pages");
    assert!(pool.memory_bytes() < 2 << 20, "a small pool holds no whole chunk");
    // Half freed: the freed pages stay resident (kept for the next zspage) and charged.
    for handle in handles.drain(..150) {
        pool.free(handle);
    }
    assert_charged_is_resident(&pool, baseline, "150 of 300 pages freed");
    // Past the huge-page threshold: a new chunk is resident whole, and charged whole.
    while (handles.len() as u64) < HUGE_FROM_PAGES + 100 {
        let handle = pool.malloc(PAGE_SIZE).expect("malloc");
        pool.write(handle, &page);
        handles.push(handle);
    }
    assert_charged_is_resident(&pool, baseline, "past HUGE_FROM_PAGES");
    let stats = pool.stats();
    assert!(stats.arena.pages_free_resident > 100, "a huge chunk's free pages: {stats:?}");
    for handle in handles {
        pool.free(handle);
    }
    pool.check_invariants();
}
