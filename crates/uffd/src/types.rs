//! Small value types: page ranges, feature sets, modes, the kernel version.
//!
//! Flag sets are newtypes over the kernel's bit words (`Features(u64)` is exactly
//! `uffdio_api.features`), so converting to the ABI is `.bits()` and nothing is lost; each
//! named constant is the kernel's bit. A feature also knows the kernel release that added
//! it, which the probe uses to say "needs Linux 6.8" instead of "EINVAL".

use crate::error::Error;
use crate::sys;
use crate::PAGE_SIZE;

/// Defines a flag-set newtype over `u64` with named constants, `|`, `contains` and a
/// `Debug` that prints the names.
macro_rules! flag_set {
    ($(#[$meta:meta])* $name:ident { $($(#[$cmeta:meta])* $flag:ident = $bits:expr,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u64);

        impl $name {
            $($(#[$cmeta])* pub const $flag: $name = $name($bits);)*
            /// The empty set.
            pub const NONE: $name = $name(0);
            const NAMES: &'static [(&'static str, u64)] = &[$((stringify!($flag), $bits),)*];

            /// The kernel's bit word.
            pub const fn bits(self) -> u64 {
                self.0
            }
            /// A set from the kernel's bit word (unknown bits are kept).
            pub const fn from_bits(bits: u64) -> Self {
                $name(bits)
            }
            /// Every flag of `other` is in `self`.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// The flags in both.
            pub const fn intersection(self, other: $name) -> $name {
                $name(self.0 & other.0)
            }
            /// The flags of `self` not in `other`.
            pub const fn difference(self, other: $name) -> $name {
                $name(self.0 & !other.0)
            }
            /// No flag set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, other: $name) {
                self.0 |= other.0;
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut rest = self.0;
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                for (name, bits) in Self::NAMES {
                    if *bits != 0 && self.0 & bits == *bits {
                        write!(f, "{}{name}", if first { "" } else { "|" })?;
                        first = false;
                        rest &= !bits;
                    }
                }
                if rest != 0 {
                    write!(f, "{}{rest:#x}", if first { "" } else { "|" })?;
                }
                write!(f, ")")
            }
        }
    };
}

flag_set! {
    /// `uffdio_api.features`: what a uffd was asked to do and the kernel granted.
    Features {
        /// Write-protect faults are reported (5.7 for anonymous memory).
        PAGEFAULT_FLAG_WP = sys::UFFD_FEATURE_PAGEFAULT_FLAG_WP,
        /// `UFFD_EVENT_FORK`: the child's uffd is delivered (4.11).
        EVENT_FORK = sys::UFFD_FEATURE_EVENT_FORK,
        /// `UFFD_EVENT_REMAP` on mremap (4.11).
        EVENT_REMAP = sys::UFFD_FEATURE_EVENT_REMAP,
        /// `UFFD_EVENT_REMOVE` on MADV_DONTNEED / MADV_REMOVE (4.11).
        EVENT_REMOVE = sys::UFFD_FEATURE_EVENT_REMOVE,
        /// MISSING registration on hugetlbfs (4.11).
        MISSING_HUGETLBFS = sys::UFFD_FEATURE_MISSING_HUGETLBFS,
        /// MISSING registration on shmem (4.11).
        MISSING_SHMEM = sys::UFFD_FEATURE_MISSING_SHMEM,
        /// `UFFD_EVENT_UNMAP` on munmap (4.11).
        EVENT_UNMAP = sys::UFFD_FEATURE_EVENT_UNMAP,
        /// Missing faults raise SIGBUS in the faulting thread instead of a message (4.14).
        SIGBUS = sys::UFFD_FEATURE_SIGBUS,
        /// Fault messages carry the faulting thread's id (4.14).
        THREAD_ID = sys::UFFD_FEATURE_THREAD_ID,
        /// MINOR registration on hugetlbfs (5.13).
        MINOR_HUGETLBFS = sys::UFFD_FEATURE_MINOR_HUGETLBFS,
        /// MINOR registration on shmem (5.14).
        MINOR_SHMEM = sys::UFFD_FEATURE_MINOR_SHMEM,
        /// Fault addresses are not rounded down to the page (5.18).
        EXACT_ADDRESS = sys::UFFD_FEATURE_EXACT_ADDRESS,
        /// WP registration on hugetlbfs and shmem (5.19).
        WP_HUGETLBFS_SHMEM = sys::UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
        /// Write protection also covers never-populated pages (6.4).
        WP_UNPOPULATED = sys::UFFD_FEATURE_WP_UNPOPULATED,
        /// `UFFDIO_POISON` (6.6).
        POISON = sys::UFFD_FEATURE_POISON,
        /// Write-protect faults resolved by the kernel, seen through PAGEMAP_SCAN (6.7).
        WP_ASYNC = sys::UFFD_FEATURE_WP_ASYNC,
        /// `UFFDIO_MOVE` (6.8).
        MOVE = sys::UFFD_FEATURE_MOVE,
    }
}

