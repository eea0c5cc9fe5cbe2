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
//!   new_locked ──unlock(Uptodate)──► Uptodate  (data valid; waiters map it)
//!        ├───────unlock(Failed)────► Failed    (the data could not be read: waiters fail
//!        │                                      the access, never map it)
//!        └───────unlock(Abandoned)─► Abandoned (no data, but none was lost: the I/O was
//!                                               given up and the data is still where it
//!                                               was; waiters look again)
//! ```
//!
//! A folio is never locked again once unlocked: every new I/O on an entry inserts a new
//! folio. Its data is written only while it is locked, by the thread that inserted it, and
//! read only after it is unlocked, so readers never see a torn page.
//!
//! A folio's presence here and its slots' cache pin in the swap device change together,
//! under the shard lock: [`SwapCache::add_or_get`] pins the slots (which succeeds only while
//! a page table still refers to them) in the same critical section that inserts the folio,
//! and [`SwapCache::delete`] unpins them in the one that removes it. So a slot that is freed
//! (and perhaps reused) between a fault reading its page table and inserting a folio is
//! refused ([`AddOrGet::Stale`]) instead of getting a folio it no longer deserves — the
//! kernel checks the swap count under the cluster lock for the same reason.
//!
//! Lock order: shard → swap device cluster lock → (the slot free hook's locks). Nothing
//! takes a shard lock while holding a cluster lock: the free hook never touches the swap
//! cache; shadows of freed slots are dropped by whoever freed them, after the fact, or
//! replaced when the slot is used again.

use crate::sync::{AtomicBool, Condvar, Mutex, MutexGuard, Ordering};
use crate::workingset::Shadow;
use crate::PAGE_SIZE;
use std::sync::Arc;
use xarray::{Entry, EntryRef, XArray};

/// Slots per shard: 2^14 slots = 64 MiB of swap (`SWAP_ADDRESS_SPACE_SHIFT`).
pub const SHARD_SHIFT: u32 = 14;

// A 2 MiB folio (one cluster) never crosses a shard.
const _: () = assert!(SHARD_SHIFT >= crate::MAX_ORDER);

/// How a folio's I/O ended, as the inserting thread reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlock {
    /// The data is valid; `zero` says it is all zero (it came from the zero map), so a read
    /// fault may map the shared zero page instead of copying.
    Uptodate {
        /// All zero.
        zero: bool,
    },
    /// The data could not be read: it must never be mapped.
    Failed(String),
    /// The I/O was given up before the folio held any data, and nothing was lost (a
    /// page-out that could not take its pages, a writeback that could not decompress).
    Abandoned,
}

/// How a folio's I/O ended, as a waiter sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// See [`Unlock::Uptodate`].
    Uptodate {
        /// All zero.
        zero: bool,
    },
    /// See [`Unlock::Failed`].
    Failed(Arc<str>),
    /// See [`Unlock::Abandoned`]: look again.
    Abandoned,
}

/// A folio's state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FolioState {
    /// I/O in flight; the inserting thread owns the data.
    Locked,
    /// Unlocked, for good.
    Done(Outcome),
}

/// A folio in the swap cache: 2^order pages of data for 2^order consecutive slots.
#[derive(Debug)]
pub struct Folio {
    first_slot: u64,
    order: u32,
    /// Guarded by its own mutex; waiters sleep on `unlocked`.
    state: Mutex<FolioState>,
    unlocked: Condvar,
    /// Written only while `state` is Locked, by the thread that inserted the folio; empty
    /// until then.
    data: Mutex<Box<[u8]>>,
    /// Itself, so a folio found by reference in the XArray can be returned counted (the
    /// kernel's `folio_get` after a lookup).
    me: std::sync::Weak<Folio>,
    /// Its data is charged to the budget's swap cache share (see [`Folio::charge`]).
    charged: AtomicBool,
}

