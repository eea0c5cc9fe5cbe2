//! The in-memory page source's page frames: one contiguous, 2 MiB-aligned allocation that
//! the kernel may back with huge pages, a 4 KiB frame per simulated page.
//!
//! Why not a `Box` per page: a page-in writes its page with one copy, and where the
//! destination lies decides that copy's cost. The kernel writes a swapped-in page through
//! its direct map (1 GiB or 2 MiB entries), and `UFFDIO_COPY` does the same in the kernel;
//! neither takes a TLB miss per page. A heap box per page did: 4 KiB boxes are neither
//! page aligned (each frame straddled two pages) nor huge-mapped, so every cold copy paid a
//! page walk, a two-dimensional one in a virtual machine (`bench/probes/copy.c` measures a
//! 4 KiB copy between sequential and between scattered frames: the scattered one costs
//! about twice as much). `uswap bench engine` measures the engine, so its simulated
//! memory is laid out as a process's memory is seen by the kernel (docs/benchmarks.md has
//! the probe's output, and the before and after).
//!
//! Memory: the frames are a private anonymous mapping of their own, advised for huge pages
//! before anything touches it, so the kernel zeroes them lazily and frames never written
//! cost nothing; a written frame stays resident while its page is out, as the boxes did.
//! With huge pages a touched frame may bring its whole 2 MiB in. Not the global allocator:
//! std zeroes an allocation aligned beyond malloc's by writing it, which made every frame
//! resident at once, in base pages, before the advice could apply (128 MiB of frames: 133 MB
//! resident as soon as they were made, 0 kB of it in huge pages; the test
//! `frames_cost_no_memory_until_written`). The
//! in-memory source serves tests, benchmarks and the simulator, never a managed program,
//! so a mapping of its own hides nothing from a shim.
//!
//! Access: a lock per page table's worth of frames ([`TABLE_PAGES`], 512: 2 MiB), kept here
//! beside the frames, with those pages' states under it, as the kernel's split page-table
//! lock covers the 512 entries of one page table. [`Frames::lock`] (one page) and
//! [`Frames::lock_span`] (a folio) hand out the guards and the frames together, so a frame
//! is only ever reached while its table's lock is held. That pairing is the one unsafe
//! argument.
//!
//! Why a table's lock and not a page's: the kernel maps a large folio's pages under one
//! lock (`set_ptes` under the PTL), and so does this source. With a lock per page, mapping
//! a 64 KiB folio took 16 locks and released 16: 20 ns of each page's page-in, against
//! 8-11 with one lock (a phase timing of the benchmark's faults, docs/benchmarks.md,
//! "One copy for a folio's raw pages"); the simulated memory, not the engine, charged
//! large folios for being large.

#![allow(unsafe_code)]

use crate::sync::{Mutex, MutexGuard};
use crate::PAGE_SIZE;
use smallvec::SmallVec;
use std::ptr::NonNull;

/// Alignment of the allocation: one x86-64 huge page.
const HUGE_BYTES: usize = 2 << 20;

/// Pages under one lock: a page table's worth, 2 MiB.
pub(crate) const TABLE_PAGES: usize = 512;

/// Page frames, zeroed at first, each with a `T` (the page's state), under a lock per
/// [`TABLE_PAGES`] frames.
pub(crate) struct Frames<T> {
    base: NonNull<u8>,
    len: usize,
    tables: Box<[Mutex<Box<[T]>>]>,
}

// SAFETY: the frames are plain memory owned by this value, and frame `i` is reached only
// through a guard of table `i / TABLE_PAGES`'s lock, held for as long as the reference
// lives: sharing the value is as safe as sharing a `[Mutex<[(T, [u8; 4096]); 512]>]`.
unsafe impl<T: Send> Send for Frames<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Frames<T> {}

impl<T> std::fmt::Debug for Frames<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Frames({} at {:p})", self.len, self.base)
    }
}

/// Bytes the frames of `nr` pages take: whole huge pages, at least one.
fn bytes_for(nr: usize) -> usize {
    let bytes = nr.max(1).checked_mul(PAGE_SIZE).expect("simulated memory size overflows");
    bytes.checked_next_multiple_of(HUGE_BYTES).expect("simulated memory size overflows")
}