/// A kernel release, `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    /// 6 in 6.18.
    pub major: u32,
    /// 18 in 6.18.
    pub minor: u32,
}

impl KernelVersion {
    /// A version.
    pub const fn new(major: u32, minor: u32) -> Self {
        KernelVersion { major, minor }
    }

    /// Parses "6.18.44-fc-v595" (the start of `uname -r`); `None` if it does not start with
    /// two dot-separated numbers.
    pub fn parse(release: &str) -> Option<Self> {
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(KernelVersion { major, minor })
    }

    /// The running kernel's version, from `/proc/sys/kernel/osrelease`.
    pub fn running() -> Option<Self> {
        std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().and_then(|r| Self::parse(&r))
    }
}

impl core::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Features {
    /// Every feature, its kernel name and the release that added it, in bit order.
    pub const TABLE: [(Features, &'static str, KernelVersion); 17] = [
        (Features::PAGEFAULT_FLAG_WP, "UFFD_FEATURE_PAGEFAULT_FLAG_WP", KernelVersion::new(5, 7)),
        (Features::EVENT_FORK, "UFFD_FEATURE_EVENT_FORK", KernelVersion::new(4, 11)),
        (Features::EVENT_REMAP, "UFFD_FEATURE_EVENT_REMAP", KernelVersion::new(4, 11)),
        (Features::EVENT_REMOVE, "UFFD_FEATURE_EVENT_REMOVE", KernelVersion::new(4, 11)),
        (Features::MISSING_HUGETLBFS, "UFFD_FEATURE_MISSING_HUGETLBFS", KernelVersion::new(4, 11)),
        (Features::MISSING_SHMEM, "UFFD_FEATURE_MISSING_SHMEM", KernelVersion::new(4, 11)),
        (Features::EVENT_UNMAP, "UFFD_FEATURE_EVENT_UNMAP", KernelVersion::new(4, 11)),
        (Features::SIGBUS, "UFFD_FEATURE_SIGBUS", KernelVersion::new(4, 14)),
        (Features::THREAD_ID, "UFFD_FEATURE_THREAD_ID", KernelVersion::new(4, 14)),
        (Features::MINOR_HUGETLBFS, "UFFD_FEATURE_MINOR_HUGETLBFS", KernelVersion::new(5, 13)),
        (Features::MINOR_SHMEM, "UFFD_FEATURE_MINOR_SHMEM", KernelVersion::new(5, 14)),
        (Features::EXACT_ADDRESS, "UFFD_FEATURE_EXACT_ADDRESS", KernelVersion::new(5, 18)),
        (
            Features::WP_HUGETLBFS_SHMEM,
            "UFFD_FEATURE_WP_HUGETLBFS_SHMEM",
            KernelVersion::new(5, 19),
        ),
        (Features::WP_UNPOPULATED, "UFFD_FEATURE_WP_UNPOPULATED", KernelVersion::new(6, 4)),
        (Features::POISON, "UFFD_FEATURE_POISON", KernelVersion::new(6, 6)),
        (Features::WP_ASYNC, "UFFD_FEATURE_WP_ASYNC", KernelVersion::new(6, 7)),
        (Features::MOVE, "UFFD_FEATURE_MOVE", KernelVersion::new(6, 8)),
    ];

    /// The first feature of `self` (in bit order) with its name and release, if any.
    pub fn first(self) -> Option<(Features, &'static str, KernelVersion)> {
        Self::TABLE.iter().copied().find(|(f, _, _)| self.contains(*f))
    }
}

flag_set! {
    /// `uffdio_register.mode`: which faults a range reports.
    RegisterMode {
        /// Faults on pages that are not mapped.
        MISSING = sys::UFFDIO_REGISTER_MODE_MISSING,
        /// Writes to write-protected pages.
        WP = sys::UFFDIO_REGISTER_MODE_WP,
        /// Faults on pages in the page cache but not mapped (shmem, hugetlbfs).
        MINOR = sys::UFFDIO_REGISTER_MODE_MINOR,
    }
}

flag_set! {
    /// `uffdio_copy.mode`.
    CopyMode {
        /// Do not wake the faulting threads (wake them later in one `wake`).
        DONTWAKE = sys::UFFDIO_COPY_MODE_DONTWAKE,
        /// Map the new pages write-protected.
        WP = sys::UFFDIO_COPY_MODE_WP,
    }
}

flag_set! {
    /// `uffdio_move.mode`.
    MoveMode {
        /// Do not wake the threads faulting on the destination.
        DONTWAKE = sys::UFFDIO_MOVE_MODE_DONTWAKE,
        /// Holes in the source count as moved instead of failing with ENOENT.
        ALLOW_SRC_HOLES = sys::UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES,
    }
}

flag_set! {
    /// `uffdio_register.ioctls` / `uffdio_api.ioctls`: bit `n` = ioctl number `n` works.
    Ioctls {
        /// `UFFDIO_REGISTER`.
        REGISTER = 1 << sys::_UFFDIO_REGISTER,
        /// `UFFDIO_UNREGISTER`.
        UNREGISTER = 1 << sys::_UFFDIO_UNREGISTER,
        /// `UFFDIO_WAKE`.
        WAKE = 1 << sys::_UFFDIO_WAKE,
        /// `UFFDIO_COPY`.
        COPY = 1 << sys::_UFFDIO_COPY,
        /// `UFFDIO_ZEROPAGE`.
        ZEROPAGE = 1 << sys::_UFFDIO_ZEROPAGE,
        /// `UFFDIO_MOVE`.
        MOVE = 1 << sys::_UFFDIO_MOVE,
        /// `UFFDIO_WRITEPROTECT`.
        WRITEPROTECT = 1 << sys::_UFFDIO_WRITEPROTECT,
        /// `UFFDIO_CONTINUE`.
        CONTINUE = 1 << sys::_UFFDIO_CONTINUE,
        /// `UFFDIO_POISON`.
        POISON = 1 << sys::_UFFDIO_POISON,
        /// `UFFDIO_API`.
        API = 1 << sys::_UFFDIO_API,
    }
}

/// Whether a resolving ioctl wakes the threads waiting on its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Wake them (the default of every ioctl).
    Wake,
    /// Leave them asleep; a later [`crate::Uffd::wake`] wakes a whole batch.
    DontWake,
}

