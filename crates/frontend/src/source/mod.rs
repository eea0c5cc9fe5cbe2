//! [`UffdSource`]: the engine's [`PageSource`] over one process's memory, through its
//! userfaultfd.
//!
//! ```text
//!   take (page-out)                                   map / map_zero / poison (page-in)
//!   region --UFFDIO_MOVE (event uffd)--> staging      UFFDIO_COPY / ZEROPAGE / POISON of the
//!          copy staging -> engine's folio buffer      whole folio, continuing past pages
//!   staging --UFFDIO_MOVE (quiet uffd)--> discard     that are present (EEXIST) or done
//!          MADV_DONTNEED discard (no event)           (EAGAIN with progress)
//! ```
//!
//! **Take.** A folio leaves the region in one `UFFDIO_MOVE` (with `ALLOW_SRC_HOLES`) into
//! an empty run of a staging lane: atomic against the program's writers (docs/UFFD.md), and
//! issued on the region's own uffd, so while the address space is changing (an unread fork,
//! mremap, munmap or REMOVE event) it fails with EAGAIN having done nothing and the engine
//! keeps the folio. The data is copied to the engine's buffer (a slot the move left empty, a
//! source hole, reads as zeros and is reported in [`Taken::Partial`]). Then the staging run
//! is freed with its pages still in it, and once a lane holds [`DRAIN_BATCH`] such pages
//! (or has no empty run left) they are emptied together *without an event*: staging is
//! registered with the event uffd (it must be, to be a MOVE destination there), where
//! `MADV_DONTNEED` would send REMOVE and wait for the handler; so its pages move on, through
//! a second uffd that has no events, into a discard area registered with that uffd, and are
//! dropped there (tests/frontend_facts.rs).
//!
//! Why in batches: each of those two calls flushes the TLB of every CPU running the program
//! (staging is in its address space), an inter-processor interrupt per call, and in a
//! virtual machine a VM exit each. Draining every take paid two of them per folio, beside
//! the MOVE out's own, and in a profile of a uniform-random `uswap run` the cross-CPU call
//! and the interrupt write were then the reclaimer's top two symbols. A batch pays two per
//! [`DRAIN_BATCH`] pages.
//!
//! **Take refused.** MOVE stops at a page shared with a forked child, or pinned (EBUSY).
//! The page is queued for a copy-on-write break (`MADV_POPULATE_WRITE`, by a thread that
//! holds no engine lock: see [`UffdSource::break_cow_pending`]) and the take says `Retry`.
//! Pages moved before the refusal are moved back at once ("undo"). If even that says EAGAIN
//! (an event arrived in between, and the reader may be waiting for the region lock the
//! caller holds, so spinning could deadlock), the pages stay in staging and the take says
//! `Staged`: the engine owns them from then on as staged pages (the engine's `staged.rs`),
//! and puts each back, drops it or copies it for a forked child through this source
//! (`staged`). Every move and map into the program stays inside the event fence, a take's
//! undo and a staged page's return included: none runs between a FORK's read and its
//! application (else a child can read a page of zeros: the test program
//! `run_programs/fork_kill.c`).
//!
//! **Map.** One resolving ioctl covers the whole folio. The kernel stops early in three
//! ways, each continued so that, seen from the engine, a map either installs every missing
//! page or returns `Retry` leaving nothing to undo:
//!
//! | kernel says | meaning | what `map` does |
//! |---|---|---|
//! | EAGAIN, `done` > 0 | did `done` bytes, then met something | continue at `done` |
//! | EEXIST at `done` | that page is present (newer data) | skip it, continue |
//! | EAGAIN, `done` = 0 | an event is unread (`mmap_changing`) | `Retry` (see below) |
//! | ENOENT, ESRCH | range unmapped / unregistered, process gone | `Gone` |
//!
//! A `Retry` after progress leaves nothing to undo: the pages installed hold the engine's
//! data for them, and a later map of the folio skips them as present.
//!
//! If every page was present the answer is `AlreadyPresent` (nothing changed); skipped pages
//! are woken explicitly, since a resolving ioctl wakes only what it filled.
//!
//! Context: every method may be called from any thread, concurrently; calls on one page are
//! serialised by the engine (its page-table lock, held across `take` and `map`). Nothing
//! here touches region memory from user space, so a page-source call never faults into the
//! uffd it serves. Lock order: a lane's lock; `cow_breaking`, then
//! the COW queue's, a leaf.
//!
//! Unsafe code: the MOVE out of a region (here) and the direct first touch of a region no
//! uffd serves (`page_source`), whose soundness rests on the engine's transparency (their
//! `SAFETY` comments); this module and its children are a named leaf allowed to make them.
//!
//! Submodules: `staged` (the undo of a refused take, and the pages it leaves in staging),
//! `cow` (the copy-on-write break queue), `page_source` (the engine's `PageSource` trait).

