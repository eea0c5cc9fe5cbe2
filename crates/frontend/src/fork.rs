//! Fork without `UFFD_FEATURE_EVENT_FORK`: the child gets an engine of its own.
//!
//! `EVENT_FORK` needs `CAP_SYS_PTRACE`, even through `/dev/userfaultfd`, and without it a
//! child's copy of a registered range is not registered at all: a page paged out of the
//! parent is simply missing in the child, and reads as zeros. So every swap of this
//! process hooks `fork()` (`pthread_atfork`), and the child, before `fork()` returns in
//! it, carries on with the copy of the engine it inherited, through a userfaultfd of its
//! own:
//!
//! ```text
//!   parent: prepare (forking thread)          child: child handler (its only thread)
//!     engine: reclaim paused, none in flight     device: writes to a file of its own,
//!     handler: fork mode (serves the forking       reads inherited slots from the
//!       thread's faults only, wholly)              parent's (backend OverlayBackend)
//!     stdio streams read in (glibc's fork        drop the parent's children's references
//!       writes their locks in the child)         uffd of its own; regions registered on
//!     staged pages' data taken                     a SIGBUS uffd first: its own faults,
//!     references for the child                     until a handler thread runs, are
//!       (Engine::hold_for_child), a pipe           served in its signal handler
//!   fork()                                       new staging lanes, staged pages copied in
//!   parent: parent handler                       threads: handler, reclaimer, COW breaker
//!     the pipe's read end polled: the            regions moved to the handler's uffd
//!       references go when it hangs up           zero pages write-protected again
//!     fork mode ends, reclaim resumes            the embedder's hook (the shim rejoins
//!                                                  its run's broker), then reclaim
//!                                                  resumes
//! ```
//!
//! What makes the child's copy consistent: at the fork no page-out, writeback or
//! compaction is half done (the engine's pause), and no fault is half served (the handler
//! serves the forking thread's faults to the end before it wakes the thread, and nobody
//! else's). What makes the child's memory right before its handler exists: every page
//! glibc's fork touches in the child before the fork handlers run is resident at the fork
//! (the arenas its malloc locks touched in the parent, the streams read here, thread
//! stacks which are never managed), and the child's first act is to register its own uffd.
//!
//! The parent keeps the slots the child may read until the child's line (the child and
//! whatever it forks in turn, which inherits the pipe's write end) has exited or exec'd:
//! the handler polls the read end. A fork the kernel refuses leaves the parent the only
//! holder of the write end, which its parent handler closes: the pipe hangs up at once.
//!
//! A child that cannot have a uffd of its own (a `/dev/userfaultfd` that went away, too
//! many descriptors) does not run with pages missing: every page it inherited swapped
//! out is read back into its memory, its managed ranges are left unregistered, and it runs
//! unmanaged, saying so on stderr.
//!
//! vfork, `posix_spawn` and `system` share the parent's memory until they exec and run no
//! fork handlers: the parent's handler serves them as its own threads. A raw `clone`
//! without `CLONE_VM` runs no handler either, and its child reads paged-out pages as zeros:
//! not supported.
//!
//! Context: the handlers run on the forking thread, prepare before glibc takes its malloc
//! locks, parent and child after the fork.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Weak};
use uffd::sys::forking::{self, SignalMask};
use uffd::sys::process;

/// What a swap does at each step of a fork (the module essay's table).
pub(crate) trait Forkable: Send + Sync {
    /// Quiesces (the forking thread, before glibc's malloc locks).
    fn prepare(&self);
    /// Resumes in the parent.
    fn parent(&self);
    /// Becomes the child's own (its only thread).
    fn child(&self);
}

/// Every live swap of the process.
static SWAPS: Mutex<Vec<Weak<dyn Forkable>>> = Mutex::new(Vec::new());

/// The swaps a fork in progress prepared, and the forking thread's signal mask before it.
type InProgress = (Vec<Arc<dyn Forkable>>, Option<SignalMask>);

thread_local! {
    /// The fork in progress on this thread (prepare and parent/child run on the forking
    /// thread).
    static FORKING: RefCell<InProgress> = const { RefCell::new((Vec::new(), None)) };
}

/// Registers `swap` for the fork handlers (installed with the first).
///
/// # Errors
/// `pthread_atfork`'s.
pub(crate) fn register(swap: Weak<dyn Forkable>) -> Result<(), crate::Error> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static RESULT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    ONCE.call_once(|| {
        if let Err(errno) = process::atfork(prepare, parent, child) {
            RESULT.store(errno.0, std::sync::atomic::Ordering::SeqCst);
        }
    });
    match RESULT.load(std::sync::atomic::Ordering::SeqCst) {
        0 => {}
        errno => {
            let errno = uffd::sys::Errno(errno);
            return Err(uffd::Error::Os { op: uffd::Op::Atfork, errno }.into());
        }
    }
    let mut swaps = crate::source::lock(&SWAPS);
    swaps.retain(|weak| weak.strong_count() > 0);
    swaps.push(swap);
    Ok(())
}

