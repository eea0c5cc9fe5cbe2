//! `check_invariants()` and the read-only views tests and `uswap stat` use.
//!
//! The invariants of a quiescent device (no call in flight on another thread):
//!
//! 1. every cluster is on exactly the list its flag names; no cluster is isolated
//!    (`None`) or mid-discard (`Discarding`);
//! 2. a cluster's count equals its non-zero slot bytes (bad slots included);
//! 3. flag and count agree: free and discard clusters have count 0 (and order 0), full
//!    ones 512, nonfull and frag ones 1 ..= 511 and sit on the list of their order;
//! 4. slot bytes are valid encodings; extended counts have a table and exceed 62;
//! 5. `inuse_pages` equals the used slots of all clusters, bad slots excluded.

use crate::cluster::{
    cluster_is_free, cluster_is_full, Cluster, ClusterFlag, ListId, SWAP_COUNT_EXTENDED,
    SWAP_HAS_CACHE, SWAP_MAP_BAD, SWAP_MAP_MAX,
};
use crate::device::SwapDevice;
use crate::SWAPFILE_CLUSTER;

/// A snapshot of one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterState {
    /// Used slots, bad slots included.
    pub count: u16,
    /// The order it serves.
    pub order: u8,
    /// Its flag.
    pub flag: ClusterFlag,
}

impl SwapDevice {
    /// Checks every invariant of the module documentation.
    ///
    /// # Panics
    /// On the first violated invariant, with what was found. Call it only while no other
    /// thread is inside the device (tests, simulation, after a stress run).
    ///
    /// Context: takes every cluster lock in index order, then the list lock; allocates.
    pub fn check_invariants(&self) {
        let clusters: Vec<_> = (0..self.nr_clusters).map(|idx| self.lock_cluster(idx)).collect();
        let lists = self.lists.lock();
        let mut on_lists = 0;
        for list in ListId::all() {
            for idx in lists.iter(list) {
                let ci = &clusters[idx as usize];
                assert_eq!(
                    ci.flags,
                    list.flag(),
                    "cluster {idx} on {list:?} has flag {:?}",
                    ci.flags
                );
                if let ListId::Nonfull(o) | ListId::Frag(o) = list {
                    assert_eq!(ci.order, o, "cluster {idx} on {list:?} serves order {}", ci.order);
                }
                on_lists += 1;
            }
        }
        assert_eq!(on_lists, self.nr_clusters, "clusters missing from the lists (isolated?)");
        let mut used = 0u64;
        let mut bad = 0u64;
        for (idx, ci) in clusters.iter().enumerate() {
            check_cluster(idx, ci);
            used += u64::from(ci.count);
            bad += ci.map.iter().filter(|&&b| b == SWAP_MAP_BAD).count() as u64;
        }
        assert_eq!(self.inuse_pages(), used - bad, "inuse_pages vs used slots");
    }

    /// The state of cluster `idx`.
    ///
    /// # Panics
    /// If `idx >= nr_clusters()`. Context: takes the cluster lock.
    pub fn cluster_state(&self, idx: u32) -> ClusterState {
        let ci = self.lock_cluster(idx);
        ClusterState { count: ci.count, order: ci.order, flag: ci.flags }
    }

    /// The clusters on `list`, head first.
    ///
    /// Context: takes the list lock; allocates.
    pub fn list_members(&self, list: ListId) -> Vec<u32> {
        self.lists.lock().members(list)
    }
}

fn check_cluster(idx: usize, ci: &Cluster) {
    let used = ci.map.iter().filter(|&&b| b != 0).count();
    assert_eq!(usize::from(ci.count), used, "cluster {idx}: count vs used slots");
    match ci.flags {
        ClusterFlag::Free | ClusterFlag::Discard => {
            assert!(cluster_is_free(ci), "cluster {idx}: {:?} with count {}", ci.flags, ci.count);
            assert_eq!(ci.order, 0, "cluster {idx}: free with order {}", ci.order);
            assert!(ci.extend.is_none(), "cluster {idx}: free with an extend table");
        }
        ClusterFlag::Full => assert!(cluster_is_full(ci), "cluster {idx}: full at {}", ci.count),
        ClusterFlag::Nonfull | ClusterFlag::Frag => assert!(
            !cluster_is_free(ci) && !cluster_is_full(ci),
            "cluster {idx}: {:?} with count {}",
            ci.flags,
            ci.count
        ),
        f @ (ClusterFlag::None | ClusterFlag::Discarding) => panic!("cluster {idx}: {f:?}"),
    }
    let mut extended = 0;
    for (ci_off, &byte) in ci.map.iter().enumerate() {
        if byte == SWAP_MAP_BAD || byte == 0 {
            continue;
        }
        let count_bits = byte & !(SWAP_HAS_CACHE | SWAP_COUNT_EXTENDED);
        if byte & SWAP_COUNT_EXTENDED != 0 {
            extended += 1;
            assert_eq!(count_bits, 0, "cluster {idx} slot {ci_off}: byte {byte:#x}");
            let table = ci.extend.as_ref().expect("extended count without a table");
            assert!(table[ci_off] > u32::from(SWAP_MAP_MAX), "cluster {idx} slot {ci_off}");
        } else {
            assert!(count_bits <= SWAP_MAP_MAX, "cluster {idx} slot {ci_off}: byte {byte:#x}");
        }
    }
    assert_eq!(ci.nr_extended, extended, "cluster {idx}: nr_extended");
    assert!(usize::from(ci.count) <= SWAPFILE_CLUSTER);
}
