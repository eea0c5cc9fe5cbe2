//! The exported C functions (uswap.h documents each).
//!
//! Every function checks its pointers (null is `USWAP_ERR_INVALID`), runs the Rust library
//! inside `catch_unwind` (a panic becomes `USWAP_ERR_SYSTEM`, never an unwind into C), and
//! records a message for `uswap_last_error` on failure. Handles are boxes the caller owns
//! between `open`/`map` and `close`/`unmap`.
//!
//! Unsafe code: the raw pointers C passes in (each dereference's `SAFETY` comment states the
//! header's contract it relies on), and `no_mangle`; this leaf module is allowed it.

#![allow(unsafe_code)]

use crate::config::{builder_of, uswap_config, uswap_stats, Paths};
use crate::status::{fail, fail_with, last_error, Status};
use frontend::{Region, Uswap};
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `uswap_t`: a swap, as C holds it.
#[derive(Debug)]
pub struct Swap {
    swap: Uswap,
    delivery: CString,
}

/// `uswap_region_t`: a managed region, as C holds it.
#[derive(Debug)]
pub struct ManagedRegion {
    region: Region,
}

/// Runs `f`, turning a panic into `USWAP_ERR_SYSTEM` with its message.
fn guarded(f: impl FnOnce() -> Result<i64, Status>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => value,
        Ok(Err(status)) => status as i64,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            fail(Status::System, &format!("internal error: {what}")) as i64
        }
    }
}

fn code(result: i64) -> i32 {
    i32::try_from(result).unwrap_or(Status::System as i32)
}

/// Fills `*config` with the defaults.
///
/// # Safety
/// `config` is null or points to a writable `struct uswap_config` of this header's size.
#[no_mangle]
pub unsafe extern "C" fn uswap_config_init(config: *mut uswap_config) {
    if !config.is_null() {
        // SAFETY: the caller's contract: a writable struct of this size.
        unsafe { config.write(uswap_config::defaults()) };
    }
}

/// Reads a C configuration that may come from an older, shorter header: the fields its
/// `size` covers are taken, the rest keep their defaults.
///
/// # Safety
/// `config` points to a readable struct of at least its `size` field's bytes.
unsafe fn read_config(config: *const uswap_config) -> Result<(uswap_config, Paths), Status> {
    let mut read = uswap_config::defaults();
    // SAFETY: the caller's contract covers the leading `size` field.
    let size = unsafe { (*config).size } as usize;
    if size < 4 {
        return Err(fail(Status::Invalid, "config.size is not set (call uswap_config_init)"));
    }
    let take = size.min(core::mem::size_of::<uswap_config>());
    // SAFETY: `take` bytes are readable at `config` (its `size`) and writable in `read`;
    // every field is a plain integer or pointer, so any bytes form a valid value.
    unsafe {
        core::ptr::copy_nonoverlapping(config.cast::<u8>(), (&raw mut read).cast::<u8>(), take)
    };
    let text = |p: *const c_char, what: &str| -> Result<Option<String>, Status> {
        if p.is_null() {
            return Ok(None);
        }
        // SAFETY: the header's contract: a non-null path is a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(p) };
        match s.to_str() {
            Ok(s) => Ok(Some(s.to_string())),
            Err(_) => Err(fail(Status::Invalid, &format!("config.{what} is not UTF-8"))),
        }
    };
    let paths = Paths {
        swap_path: text(read.swap_path, "swap_path")?,
        swap_dir: text(read.swap_dir, "swap_dir")?,
        compressor: text(read.compressor, "compressor")?,
    };
    Ok((read, paths))
}