#![allow(unsafe_code)]

mod cow;
mod page_source;
mod staged;

use crate::fence::Fence;
use engine::{Mapped, PageSource, SourceError, Taken};
use std::collections::VecDeque;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst,
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use uffd::mm::{Advice, Mapping};
use uffd::staging::{SlotIndex, SlotRun, Staging};
use uffd::types::{Features, MoveMode, RegisterMode, Wake};
use uffd::Error;
use uffd::Uffd;
use uffd::PAGE_SIZE;

const PAGE: usize = PAGE_SIZE;

/// Staging lanes: concurrent takes (background reclaim, a faulting thread's direct reclaim,
/// `pageout` callers) each hold one. Four cover a two-CPU machine with room.
const LANES: usize = 4;

/// Pages a lane holds after their take before it drains them all at once (module essay):
/// 128 KiB a lane, resident meanwhile (counted in the process's resident set, as any page).
const DRAIN_BATCH: u32 = 32;

/// Pages a COW-break queue holds; beyond, refusals are counted and forgotten (reclaim will
/// meet the page again and queue it again).
const COW_QUEUE_MAX: usize = 1024;

/// How many times an undo retries EAGAIN before the pages stay staged: a few yields give
/// a reader that is reading the chance to read; a reader that waits for the caller's lock
/// would never read, so the bound is small.
const UNDO_TRIES: u32 = 8;

/// Locks a std mutex, ignoring poisoning (a panic elsewhere already reported itself; the
/// data here stays consistent per operation).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One staging lane: staging slots on the event uffd, the discard area on the quiet one.
#[derive(Debug)]
struct Lane {
    staging: Staging,
    discard: Mapping,
    /// Pages in free slots awaiting the lane's next drain.
    undrained: u32,
    /// Slots held for staged pages (allocated until the engine settles them).
    held: u32,
}

counters::table! {
    /// Counters (a counter per refusal and fallback).
    pub(crate) struct Counters;
    /// A snapshot of a source's counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct SourceStats {
        counters {
            /// `take` calls.
            takes,
            /// Pages taken out of the program (moved to staging and copied out).
            take_pages,
            /// Of those, holes (not present; read as zeros).
            take_holes,
            /// Takes refused because a page was shared after fork or pinned (EBUSY).
            take_busy,
            /// Takes refused because the address space was changing (EAGAIN).
            take_retry,
            /// Takes refused because events were read but not yet applied ([`crate::fence`]).
            take_fenced,
            /// Takes of a range that is no longer mapped or registered.
            take_gone,
            /// Takes that failed otherwise.
            take_failed,
            /// Pages a move took past the progress it reported (found in staging, counted as moved:
            /// `Staging::sync_present`).
            take_uncounted,
            /// Pages moved back into the region after a refused take.
            undo_pages,
            /// Pages that could not be moved back at once: held for the engine (staged).
            staged_pages,
            /// Staged pages moved back into the region.
            unstaged_pages,
            /// Maps refused with `Retry` because an event was read and not yet applied.
            map_fenced,
            /// `map`, `map_zero` and `poison` calls.
            maps,
            /// Pages installed with data (`UFFDIO_COPY`).
            map_pages,
            /// Pages installed as the zero page (`UFFDIO_ZEROPAGE`).
            map_zero_pages,
            /// Of those, pages write-protected after (`UFFDIO_WRITEPROTECT`): zero pages the
            /// engine keeps uncharged until written.
            zero_protected_pages,
            /// Pages whose write protection was lifted (a write-protect fault served).
            unprotected_pages,
            /// Protections that could not be set or lifted (the map or the fault is retried).
            protect_failed,
            /// Pages a map found already present (EEXIST) and left alone.
            map_present_pages,
            /// Maps answered `Retry` (EAGAIN with nothing done: an event unread).
            map_retry,
            /// Of those, maps that had installed some pages first.
            map_partial_retry,
            /// Maps of a range no longer managed.
            map_gone,
            /// Pages poisoned (their data could not be read back).
            poisoned_pages,
            /// Ranges queued for a copy-on-write break.
            cow_queued,
            /// Refusals not queued because the queue was full.
            cow_queue_full,
            /// Copy-on-write breaks done.
            cow_broken,
            /// Staging runs that could not be emptied (the lane loses those slots).
            drain_failed,
            /// Staging runs emptied (a MOVE to the discard area and a drop each: module essay).
            drains,
        }
    }
}

