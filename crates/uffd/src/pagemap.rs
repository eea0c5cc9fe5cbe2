//! `PAGEMAP_SCAN` (6.7): ask the kernel which pages of a range are present, written,
//! swapped, the zero page..., as runs, in one ioctl on `/proc/<pid>/pagemap`.
//!
//! A scan walks `[start, end)` and reports runs of consecutive pages whose categories match:
//!
//! ```text
//!   page matches  <=>  (categories ^ inverted) & mask == mask          (all of mask)
//!                 and  (anyof == 0 || (categories ^ inverted) & anyof != 0)
//!   reported run: [start, end) with (categories & return_mask), merged while equal
//! ```
//!
//! With `PM_SCAN_WP_MATCHING` the matched pages are write-protected in the same walk: on a
//! uffd with `WP_ASYNC` that is "give me the pages written since the last scan and start
//! tracking them again", atomically. `PM_SCAN_CHECK_WPASYNC` aborts the walk at the first
//! page not registered for async write protection.
//!
//! The output is bounded by the caller's buffer and by `max_pages`; when either fills, the
//! scan stops early and [`ScanResult::walk_end`] says where, so the caller resumes there.

use crate::error::{Error, Op};
use crate::sys::{self, call};
use crate::types::Range;
use std::fs::File;

/// `PAGE_IS_*` categories (a flag set over the kernel's word).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Categories(u64);

impl Categories {
    /// Async write protection is enabled on the page (registered WP with `WP_ASYNC`).
    pub const WPALLOWED: Categories = Categories(sys::PAGE_IS_WPALLOWED);
    /// Written since it was last write-protected.
    pub const WRITTEN: Categories = Categories(sys::PAGE_IS_WRITTEN);
    /// File-backed.
    pub const FILE: Categories = Categories(sys::PAGE_IS_FILE);
    /// Present in memory.
    pub const PRESENT: Categories = Categories(sys::PAGE_IS_PRESENT);
    /// Swapped out by the kernel.
    pub const SWAPPED: Categories = Categories(sys::PAGE_IS_SWAPPED);
    /// Mapped to the shared zero page.
    pub const PFNZERO: Categories = Categories(sys::PAGE_IS_PFNZERO);
    /// Part of a transparent huge page or hugetlb page.
    pub const HUGE: Categories = Categories(sys::PAGE_IS_HUGE);
    /// Soft-dirty.
    pub const SOFT_DIRTY: Categories = Categories(sys::PAGE_IS_SOFT_DIRTY);
    /// A guard region (6.14).
    pub const GUARD: Categories = Categories(sys::PAGE_IS_GUARD);
    /// No category.
    pub const NONE: Categories = Categories(0);

    /// The kernel's word.
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// All of `other` set.
    pub const fn contains(self, other: Categories) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Categories {
    type Output = Categories;
    fn bitor(self, other: Categories) -> Categories {
        Categories(self.0 | other.0)
    }
}

impl core::fmt::Debug for Categories {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        const NAMES: [&str; 9] = [
            "WPALLOWED",
            "WRITTEN",
            "FILE",
            "PRESENT",
            "SWAPPED",
            "PFNZERO",
            "HUGE",
            "SOFT_DIRTY",
            "GUARD",
        ];
        let names: Vec<&str> = NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        write!(f, "Categories({})", names.join("|"))
    }
}

/// What a scan selects and reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScanArgs {
    /// Categories that must all be set (after inversion).
    pub mask: Categories,
    /// Categories of which at least one must be set (after inversion); NONE: no condition.
    pub anyof: Categories,
    /// Categories whose sense is inverted (match when clear).
    pub inverted: Categories,
    /// Categories to report in each run.
    pub report: Categories,
    /// Write-protect the matched pages (`PM_SCAN_WP_MATCHING`).
    pub write_protect: bool,
    /// Abort at a page without async WP (`PM_SCAN_CHECK_WPASYNC`).
    pub check_wp_async: bool,
    /// Stop after this many matched pages (0: no limit).
    pub max_pages: u64,
}

/// One run of pages: `[start, end)` with the reported categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRegion {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// The categories asked for in [`ScanArgs::report`].
    pub categories: Categories,
}

