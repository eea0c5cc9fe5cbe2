//! The constructor and destructor (`.init_array`, `.fini_array`) and the start-up order of
//! the crate essay.
//!
//! A shim that cannot start in a process `uswap run` asked it to manage says why on
//! stderr, in one line, and ends the process with status 125 before the program's `main`:
//! a program silently running unmanaged would break the budget it was given. One
//! exception: an image that can no longer have a userfaultfd at all (`/dev/userfaultfd`
//! lost its permission or went away after `uswap run` checked it, typically before an
//! exec in a running job) runs unmanaged, not silently: a warning line, and a count in the
//! run's summary.

#![allow(unsafe_code)]

use crate::hooks::{ShimHooks, Started};
use crate::maps::{self, Exclusions};
use frontend::{CompressorKind, Delivery, HandlerOptions, Uswap};
use runstat::env::{self, RunConfig};
use runstat::settings::{self, FileCache, ZeroPages};
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};
use uffd::PageMap;

/// The running shim of this process.
#[derive(Debug)]
struct State {
    swap: Uswap,
    hooks: Arc<ShimHooks>,
    /// The process the swap serves (a forked child's own, once its swap runs).
    pid: std::sync::atomic::AtomicI32,
    /// This image's shared lock on the run directory (`uswap run`'s rundir.rs: the last
    /// member out removes it).
    run_lock: Option<fds::Fd>,
    /// The image that took `run_lock`.
    joined_pid: i32,
    run_dir: String,
}

/// The registry's name for the run directory's lock.
static RUN_LOCK: fds::Kind = fds::Kind {
    what: "run directory lock",
    if_lost: "the run directory may be left for a later uswap run to remove",
    keep: false,
};

/// Joins the run: a shared lock on the run directory's lock file, held for this image's
/// life; `None` without one.
fn join_run(config: &RunConfig) -> Option<fds::Fd> {
    let path = std::path::Path::new(&config.run_dir).join(env::RUN_LOCK);
    let path = std::ffi::CString::new(path.into_os_string().into_encoded_bytes()).ok()?;
    let fd = fds::Fd::open(&path, libc::O_RDONLY | libc::O_NOFOLLOW, 0, &RUN_LOCK).ok()?;
    // SAFETY: flock on a descriptor the registry's guard holds.
    let locked = fd.with(|raw| unsafe { libc::flock(raw.as_raw_fd(), libc::LOCK_SH) }) == 0;
    locked.then_some(fd)
}

/// Leaves the run: the directory goes if no other member is in it (`uswap run` killed).
fn leave_run(state: &State) {
    let Some(lock) = &state.run_lock else { return };
    // A forked child shares the parent's lock (one open file, one flock): its exclusive
    // request would convert the parent's own lock and succeed while the parent runs. Only
    // the image that joined leaves; a child that outlives it leaves the directory to a
    // later run, which removes directories whose members are all gone.
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != state.joined_pid {
        return;
    }
    let exclusive = |raw: std::os::fd::BorrowedFd<'_>| {
        // SAFETY: flock on a descriptor the registry's guard holds.
        unsafe { libc::flock(raw.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }
    };
    let last = lock.with(exclusive) == 0;
    if last {
        let _ = std::fs::remove_dir_all(&state.run_dir);
    }
}

static STATE: OnceLock<State> = OnceLock::new();

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;

/// Writes a line to stderr. Not eprintln!: a closed stderr would be a panic, not the exit
/// status the caller means.
fn say(line: &str) {
    // SAFETY: writes the line's initialized bytes to stderr.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

extern "C" fn init() {
    // The engine's threads start with every asynchronous signal blocked (a thread inherits
    // its creator's mask): a process-directed signal goes to a thread of the program, never
    // to the fault handler or the reclaimer, which would run the program's handler there,
    // and a handler that touched a swapped page on the fault handler's own thread would
    // wait for itself. The faults' signals (SIGBUS, SIGSEGV, ...) stay unblocked.
    let mask = uffd::sys::forking::block_async_signals();
    let started = start();
    uffd::sys::forking::restore_signals(&mask);
    match started {
        Ok(()) => {}
        Err(Refusal::Unmanaged(message)) => say(&format!("uswap: warning: {message}\n")),
        Err(Refusal::Fatal(message)) => {
            say(&format!("uswap: {message}\n"));
            // SAFETY: ends the process at once; nothing of the program has run.
            unsafe { libc::_exit(env::START_FAILED) };
        }
    }
}

/// Why the shim does not manage this image.
enum Refusal {
    /// The image cannot run as asked: it ends with [`env::START_FAILED`].
    Fatal(String),
    /// No userfaultfd that traps kernel-mode faults can be had any more (the device lost
    /// its permission or went away since `uswap run` checked): the image runs unmanaged,
    /// said in one line and counted in the run's summary. The alternative, ending it,
    /// would kill a program midway through its work (an exec in a running job), and a
    /// userfaultfd is what keeps pages out, so an unmanaged image loses none.
    Unmanaged(String),
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal::Fatal(message)
    }
}