/// The staging lanes: registered with the event uffd (a MOVE's destination must be), and
/// their discard areas with the quiet one.
#[derive(Debug)]
struct Lanes {
    /// The uffd the lanes' staging is registered with; page-outs move through it.
    event: Arc<Uffd>,
    quiet: Uffd,
    lanes: Box<[Mutex<Lane>]>,
    next: AtomicUsize,
}

impl Lanes {
    /// [`LANES`] lanes of `2 * folio_pages` slots each registered with `event`, and the
    /// quiet uffd for their discard areas.
    fn new(event: &Arc<Uffd>, folio_pages: usize) -> Result<Lanes, Error> {
        // The same privilege as the event uffd: user-mode-only when that one is.
        let quiet = Uffd::builder()
            .user_mode_only(event.is_user_mode_only())
            .require(Features::MOVE)
            .open()?;
        let slots = (2 * folio_pages).max(16) + DRAIN_BATCH as usize;
        let mut lanes = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            let staging = Staging::new(event, slots)?;
            let discard = Mapping::anonymous(slots * PAGE)?;
            discard.advise(0, discard.len_bytes(), Advice::NoHugePage)?;
            discard.advise(0, discard.len_bytes(), Advice::DontFork)?;
            quiet.register(discard.range(), RegisterMode::WP)?;
            lanes.push(Mutex::new(Lane { staging, discard, undrained: 0, held: 0 }));
        }
        let lanes = lanes.into_boxed_slice();
        Ok(Lanes { event: event.clone(), quiet, lanes, next: AtomicUsize::new(0) })
    }
}

/// Where a source works: the uffd its regions are registered with, and its lanes. Replaced
/// whole by a forked child ([`UffdSource::rehome`]); each call works on one home, loaded
/// once.
#[derive(Debug)]
struct Home {
    /// The regions' uffd: maps, protections, poison and wakes go through it.
    uffd: Arc<Uffd>,
    lanes: Arc<Lanes>,
    /// No uffd serves the regions (a forked child that could not have one: crate::fork):
    /// maps write into the program's memory directly, zero maps leave the page untouched
    /// (it reads as zeros), poison makes the page inaccessible, takes are refused.
    direct: bool,
}

/// A page source over one address space's userfaultfd (see the module essay).
#[derive(Debug)]
pub struct UffdSource {
    home: arc_swap::ArcSwap<Home>,
    /// While set, the resolving ioctls wake nobody and the caller wakes the faulting page
    /// itself once the engine is done with it ([`UffdSource::defer_wakes`]).
    defer_wakes: AtomicBool,
    /// Takes against events read but not applied (crate::fence).
    fence: Fence,
    /// Ranges `(addr, len)` MOVE refused with EBUSY, for a copy-on-write break.
    cow: Mutex<VecDeque<(u64, u64)>>,
    cow_ready: Condvar,
    /// Held while a queued range is being broken (see `break_cow_wait`). Lock order:
    /// `cow_breaking`, then `cow`.
    cow_breaking: Mutex<()>,
    /// Set while a fork is prepared: the breaker parks, holding no lock
    /// ([`UffdSource::pause_cow`]), and says so in `cow_parked`.
    cow_paused: AtomicBool,
    cow_parked: AtomicBool,
    counters: Counters,
    /// Fault injection (tests): the next `n` undos fail as if an event had arrived.
    inject_undo_again: AtomicU32,
    /// Zero pages are mapped write-protected ([`UffdSource::protecting_zero`]).
    protect_zero: bool,
}

