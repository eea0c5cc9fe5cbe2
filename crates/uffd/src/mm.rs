//! Memory-management syscalls for the engine: owned anonymous mappings and the process's
//! memory counters.
//!
//! A [`Mapping`] owns a private anonymous range and unmaps it on drop. Its memory is never
//! lent out as a Rust reference, because the kernel changes it under us: `UFFDIO_MOVE`
//! takes pages away, `MADV_DONTNEED` zeroes them, a registered page may fault and wait.
//! Access goes through volatile loads and stores ([`Mapping::load_u64`], [`Mapping::load`])
//! or atomics ([`Mapping::atomic_u64`]), bounds-checked against the mapping. That is what
//! makes the discarding operations ([`Mapping::advise`] with `DontNeed`, moving pages out)
//! safe on a `Mapping`, where on an arbitrary address they are `unsafe`.
//!
//! Reserve-then-commit: [`Mapping::reserve`] takes address space only (`PROT_NONE`,
//! `MAP_NORESERVE`: no memory, no commit charge); [`Mapping::commit`] makes a sub-range
//! read-write. Regions can so be laid out once, big, and filled as needed.
//!
//! ```text
//!   reserve(1 GiB):  [------------------- PROT_NONE ------------------]
//!   commit(0, 64M):  [== RW ==][-------------- PROT_NONE -------------]
//! ```

use crate::error::Error;
use crate::sys;

pub use crate::sys::mapping::{advise_raw, break_cow_raw, populate_write, protect_none, Mapping};

/// Access rights of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prot {
    /// No access (reserved address space).
    None,
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

impl Prot {
    pub(crate) fn bits(self) -> i32 {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// madvise(2) advice the engine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Drop the pages now; the range reads as zero next (a registered range: faults).
    DontNeed,
    /// Prefer transparent huge pages here.
    HugePage,
    /// Never use transparent huge pages here.
    NoHugePage,
    /// Do not share the range with a forked child (keeps MOVE sources exclusive).
    DontFork,
    /// A forked child gets the range empty (its own pages, none of the parent's).
    WipeOnFork,
    /// Populate the range readable (maps the zero page for anonymous memory).
    PopulateRead,
    /// Populate the range writable (allocates pages).
    PopulateWrite,
}

impl Advice {
    pub(crate) fn bits(self) -> i32 {
        match self {
            Advice::DontNeed => libc::MADV_DONTNEED,
            Advice::HugePage => libc::MADV_HUGEPAGE,
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
            Advice::DontFork => libc::MADV_DONTFORK,
            Advice::WipeOnFork => libc::MADV_WIPEONFORK,
            Advice::PopulateRead => libc::MADV_POPULATE_READ,
            Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
        }
    }
}

/// The process's memory counters from `/proc/self/status`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemStatus {
    /// `VmRSS`: resident set now.
    pub rss_bytes: u64,
    /// `VmHWM`: the resident set's high-water mark.
    pub hwm_bytes: u64,
    /// `RssAnon`: resident anonymous memory.
    pub rss_anon_bytes: u64,
    /// `RssShmem`: resident shared memory (System V, `memfd`, shared anonymous mappings).
    pub rss_shmem_bytes: u64,
}

impl MemStatus {
    /// Reads the counters of the calling process.
    ///
    /// # Errors
    /// [`Error::Proc`] if the file cannot be read.
    pub fn read() -> Result<MemStatus, Error> {
        let path = "/proc/self/status";
        let text = std::fs::read_to_string(path).map_err(|error| Error::Proc { path, error })?;
        Ok(MemStatus::parse(&text))
    }

    /// Parses the text of a `status` file (missing lines read as 0).
    pub fn parse(text: &str) -> MemStatus {
        let kib = |key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        MemStatus {
            rss_bytes: kib("VmRSS:") * 1024,
            hwm_bytes: kib("VmHWM:") * 1024,
            rss_anon_bytes: kib("RssAnon:") * 1024,
            rss_shmem_bytes: kib("RssShmem:") * 1024,
        }
    }

    /// The resident memory that is the process's own to charge: anonymous and shared
    /// memory, the pages that only swap can take away (the rest of VmRSS is `RssFile`, page
    /// cache that the kernel drops and reads back, charged once however many map it).
    pub fn anon_bytes(&self) -> u64 {
        self.rss_anon_bytes + self.rss_shmem_bytes
    }
}

/// The system page size, checked against [`crate::PAGE_SIZE`] at start-up by the probe.
pub fn system_page_size() -> usize {
    sys::mem::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parses_kib_lines() {
        let text = "Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t    1024 kB\nRssAnon:\t  512 kB\n\
                    RssFile:\t 384 kB\nRssShmem:\t 128 kB\n";
        let s = MemStatus::parse(text);
        assert_eq!((s.rss_bytes, s.hwm_bytes, s.rss_anon_bytes), (1 << 20, 2 << 20, 512 << 10));
        assert_eq!((s.rss_shmem_bytes, s.anon_bytes()), (128 << 10, 640 << 10));
        assert_eq!(MemStatus::parse(""), MemStatus::default());
    }
}
