//! The kernel ABI of userfaultfd and PAGEMAP_SCAN, written out by hand.
//!
//! Every constant and `#[repr(C)]` struct here mirrors `include/uapi/linux/userfaultfd.h` and
//! `include/uapi/linux/fs.h` of Linux 6.18. The system headers of our machines are from 6.1, so
//! the newer pieces (`UFFDIO_MOVE`, `UFFDIO_POISON`, `UFFD_FEATURE_POISON`, `WP_ASYNC`, `MOVE`,
//! `PAGEMAP_SCAN`) exist only here. Two kinds of compile-time assertions keep the hand-written
//! ABI honest:
//!
//! - every ioctl number is computed by [`ioc`] (the kernel's `_IOC` encoding) from the
//!   struct's `size_of`, and the numbers the 6.1 header defines are asserted against the
//!   values a C compiler printed from that header (`UFFDIO_API == 0xc018aa3f`, ...);
//! - every struct's size is asserted against the kernel's (the kernel itself asserts
//!   `sizeof(struct uffd_msg) == 32`).
//!
//! Field names follow the kernel's, so a reader can hold this file next to the header.

#![allow(non_camel_case_types)]

use core::mem::size_of;

// ---------------------------------------------------------------------------------------------
// ioctl encoding (asm-generic/ioctl.h, which x86-64 uses unchanged)
// ---------------------------------------------------------------------------------------------

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// `_IOC_NONE`: no data.
pub const IOC_NONE: u32 = 0;
/// `_IOC_WRITE`: user space writes, the kernel reads.
pub const IOC_WRITE: u32 = 1;
/// `_IOC_READ`: the kernel writes, user space reads.
pub const IOC_READ: u32 = 2;

/// The kernel's `_IOC(dir, type, nr, size)`.
///
/// # Panics
/// At compile time, if `size` does not fit the 14-bit size field.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u64 {
    assert!(size < (1 << IOC_SIZEBITS), "ioctl argument too large for _IOC");
    ((dir as u64) << IOC_DIRSHIFT)
        | ((size as u64) << IOC_SIZESHIFT)
        | ((ty as u64) << IOC_TYPESHIFT)
        | ((nr as u64) << IOC_NRSHIFT)
}

/// `_IOWR(ty, nr, T)`.
const fn iowr<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size_of::<T>())
}

/// `_IOR(ty, nr, T)`: the two range-only userfaultfd ioctls are declared `_IOR` for
/// historical reasons (the header says so), although the kernel only reads the argument.
const fn ior<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_READ, ty, nr, size_of::<T>())
}

// ---------------------------------------------------------------------------------------------
// userfaultfd: identities and flags
// ---------------------------------------------------------------------------------------------

/// The only API version there is; `UFFDIO_API` must be asked for it.
pub const UFFD_API: u64 = 0xAA;
/// The ioctl type of userfaultfd and of `/dev/userfaultfd`.
pub const UFFDIO: u8 = 0xAA;
/// The userfaultfd(2) flag: trap only faults taken in user mode (5.11).
pub const UFFD_USER_MODE_ONLY: i32 = 1;

pub const _UFFDIO_REGISTER: u8 = 0x00;
pub const _UFFDIO_UNREGISTER: u8 = 0x01;
pub const _UFFDIO_WAKE: u8 = 0x02;
pub const _UFFDIO_COPY: u8 = 0x03;
pub const _UFFDIO_ZEROPAGE: u8 = 0x04;
pub const _UFFDIO_MOVE: u8 = 0x05;
pub const _UFFDIO_WRITEPROTECT: u8 = 0x06;
pub const _UFFDIO_CONTINUE: u8 = 0x07;
pub const _UFFDIO_POISON: u8 = 0x08;
pub const _UFFDIO_API: u8 = 0x3F;

// Events (`uffd_msg.event`); they start at 0x12 "to be more strict against bugs".
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_EVENT_FORK: u8 = 0x13;
pub const UFFD_EVENT_REMAP: u8 = 0x14;
pub const UFFD_EVENT_REMOVE: u8 = 0x15;
pub const UFFD_EVENT_UNMAP: u8 = 0x16;

// `uffd_msg.arg.pagefault.flags`.
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
pub const UFFD_PAGEFAULT_FLAG_MINOR: u64 = 1 << 2;

// `uffdio_api.features`.
pub const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
pub const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub const UFFD_FEATURE_MISSING_HUGETLBFS: u64 = 1 << 4;
pub const UFFD_FEATURE_MISSING_SHMEM: u64 = 1 << 5;
pub const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
pub const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
pub const UFFD_FEATURE_MINOR_HUGETLBFS: u64 = 1 << 9;
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
pub const UFFD_FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
pub const UFFD_FEATURE_POISON: u64 = 1 << 14;
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;

