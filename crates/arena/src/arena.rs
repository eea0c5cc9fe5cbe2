//! The allocator (the crate essay): the reservation, the size classes, the free lists,
//! and `GlobalAlloc`. A leaf module: raw memory, so `unsafe` is allowed here.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

/// The reservation: address space only (MAP_NORESERVE). 16 GiB covers the metadata of
/// terabytes of managed memory (about 10 MiB per GiB) plus a pool of many GiB.
pub const ARENA_BYTES: usize = 16 << 30;
/// The least reservation under an address-space limit.
pub const MIN_RESERVATION_BYTES: usize = 64 << 20;

/// The reservation made under an address-space limit (`RLIMIT_AS`, bytes; `None`: none):
/// [`ARENA_BYTES`], or a quarter of the limit if that is less, at least
/// [`MIN_RESERVATION_BYTES`], in whole 2 MiB. A limit of 4 GB (`ulimit -v 4000000`) refused
/// 16 GiB outright, and the shim's first allocation aborted the program. A quarter leaves
/// the program most of its limit; the managed memory, and so the engine's tables (about
/// 10 MiB per GiB), is bounded by the limit too (`uswap run` checks that the pool and the
/// tables fit before the program starts).
pub fn reservation_bytes(as_limit: Option<u64>) -> usize {
    let Some(limit) = as_limit else { return ARENA_BYTES };
    let quarter = usize::try_from(limit / 4).unwrap_or(ARENA_BYTES);
    quarter.clamp(MIN_RESERVATION_BYTES, ARENA_BYTES) / ALIGN_MAX * ALIGN_MAX
}

/// This process's soft `RLIMIT_AS`, if it has one (the bare system call: no libc state).
pub fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    let none: *const libc::rlimit64 = std::ptr::null();
    // SAFETY: `limit` is a live, writable rlimit64; the new limit is null (not set).
    let ret = unsafe { libc::syscall(libc::SYS_prlimit64, 0, libc::RLIMIT_AS, none, &mut limit) };
    (ret == 0 && limit.rlim_cur != libc::RLIM64_INFINITY).then_some(limit.rlim_cur)
}

/// [`Arena::base`] while the first allocation maps the reservation.
const RESERVING: usize = 1;
/// The bottom's blocks are made accessible this much at a time (the crate essay: the
/// reservation is mapped with no access until used).
const COMMIT_BYTES: usize = 2 << 20;
/// The smallest block.
const MIN_SHIFT: u32 = 4;
/// Classes below 64 bytes and up to it: 16, 32, 48, 64.
const SMALL_CLASSES: usize = 4;
/// Above 64 bytes, classes per doubling.
const STEPS: usize = 4;
/// log2 of the largest class (16 GiB, the reservation).
const MAX_SHIFT: u32 = 34;
/// Size classes: 16 .. 2^34 (module essay).
const CLASSES: usize = SMALL_CLASSES + (MAX_SHIFT as usize - 6) * STEPS;
/// Freed blocks at least this big give their pages back.
const RELEASE_BYTES: usize = 64 << 10;
const PAGE: usize = 4096;
/// Fresh blocks are aligned to their size up to this (one huge page), so a freed block of
/// a class serves any request of that class aligned up to it: zpool asks for 2 MiB chunks
/// aligned to 2 MiB (to back them with huge pages), and those must be reused, not bumped
/// anew each time (the reservation would run out).
const ALIGN_MAX: usize = 2 << 20;

/// Blocks of at least this many bytes are bumped from the reservation's top down, the
/// rest from its bottom up (the crate essay).
const TOP_BYTES: usize = ALIGN_MAX;
/// The unit of the two bump offsets packed into one word.
const UNIT: usize = 1 << MIN_SHIFT;

