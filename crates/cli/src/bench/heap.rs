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
