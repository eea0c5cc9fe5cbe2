//! The library: a swap for this process's memory.
//!
//! ```text
//!   let swap = Uswap::builder().budget_bytes(256 << 20).swap_file(path, 2 << 30).build()?;
//!   let mut region = swap.map(1 << 30)?;        // anonymous, managed, usable as &mut [u8]
//!   region.as_mut_slice()[..5].copy_from_slice(b"hello");
//!   region.pageout(0, region.len())?;           // evict now (MADV_PAGEOUT)
//!   assert_eq!(&region.as_slice()[..5], b"hello"); // faults, swaps in
//!   println!("{:?}", swap.stats());
//! ```
//!
//! What [`Builder::build`] sets up, in order, refusing bad input before anything is
//! registered: the configuration is validated (budget, folio order, swap size); the kernel is
//! probed ([`uffd::probe()`]: userfaultfd blocked by seccomp, no permission to trap
//! kernel-mode faults, a kernel without a needed feature, each with what to do); the swap file
//! is created; then the event uffd, the page source ([`UffdSource`]), the engine (with its
//! background reclaimer), the handler thread ([`crate::handler`]), the SIGBUS dispatcher in
//! SIGBUS mode, and the copy-on-write breaker thread.
//!
//! Threads: the engine's reclaimer (`uswap-kswapd`), the handler (`uswap-uffd`), the COW
//! breaker (`uswap-cow`), and, for [`Region::pageout`], the caller's.
//!
//! Lifetimes: a [`Region`] keeps its [`Uswap`]'s insides alive; they are torn down when the
//! last of them goes, in the order that keeps every registered range read (a registered
//! range's munmap waits for its UNMAP to be read).
//!
//! Fork: a forked child's copy becomes a swap of the child's own before `fork()` returns in
//! it (crate::fork): its regions are served from the engine state it inherited, through a
//! userfaultfd and threads of its own. With [`Builder::exclude_from_fork`] the regions are
//! not in the child at all, and its copies of these objects are inert: every call says
//! [`Error::ForkedChild`], and dropping them releases nothing of the parent's.
//!
//! Unsafe code: the byte views of a region ([`Region::as_slice`], [`Region::as_mut_slice`]),
//! whose soundness rests on the engine keeping region contents transparent (their `SAFETY`
//! comments); this module is a named leaf allowed to make them.

#![allow(unsafe_code)]

mod builder;

pub(crate) use builder::Settings;
pub use builder::{Builder, SwapTarget, REQUIRED_FEATURES};

use crate::delivery::{Delivery, SigbusMode, SigbusStats};
use crate::handler::{Control, Handler, HandlerStats};
use crate::source::{SourceStats, UffdSource};
use crate::Error;
use engine::stats::StatsSnapshot;
pub use engine::LargeFolios;
use engine::{Engine, MAX_ORDER};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use uffd::mm::{Advice, Mapping};
use uffd::sys::process;
use uffd::Uffd;
pub use zswap::{CompressorKind, Incompressible};

/// The copy-on-write breaker thread ([`UffdSource::break_cow_pending`]).
#[derive(Debug)]
pub(crate) struct Breaker {
    stop: Arc<AtomicBool>,
    source: Arc<UffdSource>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Breaker {
    pub(crate) fn spawn(source: Arc<UffdSource>) -> Result<Breaker, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, work) = (stop.clone(), source.clone());
        let thread = std::thread::Builder::new()
            .name("uswap-cow".into())
            .spawn(move || {
                while !flag.load(SeqCst) {
                    work.break_cow_wait(&flag);
                }
            })
            .map_err(|error| Error::Thread { what: "the copy-on-write breaker", error })?;
        Ok(Breaker { stop, source, thread: Some(thread) })
    }
}

