//! Spawning and waiting: the one place `uswap run` needs `unsafe` (fork for the pollers,
//! getrusage for the tree's CPU time, kcmp and the swap-space counter for the broker).
//!
//! `uswap run` is a child subreaper: a descendant whose parent exits is re-parented to it
//! rather than to init, so the whole tree stays below it (the broker's membership test
//! walks parent links) and it reaps those orphans while CMD runs.

#![allow(unsafe_code)]

use super::{Plan, RunArgs};
use anyhow::{bail, Context, Result};
use frontend::idle::{IdlePage, IdleStats, Pollers};
use runstat::env::RunConfig;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

/// How the program ended.
#[derive(Debug)]
pub struct Outcome {
    /// Its exit code, or 128 + the signal.
    pub status: i32,
    /// Its peak resident set (ru_maxrss).
    pub maxrss_bytes: u64,
    /// CPU time (user + system) of every process of the tree waited for so far: CMD, the
    /// descendants their parents waited for, the orphans this process reaped.
    pub children_cpu_ns: u64,
}

/// `GLIBC_TUNABLES` with glibc's restartable sequences off, for SIGBUS delivery. The
/// kernel writes each thread's `struct rseq` (in its thread control block, in managed
/// memory: the top of its stack) on the way back to user mode; under SIGBUS delivery a
/// swapped page there is a fault the kernel cannot take, and it kills the process with
/// SIGSEGV (`si_code` SI_KERNEL). Without rseq, `sched_getcpu` asks the kernel instead.
pub fn without_rseq(tunables: Option<String>) -> String {
    match tunables {
        Some(old) if !old.is_empty() => format!("{old}:glibc.pthread.rseq=0"),
        _ => "glibc.pthread.rseq=0".to_string(),
    }
}

/// Spawns the program with the shim, forwards signals to it (`signals`, blocked before
/// the broker's threads started), waits.
pub fn spawn_and_wait(
    plan: &Plan,
    config: &RunConfig,
    run: &RunArgs,
    stats_out: Option<std::fs::File>,
    signals: crate::signals::Signals,
) -> Result<Outcome> {
    let (program, args, argv0) = (&plan.program, &plan.cmd[1..], &plan.cmd[0]);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", config.preload_path),
        _ => config.preload_path.clone(),
    };
    let mut command = Command::new(program);
    std::os::unix::process::CommandExt::arg0(&mut command, argv0);
    command.args(args).env("LD_PRELOAD", preload).envs(config.to_env());
    if config.sigbus_delivery() {
        command.env("GLIBC_TUNABLES", without_rseq(std::env::var("GLIBC_TUNABLES").ok()));
    }
    // The program starts with no signal blocked, as it would without uswap: the mask is
    // kept across exec, and this thread blocks every forwarded signal and CHLD (std's
    // spawn passes the mask on as it is). A shell given them blocked never woke from
    // `wait` for a job it put in the background, nor died of the TERM forwarded to it.
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // async-signal-safe call (sigprocmask with a set on the stack); it allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        })
    };
    let child = command.spawn().with_context(|| format!("cannot start {}", program.display()))?;
    let pid = child.id() as libc::pid_t;
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let reporter = run.stats_every.filter(|s| *s > 0.0).map(|secs| {
        let (dir, to, done) = (PathBuf::from(&config.run_dir), stats_out, done.clone());
        let (budget, every) = (config.budget_bytes, Duration::from_secs_f64(secs));
        std::thread::spawn(move || super::live::report(dir, budget, every, to, &done))
    });
    let outcome = wait(&signals, pid);
    done.store(true, SeqCst);
    if let Some(reporter) = reporter {
        let _ = reporter.join();
    }
    outcome
}

/// The local time of day, `HH:MM:SS` (the --stats-every blocks' heading).
pub fn time_of_day() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: `tm` holds integers and one pointer (`tm_zone`), all valid as zeros.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r writes only `tm` and,
    // unlike localtime, uses no static buffer, so it is safe beside other threads.
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return format!("{:02}:{:02}:{:02}", now / 3600 % 24, now / 60 % 60, now % 60);
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// The idle pollers' process ([`super::start_pollers`]).
#[derive(Debug)]
pub struct PollerProcess {
    pid: libc::pid_t,
    page: std::sync::Arc<IdlePage>,
}

impl PollerProcess {
    /// The pollers' process.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Stops the pollers, waits for their process, and returns their counters.
    pub fn stop(mut self) -> IdleStats {
        self.halt();
        self.page.stats()
    }

    fn halt(&mut self) {
        if self.pid == 0 {
            return;
        }
        self.page.stop();
        let mut status = 0;
        // SAFETY: waits for our own child; EINTR is retried.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        self.pid = 0;
    }
}