impl Folio {
    /// A locked folio for `2^order` slots from `first_slot`. Its buffer is taken at the
    /// first write ([`Folio::with_data_mut`]): a page-in that fills the pages in place never
    /// writes, and costs no buffer.
    ///
    /// Context: allocates the folio (not its data).
    pub fn new_locked(first_slot: u64, order: u32) -> Arc<Folio> {
        assert!(order <= crate::MAX_ORDER);
        assert_eq!(first_slot % (1 << order), 0, "folio slots not aligned to the order");
        Arc::new_cyclic(|me| Folio {
            first_slot,
            order,
            state: Mutex::new(FolioState::Locked),
            unlocked: Condvar::new(),
            data: Mutex::new(Box::default()),
            me: me.clone(),
            charged: AtomicBool::new(false),
        })
    }

    /// Records that the folio's data is now charged to the budget. A page-in charges when it
    /// inserts the folio; a page-out only when the pages leave the program (the charge moves
    /// from resident to swap cache then), so a page-out that gives up or puts the data back
    /// never counts the same bytes twice.
    ///
    /// # Panics
    /// If it was charged already.
    pub fn charge(&self) {
        assert!(!self.charged.swap(true, Ordering::AcqRel), "folio charged twice");
    }

    /// Is the folio's data charged to the budget?
    pub fn is_charged(&self) -> bool {
        self.charged.load(Ordering::Acquire)
    }

    /// Takes the folio's charge away; returns whether it had one (the caller uncharges).
    pub fn take_charge(&self) -> bool {
        self.charged.swap(false, Ordering::AcqRel)
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
        f(&mut self.lock_data())
    }

    /// The data, locked, for a caller that fills several folios at once (a run of
    /// page-outs taken together); as [`Folio::with_data_mut`] otherwise.
    pub(crate) fn lock_data(&self) -> MutexGuard<'_, Box<[u8]>> {
        assert!(self.is_locked(), "folio data written after unlock");
        let mut data = self.data.lock();
        if data.is_empty() {
            *data = buffers::take(self.order);
        }
        data
    }

    /// Runs `f` on the data of an unlocked, up-to-date folio (asserted).
    pub fn with_data<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            matches!(*self.state.lock(), FolioState::Done(Outcome::Uptodate { .. })),
            "read of a folio not uptodate"
        );
        let data = self.data.lock();
        f(&data)
    }

    /// Is the folio still locked (I/O in flight)?
    pub fn is_locked(&self) -> bool {
        matches!(*self.state.lock(), FolioState::Locked)
    }

    /// Ends the I/O (see [`Unlock`]) and wakes every waiter.
    ///
    /// # Panics
    /// If the folio was already unlocked (a folio is unlocked exactly once).
    pub fn unlock(&self, how: Unlock) {
        let mut state = self.state.lock();
        assert_eq!(*state, FolioState::Locked, "folio unlocked twice");
        *state = FolioState::Done(match how {
            Unlock::Uptodate { zero } => Outcome::Uptodate { zero },
            Unlock::Failed(why) => Outcome::Failed(why.into()),
            Unlock::Abandoned => Outcome::Abandoned,
        });
        drop(state);
        self.unlocked.notify_all();
    }

    /// Waits until the folio is unlocked; returns how its I/O ended, and whether the caller
    /// had to wait.
    ///
    /// Context: may block until the inserting thread finishes its I/O.
    pub fn wait_unlocked(&self) -> (Outcome, bool) {
        let mut state = self.state.lock();
        let mut waited = false;
        while *state == FolioState::Locked {
            waited = true;
            if let Some(yield_now) = crate::hooks::yield_hook() {
                // Under the simulator: let its scheduler run someone else (the owner).
                drop(state);
                yield_now();
                state = self.state.lock();
            } else {
                self.unlocked.wait(&mut state);
            }
        }
        let FolioState::Done(outcome) = &*state else {
            unreachable!("the loop exits only when unlocked")
        };
        (outcome.clone(), waited)
    }
}

#[cfg(not(loom))]
impl Drop for Folio {
    fn drop(&mut self) {
        buffers::give(self.order, std::mem::take(self.data.get_mut()));
    }
}

