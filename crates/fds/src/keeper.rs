//! The keeper: a second reference to every kept descriptor (the userfaultfds, the swap
//! file), held outside the descriptor table, from which a descriptor closed or replaced by
//! a direct system call is taken back.
//!
//! Why: a raw `close` of the number drops the table's reference, and with it the file when
//! it was the last. For a userfaultfd that is the end of the managed memory: the kernel
//! unregisters every range, and a page the engine took out then reads as zeros, with no
//! fault for anyone to see. For the swap file it frees every page written there. A second
//! reference keeps either alive, and the engine carries on as before.
//!
//! How: an io_uring's fixed-file table ([`SLOTS`] entries, sparse, entry i the registry's
//! slot i) holds a reference to each kept file (`IORING_REGISTER_FILES_UPDATE` when placed,
//! cleared when dropped). The ring itself lives while its memory is mapped, whatever happens
//! to its descriptor, and the program has no reason to unmap it. A lost descriptor is taken
//! back with `IORING_OP_FIXED_FD_INSTALL` (Linux 6.8), which puts the fixed file at a new
//! number of the table; the registry then places it high again.
//!
//! ```text
//!   ring fd (registered, high) --mmap--> SQ/CQ ring + SQEs   (MAP_POPULATE, MADV_DONTFORK)
//!   fixed files: [ -1, uffd, -1, swap file, quiet uffd, ... ]  (indexed by registry slot)
//! ```
//!
//! Without io_uring (disabled by `kernel.io_uring_disabled`, a seccomp filter, an older
//! kernel) nothing is kept: a lost descriptor stays lost ([`crate::Fd::checked`]).
//!
//! Context: [`install`] takes the submission lock with `try_lock` only (an engine thread
//! never waits for a program thread, which might hold it while it faults); [`keep`] and
//! [`release`] are one `io_uring_register` each, lock-free.

#![allow(unsafe_code)]

use crate::registry::SLOTS;
use crate::sys::{self, Errno};
use crate::Fd;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

const SYS_SETUP: libc::c_long = libc::SYS_io_uring_setup;
const SYS_ENTER: libc::c_long = libc::SYS_io_uring_enter;
const SYS_REGISTER: libc::c_long = libc::SYS_io_uring_register;
const IORING_REGISTER_FILES: u32 = 2;
const IORING_REGISTER_FILES_UPDATE: u32 = 6;
const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x0800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_FEAT_SINGLE_MMAP: u32 = 1;
const IORING_ENTER_GETEVENTS: u32 = 1;
/// `IORING_OP_FIXED_FD_INSTALL` (Linux 6.8; the 6.1 headers of this machine lack it).
const IORING_OP_FIXED_FD_INSTALL: u8 = 54;
const IOSQE_FIXED_FILE: u8 = 1;
/// Entries of the submission ring: one install at a time.
const ENTRIES: u32 = 2;

#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

#[repr(C)]
struct FilesUpdate {
    offset: u32,
    resv: u32,
    fds: u64,
}

/// A submission queue entry (64 bytes; the fields this module sets).
#[repr(C)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    op_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    file_index: u32,
    addr3: u64,
    pad: u64,
}

/// A completion queue entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<Params>() == 120);
const _: () = assert!(std::mem::size_of::<Sqe>() == 64);
const _: () = assert!(std::mem::size_of::<Cqe>() == 16);

/// The ring: its descriptor and where its memory is mapped (addresses, never unmapped).
struct Ring {
    fd: Fd,
    sq: usize,
    cq: usize,
    sqes: usize,
    params: Params,
    /// One submission at a time.
    submit: Mutex<()>,
}

/// The registry's name for the ring.
static RING: crate::Kind = crate::Kind {
    what: "io_uring of uswap's descriptor keeper",
    if_lost: "descriptors lost from now on cannot be taken back",
    keep: false,
};

static KEEPER: OnceLock<Option<Ring>> = OnceLock::new();
/// Installs made (each submission's tag is the next number).
static INSTALLS: AtomicU32 = AtomicU32::new(0);

/// Starts the keeper (once); whether it runs.
pub(crate) fn enable() -> bool {
    KEEPER.get_or_init(|| setup().ok()).is_some()
}

fn ring() -> Option<&'static Ring> {
    KEEPER.get().and_then(Option::as_ref)
}

fn mmap(fd: i32, len: usize, offset: i64) -> Result<usize, Errno> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_SHARED | libc::MAP_POPULATE;
    // SAFETY: a new shared mapping of the ring at an address the kernel chooses.
    let addr = unsafe { libc::syscall(libc::SYS_mmap, 0usize, len, prot, flags, fd, offset) };
    if addr < 0 {
        return Err(sys::errno());
    }
    // A forked child must not keep the parent's files alive through it.
    // SAFETY: advice on the mapping just made.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, libc::MADV_DONTFORK) };
    Ok(addr as usize)
}

