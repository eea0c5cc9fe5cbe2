//! The page source: where the managed pages really live.
//!
//! The engine decides *what* moves (which folio to evict, what data a fault needs); a page
//! source does the moving. The userfaultfd frontend implements it over a real process's
//! memory (`UFFDIO_MOVE` out, `UFFDIO_COPY` / `UFFDIO_ZEROPAGE` in); the simulator and the
//! engine's own tests implement it over simulated memory. The same engine code runs under
//! both.
//!
//! Addresses are the program's virtual addresses (or the simulator's); every call covers
//! whole pages, aligned to the page size, inside one region the engine registered.
//!
//! The contract the engine relies on:
//!
//! 1. [`PageSource::take_each`] (and [`PageSource::take`], which calls it) is atomic with
//!    respect to the program's accesses: a write either happened before the take (and
//!    its data is in the buffers) or happens after (and faults into the engine). No write
//!    is ever lost. Pages that were not present (the program dropped them, e.g.
//!    `MADV_DONTNEED` racing with reclaim) read as zeros and are reported.
//! 2. After [`PageSource::map`] or [`PageSource::map_zero`] returns `Mapped`, the program
//!    sees exactly that data, and threads waiting in a fault on those pages are woken.
//!    `AlreadyPresent` means someone mapped the pages first: nothing changed.
//! 3. [`PageSource::poison`] makes later accesses to the pages fail loudly (SIGBUS), for data
//!    the engine could not read back: an error must never map wrong data.
//! 4. Calls on different pages may run concurrently; calls on the same page are serialised
//!    by the engine (under the region's page-table lock).
//! 5. A take refused part way may leave pages out of the program, held by the source
//!    ([`SourceError::Staged`]): the source could neither finish the take nor put them back
//!    (userfaultfd refuses both while an event is unread). The engine then owns them as
//!    *staged* pages ([`crate::region::Pte::Staged`]) and settles each exactly once, under
//!    its page-table lock: [`PageSource::unstage`] puts it back, [`PageSource::drop_staged`]
//!    discards it (the program dropped or unmapped it), [`PageSource::read_staged`] copies
//!    it for a forked child. A source keeps each staged page's place until it is settled.

/// What a [`PageSource::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Every page was present and is now in `dst`.
    All,
    /// Some pages were not present; their part of `dst` was zero-filled.
    Partial {
        /// How many pages were not present.
        holes: u32,
    },
}

/// What a [`PageSource::map`] or [`PageSource::map_zero`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// The data is mapped.
    Done,
    /// The pages were already present (a racing fault, or the program wrote there first);
    /// nothing was changed.
    AlreadyPresent,
}

/// Where a page source holds a staged page ([`SourceError::Staged`]): opaque to the engine,
/// except that page `i` of a take staged at `at` is at `StageLoc(at.0 + i)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StageLoc(pub u64);

impl StageLoc {
    /// The place of page `i` of the take staged here.
    pub fn page(self, i: u64) -> StageLoc {
        StageLoc(self.0 + i)
    }
}

/// Why a page-source operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The address space is changing (fork, mremap in progress: the kernel's EAGAIN).
    /// Nothing was done; try again later.
    Retry,
    /// A take refused part way (as [`SourceError::Retry`]), after its first `pages` pages had
    /// left the program, and the source could not put them back: each of them may be held
    /// at `at.page(i)` (one that went back, or was a hole, is held as an empty place). The
    /// engine owns them from here (the module documentation, rule 5); the others were
    /// never taken.
    Staged {
        /// Where page 0 of the take is held.
        at: StageLoc,
        /// How many of the take's first pages are held.
        pages: u32,
    },
    /// The range is no longer managed (unmapped, or the process is gone).
    Gone,
    /// Anything else, with the reason (an errno's text).
    Failed(String),
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Retry => write!(f, "address space changing, retry"),
            SourceError::Staged { pages, .. } => {
                write!(f, "address space changing, {pages} pages held by the source")
            }
            SourceError::Gone => write!(f, "range no longer managed"),
            SourceError::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// Where the managed pages live (see the module documentation for the contract).
pub trait PageSource: Send + Sync {
    /// Takes `pages.len()` pages at `addr` out of the program's view, all at once (one
    /// `UFFDIO_MOVE`, so one TLB flush, through userfaultfd), copying page `i`'s content
    /// into `pages[i]` (4 KiB each): reclaim takes a run of neighbouring folios straight
    /// into their own buffers.
    ///
    /// # Errors
    /// [`SourceError::Retry`] if the layout is changing (nothing taken),
    /// [`SourceError::Gone`] if the range is not managed any more.
    fn take_each(&self, addr: u64, pages: &mut [&mut [u8]]) -> Result<Taken, SourceError>;

    /// As [`PageSource::take_each`], into one buffer of `dst.len()` bytes.
    ///
    /// # Errors
    /// As [`PageSource::take_each`].
    fn take(&self, addr: u64, dst: &mut [u8]) -> Result<Taken, SourceError> {
        let mut pages: smallvec::SmallVec<[&mut [u8]; 16]> =
            dst.chunks_mut(crate::PAGE_SIZE).collect();
        self.take_each(addr, &mut pages)
    }

