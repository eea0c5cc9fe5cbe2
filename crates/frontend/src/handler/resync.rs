//! Stale resident pages: a spurious fault checked against the kernel.
//!
//! **Stale resident pages.** A program that drops a page (`MADV_DONTNEED`) right as the engine
//! learns of it (the zap follows the REMOVE's *reading*, not its processing; or a range adopted
//! with `adopt_populated` while the program drops a listed page) leaves the engine counting a
//! missing page as resident, and every fault on it is answered "spurious": the thread would fault
//! forever. So a spurious fault is checked against the kernel (PAGEMAP_SCAN: neither present nor
//! swapped); a page missing for good is dropped from the engine (it reads as zero, as the program's
//! drop says) and the fault handled again, counted in `faults_resynced`. The check runs under the
//! engine's page-table lock and only for a page the engine still holds resident
//! (`Engine::drop_if_missing`): a page the reclaimer took out is missing too, and the reclaimer
//! takes only under that lock.

use super::{Reader, Retained};
use engine::region::MmId;
use std::sync::atomic::Ordering::Relaxed;
use uffd::pagemap::{Categories, ScanArgs};
use uffd::types::Range;
use uffd::PAGE_SIZE;

impl Reader {
    /// After a spurious answer: if the engine still holds the page resident, the kernel has
    /// it neither present nor swapped, the engine's resident entry is
    /// stale (module essay): drop it and say so. One PAGEMAP_SCAN of one page, under the
    /// engine's page-table lock (`Engine::drop_if_missing`): the reclaimer takes a page out
    /// only under that lock, and a page it took is missing too. Asked after the lock was
    /// released, a page taken in between was dropped with its swap entry, and read back as
    /// zeros (a take undone by the program's own touch, then retaken at once).
    pub(super) fn resync(&self, fault: Retained) -> bool {
        let Some(pagemap) = &self.pagemap else { return false };
        let page = fault.addr & !(PAGE_SIZE - 1);
        let Ok(range) = Range::new(page, PAGE_SIZE) else { return false };
        // Made before the lock is taken: one page is one region at most.
        let mut found = Vec::with_capacity(1);
        let missing = || {
            let args = ScanArgs {
                anyof: Categories::PRESENT | Categories::SWAPPED,
                report: Categories::PRESENT | Categories::SWAPPED,
                ..ScanArgs::default()
            };
            matches!(pagemap.scan(range, &args, &mut found), Ok(result) if result.regions == 0)
        };
        if !self.engine.drop_if_missing(MmId::DEFAULT, page as u64, missing) {
            return false;
        }
        self.control.counters.faults_resynced.fetch_add(1, Relaxed);
        true
    }
}
