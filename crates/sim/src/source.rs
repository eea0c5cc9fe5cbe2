//! The simulated page source: the program's memory, as a sparse map from page address to
//! page, with the [`PageSource`] contract the engine relies on.
//!
//! A page is absent (an access faults into the engine), the shared zero page, data, or
//! poisoned (an access fails, as SIGBUS would). One lock covers the whole map: only the
//! thread holding the scheduler's baton runs, so the lock is never contended, and a take
//! or a map of several pages is trivially atomic with respect to the program's accesses
//! (the contract's point 1). The lock is a leaf: no engine call is made while it is held,
//! and nothing here yields (page-source calls run under the region's page-table lock).
//!
//! The "program" calls [`SimSource::access`]: if the page is present it reads or writes it
//! at once; if not, it faults into the engine and tries again, as a real access would.
//!
//! A poisoned page stays poisoned until the program drops it: a map over it finds it
//! present (`AlreadyPresent`), a take leaves it in place and reports a hole, as the
//! kernel's poison marker behaves under `UFFDIO_COPY` and `UFFDIO_MOVE`.
//!
//! Fault sites: `take_retry` and `map_retry` make a take or a map (or a staged page's
//! return) say [`SourceError::Retry`], as userfaultfd does with EAGAIN while the address
//! space changes; `take_staged` makes a take stop after its first half and keep those
//! pages ([`SourceError::Staged`]: an undo that met an unread event), held by place until
//! the engine settles each.
//!
//! Mappings: a range the program unmapped, or moved away with mremap, has no mapping until
//! it is mapped again ([`SimSource::map_range`]): a map there fails with
//! [`SourceError::Gone`], as userfaultfd's resolving ioctls fail with ENOENT where no VMA
//! is. A fault that looked its region up before another thread moved or unmapped the range
//! meets that refusal, as it would in a real process (the engine relies on it).

use crate::buggify::Site;
use crate::world::World;
use engine::region::MmId;
use engine::{
    Engine, Error, FaultOutcome, Mapped, PageSource, SourceError, StageLoc, Taken, PAGE_SIZE,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

const PAGE: u64 = PAGE_SIZE as u64;

/// Most fault-and-retry rounds for one access; a correct engine needs one or two (more
/// under map_retry faults, each firing at most 25% of the time).
const ACCESS_ROUNDS_MAX: u32 = 200;

/// A present page.
#[derive(Debug, Clone)]
pub enum Page {
    /// The shared zero page.
    Zero,
    /// Private data.
    Data(Box<[u8; PAGE_SIZE]>),
    /// The data could not be read back: accesses fail.
    Poisoned,
}

#[derive(Debug, Clone)]
struct Slot {
    page: Page,
    referenced: bool,
    /// Write-protected: a write faults into the engine first (a zero page mapped by
    /// [`PageSource::map_zero_protected`]).
    protected: bool,
}

impl Slot {
    fn new(page: Page) -> Slot {
        Slot { page, referenced: false, protected: false }
    }
}

/// Why an access failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// The page is poisoned: the engine could not read it back (lost loudly).
    Poisoned,
    /// The address is in no managed region (or the region went away).
    Outside,
    /// The engine refused the fault.
    Engine(String),
    /// The access kept faulting without the page appearing.
    Livelock,
}

/// Simulated memory of one address space (see the module documentation).
#[derive(Debug)]
pub struct SimSource {
    pages: Mutex<BTreeMap<u64, Slot>>,
    world: Arc<World>,
    /// Zero pages are mapped write-protected ([`PageSource::protects_zero`]).
    protect_zero: bool,
    /// Ranges with no mapping (unmapped or moved away), `(start, end)`, sorted and apart.
    /// A leaf lock, taken before `pages` when both are needed.
    unmapped: Mutex<Vec<(u64, u64)>>,
    /// Pages a staged take kept, by place (a hole keeps none). A leaf lock, taken after
    /// `pages`.
    held: Mutex<BTreeMap<u64, Page>>,
    /// The next staged take's first place.
    next_place: std::sync::atomic::AtomicU64,
}