/// The allocator (module essay).
#[derive(Debug)]
pub struct Arena {
    /// The reservation's address; 0 until the first allocation maps it ([`RESERVING`]
    /// while it does).
    base: AtomicUsize,
    /// The reservation's length ([`reservation_bytes`]), set before `base`.
    size: AtomicUsize,
    /// Offsets below this are accessible (read-write): the bottom's blocks, committed
    /// [`COMMIT_BYTES`] at a time.
    committed_bottom: AtomicUsize,
    /// Offsets from this up are accessible: the top's blocks, committed as they come.
    committed_top: AtomicUsize,
    /// Serialises commits (an `mprotect` each).
    commit_lock: Mutex<()>,
    /// The two bump offsets in units of [`UNIT`], changed together: the low half is where
    /// the bottom's blocks end, the high half where the top's begin (see [`Bumps`]).
    bumps: AtomicU64,
    /// Free list heads per class (0: empty).
    free: [Mutex<FreeList>; CLASSES],
}

/// One class's free list: its first block (0: empty; a block's first word links to the
/// next) and how many blocks it holds (counted under the list's lock, not in a shared
/// atomic every allocation and free would bounce between CPUs).
#[derive(Debug)]
struct FreeList {
    head: usize,
    blocks: usize,
}

/// What the arena holds (for the shim's statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes of the reservation handed out so far (its high-water mark: blocks are reused,
    /// never returned to the reservation).
    pub bumped_bytes: usize,
    /// Bytes of the blocks on the free lists (blocks of 64 KiB and more keep only their
    /// first page resident).
    pub free_bytes: usize,
}

impl Arena {
    /// An empty arena (usable as a `static`).
    pub const fn new() -> Arena {
        Arena {
            base: AtomicUsize::new(0),
            size: AtomicUsize::new(0),
            committed_bottom: AtomicUsize::new(0),
            committed_top: AtomicUsize::new(usize::MAX),
            commit_lock: Mutex::new(()),
            bumps: AtomicU64::new(Bumps { bottom: 0, top: ARENA_BYTES }.pack()),
            free: [const { Mutex::new(FreeList { head: 0, blocks: 0 }) }; CLASSES],
        }
    }

    /// Its sizes now: blocks in use are `bumped_bytes - free_bytes`.
    ///
    /// Context: takes each class's lock in turn (a diagnostic, not for a hot path).
    pub fn stats(&self) -> ArenaStats {
        let size = self.size.load(SeqCst);
        ArenaStats {
            bumped_bytes: if size == 0 {
                0
            } else {
                Bumps::unpack(self.bumps.load(SeqCst)).bumped(size)
            },
            free_bytes: (0..CLASSES).map(|c| lock(&self.free[c]).blocks * class_size(c)).sum(),
        }
    }

    /// Takes every lock of the arena on this thread, for a fork (the process's fork
    /// prepare handler, registered before any handler that allocates, so it runs after
    /// them): a lock another thread held at the fork would stay locked in the child for
    /// ever. [`Arena::unlock_after_fork`] releases them, in the parent and in the child.
    ///
    /// Context: allocates nothing; blocks while other threads allocate.
    pub fn lock_for_fork(&'static self) {
        // First use of the thread-local outside the locks: it may register a destructor.
        FORK_HELD.with(|_| ());
        FORK_HELD.with(|held| {
            let mut held = held.borrow_mut();
            for (slot, mutex) in held.iter_mut().zip(self.free.iter()) {
                *slot = Some(lock(mutex));
            }
        });
    }

    /// Releases what [`Arena::lock_for_fork`] took on this thread.
    pub fn unlock_after_fork(&self) {
        FORK_HELD.with(|held| held.borrow_mut().iter_mut().for_each(|slot| *slot = None));
    }

    /// The reservation `(start, end)`, if mapped.
    pub fn range(&self) -> Option<(usize, usize)> {
        let base = self.base.load(SeqCst);
        (base > RESERVING).then(|| (base, base + self.size.load(SeqCst)))
    }

    /// Maps the reservation if nobody has (sized to the address-space limit:
    /// [`reservation_bytes`]); the base, or 0 if mmap failed. One thread maps while the
    /// others wait (the first allocation of a process, on its first thread, in practice).
    fn base(&self) -> usize {
        loop {
            match self.base.load(SeqCst) {
                0 => {}
                RESERVING => {
                    // SAFETY: sched_yield has no arguments.
                    unsafe { libc::syscall(libc::SYS_sched_yield) };
                    continue;
                }
                base => return base,
            }
            if self.base.compare_exchange(0, RESERVING, SeqCst, SeqCst).is_err() {
                continue;
            }
            let size = reservation_bytes(address_space_limit());
            let mapped = reserve(size);
            if mapped == 0 {
                self.base.store(0, SeqCst);
                return 0;
            }
            self.size.store(size, SeqCst);
            self.committed_top.store(size, SeqCst);
            self.bumps.store(Bumps { bottom: 0, top: size }.pack(), SeqCst);
            self.base.store(mapped, SeqCst);
            return mapped;
        }
    }

