//! The memory budget and its watermarks.
//!
//! Everything the managed pages occupy is charged against one budget in bytes, as the kernel
//! charges zswap to the memory cgroup: pages mapped in the regions (resident), folio data
//! held by the swap cache while a page-out or page-in is in flight, and the compressed pool.
//!
//! ```text
//!  0                                                        budget
//!  |======= used ========|.............. free ................|
//!                                     |<- high ->|  background reclaim runs until free >= high
//!                                          |<-low->|  free < low wakes the background reclaimer
//!                                              |min|  free < min + need: the fault reclaims itself
//! ```
//!
//! The watermarks are levels of *free* budget: `min <= low <= high < budget`. A fault that
//! needs `need` bytes charges them only once `free >= min + need`, reclaiming directly
//! first if it must (the kernel's allocstall); so the charged total never passes the budget
//! by more than the folios in flight at once.
//!
//! Memory the engine learns about late (an embedder's outside charge, pages a program
//! touched before their range was registered) arrives in bursts it cannot refuse. The
//! embedder may ask for a *reserve* ([`Budget::set_reserve`]) the size of the bursts it
//! sees: every level is raised by it, so reclaim keeps that much more budget free and the
//! next burst lands inside the budget instead of past it (the kernel boosts its
//! watermarks after a burst in the same spirit: `watermark_boost_factor`).
//!
//! Reclaim leaves the program a *working floor* of resident pages ([`Budget::floor_bytes`]).
//! Where the rest of the charge (an outside charge, the pool's bookkeeping) fills the budget
//! by itself, paging out the last resident pages cannot bring the charge under it, and every
//! fault would evict the page the one before it mapped: a program that touches two pages
//! for one step would never take it. A memory cgroup invokes its OOM killer there; the
//! engine runs over the budget by at most the floor and counts it (`reclaim_floor`).
//!
//! Context: lock-free counters; any thread.

use crate::sync::{AtomicU64, Ordering};
use crate::{Error, PAGE_SIZE};

/// The largest working floor: enough pages for a program's step (a system call's buffers,
/// the structures one request walks) at any budget, and half the room `uswap run`'s broker
/// leaves each process beside its unmanaged memory, so the floor binds only where that
/// room is gone.
pub const FLOOR_MAX_BYTES: u64 = 1 << 20;

/// Free-budget levels, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this (plus what a fault needs), the faulting thread reclaims.
    pub min_bytes: u64,
    /// Below this, the background reclaimer is woken.
    pub low_bytes: u64,
    /// The background reclaimer stops once free reaches this.
    pub high_bytes: u64,
}

impl Watermarks {
    /// Defaults for a budget: min 1%, low 2%, high 3% of the budget, but at least one
    /// largest folio apart so a reclaim pass has room to make progress, when the budget
    /// allows it.
    pub fn default_for(budget_bytes: u64, max_folio_bytes: u64) -> Self {
        let percent = budget_bytes / 100;
        let step = percent.max(max_folio_bytes);
        if 3 * step < budget_bytes {
            Watermarks { min_bytes: step, low_bytes: 2 * step, high_bytes: 3 * step }
        } else {
            // A tiny budget: keep the order, let rounding pull the levels towards zero.
            Watermarks { min_bytes: percent, low_bytes: 2 * percent, high_bytes: 3 * percent }
        }
    }

    /// Checks `min <= low <= high < budget`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the levels that are out of order.
    pub fn validate(&self, budget_bytes: u64) -> Result<(), Error> {
        let Watermarks { min_bytes, low_bytes, high_bytes } = *self;
        if !(min_bytes <= low_bytes && low_bytes <= high_bytes && high_bytes < budget_bytes) {
            return Err(Error::Config(format!(
                "watermarks out of order: need min <= low <= high < budget, got min {min_bytes}, \
                 low {low_bytes}, high {high_bytes}, budget {budget_bytes} (bytes)"
            )));
        }
        Ok(())
    }
}

/// How urgent reclaim is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pressure {
    /// Free is at or above the high watermark: nothing to do.
    None,
    /// Free is below high but not below low: a running reclaimer keeps going.
    BelowHigh,
    /// Free is below low: wake the background reclaimer.
    BelowLow,
    /// Free is below min: faults reclaim directly.
    BelowMin,
}

/// The budget's accounting (see the module documentation).
#[derive(Debug)]
pub struct Budget {
    /// The budget in force ([`Budget::resize`]).
    budget_bytes: AtomicU64,
    /// The watermarks in force, each read whole (a reader may see levels of two sizes
    /// for an instant while the budget changes: it only decides how hard to reclaim).
    min_bytes: AtomicU64,
    low_bytes: AtomicU64,
    high_bytes: AtomicU64,
    resident_bytes: AtomicU64,
    swapcache_bytes: AtomicU64,
    /// Memory the embedder counts against the budget that the engine does not manage
    /// ([`Budget::set_outside`]).
    outside_bytes: AtomicU64,
    /// Extra free budget reclaim keeps ([`Budget::set_reserve`]).
    reserve_bytes: AtomicU64,
    /// The least budget the outside charge leaves the engine; 0: half the budget
    /// ([`Budget::set_outside_room`]).
    outside_room_bytes: AtomicU64,
    peak_bytes: AtomicU64,
}

