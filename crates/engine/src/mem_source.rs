//! An in-memory page source: simulated process memory for the engine's tests, for
//! `uswap bench engine`, and for the simulator.
//!
//! Every page of the simulated address space is `Missing` (an access faults into the
//! engine), `Zero` (the shared zero page: reads see zeros, a write allocates),
//! `ZeroProtected` (the same, but a write faults into the engine first, as a
//! write-protected zero page does through userfaultfd), `Data`, or `Poisoned` (an access
//! fails, as SIGBUS would). Pages are locked a page table's worth (512) at a time, as the
//! kernel's split page-table lock does ([`crate::frames`]), so a take or a map of a folio is
//! atomic with respect to the simulated program's accesses to it, which is the
//! [`PageSource`] contract: a write lands before a take (and is in the taken data) or after
//! it (and faults).
//!
//! The "program" is whoever calls [`MemorySource::read`] and [`MemorySource::write`]: they
//! fault into the engine when a page is missing and retry, exactly as a real access
//! would. Accesses set a referenced bit that reclaim can test.

use crate::engine::{Engine, FaultOutcome};
use crate::frames::{Frames, Locked, Span};
use crate::page_source::{Mapped, PageSource, SourceError, StageLoc, Taken};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::{Error, PAGE_SIZE};

/// What a page of simulated memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not present: an access faults into the engine.
    Missing,
    /// The shared zero page: reads see zeros, a write allocates.
    Zero,
    /// The shared zero page, write-protected: reads see zeros, a write faults into the
    /// engine as a write-protect fault ([`MemorySource::with_protected_zero`]).
    ZeroProtected,
    /// Its own data.
    Data,
    /// An access fails (SIGBUS).
    Poisoned,
}

/// A page held after an injected staged take: its state, and its data if it had any.
type HeldPage = (State, Box<[u8]>);

/// A locked page of simulated memory: its state (through `Deref`) and its frame
/// ([`crate::frames`]: contiguous memory, so taking and mapping a page costs a copy and no
/// allocation, to a destination laid out as the kernel sees a process's memory; the frame
/// of a page that is out keeps whatever it held).
type PageRef<'a> = Locked<'a, State>;

/// Why a simulated access failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// The page is poisoned: the engine could not read its data back (SIGBUS).
    Poisoned {
        /// The address.
        addr: u64,
    },
    /// The engine refused the fault.
    Engine(Error),
    /// The fault kept being retried without the page appearing.
    Livelock {
        /// The address.
        addr: u64,
    },
}

/// Bound on fault-and-retry rounds for one access; a correct engine needs one or two.
const ACCESS_ROUNDS_MAX: u32 = 1000;

/// Simulated memory at `[base, base + nr_pages * 4096)`.
#[derive(Debug)]
pub struct MemorySource {
    base: u64,
    pages: Frames<State>,
    referenced: Box<[AtomicBool]>,
    /// Pages holding data (what RSS would count; zero-page mappings cost nothing).
    data_pages: AtomicU64,
    /// `take` calls that should fail with `Retry` (fault injection: fork in progress).
    inject_retry: AtomicU64,
    /// `take` calls that should stop part way and keep their first pages (fault injection:
    /// a refused take whose undo met an unread event, the page source's rule 5).
    inject_staged: AtomicU64,
    /// `unstage` calls that should say `Retry` (fault injection: an event unread).
    inject_unstage_retry: AtomicU64,
    /// Pages held for the engine after an injected staged take, by place; a place with no
    /// page was a hole.
    held: crate::sync::Mutex<std::collections::BTreeMap<u64, HeldPage>>,
    /// The next take's first place.
    next_place: AtomicU64,
    /// What reclaim sees of accesses to resident pages.
    access_bits: AccessBits,
    /// Maps the zero page write-protected ([`PageSource::protects_zero`]).
    protect_zero: bool,
    /// Addresses where one mapping ends and the next begins ([`MemorySource::split_at`]).
    boundaries: crate::sync::Mutex<Vec<u64>>,
    /// Calls refused for spanning a boundary.
    across: AtomicU64,
    /// The address of every page mapped with data, in order, when a test asked for it
    /// ([`MemorySource::with_map_log`]); `None` keeps the map path free of it (`uswap
    /// bench engine` times that path).
    map_log: Option<crate::sync::Mutex<Vec<u64>>>,
}

/// What sets a page's referenced bit, and whether reclaim may read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AccessBits {
    /// Every access (the kernel's accessed bits).
    All,
    /// Writes only (and, if `fault_references`, the access that faulted the page in, as a
    /// page mapped writable would be): what userfaultfd's asynchronous write-protect mode
    /// could show reclaim through `PAGEMAP_SCAN`'s written bit.
    Writes { fault_references: bool },
    /// None: `test_and_clear_referenced` answers `None`, as userfaultfd's source does.
    None,
}