    /// Bump-allocates `size` bytes aligned to `align` (at most [`ALIGN_MAX`]), from the top
    /// if `size` is [`TOP_BYTES`] or more, else from the bottom; 0 when the two would meet.
    fn bump(&self, size: usize, align: usize) -> usize {
        let base = self.base();
        if base == 0 {
            return 0;
        }
        let mut packed = self.bumps.load(SeqCst);
        loop {
            let Bumps { bottom, top } = Bumps::unpack(packed);
            let placed = if size >= TOP_BYTES {
                ((base + top).checked_sub(size).map(|at| at / align * align))
                    .and_then(|start| start.checked_sub(base))
                    .filter(|&start| start >= bottom)
                    .map(|start| (start, Bumps { bottom, top: start }))
            } else {
                let start = (base + bottom).next_multiple_of(align) - base;
                (start.checked_add(size).filter(|&end| end <= top))
                    .map(|end| (start, Bumps { bottom: end, top }))
            };
            let Some((start, bumped)) = placed else { return 0 };
            match self.bumps.compare_exchange(packed, bumped.pack(), SeqCst, SeqCst) {
                Ok(_) if self.commit(base, start, start + size, size >= TOP_BYTES) => {
                    return base + start;
                }
                Ok(_) => return 0, // address space bumped past, never handed out
                Err(now) => packed = now,
            }
        }
    }

    /// Makes the block at offsets `[start, end)` accessible (a `top` block, or one of the
    /// bottom's), if it is not yet: the bottom grows by [`COMMIT_BYTES`], the top by what
    /// its block needs. False if `mprotect` failed (the allocation fails).
    fn commit(&self, base: usize, start: usize, end: usize, top: bool) -> bool {
        let done = if top {
            start >= self.committed_top.load(SeqCst)
        } else {
            end <= self.committed_bottom.load(SeqCst)
        };
        if done {
            return true;
        }
        let _serial = self.commit_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (bottom, top_from) =
            (self.committed_bottom.load(SeqCst), self.committed_top.load(SeqCst));
        let (from, to) = if top {
            (start / PAGE * PAGE, top_from)
        } else {
            (bottom, end.next_multiple_of(COMMIT_BYTES).min(self.size.load(SeqCst)))
        };
        if from >= to {
            return true; // committed meanwhile
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: `[from, to)` lies in our reservation and holds no block handed out yet
        // (the bumps are past it only for the block being committed).
        let ret = unsafe { libc::syscall(libc::SYS_mprotect, base + from, to - from, prot) };
        if ret != 0 {
            return false;
        }
        if top {
            self.committed_top.store(from, SeqCst);
        } else {
            self.committed_bottom.store(to, SeqCst);
        }
        true
    }

    fn pop(&self, class: usize) -> usize {
        let mut list = lock(&self.free[class]);
        let block = list.head;
        if block != 0 {
            // SAFETY: a block on a free list is ours, at least 16 bytes, and its first word
            // was written by `push` under this lock.
            list.head = unsafe { *(block as *const usize) };
            list.blocks -= 1;
        }
        block
    }

    fn push(&self, class: usize, block: usize) {
        let mut list = lock(&self.free[class]);
        // SAFETY: the block was handed out for this class (at least 16 bytes, aligned) and
        // is given back by its owner: nobody else uses it.
        unsafe { *(block as *mut usize) = list.head };
        list.head = block;
        list.blocks += 1;
    }
}

/// Where the bottom's blocks end and the top's begin, as offsets in the reservation:
/// `bottom <= top`, both multiples of [`UNIT`] (block sizes and alignments are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bumps {
    bottom: usize,
    top: usize,
}

impl Bumps {
    const fn pack(self) -> u64 {
        ((self.top / UNIT) as u64) << 32 | (self.bottom / UNIT) as u64
    }