    /// Maps `data` (whole pages) at `addr` and wakes threads faulting there.
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn map(&self, addr: u64, data: &[u8]) -> Result<Mapped, SourceError>;

    /// Can [`PageSource::map_with`] write the pages in place (memory the engine addresses
    /// directly, as the kernel writes the folio it is about to map)? Then a page-in reads
    /// the pool straight into the pages instead of through the swap-cache folio: one copy,
    /// not two. `false` by default: userfaultfd's `UFFDIO_COPY` needs a source buffer, and
    /// the folio is that buffer.
    fn fills_in_place(&self) -> bool {
        false
    }

    /// Maps `len` bytes at `addr` that `fill(folio)` writes, all at once into one buffer of
    /// `len` bytes (a folio's pool reads share their locks, and raw pages lying back to back
    /// in the pool are copied with one `memcpy`),
    /// unless any of them is present (`AlreadyPresent`, `fill` maybe never called); wakes
    /// threads faulting there. `Ok(None)` if `fill` refused: nothing is mapped, the pages
    /// stay missing. The caller holds the region's page-table lock. The default fills a
    /// buffer and calls [`PageSource::map`].
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn map_with(
        &self,
        addr: u64,
        len: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<Option<Mapped>, SourceError> {
        let mut data = vec![0u8; len as usize];
        if !fill(&mut data) {
            return Ok(None);
        }
        self.map(addr, &data).map(Some)
    }

    /// Maps the shared zero page over `len` bytes at `addr` (no memory until written) and
    /// wakes threads faulting there.
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn map_zero(&self, addr: u64, len: u64) -> Result<Mapped, SourceError>;

    /// Can this source map the zero page write-protected ([`PageSource::map_zero_protected`])?
    /// Then the engine maps a read of a zero page uncharged, and learns of the first write
    /// to it from a write-protect fault ([`crate::Engine::handle_wp_fault_in`]). `false` by
    /// default: a zero-page mapping is then charged as a resident page, since a write to
    /// it would allocate unseen.
    fn protects_zero(&self) -> bool {
        false
    }

    /// As [`PageSource::map_zero`], the pages left write-protected: a write to one faults
    /// into the engine as a write-protect fault until [`PageSource::unprotect`] lifts it.
    /// Called only if [`PageSource::protects_zero`].
    ///
    /// If the protection cannot be made atomic with the mapping (userfaultfd maps, then
    /// protects), a write by another thread in between allocates unseen: that page keeps
    /// its data, it is only uncharged until its next write-protect fault (or for ever, if
    /// the program never writes it again). The engine never reads or takes a zero-page
    /// entry's pages, so no data can be lost that way.
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn map_zero_protected(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        let _ = (addr, len);
        Err(SourceError::Failed("this page source cannot write-protect".into()))
    }

    /// Lifts the write protection of `len` bytes at `addr` (a write may go through and
    /// allocate now) and wakes threads faulting there. Harmless on pages not protected or
    /// not present.
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn unprotect(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        let _ = (addr, len);
        Ok(())
    }

    /// Makes accesses to `len` bytes at `addr` fail loudly (SIGBUS), and wakes threads
    /// faulting there so they see the failure.
    ///
    /// # Errors
    /// As [`PageSource::take`].
    fn poison(&self, addr: u64, len: u64) -> Result<(), SourceError>;

    /// Wakes threads faulting on `len` bytes at `addr` whose pages are already present.
    fn wake(&self, addr: u64, len: u64);

    /// Puts the staged page held at `at` back at `addr` (its address now: the program may
    /// have moved it since) and wakes threads faulting there; the place is then free. A
    /// place found empty (the page went back before it was staged, or was a hole) is freed
    /// with nothing moved; a page found present at `addr` wins over the held one, which is
    /// discarded. Called under the page-table lock, once per staged page that succeeds.
    ///
    /// # Errors
    /// [`SourceError::Retry`] while the address space is changing (the page stays held);
    /// [`SourceError::Gone`] if `addr` is not managed any more; [`SourceError::Failed`].
    fn unstage(&self, at: StageLoc, addr: u64) -> Result<(), SourceError> {
        let _ = (at, addr);
        Err(SourceError::Failed("this page source stages nothing".into()))
    }

    /// Discards the staged page held at `at` and frees its place.
    fn drop_staged(&self, at: StageLoc) {
        let _ = at;
    }

    /// Copies the staged page held at `at` into `out` (4 KiB); false if the place is empty
    /// (the page is in the program, or was a hole). The page stays held.
    fn read_staged(&self, at: StageLoc, out: &mut [u8]) -> bool {
        let _ = (at, out);
        false
    }

    /// Were the pages accessed since the last call? `None` when the source cannot tell
    /// (userfaultfd has no access bits): reclaim then relies on fault history alone.
    fn test_and_clear_referenced(&self, addr: u64, len: u64) -> Option<bool> {
        let _ = (addr, len);
        None
    }
}