impl Budget {
    /// A budget with validated watermarks.
    ///
    /// # Errors
    /// [`Error::Config`] for a budget below one page or watermarks out of order.
    pub fn new(budget_bytes: u64, watermarks: Watermarks) -> Result<Self, Error> {
        if budget_bytes < PAGE_SIZE as u64 {
            return Err(Error::Config(format!(
                "budget of {budget_bytes} bytes is smaller than one page ({PAGE_SIZE} bytes)"
            )));
        }
        watermarks.validate(budget_bytes)?;
        Ok(Budget {
            budget_bytes: AtomicU64::new(budget_bytes),
            min_bytes: AtomicU64::new(watermarks.min_bytes),
            low_bytes: AtomicU64::new(watermarks.low_bytes),
            high_bytes: AtomicU64::new(watermarks.high_bytes),
            resident_bytes: AtomicU64::new(0),
            swapcache_bytes: AtomicU64::new(0),
            outside_bytes: AtomicU64::new(0),
            reserve_bytes: AtomicU64::new(0),
            outside_room_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
        })
    }

    /// The budget in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes.load(Ordering::Relaxed)
    }

    /// The watermarks.
    pub fn watermarks(&self) -> Watermarks {
        Watermarks {
            min_bytes: self.min_bytes.load(Ordering::Relaxed),
            low_bytes: self.low_bytes.load(Ordering::Relaxed),
            high_bytes: self.high_bytes.load(Ordering::Relaxed),
        }
    }

    /// Changes the budget and its watermarks while pages are charged. Nothing is
    /// uncharged: a smaller budget leaves the charge over it until reclaim brings it
    /// down (the caller wakes the reclaimer), as a memory cgroup whose limit is lowered.
    /// The outside charge and the reserve keep their caps relative to the new budget.
    ///
    /// # Errors
    /// As [`Budget::new`]; the budget in force is then unchanged.
    ///
    /// Context: lock-free; any thread.
    pub fn resize(&self, budget_bytes: u64, watermarks: Watermarks) -> Result<(), Error> {
        Budget::new(budget_bytes, watermarks)?;
        // Levels first when shrinking, the budget first when growing: a reader between
        // the stores sees levels that fit a budget no larger than the one it reads.
        let store_levels = || {
            self.min_bytes.store(watermarks.min_bytes, Ordering::Relaxed);
            self.low_bytes.store(watermarks.low_bytes, Ordering::Relaxed);
            self.high_bytes.store(watermarks.high_bytes, Ordering::Relaxed);
        };
        if budget_bytes < self.budget_bytes() {
            store_levels();
            self.budget_bytes.store(budget_bytes, Ordering::Relaxed);
        } else {
            self.budget_bytes.store(budget_bytes, Ordering::Relaxed);
            store_levels();
        }
        self.outside_bytes.fetch_min(self.outside_cap(budget_bytes), Ordering::Relaxed);
        self.reserve_bytes.fetch_min(budget_bytes / 8, Ordering::Relaxed);
        Ok(())
    }

    /// Charges pages now mapped in a region.
    pub fn charge_resident(&self, bytes: u64) {
        self.resident_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Uncharges pages no longer mapped.
    pub fn uncharge_resident(&self, bytes: u64) {
        let old = self.resident_bytes.fetch_sub(bytes, Ordering::Relaxed);
        assert!(old >= bytes, "resident charge underflow: {old} - {bytes}");
    }

    /// Charges folio data held by the swap cache.
    pub fn charge_swapcache(&self, bytes: u64) {
        self.swapcache_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Uncharges folio data the swap cache released.
    pub fn uncharge_swapcache(&self, bytes: u64) {
        let old = self.swapcache_bytes.fetch_sub(bytes, Ordering::Relaxed);
        assert!(old >= bytes, "swap cache charge underflow: {old} - {bytes}");
    }

    /// Charged resident bytes.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes.load(Ordering::Relaxed)
    }

    /// Charged swap cache bytes.
    pub fn swapcache_bytes(&self) -> u64 {
        self.swapcache_bytes.load(Ordering::Relaxed)
    }

    /// Sets the memory outside the engine's management that counts against the budget
    /// (the rest of a process whose whole resident set is budgeted: `uswap run`'s shim
    /// sets it from VmRSS). Capped at half the budget (or at all of it but the room
    /// [`Budget::set_outside_room`] says), so the engine always keeps room to work: a
    /// program whose own unmanaged memory exceeds that is over budget, and the engine
    /// cannot help it.
    pub fn set_outside(&self, bytes: u64) {
        let cap = self.outside_cap(self.budget_bytes());
        self.outside_bytes.store(bytes.min(cap), Ordering::Relaxed);
    }

    /// Lets the outside charge take all of a budget but `bytes` (never less than half of
    /// it): for an embedder that sizes the budget itself above the memory it charges as
    /// outside, plus that much room (`uswap run`'s broker gives each process at least its
    /// unmanaged memory and 2 MiB). 0 is the default: half the budget.
    pub fn set_outside_room(&self, bytes: u64) {
        self.outside_room_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The most the outside charge may be under a budget of `budget_bytes`.
    fn outside_cap(&self, budget_bytes: u64) -> u64 {
        match self.outside_room_bytes.load(Ordering::Relaxed) {
            0 => budget_bytes / 2,
            room => budget_bytes.saturating_sub(room).max(budget_bytes / 2),
        }
    }

    /// The outside charge in force ([`Budget::set_outside`]).
    pub fn outside_bytes(&self) -> u64 {
        self.outside_bytes.load(Ordering::Relaxed)
    }

    /// Keeps `bytes` more of the budget free: every watermark is raised by it (module
    /// documentation). Capped at an eighth of the budget, so the reserve never starves the
    /// pages it protects.
    pub fn set_reserve(&self, bytes: u64) {
        self.reserve_bytes.store(bytes.min(self.budget_bytes() / 8), Ordering::Relaxed);
    }

    /// The reserve in force ([`Budget::set_reserve`]).
    pub fn reserve_bytes(&self) -> u64 {
        self.reserve_bytes.load(Ordering::Relaxed)
    }

    /// The least resident charge reclaim leaves (module documentation): a sixteenth of the
    /// budget, at most [`FLOOR_MAX_BYTES`].
    pub fn floor_bytes(&self) -> u64 {
        (self.budget_bytes() / 16).min(FLOOR_MAX_BYTES)
    }

    /// Whether the resident charge is down to the working floor: reclaim stops there.
    pub fn at_floor(&self) -> bool {
        self.resident_bytes() <= self.floor_bytes()
    }

    /// Everything charged, given the pool's current size; records the peak.
    pub fn used(&self, pool_bytes: u64) -> u64 {
        let used =
            self.resident_bytes() + self.swapcache_bytes() + pool_bytes + self.outside_bytes();
        self.peak_bytes.fetch_max(used, Ordering::Relaxed);
        used
    }

    /// The most ever charged (as observed by [`Budget::used`]).
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    /// Free budget, zero when over.
    pub fn free(&self, pool_bytes: u64) -> u64 {
        self.budget_bytes().saturating_sub(self.used(pool_bytes))
    }

    /// How urgent reclaim is, for a fault about to charge `need` more bytes.
    pub fn pressure(&self, pool_bytes: u64, need: u64) -> Pressure {
        let free = self.free(pool_bytes).saturating_sub(self.reserve_bytes());
        let wm = self.watermarks();
        if free < wm.min_bytes + need {
            Pressure::BelowMin
        } else if free < wm.low_bytes + need {
            Pressure::BelowLow
        } else if free < wm.high_bytes {
            Pressure::BelowHigh
        } else {
            Pressure::None
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ordered_for_every_size() {
        for budget in [4096u64, 65536, 1 << 20, 256 << 20, 64 << 30] {
            let wm = Watermarks::default_for(budget, 64 << 10);
            wm.validate(budget).unwrap_or_else(|e| panic!("{budget}: {e}"));
        }
    }

    #[test]
    fn out_of_order_watermarks_are_refused() {
        let wm = Watermarks { min_bytes: 10, low_bytes: 5, high_bytes: 20 };
        let err = Budget::new(1 << 20, wm).unwrap_err();
        assert!(err.to_string().contains("watermarks out of order"), "{err}");
        let wm = Watermarks { min_bytes: 1, low_bytes: 2, high_bytes: 1 << 20 };
        assert!(Budget::new(1 << 20, wm).is_err(), "high must be below the budget");
        assert!(Budget::new(100, Watermarks::default_for(100, 4096)).is_err());
    }

    #[test]
    fn the_outside_charge_counts_and_is_capped_at_half() {
        let wm = Watermarks { min_bytes: 100, low_bytes: 200, high_bytes: 300 };
        let budget = Budget::new(1000 * 4096, wm).unwrap();
        budget.charge_resident(600 * 4096);
        budget.set_outside(100 * 4096);
        assert_eq!(budget.used(0), 700 * 4096);
        assert_eq!(budget.free(0), 300 * 4096);
        assert_eq!(budget.pressure(0, 0), Pressure::None);
        budget.set_outside(u64::MAX);
        assert_eq!(budget.outside_bytes(), 500 * 4096, "capped at half the budget");
        assert_eq!(budget.free(0), 0, "600 resident + 500 outside: over the budget");
        assert_eq!(budget.pressure(0, 0), Pressure::BelowMin);
        budget.set_outside(0);
        assert_eq!(budget.used(0), 600 * 4096);
        budget.set_outside_room(100 * 4096);
        budget.set_outside(u64::MAX);
        assert_eq!(budget.outside_bytes(), 900 * 4096, "all but the room");
        budget.set_outside_room(900 * 4096);
        budget.set_outside(u64::MAX);
        assert_eq!(budget.outside_bytes(), 500 * 4096, "never less than half");
    }

    #[test]
    fn the_reserve_raises_every_level_and_is_capped() {
        let wm = Watermarks { min_bytes: 100, low_bytes: 200, high_bytes: 300 };
        let budget = Budget::new(8000, wm).unwrap();
        budget.charge_resident(7000);
        assert_eq!(budget.pressure(0, 0), Pressure::None, "1000 free");
        budget.set_reserve(750);
        assert_eq!(budget.pressure(0, 0), Pressure::BelowHigh, "250 free past the reserve");
        assert_eq!(budget.pressure(0, 100), Pressure::BelowLow);
        assert_eq!(budget.pressure(0, 200), Pressure::BelowMin);
        assert_eq!(budget.free(0), 1000, "the reserve is not a charge");
        budget.set_reserve(u64::MAX);
        assert_eq!(budget.reserve_bytes(), 1000, "capped at an eighth of the budget");
        assert_eq!(budget.pressure(0, 0), Pressure::BelowMin);
        budget.set_reserve(0);
        assert_eq!(budget.pressure(0, 0), Pressure::None);
    }

    #[test]
    fn a_budget_resized_keeps_its_charge_and_moves_its_levels() {
        let wm = Watermarks { min_bytes: 1000, low_bytes: 2000, high_bytes: 3000 };
        let budget = Budget::new(80_000, wm).unwrap();
        budget.charge_resident(60_000);
        budget.set_outside(10_000);
        budget.set_reserve(6_000);
        assert_eq!(budget.pressure(0, 0), Pressure::None, "10000 free, 4000 past the reserve");
        let smaller = Watermarks { min_bytes: 500, low_bytes: 1000, high_bytes: 1500 };
        budget.resize(40_000, smaller).unwrap();
        assert_eq!(budget.budget_bytes(), 40_000);
        assert_eq!(budget.watermarks(), smaller);
        assert_eq!(budget.resident_bytes(), 60_000, "nothing is uncharged");
        assert_eq!(budget.outside_bytes(), 10_000, "still under half the new budget");
        assert_eq!(budget.reserve_bytes(), 5_000, "capped at an eighth of the new budget");
        assert_eq!(budget.free(0), 0, "over the smaller budget until reclaim");
        assert_eq!(budget.pressure(0, 0), Pressure::BelowMin);
        budget.uncharge_resident(40_000);
        assert_eq!(budget.pressure(0, 0), Pressure::None, "10000 free, 5000 past the reserve");
        budget.resize(160_000, wm).unwrap();
        assert_eq!(budget.free(0), 130_000);
        let disordered = Watermarks { min_bytes: 9, low_bytes: 5, high_bytes: 1 };
        assert!(budget.resize(160_000, disordered).is_err());
        assert_eq!(budget.budget_bytes(), 160_000, "a refused resize changes nothing");
    }

    #[test]
    fn pressure_levels() {
        let wm = Watermarks { min_bytes: 100, low_bytes: 200, high_bytes: 300 };
        let budget = Budget::new(1000 * 4096, wm).unwrap();
        assert_eq!(budget.pressure(0, 0), Pressure::None);
        budget.charge_resident(1000 * 4096 - 250);
        assert_eq!(budget.pressure(0, 0), Pressure::BelowHigh);
        assert_eq!(budget.pressure(0, 100), Pressure::BelowLow);
        assert_eq!(budget.pressure(100, 0), Pressure::BelowLow);
        assert_eq!(budget.pressure(200, 0), Pressure::BelowMin);
        budget.charge_swapcache(51);
        assert_eq!(budget.pressure(0, 0), Pressure::BelowLow);
        assert_eq!(budget.used(0), 1000 * 4096 - 199);
        budget.uncharge_swapcache(51);
        budget.uncharge_resident(1000 * 4096 - 250);
        assert_eq!(budget.used(0), 0);
        assert_eq!(budget.peak_bytes(), 1000 * 4096 - 50, "pool bytes count too");
    }
}
