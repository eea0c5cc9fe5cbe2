//! Clusters: 512 naturally aligned slots with one order, a count, a flag and a lock, and
//! the lists that sort them (the kernel's `swap_cluster_info`, v6.18).
//!
//! # Conventions in this file (and in device.rs, alloc.rs)
//!
//! - `si`: the swap device ([`crate::SwapDevice`]), as the kernel's `swap_info_struct`.
//! - `ci`: a locked cluster (a guard on [`Cluster`]); `idx`: its index on the device.
//! - `offset`: a slot number on the device; `ci_off`: a slot's index inside its cluster
//!   (`offset % SWAPFILE_CLUSTER`).
//! - "usable": a cluster an allocation may take slots from (flag up to `Frag`).
//!
//! # The slot byte (`ci.map[ci_off]`), documented once
//!
//! ```text
//!   bit   7          6             5 .. 0
//!      [ EXTENDED ][ HAS_CACHE ][ count (0 ..= SWAP_MAP_MAX) ]
//!
//!   0x00              free
//!   HAS_CACHE | 0     cache-only: the swap cache owns the slot, no page table does
//!   n (1..=62)        n page-table references, no cached folio
//!   EXTENDED          the count (> SWAP_MAP_MAX, up to u32::MAX) is in ci.extend[ci_off]
//!   SWAP_MAP_BAD      0x3f: the header slot, or a slot past the end of the device
//! ```
//!
//! Like the kernel's `swap_map` byte below 7.0, with the phase-III *extend table* instead
//! of continuation pages: counts past 62 live in a per-cluster `[u32; 512]` (2 KiB)
//! allocated on first need and dropped when the cluster becomes free.
//!
//! # Lists and the flag
//!
//! Every cluster is on exactly one list, or isolated (off-list) by one thread, and its
//! flag says which, so a thread holding only the cluster lock knows the list without
//! taking the list lock:
//!
//! | flag | list | count | who puts it there |
//! |---|---|---|---|
//! | `None` | none (isolated) | any | `isolate_lock_cluster` |
//! | `Free` | `free` | 0 | `free_cluster`, setup, end of discard |
//! | `Nonfull` | `nonfull[order]` | 1 ..= 511 | `partial_free_cluster`, setup (header) |
//! | `Frag` | `frag[order]` | 1 ..= 511 | `relocate_cluster` after an allocation pass |
//! | `Full` | `full` | 512 | `relocate_cluster` |
//! | `Discard` | `discard` | 0 | `free_cluster` on a discard device |
//! | `Discarding` | none (hole being punched) | 0 | `swap_do_scheduled_discard` |
//!
//! # Cluster-flag lifecycle: the legal transitions ([`transition_is_legal`])
//!
//! ```text
//!   from \ to    None  Free  Nonfull  Frag  Full  Discard  Discarding
//!   None          -     F      P       R     R      F         -
//!   Free          I     -      -       R     R      -         -
//!   Nonfull       I     F      -       R     R      F         -
//!   Frag          I     F      P       -     R      F         -
//!   Full          I     F      P       -     -      F         -
//!   Discard       -     -      -       -     -      -         D
//!   Discarding    -     D      -       -     -      -         -
//!
//!   I isolate (allocation or reclaim takes it off its list)
//!   R relocate after allocating (count decides: frag, full, or back to free)
//!   P partial free (slots freed, count still > 0: back to nonfull[order])
//!   F free (count reached 0: free list, or discard list on a discard device)
//!   D discard taken / done
//! ```
//!
//! `Free -> Frag/Full` happens without isolation: the per-thread hint may point into a
//! free cluster (the kernel's per-CPU fast path) and relocation then moves it.
//!
//! Locks: `ci` (the cluster's own lock) protects every field of [`Cluster`]; the device's
//! list lock protects [`ClusterLists`]. Order: cluster lock, then list lock; isolation,
//! which holds the list lock, only ever `try_lock`s a cluster.

use crate::{MAX_ORDER, SWAPFILE_CLUSTER, SWAP_NR_ORDERS};

/// Largest swap count the slot byte holds itself (the kernel's `SWAP_MAP_MAX`).
pub const SWAP_MAP_MAX: u8 = 0x3e;
/// The header slot and slots past the end (the kernel's `SWAP_MAP_BAD`).
pub const SWAP_MAP_BAD: u8 = 0x3f;
/// The swap cache owns the slot (the kernel's `SWAP_HAS_CACHE`).
pub const SWAP_HAS_CACHE: u8 = 0x40;
/// The count lives in the cluster's extend table.
pub const SWAP_COUNT_EXTENDED: u8 = 0x80;
const COUNT_MASK: u8 = 0x3f;