/// Folio data buffers, recycled. Every page-in and page-out needs one, and a fresh buffer
/// costs a malloc and zeroing 4 KiB (`vec![0; n]` memsets the heap memory malloc reuses),
/// which measured at a third of the whole page-in path. A recycled buffer holds an earlier
/// folio's data of this same process, which never shows: every byte of a folio is written
/// before it is read (the take, the read, the writeback copy), and a folio whose I/O was
/// abandoned or failed is never read.
#[cfg(not(loom))]
mod buffers {
    use crate::{MAX_ORDER, PAGE_SIZE};
    use parking_lot::Mutex;

    /// Bytes kept per order at most (order 0: 64 buffers, order 4: 4; none of 2 MiB).
    const KEEP_BYTES: usize = 256 << 10;

    static FREE: [Mutex<Vec<Box<[u8]>>>; MAX_ORDER as usize + 1] =
        [const { Mutex::new(Vec::new()) }; MAX_ORDER as usize + 1];

    /// A buffer of `PAGE_SIZE << order` bytes, recycled if one is free.
    pub(super) fn take(order: u32) -> Box<[u8]> {
        let recycled = FREE[order as usize].lock().pop();
        recycled.unwrap_or_else(|| vec![0u8; PAGE_SIZE << order].into_boxed_slice())
    }

    /// Gives a buffer back (dropped if enough are kept already).
    pub(super) fn give(order: u32, buffer: Box<[u8]>) {
        if buffer.len() != PAGE_SIZE << order {
            return; // taken out by `mem::take`: nothing to keep
        }
        let keep = KEEP_BYTES / (PAGE_SIZE << order);
        let mut free = FREE[order as usize].lock();
        if free.len() < keep {
            free.push(buffer);
        }
    }
}

/// Under loom every buffer is new: the model checks the folio protocol, not the recycling.
#[cfg(loom)]
mod buffers {
    use crate::PAGE_SIZE;

