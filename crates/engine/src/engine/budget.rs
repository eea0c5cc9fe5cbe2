//! The budget as the embedder sees and moves it: the charge outside the engine, the
//! reserve, the budget itself, and a program that locks all its memory.

use super::*;

impl Engine {
    /// Counts `bytes` of memory the engine does not manage against the budget (capped at
    /// half of it, or as [`Engine::set_outside_room`] says:
    /// [`crate::budget::Budget::set_outside`]), and wakes the background
    /// reclaimer if that leaves the budget short. `uswap run`'s shim calls it with the part
    /// of the process's resident set that is not the engine's charge, so the whole process
    /// stays within the budget.
    ///
    /// Context: lock-free; may wake the reclaimer (never reclaims on this thread).
    pub fn set_outside_charge(&self, bytes: u64) {
        self.core.budget.set_outside(bytes);
        self.core.wake_kswapd_if_short();
    }

    /// Lets the outside charge take all of the budget but `bytes` instead of half of it
    /// ([`crate::budget::Budget::set_outside_room`]): for an embedder that sizes the
    /// budget above the process's unmanaged memory itself.
    ///
    /// Context: lock-free; may wake the reclaimer (never reclaims on this thread).
    pub fn set_outside_room(&self, bytes: u64) {
        self.core.budget.set_outside_room(bytes);
        self.core.wake_kswapd_if_short();
    }

    /// Sets the outside charge from the process's resident set: what `rss_bytes` holds
    /// beyond the engine's own charge and its memory beside the budget
    /// ([`Engine::beside_bytes`], in the resident set but not the program's to pay for),
    /// saturating (a zero-page mapping is charged but not resident). Returns how much the
    /// outside charge grew.
    ///
    /// Context: as [`Engine::set_outside_charge`].
    pub fn charge_outside_from_rss(&self, rss_bytes: u64) -> u64 {
        let before = self.outside_charge();
        let managed = self.charged_bytes().saturating_sub(before) + self.beside_bytes();
        self.set_outside_charge(rss_bytes.saturating_sub(managed));
        self.outside_charge().saturating_sub(before)
    }

    /// Keeps `bytes` more of the budget free, for memory the embedder expects to charge in
    /// a burst (capped at an eighth of the budget: [`crate::budget::Budget::set_reserve`]),
    /// and wakes the background reclaimer if that leaves the budget short. `uswap run`'s
    /// shim sets it from the bursts its scans find: pages the program touched before their
    /// range was registered.
    ///
    /// Context: lock-free; may wake the reclaimer (never reclaims on this thread).
    pub fn set_reserve(&self, bytes: u64) {
        self.core.budget.set_reserve(bytes);
        self.core.wake_kswapd_if_short();
    }

    /// Changes the budget while the program runs (`uswap run`'s broker moves budget
    /// between the processes of a tree; `--budget auto` follows the program's faults).
    /// A larger budget takes effect at once; a smaller one wakes the background reclaimer,
    /// which pages out until the charge is back under the new watermarks (without one,
    /// the next faults reclaim directly), as the kernel does when a memory cgroup's limit
    /// is lowered. The watermarks are derived anew ([`EngineConfig::watermarks_for`]) and
    /// a compressed pool that is a share of the budget gets the same share of the new one.
    ///
    /// # Errors
    /// [`Error::Config`] for a budget below one folio of the configured order, or one the
    /// pool's share cannot be made of (under the pool's smallest limit): nothing changes.
    ///
    /// Context: lock-free; may wake the reclaimer (never reclaims on this thread).
    pub fn set_budget(&self, budget_bytes: u64) -> Result<(), Error> {
        let core = &self.core;
        if budget_bytes < core.config.folio_bytes() {
            return Err(Error::Config(format!(
                "budget of {budget_bytes} bytes is smaller than one folio ({} bytes at order {})",
                core.config.folio_bytes(),
                core.config.folio_order
            )));
        }
        let watermarks = core.config.watermarks_for(budget_bytes);
        watermarks.validate(budget_bytes)?;
        if let Some(zswap) = core.storage.zswap.as_ref().filter(|_| !core.pool_is_beside()) {
            zswap
                .set_budget(budget_bytes)
                .map_err(|e| Error::Config(format!("compressed pool: {e}")))?;
        }
        core.budget.resize(budget_bytes, watermarks)?;
        Stats::add(&core.stats.counters.budget_changes, 1);
        core.wake_kswapd_if_short();
        Ok(())
    }

    /// The budget in force, in bytes ([`Engine::set_budget`]; at first the configured one).
    pub fn budget_bytes(&self) -> u64 {
        self.core.budget.budget_bytes()
    }

    /// The program locks all its memory (`mlockall(MCL_CURRENT)`), has locked it, or has
    /// unlocked it (`munlockall`, or the call failed): [`AllLocked`]. Locked pages are never
    /// paged out, as the kernel's are not (the kernel's unevictable list), and they count
    /// against the budget: while locking or locked, reclaim stops at once (counted in
    /// `reclaim_locked`) instead of failing to take every page it scans, and the budget is
    /// exceeded by what the program locked. Pages a program locks range by range (`mlock`)
    /// are refused one take at a time (the kernel moves pages only between ranges locked
    /// alike).
    ///
    /// Context: lock-free.
    pub fn set_all_locked(&self, state: AllLocked) {
        self.core.all_locked.store(state != AllLocked::Unlocked, Ordering::SeqCst);
        if state == AllLocked::Locked {
            Stats::add(&self.core.stats.counters.all_locked, 1);
        }
    }

    /// What the budget charges now, in bytes: resident and swap-cache pages, the pool (or,
    /// beside the budget, its metadata), and the outside charge
    /// ([`Engine::set_outside_charge`]). The `used_bytes` gauge; lock-free, unlike
    /// [`Engine::stats`], so for callers that poll.
    pub fn charged_bytes(&self) -> u64 {
        self.core.charged_bytes()
    }

    /// Memory the engine holds beside the budget, not charged to it: the data pages of a
    /// pool of its own (`ZswapSettings::separate_bytes`), else nothing. It is in the
    /// process's resident set, so whoever sets the outside charge from that must leave it
    /// out.
    pub fn beside_bytes(&self) -> u64 {
        if self.core.pool_is_beside() {
            self.core.storage.pool_data_bytes()
        } else {
            0
        }
    }

    /// The outside charge in force.
    pub fn outside_charge(&self) -> u64 {
        self.core.budget.outside_bytes()
    }
}