/// How a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanResult {
    /// Runs written to the output.
    pub regions: usize,
    /// Where the walk stopped (`range.end()` when it covered the whole range).
    pub walk_end: usize,
}

/// An open `/proc/<pid>/pagemap`, placed out of the program's way (crate `fds`).
#[derive(Debug)]
pub struct PageMap {
    fd: fds::Fd,
}

/// The registry's name for a pagemap descriptor.
static PAGEMAP: fds::Kind = fds::Kind {
    what: "pagemap",
    if_lost: "page scans stop (new ranges are adopted as their pages fault)",
    keep: false,
};

/// The most runs one [`PageMap::scan`] reports (bounds the stack buffer: 64 x 24 B).
pub const SCAN_BATCH: usize = 64;

impl PageMap {
    /// The calling process's pagemap.
    ///
    /// # Errors
    /// [`Error::Proc`] if it cannot be opened.
    pub fn open_self() -> Result<PageMap, Error> {
        PageMap::open_path("/proc/self/pagemap")
    }

    /// Another process's pagemap (needs ptrace-read access to it).
    ///
    /// # Errors
    /// [`Error::Proc`] if it cannot be opened.
    pub fn open_pid(pid: u32) -> Result<PageMap, Error> {
        let path = format!("/proc/{pid}/pagemap");
        let file = File::open(&path)
            .map_err(|error| Error::Proc { path: "/proc/<pid>/pagemap", error })?;
        Ok(PageMap { fd: fds::Fd::place(file.into(), &PAGEMAP) })
    }

    fn open_path(path: &'static str) -> Result<PageMap, Error> {
        let file = File::open(path).map_err(|error| Error::Proc { path, error })?;
        Ok(PageMap { fd: fds::Fd::place(file.into(), &PAGEMAP) })
    }

    /// Scans `range`, appending at most [`SCAN_BATCH`] runs to `out`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad masks or flags (e.g. WP_MATCHING where async WP is not
    /// registered), [`Error::Os`] otherwise (EPERM: CHECK_WPASYNC found a page without it;
    /// ENOTTY: a kernel before 6.7).
    ///
    /// May allocate: only if `out` lacks capacity for the runs.
    pub fn scan(
        &self,
        range: Range,
        args: &ScanArgs,
        out: &mut Vec<PageRegion>,
    ) -> Result<ScanResult, Error> {
        let mut flags = 0;
        if args.write_protect {
            flags |= sys::PM_SCAN_WP_MATCHING;
        }
        if args.check_wp_async {
            flags |= sys::PM_SCAN_CHECK_WPASYNC;
        }
        let mut arg = sys::pm_scan_arg {
            flags,
            start: range.start() as u64,
            end: range.end() as u64,
            max_pages: args.max_pages,
            category_inverted: args.inverted.bits(),
            category_mask: args.mask.bits(),
            category_anyof_mask: args.anyof.bits(),
            return_mask: args.report.bits(),
            ..sys::pm_scan_arg::default()
        };
        let mut buf = [sys::page_region::default(); SCAN_BATCH];
        let scanned = self.fd.checked(|fd| call::pagemap_scan(fd, &mut arg, &mut buf));
        let n = scanned
            .map_err(|e| Error::DescriptorLost { what: e.to_string() })?
            .map_err(|e| Error::os(Op::PagemapScan, e))?;
        for r in &buf[..n] {
            out.push(PageRegion {
                start: r.start as usize,
                end: r.end as usize,
                categories: Categories(r.categories),
            });
        }
        Ok(ScanResult { regions: n, walk_end: arg.walk_end as usize })
    }

    /// Scans the whole of `range`, resuming where each batch stopped; returns the runs.
    /// With `max_pages` set, one batch only (the limit is per walk).
    ///
    /// # Errors
    /// As [`PageMap::scan`].
    pub fn scan_all(&self, range: Range, args: &ScanArgs) -> Result<Vec<PageRegion>, Error> {
        let mut out = Vec::new();
        let mut start = range.start();
        // Bounded: every batch either finishes the range or advances `walk_end`.
        while start < range.end() {
            let rest = Range::new(start, range.end() - start)?;
            let done = self.scan(rest, args, &mut out)?;
            if done.walk_end <= start || args.max_pages != 0 {
                break;
            }
            start = done.walk_end;
        }
        Ok(out)
    }
}
