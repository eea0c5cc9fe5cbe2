//! What the system allocator (glibc malloc) really holds, for the benchmarks that compare
//! a structure's own accounting with a plain heap.
//!
//! - [`held_bytes`]: `mallinfo2().arena + hblkhd`, the bytes all malloc arenas and mmapped
//!   chunks hold from the kernel: live chunks, their headers, and free holes not yet given
//!   back. A delta of it around a workload, taken in a fresh thread (a fresh arena, so no
//!   older free space absorbs the workload), is what the workload costs in heap memory.
//! - [`chunk_bytes`]: the bytes one live allocation occupies: `malloc_usable_size` plus the
//!   8-byte chunk header.
//!
//! This is the one module of the `uswap` binary that calls C: both functions are glibc's.

#![allow(unsafe_code)]

/// Bytes held by every malloc arena plus mmapped chunks (glibc `mallinfo2`).
pub fn held_bytes() -> usize {
    // SAFETY: mallinfo2 takes no arguments, returns a plain struct by value and only reads
    // the allocator's own statistics under its locks; glibc >= 2.33 provides it.
    let info = unsafe { libc::mallinfo2() };
    info.arena + info.hblkhd
}

/// Bytes the chunk of a live heap allocation occupies (`malloc_usable_size` + header).
///
/// `bytes` must be the whole allocation of a `Vec<u8>` (its capacity equal to its length,
/// as `<[u8]>::to_vec` makes it), allocated by the global allocator, which is glibc's
/// malloc for byte buffers. An empty slice holds no allocation and costs 0.
pub fn chunk_bytes(bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        return 0;
    }
    // SAFETY: (1) the pointer is the start of a live allocation made by malloc (the global
    // System allocator uses malloc for byte-aligned requests), as the contract above says;
    // (2) the borrow keeps it alive for the call; (3) malloc_usable_size only reads the
    // chunk header.
    let usable = unsafe { libc::malloc_usable_size(bytes.as_ptr() as *mut libc::c_void) };
    usable + 8
}

/// Minor page faults this thread has taken so far (`getrusage(RUSAGE_THREAD)`): first
/// touches of fresh memory, each a trip through the kernel.
pub fn minor_faults() -> u64 {
    // SAFETY: (1) an all-zero `rusage` is a valid value of the plain C struct; (2)
    // getrusage writes only into the struct we pass, which lives for the call.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    usage.ru_minflt as u64
}

/// While alive, malloc keeps freed memory instead of trimming it back to the kernel
/// (`M_TRIM_THRESHOLD` raised), so memory a structure frees and allocates again is not
/// faulted in twice. Dropping it restores glibc's default threshold (128 KiB).
pub struct KeepFreedMemory(());

impl KeepFreedMemory {
    /// Raises the trim threshold.
    pub fn new() -> Self {
        set_trim_threshold(i32::MAX);
        KeepFreedMemory(())
    }
}

impl Drop for KeepFreedMemory {
    fn drop(&mut self) {
        set_trim_threshold(128 * 1024);
    }
}

fn set_trim_threshold(bytes: i32) {
    // SAFETY: mallopt takes two integers and changes only malloc's own tuning parameters,
    // under its locks; M_TRIM_THRESHOLD accepts any non-negative value.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, bytes);
    }
}

/// Bytes in an anonymous mapping advised for huge pages (`MADV_HUGEPAGE` before the first
/// touch), as zpool's page arena holds its pages: what a benchmark's reference side keeps
/// its data in, so both sides of a comparison pay the same TLB costs.
pub struct HugeBytes {
    /// The mapping's address (0 when empty) and its length.
    map: usize,
    map_len: usize,
    /// Where the bytes start (the first 2 MiB boundary in the mapping) and their length.
    start: usize,
    len: usize,
}

impl HugeBytes {
    /// A copy of `bytes`.
    ///
    /// # Errors
    /// When the kernel refuses the mapping.
    pub fn copy_of(bytes: &[u8]) -> anyhow::Result<Self> {
        let huge = zpool::CHUNK_BYTES;
        if bytes.is_empty() {
            return Ok(HugeBytes { map: 0, map_len: 0, start: 0, len: 0 });
        }
        // One huge page more than needed, so an aligned start fits inside.
        let aligned_len = bytes.len().next_multiple_of(huge);
        let map_len = aligned_len + huge;
        let flags = rustix::mm::MapFlags::PRIVATE;
        let prot = rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE;
        let null = std::ptr::null_mut();
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses; nothing else
        // refers to it.
        let map = unsafe { rustix::mm::mmap_anonymous(null, map_len, prot, flags)? };
        let start = (map as usize).next_multiple_of(huge);
        // SAFETY: the advised range lies inside the mapping just made; advice changes no
        // contents (a kernel without THP refuses, harmlessly).
        let advised = unsafe {
            rustix::mm::madvise(start as *mut _, aligned_len, rustix::mm::Advice::LinuxHugepage)
        };
        let _no_thp_is_fine = advised;
        // SAFETY: `start .. start + bytes.len()` lies inside the mapping (a huge page of
        // slack before the aligned start), is writable, and overlaps nothing of `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), start as *mut u8, bytes.len()) };
        Ok(HugeBytes { map: map as usize, map_len, start, len: bytes.len() })
    }
}

impl std::ops::Deref for HugeBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `start .. start + len` was initialized by `copy_of` and stays mapped
        // until drop; nothing writes it after.
        unsafe { std::slice::from_raw_parts(self.start as *const u8, self.len) }
    }
}

impl Drop for HugeBytes {
    fn drop(&mut self) {
        if self.map_len > 0 {
            // SAFETY: the whole mapping made by `copy_of`; no borrow of it outlives `self`.
            let unmapped = unsafe { rustix::mm::munmap(self.map as *mut _, self.map_len) };
            let _leaked_address_space_only = unmapped;
        }
    }
}