/// `pthread_atfork` prepare (module essay).
extern "C" fn prepare() {
    let mask = forking::block_async_signals();
    let swaps: Vec<Arc<dyn Forkable>> = {
        let all = crate::source::lock(&SWAPS);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for swap in &swaps {
        swap.prepare();
    }
    if !swaps.is_empty() {
        // Every swap's handler now serves this thread's faults: the streams are read in
        // (module essay), and nothing evicts them again before the fork.
        forking::touch_stdio_files();
    }
    FORKING.with(|f| *f.borrow_mut() = (swaps, Some(mask)));
}

/// `pthread_atfork` parent.
extern "C" fn parent() {
    let (swaps, mask) = FORKING.with(|f| std::mem::take(&mut *f.borrow_mut()));
    for swap in &swaps {
        swap.parent();
    }
    if let Some(mask) = mask {
        forking::restore_signals(&mask);
    }
}

/// `pthread_atfork` child.
extern "C" fn child() {
    let (swaps, mask) = FORKING.with(|f| std::mem::take(&mut *f.borrow_mut()));
    for swap in &swaps {
        swap.child();
    }
    if let Some(mask) = mask {
        forking::restore_signals(&mask);
    }
}

// ------------------------------------------------------------------------------------------
// One swap's part of a fork
// ------------------------------------------------------------------------------------------

use crate::api::{Forking, Inner, Parts};
use crate::delivery::{Delivery, SigbusMode};
use crate::handler::Control;
use crate::source::lock;
use crate::Error;
use engine::region::MmId;
use uffd::types::{Range, Wake};
use uffd::Uffd;

/// The registry's names for a fork's hold pipe.
static HOLD_READ: fds::Kind = fds::Kind {
    what: "forked child's hold pipe",
    if_lost: "the slots kept for that child are kept for this process's life",
    keep: false,
};
static HOLD_WRITE: fds::Kind = fds::Kind {
    what: "hold pipe to the parent",
    if_lost: "the parent may release the slots this process reads early",
    keep: false,
};

impl Forkable for Inner {
    fn prepare(&self) {
        let Ok(parts) = self.owner() else { return };
        if self.exclude_from_fork {
            return; // the regions are not in the child: its copy stays inert
        }
        let engine = &parts.engine;
        // In this order: calls of the library in flight finish first (they may break
        // copy-on-write sharing and reclaim), then the engine's reclaim and the breaker
        // stop, then the handler.
        parts.handler.control().gate.close();
        engine.pause_for_fork();
        parts.source.pause_cow();
        parts.handler.control().enter_fork_mode();
        let staged = engine.staged_for_child();
        // Both ends out of the program's way: a child that closes the descriptors it
        // inherited (a daemon's habit) must not end its parent's hold early.
        let pipe = forking::pipe().ok().map(|(read, write)| {
            (fds::Fd::place(read, &HOLD_READ), fds::Fd::place(write, &HOLD_WRITE))
        });
        *lock(&self.fork) = Some(Forking { pipe, staged });
    }

    fn parent(&self) {
        let Ok(parts) = self.owner() else { return };
        let Some(forking) = lock(&self.fork).take() else { return };
        let control = parts.handler.control();
        // Taken here, not before the fork, so that the child's copy of the engine does not
        // hold them too: the engine has not changed since the fork (reclaim paused, the
        // handler serving nobody, the gate closed).
        if let Ok(hold) = parts.engine.hold_for_child() {
            match forking.pipe {
                Some((read, write)) => {
                    drop(write); // the child's line holds the only write ends now
                    control.add_hold(hold, read);
                }
                // No pipe to learn of the child's end through: the references stay.
                None => control.keep_hold_for_life(),
            }
        }
        control.leave_fork_mode();
        parts.source.resume_cow();
        parts.engine.resume_after_fork();
        if let Some(hooks) = &self.settings.handler.hooks {
            hooks.forked(&parts.engine, false);
        }
    }

    fn child(&self) {
        let Some(forking) = lock(&self.fork).take() else { return };
        let Some(old) = self.parts.swap(None) else { return };
        // Kept for the fallback: a child that runs unmanaged still needs the staged pages'
        // data in its memory (empty, and no allocation, when none was staged).
        let staged = forking.staged.clone();
        match become_own(self, &old, forking) {
            Ok(parts) => {
                let engine = parts.engine.clone();
                self.parts.store(Some(Arc::new(parts)));
                self.pid.store(process::getpid(), std::sync::atomic::Ordering::SeqCst);
                // The embedder's hook runs while reclaim is still paused: until it returns
                // the child's engine writes nothing to its own device, so what the hook
                // sets for that device first (the shim's run gives the child a swap-space
                // row of its own) holds from its first write.
                if let Some(hooks) = &self.settings.handler.hooks {
                    hooks.forked(&engine, true);
                }
                engine.resume_after_fork();
            }
            Err(error) => run_unmanaged(&old, &error, &staged),
        }
        // The parent's parts: their threads do not exist here, and their objects hold the
        // parent's descriptors and mappings. Never dropped.
        std::mem::forget(old);
    }
}

/// Fault injection (tests): forked children fail to start a swap of their own, and take
/// the unmanaged fallback.
static FAIL_CHILD_SWAP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Fault injection for tests: while `fail` is set, a child forked from now on cannot start
/// a swap of its own (as when it cannot open a userfaultfd) and runs unmanaged.
pub fn inject_child_swap_failure(fail: bool) {
    FAIL_CHILD_SWAP.store(fail, std::sync::atomic::Ordering::Relaxed);
}

/// The forked child's swap: the inherited engine, served through the child's own uffd and
/// threads (module essay). `old` are the parent's parts as the fork copied them.
fn become_own(inner: &Inner, old: &Arc<Parts>, forking: Forking) -> Result<Parts, Error> {
    if FAIL_CHILD_SWAP.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Error::Config { what: "a child's swap failed (injected)".into() });
    }
    let settings = &inner.settings;
    let (engine, source) = (old.engine.clone(), old.source.clone());
    // First of all: what is no longer mapped here must be neither registered nor written
    // by the unmanaged fallback.
    let ranges = mapped_pieces(&engine);
    if let Some(sigbus) = &old.sigbus {
        sigbus.disarm_in_child();
    }
    let handler_delivery = inner.delivery == Delivery::Handler;
    let uffd = Arc::new(settings.open_uffd(inner.delivery == Delivery::Sigbus)?);
    // Under handler delivery the regions start on a SIGBUS uffd: this thread's faults until
    // the handler thread runs (starting a thread allocates, from a heap that may be paged
    // out) are resolved in its own signal handler.
    let boot = if handler_delivery { Some(Arc::new(settings.open_uffd(true)?)) } else { None };
    let regions_uffd = boot.clone().unwrap_or_else(|| uffd.clone());
    source.rehome(regions_uffd.clone(), &uffd, settings.folio_pages)?;
    let control = Control::create()?;
    // Armed before the regions are registered, under either delivery: this thread's
    // faults from then until the delivery starts (the engine's own backend opens its
    // storage, which may touch the program's heap) are resolved here, not left to kill
    // the child with a SIGBUS nobody claims.
    let boot_dispatcher = SigbusMode::arm(engine.clone(), control.clone(), None)?;
    let mode = source.register_mode();
    register_all(&regions_uffd, &ranges, mode)?;
    engine.restore_staged_in_child(&forking.staged);
    engine.after_fork_in_child(settings.own_backend()?).map_err(Error::Engine)?;
    // The references the parent keeps for its other children are in this copy of the
    // engine too: they are the parent's to hold, not this child's. Released by the child's
    // handler thread once it runs (each costs time in proportion to the pages it holds,
    // which a child that execs at once never pays).
    old.handler.control().close_holds_in_child();
    control.release_later(engine.holds());
    if let Some((read, write)) = forking.pipe {
        drop(read);
        // Held for the life of this image: the parent keeps the slots this child may read
        // until this end (and its copies in the child's own children) is closed.
        std::mem::forget(write);
    }
    let parts = Parts::start(
        settings,
        inner.delivery,
        engine.clone(),
        source.clone(),
        uffd.clone(),
        Some(control),
    )?;
    if let Some(boot) = &boot {
        for &(start, end) in &ranges {
            let range = Range::new(start as usize, (end - start) as usize)?;
            boot.unregister(range)?;
            uffd.register(range, mode)?;
        }
        source.set_region_uffd(uffd.clone());
    }
    drop(boot_dispatcher);
    if source.protects_zero_pages() {
        for (addr, pages) in engine.zero_mapped_ranges(MmId::DEFAULT) {
            let range = Range::new(addr as usize, pages as usize * uffd::PAGE_SIZE)?;
            // A page written since the fork is protected too: its next write faults and
            // the engine makes it resident and charged, as for any zero page.
            let _ = uffd.writeprotect(range, true, Wake::DontWake);
        }
    }
    close_parents(old);
    Ok(parts)
}