impl AccessBits {
    /// Whether an access (a write or not, right after a fault or not) sets the bit.
    fn set_by(self, write: bool, faulted: bool) -> bool {
        match self {
            AccessBits::All => true,
            AccessBits::Writes { fault_references } => write || (faulted && fault_references),
            AccessBits::None => false,
        }
    }
}

impl MemorySource {
    /// A source of `nr_pages` missing pages from `base` (page aligned).
    pub fn new(base: u64, nr_pages: u64) -> Self {
        assert_eq!(base % PAGE_SIZE as u64, 0, "base not page aligned");
        MemorySource {
            base,
            pages: Frames::new(nr_pages as usize, |_| State::Missing),
            referenced: (0..nr_pages).map(|_| AtomicBool::new(false)).collect(),
            data_pages: AtomicU64::new(0),
            inject_retry: AtomicU64::new(0),
            inject_staged: AtomicU64::new(0),
            inject_unstage_retry: AtomicU64::new(0),
            held: crate::sync::Mutex::new(std::collections::BTreeMap::new()),
            next_place: AtomicU64::new(0),
            access_bits: AccessBits::All,
            protect_zero: false,
            boundaries: crate::sync::Mutex::new(Vec::new()),
            across: AtomicU64::new(0),
            map_log: None,
        }
    }

    /// Makes `addr` the edge between two mappings, as the kernel's VMAs have them (a range
    /// the program mapped again inside a region): a call over a range across it is refused
    /// as the kernel refuses it (a resolving ioctl with ENOENT, here `Gone`; a move with
    /// EINVAL, here `Failed`), and counted ([`MemorySource::refused_across`]).
    pub fn split_at(&self, addr: u64) {
        let mut boundaries = self.boundaries.lock();
        if let Err(at) = boundaries.binary_search(&addr) {
            boundaries.insert(at, addr);
        }
    }

    /// Calls refused for spanning two mappings ([`MemorySource::split_at`]).
    pub fn refused_across(&self) -> u64 {
        self.across.load(Ordering::Relaxed)
    }

    /// Whether `[addr, addr + len)` spans two mappings; counted if so.
    fn across(&self, addr: u64, len: u64) -> bool {
        let boundaries = self.boundaries.lock();
        let next = boundaries.partition_point(|&b| b <= addr);
        let across = boundaries.get(next).is_some_and(|&b| b < addr + len);
        if across {
            self.across.fetch_add(1, Ordering::Relaxed);
        }
        across
    }

    /// The same source, mapping the zero page write-protected: the engine maps reads of
    /// zero pages uncharged and learns of each first write from a write-protect fault, as
    /// with userfaultfd's write protection.
    pub fn with_protected_zero(mut self) -> Self {
        self.protect_zero = true;
        self
    }

    /// The same source, telling reclaim nothing of accesses to resident pages
    /// (`test_and_clear_referenced` answers `None`), as the userfaultfd source does.
    pub fn without_access_bits(mut self) -> Self {
        self.access_bits = AccessBits::None;
        self
    }

    /// The same source, whose referenced bits only writes set (and, if `fault_references`,
    /// the access that faults a page in): what reclaim would see of accesses through
    /// userfaultfd's asynchronous write-protect mode.
    pub fn with_write_bits_only(mut self, fault_references: bool) -> Self {
        self.access_bits = AccessBits::Writes { fault_references };
        self
    }

    /// The same source, logging the address of every page mapped with data
    /// ([`MemorySource::take_map_log`]).
    pub fn with_map_log(mut self) -> Self {
        self.map_log = Some(crate::sync::Mutex::new(Vec::new()));
        self
    }

    /// The addresses of the pages mapped with data since the last call, in the order they
    /// were mapped (a page's data arriving is what wakes a thread faulting on it).
    ///
    /// # Panics
    /// If the source was not made [`MemorySource::with_map_log`].
    pub fn take_map_log(&self) -> Vec<u64> {
        let log = self.map_log.as_ref().expect("a source made with_map_log");
        std::mem::take(&mut *log.lock())
    }

