//! The shim's allocator: every Rust allocation of the shim (the engine's page tables, the
//! pool's pages, folio buffers, std's own) comes from one private mapping, never from
//! glibc's `malloc`.
//!
//! Why: the program's heap is managed memory. A handler thread that called `malloc` could
//! touch an evicted page of it (a free chunk's header) and fault on memory only it can
//! bring back, or wait for an arena lock held by a program thread that is itself waiting
//! for the handler to serve a fault: either way the process hangs. So the engine's threads
//! allocate here, and the shim keeps this mapping out of the managed set (it is named
//! `[anon:uswap-arena]` in /proc/self/maps where the kernel supports names, and recorded
//! as the engine's in any case).
//!
//! ```text
//!   one reservation of ARENA_BYTES, MAP_NORESERVE (untouched pages cost nothing)
//!   +--------------------------------------------+---------------------------------+
//!   | blocks handed out, bump-allocated           |      never touched              |
//!   +--------------------------------------------+---------------------------------+
//!   ^ base                                       ^ base + next
//!   free lists: one per power-of-two size class (16 B .. ARENA_BYTES), a freed block's
//!   first word links to the next; blocks of 64 KiB and more give their pages after the
//!   first back to the kernel when freed (MADV_DONTNEED: this mapping is not registered,
//!   so no event is sent).
//! ```
//!
//! Bounds: the reservation; an allocation past it fails (Rust aborts with an allocation
//! error, loudly). Locks: one mutex per size class (std's futex mutex, which never
//! allocates), held for a pointer swap. Blocks are never split or merged: a block of class
//! k serves only class k (engine allocations are mostly few sizes repeated: nodes, folio
//! buffers, pool pages).

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

/// The reservation: address space only (MAP_NORESERVE). 16 GiB covers the metadata of
/// terabytes of managed memory (about 10 MiB per GiB) plus a pool of many GiB.
pub const ARENA_BYTES: usize = 16 << 30;
/// The smallest block.
const MIN_SHIFT: u32 = 4;
/// Size classes: 2^4 .. 2^34.
const CLASSES: usize = 31;
/// Freed blocks at least this big give their pages back.
const RELEASE_BYTES: usize = 64 << 10;
const PAGE: usize = 4096;
/// Fresh blocks are aligned to their size up to this (one huge page), so a freed block of
/// a class serves any request of that class aligned up to it: zpool asks for 2 MiB chunks
/// aligned to 2 MiB (to back them with huge pages), and those must be reused, not bumped
/// anew each time (the reservation would run out).
const ALIGN_MAX: usize = 2 << 20;

/// The allocator (module essay).
#[derive(Debug)]
pub struct Arena {
    /// The reservation's address; 0 until the first allocation maps it.
    base: AtomicUsize,
    /// Bytes bump-allocated so far.
    next: AtomicUsize,
    /// Free list heads per class (0: empty).
    free: [Mutex<usize>; CLASSES],
}

impl Arena {
    /// An empty arena (usable as a `static`).
    pub const fn new() -> Arena {
        Arena {
            base: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            free: [const { Mutex::new(0) }; CLASSES],
        }
    }

    /// The reservation `(start, end)`, if mapped.
    pub fn range(&self) -> Option<(usize, usize)> {
        let base = self.base.load(SeqCst);
        (base != 0).then_some((base, base + ARENA_BYTES))
    }

    /// Maps the reservation if nobody has; the base, or 0 if mmap failed.
    fn base(&self) -> usize {
        let base = self.base.load(SeqCst);
        if base != 0 {
            return base;
        }
        let mapped = reserve();
        if mapped == 0 {
            return 0;
        }
        match self.base.compare_exchange(0, mapped, SeqCst, SeqCst) {
            Ok(_) => mapped,
            Err(winner) => {
                // SAFETY: `mapped` is our own fresh reservation, never handed out.
                unsafe { libc::syscall(libc::SYS_munmap, mapped, ARENA_BYTES) };
                winner
            }
        }
    }

