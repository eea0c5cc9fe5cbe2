//! The program's `mmap`, `mmap64` and `mremap`, interposed: each does the system call
//! itself (no libc state is involved: glibc's own wrappers are the bare call too), then:
//!
//! - a new private read-write anonymous range (not a stack, not huge pages) is adopted
//!   before the call returns: the wrapper asks the handler for a scan of /proc/self/maps
//!   and waits until one has run ([`adopt_now`]). So the program never touches it
//!   unmanaged: a page read before adoption would be adopted later as a zero page, or,
//!   written meanwhile, as resident and over the budget (the adoption lag the periodic
//!   scan leaves). The scan is the same one the period runs, on the handler thread, so it
//!   is ordered with the kernel's events as ever (crate essay);
//! - a range that may become one (another kind of anonymous writable mapping, a grown
//!   one) asks for a scan at once instead of at the next period, without waiting.
//!
//! Cost: one wake of the handler thread and one of the caller, around the scan
//! (`bench/probes/mmap_cost.c`; docs/benchmarks.md). glibc's malloc calls its internal mmap,
//! which this never sees (the period covers it); the engine maps its own memory by the
//! system call, never through this symbol (uffd's `sys::mem`).
//!
//! Context: these run on any thread of the program, at any time (even before the shim's
//! constructor, from another library's): no allocation; nothing is waited for before the
//! handler runs, on the handler thread, in a forked child (another pid: the parent's
//! handler scans the parent), or while a fork holds the handler
//! ([`frontend::handler::Control::wait_for`]), and never longer than [`ADOPT_WAIT_MAX`].

#![allow(unsafe_code)]

use frontend::handler::Control;
use libc::{c_int, c_void, off_t, size_t};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// A scan was asked for since the last one.
pub static SCAN_REQUESTED: AtomicBool = AtomicBool::new(false);
/// Adoptions asked for by [`adopt_now`], numbered from 1.
static ADOPT_ASKED: AtomicU64 = AtomicU64::new(0);
/// The last adoption number a finished scan covers ([`scan_covers`]).
static ADOPT_SCANNED: AtomicU64 = AtomicU64::new(0);
/// The longest [`adopt_now`] waits: longer, the program goes on and the range is adopted
/// by a later scan, as any range malloc maps.
pub const ADOPT_WAIT_MAX: Duration = Duration::from_millis(100);

counters::table! {
    /// The wrappers' live counters.
    pub struct Waits;
    /// A snapshot of them (in the stats file, `shim_mmap_*`).
    #[derive(Debug, Clone, Copy, Default)]
    #[allow(dead_code)]
    pub struct WaitsSnapshot {
        prefix "shim_mmap_";
        counters {
            /// Calls that waited for an adoption.
            waits,
            /// Their waiting time, in nanoseconds.
            wait_ns,
            /// Calls that went on before a scan covered the range (the time limit, the
            /// handler thread stopped, or a fork held it).
            unadopted,
        }
    }
}

/// The wrappers' counters.
pub static WAITS: Waits = Waits::new();
/// The handler's control block, once running (leaked: lives as long as the process).
static CONTROL: AtomicPtr<Control> = AtomicPtr::new(std::ptr::null_mut());
/// The process that runs the handler.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Zeroes the wrappers' counters (a forked child counts its own).
pub fn reset_counters() {
    WAITS.reset();
}

/// Lets the wrappers wake the handler of process `pid` (again in a forked child, whose
/// handler is its own: the parent's control block is left, never released).
pub fn install(control: std::sync::Arc<Control>, pid: i32) {
    OWNER.store(pid, SeqCst);
    CONTROL.store(std::sync::Arc::into_raw(control).cast_mut(), SeqCst);
}

/// The handler's control block once [`install`]ed: in this process, and in a forked child
/// (a copy, which forwards through it: `frontend::bring_in_child`).
pub fn control() -> Option<&'static Control> {
    // SAFETY: `CONTROL` is null or came from `Arc::into_raw` in `install`, never released.
    unsafe { CONTROL.load(SeqCst).as_ref() }
}

/// Asks the handler for a scan now (module essay).
pub fn request_scan() {
    SCAN_REQUESTED.store(true, SeqCst);
    let control = CONTROL.load(SeqCst);
    // SAFETY: getpid has no preconditions.
    if control.is_null() || unsafe { libc::getpid() } != OWNER.load(SeqCst) {
        return;
    }
    // SAFETY: `control` came from `Arc::into_raw` in `install` and is never released.
    unsafe { &*control }.wake();
}

/// The adoption number a scan starting now covers; once the scan is done, pass it to
/// [`scan_covers`]. On the handler thread.
pub fn scan_starts() -> u64 {
    ADOPT_ASKED.load(SeqCst)
}

/// A scan that started at `ticket` ([`scan_starts`]) is done.
pub fn scan_covers(ticket: u64) {
    ADOPT_SCANNED.fetch_max(ticket, SeqCst);
}

