//! The working set: one `calloc` allocation, touched a page at a time.
//!
//! The workload allocates the way an ordinary program does, through the C allocator, so
//! that it can later run unchanged under an `LD_PRELOAD` shim that takes over the heap.
//! glibc serves an allocation this large with its own `mmap` (above `M_MMAP_THRESHOLD`), so
//! the pages start out unpopulated and zero, and `calloc` skips the memset on fresh `mmap`
//! memory: no page is touched before the workload touches it.
//!
//! `calloc` returns memory 16 bytes past a page boundary (glibc's chunk header sits at the
//! start of the mapping), so the arena asks for one page more and starts at the first page
//! boundary inside: a workload page is then exactly one page of the machine, and touching
//! it faults that page and no other.
//!
//! The two timed operations, [`Arena::touch_read`] and [`Arena::touch_write`], are
//! volatile accesses to the first word of a page, so the compiler can neither hoist them
//! out of the timing window nor merge them with the untimed verification that follows.
//!
//! This is the crate's only `unsafe` module: the allocation, the raw-pointer accesses, and
//! the `getrusage` call.

#![allow(unsafe_code)]

use crate::content::PAGE_SIZE;
use crate::WorkloadError;
use std::ptr::NonNull;

/// `pages` zero-initialised, page-aligned pages from the C heap, freed on drop.
#[derive(Debug)]
pub struct Arena {
    /// What calloc returned (freed on drop).
    raw: NonNull<u8>,
    /// The first page boundary at or after `raw`: page 0 of the arena.
    base: NonNull<u8>,
    pages: usize,
}

impl Arena {
    /// Allocates `pages` zero pages (plus one for alignment) with `calloc`.
    ///
    /// # Errors
    /// [`WorkloadError::OutOfMemory`] when `calloc` fails or the size overflows.
    pub fn new(pages: usize) -> Result<Self, WorkloadError> {
        let oom = || WorkloadError::OutOfMemory { bytes: (pages as u64) * PAGE_SIZE as u64 };
        let with_slack = pages.checked_add(1).ok_or_else(oom)?;
        if pages == 0 || with_slack.checked_mul(PAGE_SIZE).is_none_or(|b| b > isize::MAX as usize) {
            return Err(oom());
        }
        // SAFETY: calloc has no preconditions; a null result is handled below. The
        // count/size pair cannot overflow (checked above), and calloc checks it again.
        let raw = unsafe { libc::calloc(with_slack, PAGE_SIZE) }.cast::<u8>();
        let raw = NonNull::new(raw).ok_or_else(oom)?;
        let skip = raw.as_ptr().align_offset(PAGE_SIZE);
        assert!(skip < PAGE_SIZE, "align_offset of a byte pointer is always computable");
        // SAFETY: skip < PAGE_SIZE, and the allocation has PAGE_SIZE bytes more than the
        // pages * PAGE_SIZE the arena uses, so base and every page after it stay inside.
        let base = unsafe { raw.add(skip) };
        Ok(Arena { raw, base, pages })
    }

    /// The number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    fn page_ptr(&self, page: usize) -> *mut u8 {
        assert!(page < self.pages, "page {page} outside the arena of {}", self.pages);
        // SAFETY: page < pages (asserted), so the offset stays inside the pages * PAGE_SIZE
        // bytes from base, which are inside the allocation and below isize::MAX (new).
        unsafe { self.base.as_ptr().add(page * PAGE_SIZE) }
    }

    /// Reads the first word of `page` (the access that faults when the page is out).
    ///
    /// # Panics
    /// If `page` is outside the arena.
    #[inline]
    pub fn touch_read(&self, page: usize) -> u64 {
        let ptr = self.page_ptr(page).cast::<u64>();
        // SAFETY: ptr is inside the live allocation (page_ptr), aligned to a page (base is),
        // and every byte pattern is a valid u64.
        unsafe { ptr.read_volatile() }
    }

    /// Writes the first word of `page`.
    ///
    /// # Panics
    /// If `page` is outside the arena.
    #[inline]
    pub fn touch_write(&mut self, page: usize, word: u64) {
        let ptr = self.page_ptr(page).cast::<u64>();
        // SAFETY: as in touch_read; &mut self means no other reference to the arena lives.
        unsafe { ptr.write_volatile(word) }
    }

    /// The whole of `page`, for verification.
    ///
    /// # Panics
    /// If `page` is outside the arena.
    pub fn page(&self, page: usize) -> &[u8; PAGE_SIZE] {
        let ptr = self.page_ptr(page).cast::<[u8; PAGE_SIZE]>();
        // SAFETY: ptr points to PAGE_SIZE initialised (calloc) bytes inside the allocation;
        // the shared borrow of self keeps them alive and unwritten for the lifetime.
        unsafe { &*ptr }
    }

    /// The whole of `page`, to fill it.
    ///
    /// # Panics
    /// If `page` is outside the arena.
    pub fn page_mut(&mut self, page: usize) -> &mut [u8; PAGE_SIZE] {
        let ptr = self.page_ptr(page).cast::<[u8; PAGE_SIZE]>();
        // SAFETY: as in page; the exclusive borrow of self makes this the only reference.
        unsafe { &mut *ptr }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: raw came from calloc and is freed exactly once, here.
        unsafe { libc::free(self.raw.as_ptr().cast()) }
    }
}

/// Page-fault counts of this process so far (`getrusage(RUSAGE_SELF)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Faults that needed I/O or a swap-in (`ru_majflt`).
    pub major: u64,
    /// Faults served without I/O (`ru_minflt`).
    pub minor: u64,
}

/// This process's fault counts.
pub fn fault_counts() -> FaultCounts {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: usage is a valid, writable rusage; RUSAGE_SELF is always a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return FaultCounts::default();
    }
    FaultCounts { major: usage.ru_majflt as u64, minor: usage.ru_minflt as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_arena_is_zero_and_writable() {
        let mut arena = Arena::new(4).unwrap();
        assert_eq!(arena.pages(), 4);
        assert!(arena.page(3).iter().all(|&b| b == 0));
        arena.touch_write(2, 0x1234);
        assert_eq!(arena.touch_read(2), 0x1234);
        arena.page_mut(1)[4095] = 7;
        assert_eq!(arena.page(1)[4095], 7);
    }

    #[test]
    fn pages_are_machine_pages() {
        // postmortem: calloc returned memory 16 bytes past a page boundary, so each
        // workload page straddled two machine pages. Verifying page p read the first 16
        // bytes of machine page p+1, which took p+1's fault outside the timed touch: the
        // seq pattern showed no fault latency at all, and every pattern faulted twice as
        // often as it touched. Pages are now aligned.
        for pages in [1, 3, 1000] {
            let arena = Arena::new(pages).unwrap();
            for page in [0, pages - 1] {
                let address = arena.page(page).as_ptr() as usize;
                assert_eq!(address % PAGE_SIZE, 0, "page {page} of {pages} at {address:#x}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "outside the arena")]
    fn out_of_range_page_panics() {
        let arena = Arena::new(1).unwrap();
        arena.touch_read(1);
    }

    #[test]
    fn faults_are_counted() {
        let before = fault_counts();
        let mut arena = Arena::new(256).unwrap();
        for page in 0..256 {
            arena.touch_write(page, 1);
        }
        let after = fault_counts();
        assert!(after.minor > before.minor, "{before:?} -> {after:?}");
    }
}
