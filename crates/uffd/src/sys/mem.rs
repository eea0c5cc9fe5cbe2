//! Raw memory-management syscalls and raw loads and stores.
//!
//! Managed memory is never read or written through Rust references: the kernel changes it
//! under us (a `UFFDIO_MOVE` takes a page away, `MADV_DONTNEED` zeroes it, another process
//! may share it). Every access goes through a volatile load or store, or an atomic, so the
//! compiler neither caches nor invents accesses, and a racing change is a value we read, not
//! undefined behaviour.

use super::{check, Errno};
use core::sync::atomic::AtomicU64;

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0)`. Safe: without
/// `MAP_FIXED` the kernel picks an address that overlaps nothing.
///
/// # Panics
/// If `extra` contains `MAP_FIXED` (use a reservation and [`mremap`] instead).
pub fn mmap_anonymous(len: usize, prot: i32, extra: i32) -> Result<usize, Errno> {
    assert_eq!(extra & libc::MAP_FIXED, 0, "mmap_anonymous never maps over existing memory");
    mmap_new(len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra, -1)
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)`: a file's first `len` bytes,
/// shared with every other process that maps them. Safe for the reason
/// [`mmap_anonymous`] is.
pub fn mmap_shared_file(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> Result<usize, Errno> {
    use std::os::fd::AsRawFd;
    mmap_new(len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd())
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)`: memory a
/// forked child shares with its parent. Safe for the reason [`mmap_anonymous`] is.
pub fn mmap_shared_anonymous(len: usize) -> Result<usize, Errno> {
    let flags = libc::MAP_SHARED | libc::MAP_ANONYMOUS;
    mmap_new(len, libc::PROT_READ | libc::PROT_WRITE, flags, -1)
}

/// `mmap(NULL, ...)` for the safe forms above: never `MAP_FIXED`. The system call itself,
/// not libc's `mmap`: in a process `uswap run` manages, that symbol is the shim's, which
/// makes the handler adopt what a program maps (crates/preload/src/interpose.rs), and the
/// engine's own memory must stay out of it.
fn mmap_new(len: usize, prot: i32, flags: i32, fd: i32) -> Result<usize, Errno> {
    debug_assert_eq!(flags & libc::MAP_FIXED, 0);
    let (prot, flags, fd) = (prot as libc::c_long, flags as libc::c_long, fd as libc::c_long);
    // SAFETY: no MAP_FIXED, so the new mapping replaces nothing; `fd` is -1 with
    // MAP_ANONYMOUS, else a descriptor the caller borrows for the call.
    let addr = unsafe { libc::syscall(libc::SYS_mmap, 0usize, len, prot, flags, fd, 0usize) };
    check(addr).map(|addr| addr as usize)
}

/// `munmap(addr, len)`.
///
/// # Safety
/// Nothing may use `[addr, addr + len)` afterwards; the caller owns that range.
pub unsafe fn munmap(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: the caller owns the range and gives it up.
    check(libc::c_long::from(unsafe { libc::munmap(addr as *mut _, len) })).map(drop)
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
/// Advice that discards (`MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`) makes the range read
/// as zeros: no live Rust reference may cover it.
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> Result<(), Errno> {
    // SAFETY: the caller guarantees the content change is allowed.
    check(libc::c_long::from(unsafe { libc::madvise(addr as *mut _, len, advice) })).map(drop)
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
/// Removing access makes later loads or stores there fault (SIGSEGV): the caller owns the
/// range and accesses it only through checked paths.
pub unsafe fn mprotect(addr: usize, len: usize, prot: i32) -> Result<(), Errno> {
    // SAFETY: the caller owns the range.
    check(libc::c_long::from(unsafe { libc::mprotect(addr as *mut _, len, prot) })).map(drop)
}

/// `mremap(old, old_len, new_len, flags, new_addr)`; returns the new address.
///
/// # Safety
/// The caller owns `[old, old + old_len)` and, with `MREMAP_FIXED`, `[new_addr, new_addr +
/// new_len)` (whatever is mapped there is unmapped); afterwards the old range is gone
/// (unless `MREMAP_DONTUNMAP`).
pub unsafe fn mremap(
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: i32,
    new_addr: usize,
) -> Result<usize, Errno> {
    // SAFETY: the caller owns both ranges. The system call itself, as in `mmap_new`.
    let addr = unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags as libc::c_long, new_addr)
    };
    check(addr).map(|addr| addr as usize)
}

