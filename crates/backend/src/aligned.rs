//! A zeroed, page-aligned byte buffer: the bounce buffer `O_DIRECT` needs (the kernel
//! rejects unaligned user buffers with `EINVAL`). The only unsafe code of the crate.

#![allow(unsafe_code)]

use crate::PAGE_SIZE;
use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// `len` zeroed bytes starting at a [`PAGE_SIZE`]-aligned address.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like a Box<[u8]>); nothing is shared.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (`len > 0`).
    ///
    /// # Panics
    /// If `len` is zero or the layout overflows (a bug of the caller: requests are checked
    /// to be whole pages first).
    pub(crate) fn zeroed(len: usize) -> Self {
        assert!(len > 0, "AlignedBuf of zero bytes");
        let layout = match Layout::from_size_align(len, PAGE_SIZE) {
            Ok(layout) => layout,
            Err(_) => panic!("AlignedBuf layout overflow: {len} bytes"),
        };
        // SAFETY: the layout has a non-zero size (asserted above).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { handle_alloc_error(layout) };
        AlignedBuf { ptr, layout }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: (1) ptr points to layout.size() initialised (zeroed) bytes that we own;
        // (2) the borrow of self keeps them alive and unaliased by &mut.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was returned by alloc_zeroed with exactly this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut buf = AlignedBuf::zeroed(3 * PAGE_SIZE);
        assert_eq!(buf.as_ptr() as usize % PAGE_SIZE, 0);
        assert!(buf.iter().all(|&b| b == 0));
        buf[5] = 9;
        assert_eq!(buf[5], 9);
        assert_eq!(buf.len(), 3 * PAGE_SIZE);
    }
}
