//! zstd contexts whose every allocation comes from Rust's global allocator, never from the
//! C library's `malloc`.
//!
//! Why: libzstd allocates a context's workspace (hundreds of KiB at level 3), its copy of a
//! dictionary and the digested dictionary lazily, at the first compression that needs them,
//! on whichever thread compresses: with the default allocator that is `malloc`. Inside
//! `uswap run` the engine's threads must never call the program's `malloc` (the preload
//! crate's `arena` essay: it may touch an evicted heap page only the handler thread can
//! bring back, or wait for an arena lock a faulting program thread holds). Rust's global
//! allocator is the shim's own arena there, and the system allocator everywhere else.
//!
//! How: zstd's experimental API takes a [`ZSTD_customMem`] at creation
//! (`ZSTD_createCCtx_advanced`, `ZSTD_createDCtx_advanced`), and every later allocation of
//! that context goes through it: the context itself, its workspace (resized on a parameter
//! change), the dictionary copy `ZSTD_CCtx_loadDictionary` makes, the `ZSTD_CDict` and
//! `ZSTD_DDict` built from it, and the frees of all of these. libzstd is built without its
//! multithreading and legacy decoders (the workspace's `zstd` has default features off), the
//! only parts that call `malloc` on their own. Dictionary *training*
//! (`compress::train_dictionary`) uses `malloc` and is set-up work, never on an engine path.
//!
//! ```text
//!   zstd asks for n bytes ──► alloc(n + 16, align 16) from the global allocator
//!   +-----------+---------------------------------+
//!   | n + 16 u64|  the n bytes zstd gets           |      (free reads the size back)
//!   +-----------+---------------------------------+
//!   ^ block     ^ returned pointer (16-aligned: malloc's own guarantee on x86-64)
//! ```
//!
//! Every call is counted in a [`ZstdMemory`] shared by a compressor's contexts (each
//! context holds an `Arc` of it: the counters outlive the last context, so the `opaque`
//! pointer zstd passes back is always valid). Tests compare these counts with a `malloc`
//! that counts (crates/zswap/tests/zstd_malloc.rs).
//!
//! Context: the functions here allocate only through zstd's calls above; a context is used
//! by one thread at a time (`&mut self`) and may move between threads (`Send`).

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use zstd::zstd_safe::zstd_sys as sys;

/// Bytes in front of each block: its total size (16 keeps the caller's alignment).
const HEADER_BYTES: usize = 16;
/// Alignment of every block, and so of every pointer zstd gets.
const ALIGN_BYTES: usize = 16;

/// Counters of the allocations of a compressor's zstd contexts.
#[derive(Debug, Default)]
pub struct ZstdMemory {
    allocs: AtomicU64,
    frees: AtomicU64,
    alloc_failed: AtomicU64,
    live_bytes: AtomicU64,
}

/// A snapshot of [`ZstdMemory`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZstdMemoryStats {
    /// Blocks given to zstd.
    pub allocs: u64,
    /// Blocks zstd gave back.
    pub frees: u64,
    /// Requests the global allocator refused (zstd then fails the call that asked).
    pub alloc_failed: u64,
    /// Bytes held by zstd now, headers included.
    pub live_bytes: u64,
}

impl ZstdMemory {
    /// The counters now.
    pub fn stats(&self) -> ZstdMemoryStats {
        ZstdMemoryStats {
            allocs: self.allocs.load(Relaxed),
            frees: self.frees.load(Relaxed),
            alloc_failed: self.alloc_failed.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
        }
    }

    /// The allocator zstd calls, with `self` as its opaque pointer.
    fn custom_mem(self: &Arc<Self>) -> sys::ZSTD_customMem {
        sys::ZSTD_customMem {
            customAlloc: Some(zstd_alloc),
            customFree: Some(zstd_free),
            opaque: Arc::as_ptr(self).cast_mut().cast(),
        }
    }
}

/// `ZSTD_allocFunction`: `size` bytes from the global allocator (module essay).
///
/// # Safety
/// `opaque` is the `Arc<ZstdMemory>` pointer of [`ZstdMemory::custom_mem`], kept alive by
/// the context that calls.
unsafe extern "C" fn zstd_alloc(opaque: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the function's contract: a live ZstdMemory.
    let memory = unsafe { &*opaque.cast::<ZstdMemory>() };
    let layout = size
        .checked_add(HEADER_BYTES)
        .and_then(|total| Layout::from_size_align(total, ALIGN_BYTES).ok());
    let Some(layout) = layout else {
        memory.alloc_failed.fetch_add(1, Relaxed);
        return std::ptr::null_mut();
    };
    // SAFETY: the layout's size is at least HEADER_BYTES, never zero.
    let block = unsafe { std::alloc::alloc(layout) };
    if block.is_null() {
        memory.alloc_failed.fetch_add(1, Relaxed);
        return std::ptr::null_mut();
    }
    // SAFETY: (1) the block is at least HEADER_BYTES long and 16-aligned, so its first word
    // is writable and aligned; (2) block + HEADER_BYTES is inside it (or one past its end
    // for size 0), the caller's part.
    unsafe {
        block.cast::<usize>().write(layout.size());
        memory.allocs.fetch_add(1, Relaxed);
        memory.live_bytes.fetch_add(layout.size() as u64, Relaxed);
        block.add(HEADER_BYTES).cast()
    }
}