    pub(super) fn take(order: u32) -> Box<[u8]> {
        vec![0u8; PAGE_SIZE << order].into_boxed_slice()
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
    /// The slots could not be pinned: no page table refers to them any more (freed), or
    /// they were just allocated to a page-out. The caller's swap entry is stale.
    Stale,
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
    /// winner inserts and reads; a loser gets the folio to wait on). Before inserting, under
    /// the shard lock, `pin` must pin the slots in the swap device (see the module
    /// documentation); if it refuses, nothing is inserted. Shadows in the range are
    /// replaced; a larger shadow covering the range is split first, so the rest of it stays
    /// (the seed's one-walk folio add).
    ///
    /// Context: takes one shard lock, and under it whatever `pin` takes (a cluster lock);
    /// may allocate XArray nodes under it.
    pub fn add_or_get(&self, folio: &Arc<Folio>, pin: impl FnOnce() -> bool) -> AddOrGet {
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
        if !pin() {
            return AddOrGet::Stale;
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

    /// Inserts `folio` for slots a page-out has just allocated (they come cache-pinned
    /// from the allocator and no page table refers to them yet, so nobody else can insert
    /// there). Returns the stale shadow a previous use of the slots left, if any.
    ///
    /// # Panics
    /// If a folio is there: the allocator handed out slots the swap cache still uses.
    ///
    /// Context: takes one shard lock; may allocate XArray nodes under it.
    pub fn add_new(&self, folio: &Arc<Folio>) -> Option<Shadow> {
        match self.add_or_get(folio, || true) {
            AddOrGet::Added(shadow) => shadow,
            other => panic!(
                "freshly allocated slot {} is in the swap cache: {other:?}",
                folio.first_slot
            ),
        }
    }

    /// The folio covering `slot`, if one is cached.
    pub fn get(&self, slot: u64) -> Option<Arc<Folio>> {
        let xa = self.shard(slot).lock();
        xa.load(slot).and_then(|entry| entry.item().map(Folio::get))
    }

    /// The folios caching any of the `nr` slots from `slot` (inline up to two: a page-in
    /// finds its own folio here, and allocates nothing for it).
    ///
    /// Context: takes one shard lock.
    pub fn folios_in(&self, slot: u64, nr: u64) -> smallvec::SmallVec<[Arc<Folio>; 2]> {
        let xa = self.shard(slot).lock();
        xa.iter_range(slot..=slot + nr - 1)
            .filter_map(|(_, _, entry)| entry.item().map(Folio::get))
            .collect()
    }

    /// Is `folio` still the swap cache's entry for its slots? A folio found earlier may have
    /// been deleted since, and its slots freed and reused: only a folio still here holds the
    /// current data of its slots (the kernel's `folio_matches_swap_entry`).
    ///
    /// Context: takes one shard lock (callers hold a PTL: PTL → shard).
    pub fn contains(&self, folio: &Folio) -> bool {
        let xa = self.shard(folio.first_slot).lock();
        xa.load(folio.first_slot)
            .and_then(|entry| entry.item())
            .is_some_and(|f| std::ptr::eq(f, folio))
    }

    /// The shadow covering `slot`, if one is there.
    pub fn shadow(&self, slot: u64) -> Option<Shadow> {
        let xa = self.shard(slot).lock();
        xa.load(slot).and_then(|entry| entry.value()).map(Shadow::from_value)
    }

    /// Removes `folio` if it is still the entry for its slots, leaving `shadow` (same
    /// order) or nothing, and calls `unpin` to drop the slots' cache pin in the same
    /// critical section. Returns whether it was there (`unpin` runs only then).
    ///
    /// Context: takes one shard lock, and under it whatever `unpin` takes (a cluster lock,
    /// and the slot free hook's locks if the slots become free).
    pub fn delete(&self, folio: &Arc<Folio>, shadow: Option<Shadow>, unpin: impl FnOnce()) -> bool {
        let mut xa = self.shard(folio.first_slot).lock();
        let new = shadow.map(|s| Entry::Value(s.to_value()));
        let removed =
            xa.compare_exchange(folio.first_slot, Some(EntryRef::Item(&**folio)), new).is_ok();
        if removed {
            unpin();
        }
        removed
    }

    /// Drops the shadows of `nr` slots from `slot` (the caller freed the slots). Folios are
    /// left alone: the slots may already have been allocated to a new page-out.
    ///
    /// Context: takes one shard lock; may allocate XArray nodes (to split a large shadow).
    pub fn clear_shadows(&self, slot: u64, nr: u64) {
        let mut xa = self.shard(slot).lock();
        let last = slot + nr - 1;
        let shadows: Vec<(u64, u32)> = xa
            .iter_range(slot..=last)
            .filter(|(_, _, entry)| entry.value().is_some())
            .map(|(first, order, _)| (first, order))
            .collect();
        for (first, order) in shadows {
            if first >= slot && first + (1 << order) - 1 <= last {
                xa.erase(first);
            } else {
                // A larger shadow sticks out of the freed range: split and erase our part.
                split_and_erase(&mut xa, first, order, slot, last);
            }
        }
    }

    /// Every folio cached (for checks at quiescent points).
    ///
    /// Context: takes each shard lock in turn; allocates the list.
    pub fn folios(&self) -> Vec<Arc<Folio>> {
        let mut folios = Vec::new();
        for shard in &*self.shards {
            folios.extend(
                shard.lock().iter().filter_map(|(_, _, entry)| entry.item().map(Folio::get)),
            );
        }
        folios
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
        assert!(matches!(cache.add_or_get(&winner, || true), AddOrGet::Added(None)));
        let loser = Folio::new_locked(100, 0);
        let AddOrGet::Exists(found) = cache.add_or_get(&loser, || true) else { panic!("no folio") };
        assert!(Arc::ptr_eq(&found, &winner));
        let waiter = std::thread::spawn(move || found.wait_unlocked().0);
        winner.with_data_mut(|d| d[0] = 9);
        winner.unlock(Unlock::Uptodate { zero: false });
        assert_eq!(waiter.join().unwrap(), Outcome::Uptodate { zero: false });
        winner.with_data(|d| assert_eq!(d[0], 9));
        cache.check_invariants();
    }

    #[test]
    fn eviction_leaves_a_shadow_that_a_small_refault_splits() {
        let cache = SwapCache::new(1 << 15);
        let folio = Folio::new_locked(512, 4);
        assert!(matches!(cache.add_or_get(&folio, || true), AddOrGet::Added(None)));
        folio.unlock(Unlock::Uptodate { zero: false });
        assert!(cache.delete(&folio, Some(shadow(7)), || ()));
        assert_eq!(cache.shadow(515), Some(shadow(7)));
        let refault = Folio::new_locked(515, 0);
        assert!(matches!(
            cache.add_or_get(&refault, || true),
            AddOrGet::Added(Some(s)) if s == shadow(7)
        ));
        assert_eq!(cache.shadow(514), Some(shadow(7)), "the rest of the shadow stays");
        assert!(cache.get(515).is_some());
        assert_eq!(cache.counts(), (1, 15));
        cache.check_invariants();
    }

    #[test]
    fn large_add_conflicts_with_a_partial_folio() {
        let cache = SwapCache::new(1 << 15);
        let small = Folio::new_locked(3, 0);
        assert!(matches!(cache.add_or_get(&small, || true), AddOrGet::Added(None)));
        let large = Folio::new_locked(0, 2);
        assert!(matches!(cache.add_or_get(&large, || true), AddOrGet::Conflict));
        // An order-0 lookup inside a large folio finds the large folio.
        let big = Folio::new_locked(64, 3);
        assert!(matches!(cache.add_or_get(&big, || true), AddOrGet::Added(None)));
        let inner = Folio::new_locked(66, 0);
        assert!(matches!(
            cache.add_or_get(&inner, || true),
            AddOrGet::Exists(f) if Arc::ptr_eq(&f, &big)
        ));
        cache.check_invariants();
    }

    #[test]
    fn delete_is_by_identity() {
        let cache = SwapCache::new(1 << 15);
        let a = Folio::new_locked(5, 0);
        cache.add_new(&a);
        let impostor = Folio::new_locked(5, 0);
        assert!(!cache.delete(&impostor, None, || panic!("unpinned for an impostor")));
        let mut unpinned = false;
        assert!(cache.delete(&a, None, || unpinned = true));
        assert!(unpinned);
        assert!(cache.get(5).is_none());
    }

    #[test]
    fn clear_shadows_cuts_a_large_shadow() {
        let cache = SwapCache::new(1 << 15);
        let folio = Folio::new_locked(0, 3);
        cache.add_new(&folio);
        folio.unlock(Unlock::Uptodate { zero: false });
        cache.delete(&folio, Some(shadow(1)), || ());
        cache.clear_shadows(2, 2);
        assert_eq!(cache.shadow(1), Some(shadow(1)));
        assert_eq!(cache.shadow(2), None);
        assert_eq!(cache.shadow(3), None);
        assert_eq!(cache.shadow(4), Some(shadow(1)));
        cache.check_invariants();
    }

    #[test]
    fn a_refused_pin_inserts_nothing() {
        let cache = SwapCache::new(1 << 15);
        let folio = Folio::new_locked(9, 0);
        assert!(matches!(cache.add_or_get(&folio, || false), AddOrGet::Stale));
        assert!(cache.get(9).is_none());
        // A folio already there is found without asking for a pin.
        cache.add_new(&folio);
        let again = Folio::new_locked(9, 0);
        let found = cache.add_or_get(&again, || panic!("pinned twice"));
        assert!(matches!(found, AddOrGet::Exists(f) if Arc::ptr_eq(&f, &folio)));
    }

    #[test]
    fn an_error_is_seen_by_every_waiter() {
        let folio = Folio::new_locked(0, 0);
        let f2 = folio.clone();
        let waiter = std::thread::spawn(move || f2.wait_unlocked().0);
        folio.unlock(Unlock::Failed("read failed".into()));
        assert_eq!(waiter.join().unwrap(), Outcome::Failed("read failed".into()));
    }

    #[test]
    #[should_panic(expected = "unlocked twice")]
    fn double_unlock_is_a_bug() {
        let folio = Folio::new_locked(0, 0);
        folio.unlock(Unlock::Uptodate { zero: false });
        folio.unlock(Unlock::Uptodate { zero: false });
    }
}