/// The errors of [`frontend::Builder::build`] that mean no usable userfaultfd for this user now.
fn lost_userfaultfd(error: &frontend::Error) -> bool {
    matches!(
        error,
        frontend::Error::Kernel(
            uffd::Error::NoKernelFaultPermission { .. }
                | uffd::Error::Denied { .. }
                | uffd::Error::Blocked { .. }
        )
    )
}

/// Leaves an image that cannot have a userfaultfd unmanaged: the shim taken out of the
/// environment (nothing below is managed either), a stats file that counts it, and the
/// warning line.
fn run_unmanaged(config: &RunConfig, pid: i32, error: &frontend::Error) -> Refusal {
    leave(config);
    let mut stats = runstat::StatsFile::default();
    stats.set("shim_unmanaged_images", 1);
    let dir = std::path::Path::new(&config.run_dir);
    let _ = std::fs::write(
        dir.join(format!("final-{pid}-{}", crate::files::unique_ns())),
        stats.to_text(),
    );
    let program = std::env::args().next().unwrap_or_default();
    Refusal::Unmanaged(format!(
        "{program} (pid {pid}) runs unmanaged, outside the budget: userfaultfd: {error}"
    ))
}

extern "C" fn fini() {
    let Some(state) = STATE.get() else { return };
    // A forked child whose swap could not start has none of its own: nothing to report.
    if let Ok(engine) = state.swap.engine() {
        state.hooks.finish(&engine);
    }
    leave_run(state);
}

/// In a forked child, on its only thread, once its swap runs on its own uffd and threads
/// (the frontend's fork handler, through the hooks): discovery, the interposed calls and
/// the stats file follow the child's own swap.
pub fn forked_child() {
    let Some(state) = STATE.get() else { return };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    state.pid.store(pid, std::sync::atomic::Ordering::SeqCst);
    let (Ok(uffd), Ok(control), Ok(source)) =
        (state.swap.uffd(), state.swap.control(), state.swap.source())
    else {
        return;
    };
    // The child's file thread, before its own mappings are noted just below: its stack is
    // one of them (src/files.rs).
    crate::files::start();
    let Some(mut exclusions) = state.hooks.exclusions() else { return };
    if let Ok(engine) = state.swap.engine() {
        exclude_own_swap(&engine, &mut exclusions);
    }
    // The parent's pagemap descriptor reads the parent's page tables.
    let Ok(pagemap) = PageMap::open_self() else { return };
    let register_mode = source.register_mode();
    let started =
        Started { uffd, register_mode, control: control.clone(), source, exclusions, pagemap, pid };
    state.hooks.restart_in_child(started);
    crate::interpose::install(control, pid);
    crate::interpose::reset_counters();
    crate::io::reset_counters();
}

/// Adds to a forked child's `exclusions` what its own swap mapped since the fork (its
/// threads' stacks, its staging lanes, its signal stacks): every mapping the child has now
/// that `engine` does not manage. Discovery must never adopt those (an engine thread
/// faulting on its own stack waits for itself); the parent's are in the exclusions it
/// inherited. Program memory its parent had not adopted yet at the fork stays unmanaged
/// in the child (the interposed `mmap` waits for adoption, so that is rare).
///
/// Context: the child's only program thread, in its fork hook; allocates from the arena.
fn exclude_own_swap(engine: &engine::Engine, exclusions: &mut Exclusions) {
    let mut text = Vec::with_capacity(1 << 16);
    if maps::read(&mut text).is_err() {
        return;
    }
    let mut managed = Vec::new();
    maps::set_from(&mut managed, &engine.region_ranges(engine::region::MmId::DEFAULT));
    managed.sort_unstable();
    let mut outside = Vec::new();
    for (start, end) in maps::all_ranges(&text) {
        maps::subtract(&managed, start, end, &mut outside);
    }
    for (start, end) in outside {
        exclusions.add(start, end);
    }
}

