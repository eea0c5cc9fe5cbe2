//! The SIGBUS handler for `UFFD_FEATURE_SIGBUS` mode, and the lock-free table it reads.
//!
//! With `UFFD_FEATURE_SIGBUS` the kernel does not queue a fault message: the faulting thread
//! gets SIGBUS (`si_code = BUS_ADRERR`, `si_addr` = the address), and its handler resolves
//! the fault itself (`UFFDIO_COPY` / `ZEROPAGE`), then returns so the access re-executes.
//! This saves the cross-thread wake-up, the dominant cost on virtual machines.
//!
//! The handler runs in signal context: no allocation, no locks, no panics, errno saved and
//! restored. It finds what to do in a fixed table of [`SLOTS`] armed ranges:
//!
//! ```text
//!   slot: state  FREE -> WRITING -> ARMED -> DRAINING -> FREE
//!         users  handlers currently reading this slot's fields
//!         [start, end)  uffd  action (COPY from mirror / ZEROPAGE / hook)  counters
//! ```
//!
//! Protocol (all `SeqCst`, a Dekker pair on `state` and `users`): the handler increments
//! `users`, then re-reads `state`; only if ARMED does it read the fields. `disarm` stores
//! DRAINING, then waits until `users` is 0, then stores FREE. Either the handler sees
//! DRAINING and leaves the fields alone, or `disarm` sees its increment and waits for it:
//! after `disarm` returns no handler uses the slot's uffd or mirror.
//!
//! A SIGBUS nobody claims (outside every armed range, a hardware memory error, a failed
//! resolve, an EEXIST where no page is resident) goes to the program's own disposition:
//! the handler it had when ours was installed, or the one it set since through an
//! interposer that keeps ours in place ([`set_program_action`], the LD_PRELOAD shim's
//! `sigaction`). A handler function is called; the default (or ignore) resets the
//! disposition to `SIG_DFL` with libc's own `sigaction` and returns: the access
//! re-executes, faults again, and the default action kills the process with a core dump.
//! An error never yields wrong data.

use super::abi::*;
use super::{call, Errno};
use crate::error::{Error, Op};
use crate::mm::Mapping;
use crate::types::Range;
use crate::uffd::Uffd;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::os::fd::BorrowedFd;
use std::sync::Once;

/// How many ranges can be armed at once (a handful of regions per process; bounded so the
/// handler's scan is bounded).
pub const SLOTS: usize = 16;

const FREE: u32 = 0;
const WRITING: u32 = 1;
const ARMED: u32 = 2;
const DRAINING: u32 = 3;

const KIND_COPY: u32 = 1;
const KIND_ZEROPAGE: u32 = 2;
const KIND_HOOK: u32 = 3;
const KIND_DISPATCH: u32 = 4;

/// How often the handler retries an ioctl that says `EAGAIN` (the mm is changing: an event
/// is pending) before it returns and lets the access fault again.
const EAGAIN_RETRIES: u32 = 64;

const PAGE: usize = 4096;

/// The write bit of the x86 page-fault error code (arch/x86/include/asm/trap_pf.h).
const X86_PF_WRITE: i64 = 1 << 1;
/// The protection bit: the page was present (a protection fault, not a missing page).
const X86_PF_PROT: i64 = 1 << 0;

/// What the handler knows about one SIGBUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigbusFault {
    /// `si_addr`: the faulting address (not page-aligned).
    pub addr: usize,
    /// `si_code`: `BUS_ADRERR` for a userfaultfd SIGBUS, `BUS_MCEERR_AR` for a poison marker.
    pub code: i32,
    /// The access was a write: bit 1 (`X86_PF_WRITE`) of the page-fault error code the
    /// kernel saves in the signal frame (`REG_ERR`). A userfaultfd SIGBUS does not say it
    /// otherwise.
    pub write: bool,
    /// The page was present: bit 0 (`X86_PF_PROT`) of the same error code. A write with it
    /// set is a write-protect fault (a write-protected zero page's first write).
    pub present: bool,
}