    /// Bump-allocates `size` bytes aligned to `align`; 0 when the reservation is spent.
    fn bump(&self, size: usize, align: usize) -> usize {
        let base = self.base();
        if base == 0 {
            return 0;
        }
        let mut next = self.next.load(SeqCst);
        loop {
            let start = (base + next).next_multiple_of(align) - base;
            let Some(end) = start.checked_add(size).filter(|&end| end <= ARENA_BYTES) else {
                return 0;
            };
            match self.next.compare_exchange(next, end, SeqCst, SeqCst) {
                Ok(_) => return base + start,
                Err(now) => next = now,
            }
        }
    }

    fn pop(&self, class: usize) -> usize {
        let mut head = lock(&self.free[class]);
        let block = *head;
        if block != 0 {
            // SAFETY: a block on a free list is ours, at least 16 bytes, and its first word
            // was written by `push` under this lock.
            *head = unsafe { *(block as *const usize) };
        }
        block
    }

    fn push(&self, class: usize, block: usize) {
        let mut head = lock(&self.free[class]);
        // SAFETY: the block was handed out for this class (at least 16 bytes, aligned) and
        // is given back by its owner: nobody else uses it.
        unsafe { *(block as *mut usize) = *head };
        *head = block;
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

fn lock(mutex: &Mutex<usize>) -> std::sync::MutexGuard<'_, usize> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The class of a layout and the alignment a fresh block of it gets.
fn class_of(layout: Layout) -> Option<(usize, usize)> {
    let size = layout.size().max(layout.align()).max(1 << MIN_SHIFT).checked_next_power_of_two()?;
    let class = (size.trailing_zeros() - MIN_SHIFT) as usize;
    (class < CLASSES).then_some((class, layout.align().max(size.min(ALIGN_MAX))))
}

/// Maps the reservation (raw system calls: no libc state, no interposed symbol).
fn reserve() -> usize {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses.
    let addr = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            ARENA_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1i32,
            0usize,
        )
    };
    if addr < 0 {
        return 0;
    }
    let addr = addr as usize;
    crate::maps::name_mapping(addr, ARENA_BYTES, c"uswap-arena");
    addr
}

// SAFETY: blocks are disjoint parts of the reservation, each handed out once until freed;
// a block's size is its class's (at least `layout.size()`), its alignment at least
// `layout.align()` (fresh blocks are aligned to it; a reused block of the class was aligned
// to min(class size, ALIGN_MAX), which covers every alignment up to that, and larger
// alignments never reuse).
unsafe impl GlobalAlloc for Arena {
    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((class, align)) = class_of(layout) else { return std::ptr::null_mut() };
        if layout.align() <= (1usize << (class as u32 + MIN_SHIFT)).min(ALIGN_MAX) {
            let block = self.pop(class);
            if block != 0 {
                return block as *mut u8;
            }
        }
        self.bump(1 << (class as u32 + MIN_SHIFT), align) as *mut u8
    }

    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((class, _)) = class_of(layout) else { return };
        let size = 1usize << (class as u32 + MIN_SHIFT);
        if size >= RELEASE_BYTES {
            // SAFETY: the block's pages after the first are its own and unused now; the
            // first keeps the free-list link. The arena is never registered: no event.
            unsafe {
                libc::syscall(
                    libc::SYS_madvise,
                    ptr as usize + PAGE,
                    size - PAGE,
                    libc::MADV_DONTNEED,
                )
            };
        }
        self.push(class, ptr as usize);
    }

    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        if class_of(layout).map(|c| c.0) == class_of(new_layout).map(|c| c.0) {
            return ptr;
        }
        // SAFETY: as GlobalAlloc::alloc, with the caller's layout rules.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            // SAFETY: `ptr` was allocated with `layout` and is not used after this.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}