/// Set once the engine's set-up is over and the program's memory may be managed.
static MANAGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// 1 once this process's shim manages the program's memory (its engine threads are all
/// started, and must not call `malloc` from now on), else 0. Exported for checkers: the
/// test suite's `malloc` interposer counts the calls made on the engine's threads (named
/// `uswap-*`) after this says 1 (crates/cli/tests/run.rs). Async-signal-safe: one load.
#[no_mangle]
pub extern "C" fn uswap_shim_managing() -> libc::c_int {
    libc::c_int::from(MANAGING.load(std::sync::atomic::Ordering::SeqCst))
}

/// Brings in the first managed pages of a system call's buffer that failed with EFAULT
/// under SIGBUS delivery, at most `*max_pages` ([`frontend::bring_in`]); false when no page of
/// it is managed.
pub fn bring_in(addr: usize, len: usize, write: bool, max_pages: &mut u64) -> bool {
    // The control block the interposed calls hold, which a forked child reaches too
    // (`Uswap::control` is the owner's only).
    let Some(state) = STATE.get() else { return false };
    let (Ok(engine), Ok(control)) = (state.swap.engine(), state.swap.control()) else {
        return false;
    };
    frontend::bring_in(&engine, &control, addr as u64, len as u64, write, max_pages)
}

/// Lets the engine catch up with ranges registered but not yet regions (the handler's
/// passes: [`frontend::handler::Control::wait_passes`]), at most `timeout`; at once outside the
/// process that runs the engine.
/// Returns false where there is nothing to wait for (outside that process, or no engine).
pub fn catch_up(timeout: std::time::Duration) -> bool {
    let Some(state) = STATE.get() else { return false };
    state.swap.control().is_ok_and(|control| control.wait_passes(timeout))
}

/// The most pages one retry of a system call brings in: 64 (256 KiB), and no more than a
/// quarter of the budget, so that they stay resident until the call copies them.
pub fn bring_in_pages() -> u64 {
    let budget = STATE.get().and_then(|s| s.swap.engine().ok()).map(|e| e.budget_bytes());
    (budget.unwrap_or(0) / uffd::PAGE_SIZE as u64 / 4).clamp(1, 64)
}

/// Around the program's `mlockall(MCL_CURRENT)` (interpose.rs): before the call, the
/// engine stops reclaiming (`Locking`); once it locked, the engine's staging areas and the
/// arena are unlocked again (the arena's unused part, mapped with no access, is then not
/// counted as locked) and the engine told (`Locked`); after `munlockall`, or a call that
/// failed, it reclaims again (`Unlocked`).
pub fn program_locked_all(state: engine::AllLocked) {
    let Some(state_now) = STATE.get() else { return };
    if state == engine::AllLocked::Locked {
        if let Ok(source) = state_now.swap.source() {
            source.unlock_lanes();
        }
        if let Some((start, end)) = crate::ARENA.range() {
            // SAFETY: munlock only clears the lock state of the shim's own reservation.
            unsafe { libc::munlock(start as *const libc::c_void, end - start) };
        }
    }
    if let Ok(engine) = state_now.swap.engine() {
        engine.set_all_locked(state);
    }
}

/// Sets `MADV_NOHUGEPAGE` on a range about to be managed (raw: may run anywhere).
pub fn no_huge_pages(start: usize, len: usize) {
    // SAFETY: advice only; an unmapped range is ENOMEM, ignored.
    unsafe { libc::syscall(libc::SYS_madvise, start, len, libc::MADV_NOHUGEPAGE) };
}

/// The program break now (`brk(0)` reads it and moves nothing; glibc's cached copy is
/// left alone).
pub fn program_break() -> usize {
    // SAFETY: brk with 0 asks for the current break and never moves it.
    unsafe { libc::syscall(libc::SYS_brk, 0usize) as usize }
}

