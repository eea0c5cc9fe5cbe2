//! The engine's invariants, checked at a quiescent moment: page tables against the LRU,
//! the charges, the staged list, and every slot's count against its references.

use super::*;

impl Core {
    pub(super) fn check_invariants(&self) {
        let _quiet = self.kswapd_running.lock();
        self.lru.check_invariants();
        self.swap_cache.check_invariants();
        self.storage.zeromap.check_invariants();
        self.storage.device.check_invariants();
        if let Some(zswap) = &self.storage.zswap {
            zswap.check_invariants();
            assert!(
                zswap.stored_pages() <= self.storage.device.inuse_pages(),
                "pool entries for free slots: {} stored, {} slots in use",
                zswap.stored_pages(),
                self.storage.device.inuse_pages()
            );
        }
        let regions = self.regions.read();
        let (mut resident, mut zero_mapped, mut staged, mut references) =
            (0u64, 0u64, 0u64, std::collections::HashMap::new());
        for region in regions.mms.values().flat_map(|mm| mm.by_start.values()) {
            let pt = region.lock();
            pt.check_invariants();
            for found in pt.entries(0, region.nr_pages() - 1) {
                let pages = 1u64 << found.order;
                match found.pte {
                    Pte::Resident(id) => {
                        let (owner, _) =
                            self.lru.get(id).expect("resident entry with a dead LRU id");
                        assert_eq!(
                            (owner.region, owner.index, owner.order),
                            (region.id(), found.first, found.order)
                        );
                        resident += pages;
                    }
                    Pte::Swap(entry) => {
                        for page in 0..pages {
                            *references.entry(entry.add(page)).or_insert(0u32) += 1;
                        }
                    }
                    Pte::ZeroMapped => {
                        assert!(region.managed(), "a zero-page entry in a forked child's table");
                        zero_mapped += pages;
                    }
                    Pte::Staged(id) => {
                        let (owner, list) =
                            self.lru.get(id).expect("staged entry with a dead LRU id");
                        assert_eq!(
                            (owner.region, owner.index, owner.order, list),
                            (region.id(), found.first, 0, crate::lru::ListKind::Isolated)
                        );
                        assert!(self.staged.contains(id), "staged entry with no place");
                        staged += 1;
                    }
                }
            }
        }
        let gauge = self.zero_mapped_pages.load(Ordering::Relaxed);
        assert_eq!(zero_mapped, gauge, "zero-page entries vs their gauge");
        assert_eq!(staged, self.staged.count(), "staged entries vs their places");
        let counts = self.lru.counts();
        assert_eq!(counts.isolated_pages, staged, "folios left isolated but the staged");
        assert_eq!(resident, counts.active_pages + counts.inactive_pages, "page tables vs LRU");
        let charged = (resident + staged) * PAGE_SIZE as u64;
        assert_eq!(charged, self.budget.resident_bytes(), "resident charge");
        let holds = self.holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &(entry, nr) in holds.by_id.values().flatten() {
            for page in 0..u64::from(nr) {
                *references.entry(entry.add(page)).or_insert(0u32) += 1;
            }
        }
        drop(holds);
        let retained = self.check_retained_folios(&references);
        // Every slot's count is exactly its page-table references and holds.
        for (entry, expected) in &references {
            let count = self.storage.device.count(*entry).expect("swap entry on the device");
            assert_eq!(count, *expected, "swap count of {entry:?}");
        }
        let slots = references.keys().chain(&retained).collect::<HashSet<_>>().len() as u64;
        assert_eq!(self.storage.device.inuse_pages(), slots, "slots in use vs swap entries");
    }

    /// With nothing in flight, the swap cache holds only folios a failed page-out left as
    /// the only copy of their data (unlocked, up to date, charged), each until no page refers
    /// to its slots any more (simulator finding E). Returns the slots they pin.
    fn check_retained_folios(&self, references: &HashMap<SwapEntry, u32>) -> Vec<SwapEntry> {
        let (mut slots, mut bytes) = (Vec::new(), 0);
        let folios = self.swap_cache.folios();
        for folio in &folios {
            let first = SwapEntry::new(self.storage.device.swap_type(), folio.first_slot());
            assert!(!folio.is_locked(), "folio at {first:?} locked with nothing in flight");
            let outcome = folio.wait_unlocked().0;
            assert!(matches!(outcome, Outcome::Uptodate { .. }), "folio at {first:?}: {outcome:?}");
            assert!(folio.is_charged(), "retained folio at {first:?} not charged");
            let pinned: Vec<SwapEntry> = (0..1u64 << folio.order()).map(|i| first.add(i)).collect();
            assert!(
                pinned.iter().any(|slot| references.contains_key(slot)),
                "folio at {first:?} left in the swap cache with no page referring to it"
            );
            bytes += folio.len_bytes() as u64;
            slots.extend(pinned);
        }
        assert_eq!(self.budget.swapcache_bytes(), bytes, "swap cache charge vs retained folios");
        let cached = self.nr_swapcached.load(Ordering::Relaxed);
        assert_eq!(cached, folios.len() as u64, "nr_swapcached vs folios in the swap cache");
        slots
    }
}