impl UffdSource {
    /// The source of the managed address space: `uffd` (which must have `MOVE`) plus
    /// staging lanes of `2 * folio_pages` slots each, and the quiet uffd for their discard
    /// areas.
    ///
    /// # Errors
    /// Creating the quiet uffd, mapping or registering the lanes.
    pub fn new(uffd: Arc<Uffd>, folio_pages: usize) -> Result<UffdSource, Error> {
        let lanes = Arc::new(Lanes::new(&uffd, folio_pages)?);
        Ok(UffdSource::with(Home { uffd, lanes, direct: false }))
    }

    /// In a forked child, on its only thread, before any fault is served: the source
    /// works through the child's own uffds from now on. `regions` is the uffd the child's
    /// regions are registered with (for a while, the child's start-up one: see
    /// [`UffdSource::set_region_uffd`]), `event` the one its new staging lanes are
    /// registered with (the parent's lanes are not in the child: `MADV_DONTFORK`). The
    /// staged pages' places, the copy-on-write queue and the event fence were the parent's
    /// (the engine took the staged pages' data before the fork), and the counters count the
    /// child's own events from here.
    ///
    /// # Errors
    /// As [`UffdSource::new`]; the source is unchanged then.
    pub fn rehome(
        &self,
        regions: Arc<Uffd>,
        event: &Arc<Uffd>,
        folio_pages: usize,
    ) -> Result<(), Error> {
        let lanes = Arc::new(Lanes::new(event, folio_pages)?);
        self.replace_inherited_home(Home { uffd: regions, lanes, direct: false });
        lock(&self.cow).clear();
        self.cow_paused.store(false, SeqCst);
        self.cow_parked.store(false, SeqCst);
        self.fence.reset_in_child();
        self.defer_wakes.store(false, Relaxed);
        self.counters.reset();
        Ok(())
    }

    /// Resolves through `uffd` from now on, the lanes unchanged: a forked child's regions
    /// moved from its start-up uffd to the one its handler reads.
    pub fn set_region_uffd(&self, uffd: Arc<Uffd>) {
        let lanes = self.home.load().lanes.clone();
        self.home.store(Arc::new(Home { uffd, lanes, direct: false }));
    }

    /// A forked child that could not have a uffd of its own: from now on the source writes
    /// into the child's memory directly (its ranges are registered with no uffd), so that
    /// the engine can bring every inherited page back before the child runs unmanaged.
    pub(crate) fn go_direct(&self) {
        let home = self.home.load_full();
        let direct = Home { uffd: home.uffd.clone(), lanes: home.lanes.clone(), direct: true };
        self.home.store(Arc::new(direct));
    }

    /// Puts `home` in place of the one a forked child inherited, which is never dropped:
    /// its lanes' staging was `MADV_DONTFORK`, so its addresses are free in the child and
    /// may hold the new lanes by now, which dropping the old ones would unmap. Its quiet
    /// uffd's descriptor, which nothing will use again, is closed.
    fn replace_inherited_home(&self, home: Home) {
        let old = self.home.swap(Arc::new(home));
        let _ = uffd::sys::forking::close_raw(old.lanes.quiet.raw_fd());
        std::mem::forget(old);
    }

    /// While `on`, the resolving ioctls wake nobody: the caller wakes the faulting page
    /// ([`PageSource::wake`]) once the engine has returned, so that the woken thread cannot
    /// run while the engine is still at work (the handler's fork mode: the forking thread
    /// must not reach the fork before the fault that stopped it is wholly done).
    pub fn defer_wakes(&self, on: bool) {
        self.defer_wakes.store(on, SeqCst);
    }