/// What a [`DispatchFn`] did with a SIGBUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Resolved: the access may re-execute.
    Resolved,
    /// Its address, but it could not be resolved: the default action must run.
    Failed,
    /// Not its address: the next armed slot is asked.
    NotMine,
}

/// A dispatcher runs in signal context with the context word it was armed with.
pub type DispatchFn = fn(usize, &SigbusFault) -> Dispatch;

/// A hook runs in signal context; it returns true when the access may re-execute.
pub type Hook = fn(&SigbusFault) -> bool;

/// What an armed range does on a userfaultfd SIGBUS.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// `UFFDIO_COPY` the page from `mirror + (page - start)`.
    CopyFrom { mirror: usize },
    /// `UFFDIO_ZEROPAGE` the page.
    ZeroPage,
    /// Call the hook (for any `si_code`).
    Hook(Hook),
    /// Call `f(ctx, fault)` (for any `si_code`); `NotMine` passes the fault on.
    Dispatch {
        /// The dispatcher.
        f: DispatchFn,
        /// Its context word (typically a pointer the dispatcher knows the type of).
        ctx: usize,
    },
}

struct Slot {
    state: AtomicU32,
    users: AtomicU32,
    start: AtomicUsize,
    end: AtomicUsize,
    uffd: AtomicI32,
    kind: AtomicU32,
    arg: AtomicUsize,
    ctx: AtomicUsize,
    resolved: AtomicU64,
    failed: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(FREE),
            users: AtomicU32::new(0),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            uffd: AtomicI32::new(-1),
            kind: AtomicU32::new(0),
            arg: AtomicUsize::new(0),
            ctx: AtomicUsize::new(0),
            resolved: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static INSTALL: Once = Once::new();
static INSTALL_ERRNO: AtomicI32 = AtomicI32::new(0);
/// The program's own SIGBUS disposition (module essay): its handler (an address, or
/// `SIG_DFL` / `SIG_IGN`) and its `sa_flags`.
static PROGRAM_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PROGRAM_FLAGS: AtomicI32 = AtomicI32::new(0);
/// libc's `sigaction`, found past any interposer of it (the shim's), resolved at install.
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// libc's own `sigaction` (not an interposer's).
fn real_sigaction() -> SigactionFn {
    let found = REAL_SIGACTION.load(SeqCst);
    if found == 0 {
        return libc::sigaction;
    }
    // SAFETY: `found` came from dlsym for "sigaction", whose C type is `SigactionFn`.
    unsafe { core::mem::transmute::<usize, SigactionFn>(found) }
}

/// Sets the program's own SIGBUS disposition (module essay) to `handler` (an address, or
/// `SIG_DFL` / `SIG_IGN`) with `flags` (`sa_flags`: `SA_SIGINFO` says how to call it);
/// returns the previous one. For an interposer of `sigaction` that keeps this module's
/// handler installed while the program believes it installed its own.
pub fn set_program_action(handler: usize, flags: libc::c_int) -> (usize, libc::c_int) {
    let flags = PROGRAM_FLAGS.swap(flags, SeqCst);
    (PROGRAM_HANDLER.swap(handler, SeqCst), flags)
}

/// The program's own SIGBUS disposition now (see [`set_program_action`]).
pub fn program_action() -> (usize, libc::c_int) {
    (PROGRAM_HANDLER.load(SeqCst), PROGRAM_FLAGS.load(SeqCst))
}

/// Installs the process-wide SIGBUS handler (once; later calls return the first result).
pub fn install() -> Result<(), Errno> {
    INSTALL.call_once(|| {
        // SAFETY: the name is NUL-terminated; RTLD_NEXT looks past the object calling.
        let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
        REAL_SIGACTION.store(next, SeqCst);
        match set_handler(0) {
            Ok(old) => {
                set_program_action(old.sa_sigaction, old.sa_flags);
            }
            Err(errno) => INSTALL_ERRNO.store(errno.0, SeqCst),
        }
    });
    match INSTALL_ERRNO.load(SeqCst) {
        0 => Ok(()),
        errno => Err(Errno(errno)),
    }
}

/// Runs the handler on the faulting thread's alternate signal stack where it has one
/// (`SA_ONSTACK`), for an embedder that gives every thread one large enough for what its
/// dispatcher does (the LD_PRELOAD shim: crates/preload/src/altstack.rs). Not the default:
/// other alternate stacks are small (Rust's runtime gives its threads one, for its
/// stack-overflow report), and with `SA_ONSTACK` always on, this crate's own tests died of
/// SIGSEGV running the engine's fault path on them.
///
/// # Errors
/// sigaction's errno, or the installation's.
pub fn run_on_alternate_stacks() -> Result<(), Errno> {
    install()?;
    set_handler(libc::SA_ONSTACK).map(drop)
}

/// Installs this module's handler for SIGBUS (`SA_SIGINFO | SA_RESTART`, and `extra`) with
/// libc's own `sigaction`; returns the disposition it replaced.
fn set_handler(extra: libc::c_int) -> Result<libc::sigaction, Errno> {
    // SAFETY: (1) a zeroed sigaction is a valid "no flags, empty mask" value; (2) the
    // handler has the SA_SIGINFO signature; (3) sigaction reads `action` and writes `old`
    // only.
    let (ret, old) = unsafe {
        let mut action: libc::sigaction = core::mem::zeroed();
        let mut old: libc::sigaction = core::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | extra;
        libc::sigemptyset(&mut action.sa_mask);
        (real_sigaction()(libc::SIGBUS, &action, &mut old), old)
    };
    if ret != 0 {
        return Err(Errno::last());
    }
    Ok(old)
}

/// Arms a slot for `[start, end)`; returns its index, or `None` when all slots are taken.
///
/// # Safety
/// (1) `uffd` stays open until [`disarm`] returns; (2) a [`Action::Hook`] is async-signal-safe
/// (no allocation, no locks, no panics, no access to memory that can SIGBUS); (3) a
/// [`Action::Dispatch`]'s context stays valid until [`disarm`] returns, and its function is
/// safe to run in signal context for the faults it claims (its own documented contract).
pub unsafe fn arm(start: usize, end: usize, uffd: i32, action: Action) -> Option<usize> {
    let (kind, arg, ctx) = match action {
        Action::CopyFrom { mirror } => (KIND_COPY, mirror, 0),
        Action::ZeroPage => (KIND_ZEROPAGE, 0, 0),
        Action::Hook(hook) => (KIND_HOOK, hook as usize, 0),
        Action::Dispatch { f, ctx } => (KIND_DISPATCH, f as usize, ctx),
    };
    for (index, slot) in TABLE.iter().enumerate() {
        if slot.state.compare_exchange(FREE, WRITING, SeqCst, SeqCst).is_err() {
            continue;
        }
        slot.start.store(start, SeqCst);
        slot.end.store(end, SeqCst);
        slot.uffd.store(uffd, SeqCst);
        slot.kind.store(kind, SeqCst);
        slot.arg.store(arg, SeqCst);
        slot.ctx.store(ctx, SeqCst);
        slot.resolved.store(0, SeqCst);
        slot.failed.store(0, SeqCst);
        slot.state.store(ARMED, SeqCst);
        return Some(index);
    }
    None
}

/// Disarms slot `index` and waits until no handler uses it; returns its final counters.
///
/// # Panics
/// If the slot is not armed (a bug in the caller's bookkeeping).
pub fn disarm(index: usize) -> (u64, u64) {
    let slot = &TABLE[index];
    let was = slot.state.swap(DRAINING, SeqCst);
    assert_eq!(was, ARMED, "disarm of a slot that is not armed");
    // Bounded by the handlers in flight, each a few syscalls long.
    while slot.users.load(SeqCst) != 0 {
        std::thread::yield_now();
    }
    let counters = (slot.resolved.load(SeqCst), slot.failed.load(SeqCst));
    slot.state.store(FREE, SeqCst);
    counters
}

/// Frees slot `index` without waiting for its users: in a forked child, on its only thread,
/// where the users counted are threads of the parent that do not exist here.
pub fn free_in_child(index: usize) {
    let slot = &TABLE[index];
    slot.users.store(0, SeqCst);
    slot.state.store(FREE, SeqCst);
}

/// The (resolved, failed) counters of an armed slot.
pub fn counters(index: usize) -> (u64, u64) {
    let slot = &TABLE[index];
    (slot.resolved.load(SeqCst), slot.failed.load(SeqCst))
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: (1) the kernel passes a valid siginfo and ucontext for SA_SIGINFO handlers;
    // (2) for SIGBUS `si_addr` is the member the kernel fills; (3) on x86-64 the ucontext's
    // `gregs[REG_ERR]` is the saved page-fault error code; (4) errno's location is
    // thread-local and valid for the thread's lifetime.
    let (fault, errno_location) = unsafe {
        let uc = ctx as *const libc::ucontext_t;
        let err = (*uc).uc_mcontext.gregs[libc::REG_ERR as usize];
        let fault = SigbusFault {
            addr: (*info).si_addr() as usize,
            code: (*info).si_code,
            write: err & X86_PF_WRITE != 0,
            present: err & X86_PF_PROT != 0,
        };
        (fault, libc::__errno_location())
    };
    // SAFETY: see (3) above.
    let saved_errno = unsafe { *errno_location };
    if !dispatch(&fault) {
        let (handler, flags) = program_action();
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default disposition;
            // sigaction is async-signal-safe. (An ignored SIGBUS from a fault cannot be
            // ignored: the re-executed access would fault for ever.)
            unsafe {
                let default: libc::sigaction = core::mem::zeroed();
                real_sigaction()(libc::SIGBUS, &default, core::ptr::null_mut());
            }
        } else if flags & libc::SA_SIGINFO != 0 {
            type Action = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
            // SAFETY: the program installed `handler` with SA_SIGINFO, so it has that type;
            // it gets this signal's own arguments.
            let action = unsafe { core::mem::transmute::<usize, Action>(handler) };
            action(sig, info, ctx);
        } else {
            type Plain = extern "C" fn(libc::c_int);
            // SAFETY: the program installed `handler` without SA_SIGINFO: a plain handler.
            let action = unsafe { core::mem::transmute::<usize, Plain>(handler) };
            action(sig);
        }
    }
    // SAFETY: see (3) above.
    unsafe { *errno_location = saved_errno };
}