impl Drop for Breaker {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        self.source.wake_cow_breaker();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What an [`Inner`] owns, dropped in field order (see [`Inner`]'s `Drop`).
#[derive(Debug)]
pub(crate) struct Parts {
    /// Disarmed first: no thread resolves faults after this.
    pub(crate) sigbus: Option<SigbusMode>,
    /// Stopped before the handler (its COW breaks may fault and need the handler).
    #[allow(dead_code)] // held for its `Drop`
    pub(crate) breaker: Breaker,
    /// Stopped before the staging is unregistered (it reads the events until then).
    pub(crate) handler: Handler,
    /// Its reclaimer is joined when the last reference goes.
    pub(crate) engine: Arc<Engine>,
    pub(crate) source: Arc<UffdSource>,
    pub(crate) uffd: Arc<Uffd>,
}

impl Parts {
    /// Starts the threads of a swap whose engine, source and uffd exist: the handler, the
    /// SIGBUS dispatcher under SIGBUS delivery, the copy-on-write breaker. `control`: the
    /// handler's control block, made beforehand (a forked child's start-up dispatcher
    /// needs it before the handler thread exists).
    pub(crate) fn start(
        settings: &Settings,
        delivery: Delivery,
        engine: Arc<Engine>,
        source: Arc<UffdSource>,
        uffd: Arc<Uffd>,
        control: Option<Arc<Control>>,
    ) -> Result<Parts, Error> {
        let hooks = settings.handler.hooks.clone();
        let options = settings.handler.clone();
        let handler =
            Handler::spawn_on(control, engine.clone(), uffd.clone(), source.clone(), options)?;
        let sigbus = match delivery {
            Delivery::Sigbus => {
                let control = handler.control().clone();
                Some(SigbusMode::arm(engine.clone(), control, hooks)?)
            }
            Delivery::Handler => None,
        };
        let breaker = Breaker::spawn(source.clone())?;
        Ok(Parts { sigbus, breaker, handler, engine, source, uffd })
    }
}

/// A fork in progress (crate::fork): what prepare made for the parent and child handlers.
#[derive(Debug)]
pub(crate) struct Forking {
    /// The hold pipe: the parent polls the read end, the child's line keeps the write end.
    pub(crate) pipe: Option<(fds::Fd, fds::Fd)>,
    /// The engine's staged pages at the fork, with their data: copied into the child,
    /// which is forked without them.
    pub(crate) staged: engine::StagedCopy,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// `Some` while the swap runs in this process; replaced by a forked child's own.
    /// Lock-free: a lock taken by a thread at the instant of a fork would stay taken in
    /// the child.
    pub(crate) parts: arc_swap::ArcSwapOption<Parts>,
    pub(crate) settings: Settings,
    pub(crate) delivery: Delivery,
    kernel_faults: bool,
    pub(crate) exclude_from_fork: bool,
    probe_summary: String,
    /// The process the parts belong to.
    pub(crate) pid: std::sync::atomic::AtomicI32,
    /// A fork in progress on some thread (between its prepare and parent/child handlers).
    pub(crate) fork: std::sync::Mutex<Option<Forking>>,
}

impl Inner {
    fn in_owner(&self) -> bool {
        process::getpid() == self.pid.load(SeqCst)
    }

    pub(crate) fn owner(&self) -> Result<Arc<Parts>, Error> {
        match self.parts.load_full() {
            Some(parts) if self.in_owner() => Ok(parts),
            _ => Err(Error::ForkedChild),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let parts = self.parts.swap(None);
        if !self.in_owner() {
            // An inert copy in a forked child: the parts are the parent's (threads, and
            // locks held by threads that do not exist here): never touched, never dropped.
            std::mem::forget(parts);
        }
    }
}

/// A swap for this process's memory (see the module essay).
#[derive(Debug, Clone)]
pub struct Uswap {
    inner: Arc<Inner>,
}

/// Every counter of a [`Uswap`], at one moment (each part is consistent on its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// The engine's counters and gauges (vmstat names).
    pub engine: StatsSnapshot,
    /// The page source's (takes, maps, refusals).
    pub source: SourceStats,
    /// The handler thread's (messages, events, children).
    pub handler: HandlerStats,
    /// SIGBUS-mode resolution (zero in handler mode).
    pub sigbus: SigbusStats,
}

impl Uswap {
    /// A builder with the defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Maps `len_bytes` (rounded up to pages) of anonymous memory managed by this swap.
    ///
    /// # Errors
    /// [`Error::Config`] for a zero length (nothing is mapped); mmap or registration
    /// errors; [`Error::ForkedChild`].
    ///
    /// Context: may allocate the region's page table lazily; takes the engine's region lock.
    pub fn map(&self, len_bytes: usize) -> Result<Region, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        if len_bytes == 0 {
            return Err(Error::Config { what: "a region of length zero".into() });
        }
        let map = Mapping::anonymous(len_bytes)?;
        // Base pages only: the engine's folios are its own; a transparent huge page would
        // mean 2 MiB faults and moves behind its back.
        map.advise(0, map.len_bytes(), Advice::NoHugePage)?;
        if self.inner.exclude_from_fork {
            map.advise(0, map.len_bytes(), Advice::DontFork)?;
        }
        let range = map.range();
        let (start, len) = (range.start() as u64, range.len_bytes() as u64);
        // The engine knows the region before the kernel can report a fault in it.
        parts.engine.add_region(start, len).map_err(Error::Engine)?;
        if let Err(error) = parts.uffd.register(range, parts.source.register_mode()) {
            parts.engine.unmap(start, len);
            return Err(error.into());
        }
        Ok(Region { inner: self.inner.clone(), map: Some(map), range })
    }

    /// Pages out every resident page of managed memory in `[addr, addr + len)` now (like
    /// `MADV_PAGEOUT`); pages shared with a forked child are unshared first (a copy-on-write
    /// break that changes no data). Returns pages paged out.
    ///
    /// # Errors
    /// [`Error::Engine`] with `OutsideRegions` if `addr` is in no region;
    /// [`Error::ForkedChild`].
    ///
    /// Context: runs page-out on the calling thread (moves, compression, I/O); must not be
    /// called from the thread that resolves faults (it may fault on a shared page).
    pub fn pageout(&self, addr: usize, len: usize) -> Result<u64, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        let (addr, len) = (addr as u64, len as u64);
        let refused = parts.source.stats().take_busy;
        let mut paged = parts.engine.pageout(addr, len).map_err(Error::Engine)?;
        // Refusals (of this call, or counted meanwhile by another thread: a spare pass
        // costs a page-table walk) mean shared pages: unshare what is queued and in flight,
        // then page out again.
        if parts.source.stats().take_busy > refused {
            parts.source.break_cow_pending(Some((addr, len)));
            paged += parts.engine.pageout(addr, len).map_err(Error::Engine)?;
        }
        Ok(paged)
    }