    /// The first address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_SIZE as u64
    }

    /// Pages holding data (not missing, not the zero page).
    pub fn data_pages(&self) -> u64 {
        self.data_pages.load(Ordering::Relaxed)
    }

    /// Makes the next `n` takes fail with [`SourceError::Retry`].
    pub fn inject_take_retries(&self, n: u64) {
        self.inject_retry.store(n, Ordering::Relaxed);
    }

    /// Makes the next `n` takes stop after their first half (at least one page), keeping
    /// those pages held and saying [`SourceError::Staged`].
    pub fn inject_take_staged(&self, n: u64) {
        self.inject_staged.store(n, Ordering::Relaxed);
    }

    /// Makes the next `n` [`PageSource::unstage`] calls say [`SourceError::Retry`].
    pub fn inject_unstage_retries(&self, n: u64) {
        self.inject_unstage_retry.store(n, Ordering::Relaxed);
    }

    /// Pages held for the engine now (staged, not settled).
    pub fn held_pages(&self) -> usize {
        self.held.lock().len()
    }

    /// Takes one from an injection counter; whether it was set.
    fn injected(counter: &AtomicU64) -> bool {
        let pending = counter.load(Ordering::Relaxed);
        if pending == 0 {
            return false;
        }
        counter.store(pending - 1, Ordering::Relaxed);
        true
    }

    /// An injected staged take: the first half of the pages at `addr` leave and are held.
    fn take_staged(&self, addr: u64, nr: usize) -> SourceError {
        let kept = nr.div_ceil(2);
        let first = self.next_place.fetch_add(nr as u64, Ordering::Relaxed);
        let mut pages = self.lock_range(addr, kept * PAGE_SIZE);
        let mut held = self.held.lock();
        for (i, (state, frame)) in pages.pages().enumerate() {
            match std::mem::replace(state, State::Missing) {
                State::Data => {
                    self.data_pages.fetch_sub(1, Ordering::Relaxed);
                    held.insert(first + i as u64, (State::Data, frame.to_vec().into()));
                }
                State::Zero | State::ZeroProtected => {
                    held.insert(first + i as u64, (State::Zero, Box::default()));
                }
                State::Missing | State::Poisoned => {}
            }
        }
        SourceError::Staged { at: StageLoc(first), pages: kept as u32 }
    }

    fn page_index(&self, addr: u64) -> usize {
        assert!(addr >= self.base, "address below the source");
        let index = ((addr - self.base) / PAGE_SIZE as u64) as usize;
        assert!(index < self.pages.len(), "address past the source");
        index
    }

    /// Reads the page at `addr` (page aligned) into `buf`, faulting into `engine` as a real
    /// access would.
    ///
    /// # Errors
    /// [`AccessError`] when the page is poisoned or the engine refuses.
    pub fn read(&self, engine: &Engine, addr: u64, buf: &mut [u8]) -> Result<(), AccessError> {
        self.access(engine, addr, false, |page| match **page {
            State::Data => buf.copy_from_slice(page.frame()),
            State::Zero | State::ZeroProtected => buf.fill(0),
            State::Missing | State::Poisoned => unreachable!("access() handles these"),
        })
    }

    /// Reads the page at `addr` if it is present, without faulting (a forked child's
    /// accesses are faulted by the test through the child's address space).
    pub fn read_present(&self, addr: u64, buf: &mut [u8]) -> bool {
        let mut page = self.pages.lock(self.page_index(addr));
        match *page {
            State::Data => buf.copy_from_slice(page.frame()),
            State::Zero | State::ZeroProtected => buf.fill(0),
            State::Missing | State::Poisoned => return false,
        }
        true
    }

    /// Writes `data` (one page) at `addr`, faulting as a real access would.
    ///
    /// # Errors
    /// As [`MemorySource::read`].
    pub fn write(&self, engine: &Engine, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        self.access(engine, addr, true, |page| {
            if **page == State::Zero || **page == State::ZeroProtected {
                // Copy-on-write of the zero page: now it costs memory.
                self.data_pages.fetch_add(1, Ordering::Relaxed);
                **page = State::Data;
            }
            page.frame().copy_from_slice(data);
        })
    }

    fn access(
        &self,
        engine: &Engine,
        addr: u64,
        write: bool,
        mut f: impl FnMut(&mut PageRef<'_>),
    ) -> Result<(), AccessError> {
        let index = self.page_index(addr);
        let mut faulted = false;
        for _ in 0..ACCESS_ROUNDS_MAX {
            // A write to a protected zero page faults as write-protect, not as missing.
            let protected = {
                let mut page = self.pages.lock(index);
                match *page {
                    State::Poisoned => return Err(AccessError::Poisoned { addr }),
                    State::ZeroProtected if write => true,
                    State::Data | State::Zero | State::ZeroProtected => {
                        if self.access_bits.set_by(write, faulted) {
                            self.referenced[index].store(true, Ordering::Relaxed);
                        }
                        f(&mut page);
                        return Ok(());
                    }
                    State::Missing => false,
                }
            };
            faulted = true;
            let outcome = if protected {
                engine.handle_wp_fault_in(crate::region::MmId::DEFAULT, addr)
            } else {
                engine.handle_fault(addr, write)
            };
            match outcome {
                Ok(FaultOutcome::Mapped | FaultOutcome::Spurious | FaultOutcome::Retry) => {}
                Ok(FaultOutcome::Gone) => {
                    return Err(AccessError::Engine(Error::OutsideRegions { addr }))
                }
                Err(Error::SwapIn { .. }) => {} // the page is poisoned now; the loop reports it
                Err(error) => return Err(AccessError::Engine(error)),
            }
        }
        Err(AccessError::Livelock { addr })
    }

    /// Drops pages as `MADV_DONTNEED` would (the caller then tells the engine, as the
    /// REMOVE event does).
    pub fn drop_range(&self, addr: u64, len: u64) {
        let first = self.page_index(addr);
        for index in first..first + (len / PAGE_SIZE as u64) as usize {
            let mut page = self.pages.lock(index);
            if *page == State::Data {
                self.data_pages.fetch_sub(1, Ordering::Relaxed);
            }
            *page = State::Missing;
        }
    }

    /// A child's copy of this address space, as `fork` makes it: present pages copied
    /// (the kernel shares them copy-on-write; a copy is the same to the program), missing
    /// and poisoned ones as they are. Call it while nothing else touches the source.
    pub fn fork(&self) -> MemorySource {
        let child = MemorySource::new(self.base, self.pages.len() as u64);
        child.boundaries.lock().clone_from(&self.boundaries.lock());
        for index in 0..self.pages.len() {
            let mut page = self.pages.lock(index);
            let mut copy = child.pages.lock(index);
            if *page == State::Data {
                child.data_pages.fetch_add(1, Ordering::Relaxed);
                copy.frame().copy_from_slice(page.frame());
            }
            // The child's zero pages are unprotected: its writes are the kernel's business.
            *copy = if *page == State::ZeroProtected { State::Zero } else { *page };
        }
        child
    }

    /// Moves the pages of `[from, from + len)` to `[to, to + len)` as `mremap` does (the
    /// destination's old pages are dropped; the source becomes missing).
    pub fn remap(&self, from: u64, to: u64, len: u64) {
        let pages = (len / PAGE_SIZE as u64) as usize;
        let (src, dst) = (self.page_index(from), self.page_index(to));
        // A moved page's data, if it has any (the others move as their state alone).
        let moved: Vec<(State, Option<Box<[u8; PAGE_SIZE]>>)> = (src..src + pages)
            .map(|i| {
                let mut page = self.pages.lock(i);
                let data = (*page == State::Data).then(|| Box::new(*page.frame()));
                (std::mem::replace(&mut *page, State::Missing), data)
            })
            .collect();
        for (i, (state, data)) in moved.into_iter().enumerate() {
            let mut page = self.pages.lock(dst + i);
            if *page == State::Data {
                self.data_pages.fetch_sub(1, Ordering::Relaxed);
            }
            *page = state;
            if let Some(data) = data {
                page.frame().copy_from_slice(&*data);
            }
        }
    }

    /// Locks the pages of `[addr, addr + len)`: the lock of each page table's worth they
    /// lie in, in address order (one for an aligned folio), as the kernel's PTL.
    fn lock_range(&self, addr: u64, len: usize) -> Span<'_, State> {
        self.pages.lock_span(self.page_index(addr), len / PAGE_SIZE)
    }

    /// Installs pages at `addr` unless any is present: `data` gives each page's bytes, or
    /// `None` for the zero page. `Gone` across two mappings ([`MemorySource::split_at`]).
    fn install(&self, addr: u64, len: usize, data: Option<&[u8]>) -> Result<Mapped, SourceError> {
        if self.across(addr, len as u64) {
            return Err(SourceError::Gone);
        }
        let mut pages = self.lock_range(addr, len);
        if pages.states_mut().any(|p| *p != State::Missing) {
            return Ok(Mapped::AlreadyPresent);
        }
        for (i, (state, frame)) in pages.pages().enumerate() {
            match data {
                Some(data) => {
                    frame.copy_from_slice(&data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]);
                    *state = State::Data;
                }
                None => *state = State::Zero,
            }
        }
        if data.is_some() {
            self.data_pages.fetch_add(pages.len() as u64, Ordering::Relaxed);
            if let Some(log) = &self.map_log {
                let pages = 0..pages.len() as u64;
                log.lock().extend(pages.map(|i| addr + i * PAGE_SIZE as u64));
            }
        }
        Ok(Mapped::Done)
    }
}