/// Finds the armed slot covering the address and runs its action.
fn dispatch(fault: &SigbusFault) -> bool {
    for slot in &TABLE {
        // Cheap pre-check without touching `users`.
        if slot.state.load(SeqCst) != ARMED || !in_slot(slot, fault.addr) {
            continue;
        }
        slot.users.fetch_add(1, SeqCst);
        let outcome = if slot.state.load(SeqCst) == ARMED && in_slot(slot, fault.addr) {
            run(slot, fault)
        } else {
            None
        };
        slot.users.fetch_sub(1, SeqCst);
        if let Some(handled) = outcome {
            let counter = if handled { &slot.resolved } else { &slot.failed };
            counter.fetch_add(1, SeqCst);
            return handled;
        }
    }
    false
}

fn in_slot(slot: &Slot, addr: usize) -> bool {
    slot.start.load(SeqCst) <= addr && addr < slot.end.load(SeqCst)
}

/// Runs a slot's action; `None` when a dispatcher says the fault is not its own. Called
/// with `users` held, so the fields are stable.
fn run(slot: &Slot, fault: &SigbusFault) -> Option<bool> {
    let kind = slot.kind.load(SeqCst);
    let arg = slot.arg.load(SeqCst);
    if kind == KIND_HOOK {
        // SAFETY: `arg` was stored from a `Hook` fn pointer by `arm` for this kind, and
        // fn pointers round-trip through usize on this target.
        let hook: Hook = unsafe { core::mem::transmute::<usize, Hook>(arg) };
        return Some(hook(fault));
    }
    if kind == KIND_DISPATCH {
        // SAFETY: `arg` was stored from a `DispatchFn` pointer by `arm` for this kind.
        let f: DispatchFn = unsafe { core::mem::transmute::<usize, DispatchFn>(arg) };
        return match f(slot.ctx.load(SeqCst), fault) {
            Dispatch::Resolved => Some(true),
            Dispatch::Failed => Some(false),
            Dispatch::NotMine => None,
        };
    }
    Some(resolve(slot, kind, arg, fault))
}

