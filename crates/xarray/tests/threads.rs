//! Sharing between threads the plain way: the caller's lock around the array (the kernel's
//! `xa_lock`), `&self` reads under the shared side, `&mut self` writes under the exclusive
//! side. Readers check that every entry they see is whole (an item's content and a value
//! both derive from the index) while a writer stores, splits, replaces and erases.

use std::sync::{Arc, RwLock};
use xarray::{Entry, EntryRef, XArray};

const KEYS: u64 = 4096;
const ROUNDS: u64 = 200;

fn check(index: u64, entry: EntryRef<'_, u64>) {
    match entry {
        EntryRef::Value(v) => assert_eq!(v, index / 64 * 3, "value at {index}"),
        EntryRef::Item(item) => assert_eq!(*item, index / 64, "item at {index}"),
    }
}

#[test]
fn readers_under_a_shared_lock_see_whole_entries() {
    let xa = Arc::new(RwLock::new(XArray::<Arc<u64>>::new()));
    let writer = {
        let xa = Arc::clone(&xa);
        std::thread::spawn(move || {
            for round in 0..ROUNDS {
                let folio = (round * 7) % (KEYS / 64);
                let mut guard = xa.write().expect("lock");
                let index = folio * 64;
                let _ = guard.erase(index);
                guard.store_order(index, 6, Entry::Item(Arc::new(folio))).expect("store");
                if round % 3 == 0 {
                    guard.split(index, 3).expect("split");
                }
                if round % 5 == 0 {
                    let _ = guard.replace(index + 8, Entry::Value(folio * 3));
                }
                guard.check_invariants();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let xa = Arc::clone(&xa);
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let guard = xa.read().expect("lock");
                    for index in (round % 64..KEYS).step_by(61) {
                        if let Some(entry) = guard.load(index) {
                            check(index, entry);
                        }
                    }
                    for (first, _, entry) in guard.iter() {
                        check(first, entry);
                    }
                }
            })
        })
        .collect();
    writer.join().expect("writer");
    for reader in readers {
        reader.join().expect("reader");
    }
}