/// Maps `bytes` (a multiple of [`HUGE_BYTES`]) of private anonymous memory at a
/// [`HUGE_BYTES`]-aligned address and advises it for huge pages before anything touches it:
/// every page reads as zeros, and none is resident until written.
///
/// # Panics
/// When the kernel refuses the mapping (as `Vec` would abort on a refused allocation).
fn map_frames(bytes: usize) -> NonNull<u8> {
    use rustix::mm::{MapFlags, ProtFlags};
    let reserve = bytes + HUGE_BYTES;
    let (prot, flags) =
        (ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE | MapFlags::NORESERVE);
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing
    // replaces nothing.
    let map = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), reserve, prot, flags) }
        .unwrap_or_else(|e| panic!("mapping {bytes} bytes of simulated memory: {e}"));
    let start = map as usize;
    let base = start.next_multiple_of(HUGE_BYTES);
    let (head, tail) = (base - start, reserve - (base - start) - bytes);
    // SAFETY: the slack before and after the aligned range is ours and unused; nothing
    // points into it.
    unsafe {
        if head > 0 {
            let _ = rustix::mm::munmap(map, head);
        }
        if tail > 0 {
            let _ = rustix::mm::munmap((base + bytes) as *mut _, tail);
        }
    }
    let (start, advice) = (base as *mut _, rustix::mm::Advice::LinuxHugepage);
    // SAFETY: the range is ours and mapped; the advice changes no contents. Refused (no
    // transparent huge pages in this kernel) is harmless: base pages then.
    let _no_thp_is_fine = unsafe { rustix::mm::madvise(start, bytes, advice) };
    NonNull::new(base as *mut u8).expect("mmap never returns null on success")
}

/// A locked frame: the page's state (through `Deref`) and its bytes ([`Locked::frame`]).
pub(crate) struct Locked<'a, T> {
    frame: &'a mut [u8; PAGE_SIZE],
    guard: MutexGuard<'a, Box<[T]>>,
    slot: usize,
}

impl<T> Locked<'_, T> {
    /// The frame's bytes.
    pub(crate) fn frame(&mut self) -> &mut [u8; PAGE_SIZE] {
        self.frame
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard[self.slot]
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard[self.slot]
    }
}

/// Consecutive frames, locked: the guards of every table they lie in, taken in address
/// order.
pub(crate) struct Span<'a, T> {
    frames: &'a mut [[u8; PAGE_SIZE]],
    guards: SmallVec<[MutexGuard<'a, Box<[T]>>; 1]>,
    /// Index, in its table, of the span's first page.
    skip: usize,
}

impl<'a, T> Span<'a, T> {
    /// How many frames.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// The frames' states, in address order, to change.
    pub(crate) fn states_mut(&mut self) -> impl Iterator<Item = &mut T> + use<'_, 'a, T> {
        states_in(&mut self.guards, self.skip, self.frames.len())
    }

    /// The frames' bytes, one after the other (frames are contiguous memory).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.frames.as_flattened_mut()
    }

    /// Each frame's state and bytes, in address order.
    pub(crate) fn pages(
        &mut self,
    ) -> impl Iterator<Item = (&mut T, &mut [u8; PAGE_SIZE])> + use<'_, 'a, T> {
        let states = states_in(&mut self.guards, self.skip, self.frames.len());
        states.zip(self.frames.iter_mut())
    }
}

/// The states of `len` pages from index `skip` of the first of `tables`, in order.
fn states_in<'g, 'l, T>(
    tables: &'g mut [MutexGuard<'l, Box<[T]>>],
    mut skip: usize,
    mut left: usize,
) -> impl Iterator<Item = &'g mut T> + use<'g, 'l, T> {
    tables.iter_mut().flat_map(move |table| {
        let end = table.len().min(skip + left);
        let part = &mut table[skip..end];
        (skip, left) = (0, left - part.len());
        part
    })
}

impl<T> Frames<T> {
    /// `nr` zeroed frames, frame `i`'s state `init(i)`.
    ///
    /// # Panics
    /// When the kernel refuses the memory (as `Vec` would abort).
    pub(crate) fn new(nr: usize, mut init: impl FnMut(usize) -> T) -> Self {
        let base = map_frames(bytes_for(nr));
        let tables = (0..nr.div_ceil(TABLE_PAGES))
            .map(|t| {
                let pages = t * TABLE_PAGES..nr.min((t + 1) * TABLE_PAGES);
                Mutex::new(pages.map(&mut init).collect())
            })
            .collect();
        Frames { base, len: nr, tables }
    }