/// Whether a caller of [`adopt_now`] waits for a scan.
pub fn adoption_waits() -> bool {
    ADOPT_ASKED.load(SeqCst) > ADOPT_SCANNED.load(SeqCst)
}

/// Asks the handler for a scan and waits until one that started after this call is done
/// (module essay); without a handler to ask, only asks.
fn adopt_now() {
    SCAN_REQUESTED.store(true, SeqCst);
    let Some(control) = control() else { return };
    let t = Instant::now();
    let ticket = ADOPT_ASKED.fetch_add(1, SeqCst) + 1;
    if !control.wait_for(ADOPT_WAIT_MAX, || ADOPT_SCANNED.load(SeqCst) >= ticket) {
        if control.in_owner() {
            WAITS.unadopted.fetch_add(1, SeqCst);
        }
        return;
    }
    WAITS.waits.fetch_add(1, SeqCst);
    WAITS.wait_ns.fetch_add(t.elapsed().as_nanos() as u64, SeqCst);
}

fn maybe_new_anonymous(prot: c_int, flags: c_int) -> bool {
    prot & libc::PROT_WRITE != 0
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_SHARED == 0
}

/// A mapping the scan adopts as it is: private, anonymous, read-write (`rw-p`), of
/// normal pages, and no stack (which SIGBUS delivery leaves out once its guard page is in
/// place: maps.rs).
fn adoptable(prot: c_int, flags: c_int) -> bool {
    let odd = libc::MAP_STACK | libc::MAP_GROWSDOWN | libc::MAP_HUGETLB;
    prot == libc::PROT_READ | libc::PROT_WRITE
        && maybe_new_anonymous(prot, flags)
        && flags & odd == 0
}

/// `mmap(2)` (module essay).
///
/// # Safety
/// The caller's contract is mmap's own.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: the caller's mmap arguments, passed on unchanged.
    let result = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) };
    if result == -1 {
        return libc::MAP_FAILED;
    }
    if adoptable(prot, flags) {
        adopt_now();
    } else if maybe_new_anonymous(prot, flags) {
        request_scan();
    }
    result as *mut c_void
}

/// `mmap64(2)`: the same call on 64-bit Linux.
///
/// # Safety
/// The caller's contract is mmap's own.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: as `mmap`.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// `mlockall(2)`. With `MCL_CURRENT` the engine stops reclaiming before the call, which
/// faults in every page to lock it (reclaim would take out what the call brought in, and
/// scan pages it cannot take). Once it locked, the engine's staging areas are unlocked
/// again ([`frontend::UffdSource::unlock_lanes`]): pages move only between ranges locked
/// alike, so the engine's takes from the program's now locked memory are refused, as under
/// `mlock`, and what the program locked stays resident; the engine does not reclaim until
/// `munlockall` (`Engine::set_all_locked`, docs/RUN.md, "mlock"). The shim's arena is
/// mapped with no access where unused, so no lock makes it resident (crate arena), and it
/// is unlocked again so that it is not counted as locked.
///
/// # Safety
/// The caller's contract is mlockall's own.
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    use engine::AllLocked;
    // SAFETY: getpid has no preconditions.
    let current = flags & libc::MCL_CURRENT != 0 && unsafe { libc::getpid() } == OWNER.load(SeqCst);
    if current {
        crate::shim::program_locked_all(AllLocked::Locking);
    }
    // SAFETY: the caller's flags, passed on.
    let result = unsafe { libc::syscall(libc::SYS_mlockall, flags) };
    if current {
        crate::shim::program_locked_all(if result == 0 {
            AllLocked::Locked
        } else {
            AllLocked::Unlocked
        });
    }
    if result != 0 {
        return -1;
    }
    0
}

/// `munlockall(2)`: the system call, then the engine may page out again ([`mlockall`]).
///
/// # Safety
/// The caller's contract is munlockall's own.
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> c_int {
    // SAFETY: munlockall takes no argument.
    if unsafe { libc::syscall(libc::SYS_munlockall) } != 0 {
        return -1;
    }
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } == OWNER.load(SeqCst) {
        crate::shim::program_locked_all(engine::AllLocked::Unlocked);
    }
    0
}

/// `mremap(2)`. C declares it variadic (the new address only with `MREMAP_FIXED`); on
/// x86-64 a variadic argument travels in the register a fifth argument would, so the fifth
/// parameter reads it, and is only passed on when the flag says it was given.
///
/// # Safety
/// The caller's contract is mremap's own.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let target = if fixed { new_addr } else { std::ptr::null_mut() };
    // SAFETY: the caller's mremap arguments, passed on unchanged.
    let result = unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, target) };
    if result == -1 {
        return libc::MAP_FAILED;
    }
    if new_len > old_len {
        request_scan();
    }
    result as *mut c_void
}