// `uffdio_register.mode`.
pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;

// Per-ioctl modes.
pub const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_ZEROPAGE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;
pub const UFFDIO_CONTINUE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_POISON_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES: u64 = 1 << 1;

// ---------------------------------------------------------------------------------------------
// userfaultfd: argument structs
// ---------------------------------------------------------------------------------------------

/// `struct uffdio_api`: the handshake. In: `api`, `features`. Out: `features`, `ioctls`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_api {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

/// `struct uffdio_range`: a page-aligned `[start, start + len)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_range {
    pub start: u64,
    pub len: u64,
}

/// `struct uffdio_register`: out-field `ioctls` is the bitmap of range ioctls that work.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_register {
    pub range: uffdio_range,
    pub mode: u64,
    pub ioctls: u64,
}

/// `struct uffdio_copy`: out-field `copy` is bytes copied or a negated errno.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_copy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

/// `struct uffdio_zeropage`: out-field `zeropage` is bytes mapped or a negated errno.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_zeropage {
    pub range: uffdio_range,
    pub mode: u64,
    pub zeropage: i64,
}

/// `struct uffdio_move` (6.8): out-field `move` is bytes moved or a negated errno.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_move {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub r#move: i64,
}

/// `struct uffdio_writeprotect`: no out-field; the ioctl's return value is the result.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_writeprotect {
    pub range: uffdio_range,
    pub mode: u64,
}

/// `struct uffdio_continue` (minor faults on shmem / hugetlbfs; unused by anonymous memory).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_continue {
    pub range: uffdio_range,
    pub mode: u64,
    pub mapped: i64,
}

/// `struct uffdio_poison` (6.6): out-field `updated` is bytes poisoned or a negated errno.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct uffdio_poison {
    pub range: uffdio_range,
    pub mode: u64,
    pub updated: i64,
}

/// `uffd_msg.arg.pagefault`. `ptid` is filled only with `UFFD_FEATURE_THREAD_ID`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct uffd_pagefault {
    pub flags: u64,
    pub address: u64,
    pub ptid: u32,
}

/// `uffd_msg.arg.fork`: the child's new uffd, already installed in the reader's fd table.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct uffd_fork {
    pub ufd: u32,
}

/// `uffd_msg.arg.remap`: mremap moved `[from, from + len)` to `to`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct uffd_remap {
    pub from: u64,
    pub to: u64,
    pub len: u64,
}

/// `uffd_msg.arg.remove`: also used by `UFFD_EVENT_UNMAP`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct uffd_remove {
    pub start: u64,
    pub end: u64,
}

/// The union `uffd_msg.arg`; which member is live is said by `uffd_msg.event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union uffd_msg_arg {
    pub pagefault: uffd_pagefault,
    pub fork: uffd_fork,
    pub remap: uffd_remap,
    pub remove: uffd_remove,
    pub reserved: [u64; 3],
}

/// `struct uffd_msg` (`__packed` in C; with these field sizes the layout is identical).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct uffd_msg {
    pub event: u8,
    pub reserved1: u8,
    pub reserved2: u16,
    pub reserved3: u32,
    pub arg: uffd_msg_arg,
}

impl uffd_msg {
    /// An all-zero message (event 0 is no event), for read buffers.
    pub const ZERO: uffd_msg = uffd_msg {
        event: 0,
        reserved1: 0,
        reserved2: 0,
        reserved3: 0,
        arg: uffd_msg_arg { reserved: [0; 3] },
    };
}

impl core::fmt::Debug for uffd_msg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("uffd_msg").field("event", &self.event).finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// userfaultfd: ioctl numbers
// ---------------------------------------------------------------------------------------------