/// Starts a swap (uswap.h).
///
/// # Safety
/// `config` is null or points to a `struct uswap_config` (of at least its `size` bytes);
/// `out` is null or points to a writable `uswap_t *`.
#[no_mangle]
pub unsafe extern "C" fn uswap_open(config: *const uswap_config, out: *mut *mut Swap) -> i32 {
    code(guarded(|| {
        if config.is_null() || out.is_null() {
            return Err(fail(Status::Invalid, "uswap_open: a null pointer"));
        }
        // SAFETY: `out` is writable (checked non-null; the caller's contract).
        unsafe { out.write(core::ptr::null_mut()) };
        // SAFETY: the caller's contract on `config`.
        let (config, paths) = unsafe { read_config(config) }?;
        let builder = builder_of(&config, paths).map_err(|m| fail(Status::Invalid, &m))?;
        let swap = builder.build().map_err(|e| fail_with(&e))?;
        let delivery = CString::new(swap.delivery().name()).unwrap_or_default();
        let handle = Box::into_raw(Box::new(Swap { swap, delivery }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(0)
    }))
}

/// Releases a swap handle (uswap.h).
///
/// # Safety
/// `swap` is null or a handle from `uswap_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn uswap_close(swap: *mut Swap) {
    if !swap.is_null() {
        // SAFETY: the caller's contract: a live handle from `Box::into_raw`, closed once.
        let handle = unsafe { Box::from_raw(swap) };
        let _ = catch_unwind(AssertUnwindSafe(|| drop(handle)));
    }
}

/// Maps a managed region (uswap.h).
///
/// # Safety
/// `swap` is null or a live handle; `out` is null or points to a writable
/// `uswap_region_t *`.
#[no_mangle]
pub unsafe extern "C" fn uswap_map(
    swap: *mut Swap,
    len: usize,
    out: *mut *mut ManagedRegion,
) -> i32 {
    code(guarded(|| {
        if swap.is_null() || out.is_null() {
            return Err(fail(Status::Invalid, "uswap_map: a null pointer"));
        }
        // SAFETY: `out` is writable (the caller's contract).
        unsafe { out.write(core::ptr::null_mut()) };
        // SAFETY: a live handle (the caller's contract), only read here.
        let swap = unsafe { &*swap };
        let region = swap.swap.map(len).map_err(|e| fail_with(&e))?;
        let handle = Box::into_raw(Box::new(ManagedRegion { region }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(0)
    }))
}

/// The region's first byte (uswap.h).
///
/// # Safety
/// `region` is null or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn uswap_region_addr(region: *const ManagedRegion) -> *mut c_void {
    if region.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: a live handle (the caller's contract).
    unsafe { (*region).region.as_ptr().cast() }
}

/// The region's length (uswap.h).
///
/// # Safety
/// `region` is null or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn uswap_region_len(region: *const ManagedRegion) -> usize {
    if region.is_null() {
        return 0;
    }
    // SAFETY: a live handle (the caller's contract).
    unsafe { (*region).region.len() }
}

/// Unmaps a region and frees its handle (uswap.h).
///
/// # Safety
/// `region` is null or a live region handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uswap_unmap(region: *mut ManagedRegion) -> i32 {
    code(guarded(|| {
        if region.is_null() {
            return Err(fail(Status::Invalid, "uswap_unmap: a null region"));
        }
        // SAFETY: the caller's contract: a live handle from `Box::into_raw`, unmapped once.
        let handle = unsafe { Box::from_raw(region) };
        handle.region.unmap().map_err(|e| fail_with(&e))?;
        Ok(0)
    }))
}

/// Pages out managed memory now (uswap.h).
///
/// # Safety
/// `swap` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn uswap_pageout(swap: *mut Swap, addr: *mut c_void, len: usize) -> i64 {
    guarded(|| {
        if swap.is_null() {
            return Err(fail(Status::Invalid, "uswap_pageout: a null handle"));
        }
        // SAFETY: a live handle (the caller's contract), only read here.
        let swap = unsafe { &*swap };
        let pages = swap.swap.pageout(addr as usize, len).map_err(|e| fail_with(&e))?;
        Ok(i64::try_from(pages).unwrap_or(i64::MAX))
    })
}

/// Changes the budget while the swap runs (uswap.h).
///
/// # Safety
/// `swap` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn uswap_set_budget(swap: *mut Swap, budget_bytes: u64) -> i32 {
    code(guarded(|| {
        if swap.is_null() {
            return Err(fail(Status::Invalid, "uswap_set_budget: a null handle"));
        }
        // SAFETY: a live handle (the caller's contract), only read here.
        let swap = unsafe { &*swap };
        swap.swap.set_budget(budget_bytes).map_err(|e| fail_with(&e))?;
        Ok(0)
    }))
}

/// The counters (uswap.h).
///
/// # Safety
/// `swap` is null or a live handle; `out` is null or points to a writable
/// `struct uswap_stats`.
#[no_mangle]
pub unsafe extern "C" fn uswap_stats(swap: *mut Swap, out: *mut uswap_stats) -> i32 {
    code(guarded(|| {
        if swap.is_null() || out.is_null() {
            return Err(fail(Status::Invalid, "uswap_stats: a null pointer"));
        }
        // SAFETY: a live handle (the caller's contract), only read here.
        let swap = unsafe { &*swap };
        let stats = swap.swap.stats().map_err(|e| fail_with(&e))?;
        // SAFETY: `out` is writable (the caller's contract).
        unsafe { out.write(uswap_stats::from(&stats)) };
        Ok(0)
    }))
}

/// The delivery mode's name (uswap.h).
///
/// # Safety
/// `swap` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn uswap_delivery_name(swap: *const Swap) -> *const c_char {
    if swap.is_null() {
        return c"".as_ptr();
    }
    // SAFETY: a live handle (the caller's contract); the string lives as long as it.
    unsafe { (*swap).delivery.as_ptr() }
}

/// The calling thread's last error message (uswap.h).
#[no_mangle]
pub extern "C" fn uswap_last_error() -> *const c_char {
    last_error()
}