    /// Changes the budget while the swap runs ([`Engine::set_budget`]): a smaller one is
    /// reclaimed down to in the background, a larger one takes effect at once.
    ///
    /// # Errors
    /// [`Error::Engine`] with `Config` for a budget below one folio (nothing changes);
    /// [`Error::ForkedChild`].
    pub fn set_budget(&self, budget_bytes: u64) -> Result<(), Error> {
        let parts = self.inner.owner()?;
        let _pass = parts.handler.control().gate.enter();
        parts.engine.set_budget(budget_bytes).map_err(Error::Engine)
    }

    /// Every counter.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn stats(&self) -> Result<Stats, Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        Ok(Stats {
            engine: parts.engine.stats(),
            source: parts.source.stats(),
            handler: parts.handler.control().stats(),
            sigbus: parts.sigbus.as_ref().map(SigbusMode::stats).unwrap_or_default(),
        })
    }

    /// How faults are delivered.
    pub fn delivery(&self) -> Delivery {
        self.inner.delivery
    }

    /// Whether faults taken in kernel mode (system calls into managed memory) are trapped.
    pub fn traps_kernel_faults(&self) -> bool {
        self.inner.kernel_faults
    }

    /// One line on the kernel and process the probe found.
    pub fn probe_summary(&self) -> &str {
        &self.inner.probe_summary
    }

    /// The engine (tests, benchmarks: configuration, invariants).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn engine(&self) -> Result<Arc<Engine>, Error> {
        Ok(self.inner.owner()?.engine.clone())
    }

    /// The page source (tests: fault injection, counters).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn source(&self) -> Result<Arc<UffdSource>, Error> {
        Ok(self.inner.owner()?.source.clone())
    }

    /// Checks the engine's and the page source's invariants, each with the background
    /// reclaimer paused: a page-out it has in flight holds staging slots, which the source's
    /// check would count as leaked. For tests, once the program's own threads are quiet.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    ///
    /// # Panics
    /// On a violated invariant.
    pub fn check_invariants(&self) -> Result<(), Error> {
        let parts = self.inner.owner()?;
        // No call runs across a fork (crate::fork): its locks would be the child's too.
        let _pass = parts.handler.control().gate.enter();
        parts.engine.check_invariants();
        parts.engine.with_reclaim_paused(|| parts.source.check_invariants());
        Ok(())
    }

    /// The uffd that manages this process's memory: an embedding program registers ranges
    /// it adopts with it ([`Engine::add_region_populated`]), on the handler thread.
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn uffd(&self) -> Result<Arc<Uffd>, Error> {
        Ok(self.inner.owner()?.uffd.clone())
    }

    /// The handler thread's control block ([`Control::wake`], counters).
    ///
    /// # Errors
    /// [`Error::ForkedChild`].
    pub fn control(&self) -> Result<Arc<Control>, Error> {
        Ok(self.inner.owner()?.handler.control().clone())
    }

    /// The largest folio order the engine accepts.
    pub const MAX_FOLIO_ORDER: u32 = MAX_ORDER;
}

