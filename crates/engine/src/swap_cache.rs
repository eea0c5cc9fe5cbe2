//! The swap cache: the one synchronisation point of every page-in and page-out.
//!
//! An XArray per 64 MiB of a swap device (the kernel's `swapper_spaces` split; a large folio
//! is at most one 2 MiB cluster, so it never crosses a shard), keyed by slot offset, holding
//! either a [`Folio`] (data in flight or cached) or a *shadow* value entry (what an evicted
//! folio left for workingset detection). Large folios are multi-index entries, and so are
//! the shadows they leave.
//!
//! This is the design of the seed series "use swap cache as a synchronization layer" (the
//! kernel's swap table phase II): whoever inserts a folio for a swap entry first owns the
//! I/O on it; everybody else who wants that entry finds the folio and waits until it is
//! unlocked. No spinning, no retry loop, no bypass for synchronous devices (their fast path
//! is to delete the folio right after mapping it).
//!
//! Folio lifecycle (a state machine; no other transition is legal):
//!
//! ```text
//!   new_locked ──unlock(Ok)──► Uptodate   (data valid; waiters map it)
//!        │
//!        └──────unlock(Err)──► Error      (data invalid; waiters fail the access)
//! ```
//!
//! A folio is never locked again once unlocked: every new I/O on an entry inserts a new
//! folio. Its data is written only while it is locked, by the thread that inserted it, and
//! read only after it is unlocked, so readers never see a torn page.
//!
//! Lock order: a shard lock is a leaf — it is never held while taking another engine lock,
//! and nothing calls into the swap device (cluster locks) while holding it. The slot free
//! hook (cluster lock held) may take a shard lock: cluster → shard.

use crate::sync::{Condvar, Mutex};
use crate::workingset::Shadow;
use crate::PAGE_SIZE;
use std::sync::Arc;
use xarray::{Entry, EntryRef, XArray};

/// Slots per shard: 2^14 slots = 64 MiB of swap (`SWAP_ADDRESS_SPACE_SHIFT`).
pub const SHARD_SHIFT: u32 = 14;

// A 2 MiB folio (one cluster) never crosses a shard.
const _: () = assert!(SHARD_SHIFT >= crate::MAX_ORDER);

/// How a folio's I/O ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FolioState {
    /// I/O in flight; the inserting thread owns the data.
    Locked,
    /// The data is valid.
    Uptodate,
    /// The I/O failed: the data must never be mapped.
    Error(Arc<str>),
}

/// A folio in the swap cache: 2^order pages of data for 2^order consecutive slots.
#[derive(Debug)]
pub struct Folio {
    first_slot: u64,
    order: u32,
    /// Guarded by its own mutex; waiters sleep on `unlocked`.
    state: Mutex<FolioState>,
    unlocked: Condvar,
    /// Written only while `state` is Locked, by the thread that inserted the folio.
    data: Mutex<Box<[u8]>>,
    /// Itself, so a folio found by reference in the XArray can be returned counted (the
    /// kernel's `folio_get` after a lookup).
    me: std::sync::Weak<Folio>,
}

impl Folio {
    /// A locked folio for `2^order` slots from `first_slot`, its data zeroed.
    ///
    /// Context: allocates `PAGE_SIZE << order` bytes.
    pub fn new_locked(first_slot: u64, order: u32) -> Arc<Folio> {
        assert!(order <= crate::MAX_ORDER);
        assert_eq!(first_slot % (1 << order), 0, "folio slots not aligned to the order");
        Arc::new_cyclic(|me| Folio {
            first_slot,
            order,
            state: Mutex::new(FolioState::Locked),
            unlocked: Condvar::new(),
            data: Mutex::new(vec![0u8; PAGE_SIZE << order].into_boxed_slice()),
            me: me.clone(),
        })
    }

    /// A counted reference to a folio found in the cache.
    ///
    /// # Panics
    /// Never while the cache (or anyone) holds the folio, which is when it is called.
    fn get(&self) -> Arc<Folio> {
        self.me.upgrade().expect("a folio in the swap cache is alive")
    }

    /// The first slot.
    pub fn first_slot(&self) -> u64 {
        self.first_slot
    }

    /// log2 of the folio's pages.
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Bytes of data.
    pub fn len_bytes(&self) -> usize {
        PAGE_SIZE << self.order
    }