/// The parts of the engine's regions mapped in this process, and the engine told of the
/// rest as unmapped. A thread of the parent may have unmapped a managed range (by a system
/// call no interposer sees) whose event the parent's handler had not applied at the fork:
/// the engine still has the region, the child's memory does not, and registering it would
/// fail.
fn mapped_pieces(engine: &engine::Engine) -> Vec<(u64, u64)> {
    // Unreadable (it never is for oneself): every region is taken as mapped, and a
    // register failure sends the child down the unmanaged path.
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return engine.region_ranges(MmId::DEFAULT);
    };
    let mapped = intervals(&maps);
    let mut pieces = Vec::new();
    for (start, end) in engine.region_ranges(MmId::DEFAULT) {
        let mut at = start;
        for &(m_start, m_end) in mapped.iter().filter(|&&(a, b)| a < end && b > start) {
            let (from, to) = (m_start.max(start), m_end.min(end));
            if from > at {
                engine.unmap_in(MmId::DEFAULT, at, from - at);
            }
            match pieces.last_mut() {
                Some((_, last_end)) if *last_end == from => *last_end = to,
                _ => pieces.push((from, to)),
            }
            at = to;
        }
        if at < end {
            engine.unmap_in(MmId::DEFAULT, at, end - at);
        }
    }
    pieces
}

