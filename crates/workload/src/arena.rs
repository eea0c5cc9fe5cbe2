//! The working set: one `calloc` allocation, touched a page at a time.
//!
//! The workload allocates the way an ordinary program does, through the C allocator, so
//! that it can later run unchanged under an `LD_PRELOAD` shim that takes over the heap.
//! glibc serves an allocation this large with its own `mmap` (above `M_MMAP_THRESHOLD`), so
//! the pages start out unpopulated and zero, and `calloc` skips the memset on fresh `mmap`
//! memory: no page is touched before the workload touches it.
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

/// `pages` zero-initialised pages from the C heap, freed on drop.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    pages: usize,
}

impl Arena {
    /// Allocates `pages` zero pages with `calloc`.
    ///
    /// # Errors
    /// [`WorkloadError::OutOfMemory`] when `calloc` fails or the size overflows.
    pub fn new(pages: usize) -> Result<Self, WorkloadError> {
        let oom = || WorkloadError::OutOfMemory { bytes: (pages as u64) * PAGE_SIZE as u64 };
        if pages == 0 || pages.checked_mul(PAGE_SIZE).is_none() {
            return Err(oom());
        }
        // SAFETY: calloc has no preconditions; a null result is handled below. The
        // count/size pair cannot overflow (checked above), and calloc checks it again.
        let raw = unsafe { libc::calloc(pages, PAGE_SIZE) }.cast::<u8>();
        let base = NonNull::new(raw).ok_or_else(oom)?;
        Ok(Arena { base, pages })
    }

    /// The number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    fn page_ptr(&self, page: usize) -> *mut u8 {
        assert!(page < self.pages, "page {page} outside the arena of {}", self.pages);
        // SAFETY: page < pages (asserted), so the offset stays inside the allocation of
        // pages * PAGE_SIZE bytes, which does not overflow isize (checked in new).
        unsafe { self.base.as_ptr().add(page * PAGE_SIZE) }
    }

    /// Reads the first word of `page` (the access that faults when the page is out).
    ///
    /// # Panics
    /// If `page` is outside the arena.
    #[inline]
    pub fn touch_read(&self, page: usize) -> u64 {
        let ptr = self.page_ptr(page).cast::<u64>();
        // SAFETY: ptr is inside the live allocation (page_ptr), aligned to 8 (calloc's
        // result is 16-aligned and pages are 4096 apart), and every byte pattern is a u64.
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
        // SAFETY: base came from calloc and is freed exactly once, here.
        unsafe { libc::free(self.base.as_ptr().cast()) }
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