    /// Runs `f` on the data. The caller must be the thread that inserted the folio and the
    /// folio must still be locked (asserted).
    pub fn with_data_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        assert!(self.is_locked(), "folio data written after unlock");
        let mut data = self.data.lock();
        f(&mut data)
    }

    /// Runs `f` on the data of an unlocked, up-to-date folio (asserted).
    pub fn with_data<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(matches!(*self.state.lock(), FolioState::Uptodate), "read of a folio not uptodate");
        let data = self.data.lock();
        f(&data)
    }

    /// Is the folio still locked (I/O in flight)?
    pub fn is_locked(&self) -> bool {
        matches!(*self.state.lock(), FolioState::Locked)
    }

    /// Ends the I/O: the data is valid (`Ok`) or must never be used (`Err`), and wakes every
    /// waiter.
    ///
    /// # Panics
    /// If the folio was already unlocked (a folio is unlocked exactly once).
    pub fn unlock(&self, outcome: Result<(), String>) {
        let mut state = self.state.lock();
        assert_eq!(*state, FolioState::Locked, "folio unlocked twice");
        *state = match outcome {
            Ok(()) => FolioState::Uptodate,
            Err(why) => FolioState::Error(why.into()),
        };
        drop(state);
        self.unlocked.notify_all();
    }

    /// Waits until the folio is unlocked; returns whether its data is valid, and whether the
    /// caller had to wait.
    ///
    /// # Errors
    /// The reason the I/O failed.
    ///
    /// Context: may block until the inserting thread finishes its I/O.
    pub fn wait_unlocked(&self) -> (Result<(), Arc<str>>, bool) {
        let mut state = self.state.lock();
        let mut waited = false;
        while *state == FolioState::Locked {
            waited = true;
            self.unlocked.wait(&mut state);
        }
        let result = match &*state {
            FolioState::Uptodate => Ok(()),
            FolioState::Error(why) => Err(why.clone()),
            FolioState::Locked => unreachable!("loop exits only when unlocked"),
        };
        (result, waited)
    }
}

/// What [`SwapCache::add_or_get`] found.
#[derive(Debug)]
pub enum AddOrGet {
    /// The new folio was inserted; the caller owns its I/O. The shadow the range held, if
    /// any (the first found), for the refault logic.
    Added(Option<Shadow>),
    /// A folio covering the slot is already there: wait on it.
    Exists(Arc<Folio>),
    /// A large add met folios covering only part of its range: fall back to a smaller
    /// order (the kernel returns NULL and the caller retries at order 0).
    Conflict,
}

/// The swap cache of one swap device (see the module documentation).
#[derive(Debug)]
pub struct SwapCache {
    /// One array per 2^SHARD_SHIFT slots; each behind its own lock.
    shards: Box<[Mutex<XArray<Arc<Folio>>>]>,
}

fn shard_of(slot: u64) -> usize {
    (slot >> SHARD_SHIFT) as usize
}

impl SwapCache {
    /// A swap cache for a device of `nr_slots` slots.
    pub fn new(nr_slots: u64) -> Self {
        let shards = nr_slots.div_ceil(1 << SHARD_SHIFT).max(1) as usize;
        SwapCache { shards: (0..shards).map(|_| Mutex::new(XArray::new())).collect() }
    }

    fn shard(&self, slot: u64) -> &Mutex<XArray<Arc<Folio>>> {
        &self.shards[shard_of(slot)]
    }

    /// Inserts `folio` for its slots unless a folio already covers them (page-in: the
    /// winner inserts and reads; a loser gets the folio to wait on). Shadows in the range
    /// are replaced; a larger shadow covering the range is split first, so the rest of it
    /// stays (the seed's one-walk folio add).
    ///
    /// Context: takes one shard lock; may allocate XArray nodes under it.
    pub fn add_or_get(&self, folio: &Arc<Folio>) -> AddOrGet {
        let (slot, order) = (folio.first_slot, folio.order);
        let mut xa = self.shard(slot).lock();
        let mut xas = match xa.cursor(slot, order) {
            Ok(xas) => xas,
            Err(error) => unreachable!("folio range was checked at creation: {error}"),
        };
        let mut shadow = None;
        while let Some((first, found_order, entry)) = xas.next_conflict() {
            match entry {
                EntryRef::Item(existing) => {
                    // An order-0 add waits on whatever folio covers its slot; a large add
                    // waits only on a folio of exactly its range, anything else conflicts.
                    let same_range = first == slot && found_order == order;
                    return if order == 0 || same_range {
                        AddOrGet::Exists(existing.get())
                    } else {
                        AddOrGet::Conflict
                    };
                }
                EntryRef::Value(value) => {
                    shadow = shadow.or(Some((Shadow::from_value(value), found_order)));
                }
            }
        }
        if shadow.is_some_and(|(_, found_order)| found_order > order) {
            if let Err(error) = xas.split() {
                unreachable!("a shadow of order <= 9 always splits: {error}");
            }
        }
        if let Err(refused) = xas.store(Entry::Item(folio.clone())) {
            unreachable!("store after the conflict scan: {}", refused.error);
        }
        AddOrGet::Added(shadow.map(|(shadow, _)| shadow))
    }