    fn wake_mode(&self) -> Wake {
        if self.defer_wakes.load(SeqCst) {
            Wake::DontWake
        } else {
            Wake::Wake
        }
    }

    fn home(&self) -> arc_swap::Guard<Arc<Home>> {
        self.home.load()
    }

    fn with(home: Home) -> UffdSource {
        UffdSource {
            home: arc_swap::ArcSwap::from_pointee(home),
            defer_wakes: AtomicBool::new(false),
            fence: Fence::default(),
            cow: Mutex::new(VecDeque::with_capacity(COW_QUEUE_MAX)),
            cow_ready: Condvar::new(),
            cow_breaking: Mutex::new(()),
            cow_paused: AtomicBool::new(false),
            cow_parked: AtomicBool::new(false),
            counters: Counters::default(),
            inject_undo_again: AtomicU32::new(0),
            protect_zero: false,
        }
    }

    /// The same source, mapping zero pages write-protected (`PageSource::protects_zero`):
    /// the program's first write to one is a write-protect fault the engine sees. The
    /// ranges must be registered with [`UffdSource::register_mode`].
    pub fn protecting_zero(mut self, on: bool) -> UffdSource {
        self.protect_zero = on;
        self
    }

    /// Whether zero pages are mapped write-protected now (not while the source maps
    /// directly: [`UffdSource::go_direct`]).
    pub fn protects_zero_pages(&self) -> bool {
        engine::PageSource::protects_zero(self)
    }

    /// The event fence ([`crate::fence`]): the handler writes it while it reads this
    /// source's uffd and applies what it read.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The mode every managed range is registered with: missing faults, and write-protect
    /// faults if zero pages are protected.
    pub fn register_mode(&self) -> RegisterMode {
        if self.protect_zero {
            RegisterMode::MISSING | RegisterMode::WP
        } else {
            RegisterMode::MISSING
        }
    }

    /// The uffd this source resolves through.
    pub fn uffd(&self) -> Arc<Uffd> {
        self.home().uffd.clone()
    }

    /// Asserts the source's invariants: every lane's staging is consistent, and every slot
    /// is free except those held for staged pages (the engine checks which, and where); a
    /// free slot holds a page only while it awaits the lane's drain, and those are the
    /// lane's `undrained`, fewer than [`DRAIN_BATCH`].
    ///
    /// # Panics
    /// On a violated invariant. Call it with no take in flight.
    pub fn check_invariants(&self) {
        let home = self.home();
        for (index, lane) in home.lanes.lanes.iter().enumerate() {
            let lane = lock(lane);
            lane.staging.check_invariants();
            let (mut waiting, mut allocated) = (0, 0);
            for slot in 0..lane.staging.capacity() {
                let slot = SlotIndex(slot as u32);
                let held = lane.staging.is_allocated(slot);
                let present = lane.staging.is_present(slot);
                waiting += u32::from(present && !held);
                allocated += u32::from(held);
            }
            assert_eq!(allocated, lane.held, "lane {index}: slots allocated vs held");
            assert_eq!(waiting, lane.undrained, "lane {index}: pages awaiting the drain");
            assert!(lane.undrained < DRAIN_BATCH, "lane {index}: {} undrained", lane.undrained);
        }
    }