/// `ZSTD_freeFunction`: gives back a block of [`zstd_alloc`]; null is ignored.
///
/// # Safety
/// `opaque` as for [`zstd_alloc`]; `address` is null or a pointer [`zstd_alloc`] returned
/// with this opaque and not freed since.
unsafe extern "C" fn zstd_free(opaque: *mut c_void, address: *mut c_void) {
    if address.is_null() {
        return;
    }
    // SAFETY: the function's contract: a live ZstdMemory.
    let memory = unsafe { &*opaque.cast::<ZstdMemory>() };
    // SAFETY: (1) `address` is HEADER_BYTES into a block of zstd_alloc, whose first word
    // holds the block's size; (2) that size and ALIGN_BYTES are the layout it was
    // allocated with, valid then, so valid now; (3) the block is not used after this.
    unsafe {
        let block = address.cast::<u8>().sub(HEADER_BYTES);
        let total = block.cast::<usize>().read();
        std::alloc::dealloc(block, Layout::from_size_align_unchecked(total, ALIGN_BYTES));
        memory.frees.fetch_add(1, Relaxed);
        memory.live_bytes.fetch_sub(total as u64, Relaxed);
    }
}

/// zstd's text for an error code.
fn error_text(code: usize) -> String {
    // SAFETY: ZSTD_getErrorName returns a static NUL-terminated string for any code.
    let name = unsafe { std::ffi::CStr::from_ptr(sys::ZSTD_getErrorName(code)) };
    name.to_string_lossy().into_owned()
}

/// `Ok(value)` for a size, `Err(text)` for a zstd error code.
fn check(code: usize) -> Result<usize, String> {
    // SAFETY: ZSTD_isError only inspects the number.
    if unsafe { sys::ZSTD_isError(code) } != 0 {
        Err(error_text(code))
    } else {
        Ok(code)
    }
}

/// A compression context on [`ZstdMemory`].
#[derive(Debug)]
pub struct CCtx {
    ctx: NonNull<sys::ZSTD_CCtx>,
    _memory: Arc<ZstdMemory>,
}

// SAFETY: a ZSTD_CCtx has no thread affinity; it is used through `&mut self` only, so by
// one thread at a time.
unsafe impl Send for CCtx {}

impl CCtx {
    /// A context for `level`, without zstd's own checksum and dictionary id (the pool keeps
    /// lengths and, when asked, a checksum of its own), with `dictionary` loaded (copied).
    ///
    /// # Errors
    /// zstd's text, if it cannot make the context or refuses a parameter or the dictionary.
    ///
    /// Context: allocates the context and the dictionary copy from `memory`.
    pub fn new(
        level: i32,
        dictionary: Option<&[u8]>,
        memory: &Arc<ZstdMemory>,
    ) -> Result<CCtx, String> {
        // SAFETY: creates a context that allocates through `memory`, which the context
        // keeps alive (field `_memory`).
        let ctx = unsafe { sys::ZSTD_createCCtx_advanced(memory.custom_mem()) };
        let ctx = NonNull::new(ctx).ok_or_else(|| "zstd could not make a context".to_string())?;
        let cctx = CCtx { ctx, _memory: memory.clone() };
        let params = [
            (sys::ZSTD_cParameter::ZSTD_c_compressionLevel, level),
            (sys::ZSTD_cParameter::ZSTD_c_checksumFlag, 0),
            (sys::ZSTD_cParameter::ZSTD_c_dictIDFlag, 0),
        ];
        for (param, value) in params {
            // SAFETY: a live context; any parameter value is checked by zstd.
            check(unsafe { sys::ZSTD_CCtx_setParameter(cctx.ctx.as_ptr(), param, value) })?;
        }
        if let Some(dict) = dictionary {
            // SAFETY: a live context; zstd copies `dict` (its pointer and length are valid
            // for the call).
            check(unsafe {
                sys::ZSTD_CCtx_loadDictionary(cctx.ctx.as_ptr(), dict.as_ptr().cast(), dict.len())
            })?;
        }
        Ok(cctx)
    }