fn setup() -> Result<Ring, Errno> {
    let mut params = Params::default();
    // SAFETY: `params` is a live, writable io_uring_params for the call.
    let fd = unsafe { libc::syscall(SYS_SETUP, ENTRIES, &mut params) };
    if fd < 0 {
        return Err(sys::errno());
    }
    // SAFETY: a new descriptor from io_uring_setup, owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let raw = owned.as_raw_fd();
    let sq_len = params.sq_off.array as usize + params.sq_entries as usize * 4;
    let cq_len = params.cq_off.cqes as usize + params.cq_entries as usize * 16;
    let (sq, cq) = if params.features & IORING_FEAT_SINGLE_MMAP != 0 {
        let both = mmap(raw, sq_len.max(cq_len), IORING_OFF_SQ_RING)?;
        (both, both)
    } else {
        (mmap(raw, sq_len, IORING_OFF_SQ_RING)?, mmap(raw, cq_len, IORING_OFF_CQ_RING)?)
    };
    let sqes = mmap(raw, params.sq_entries as usize * 64, IORING_OFF_SQES)?;
    let sparse = [-1i32; SLOTS];
    // SAFETY: `sparse` holds SLOTS descriptors (-1: an empty entry) for the call.
    let ret = unsafe {
        libc::syscall(SYS_REGISTER, raw, IORING_REGISTER_FILES, sparse.as_ptr(), SLOTS as u32)
    };
    if ret < 0 {
        return Err(sys::errno());
    }
    let fd = Fd::place(owned, &RING);
    Ok(Ring { fd, sq, cq, sqes, params, submit: Mutex::new(()) })
}

/// Sets fixed-file entry `index` to `fd` (`-1`: clears it).
fn update(index: usize, fd: i32) {
    let Some(ring) = ring() else { return };
    let fds = [fd];
    let arg = FilesUpdate { offset: index as u32, resv: 0, fds: fds.as_ptr() as u64 };
    ring.fd.with(|ring_fd| {
        // SAFETY: `arg` and the array it points to are live for the call.
        unsafe {
            libc::syscall(SYS_REGISTER, ring_fd.as_raw_fd(), IORING_REGISTER_FILES_UPDATE, &arg, 1)
        }
    });
}

/// Keeps a reference to `fd`'s file as entry `index` (the registry's slot).
pub(crate) fn keep(index: usize, fd: i32) {
    update(index, fd);
}

/// Drops entry `index`'s reference.
pub(crate) fn release(index: usize) {
    update(index, -1);
}

/// Puts entry `index`'s file at a new number of the descriptor table (the lowest free,
/// close-on-exec); `Err(EBUSY)` while another thread submits, `Err(ENOSYS)` without a
/// keeper.
pub(crate) fn install(index: usize) -> Result<i32, Errno> {
    let ring = ring().ok_or(libc::ENOSYS)?;
    let _submitting = ring.submit.try_lock().map_err(|_| libc::EBUSY)?;
    let p = &ring.params;
    let tag = INSTALLS.load(Ordering::SeqCst).wrapping_add(1);
    let at = |base: usize, offset: u32| (base + offset as usize) as *mut u32;
    // SAFETY: (1) the ring's memory stays mapped for the process's life and its offsets
    // come from the kernel; (2) the submission lock is held, so this thread alone writes
    // the tail, the entry and the array slot; (3) the head and tail are read and written
    // as atomics, as the kernel does.
    let res = unsafe {
        let tail = &*at(ring.sq, p.sq_off.tail).cast::<AtomicU32>();
        let mask = *at(ring.sq, p.sq_off.ring_mask);
        let t = tail.load(Ordering::Acquire);
        let slot = (t & mask) as usize;
        let sqe = (ring.sqes as *mut Sqe).add(slot);
        std::ptr::write_bytes(sqe, 0, 1);
        (*sqe).opcode = IORING_OP_FIXED_FD_INSTALL;
        (*sqe).flags = IOSQE_FIXED_FILE;
        (*sqe).fd = index as i32;
        (*sqe).user_data = u64::from(tag);
        *at(ring.sq, p.sq_off.array).add(slot) = slot as u32;
        tail.store(t.wrapping_add(1), Ordering::Release);
        let entered = ring.fd.with(|fd| {
            libc::syscall(SYS_ENTER, fd.as_raw_fd(), 1, 1, IORING_ENTER_GETEVENTS, 0usize, 0usize)
        });
        if entered < 0 {
            return Err(sys::errno());
        }
        // Every completion there (one left by an earlier failed enter comes first): the
        // one of this submission is the one with its tag.
        let head = &*at(ring.cq, p.cq_off.head).cast::<AtomicU32>();
        let ctail = &*at(ring.cq, p.cq_off.tail).cast::<AtomicU32>();
        let cmask = *at(ring.cq, p.cq_off.ring_mask);
        let cqes = (ring.cq + p.cq_off.cqes as usize) as *const Cqe;
        let mut res = -libc::EIO;
        let mut h = head.load(Ordering::Acquire);
        while h != ctail.load(Ordering::Acquire) {
            let cqe = *cqes.add((h & cmask) as usize);
            if cqe.user_data == u64::from(tag) {
                res = cqe.res;
            }
            h = h.wrapping_add(1);
        }
        head.store(h, Ordering::Release);
        res
    };
    if res < 0 {
        return Err(-res);
    }
    INSTALLS.fetch_add(1, Ordering::SeqCst);
    Ok(res)
}

/// Whether the keeper runs.
pub(crate) fn running() -> bool {
    ring().is_some()
}