impl PageSource for MemorySource {
    fn take_each(&self, addr: u64, dst: &mut [&mut [u8]]) -> Result<Taken, SourceError> {
        if Self::injected(&self.inject_retry) {
            return Err(SourceError::Retry);
        }
        if self.across(addr, (dst.len() * PAGE_SIZE) as u64) {
            return Err(SourceError::Failed("a move across two mappings (EINVAL)".into()));
        }
        if Self::injected(&self.inject_staged) {
            return Err(self.take_staged(addr, dst.len()));
        }
        let mut holes = 0;
        let mut pages = self.lock_range(addr, dst.len() * PAGE_SIZE);
        for ((state, frame), out) in pages.pages().zip(dst.iter_mut()) {
            match std::mem::replace(state, State::Missing) {
                State::Data => {
                    out.copy_from_slice(frame);
                    self.data_pages.fetch_sub(1, Ordering::Relaxed);
                }
                State::Zero | State::ZeroProtected => out.fill(0),
                State::Missing | State::Poisoned => {
                    out.fill(0);
                    holes += 1;
                }
            }
        }
        Ok(if holes == 0 { Taken::All } else { Taken::Partial { holes } })
    }

    fn map(&self, addr: u64, data: &[u8]) -> Result<Mapped, SourceError> {
        self.install(addr, data.len(), Some(data))
    }