fn start() -> Result<(), Refusal> {
    if std::env::var_os(env::RUN_DIR).is_none() {
        return Ok(()); // loaded by hand, not by uswap run: do nothing
    }
    let config = RunConfig::from_env(|name| std::env::var(name).ok())?;
    // SAFETY: getppid/getpid have no preconditions.
    let (ppid, pid) = unsafe { (libc::getppid(), libc::getpid()) };
    // A member of the run's tree, or a process outside it that inherited the environment
    // (runstat's env protocol): the broker decides.
    let Ok(joined) = crate::member::join(&config) else {
        leave(&config);
        return Ok(());
    };
    crate::member::install_fork_hook();
    crate::io::resolve_early();
    retire_previous_image(&config, pid);
    let run_lock = join_run(&config);
    install_panic_hook();
    // Before the swap registers its own fork handlers, which allocate: prepare handlers
    // run in the reverse order, so the arena's locks are taken after theirs are done.
    install_arena_fork_handlers()?;
    // The thread-local registry's key, made now among the process's first (src/tls.rs).
    crate::tls::init()
        .ok_or_else(|| "cannot make a pthread key for thread-local destructors".to_string())?;
    // Second references to the userfaultfds and the swap file, from which one a program
    // closes by a direct system call is taken back (crate fds); without io_uring, a lost
    // descriptor is said and stays lost.
    let _ = fds::keep();
    let hooks = Arc::new(ShimHooks::new(config.clone())?);
    let swap_file = config.swap_file.as_ref().map(|path| {
        // CMD's process has the path it was given, every other member one of its own.
        if ppid as u32 == config.parent_pid {
            path.clone()
        } else {
            format!("{path}.{pid}")
        }
    });
    let swap = match build(&config, joined.share, swap_file.as_deref(), hooks.clone()) {
        Ok(swap) => swap,
        Err(Built::Lost(error)) => return Err(run_unmanaged(&config, pid, &error)),
        Err(Built::Failed(message)) => return Err(Refusal::Fatal(message)),
    };
    // The shim's file thread, started before the engine's mappings are noted: its stack
    // is one of them (src/files.rs).
    crate::files::start();
    let text = settled_maps()?;
    let exclusions = exclusions(&text);
    // glibc grows the brk heap by its internal sbrk, which only the periodic scan sees;
    // pages touched in a growth before that scan are adopted late, over the budget. Grown
    // 32 MiB at a time, the heap is registered ahead of the program's touches.
    // SAFETY: mallopt only sets a malloc parameter (this is the program's thread, before
    // its main, where malloc may be used). Set after the exclusions are taken: the
    // engine's own start-up allocations must not pad the heap it leaves unmanaged.
    unsafe { libc::mallopt(libc::M_TOP_PAD, HEAP_TOP_PAD_BYTES) };
    let pagemap = PageMap::open_self().map_err(|e| format!("cannot open the pagemap: {e}"))?;
    let uffd = swap.uffd().map_err(|e| e.to_string())?.clone();
    let control = swap.control().map_err(|e| e.to_string())?.clone();
    let source = swap.source().map_err(|e| e.to_string())?.clone();
    let register_mode = source.register_mode();
    let started =
        Started { uffd, register_mode, control: control.clone(), source, exclusions, pagemap, pid };
    hooks.start(started);
    let run_dir = config.run_dir.clone();
    let _ = STATE.set(State {
        swap,
        hooks,
        pid: std::sync::atomic::AtomicI32::new(pid),
        run_lock,
        joined_pid: pid,
        run_dir,
    });
    MANAGING.store(true, std::sync::atomic::Ordering::SeqCst);
    if config.sigbus_delivery() {
        uffd::sigbus::run_on_alternate_stacks()
            .map_err(|e| format!("cannot run the SIGBUS handler on signal stacks: {e:?}"))?;
        crate::altstack::install_for_this_thread();
        crate::io::SIGBUS_DELIVERY.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    crate::interpose::install(control, pid);
    crate::interpose::request_scan();
    Ok(())
}

/// The shim's allocator is fork-safe as glibc's malloc is: its locks are taken before the
/// fork and released after it, in both processes.
fn install_arena_fork_handlers() -> Result<(), String> {
    extern "C" fn prepare() {
        crate::ARENA.lock_for_fork();
    }
    extern "C" fn after() {
        crate::ARENA.unlock_after_fork();
    }
    // SAFETY: three plain `extern "C" fn()`s with static lifetime.
    let ret = unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
    if ret != 0 {
        return Err(format!("cannot register the allocator's fork handlers (errno {ret})"));
    }
    Ok(())
}

/// A panic in the shim ends the process at once with SIGABRT, after one line on stderr.
///
/// Why not std's hook and unwinding: both walk the loaded objects (`dl_iterate_phdr`, for
/// the backtrace and for the unwinder's frame tables), and the loader keeps those lists in
/// the program's heap, which is managed memory. On the handler thread a touch of an
/// evicted page there is a fault only that thread can serve: the process hung for ever
/// instead of reporting the panic (postmortem: a remap assertion on `uswap-uffd` in the
/// 1 GiB Python run of crates/cli/tests/run.rs). Abort loses nothing: pages are never
/// mapped half-done, and the parent reports the signal.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write;
        let mut line = [0u8; 1024];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("?");
        let _ = write!(cursor, "uswap: internal error on thread {name}: {info}");
        let len = (cursor.position() as usize).min(line.len() - 1);
        line[len] = b'\n';
        // SAFETY: writes `len + 1` initialized bytes of a live stack buffer to stderr.
        unsafe { libc::write(2, line.as_ptr().cast(), len + 1) };
        std::process::abort();
    }));
}