    /// Compresses `src` into `dst` as one frame; its length.
    ///
    /// # Errors
    /// zstd's text (`dst` too small, an allocation refused).
    pub fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, String> {
        // SAFETY: a live context used by this thread only; both buffers are valid for
        // their lengths and do not overlap (one is borrowed shared, the other exclusively).
        let code = unsafe {
            sys::ZSTD_compress2(
                self.ctx.as_ptr(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        check(code).inspect_err(|_| {
            // A failed one-shot call can leave the context mid-frame: start the next from
            // scratch (parameters and dictionary stay).
            // SAFETY: a live context.
            unsafe {
                sys::ZSTD_CCtx_reset(
                    self.ctx.as_ptr(),
                    sys::ZSTD_ResetDirective::ZSTD_reset_session_only,
                )
            };
        })
    }
}

impl Drop for CCtx {
    fn drop(&mut self) {
        // SAFETY: the context is live and dropped once; it frees through `_memory`, which
        // is dropped after this.
        unsafe { sys::ZSTD_freeCCtx(self.ctx.as_ptr()) };
    }
}

/// A decompression context on [`ZstdMemory`].
#[derive(Debug)]
pub struct DCtx {
    ctx: NonNull<sys::ZSTD_DCtx>,
    _memory: Arc<ZstdMemory>,
}

// SAFETY: as for CCtx: no thread affinity, used through `&mut self` only.
unsafe impl Send for DCtx {}

impl DCtx {
    /// A context with `dictionary` loaded (copied, digested at the first use).
    ///
    /// # Errors
    /// zstd's text, if it cannot make the context or refuses the dictionary.
    ///
    /// Context: allocates the context and the dictionary from `memory`.
    pub fn new(dictionary: Option<&[u8]>, memory: &Arc<ZstdMemory>) -> Result<DCtx, String> {
        // SAFETY: creates a context that allocates through `memory`, which the context
        // keeps alive (field `_memory`).
        let ctx = unsafe { sys::ZSTD_createDCtx_advanced(memory.custom_mem()) };
        let ctx = NonNull::new(ctx).ok_or_else(|| "zstd could not make a context".to_string())?;
        let dctx = DCtx { ctx, _memory: memory.clone() };
        if let Some(dict) = dictionary {
            // SAFETY: a live context; zstd copies `dict`, valid for the call.
            check(unsafe {
                sys::ZSTD_DCtx_loadDictionary(dctx.ctx.as_ptr(), dict.as_ptr().cast(), dict.len())
            })?;
        }
        Ok(dctx)
    }

    /// Decodes the frame `src` into `dst`; the decoded length.
    ///
    /// # Errors
    /// zstd's text: a malformed frame, or one that decodes to more than `dst` holds.
    pub fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, String> {
        // SAFETY: a live context used by this thread only; both buffers are valid for
        // their lengths and do not overlap. The decoder bounds-checks `src` and `dst`.
        check(unsafe {
            sys::ZSTD_decompressDCtx(
                self.ctx.as_ptr(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_ptr().cast(),
                src.len(),
            )
        })
    }
}

impl Drop for DCtx {
    fn drop(&mut self) {
        // SAFETY: the context is live and dropped once; it frees through `_memory`.
        unsafe { sys::ZSTD_freeDCtx(self.ctx.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(seed: u8) -> Vec<u8> {
        (0..4096u32).map(|i| ((i / 7) as u8).wrapping_mul(seed)).collect()
    }

    /// Frames are standard zstd: the crate's own contexts read ours and ours read theirs.
    #[test]
    fn frames_interoperate_with_the_zstd_crate() {
        let memory = Arc::new(ZstdMemory::default());
        let (mut c, mut d) =
            (CCtx::new(3, None, &memory).unwrap(), DCtx::new(None, &memory).unwrap());
        let src = page(3);
        let mut out = vec![0u8; 8192];
        let n = c.compress(&src, &mut out).unwrap();
        assert_eq!(zstd::bulk::decompress(&out[..n], 4096).unwrap(), src);
        let theirs = zstd::bulk::compress(&src, 1).unwrap();
        let mut back = vec![0u8; 4096];
        assert_eq!(d.decompress(&theirs, &mut back).unwrap(), 4096);
        assert_eq!(back, src);
    }

    /// Every block zstd takes is given back when its contexts go, and the counts say so.
    #[test]
    fn every_block_is_counted_and_freed() {
        let memory = Arc::new(ZstdMemory::default());
        {
            let dict = page(5);
            let mut c = CCtx::new(2, Some(&dict), &memory).unwrap();
            let mut d = DCtx::new(Some(&dict), &memory).unwrap();
            let mut out = vec![0u8; 8192];
            let mut back = vec![0u8; 4096];
            for seed in 1..20 {
                let n = c.compress(&page(seed), &mut out).unwrap();
                assert_eq!(d.decompress(&out[..n], &mut back).unwrap(), 4096);
                assert_eq!(back, page(seed));
            }
            let s = memory.stats();
            assert!(s.allocs >= 4, "context, workspace, dictionary copies: {s:?}");
            assert!(s.live_bytes > 64 << 10, "a level-2 workspace is large: {s:?}");
            // A too-small output is an error, and the context still works after it.
            assert!(c.compress(&page(9), &mut out[..8]).is_err());
            let n = c.compress(&page(9), &mut out).unwrap();
            assert_eq!(d.decompress(&out[..n], &mut back).unwrap(), 4096);
            assert!(d.decompress(&out[..n / 2], &mut back).is_err());
        }
        let s = memory.stats();
        assert_eq!((s.allocs, s.live_bytes, s.alloc_failed), (s.frees, 0, 0), "{s:?}");
    }
}