    /// Inserts `folio` only if no folio covers any of its slots (page-out of freshly
    /// allocated slots, or writeback pinning a slot). Returns the shadow replaced, or the
    /// folio in the way.
    ///
    /// # Errors
    /// `Err(existing)` when a folio is there.
    ///
    /// Context: takes one shard lock; may allocate XArray nodes under it.
    pub fn add(&self, folio: &Arc<Folio>) -> Result<Option<Shadow>, Arc<Folio>> {
        match self.add_or_get(folio) {
            AddOrGet::Added(shadow) => Ok(shadow),
            AddOrGet::Exists(existing) => Err(existing),
            AddOrGet::Conflict => {
                let xa = self.shard(folio.first_slot).lock();
                let existing = xa
                    .iter_range(folio.first_slot..=folio.first_slot + (1 << folio.order) - 1)
                    .find_map(|(_, _, entry)| entry.item().map(Folio::get));
                Err(existing.expect("a conflict names a folio in the range"))
            }
        }
    }

    /// The folio covering `slot`, if one is cached.
    pub fn get(&self, slot: u64) -> Option<Arc<Folio>> {
        let xa = self.shard(slot).lock();
        xa.load(slot).and_then(|entry| entry.item().map(Folio::get))
    }

    /// The shadow covering `slot`, if one is there.
    pub fn shadow(&self, slot: u64) -> Option<Shadow> {
        let xa = self.shard(slot).lock();
        xa.load(slot).and_then(|entry| entry.value()).map(Shadow::from_value)
    }

    /// Removes `folio` if it is still the entry for its slots, leaving `shadow` (same
    /// order) or nothing. Returns whether it was there.
    ///
    /// Context: takes one shard lock.
    pub fn delete(&self, folio: &Arc<Folio>, shadow: Option<Shadow>) -> bool {
        let mut xa = self.shard(folio.first_slot).lock();
        let new = shadow.map(|s| Entry::Value(s.to_value()));
        xa.compare_exchange(folio.first_slot, Some(EntryRef::Item(&**folio)), new).is_ok()
    }

    /// Drops the shadows of `nr` slots from `slot` (the slots were freed). Folios are left
    /// alone: a freed slot never has one (the device frees a slot only when its cache pin
    /// is gone), which is asserted.
    ///
    /// Context: takes one shard lock; called from the slot free hook with a cluster lock
    /// held.
    pub fn clear_shadows(&self, slot: u64, nr: u64) {
        let mut xa = self.shard(slot).lock();
        let last = slot + nr - 1;
        let mut values = Vec::new();
        for (first, order, entry) in xa.iter_range(slot..=last) {
            assert!(entry.value().is_some(), "freed slot {first} still has a folio");
            values.push((first, order));
        }
        for (first, order) in values {
            if first >= slot && first + (1 << order) - 1 <= last {
                xa.erase(first);
            } else {
                // A larger shadow sticks out of the freed range: split and erase our part.
                split_and_erase(&mut xa, first, order, slot, last);
            }
        }
    }

    /// Folios and shadow entries cached, summed over shards: (folios, shadows).
    pub fn counts(&self) -> (u64, u64) {
        let mut counts = (0, 0);
        for shard in &*self.shards {
            for (_, _, entry) in shard.lock().iter() {
                match entry {
                    EntryRef::Item(_) => counts.0 += 1,
                    EntryRef::Value(_) => counts.1 += 1,
                }
            }
        }
        counts
    }

    /// XArray node memory of all shards, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().memory_bytes()).sum()
    }

    /// Checks every shard's XArray.
    ///
    /// # Panics
    /// On any inconsistency.
    pub fn check_invariants(&self) {
        for shard in &*self.shards {
            shard.lock().check_invariants();
        }
    }
}