    fn unstage(&self, at: StageLoc, addr: u64) -> Result<(), SourceError> {
        if Self::injected(&self.inject_unstage_retry) {
            return Err(SourceError::Retry);
        }
        let Some((state, data)) = self.held.lock().remove(&at.0) else { return Ok(()) };
        // A page present there is the newer: ours goes.
        match state {
            State::Data => self.install(addr, PAGE_SIZE, Some(&data)).map(drop),
            _ => self.install(addr, PAGE_SIZE, None).map(drop),
        }
    }

    fn drop_staged(&self, at: StageLoc) {
        self.held.lock().remove(&at.0);
    }

    fn read_staged(&self, at: StageLoc, out: &mut [u8]) -> bool {
        match self.held.lock().get(&at.0) {
            Some((State::Data, data)) => out.copy_from_slice(data),
            Some(_) => out.fill(0),
            None => return false,
        }
        true
    }

    fn map_zero(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        self.install(addr, len as usize, None)
    }

    fn protects_zero(&self) -> bool {
        self.protect_zero
    }

    /// Maps, then protects, as userfaultfd does (`UFFDIO_ZEROPAGE`, then
    /// `UFFDIO_WRITEPROTECT`): a write in between allocates unseen.
    fn map_zero_protected(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        let mapped = self.install(addr, len as usize, None)?;
        if mapped == Mapped::Done {
            for state in self.lock_range(addr, len as usize).states_mut() {
                if *state == State::Zero {
                    *state = State::ZeroProtected;
                }
            }
        }
        Ok(mapped)
    }

    fn unprotect(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        for state in self.lock_range(addr, len as usize).states_mut() {
            if *state == State::ZeroProtected {
                *state = State::Zero;
            }
        }
        Ok(())
    }

    fn fills_in_place(&self) -> bool {
        true
    }

    fn map_with(
        &self,
        addr: u64,
        len: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<Option<Mapped>, SourceError> {
        if self.across(addr, len) {
            return Err(SourceError::Gone);
        }
        let mut pages = self.lock_range(addr, len as usize);
        if pages.states_mut().any(|p| *p != State::Missing) {
            return Ok(Some(Mapped::AlreadyPresent));
        }
        // A missing page's buffer holds nothing anyone reads: filled in place, it becomes
        // the page's data only once every page is filled.
        if !fill(pages.bytes_mut()) {
            return Ok(None);
        }
        pages.states_mut().for_each(|state| *state = State::Data);
        self.data_pages.fetch_add(pages.len() as u64, Ordering::Relaxed);
        Ok(Some(Mapped::Done))
    }

    fn poison(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        for state in self.lock_range(addr, len as usize).states_mut() {
            if *state == State::Missing {
                *state = State::Poisoned;
            }
        }
        Ok(())
    }

    fn wake(&self, _addr: u64, _len: u64) {}

    fn test_and_clear_referenced(&self, addr: u64, len: u64) -> Option<bool> {
        if self.access_bits == AccessBits::None {
            return None;
        }
        let first = self.page_index(addr);
        let pages = (len / PAGE_SIZE as u64) as usize;
        let mut any = false;
        for flag in &self.referenced[first..first + pages] {
            any |= flag.swap(false, Ordering::Relaxed);
        }
        Some(any)
    }
}