const _: () = assert!(SWAPFILE_CLUSTER <= u16::MAX as usize, "count is a u16");
const _: () = assert!(1 << MAX_ORDER == SWAPFILE_CLUSTER, "a max-order folio is one cluster");

/// Where a cluster is (see the table in the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum ClusterFlag {
    /// Isolated: off every list, owned by the thread that isolated it.
    None = 0,
    /// On the free list: count 0.
    Free,
    /// On `nonfull[order]`: slots were freed since it was last allocated from.
    Nonfull,
    /// On `frag[order]`: allocated from and not full (or failed a scan).
    Frag,
    /// On the full list.
    Full,
    /// On the discard list, waiting for its hole to be punched.
    Discard,
    /// Off-list while its discard runs.
    Discarding,
}

/// Clusters with flags up to this one can be allocated from (`CLUSTER_FLAG_USABLE`).
pub const CLUSTER_FLAG_USABLE: ClusterFlag = ClusterFlag::Frag;

/// Is `from -> to` in the lifecycle table?
pub fn transition_is_legal(from: ClusterFlag, to: ClusterFlag) -> bool {
    use ClusterFlag as F;
    match to {
        F::None => matches!(from, F::Free | F::Nonfull | F::Frag | F::Full),
        F::Free => matches!(from, F::None | F::Nonfull | F::Frag | F::Full | F::Discarding),
        F::Nonfull => matches!(from, F::None | F::Frag | F::Full),
        F::Frag => matches!(from, F::None | F::Free | F::Nonfull),
        F::Full => matches!(from, F::None | F::Free | F::Nonfull | F::Frag),
        F::Discard => matches!(from, F::None | F::Nonfull | F::Frag | F::Full),
        F::Discarding => from == F::Discard,
    }
}

/// The per-cluster table of counts above [`SWAP_MAP_MAX`] (phase III's `extend_table`).
pub type ExtendTable = [u32; SWAPFILE_CLUSTER];

/// One cluster's state. Every field is protected by the cluster's own lock.
pub struct Cluster {
    /// Slots in use (non-zero bytes, including bad slots): `ci->count`.
    pub(crate) count: u16,
    /// The order this cluster serves; set by the first allocation into an empty cluster.
    pub(crate) order: u8,
    /// Which list the cluster is on (see the module table).
    pub(crate) flags: ClusterFlag,
    /// Slots whose count lives in `extend`.
    pub(crate) nr_extended: u16,
    /// One byte per slot (see "The slot byte").
    pub(crate) map: [u8; SWAPFILE_CLUSTER],
    /// Counts past `SWAP_MAP_MAX`, allocated on first need (never under this lock).
    pub(crate) extend: Option<Box<ExtendTable>>,
}

/// What a slot needs before its count can be raised.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NeedTable {
    Yes,
    No,
}

impl Cluster {
    pub(crate) fn new() -> Self {
        Cluster {
            count: 0,
            order: 0,
            flags: ClusterFlag::None,
            nr_extended: 0,
            map: [0; SWAPFILE_CLUSTER],
            extend: None,
        }
    }

    /// The swap count of a slot (0 for free, cache-only and bad slots).
    pub(crate) fn slot_count(&self, ci_off: usize) -> u32 {
        let byte = self.map[ci_off];
        if byte & SWAP_COUNT_EXTENDED != 0 {
            return self.extend.as_ref().map_or(0, |t| t[ci_off]);
        }
        match byte & COUNT_MASK {
            SWAP_MAP_BAD => 0,
            n => u32::from(n),
        }
    }

    /// Sets the count of an in-use slot, moving it in or out of the extend table.
    ///
    /// # Panics
    /// If the count needs the extend table and it is missing (callers check
    /// [`Cluster::needs_table`] first), or the slot is bad.
    pub(crate) fn set_slot_count(&mut self, ci_off: usize, count: u32) {
        let byte = self.map[ci_off];
        assert_ne!(byte, SWAP_MAP_BAD, "count of a bad slot");
        let cache = byte & SWAP_HAS_CACHE;
        let was_extended = byte & SWAP_COUNT_EXTENDED != 0;
        if count <= u32::from(SWAP_MAP_MAX) {
            self.map[ci_off] = cache | count as u8;
            if was_extended {
                self.nr_extended -= 1;
            }
        } else {
            let table = self.extend.as_mut().expect("extend table allocated before use");
            table[ci_off] = count;
            self.map[ci_off] = cache | SWAP_COUNT_EXTENDED;
            if !was_extended {
                self.nr_extended += 1;
            }
        }
    }

    /// Would raising this slot's count to `count` need an extend table we lack?
    pub(crate) fn needs_table(&self, count: u32) -> NeedTable {
        if count > u32::from(SWAP_MAP_MAX) && self.extend.is_none() {
            NeedTable::Yes
        } else {
            NeedTable::No
        }
    }