/// A page-aligned, non-empty virtual range `[start, start + len_bytes)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    start: usize,
    len_bytes: usize,
}

impl Range {
    /// A range.
    ///
    /// # Errors
    /// [`Error::Misaligned`] unless `start` and `len_bytes` are page multiples, `len_bytes`
    /// is not zero and the end does not overflow.
    pub fn new(start: usize, len_bytes: usize) -> Result<Range, Error> {
        let aligned = start.is_multiple_of(PAGE_SIZE) && len_bytes.is_multiple_of(PAGE_SIZE);
        if !aligned || len_bytes == 0 || start.checked_add(len_bytes).is_none() {
            return Err(Error::Misaligned { addr: start, len_bytes });
        }
        Ok(Range { start, len_bytes })
    }

    /// `pages` pages from `start`.
    ///
    /// # Errors
    /// As [`Range::new`].
    pub fn pages(start: usize, pages: usize) -> Result<Range, Error> {
        let len =
            pages.checked_mul(PAGE_SIZE).ok_or(Error::Misaligned { addr: start, len_bytes: 0 })?;
        Range::new(start, len)
    }

    /// The page containing `addr`.
    pub fn page_of(addr: usize) -> Range {
        Range { start: addr & !(PAGE_SIZE - 1), len_bytes: PAGE_SIZE }
    }