/// Why [`build`] failed.
enum Built {
    /// No usable userfaultfd ([`lost_userfaultfd`]).
    Lost(frontend::Error),
    /// Anything else, said in one line.
    Failed(String),
}

impl From<String> for Built {
    fn from(message: String) -> Built {
        Built::Failed(message)
    }
}

/// Builds the swap for `config` under the share the broker gave (the frontend's library
/// API, as libuswap.so does), its swap file at `swap_file` or in the run directory, on
/// the tree's swap space.
fn build(
    config: &RunConfig,
    share: u64,
    swap_file: Option<&str>,
    hooks: Arc<ShimHooks>,
) -> Result<Uswap, Built> {
    let options = HandlerOptions {
        trim: false,
        resync: true,
        hooks: Some(hooks.clone()),
        // The builder turns it off under SIGBUS delivery and with reclaimer CPUs given.
        follow: config.handler_follows(),
    };
    // The budget is the program's, the whole process's resident set: what is not the
    // engine's own charge (the loader, the libraries, this shim now; whatever the program
    // pages in outside the managed set later) is counted against it as the outside charge,
    // set below and then every scan period (`hooks::charge_the_rest`).
    let mut builder = Uswap::builder()
        .budget_bytes(share)
        .swap_size_bytes(config.swap_size_bytes)
        .swap_quota(Arc::new(crate::member::TreeQuota))
        .swap_file_uncached(config.swap_file_cache == FileCache::Drop)
        .swap_file_keep_free(env::SWAP_FILE_KEEP_FREE_BYTES)
        .folio_order(config.folio_order)
        .large_folios(match config.large_folios {
            settings::LargeFolios::Always => engine::LargeFolios::Always,
            settings::LargeFolios::Sequential => engine::LargeFolios::Sequential,
        })
        .delivery(if config.sigbus_delivery() { Delivery::Sigbus } else { Delivery::Handler })
        .require_kernel_faults(!config.sigbus_delivery())
        .protect_zero_pages(config.zero_pages == ZeroPages::Protected)
        .encrypt(config.encrypts())
        .handler_options(options);
    if let Some(text) = &config.reclaim_cpus {
        let cpus = runstat::cpus::parse_list(text, libc::CPU_SETSIZE as usize)
            .map_err(|e| format!("the run's reclaim_cpus: {e}"))?;
        builder = builder.reclaimer_cpus(cpus);
    }
    builder = match (&config.far, swap_file) {
        // Resolved here, on the program's thread before its main: the resolver may malloc.
        (Some(url), _) => {
            let far = frontend::FarConfig::parse(url, config.far_replicas as usize)
                .map_err(|e| format!("--far {e}"))?;
            // Its keys are deleted by `uswap run` once the run is over (far's ledger).
            far::set_ledger(&crate::member::TREE_LEDGER);
            builder.far(far)
        }
        (None, Some(path)) => builder.swap_file(path, config.swap_size_bytes),
        (None, None) => builder.swap_dir(&config.run_dir),
    };
    builder = match config.zswap.as_str() {
        "off" => builder.no_pool(),
        kind => {
            let kind: CompressorKind = kind.parse().map_err(|e| format!("--zswap {kind}: {e}"))?;
            let builder = builder.compressor(kind).pool_percent(config.pool_percent);
            match config.pool_bytes {
                Some(bytes) => builder.separate_pool(bytes),
                None => builder,
            }
        }
    };
    let swap = match builder.build() {
        Ok(swap) => swap,
        Err(e) if lost_userfaultfd(&e) => return Err(Built::Lost(e)),
        Err(e) => return Err(Built::Failed(format!("cannot start the engine: {e}"))),
    };
    if let Ok(engine) = swap.engine() {
        crate::member::apply(&engine, share);
        let _ = crate::hooks::charge_the_rest(&engine);
        if hooks.recording() {
            // Set before any region exists: no page-out can be missed.
            engine.set_page_out_hook(hooks.clone()).map_err(|e| Built::Failed(e.to_string()))?;
        }
    }
    if let Some(path) = swap_file {
        // The backend holds the file open: its name is not needed, and gone now it cannot
        // outlive the program (nor collide with an exec'd image's own).
        let _ = std::fs::remove_file(path);
    }
    Ok(swap)
}