/// The `[start, end)` of each private anonymous mapping of a maps file, in its (ascending)
/// order: what a managed range can still be. A file mapped over one is not (it would
/// neither register nor be the program's anonymous memory).
fn intervals(maps: &str) -> Vec<(u64, u64)> {
    let parse = |line: &str| {
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let private = fields.next()?.ends_with('p');
        let inode = fields.nth(2)?;
        let special =
            fields.next().is_some_and(|p| matches!(p, "[vdso]" | "[vvar]" | "[vsyscall]"));
        if !private || inode != "0" || special {
            return None;
        }
        Some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?))
    };
    maps.lines().filter_map(parse).collect()
}

/// Registers every range with `uffd`, or none: a failure unregisters what was, so that the
/// unmanaged fallback can write the child's memory directly.
fn register_all(uffd: &Uffd, ranges: &[(u64, u64)], mode: uffd::RegisterMode) -> Result<(), Error> {
    let range = |&(start, end): &(u64, u64)| Range::new(start as usize, (end - start) as usize);
    for (done, piece) in ranges.iter().enumerate() {
        if let Err(error) = range(piece).and_then(|r| uffd.register(r, mode).map(drop)) {
            for piece in &ranges[..done] {
                let _ = range(piece).and_then(|r| uffd.unregister(r));
            }
            return Err(error.into());
        }
    }
    Ok(())
}

/// Closes the parent's descriptors the forgotten parts hold in the child: its uffd and its
/// handler's eventfd (nothing will use those objects again).
fn close_parents(old: &Parts) {
    let _ = forking::close_raw(old.uffd.raw_fd());
    old.handler.control().close_wake_in_child();
}

/// A forked child that could not have a swap of its own: every page it inherited paged
/// out, or staged out of the parent's memory at the fork (`staged`), is brought back into
/// its memory, through no uffd at all, and it runs unmanaged, saying why. Its copy of the
/// engine then serves nothing.
fn run_unmanaged(old: &Arc<Parts>, error: &Error, staged: &engine::StagedCopy) {
    let (engine, source) = (&old.engine, &old.source);
    source.go_direct();
    engine.restore_staged_in_child(staged);
    let mut lost = 0u64;
    for (addr, pages) in engine.swapped_ranges(MmId::DEFAULT) {
        for page in 0..pages {
            let at = addr + page * uffd::PAGE_SIZE as u64;
            if engine.handle_fault_in(MmId::DEFAULT, at, false).is_err() {
                lost += 1;
            }
        }
    }
    let mut line = [0u8; 512];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ = std::io::Write::write_fmt(
        &mut cursor,
        format_args!(
            "uswap: a forked child could not start a swap of its own ({error}): its swapped \
             pages were read back and it runs unmanaged{}\n",
            if lost > 0 { " (some could not be read: they fault if touched)" } else { "" }
        ),
    );
    let len = cursor.position() as usize;
    process::write_stderr(&line[..len]);
}

#[cfg(test)]
mod tests {
    use super::intervals;

    #[test]
    fn only_private_anonymous_mappings_can_still_be_managed_ranges() {
        let maps = "\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000040000 rw-p 00000000 00:00 0 
7f0000040000-7f0000050000 r--p 00000000 08:01 1234                       /usr/lib/libc.so.6
7f0000050000-7f0000060000 rw-s 00000000 00:01 77                         /memfd:x (deleted)
7f0000060000-7f0000070000 ---p 00000000 00:00 0 
7ffd00000000-7ffd00002000 r--p 00000000 00:00 0                          [vvar]
7ffd00002000-7ffd00004000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            intervals(maps),
            vec![
                (0x55d0_c0a0_0000, 0x55d0_c0a2_1000),
                (0x7f00_0000_0000, 0x7f00_0004_0000),
                (0x7f00_0006_0000, 0x7f00_0007_0000),
            ]
        );
    }
}