/// Splits the shadow `[first, first + 2^order)` to order 0 where it meets `[slot, last]`
/// and erases the pieces inside. Rare: a freed range cuts a large shadow.
fn split_and_erase(xa: &mut XArray<Arc<Folio>>, first: u64, order: u32, slot: u64, last: u64) {
    if let Err(error) = xa.split(first, 0) {
        unreachable!("a shadow of order <= 9 always splits: {error}");
    }
    let start = first.max(slot);
    let end = (first + (1 << order) - 1).min(last);
    for index in start..=end {
        xa.erase(index);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn shadow(age: u64) -> Shadow {
        Shadow { age, workingset: false }
    }

    #[test]
    fn first_inserter_wins_and_losers_wait_on_its_folio() {
        let cache = SwapCache::new(1 << 15);
        let winner = Folio::new_locked(100, 0);
        assert!(matches!(cache.add_or_get(&winner), AddOrGet::Added(None)));
        let loser = Folio::new_locked(100, 0);
        let AddOrGet::Exists(found) = cache.add_or_get(&loser) else { panic!("no folio") };
        assert!(Arc::ptr_eq(&found, &winner));
        let waiter = std::thread::spawn(move || found.wait_unlocked().0);
        winner.with_data_mut(|d| d[0] = 9);
        winner.unlock(Ok(()));
        assert_eq!(waiter.join().unwrap(), Ok(()));
        winner.with_data(|d| assert_eq!(d[0], 9));
        cache.check_invariants();
    }

    #[test]
    fn eviction_leaves_a_shadow_that_a_small_refault_splits() {
        let cache = SwapCache::new(1 << 15);
        let folio = Folio::new_locked(512, 4);
        assert!(matches!(cache.add_or_get(&folio), AddOrGet::Added(None)));
        folio.unlock(Ok(()));
        assert!(cache.delete(&folio, Some(shadow(7))));
        assert_eq!(cache.shadow(515), Some(shadow(7)));
        let refault = Folio::new_locked(515, 0);
        assert!(matches!(cache.add_or_get(&refault), AddOrGet::Added(Some(s)) if s == shadow(7)));
        assert_eq!(cache.shadow(514), Some(shadow(7)), "the rest of the shadow stays");
        assert!(cache.get(515).is_some());
        assert_eq!(cache.counts(), (1, 15));
        cache.check_invariants();
    }

    #[test]
    fn large_add_conflicts_with_a_partial_folio() {
        let cache = SwapCache::new(1 << 15);
        let small = Folio::new_locked(3, 0);
        assert!(matches!(cache.add_or_get(&small), AddOrGet::Added(None)));
        let large = Folio::new_locked(0, 2);
        assert!(matches!(cache.add_or_get(&large), AddOrGet::Conflict));
        let Err(existing) = cache.add(&large) else { panic!("add should fail") };
        assert!(Arc::ptr_eq(&existing, &small));
        // An order-0 lookup inside a large folio finds the large folio.
        let big = Folio::new_locked(64, 3);
        assert!(matches!(cache.add_or_get(&big), AddOrGet::Added(None)));
        let inner = Folio::new_locked(66, 0);
        assert!(matches!(cache.add_or_get(&inner), AddOrGet::Exists(f) if Arc::ptr_eq(&f, &big)));
        cache.check_invariants();
    }

    #[test]
    fn delete_is_by_identity() {
        let cache = SwapCache::new(1 << 15);
        let a = Folio::new_locked(5, 0);
        cache.add(&a).unwrap();
        let impostor = Folio::new_locked(5, 0);
        assert!(!cache.delete(&impostor, None));
        assert!(cache.delete(&a, None));
        assert!(cache.get(5).is_none());
    }

    #[test]
    fn clear_shadows_cuts_a_large_shadow() {
        let cache = SwapCache::new(1 << 15);
        let folio = Folio::new_locked(0, 3);
        cache.add(&folio).unwrap();
        folio.unlock(Ok(()));
        cache.delete(&folio, Some(shadow(1)));
        cache.clear_shadows(2, 2);
        assert_eq!(cache.shadow(1), Some(shadow(1)));
        assert_eq!(cache.shadow(2), None);
        assert_eq!(cache.shadow(3), None);
        assert_eq!(cache.shadow(4), Some(shadow(1)));
        cache.check_invariants();
    }

    #[test]
    fn an_error_is_seen_by_every_waiter() {
        let folio = Folio::new_locked(0, 0);
        let f2 = folio.clone();
        let waiter = std::thread::spawn(move || f2.wait_unlocked().0);
        folio.unlock(Err("read failed".into()));
        assert_eq!(waiter.join().unwrap().unwrap_err().as_ref(), "read failed");
    }

    #[test]
    #[should_panic(expected = "unlocked twice")]
    fn double_unlock_is_a_bug() {
        let folio = Folio::new_locked(0, 0);
        folio.unlock(Ok(()));
        folio.unlock(Ok(()));
    }
}