impl SimSource {
    /// Empty memory: every access faults. `protect_zero`: zero pages are mapped
    /// write-protected.
    pub fn new(world: Arc<World>, protect_zero: bool) -> SimSource {
        SimSource {
            pages: Mutex::new(BTreeMap::new()),
            world,
            protect_zero,
            unmapped: Mutex::new(Vec::new()),
            held: Mutex::new(BTreeMap::new()),
            next_place: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Accesses the page at `addr` in address space `mm`, faulting into `engine` until it
    /// is present, then runs `f` on it (under the source's lock: `f` must not call the
    /// engine).
    ///
    /// # Errors
    /// [`AccessError`]: a poisoned page, an address outside the regions, an engine error,
    /// or an access that never completes.
    ///
    /// Context: may yield inside the engine (backend I/O, folio waits).
    pub fn access<R>(
        &self,
        engine: &Engine,
        mm: MmId,
        addr: u64,
        write: bool,
        mut f: impl FnMut(&mut Page) -> R,
    ) -> Result<R, AccessError> {
        debug_assert_eq!(addr % PAGE, 0);
        for _ in 0..ACCESS_ROUNDS_MAX {
            // A write to a protected page faults as write-protect, not as missing.
            let protected = {
                let mut pages = self.pages.lock();
                match pages.get_mut(&addr) {
                    Some(slot) if matches!(slot.page, Page::Poisoned) => {
                        return Err(AccessError::Poisoned);
                    }
                    Some(slot) if !(write && slot.protected) => {
                        slot.referenced = true;
                        return Ok(f(&mut slot.page));
                    }
                    Some(_) => true,
                    None => false,
                }
            };
            let outcome = if protected {
                engine.handle_wp_fault_in(mm, addr)
            } else {
                engine.handle_fault_in(mm, addr, write)
            };
            match outcome {
                Ok(FaultOutcome::Mapped | FaultOutcome::Spurious | FaultOutcome::Retry) => {}
                Ok(FaultOutcome::Gone) | Err(Error::OutsideRegions { .. }) => {
                    return Err(AccessError::Outside)
                }
                // The page is poisoned now; the next round reports it.
                Err(Error::SwapIn { .. }) => {}
                Err(error) => return Err(AccessError::Engine(error.to_string())),
            }
        }
        Err(AccessError::Livelock)
    }

    /// Drops `[addr, addr + len)` as `MADV_DONTNEED` does: the pages become absent (the
    /// caller tells the engine, as the REMOVE event does).
    pub fn drop_range(&self, addr: u64, len: u64) {
        take_range(&mut self.pages.lock(), addr, len);
    }

    /// The program moved `[from, from + len)` to `to` (mremap): present pages move, the
    /// destination's old pages go, the source range is left with no mapping.
    pub fn move_range(&self, from: u64, to: u64, len: u64) {
        {
            let mut pages = self.pages.lock();
            let moved = take_range(&mut pages, from, len);
            take_range(&mut pages, to, len);
            for (addr, slot) in moved {
                pages.insert(addr - from + to, slot);
            }
        }
        self.map_range(to, len);
        self.unmap_range(from, len);
    }

    /// The program unmapped `[addr, addr + len)`: its pages go, and so does the mapping.
    pub fn unmap_range(&self, addr: u64, len: u64) {
        self.drop_range(addr, len);
        engine::ranges::insert(&mut self.unmapped.lock(), addr, addr + len);
    }

    /// The program mapped `[addr, addr + len)` (again): maps there succeed.
    pub fn map_range(&self, addr: u64, len: u64) {
        engine::ranges::remove(&mut self.unmapped.lock(), addr, addr + len);
    }

    /// Whether any of `[addr, addr + len)` has no mapping.
    fn unmapped(&self, addr: u64, len: u64) -> bool {
        engine::ranges::overlaps(&self.unmapped.lock(), addr, addr + len)
    }

    /// A forked child's memory: present pages copied (copy-on-write, to the program), the
    /// rest absent or poisoned as here; protected pages stay protected, as userfaultfd's
    /// fork event keeps them.
    pub fn fork(&self) -> SimSource {
        SimSource {
            pages: Mutex::new(self.pages.lock().clone()),
            world: self.world.clone(),
            protect_zero: self.protect_zero,
            unmapped: Mutex::new(self.unmapped.lock().clone()),
            held: Mutex::new(BTreeMap::new()),
            next_place: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A staged take (`take_staged`): the first half of the `nr` pages at `addr` leave and
    /// are held; a poisoned page stays where it is, a hole is held as nothing.
    fn take_staged(&self, addr: u64, nr: usize) -> SourceError {
        let kept = nr.div_ceil(2);
        let order = std::sync::atomic::Ordering::Relaxed;
        let first = self.next_place.fetch_add(nr as u64, order);
        let mut pages = self.pages.lock();
        let mut held = self.held.lock();
        for i in 0..kept as u64 {
            let at = addr + i * PAGE;
            if matches!(pages.get(&at).map(|s| &s.page), Some(Page::Data(_) | Page::Zero)) {
                let slot = pages.remove(&at).expect("looked up");
                held.insert(first + i, slot.page);
            }
        }
        SourceError::Staged { at: StageLoc(first), pages: kept as u32 }
    }

    /// Pages present (data or the zero page).
    pub fn present_pages(&self) -> u64 {
        self.pages.lock().len() as u64
    }

    /// Installs pages made by `make` over `[addr, addr + len)` unless one is present;
    /// `Gone` where the range has no mapping.
    fn install(
        &self,
        addr: u64,
        len: u64,
        mut make: impl FnMut(usize) -> Page,
    ) -> Result<Mapped, SourceError> {
        if self.unmapped(addr, len) {
            return Err(SourceError::Gone);
        }
        let mut pages = self.pages.lock();
        if pages.range(addr..addr + len).next().is_some() {
            return Ok(Mapped::AlreadyPresent);
        }
        for i in 0..(len / PAGE) as usize {
            pages.insert(addr + i as u64 * PAGE, Slot::new(make(i)));
        }
        Ok(Mapped::Done)
    }
}

/// Removes and returns the pages of `[addr, addr + len)`.
fn take_range(pages: &mut BTreeMap<u64, Slot>, addr: u64, len: u64) -> Vec<(u64, Slot)> {
    let keys: Vec<u64> = pages.range(addr..addr + len).map(|(a, _)| *a).collect();
    keys.into_iter().filter_map(|a| pages.remove(&a).map(|slot| (a, slot))).collect()
}

impl PageSource for SimSource {
    fn take_each(&self, addr: u64, dst: &mut [&mut [u8]]) -> Result<Taken, SourceError> {
        if self.world.fires(Site::TakeRetry) {
            return Err(SourceError::Retry);
        }
        if self.world.fires(Site::TakeStaged) {
            return Err(self.take_staged(addr, dst.len()));
        }
        let mut pages = self.pages.lock();
        let mut holes = 0;
        for (i, out) in dst.iter_mut().enumerate() {
            let at = addr + i as u64 * PAGE;
            match pages.get(&at).map(|s| &s.page) {
                Some(Page::Data(data)) => out.copy_from_slice(&data[..]),
                Some(Page::Zero) => out.fill(0),
                // A poisoned page stays poisoned (the kernel's marker does not move): taking
                // it as zeros would turn a loud loss into silent zeros at the next fault.
                Some(Page::Poisoned) | None => {
                    out.fill(0);
                    holes += 1;
                    continue;
                }
            }
            pages.remove(&at);
        }
        Ok(if holes == 0 { Taken::All } else { Taken::Partial { holes } })
    }

    fn map(&self, addr: u64, data: &[u8]) -> Result<Mapped, SourceError> {
        if self.world.fires(Site::MapRetry) {
            return Err(SourceError::Retry);
        }
        self.install(addr, data.len() as u64, |i| {
            let mut page = Box::new([0u8; PAGE_SIZE]);
            page.copy_from_slice(&data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]);
            Page::Data(page)
        })
    }

    fn fills_in_place(&self) -> bool {
        true
    }

    fn unstage(&self, at: StageLoc, addr: u64) -> Result<(), SourceError> {
        if self.world.fires(Site::MapRetry) {
            return Err(SourceError::Retry);
        }
        if self.unmapped(addr, PAGE) {
            return Err(SourceError::Gone);
        }
        let mut pages = self.pages.lock();
        let Some(page) = self.held.lock().remove(&at.0) else { return Ok(()) };
        // A page present there is the newer: the held one goes.
        pages.entry(addr).or_insert_with(|| Slot::new(page));
        Ok(())
    }

    fn drop_staged(&self, at: StageLoc) {
        self.held.lock().remove(&at.0);
    }

    fn read_staged(&self, at: StageLoc, out: &mut [u8]) -> bool {
        match self.held.lock().get(&at.0) {
            Some(Page::Data(data)) => out.copy_from_slice(&data[..]),
            Some(_) => out.fill(0),
            None => return false,
        }
        true
    }

    fn map_with(
        &self,
        addr: u64,
        len: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<Option<Mapped>, SourceError> {
        if self.world.fires(Site::MapRetry) {
            return Err(SourceError::Retry);
        }
        if self.unmapped(addr, len) {
            return Err(SourceError::Gone);
        }
        let mut pages = self.pages.lock();
        if pages.range(addr..addr + len).next().is_some() {
            return Ok(Some(Mapped::AlreadyPresent));
        }
        let mut filled = vec![0u8; len as usize];
        if !fill(&mut filled) {
            return Ok(None);
        }
        for (i, bytes) in filled.chunks_exact(PAGE_SIZE).enumerate() {
            let page = Box::new(<[u8; PAGE_SIZE]>::try_from(bytes).expect("a page"));
            pages.insert(addr + i as u64 * PAGE, Slot::new(Page::Data(page)));
        }
        Ok(Some(Mapped::Done))
    }

    fn map_zero(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        if self.world.fires(Site::MapRetry) {
            return Err(SourceError::Retry);
        }
        self.install(addr, len, |_| Page::Zero)
    }

    fn protects_zero(&self) -> bool {
        self.protect_zero
    }

    /// Unless `protect_lost` fires (a write slipped in before the protection), the pages
    /// are protected as they are mapped.
    fn map_zero_protected(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        if self.world.fires(Site::MapRetry) {
            return Err(SourceError::Retry);
        }
        let mapped = self.install(addr, len, |_| Page::Zero)?;
        if mapped == Mapped::Done && !self.world.fires(Site::ProtectLost) {
            for (_, slot) in self.pages.lock().range_mut(addr..addr + len) {
                slot.protected = true;
            }
        }
        Ok(mapped)
    }

    fn unprotect(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        for (_, slot) in self.pages.lock().range_mut(addr..addr + len) {
            slot.protected = false;
        }
        Ok(())
    }

    fn poison(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        let mut pages = self.pages.lock();
        for i in 0..len / PAGE {
            pages.entry(addr + i * PAGE).or_insert(Slot::new(Page::Poisoned));
        }
        Ok(())
    }

    fn wake(&self, _addr: u64, _len: u64) {}

    fn test_and_clear_referenced(&self, addr: u64, len: u64) -> Option<bool> {
        let mut pages = self.pages.lock();
        let mut any = false;
        for (_, slot) in pages.range_mut(addr..addr + len) {
            any |= std::mem::replace(&mut slot.referenced, false);
        }
        Some(any)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buggify::Faults;
    use crate::world::Latency;

    fn source() -> SimSource {
        SimSource::new(Arc::new(World::new(1, Faults::none(), Latency::FAST)), false)
    }

    #[test]
    fn a_range_moved_away_or_unmapped_refuses_maps_until_mapped_again() {
        let s = source();
        let (from, to) = (0x10_0000, 0x40_0000);
        assert_eq!(s.map_zero(from, 2 * PAGE), Ok(Mapped::Done));
        s.move_range(from, to, 4 * PAGE);
        // The pages went with the move; the old range has no mapping (ENOENT in a real
        // process), the new one takes maps.
        assert_eq!(s.present_pages(), 2);
        assert_eq!(s.map_zero(from + 2 * PAGE, PAGE), Err(SourceError::Gone));
        assert_eq!(s.map(from + 3 * PAGE, &[7; PAGE_SIZE]), Err(SourceError::Gone));
        let mut fill = |_: &mut [u8]| true;
        assert_eq!(s.map_with(from, PAGE, &mut fill), Err(SourceError::Gone));
        assert_eq!(s.map_zero(to + 2 * PAGE, PAGE), Ok(Mapped::Done));
        assert_eq!(s.map_zero(from + 4 * PAGE, PAGE), Ok(Mapped::Done), "past the moved range");
        // Mapped again in part: that part takes maps, the rest still refuses.
        s.map_range(from + PAGE, PAGE);
        assert_eq!(s.map_zero(from + PAGE, PAGE), Ok(Mapped::Done));
        assert_eq!(s.map_zero(from, 2 * PAGE), Err(SourceError::Gone), "a page of it unmapped");
        s.unmap_range(to, 4 * PAGE);
        assert_eq!(s.map_zero(to + 3 * PAGE, PAGE), Err(SourceError::Gone));
        assert_eq!(s.present_pages(), 2, "the unmap took the destination's pages");
        s.map_range(from, 0x100 * PAGE);
        assert_eq!(s.map_zero(to, PAGE), Err(SourceError::Gone), "mapped elsewhere only");
        assert_eq!(s.map_zero(from + 2 * PAGE, PAGE), Ok(Mapped::Done));
    }
}