/// /proc/self/maps once the engine's threads have started: unchanged for [`SETTLE`]
/// outside the shim's arena (a thread's first steps may map memory: a malloc arena of its
/// own, if anything in it calls glibc's malloc), at most [`SETTLE_MAX`]. The arena is left
/// out of the comparison: the engine's threads allocate from it as they start, each
/// allocation that grows it changes its lines, and all of it is excluded anyway
/// ([`exclusions`]).
fn settled_maps() -> Result<Vec<u8>, String> {
    let begin = std::time::Instant::now();
    let arena = crate::ARENA.range();
    let mut text = Vec::with_capacity(1 << 16);
    let (mut seen, mut last) = (Vec::with_capacity(1 << 16), Vec::with_capacity(1 << 16));
    let mut stable_since = std::time::Instant::now();
    loop {
        maps::read(&mut text).map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
        seen.clear();
        maps::lines_outside(&text, arena, &mut seen);
        if seen != last {
            stable_since = std::time::Instant::now();
            std::mem::swap(&mut seen, &mut last);
        } else if stable_since.elapsed() >= SETTLE || begin.elapsed() >= SETTLE_MAX {
            return Ok(text);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// How much glibc grows the brk heap by beyond a request (see `start`).
const HEAP_TOP_PAD_BYTES: libc::c_int = 32 << 20;

/// How long the mappings must stay unchanged after set-up: the engine's threads are
/// running by then (the handler's start is awaited; the reclaimer and the copy-on-write
/// breaker map nothing outside the arena as they start), so this only covers a mapping
/// nothing is known to make. Every managed process pays it once at start.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(2);
/// The longest the shim waits for that.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// Every mapping that exists once the engine runs: what the loader, libc and other
/// libraries' constructors made (libc's and ld.so's own state: malloc's main arena, the
/// TLS generation every TLS access of the shim reads), the heap up to today's break (it
/// holds the engine threads' TLS vectors, which glibc allocates with malloc), and all the
/// engine made (its threads' stacks and malloc arenas, staging, the shim's arena). The
/// program has not run yet: what it maps from now on is managed.
fn exclusions(after: &[u8]) -> Exclusions {
    let mut exclusions = Exclusions::default();
    for (start, end) in maps::all_ranges(after) {
        exclusions.add(start, end);
    }
    if let Some((start, end)) = crate::ARENA.range() {
        exclusions.add(start, end);
    }
    exclusions
}

/// An image that exec'd left its live stats file: it is final now.
fn retire_previous_image(config: &RunConfig, pid: i32) {
    let dir = std::path::Path::new(&config.run_dir);
    let live = dir.join(format!("live-{pid}"));
    if live.exists() {
        let _ =
            std::fs::rename(&live, dir.join(format!("final-{pid}-{}", crate::files::unique_ns())));
    }
}

/// Not a member of the run (the broker refused it, or is gone): run unmanaged, and take
/// the shim and the protocol out of the environment, so nothing below tries either.
fn leave(config: &RunConfig) {
    if let Some(preload) = std::env::var_os("LD_PRELOAD") {
        match env::preload_without(&preload.to_string_lossy(), &config.preload_path) {
            Some(rest) => std::env::set_var("LD_PRELOAD", rest),
            None => std::env::remove_var("LD_PRELOAD"),
        }
    }
    for name in env::ALL {
        std::env::remove_var(name);
    }
}