/// A managed anonymous region (see the module essay). Unmapped on drop.
#[derive(Debug)]
pub struct Region {
    inner: Arc<Inner>,
    /// `Some` until unmapped.
    map: Option<Mapping>,
    range: uffd::types::Range,
}

impl Region {
    /// The first byte's address.
    pub fn addr(&self) -> usize {
        self.range.start()
    }

    /// The length in bytes (a page multiple).
    pub fn len(&self) -> usize {
        self.range.len_bytes()
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A raw pointer to the first byte (for threads sharing the region, and for C).
    pub fn as_ptr(&self) -> *mut u8 {
        self.range.start() as *mut u8
    }

    /// The region's bytes. Reading a page that is not resident faults and waits while the
    /// engine brings it back.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is managed by this engine (transparent), mapped until `self`
        // drops, never discarded by safe code, and `&self` excludes `as_mut_slice`.
        unsafe { uffd::sys::process::region_bytes(self.addr(), self.len()) }
    }

    /// The region's bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` excludes every other borrow.
        unsafe { uffd::sys::process::region_bytes_mut(self.addr(), self.len()) }
    }

    /// Pages out `[offset, offset + len)` of the region now (see [`Uswap::pageout`]).
    ///
    /// # Errors
    /// As [`Uswap::pageout`]; [`uffd::Error::OutOfBounds`] (as [`Error::Kernel`]) for a range
    /// outside the region.
    pub fn pageout(&self, offset: usize, len: usize) -> Result<u64, Error> {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            let size_bytes = self.len();
            return Err(uffd::Error::OutOfBounds { offset, len_bytes: len, size_bytes }.into());
        }
        Uswap { inner: self.inner.clone() }.pageout(self.addr() + offset, len)
    }

    /// Unmaps the region: its swap entries are dropped, its memory returned.
    ///
    /// # Errors
    /// [`Error::ForkedChild`] (in a child the mapping is left to the child's exit).
    pub fn unmap(mut self) -> Result<(), Error> {
        self.release()
    }

    fn release(&mut self) -> Result<(), Error> {
        let Ok(parts) = self.inner.owner() else {
            // A forked child: the mapping is left to the child's exit (its munmap would
            // wait for the parent's handler to read an UNMAP).
            std::mem::forget(self.map.take());
            return Err(Error::ForkedChild);
        };
        let Some(map) = self.map.take() else { return Ok(()) };
        let range = self.range;
        let (start, len) = (range.start() as u64, range.len_bytes() as u64);
        // Unregistered first: from here an access is an ordinary fault, and munmap sends no
        // UNMAP to wait for. The gate keeps a fork from copying a half-dropped region.
        let _pass = parts.handler.control().gate.enter();
        let unregistered = parts.uffd.unregister(range);
        parts.engine.unmap(start, len);
        drop(map);
        Ok(unregistered?)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