pub const UFFDIO_API: u64 = iowr::<uffdio_api>(UFFDIO, _UFFDIO_API);
pub const UFFDIO_REGISTER: u64 = iowr::<uffdio_register>(UFFDIO, _UFFDIO_REGISTER);
pub const UFFDIO_UNREGISTER: u64 = ior::<uffdio_range>(UFFDIO, _UFFDIO_UNREGISTER);
pub const UFFDIO_WAKE: u64 = ior::<uffdio_range>(UFFDIO, _UFFDIO_WAKE);
pub const UFFDIO_COPY: u64 = iowr::<uffdio_copy>(UFFDIO, _UFFDIO_COPY);
pub const UFFDIO_ZEROPAGE: u64 = iowr::<uffdio_zeropage>(UFFDIO, _UFFDIO_ZEROPAGE);
pub const UFFDIO_MOVE: u64 = iowr::<uffdio_move>(UFFDIO, _UFFDIO_MOVE);
pub const UFFDIO_WRITEPROTECT: u64 = iowr::<uffdio_writeprotect>(UFFDIO, _UFFDIO_WRITEPROTECT);
pub const UFFDIO_CONTINUE: u64 = iowr::<uffdio_continue>(UFFDIO, _UFFDIO_CONTINUE);
pub const UFFDIO_POISON: u64 = iowr::<uffdio_poison>(UFFDIO, _UFFDIO_POISON);
/// `/dev/userfaultfd`'s one ioctl (6.1): `_IO(0xAA, 0x00)`, argument = userfaultfd(2) flags.
pub const USERFAULTFD_IOC_NEW: u64 = ioc(IOC_NONE, UFFDIO, 0x00, 0);

// ---------------------------------------------------------------------------------------------
// PAGEMAP_SCAN (6.7), an ioctl on /proc/<pid>/pagemap
// ---------------------------------------------------------------------------------------------

// Page categories: masks in `pm_scan_arg`, bits in `page_region.categories`.
pub const PAGE_IS_WPALLOWED: u64 = 1 << 0;
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
pub const PAGE_IS_FILE: u64 = 1 << 2;
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;
pub const PAGE_IS_HUGE: u64 = 1 << 6;
pub const PAGE_IS_SOFT_DIRTY: u64 = 1 << 7;
/// Guard regions (MADV_GUARD_INSTALL), 6.14.
pub const PAGE_IS_GUARD: u64 = 1 << 8;

/// Write-protect the matched pages (atomic "get and clear dirty" with WP_ASYNC).
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Abort the scan on a page that is not registered for async write protection.
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `struct page_region`: `[start, end)` pages sharing `categories` (masked by return_mask).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct page_region {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// `struct pm_scan_arg`. In: everything but `walk_end`. Out: `walk_end`, where the walk
/// stopped (== `end` when the whole range was walked).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pm_scan_arg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
pub const PAGEMAP_SCAN: u64 = iowr::<pm_scan_arg>(b'f', 16);

// ---------------------------------------------------------------------------------------------
// Layout and number assertions
// ---------------------------------------------------------------------------------------------

// Sizes: the kernel's structs (and its own BUILD_BUG_ON for uffd_msg).
const _: () = assert!(size_of::<uffdio_api>() == 24);
const _: () = assert!(size_of::<uffdio_range>() == 16);
const _: () = assert!(size_of::<uffdio_register>() == 32);
const _: () = assert!(size_of::<uffdio_copy>() == 40);
const _: () = assert!(size_of::<uffdio_zeropage>() == 32);
const _: () = assert!(size_of::<uffdio_move>() == 40);
const _: () = assert!(size_of::<uffdio_writeprotect>() == 24);
const _: () = assert!(size_of::<uffdio_continue>() == 32);
const _: () = assert!(size_of::<uffdio_poison>() == 32);
const _: () = assert!(size_of::<uffd_msg_arg>() == 24);
const _: () = assert!(size_of::<uffd_msg>() == 32);
const _: () = assert!(core::mem::offset_of!(uffd_msg, arg) == 8);
const _: () = assert!(size_of::<page_region>() == 24);
const _: () = assert!(size_of::<pm_scan_arg>() == 96);

// Numbers the Linux 6.1 header defines, as printed by a C program built against
// /usr/include/linux/userfaultfd.h on the development machine.
const _: () = assert!(UFFDIO_API == 0xc018_aa3f);
const _: () = assert!(UFFDIO_REGISTER == 0xc020_aa00);
const _: () = assert!(UFFDIO_UNREGISTER == 0x8010_aa01);
const _: () = assert!(UFFDIO_WAKE == 0x8010_aa02);
const _: () = assert!(UFFDIO_COPY == 0xc028_aa03);
const _: () = assert!(UFFDIO_ZEROPAGE == 0xc020_aa04);
const _: () = assert!(UFFDIO_WRITEPROTECT == 0xc018_aa06);
const _: () = assert!(UFFDIO_CONTINUE == 0xc020_aa07);
const _: () = assert!(USERFAULTFD_IOC_NEW == 0xaa00);
// Numbers newer than the 6.1 header: derived by the same encoding, spelled out for grep.
const _: () = assert!(UFFDIO_MOVE == 0xc028_aa05);
const _: () = assert!(UFFDIO_POISON == 0xc020_aa08);
const _: () = assert!(PAGEMAP_SCAN == 0xc060_6610);