    pub(crate) fn slot_is_free(&self, ci_off: usize) -> bool {
        self.map[ci_off] == 0
    }

    pub(crate) fn slot_is_bad(&self, ci_off: usize) -> bool {
        self.map[ci_off] == SWAP_MAP_BAD
    }

    pub(crate) fn slot_has_cache(&self, ci_off: usize) -> bool {
        !self.slot_is_bad(ci_off) && self.map[ci_off] & SWAP_HAS_CACHE != 0
    }

    /// Cache-only: pinned by the swap cache, no page-table reference.
    pub(crate) fn slot_is_cache_only(&self, ci_off: usize) -> bool {
        self.map[ci_off] == SWAP_HAS_CACHE
    }

    pub(crate) fn set_slot_cache(&mut self, ci_off: usize, on: bool) {
        if on {
            self.map[ci_off] |= SWAP_HAS_CACHE;
        } else {
            self.map[ci_off] &= !SWAP_HAS_CACHE;
        }
    }
}

/// `cluster_is_free`: nothing allocated in it (6.18: by count, not by flag).
pub(crate) fn cluster_is_free(ci: &Cluster) -> bool {
    ci.count == 0
}

/// `cluster_is_discard`: waiting for or running its discard.
pub(crate) fn cluster_is_discard(ci: &Cluster) -> bool {
    matches!(ci.flags, ClusterFlag::Discard | ClusterFlag::Discarding)
}

/// `cluster_is_usable`: an order-`order` allocation may scan this cluster.
pub(crate) fn cluster_is_usable(ci: &Cluster, order: u32) -> bool {
    if ci.flags > CLUSTER_FLAG_USABLE {
        return false;
    }
    order == 0 || cluster_is_free(ci) || u32::from(ci.order) == order
}

/// `cluster_is_full`.
pub(crate) fn cluster_is_full(ci: &Cluster) -> bool {
    usize::from(ci.count) == SWAPFILE_CLUSTER
}

/// `cluster_offset`: the first slot of cluster `idx`.
pub(crate) fn cluster_offset(idx: u32) -> u64 {
    u64::from(idx) * SWAPFILE_CLUSTER as u64
}

/// `cluster_index`: the cluster holding slot `offset`.
pub(crate) fn cluster_index(offset: u64) -> u32 {
    (offset / SWAPFILE_CLUSTER as u64) as u32
}

/// A cluster list of the device.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ListId {
    /// `free_clusters`.
    Free,
    /// `nonfull_clusters[order]`.
    Nonfull(u8),
    /// `frag_clusters[order]`.
    Frag(u8),
    /// `full_clusters`.
    Full,
    /// `discard_clusters`.
    Discard,
}

impl ListId {
    /// The flag of the clusters on this list.
    pub fn flag(self) -> ClusterFlag {
        match self {
            ListId::Free => ClusterFlag::Free,
            ListId::Nonfull(_) => ClusterFlag::Nonfull,
            ListId::Frag(_) => ClusterFlag::Frag,
            ListId::Full => ClusterFlag::Full,
            ListId::Discard => ClusterFlag::Discard,
        }
    }

    /// Every list of a device.
    pub fn all() -> impl Iterator<Item = ListId> {
        let per_order =
            (0..SWAP_NR_ORDERS as u8).flat_map(|o| [ListId::Nonfull(o), ListId::Frag(o)]);
        [ListId::Free, ListId::Full, ListId::Discard].into_iter().chain(per_order)
    }
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct ListHead {
    head: u32,
    tail: u32,
    len: u32,
}

impl ListHead {
    const EMPTY: ListHead = ListHead { head: NIL, tail: NIL, len: 0 };
}

#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
    on: Option<ListId>,
}

/// The device's cluster lists: doubly linked through indices, so nothing allocates after
/// setup. Protected by the device's list lock (`si->lock` in 6.18 protects only these).
pub(crate) struct ClusterLists {
    free: ListHead,
    full: ListHead,
    discard: ListHead,
    nonfull: [ListHead; SWAP_NR_ORDERS],
    frag: [ListHead; SWAP_NR_ORDERS],
    links: Box<[Link]>,
}

impl ClusterLists {
    /// Lists for `nr_clusters` clusters, all off-list.
    pub(crate) fn new(nr_clusters: u32) -> Self {
        let unlinked = Link { prev: NIL, next: NIL, on: None };
        ClusterLists {
            free: ListHead::EMPTY,
            full: ListHead::EMPTY,
            discard: ListHead::EMPTY,
            nonfull: [ListHead::EMPTY; SWAP_NR_ORDERS],
            frag: [ListHead::EMPTY; SWAP_NR_ORDERS],
            links: vec![unlinked; nr_clusters as usize].into_boxed_slice(),
        }
    }