/// A run that fails after the pollers started (the program cannot be spawned) stops
/// them too.
impl Drop for PollerProcess {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Forks the pollers' process: a new session (so a new autogroup, given nice 19), killed
/// with this process (`PR_SET_PDEATHSIG`), running [`Pollers`] on `page` until it is
/// stopped. Refused (an internal error) if this process has other threads already: a
/// fork would copy their locks, not them.
pub fn fork_pollers(
    page: std::sync::Arc<IdlePage>,
    cpus: &[usize],
    window: Duration,
) -> Result<PollerProcess> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    if threads != 1 {
        bail!("uswap run has {threads} threads before the program starts (expected 1)");
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: this process has one thread (checked above), so the child's copy of every
    // lock is consistent; the child only starts threads and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(PollerProcess { pid, page });
    }
    // The child from here on.
    // SAFETY: prctl with plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // SAFETY: _exit ends this child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) }; // the parent is already gone
    }
    // None of uswap run's descriptors stays open here: among them is the run
    // directory's lock, whose shared flock (one open file) this child would hold after
    // uswap run is killed, until it is scheduled to die at nice 19; the program's exit
    // would then not find itself the run's last member, and leave the directory.
    // SAFETY: close_range with plain integer arguments; nothing here uses those numbers.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    // SAFETY: setsid has no preconditions (this child leads no process group).
    unsafe { libc::setsid() };
    // Best effort: without autogroups (or /proc) the session alone changes nothing.
    let _ = std::fs::write("/proc/self/autogroup", "19");
    let code = match Pollers::spawn(page, cpus, window) {
        Ok(pollers) => {
            pollers.join();
            0
        }
        Err(_) => 1,
    };
    // SAFETY: as above: no destructor of the parent's objects runs in this copy.
    unsafe { libc::_exit(code) }
}

/// Waits for CMD (`pid`), reaping the orphans re-parented to this subreaper meanwhile and
/// forwarding the signals that arrive (crate::signals).
fn wait(signals: &crate::signals::Signals, pid: libc::pid_t) -> Result<Outcome> {
    let (status, usage) = signals.wait(pid)?;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let maxrss_bytes = usage.ru_maxrss as u64 * 1024;
    Ok(Outcome { status: code, maxrss_bytes, children_cpu_ns: children_cpu_ns() })
}

/// CPU time of the children waited for, in nanoseconds (`RUSAGE_CHILDREN`).
fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain data, filled by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// Whether processes `a` and `b` share one address space (a `vfork` child before its
/// exec shares its parent's: its resident set is its parent's, not more). `kcmp(2)`.
pub fn same_mm(a: u32, b: u32) -> bool {
    const KCMP_VM: libc::c_int = 1;
    // SAFETY: kcmp compares kernel objects of two processes; integer arguments only.
    unsafe { libc::syscall(libc::SYS_kcmp, a as libc::pid_t, b as libc::pid_t, KCMP_VM, 0, 0) == 0 }
}

/// Words of a file mapped shared and writable: the tree's swap-space counter, which the
/// members change with atomics from their own processes.
#[derive(Debug)]
pub struct SharedWords {
    at: std::ptr::NonNull<u64>,
    words: usize,
}

// SAFETY: the mapping is only ever accessed through atomics (`SharedWords::word`).
unsafe impl Send for SharedWords {}

impl SharedWords {
    /// Maps the first `words` words of `file` (at least that long).
    ///
    /// # Errors
    /// The mapping fails.
    pub fn map(file: &std::fs::File, words: usize) -> Result<SharedWords> {
        use std::os::fd::AsFd;
        let prot = rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE;
        // SAFETY: a new shared mapping of an open file; nothing is replaced.
        let at = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                words * 8,
                prot,
                rustix::mm::MapFlags::SHARED,
                file.as_fd(),
                0,
            )
        }
        .context("mapping the swap-space counter")?;
        let at = std::ptr::NonNull::new(at.cast::<u64>()).context("mmap returned null")?;
        Ok(SharedWords { at, words })
    }

    /// Word `index`.
    ///
    /// # Panics
    /// For an index past the mapping.
    pub fn word(&self, index: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(index < self.words, "word {index} of {}", self.words);
        // SAFETY: in bounds (asserted), 8-aligned (a mapping starts on a page), live until
        // drop; every access, here and in the members, is atomic.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.at.as_ptr().add(index)) }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping `map` made; no reference from `word` outlives self.
        let _ = unsafe { rustix::mm::munmap(self.at.as_ptr().cast(), self.words * 8) };
    }
}