/// The built-in actions: COPY from a mirror, or ZEROPAGE.
fn resolve(slot: &Slot, kind: u32, arg: usize, fault: &SigbusFault) -> bool {
    // Only a userfaultfd SIGBUS (BUS_ADRERR) is ours to resolve, never a hardware memory
    // error (BUS_MCEERR_*). On 6.18 a UFFDIO_POISON marker also says BUS_ADRERR: COPY then
    // replaces the marker (the mirror is the truth), ZEROPAGE is EEXIST and fails below.
    if fault.code != libc::BUS_ADRERR {
        return false;
    }
    // SAFETY: `arm`'s contract keeps the descriptor open while the slot is armed, and the
    // handler holds `users`, so `disarm` has not returned.
    let fd = unsafe { BorrowedFd::borrow_raw(slot.uffd.load(SeqCst)) };
    let page = fault.addr & !(PAGE - 1);
    let start = slot.start.load(SeqCst);
    for _ in 0..EAGAIN_RETRIES {
        let result = match kind {
            KIND_COPY => {
                let src = (arg + (page - start)) as u64;
                let mut a = uffdio_copy {
                    dst: page as u64,
                    src,
                    len: PAGE as u64,
                    mode: UFFDIO_COPY_MODE_DONTWAKE,
                    copy: 0,
                };
                call::copy(fd, &mut a)
            }
            _ => {
                let range = uffdio_range { start: page as u64, len: PAGE as u64 };
                let mut a =
                    uffdio_zeropage { range, mode: UFFDIO_ZEROPAGE_MODE_DONTWAKE, zeropage: 0 };
                call::zeropage(fd, &mut a)
            }
        };
        match result {
            Ok(()) => return true,
            // EEXIST: another thread mapped the page first (the access can go on), or a
            // poison marker sits there (ZEROPAGE refuses it): only a resident page counts.
            Err(Errno(libc::EEXIST)) => return resident(page),
            Err(Errno(libc::EAGAIN)) => continue,
            Err(_) => return false,
        }
    }
    // Still changing: let the access fault again (and retry) rather than spin here.
    true
}