    fn head_mut(&mut self, list: ListId) -> &mut ListHead {
        match list {
            ListId::Free => &mut self.free,
            ListId::Full => &mut self.full,
            ListId::Discard => &mut self.discard,
            ListId::Nonfull(o) => &mut self.nonfull[usize::from(o)],
            ListId::Frag(o) => &mut self.frag[usize::from(o)],
        }
    }

    fn head(&self, list: ListId) -> &ListHead {
        match list {
            ListId::Free => &self.free,
            ListId::Full => &self.full,
            ListId::Discard => &self.discard,
            ListId::Nonfull(o) => &self.nonfull[usize::from(o)],
            ListId::Frag(o) => &self.frag[usize::from(o)],
        }
    }

    /// Number of clusters on `list`.
    pub(crate) fn len(&self, list: ListId) -> u32 {
        self.head(list).len
    }

    /// The list cluster `idx` is on.
    pub(crate) fn list_of(&self, idx: u32) -> Option<ListId> {
        self.links[idx as usize].on
    }

    /// Appends `idx` (off-list) at the tail of `list`.
    pub(crate) fn add_tail(&mut self, idx: u32, list: ListId) {
        assert!(self.links[idx as usize].on.is_none(), "cluster {idx} is on a list already");
        let tail = self.head(list).tail;
        self.links[idx as usize] = Link { prev: tail, next: NIL, on: Some(list) };
        if tail == NIL {
            self.head_mut(list).head = idx;
        } else {
            self.links[tail as usize].next = idx;
        }
        let head = self.head_mut(list);
        head.tail = idx;
        head.len += 1;
    }

    /// Takes `idx` off its list.
    pub(crate) fn del(&mut self, idx: u32) {
        let link = self.links[idx as usize];
        let list = link.on.expect("del of an off-list cluster");
        if link.prev == NIL {
            self.head_mut(list).head = link.next;
        } else {
            self.links[link.prev as usize].next = link.next;
        }
        if link.next == NIL {
            self.head_mut(list).tail = link.prev;
        } else {
            self.links[link.next as usize].prev = link.prev;
        }
        self.head_mut(list).len -= 1;
        self.links[idx as usize] = Link { prev: NIL, next: NIL, on: None };
    }

    /// The members of `list`, head first. Context: allocates (tests, statistics).
    pub(crate) fn members(&self, list: ListId) -> Vec<u32> {
        self.iter(list).collect()
    }

    /// Walks `list` from the head.
    pub(crate) fn iter(&self, list: ListId) -> impl Iterator<Item = u32> + '_ {
        let mut at = self.head(list).head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let idx = at;
            at = self.links[idx as usize].next;
            Some(idx)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_link_and_unlink() {
        let mut lists = ClusterLists::new(4);
        lists.add_tail(2, ListId::Free);
        lists.add_tail(0, ListId::Free);
        lists.add_tail(3, ListId::Frag(4));
        assert_eq!(lists.members(ListId::Free), [2, 0]);
        lists.del(2);
        assert_eq!(lists.members(ListId::Free), [0]);
        lists.add_tail(2, ListId::Free);
        lists.del(0);
        lists.del(2);
        assert_eq!(lists.len(ListId::Free), 0);
        assert_eq!(lists.list_of(3), Some(ListId::Frag(4)));
    }

    #[test]
    fn extended_counts_move_in_and_out() {
        let mut ci = Cluster::new();
        ci.map[5] = SWAP_HAS_CACHE;
        assert_eq!(ci.needs_table(63), NeedTable::Yes);
        ci.extend = Some(Box::new([0; SWAPFILE_CLUSTER]));
        ci.set_slot_count(5, 5000);
        assert_eq!((ci.slot_count(5), ci.nr_extended), (5000, 1));
        assert!(ci.slot_has_cache(5));
        ci.set_slot_count(5, 62);
        assert_eq!((ci.slot_count(5), ci.nr_extended, ci.map[5]), (62, 0, SWAP_HAS_CACHE | 62));
    }

    #[test]
    fn every_transition_in_the_table_and_no_other() {
        use ClusterFlag as F;
        let all = [F::None, F::Free, F::Nonfull, F::Frag, F::Full, F::Discard, F::Discarding];
        let legal = all.iter().flat_map(|&a| all.iter().map(move |&b| (a, b)));
        let count = legal.filter(|&(a, b)| transition_is_legal(a, b)).count();
        assert_eq!(count, 24, "the table in the module documentation has 24 entries");
        for f in all {
            assert!(!transition_is_legal(f, f), "{f:?} -> itself");
        }
    }
}
