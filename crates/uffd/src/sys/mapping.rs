//! [`Mapping`]: an owned private anonymous range (or shared pages, anonymous or a file's, for
//! memory two processes share), reached only through volatile and atomic
//! methods (the essay of `crate::mm` says why). It lives in `sys` because every method is
//! a raw access or syscall whose safety rests on one invariant, kept here: no Rust
//! reference ever covers a mapping's memory, and the range stays mapped until drop.

use crate::error::{Error, Op};
use crate::mm::{Advice, Prot};
use crate::sys::mem;
use crate::types::Range;
use crate::PAGE_SIZE;
use core::sync::atomic::{AtomicU32, AtomicU64};

/// An owned private anonymous mapping (see the module essay).
#[derive(Debug)]
pub struct Mapping {
    addr: usize,
    len_bytes: usize,
}

impl Mapping {
    /// A read-write private anonymous mapping of `len_bytes` (rounded up to pages).
    ///
    /// # Errors
    /// [`Error::Os`] from mmap (ENOMEM), [`Error::Misaligned`] for a zero length.
    pub fn anonymous(len_bytes: usize) -> Result<Mapping, Error> {
        Mapping::map(len_bytes, Prot::ReadWrite, 0)
    }

    /// Address space only: `PROT_NONE`, `MAP_NORESERVE` (commit parts with [`Mapping::commit`]).
    ///
    /// # Errors
    /// As [`Mapping::anonymous`].
    pub fn reserve(len_bytes: usize) -> Result<Mapping, Error> {
        Mapping::map(len_bytes, Prot::None, libc::MAP_NORESERVE)
    }

    /// The first `len_bytes` (rounded up to pages) of the file `fd`, read-write and shared
    /// with every process that maps them.
    ///
    /// # Errors
    /// As [`Mapping::anonymous`].
    pub fn shared_file(
        fd: std::os::fd::BorrowedFd<'_>,
        len_bytes: usize,
    ) -> Result<Mapping, Error> {
        Mapping::with(len_bytes, |len| mem::mmap_shared_file(fd, len))
    }

    /// A read-write anonymous mapping of `len_bytes` (rounded up to pages) that forked
    /// children share with this process (`MAP_SHARED`).
    ///
    /// # Errors
    /// As [`Mapping::anonymous`].
    pub fn shared_anonymous(len_bytes: usize) -> Result<Mapping, Error> {
        Mapping::with(len_bytes, mem::mmap_shared_anonymous)
    }

    fn map(len_bytes: usize, prot: Prot, extra: i32) -> Result<Mapping, Error> {
        Mapping::with(len_bytes, |len| mem::mmap_anonymous(len, prot.bits(), extra))
    }

    /// `len_bytes` rounded up to pages (not zero), mapped by `mmap`.
    fn with(
        len_bytes: usize,
        mmap: impl FnOnce(usize) -> Result<usize, crate::sys::Errno>,
    ) -> Result<Mapping, Error> {
        let len = round_up(len_bytes);
        if len == 0 {
            return Err(Error::Misaligned { addr: 0, len_bytes });
        }
        let addr = mmap(len).map_err(|e| Error::os(Op::Mmap, e))?;
        Ok(Mapping { addr, len_bytes: len })
    }

    /// First byte.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes (a page multiple).
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The whole mapping as a range.
    pub fn range(&self) -> Range {
        // A mapping is page-aligned and non-empty by construction.
        Range::new(self.addr, self.len_bytes).unwrap_or_else(|_| unreachable!("mapping {self:?}"))
    }

    /// The page-aligned sub-range `[offset, offset + len_bytes)`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], or [`Error::Misaligned`].
    pub fn sub(&self, offset: usize, len_bytes: usize) -> Result<Range, Error> {
        self.check(offset, len_bytes, PAGE_SIZE)?;
        Range::new(self.addr + offset, len_bytes)
    }

    /// The address of page `index`.
    ///
    /// # Panics
    /// If the page is outside the mapping.
    pub fn page_addr(&self, index: usize) -> usize {
        assert!(index < self.len_bytes / PAGE_SIZE, "page {index} outside {self:?}");
        self.addr + index * PAGE_SIZE
    }

