//! Shared helpers of the frontend's tests: skip-or-require, a swap to test, page patterns.
//!
//! Skipping follows the uffd tests' rule, whose helpers this module re-exports (one copy, in
//! crates/uffd/tests/common): a test skips, saying why, only when the process is not root
//! and `USWAP_REQUIRE_UFFD` is unset; as root (as in CI) an unusable userfaultfd fails.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::time::Duration;

/// The uffd tests' helpers: the skip rule and the page pattern are theirs.
#[path = "../../../uffd/tests/common/mod.rs"]
mod uffd_common;

#[allow(unused_imports)] // Each test binary uses a different subset.
pub use uffd_common::{pattern, required, uffd_or_skip};

/// A swap from `builder` (swap space in a private file in the temporary directory unless
/// the builder says otherwise), or `None` after printing why the test is skipped.
///
/// # Panics
/// If userfaultfd is unusable and the environment requires it.
pub fn swap_or_skip(builder: frontend::Builder) -> Option<frontend::Uswap> {
    match builder.build() {
        Ok(swap) => Some(swap),
        Err(e) if !required() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("uswap must start here (root or USWAP_REQUIRE_UFFD): {e}"),
    }
}

/// Fills `page` with words derived from (`page_index`, `version`); version 0 is all zeros.
pub fn fill_page(page: &mut [u8], page_index: u64, version: u64) {
    if version == 0 {
        page.fill(0);
        return;
    }
    let mut x = page_index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.rotate_left(17);
    for (i, word) in page.chunks_exact_mut(8).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Half the words small (compressible), every word distinct per (page, version).
        let v = if i % 2 == 0 { x % 251 } else { x ^ version };
        word.copy_from_slice(&v.to_le_bytes());
    }
}

/// Whether `page` holds what `fill_page(page_index, version)` wrote.
pub fn page_is(page: &[u8], page_index: u64, version: u64) -> bool {
    let mut expected = vec![0u8; page.len()];
    fill_page(&mut expected, page_index, version);
    page == expected.as_slice()
}

/// What a page holds, for a failure message: all zeros, [`fill_page`]'s pattern for some
/// page index and version (up to `max_index` and `max_version`), or neither (its first words).
pub fn describe_page(page: &[u8], max_index: u64, max_version: u64) -> String {
    if page.iter().all(|&b| b == 0) {
        return "all zeros".into();
    }
    for version in 1..=max_version {
        if let Some(index) = (0..=max_index).find(|&i| page_is(page, i, version)) {
            return format!("page {index}'s data, version {version}");
        }
    }
    let words: Vec<u64> =
        page.chunks_exact(8).take(4).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
    format!("no known pattern; first words {words:#x?}")
}

/// Waits (bounded) until the engine charges `pages` resident pages. A fault's map wakes the
/// faulting thread before the handler thread records the page, so right after the program's
/// last write the last page may still be in flight.
///
/// # Panics
/// If the count is not reached within 10 s.
pub fn settle_resident(swap: &frontend::Uswap, pages: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resident = swap.stats().unwrap().engine.gauges.resident_pages;
        if resident == pages {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "resident {resident}, expected {pages}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