/// Whether a page is mapped at `page` ([`super::mem::resident`]; a poison marker or an
/// unmapped address reads false).
fn resident(page: usize) -> bool {
    super::mem::resident(page) == Ok(true)
}

/// An armed range of the SIGBUS handler; disarmed on drop.
#[derive(Debug)]
pub struct SigbusResolver<'a> {
    slot: usize,
    _borrows: PhantomData<(&'a Uffd, &'a Mapping)>,
}

impl<'a> SigbusResolver<'a> {
    /// Resolves SIGBUS faults in `region` by copying the page at the same offset of
    /// `mirror`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the mirror is shorter than the region; sigaction's errno;
    /// [`Error::SigbusSlotsFull`].
    pub fn copy_from(uffd: &'a Uffd, region: Range, mirror: &'a Mapping) -> Result<Self, Error> {
        if mirror.len_bytes() < region.len_bytes() {
            return Err(Error::OutOfBounds {
                offset: 0,
                len_bytes: region.len_bytes(),
                size_bytes: mirror.len_bytes(),
            });
        }
        let action = Action::CopyFrom { mirror: mirror.addr() };
        // SAFETY: (1) `uffd` is borrowed for 'a, and the resolver disarms before 'a ends, so
        // the descriptor stays open while armed; (2) the action is not a hook.
        unsafe { Self::arm_range(region, uffd.raw_fd(), action) }
    }