    fn check(&self, offset: usize, len: usize, align: usize) -> Result<(), Error> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len_bytes);
        if !inside {
            return Err(Error::OutOfBounds { offset, len_bytes: len, size_bytes: self.len_bytes });
        }
        if !offset.is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(Error::Misaligned { addr: self.addr + offset, len_bytes: len });
        }
        Ok(())
    }

    /// Makes `[offset, offset + len_bytes)` read-write (the commit of a reservation).
    ///
    /// # Errors
    /// Bounds, alignment, or mprotect's errno.
    pub fn commit(&self, offset: usize, len_bytes: usize) -> Result<(), Error> {
        self.protect(offset, len_bytes, Prot::ReadWrite)
    }

    /// Changes the access rights of a page-aligned sub-range. A load or store through this
    /// mapping into a range without the right then kills the process with SIGSEGV.
    ///
    /// # Errors
    /// Bounds, alignment, or mprotect's errno.
    pub fn protect(&self, offset: usize, len_bytes: usize, prot: Prot) -> Result<(), Error> {
        self.check(offset, len_bytes, PAGE_SIZE)?;
        // SAFETY: the range is inside this mapping, which is only accessed through
        // bounds-checked volatile methods, so no Rust reference depends on its rights.
        unsafe { mem::mprotect(self.addr + offset, len_bytes, prot.bits()) }
            .map_err(|e| Error::os(Op::Mprotect, e))
    }

    /// madvise(2) on a page-aligned sub-range.
    ///
    /// # Errors
    /// Bounds, alignment, or madvise's errno (EINVAL for THP advice without THP).
    pub fn advise(&self, offset: usize, len_bytes: usize, advice: Advice) -> Result<(), Error> {
        self.check(offset, len_bytes, PAGE_SIZE)?;
        // SAFETY: the range is inside this mapping, whose memory no Rust reference covers
        // (module essay), so discarding its contents is allowed.
        unsafe { mem::madvise(self.addr + offset, len_bytes, advice.bits()) }
            .map_err(|e| Error::os(Op::Madvise, e))
    }

    /// Moves this mapping over `target`'s address range (mremap with `MREMAP_FIXED`); the
    /// target (a reservation of the same length) is consumed. Registered ranges follow the
    /// move with `EVENT_REMAP` (and the uffd reader must read it).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the lengths differ; mremap's errno (`target` is unmapped
    /// only on success).
    pub fn move_to(&mut self, target: Mapping) -> Result<(), Error> {
        if target.len_bytes != self.len_bytes {
            return Err(Error::OutOfBounds {
                offset: 0,
                len_bytes: self.len_bytes,
                size_bytes: target.len_bytes,
            });
        }
        let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
        let (from, len, to) = (self.addr, self.len_bytes, target.addr);
        // SAFETY: (1) we own `self`'s range, accessed only through its methods, which will
        // use the new address; (2) we own `target`'s range, which the kernel replaces.
        let addr = unsafe { mem::mremap(from, len, len, flags, to) }
            .map_err(|e| Error::os(Op::Mremap, e))?;
        debug_assert_eq!(addr, target.addr);
        // The target's range now holds our pages: it must not be unmapped by its drop.
        core::mem::forget(target);
        self.addr = addr;
        Ok(())
    }

    /// Grows or shrinks the mapping (mremap, may move); returns the new address.
    ///
    /// # Errors
    /// [`Error::Misaligned`] for zero; mremap's errno.
    pub fn resize(&mut self, new_len_bytes: usize) -> Result<usize, Error> {
        let len = round_up(new_len_bytes);
        if len == 0 {
            return Err(Error::Misaligned { addr: self.addr, len_bytes: new_len_bytes });
        }
        // SAFETY: we own the range and all access goes through `self`, which is updated.
        let addr = unsafe { mem::mremap(self.addr, self.len_bytes, len, libc::MREMAP_MAYMOVE, 0) }
            .map_err(|e| Error::os(Op::Mremap, e))?;
        self.addr = addr;
        self.len_bytes = len;
        Ok(addr)
    }

    /// A volatile byte load at `offset` (may fault into userfaultfd and wait).
    ///
    /// # Panics
    /// If `offset` is outside the mapping.
    pub fn load_u8(&self, offset: usize) -> u8 {
        assert!(offset < self.len_bytes, "load at {offset:#x} outside {self:?}");
        // SAFETY: in bounds of a live mapping no Rust reference covers.
        unsafe { mem::load_u8(self.addr + offset) }
    }

    /// A volatile byte store at `offset`.
    ///
    /// # Panics
    /// If `offset` is outside the mapping.
    pub fn store_u8(&self, offset: usize, value: u8) {
        assert!(offset < self.len_bytes, "store at {offset:#x} outside {self:?}");
        // SAFETY: in bounds of a live mapping no Rust reference covers.
        unsafe { mem::store_u8(self.addr + offset, value) }
    }

    /// A volatile aligned 8-byte load.
    ///
    /// # Panics
    /// If out of bounds or not 8-byte aligned.
    pub fn load_u64(&self, offset: usize) -> u64 {
        self.check(offset, 8, 8).unwrap_or_else(|e| panic!("load_u64: {e}"));
        // SAFETY: in bounds and aligned (checked) in a live mapping no Rust reference covers.
        unsafe { mem::load_u64(self.addr + offset) }
    }

    /// A volatile aligned 8-byte store.
    ///
    /// # Panics
    /// If out of bounds or not 8-byte aligned.
    pub fn store_u64(&self, offset: usize, value: u64) {
        self.check(offset, 8, 8).unwrap_or_else(|e| panic!("store_u64: {e}"));
        // SAFETY: in bounds and aligned (checked) in a live mapping no Rust reference covers.
        unsafe { mem::store_u64(self.addr + offset, value) }
    }

    /// Copies `out.len()` bytes from `offset` (volatile 8-byte loads).
    ///
    /// # Panics
    /// If out of bounds, or `offset` / `out.len()` are not multiples of 8.
    pub fn load(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len(), 8).unwrap_or_else(|e| panic!("load: {e}"));
        // SAFETY: checked in bounds and aligned, in a live mapping no Rust reference covers.
        unsafe { mem::load_bytes(self.addr + offset, out) }
    }

    /// Copies `data` to `offset` (volatile 8-byte stores).
    ///
    /// # Panics
    /// If out of bounds, or `offset` / `data.len()` are not multiples of 8.
    pub fn store(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len(), 8).unwrap_or_else(|e| panic!("store: {e}"));
        // SAFETY: checked in bounds and aligned, in a live mapping no Rust reference covers.
        unsafe { mem::store_bytes(self.addr + offset, data) }
    }

    /// Breaks copy-on-write sharing of the page holding `offset` (after a fork) without
    /// changing its data: see [`break_cow_raw`].
    ///
    /// # Panics
    /// If `offset` is outside the mapping.
    pub fn break_cow(&self, offset: usize) {
        assert!(offset < self.len_bytes, "break_cow at {offset:#x} outside {self:?}");
        // SAFETY: in bounds of a live mapping whose memory no Rust reference covers.
        unsafe { break_cow_raw(self.addr + offset) }
    }

    /// An atomic view of the 8 bytes at `offset`, borrowed from the mapping.
    ///
    /// # Panics
    /// If out of bounds or not 8-byte aligned.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8).unwrap_or_else(|e| panic!("atomic_u64: {e}"));
        // SAFETY: (1) in bounds and aligned; (2) the borrow of `self` keeps the mapping from
        // being unmapped or moved (those need `&mut self` or ownership); (3) every access to
        // mapping memory is volatile, atomic, or by the kernel.
        unsafe { mem::atomic_u64(self.addr + offset) }
    }

    /// An atomic view of the 4 bytes at `offset` (a futex word), borrowed from the mapping.
    ///
    /// # Panics
    /// If out of bounds or not 4-byte aligned.
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4).unwrap_or_else(|e| panic!("atomic_u32: {e}"));
        // SAFETY: as for `atomic_u64`; AtomicU32 has the size and alignment of u32.
        unsafe { AtomicU32::from_ptr((self.addr + offset) as *mut u32) }
    }
}