/// A volatile byte load.
///
/// # Safety
/// `addr` is mapped and readable for the call (it may fault into userfaultfd and wait).
pub unsafe fn load_u8(addr: usize) -> u8 {
    // SAFETY: the caller's contract; volatile because the kernel changes this memory.
    unsafe { core::ptr::read_volatile(addr as *const u8) }
}

/// A volatile byte store.
///
/// # Safety
/// `addr` is mapped and writable, and no Rust reference covers it.
pub unsafe fn store_u8(addr: usize, value: u8) {
    // SAFETY: the caller's contract.
    unsafe { core::ptr::write_volatile(addr as *mut u8, value) }
}

/// A volatile, aligned 8-byte load.
///
/// # Safety
/// As [`load_u8`], and `addr` is 8-byte aligned.
pub unsafe fn load_u64(addr: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { core::ptr::read_volatile(addr as *const u64) }
}

/// A volatile, aligned 8-byte store.
///
/// # Safety
/// As [`store_u8`], and `addr` is 8-byte aligned.
pub unsafe fn store_u64(addr: usize, value: u64) {
    // SAFETY: the caller's contract.
    unsafe { core::ptr::write_volatile(addr as *mut u64, value) }
}

/// Copies `out.len()` bytes from `addr` with volatile 8-byte loads.
///
/// # Safety
/// `[addr, addr + out.len())` is mapped and readable; `addr` and `out.len()` are multiples
/// of 8.
pub unsafe fn load_bytes(addr: usize, out: &mut [u8]) {
    debug_assert!(addr.is_multiple_of(8) && out.len().is_multiple_of(8));
    for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
        // SAFETY: in bounds and aligned by the caller's contract.
        let word = unsafe { load_u64(addr + i * 8) };
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
}

/// Copies `data` to `addr` with volatile 8-byte stores.
///
/// # Safety
/// `[addr, addr + data.len())` is mapped and writable and covered by no Rust reference;
/// `addr` and `data.len()` are multiples of 8.
pub unsafe fn store_bytes(addr: usize, data: &[u8]) {
    debug_assert!(addr.is_multiple_of(8) && data.len().is_multiple_of(8));
    for (i, chunk) in data.chunks_exact(8).enumerate() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // SAFETY: in bounds and aligned by the caller's contract.
        unsafe { store_u64(addr + i * 8, u64::from_ne_bytes(word)) };
    }
}

/// An atomic view of the 8 bytes at `addr`.
///
/// # Safety
/// `addr` is 8-byte aligned and stays mapped and read-write for `'a`; every other access to
/// those bytes during `'a` is atomic or by the kernel.
pub unsafe fn atomic_u64<'a>(addr: usize) -> &'a AtomicU64 {
    // SAFETY: the caller's contract; AtomicU64 has the size and alignment of u64.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }
}

/// `munlock(addr, len)`. Safe: unlocking changes no content and no access right.
pub fn munlock(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: munlock only clears the range's lock state.
    check(libc::c_long::from(unsafe { libc::munlock(addr as *const _, len) })).map(drop)
}

/// `mincore(2)`: one byte per page of `[addr, addr + vec.len() pages)`, bit 0 set when the
/// page is resident. Safe: the kernel only reads page tables and writes `vec`; an unmapped
/// range is ENOMEM.
pub fn mincore(addr: usize, vec: &mut [u8]) -> Result<(), Errno> {
    let len = vec.len() * crate::PAGE_SIZE;
    // SAFETY: `vec` is live and writable for one byte per page of the range, which is what
    // mincore writes; `addr` is only looked up in the page tables.
    let ret = unsafe { libc::mincore(addr as *mut _, len, vec.as_mut_ptr()) };
    check(libc::c_long::from(ret)).map(drop)
}

/// [`mincore`] of the one page at `page` (page-aligned): whether a page is mapped there (a
/// poison marker reads false); ENOMEM where the address is not mapped at all.
/// Async-signal-safe.
pub fn resident(page: usize) -> Result<bool, Errno> {
    let mut vec = [0u8; 1];
    mincore(page, &mut vec).map(|()| vec[0] & 1 != 0)
}

/// `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the C library and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(0)
}