    /// First byte.
    pub const fn start(self) -> usize {
        self.start
    }
    /// Length in bytes.
    pub const fn len_bytes(self) -> usize {
        self.len_bytes
    }
    /// One past the last byte.
    pub const fn end(self) -> usize {
        self.start + self.len_bytes
    }
    /// Length in pages.
    pub const fn page_count(self) -> usize {
        self.len_bytes / PAGE_SIZE
    }
    /// `addr` lies inside.
    pub const fn contains(self, addr: usize) -> bool {
        self.start <= addr && addr < self.end()
    }

    pub(crate) fn raw(self) -> sys::uffdio_range {
        sys::uffdio_range { start: self.start as u64, len: self.len_bytes as u64 }
    }
}

impl core::fmt::Debug for Range {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[{:#x}, {:#x})", self.start, self.end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_print_their_names() {
        let f = Features::MOVE | Features::EVENT_FORK | Features::from_bits(1 << 40);
        assert_eq!(format!("{f:?}"), "Features(EVENT_FORK|MOVE|0x10000000000)");
        assert_eq!(format!("{:?}", Features::NONE), "Features()");
    }

    #[test]
    fn feature_table_is_in_bit_order_and_complete() {
        let mut all = Features::NONE;
        for (i, (f, name, _)) in Features::TABLE.iter().enumerate() {
            assert_eq!(f.bits(), 1 << i, "{name}");
            all |= *f;
        }
        assert_eq!(all.bits(), 0x1ffff);
        let (_, name, since) = (Features::MOVE | Features::POISON).first().unwrap();
        assert_eq!((name, since), ("UFFD_FEATURE_POISON", KernelVersion::new(6, 6)));
    }

    #[test]
    fn kernel_version_parses_uname_strings() {
        assert_eq!(KernelVersion::parse("6.18.44-fc-v595\n"), Some(KernelVersion::new(6, 18)));
        assert_eq!(KernelVersion::parse("5.4.0-150-generic"), Some(KernelVersion::new(5, 4)));
        assert_eq!(KernelVersion::parse("6"), None);
        assert_eq!(KernelVersion::parse("x.y"), None);
        assert!(KernelVersion::new(6, 8) > KernelVersion::new(6, 7));
        assert!(KernelVersion::new(6, 1) < KernelVersion::new(6, 18));
    }

    #[test]
    fn range_rejects_misaligned_and_empty() {
        assert!(Range::new(0x1000, 0x2000).is_ok());
        assert!(Range::new(0x1001, 0x1000).is_err());
        assert!(Range::new(0x1000, 0x1001).is_err());
        assert!(Range::new(0x1000, 0).is_err());
        assert!(Range::new(usize::MAX & !0xfff, 0x2000).is_err());
        let r = Range::pages(0x10000, 4).unwrap();
        assert_eq!((r.end(), r.page_count()), (0x14000, 4));
        assert!(r.contains(0x13fff) && !r.contains(0x14000));
        assert_eq!(Range::page_of(0x12345), Range::new(0x12000, 0x1000).unwrap());
    }
}
