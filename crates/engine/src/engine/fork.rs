//! What a fork does to the engine: a child's copy of the page tables (the engine told of
//! the fork), the references a child forked without its knowledge reads through, the pause
//! around the fork, the child's own device and threads, and the staged pages either child
//! gets.

use super::*;

impl Engine {
    /// A process forked: its child's address space gets a copy of `parent`'s regions and
    /// page tables, served through `child_source`. Every swapped page gains a reference
    /// (its slots live on until both processes are done with them), so the child reads the
    /// parent's evicted pages correctly, never zeros. Pages resident at the fork are the
    /// kernel's (copy-on-write): the child's resident memory is neither tracked nor evicted;
    /// the engine serves the child's faults on swapped and untouched pages only.
    ///
    /// # Errors
    /// [`Error::NoSuchMm`] for an unknown parent.
    pub fn fork(&self, parent: MmId, child_source: Arc<dyn PageSource>) -> Result<MmId, Error> {
        self.core.fork(parent, child_source)
    }

    /// Keeps, for a child this process forked without `UFFD_FEATURE_EVENT_FORK`, a
    /// reference on every swap slot the engine's own address space refers to now: the
    /// child reads them through its copy of the engine, so they must not be freed and
    /// written again until it exits or execs ([`Engine::release_hold`]). The kernel's
    /// `copy_page_range` takes the same references.
    ///
    /// # Errors
    /// As [`Engine::fork`].
    ///
    /// Context: the engine quiescent ([`Engine::pause_for_fork`], faults stopped);
    /// allocates the copy's page tables; time in proportion to the swapped pages.
    pub fn hold_for_child(&self) -> Result<HoldId, Error> {
        let regions: Vec<Arc<Region>> = {
            let regions = self.core.regions.read();
            let space = regions.mms.get(&MmId::DEFAULT).ok_or(Error::NoSuchMm { mm: 0 })?;
            space.by_start.values().cloned().collect()
        };
        let mut slots = Vec::new();
        for region in regions {
            let pt = region.lock();
            for found in pt.entries(0, region.nr_pages() - 1) {
                if let Pte::Swap(entry) = found.pte {
                    let nr = 1u32 << found.order;
                    let duplicated = self.core.storage.device.dup(entry, nr);
                    assert!(duplicated.is_ok(), "{entry:?} in a page table, refused a dup");
                    slots.push((entry, nr));
                }
            }
        }
        let pages: u64 = slots.iter().map(|&(_, nr)| u64::from(nr)).sum();
        Stats::add(&self.core.stats.counters.fork_dup, pages);
        let mut holds = self.core.holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        holds.next += 1;
        let id = holds.next;
        holds.by_id.insert(id, slots);
        Ok(HoldId(id))
    }

    /// Drops the references of a hold ([`Engine::hold_for_child`]): its child's line has
    /// exited or exec'd. Slots nobody else refers to are freed. Unknown holds are ignored.
    ///
    /// Context: takes cluster locks and swap-cache shard locks; time in proportion to the
    /// slots held.
    pub fn release_hold(&self, hold: HoldId) {
        let slots = {
            let mut holds =
                self.core.holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            holds.by_id.remove(&hold.0)
        };
        for (entry, nr) in slots.unwrap_or_default() {
            self.core.put_entry(entry, nr);
            self.core.swap_cache.clear_shadows(entry.offset(), u64::from(nr));
        }
    }

    /// The holds in force: a forked child's copy of the engine carries its parent's, which
    /// are the parent's to keep, and releases them ([`Engine::release_hold`]).
    pub fn holds(&self) -> Vec<HoldId> {
        let holds = self.core.holds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        holds.by_id.keys().map(|&id| HoldId(id)).collect()
    }

    /// Puts back into the program every staged page its page source can put back now
    /// (the page source's rule 5; `staged.rs`): the event reader calls it once it has
    /// applied the events it read. Returns pages put back.
    ///
    /// Context: takes page-table locks one page at a time; one source call a page.
    pub fn unstage_all(&self) -> u64 {
        self.core.unstage_all()
    }

    /// Whether any page is staged (out of the program, held by its page source).
    pub fn has_staged(&self) -> bool {
        self.core.staged.count() > 0
    }