    /// How many frames.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Locks frame `index` (its table).
    ///
    /// # Panics
    /// If `index` is out of range.
    pub(crate) fn lock(&self, index: usize) -> Locked<'_, T> {
        assert!(index < self.len, "frame {index} of {}", self.len);
        let guard = self.tables[index / TABLE_PAGES].lock();
        // SAFETY: in bounds (checked above), page aligned (the base is 2 MiB aligned),
        // valid until `self` is dropped (the borrow outlives the reference); exclusive: the
        // lock of the frame's table is held by `guard`, which lives beside the reference in
        // `Locked`, and frames are reached only here and in `lock_span`, under that lock.
        let frame = unsafe { &mut *self.base.as_ptr().add(index * PAGE_SIZE).cast() };
        Locked { frame, guard, slot: index % TABLE_PAGES }
    }

    /// Locks frames `[first, first + nr)` (their tables, in address order: every caller
    /// locks in that order, and holds no other frame's lock while it does).
    ///
    /// # Panics
    /// If the range is empty or out of range.
    pub(crate) fn lock_span(&self, first: usize, nr: usize) -> Span<'_, T> {
        assert!(nr > 0 && first + nr <= self.len, "frames {first}+{nr} of {}", self.len);
        let tables = first / TABLE_PAGES..=(first + nr - 1) / TABLE_PAGES;
        let guards = tables.map(|t| self.tables[t].lock()).collect();
        // SAFETY: as in `lock`, for every frame of the range: in bounds, aligned, valid for
        // the borrow, and exclusive while `guards`, held beside it in `Span`, hold the lock
        // of every table the range lies in.
        let frames = unsafe {
            let start = self.base.as_ptr().add(first * PAGE_SIZE).cast();
            std::slice::from_raw_parts_mut(start, nr)
        };
        Span { frames, guards, skip: first % TABLE_PAGES }
    }
}

impl<T> Drop for Frames<T> {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length, unmapped once; no frame reference
        // outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), bytes_for(self.len)) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_zeroed_aligned_and_distinct() {
        let frames = Frames::new(3, |i| i);
        for i in 0..3 {
            let mut locked = frames.lock(i);
            assert_eq!(*locked, i);
            assert!(locked.frame().iter().all(|&b| b == 0));
            assert_eq!(locked.frame().as_ptr() as usize % PAGE_SIZE, 0);
            locked.frame().fill(i as u8 + 1);
            *locked += 10;
        }
        let seen: Vec<(usize, u8)> = (0..3)
            .map(|i| {
                let mut locked = frames.lock(i);
                (*locked, locked.frame()[PAGE_SIZE - 1])
            })
            .collect();
        assert_eq!(seen, [(10, 1), (11, 2), (12, 3)]);
    }

    /// Resident pages of the frames, by `mincore`.
    fn resident(frames: &Frames<()>) -> usize {
        let bytes = bytes_for(frames.len());
        let mut vec = vec![0u8; bytes / PAGE_SIZE];
        // SAFETY: the range is the frames' mapping, `vec` has a byte per page of it.
        let rc = unsafe { libc::mincore(frames.base.as_ptr().cast(), bytes, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn frames_cost_no_memory_until_written() {
        // 16 MiB: built zeroed by the allocator, every page was resident before a single
        // write (std zeroes an over-aligned allocation by writing it), and written before
        // its huge-page advice, so none could be a huge page.
        let frames = Frames::new(4096, |_| ());
        assert_eq!(frames.base.as_ptr() as usize % HUGE_BYTES, 0, "huge-page aligned");
        assert_eq!(resident(&frames), 0, "nothing written, nothing resident");
        frames.lock(1000).frame()[7] = 1;
        let after = resident(&frames);
        // One page, or the huge page around it where the kernel gives one.
        assert!((1..=512).contains(&after), "{after} pages resident after one write");
        assert_eq!(frames.lock(1001).frame()[7], 0);
    }

    #[test]
    fn a_span_across_two_tables_reaches_each_page_once() {
        let nr = TABLE_PAGES + 20;
        let frames = Frames::new(nr, |i| i);
        let first = TABLE_PAGES - 5;
        {
            let mut span = frames.lock_span(first, 10);
            assert_eq!(span.len(), 10);
            assert_eq!(
                span.states_mut().map(|state| *state).collect::<Vec<_>>(),
                (first..first + 10).collect::<Vec<_>>()
            );
            for (i, (state, frame)) in span.pages().enumerate() {
                *state += 1000;
                frame[0] = i as u8 + 1;
            }
        }
        for i in 0..nr {
            let mut page = frames.lock(i);
            let inside = (first..first + 10).contains(&i);
            assert_eq!(*page, if inside { i + 1000 } else { i }, "state of page {i}");
            let byte = if inside { (i - first) as u8 + 1 } else { 0 };
            assert_eq!(page.frame()[0], byte, "frame of page {i}");
        }
    }
}