    /// Resolves SIGBUS faults in `region` with the zero page.
    ///
    /// # Errors
    /// As [`SigbusResolver::copy_from`].
    pub fn zeropage(uffd: &'a Uffd, region: Range) -> Result<Self, Error> {
        // SAFETY: as in `copy_from`.
        unsafe { Self::arm_range(region, uffd.raw_fd(), Action::ZeroPage) }
    }

    /// Calls `hook` for every SIGBUS in `region`, whatever its `si_code`.
    ///
    /// # Safety
    /// `hook` runs in signal context: it must be async-signal-safe (no allocation, no locks,
    /// no panics, no access to memory that can raise SIGBUS).
    ///
    /// # Errors
    /// As [`SigbusResolver::copy_from`].
    pub unsafe fn hook(region: Range, hook: Hook) -> Result<SigbusResolver<'static>, Error> {
        // SAFETY: (1) no descriptor is used by a hook slot; (2) the hook contract is the
        // caller's.
        unsafe { SigbusResolver::arm_range(region, -1, Action::Hook(hook)) }
    }

    /// Passes every SIGBUS in `region` (or, with `None`, anywhere) to `f(ctx, fault)`; a
    /// fault `f` says is not its own goes on to the next armed slot, then to the default
    /// action.
    ///
    /// # Safety
    /// `ctx` stays valid until the resolver is dropped, and `f` is safe to run in signal
    /// context for the faults it claims (what that takes is `f`'s own contract).
    ///
    /// # Errors
    /// As [`SigbusResolver::copy_from`].
    pub unsafe fn dispatch(
        region: Option<Range>,
        f: DispatchFn,
        ctx: usize,
    ) -> Result<SigbusResolver<'static>, Error> {
        let range = region.map_or((0, usize::MAX), |r| (r.start(), r.end()));
        install().map_err(|errno| Error::Os { op: Op::Sigaction, errno })?;
        // SAFETY: (1) no descriptor is used by a dispatch slot; (2) the context and signal
        // safety contracts are the caller's.
        let slot = unsafe { arm(range.0, range.1, -1, Action::Dispatch { f, ctx }) };
        let slot = slot.ok_or(Error::SigbusSlotsFull)?;
        Ok(SigbusResolver { slot, _borrows: PhantomData })
    }

    /// # Safety
    /// As [`arm`].
    unsafe fn arm_range(region: Range, fd: i32, action: Action) -> Result<Self, Error> {
        install().map_err(|errno| Error::Os { op: Op::Sigaction, errno })?;
        // SAFETY: forwarded from the callers.
        let slot = unsafe { arm(region.start(), region.end(), fd, action) };
        let slot = slot.ok_or(Error::SigbusSlotsFull)?;
        Ok(SigbusResolver { slot, _borrows: PhantomData })
    }

    /// The table slot this resolver holds.
    pub fn slot_index(&self) -> usize {
        self.slot
    }

    /// Faults resolved so far.
    pub fn resolved(&self) -> u64 {
        counters(self.slot).0
    }

    /// Faults this range could not resolve (each one killed, or is killing, the process,
    /// unless a hook returned false for its own reasons).
    pub fn failed(&self) -> u64 {
        counters(self.slot).1
    }
}

impl Drop for SigbusResolver<'_> {
    fn drop(&mut self) {
        disarm(self.slot);
    }
}