    /// The data of the engine's own staged pages, for a child forked without the engine's
    /// knowledge ([`Engine::restore_staged_in_child`] takes it there).
    ///
    /// Context: the engine paused for the fork ([`Engine::pause_for_fork`]).
    pub fn staged_for_child(&self) -> crate::staged::StagedCopy {
        self.core.staged_for_child()
    }

    /// In such a child, once its regions are registered with its own page source: the
    /// staged pages it inherited become resident, `copy`'s data mapped in first.
    pub fn restore_staged_in_child(&self, copy: &crate::staged::StagedCopy) {
        self.core.restore_staged_in_child(copy);
    }

    /// Fault injection for tests: while `hold` is set, [`Engine::unstage_all`] puts nothing
    /// back (a fault on a staged page still does).
    pub fn hold_staged(&self, hold: bool) {
        self.core.staged.set_hold(hold);
    }

    /// Stops the engine's own reclaim (the background reclaimer's passes, direct reclaim
    /// in faults, [`Engine::pageout`], pool writeback and compaction) and waits until none
    /// is in flight, so the engine's memory is consistent when the process forks
    /// ([`crate::quiesce`]). Faults are still served: the caller stops the other threads'.
    ///
    /// Context: the forking thread; yields while a reclaim batch ends.
    pub fn pause_for_fork(&self) {
        self.core.fork_pause.pause();
        if self.core.config.background_reclaim {
            self.core.kswapd_bell.wait_asleep();
        }
        self.core.storage.device.backend().fork(backend::ForkStep::Prepare);
    }

    /// Whether reclaim is paused for a fork ([`Engine::pause_for_fork`]); in a forked
    /// child, until the frontend has let it run again (after the embedder's fork hook).
    pub fn reclaim_paused(&self) -> bool {
        self.core.fork_pause.is_paused()
    }

    /// Lets reclaim run again after [`Engine::pause_for_fork`] (in the parent).
    pub fn resume_after_fork(&self) {
        self.core.storage.device.backend().fork(backend::ForkStep::Resume);
        self.core.fork_pause.resume();
        self.core.wake_kswapd_if_short();
    }

    /// In a forked child, on its only thread, before anything else uses this engine: the
    /// copy it inherited becomes the child's own. Its swap device writes to `own` from now
    /// on (a new backend of the same size, wrapped as the configuration asks), reading
    /// the slots it inherited from its parent's backend until it writes them (backend's
    /// `OverlayBackend`: the parent keeps them for it, [`Engine::hold_for_child`]). The
    /// parent's reclaimer thread does not exist here (its handle is forgotten, never
    /// joined), so a new one starts, asleep until reclaim runs again: the caller resumes it
    /// ([`Engine::resume_after_fork`]) once the child's pages can be taken through its own
    /// uffd. The event counters start from zero (the child's summary counts its own events;
    /// the state, pages and charges are the copy's), but for the zero pages it inherited
    /// mapped, which it counts as mapped.
    ///
    /// # Errors
    /// [`Error::Config`] if `own` is not the device's size (nothing changed then) or the
    /// reclaimer thread cannot start.
    pub fn after_fork_in_child(&self, own: Arc<dyn Backend>) -> Result<(), Error> {
        let device = &self.core.storage.device;
        device.backend().fork(backend::ForkStep::Inherited);
        let own = wrap_backend(&self.core.config, own)?;
        let overlay = backend::OverlayBackend::new(device.backend(), own)
            .map_err(|e| Error::Config(format!("a forked child's swap device: {e}")))?;
        device
            .replace_backend(Arc::new(overlay))
            .map_err(|e| Error::Config(format!("a forked child's swap device: {e}")))?;
        let mut kswapd = self.kswapd.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The parent's thread: its handle names a thread of another process.
        std::mem::forget(kswapd.take());
        self.core.kswapd_tid.store(0, std::sync::atomic::Ordering::Release);
        self.core.stats.reset_events();
        // The zero pages it inherited write-protected are mapped uncharged in the child too,
        // so a summary over all images never counts more written than mapped.
        let inherited = self.core.zero_mapped_pages.load(Ordering::Relaxed);
        Stats::add(&self.core.stats.counters.zero_mapped, inherited);
        *kswapd = self.core.spawn_reclaimer()?;
        Ok(())
    }
}