    fn unpack(packed: u64) -> Bumps {
        let units = |half: u64| (half & u64::from(u32::MAX)) as usize * UNIT;
        Bumps { bottom: units(packed), top: units(packed >> 32) }
    }

    /// Bytes handed out from both ends (with the alignment gaps) of a reservation of
    /// `size` bytes.
    fn bumped(self, size: usize) -> usize {
        self.bottom + (size - self.top)
    }
}

const _: () = assert!(ARENA_BYTES / UNIT <= u32::MAX as usize, "an offset fits in a half");

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

/// The class locks a fork in progress holds, one per class.
type HeldClasses = [Option<std::sync::MutexGuard<'static, FreeList>>; CLASSES];

thread_local! {
    /// The class locks a fork in progress on this thread holds (see `lock_for_fork`).
    static FORK_HELD: std::cell::RefCell<HeldClasses> =
        const { std::cell::RefCell::new([const { None }; CLASSES]) };
}

fn lock(mutex: &Mutex<FreeList>) -> std::sync::MutexGuard<'_, FreeList> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bytes of a block of class `class`.
fn class_size(class: usize) -> usize {
    if class < SMALL_CLASSES {
        return (class + 1) << MIN_SHIFT;
    }
    let shift = 6 + ((class - SMALL_CLASSES) / STEPS) as u32;
    let step = (class - SMALL_CLASSES) % STEPS + 1;
    (1 << shift) + step * (1 << (shift - 2))
}

/// The alignment every block of `class` has: the largest power of two dividing its size,
/// up to [`ALIGN_MAX`].
fn class_align(class: usize) -> usize {
    let size = class_size(class);
    (1 << size.trailing_zeros()).min(ALIGN_MAX)
}

/// The smallest class of at least `size` bytes.
fn class_at_least(size: usize) -> usize {
    if size <= SMALL_CLASSES << MIN_SHIFT {
        return size.max(1).div_ceil(1 << MIN_SHIFT) - 1;
    }
    let shift = usize::BITS - 1 - (size - 1).leading_zeros(); // 2^shift < size <= 2^(shift+1)
    let step = (size - (1 << shift)).div_ceil(1 << (shift - 2));
    SMALL_CLASSES + (shift as usize - 6) * STEPS + step - 1
}

/// The class of a layout (the smallest whose blocks are big enough and aligned enough)
/// and the alignment a fresh block of it gets.
fn class_of(layout: Layout) -> Option<(usize, usize)> {
    let size = layout.size().max(layout.align());
    if size > 1 << MAX_SHIFT {
        return None;
    }
    let mut class = class_at_least(size);
    while class_align(class) < layout.align().min(ALIGN_MAX) {
        class += 1; // at most STEPS - 1 times: the next power of two is aligned to itself
    }
    (class < CLASSES).then(|| (class, layout.align().max(class_align(class))))
}

/// Maps a reservation of `size` bytes, with no access until [`Arena::commit`] opens a part
/// of it (raw system calls: no libc state, no interposed symbol).
fn reserve(size: usize) -> usize {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses.
    let addr = unsafe {
        libc::syscall(libc::SYS_mmap, 0usize, size, libc::PROT_NONE, flags, -1i32, 0usize)
    };
    if addr < 0 {
        return 0;
    }
    let addr = addr as usize;
    name_mapping(addr, size, c"uswap-arena");
    addr
}

// SAFETY: blocks are disjoint parts of the reservation, each handed out once until freed;
// a block's size is its class's (at least `layout.size()`), its alignment at least
// `layout.align()` (fresh blocks are aligned to it; a reused block of the class was aligned
// to `class_align`, which `class_of` chose to cover `layout.align()` up to ALIGN_MAX, and
// larger alignments never reuse).
unsafe impl GlobalAlloc for Arena {
    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((class, align)) = class_of(layout) else { return std::ptr::null_mut() };
        if layout.align() <= class_align(class) {
            let block = self.pop(class);
            if block != 0 {
                return block as *mut u8;
            }
        }
        self.bump(class_size(class), align) as *mut u8
    }

    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((class, _)) = class_of(layout) else { return };
        let size = class_size(class);
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

/// Names an anonymous mapping (`[anon:NAME]` in /proc/self/maps); a kernel without
/// CONFIG_ANON_VMA_NAME says EINVAL, which is fine: the shim's exclusions hold the arena by
/// address too.
fn name_mapping(addr: usize, len: usize, name: &std::ffi::CStr) {
    const PR_SET_VMA: libc::c_int = 0x5356_4d41;
    const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
    // SAFETY: prctl reads the NUL-terminated name; the range is ours.
    unsafe { libc::prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, name.as_ptr()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under an address-space limit the reservation is a quarter of it, within its bounds,
    /// in whole 2 MiB (`ulimit -v 4000000`, 3.8 GiB: 976 MiB).
    #[test]
    fn the_reservation_fits_an_address_space_limit() {
        assert_eq!(reservation_bytes(None), ARENA_BYTES);
        assert_eq!(reservation_bytes(Some(4_000_000 << 10)), 976 << 20);
        assert_eq!(reservation_bytes(Some(100 << 20)), MIN_RESERVATION_BYTES);
        assert_eq!(reservation_bytes(Some(1 << 40)), ARENA_BYTES);
        assert_eq!(reservation_bytes(Some(u64::MAX)), ARENA_BYTES);
    }

    /// Bytes of `[start, end)` mapped read-write, by /proc/self/maps.
    fn writable_bytes(start: usize, end: usize) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("rw-p"))
            .filter_map(|l| l.split_whitespace().next()?.split_once('-'))
            .map(|(a, b)| {
                (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap())
            })
            .map(|(a, b)| b.min(end).saturating_sub(a.max(start)))
            .sum()
    }

    /// The reservation has no access until used, so `mlockall` (which makes every
    /// accessible page resident) takes only what is in use: 16.2 GiB resident once, for a
    /// program using 222 MB. The bottom opens 2 MiB at a time, the top as its blocks come.
    #[test]
    fn the_reservation_is_inaccessible_until_used() {
        let arena = Arena::new();
        let small = Layout::from_size_align(100, 8).unwrap();
        let chunk = Layout::from_size_align(4 << 20, 2 << 20).unwrap();
        // SAFETY: valid layouts; the blocks are written within their sizes, never freed
        // (address space only, dropped with the arena's test).
        let (a, b) = unsafe { (arena.alloc(small), arena.alloc(chunk)) };
        let (start, end) = arena.range().unwrap();
        // SAFETY: both blocks are ours and accessible for their whole sizes.
        unsafe {
            std::ptr::write_bytes(a, 1, 100);
            std::ptr::write_bytes(b, 2, 4 << 20);
        }
        let writable = writable_bytes(start, end);
        assert!(((6 << 20)..=(8 << 20)).contains(&writable), "{writable} bytes open");
        assert_eq!(end - start, ARENA_BYTES);
    }

    #[test]
    fn classes_grow_cover_their_requests_and_waste_at_most_a_fifth() {
        let mut last = 0;
        for class in 0..CLASSES {
            let size = class_size(class);
            assert!(size > last, "class {class} ({size}) not above the one before ({last})");
            assert_eq!(class_at_least(size), class, "the class of a block's own size");
            assert_eq!(class_at_least(last + 1), class, "the class just above the last");
            assert_eq!(size % class_align(class), 0);
            last = size;
        }
        assert_eq!(last, 1 << MAX_SHIFT, "the largest class is the reservation");
        assert_eq!(class_size(class_at_least(544)), 640, "an XArray node's block");
        for size in (65..100_000).step_by(7) {
            let block = class_size(class_at_least(size));
            assert!(block >= size && block * 4 < size * 5, "{size} bytes take a {block} block");
        }
    }

    #[test]
    fn a_layout_gets_a_block_big_and_aligned_enough() {
        for size in [1, 8, 16, 17, 48, 80, 100, 544, 640, 4096, 40960, 2 << 20] {
            for align in [1, 8, 16, 64, 128, 4096, 2 << 20, 4 << 20] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let (class, fresh_align) = class_of(layout).unwrap();
                assert!(class_size(class) >= size.max(align), "{size}/{align}");
                assert!(fresh_align >= align);
                if align <= ALIGN_MAX {
                    assert!(class_align(class) >= align, "{size}/{align}: reuse unaligned");
                }
            }
        }
        let too_big = Layout::from_size_align((1 << MAX_SHIFT) + 1, 8).unwrap();
        assert!(class_of(too_big).is_none());
    }

    /// Blocks of 2 MiB and more come from the top down, next to each other whatever was
    /// allocated between them (so the pool's chunks make one mapping, not one each), and
    /// the two ends never cross.
    #[test]
    fn large_blocks_line_up_from_the_top_and_the_ends_never_cross() {
        let arena = Arena::new();
        let chunk = Layout::from_size_align(2 << 20, 2 << 20).unwrap();
        let small = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: valid layouts; nothing is written; the arena is dropped unfreed (address
        // space only).
        let alloc = |layout| unsafe { arena.alloc(layout) } as usize;
        let chunks: Vec<usize> = (0..4).map(|_| (alloc(chunk), alloc(small)).0).collect();
        let (base, end) = arena.range().unwrap();
        assert!(chunks.iter().all(|&c| c % (2 << 20) == 0 && c >= base && c < end));
        for pair in chunks.windows(2) {
            assert_eq!(pair[0] - pair[1], 2 << 20, "chunks not adjacent: {chunks:x?}");
        }
        assert!(alloc(small) < chunks[3], "a small block above the large ones");
        // Fill the middle with huge blocks until the top meets the bottom.
        let gib = |n: usize| Layout::from_size_align(n << 30, 8).unwrap();
        assert_ne!(alloc(gib(8)), 0);
        assert_ne!(alloc(gib(4)), 0);
        assert_eq!(alloc(gib(4)), 0, "the top crossed the bottom");
        assert_ne!(alloc(gib(2)), 0, "room for 2 GiB left");
        let bumps = Bumps::unpack(arena.bumps.load(SeqCst));
        assert!(bumps.bottom <= bumps.top, "{bumps:?}");
        assert_eq!(alloc(gib(2)), 0, "the top crossed the bottom");
    }

    #[test]
    fn blocks_are_disjoint_aligned_and_reused_after_a_free() {
        let arena = Arena::new();
        let layouts: Vec<Layout> = [(544, 8), (96, 8), (640, 64), (40960, 8), (24, 8), (300, 256)]
            .iter()
            .map(|&(size, align)| Layout::from_size_align(size, align).unwrap())
            .collect();
        let mut held = Vec::new();
        for round in 0..50u8 {
            for layout in &layouts {
                // SAFETY: a valid layout; the block is written within its size, then freed
                // with the same layout.
                let ptr = unsafe { arena.alloc(*layout) };
                assert!(!ptr.is_null());
                assert_eq!(ptr as usize % layout.align(), 0, "{layout:?} misaligned");
                // SAFETY: the block is ours, `layout.size()` bytes.
                unsafe { std::ptr::write_bytes(ptr, round, layout.size()) };
                held.push((ptr, *layout, round));
            }
        }
        for &(ptr, layout, round) in &held {
            // SAFETY: still ours; nothing else wrote it if blocks are disjoint.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            assert!(bytes.iter().all(|&b| b == round), "{layout:?}: block overwritten");
        }
        let used = arena.stats().bumped_bytes;
        assert_eq!(arena.stats(), ArenaStats { bumped_bytes: used, free_bytes: 0 });
        for &(ptr, layout, _) in &held {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { arena.dealloc(ptr, layout) };
        }
        let freed: usize = held.iter().map(|(_, l, _)| class_size(class_of(*l).unwrap().0)).sum();
        assert_eq!(arena.stats().free_bytes, freed, "every freed block on a free list");
        for &(_, layout, _) in &held {
            // SAFETY: as above; freed again at once.
            let ptr = unsafe { arena.alloc(layout) };
            assert_eq!(ptr as usize % layout.align(), 0);
            // SAFETY: allocated just now with this layout.
            unsafe { arena.dealloc(ptr, layout) };
        }
        assert_eq!(arena.stats().bumped_bytes, used, "freed blocks are reused, not bumped");
        assert_eq!(arena.stats().free_bytes, freed);
    }
}