    /// Fault injection for tests: the next `n` undos of a refused take fail as if an event
    /// had arrived (the pages stay staged).
    pub fn inject_undo_failures(&self, n: u32) {
        self.inject_undo_again.store(n, Relaxed);
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SourceStats {
        let mut stats = SourceStats::default();
        self.counters.snapshot_into(&mut stats);
        stats
    }

    /// Locks a lane: the first free one from a rotating start, else waits for that one.
    fn lock_lane(lanes: &Lanes) -> (usize, MutexGuard<'_, Lane>) {
        let start = lanes.next.fetch_add(1, Relaxed) % lanes.lanes.len();
        for i in 0..lanes.lanes.len() {
            let index = (start + i) % lanes.lanes.len();
            if let Ok(lane) = lanes.lanes[index].try_lock() {
                return (index, lane);
            }
        }
        (start, lock(&lanes.lanes[start]))
    }

    /// Frees a staging run whose pages are done with; they leave with the lane's next
    /// drain, due now once [`DRAIN_BATCH`] pages wait (module essay).
    fn release(&self, lanes: &Lanes, lane: &mut Lane, run: SlotRun) {
        lane.staging.free(run);
        lane.undrained += run.pages;
        if lane.undrained >= DRAIN_BATCH {
            self.drain_lane(lanes, lane);
        }
    }

    /// Empties every run of freed slots still holding pages into the lane's discard area;
    /// on failure a run's slots stay allocated (lost to the lane, counted).
    fn drain_lane(&self, lanes: &Lanes, lane: &mut Lane) {
        while let Some(run) = lane.staging.alloc_undrained() {
            let offset = run.first.0 as usize * PAGE;
            match lane.staging.drain(&lanes.quiet, run, &lane.discard, offset) {
                Ok(()) => {
                    lane.staging.free(run);
                    add(&self.counters.drains, 1);
                }
                Err(_) => add(&self.counters.drain_failed, 1),
            }
        }
        lane.undrained = 0;
    }

    fn take_inner(
        &self,
        home: &Home,
        addr: u64,
        dst: &mut [&mut [u8]],
    ) -> Result<Taken, SourceError> {
        let lanes = &*home.lanes;
        let pages = dst.len();
        let (lane_index, mut lane) = Self::lock_lane(lanes);
        let mut run = lane.staging.alloc_empty(pages);
        if run.is_none() && lane.undrained > 0 {
            self.drain_lane(lanes, &mut lane);
            run = lane.staging.alloc_empty(pages);
        }
        let Some(run) = run else {
            // Only after drain failures or staged pages filled the lane.
            add(&self.counters.take_retry, 1);
            return Err(SourceError::Retry);
        };
        #[cfg(debug_assertions)]
        Self::assert_really_empty(&lane.staging, run);
        // Events read but not applied: the engine's layout may be stale (crate::fence). The
        // pass covers the move out of the program and any undo: the handler's read waits
        // for both. An undo after a FORK was read and before it was applied would put back
        // into the parent pages the child was forked without, which the engine, counting
        // them resident, then gives the child no entry for; inside the pass the undo meets
        // the unread event instead (EAGAIN), and the pages stay staged, which the engine
        // gives the child.
        let Ok(_pass) = self.fence.enter() else {
            lane.staging.free(run);
            add(&self.counters.take_fenced, 1);
            return Err(SourceError::Retry);
        };
        let moved = self.move_out(&lanes.event, &mut lane, run, addr);
        let error = match moved {
            Ok(_) => match lane.staging.copy_out(run, dst) {
                Ok(holes) => {
                    self.release(lanes, &mut lane, run);
                    add(&self.counters.take_pages, pages as u64);
                    add(&self.counters.take_holes, u64::from(holes));
                    return Ok(if holes == 0 { Taken::All } else { Taken::Partial { holes } });
                }
                // Never drop data that was not copied: put it back, as for a refusal.
                Err(error) => {
                    add(&self.counters.take_failed, 1);
                    let staged = self.undo(home, lane_index, &mut lane, run, addr, pages);
                    return Err(staged.unwrap_or(SourceError::Failed(error.to_string())));
                }
            },
            Err(error) => error,
        };
        let (error, done_pages) = error;
        if let Error::Busy { .. } = error {
            // The rest of the folio is likely shared too (a fork shares every page): break
            // it all in one call rather than meet one refusal per page.
            add(&self.counters.take_busy, 1);
            let busy = (done_pages * PAGE) as u64;
            self.queue_cow(addr + busy, (pages * PAGE) as u64 - busy);
        }
        // Undo what staging really holds, not only what the kernel said it moved.
        let done_pages = match lane.staging.sync_present(run) {
            Ok(_) => run
                .slots()
                .rposition(|s| lane.staging.is_present(slot(s)))
                .map_or(done_pages, |last| done_pages.max(last + 1)),
            Err(_) => done_pages,
        };
        let staged = self.undo(home, lane_index, &mut lane, run, addr, done_pages);
        Err(staged.unwrap_or_else(|| self.classify_take_error(error)))
    }

    /// Debug builds: a run handed out as empty holds no page in the kernel's view either. A
    /// page there that the bitmap does not know would be taken for this take's page at its
    /// EEXIST (`move_out`): another page's data, mapped as this one's.
    #[cfg(debug_assertions)]
    fn assert_really_empty(staging: &Staging, run: SlotRun) {
        let mut stale = Vec::new();
        let checked = staging.kernel_present(run, |slot, holds| {
            if holds {
                stale.push(slot.0);
            }
        });
        assert!(checked.is_ok(), "mincore of staging failed: {checked:?}");
        assert!(stale.is_empty(), "staging slots {stale:?} of an empty run hold pages");
    }

    /// Moves the pages of `addr..` into `run`, continuing past partial progress (the kernel
    /// reports a move that stopped after some pages as EAGAIN with the bytes done; the
    /// reason comes from the retry at that offset). On error, returns it with the pages
    /// moved before it.
    fn move_out(
        &self,
        event: &Uffd,
        lane: &mut Lane,
        run: SlotRun,
        addr: u64,
    ) -> Result<(), (Error, usize)> {
        let mut done = 0u32;
        while done < run.pages {
            let rest = SlotRun { first: SlotIndex(run.first.0 + done), pages: run.pages - done };
            let at = addr as usize + done as usize * PAGE;
            let mode = MoveMode::ALLOW_SRC_HOLES;
            // SAFETY: the source is a folio of a region this engine manages. The engine
            // keeps a region's contents transparent: from now on an access there faults and
            // is served the data copied out (the `PageSource` contract), so no borrow of
            // region bytes ever observes the move (sys::process essay).
            let moved = unsafe { lane.staging.move_out_raw(event, at, rest, mode) };
            match moved {
                Ok(_) => return Ok(()),
                Err(Error::Again { done_bytes, .. }) if done_bytes > 0 => {
                    done += (done_bytes / PAGE) as u32;
                }
                // Our run was empty, so a present slot here is a page the move took but did
                // not count (`Staging::sync_present`): count it, and go on after it.
                Err(error @ Error::Exists { .. }) => {
                    let uncounted = lane.staging.sync_present(rest).map_or(0, |_| {
                        rest.slots().take_while(|&s| lane.staging.is_present(slot(s))).count()
                    });
                    if uncounted == 0 {
                        return Err((error, done as usize));
                    }
                    add(&self.counters.take_uncounted, uncounted as u64);
                    done += uncounted as u32;
                }
                Err(error) => {
                    let pages = done as usize + error.done_bytes() / PAGE;
                    return Err((error, pages));
                }
            }
        }
        Ok(())
    }

    fn classify_take_error(&self, error: Error) -> SourceError {
        match error {
            Error::Busy { .. } => SourceError::Retry,
            Error::Again { .. } => {
                add(&self.counters.take_retry, 1);
                SourceError::Retry
            }
            Error::NoEntry { .. } | Error::ProcessGone { .. } => {
                add(&self.counters.take_gone, 1);
                SourceError::Gone
            }
            other => {
                add(&self.counters.take_failed, 1);
                SourceError::Failed(other.to_string())
            }
        }
    }

    /// Unlocks the lanes' staging and discard areas (`munlock`), after the program locked
    /// every mapping (`mlockall(MCL_CURRENT)`): a page moves only between ranges of the
    /// same lock state, so with staging unlocked a take from memory the program locked is
    /// refused (EINVAL), as it is under `mlock` of the program's own ranges, and its pages
    /// stay resident; the drains (staging to discard) keep working. The call also brought
    /// in a page in every empty slot and discard page: the discard areas are emptied (they
    /// are registered without `EVENT_REMOVE`, so no event waits on the handler) and the
    /// staging slots' pages drained into them, so every take finds its slots empty again
    /// (a take into a slot holding a page would read that page as its own).
    ///
    /// Context: takes each lane's lock in turn; a few system calls per area.
    pub fn unlock_lanes(&self) {
        let home = self.home.load();
        for lane in home.lanes.lanes.iter() {
            let mut lane = lock(lane);
            for range in [lane.staging.range(), lane.discard.range()] {
                let _ = uffd::sys::mem::munlock(range.start(), range.len_bytes());
            }
            let len = lane.discard.range().len_bytes();
            if lane.discard.advise(0, len, Advice::DontNeed).is_err() {
                add(&self.counters.drain_failed, 1);
            }
            match lane.staging.adopt_kernel_pages() {
                Ok(0) => {}
                Ok(filled) => {
                    lane.undrained += filled as u32;
                    self.drain_lane(&home.lanes, &mut lane);
                }
                Err(_) => add(&self.counters.drain_failed, 1),
            }
        }
    }

    /// Runs one resolving ioctl over `len` bytes at `addr`, continuing past partial
    /// progress and present pages (module essay's table). `op(addr, offset, len)`.
    fn fill(
        &self,
        addr: u64,
        len: usize,
        filled: &AtomicU64,
        mut op: impl FnMut(usize, usize, usize) -> Result<usize, Error>,
    ) -> Result<Mapped, SourceError> {
        add(&self.counters.maps, 1);
        // The program's own address space: nothing goes in while an event is read and not
        // yet applied (crate::fence), as nothing comes out. A page mapped there after a
        // FORK was read, before the engine copied the page tables, would be in neither
        // the child's memory (missing at the fork) nor its copy of the tables (resident
        // here by then).
        let Ok(_pass) = self.fence.enter() else {
            add(&self.counters.map_fenced, 1);
            return Err(SourceError::Retry);
        };
        let (mut offset, mut present) = (0usize, 0usize);
        while offset < len {
            match op(addr as usize + offset, offset, len - offset) {
                Ok(n) => offset += n,
                Err(Error::Again { done_bytes, .. }) if done_bytes > 0 => offset += done_bytes,
                Err(Error::Exists { done_bytes, .. }) => {
                    offset += done_bytes + PAGE;
                    present += 1;
                }
                Err(Error::Again { .. }) => {
                    add(&self.counters.map_retry, 1);
                    add(&self.counters.map_partial_retry, u64::from(offset > 0));
                    return Err(SourceError::Retry);
                }
                Err(Error::NoEntry { .. } | Error::ProcessGone { .. }) => {
                    add(&self.counters.map_gone, 1);
                    return Err(SourceError::Gone);
                }
                Err(other) => return Err(SourceError::Failed(other.to_string())),
            }
        }
        let pages = len / PAGE;
        add(filled, (pages - present) as u64);
        if present > 0 {
            add(&self.counters.map_present_pages, present as u64);
            if self.wake_mode() == Wake::Wake {
                self.wake(addr, len as u64);
            }
        }
        Ok(if present == pages { Mapped::AlreadyPresent } else { Mapped::Done })
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

/// What a failed `UFFDIO_WRITEPROTECT` (or a staged page's move back) means to the
/// engine, as [`UffdSource::fill`] reads the other ioctls' errors.
fn source_error(error: Error) -> SourceError {
    match error {
        Error::Again { .. } => SourceError::Retry,
        Error::NoEntry { .. } | Error::ProcessGone { .. } => SourceError::Gone,
        other => SourceError::Failed(other.to_string()),
    }
}

impl Drop for UffdSource {
    /// Unregisters the lanes' staging from the event uffd before their mappings are
    /// unmapped: munmap of a registered range sends UNMAP and waits for a reader that may
    /// be gone by now (docs/UFFD.md).
    fn drop(&mut self) {
        let home = self.home();
        for lane in home.lanes.lanes.iter() {
            let lane = lock(lane);
            let _ = home.lanes.event.unregister(lane.staging.range());
        }
    }
}

/// Slot `s` of a staging area.
fn slot(s: usize) -> SlotIndex {
    SlotIndex(s as u32)
}
