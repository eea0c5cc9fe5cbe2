//! The far tier's ledger (src/ledger.rs) against a real memcached on loopback: the mark
//! covers every copy on the server, also those sent before the ledger had an entry, and
//! `delete_runs` leaves the server empty. Its own test binary: the ledger is per process.
//! Skips, saying so, where memcached is not installed (.ci/setup installs it).

use backend::{Backend, PAGE_SIZE};
use far::testing::Memcached;
use far::{FarBackend, FarConfig, Ledger};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

/// A ledger of one entry that refuses its first `refuse` asks.
#[derive(Debug, Default)]
struct OneEntry {
    refuse: AtomicUsize,
    run: AtomicU64,
    mark: AtomicU64,
}

impl Ledger for OneEntry {
    fn enter(&self, run: u64) -> Option<usize> {
        if self.refuse.load(SeqCst) > 0 {
            self.refuse.fetch_sub(1, SeqCst);
            return None;
        }
        self.run.store(run + 1, SeqCst);
        Some(0)
    }

    fn reach(&self, entry: usize, slots: u64) {
        assert_eq!(entry, 0);
        self.mark.fetch_max(slots, SeqCst);
    }
}

static LEDGER: OneEntry =
    OneEntry { refuse: AtomicUsize::new(2), run: AtomicU64::new(0), mark: AtomicU64::new(0) };

#[test]
fn the_mark_covers_every_copy_and_the_deletion_leaves_nothing() {
    if !Memcached::available() {
        eprintln!("skipped: memcached is not installed (.ci/setup installs it)");
        return;
    }
    far::set_ledger(&LEDGER);
    let server = Memcached::start(64).expect("memcached starts");
    let config = FarConfig {
        servers: vec![server.addr],
        replicas: 1,
        timeout: Duration::from_millis(500),
        staging_pages: 256,
    };
    let b = FarBackend::connect(config.clone(), 1 << 16).unwrap();
    // High slots first, flushed while the ledger refuses: the later mark must cover them.
    let page = vec![0x5au8; PAGE_SIZE];
    for slot in (3000..3064).chain(0..200) {
        b.write(slot, &page).unwrap();
        if slot == 3063 {
            assert!(b.flush(Duration::from_secs(30)));
        }
    }
    assert!(b.flush(Duration::from_secs(30)));
    let misses = b.stats().counts().ledger_misses;
    assert!(misses >= 1, "the first flush found no entry");
    let mark = LEDGER.mark.load(SeqCst);
    assert!(mark >= 3064 && mark.is_multiple_of(far::REACH_STEP), "mark {mark}");
    assert_eq!(LEDGER.run.load(SeqCst), u64::from_str_radix(&b.run_id(), 16).unwrap() + 1);
    assert_eq!(server.stat("curr_items").unwrap(), 264);
    // As `uswap run` does at the end, with the tier's own state gone unfreed.
    let run = LEDGER.run.load(SeqCst) - 1;
    std::mem::forget(b);
    let done = far::delete_runs(&config, &[(run, mark)]);
    assert_eq!((done.sent, done.not_found, done.server_errors), (mark, mark - 264, 0));
    assert_eq!(server.stat("curr_items").unwrap(), 0);
}
