//! A split fed by a `NodeReserve` allocates nothing under the caller's lock (the kernel's
//! `xas_split_alloc` / `xas_split` pair). This binary counts every heap allocation with a
//! wrapping global allocator, so it holds this one test only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use xarray::{Entry, NodeReserve, XArray};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, whose contract is the
// same; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    /// # Safety
    ///
    /// As [`GlobalAlloc::alloc`].
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    /// # Safety
    ///
    /// As [`GlobalAlloc::dealloc`].
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn split_with_a_reserve_allocates_nothing_under_the_lock() {
    let folio = Arc::new(7u64);
    let xa = Mutex::new(XArray::new());
    xa.lock()
        .expect("lock")
        .store_order(1 << 20, 9, Entry::Item(Arc::clone(&folio)))
        .expect("store");

    // Outside the lock: size and allocate the nodes (8 leaves for order 9 -> 0).
    let reserve = NodeReserve::for_split(9, 0);
    assert_eq!(reserve.len(), 8);

    let mut guard = xa.lock().expect("lock");
    guard.refill(reserve);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    guard.split(1 << 20, 0).expect("split");
    let during = ALLOCATIONS.load(Ordering::SeqCst) - before;
    assert_eq!(during, 0, "the split allocated {during} times under the lock");
    assert_eq!(guard.spare_nodes(), 0);
    assert_eq!(guard.stats().nodes_from_reserve, 8);
    assert_eq!(guard.len(), 512);
    guard.check_invariants();

    // Without a reserve the same split allocates its nodes itself (the fallback, counted).
    guard.store_order(1 << 21, 9, Entry::Item(Arc::clone(&folio))).expect("store");
    guard.split(1 << 21, 0).expect("split");
    assert_eq!(guard.stats().nodes_from_reserve, 8);
    guard.check_invariants();
    drop(guard);
    drop(xa);
    assert_eq!(Arc::strong_count(&folio), 1);
}