/// Unmaps the range. If it is registered with a uffd that has `EVENT_UNMAP`, munmap waits
/// until that uffd's reader reads the UNMAP event: drop a registered mapping only while its
/// handler is still reading (or unregister it first).
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the range and nothing borrows it any more (drop has `&mut self`).
        let result = unsafe { mem::munmap(self.addr, self.len_bytes) };
        debug_assert!(result.is_ok(), "munmap {self:?}: {result:?}");
    }
}

fn round_up(len: usize) -> usize {
    len.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// Makes the page at `addr` exclusive to this process again (after fork, a present page is
/// shared copy-on-write, and `UFFDIO_MOVE` refuses it with EBUSY) by writing its first word
/// with its own value: `lock cmpxchg` always performs the write, so the write fault breaks
/// the sharing, and a concurrent writer's store is never lost (either it lands first and
/// the exchange fails, or it lands after). A plain `fetch_add(0)` would not do: LLVM turns
/// an idempotent RMW into a fence and a load, which takes no write fault.
///
/// Context: may fault; if the page is missing in a registered range, the access waits for
/// the uffd handler, so never call this on the handler thread.
///
/// # Safety
/// The page is mapped writable and no Rust reference covers its first 8 bytes.
pub unsafe fn break_cow_raw(addr: usize) {
    let word = addr & !(PAGE_SIZE - 1);
    // SAFETY: the caller's contract; the first word of a page is 8-byte aligned.
    let atomic = unsafe { mem::atomic_u64(word) };
    let seen = atomic.load(core::sync::atomic::Ordering::SeqCst);
    let _ = atomic.compare_exchange(
        seen,
        seen,
        core::sync::atomic::Ordering::SeqCst,
        core::sync::atomic::Ordering::SeqCst,
    );
}

/// `MADV_POPULATE_WRITE` on any range: takes a write fault on every page without writing,
/// which allocates missing pages (through userfaultfd where registered: it waits like an
/// access) and breaks copy-on-write sharing, leaving every byte as it was. Safe because it
/// changes no content; an unmapped range is an error (ENOMEM), not a signal.
///
/// # Errors
/// madvise's errno.
pub fn populate_write(range: Range) -> Result<(), Error> {
    // SAFETY: MADV_POPULATE_WRITE discards nothing and changes no byte (see above), so no
    // Rust reference can observe it.
    unsafe { mem::madvise(range.start(), range.len_bytes(), libc::MADV_POPULATE_WRITE) }
        .map_err(|e| Error::os(Op::Madvise, e))
}

/// madvise(2) on any address range.
///
/// # Safety
/// With [`Advice::DontNeed`] the range reads as zero (or faults, if registered) afterwards:
/// no live Rust reference may cover it (a managed region's memory belongs to the program
/// being managed, which accepts this as its swap's behaviour).
///
/// # Errors
/// madvise's errno.
pub unsafe fn advise_raw(range: Range, advice: Advice) -> Result<(), Error> {
    // SAFETY: the caller's contract.
    unsafe { mem::madvise(range.start(), range.len_bytes(), advice.bits()) }
        .map_err(|e| Error::os(Op::Madvise, e))
}

/// `mprotect(PROT_NONE)` of a page of managed memory whose data could not be brought back
/// and that no uffd can poison (a forked child without a uffd of its own): its access is
/// then SIGSEGV, never a read of zeros.
///
/// # Errors
/// mprotect's errno.
pub fn protect_none(range: Range) -> Result<(), Error> {
    // SAFETY: taking access away changes no byte; a later access faults loudly, which is
    // the point (no Rust reference covers a managed page the engine is mapping).
    unsafe { mem::mprotect(range.start(), range.len_bytes(), libc::PROT_NONE) }
        .map_err(|e| Error::os(Op::Madvise, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_round_trips_and_checks_bounds() {
        let m = Mapping::anonymous(3 * PAGE_SIZE - 5).unwrap();
        assert_eq!(m.len_bytes(), 3 * PAGE_SIZE);
        m.store_u64(8, 0x1122_3344_5566_7788);
        assert_eq!(m.load_u64(8), 0x1122_3344_5566_7788);
        m.store(PAGE_SIZE, &[7u8; 64]);
        let mut out = [0u8; 64];
        m.load(PAGE_SIZE, &mut out);
        assert_eq!(out, [7u8; 64]);
        assert!(matches!(m.sub(2 * PAGE_SIZE, 2 * PAGE_SIZE), Err(Error::OutOfBounds { .. })));
        assert!(matches!(m.sub(1, PAGE_SIZE), Err(Error::Misaligned { .. })));
        m.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap();
        assert_eq!(m.load_u64(8), 0, "DONTNEED zeroes an anonymous page");
        assert_eq!(m.load_u8(PAGE_SIZE), 7, "other pages keep their data");
    }

    #[test]
    fn reserve_then_commit() {
        let m = Mapping::reserve(16 * PAGE_SIZE).unwrap();
        m.commit(4 * PAGE_SIZE, 2 * PAGE_SIZE).unwrap();
        m.store_u8(4 * PAGE_SIZE + 1, 9);
        assert_eq!(m.load_u8(4 * PAGE_SIZE + 1), 9);
    }

    #[test]
    fn move_to_and_resize_keep_data() {
        let mut m = Mapping::anonymous(2 * PAGE_SIZE).unwrap();
        m.store_u64(PAGE_SIZE, 42);
        let target = Mapping::reserve(2 * PAGE_SIZE).unwrap();
        let to = target.addr();
        m.move_to(target).unwrap();
        assert_eq!((m.addr(), m.load_u64(PAGE_SIZE)), (to, 42));
        m.resize(8 * PAGE_SIZE).unwrap();
        assert_eq!(m.load_u64(PAGE_SIZE), 42);
        m.store_u64(7 * PAGE_SIZE, 1);
        assert!(m.move_to(Mapping::reserve(PAGE_SIZE).unwrap()).is_err());
    }
}
