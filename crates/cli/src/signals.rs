//! `uswap run`'s signals: every catchable signal a supervisor such as `tini` forwards is
//! passed on to the program, so `uswap run` stands in for it: `kill -USR1`, a timer's ALRM,
//! a terminal's WINCH, a pipe's PIPE reach the program as they would without uswap.
//!
//! Forwarded: HUP, INT, QUIT, USR1, USR2, PIPE, ALRM, TERM, STKFLT, CONT, TSTP, TTIN, TTOU,
//! URG, XCPU, XFSZ, VTALRM, PROF, WINCH, IO, PWR and the real-time signals. Not forwarded:
//! the ones a fault raises in the process itself (SEGV, BUS, ILL, FPE, TRAP, ABRT, SYS),
//! CHLD, and KILL and STOP, which cannot be caught. A stop request (TSTP, TTIN, TTOU) stops
//! the program, then `uswap run` itself, so a shell sees the job stopped; the CONT that
//! resumes it goes on to the program.
//!
//! How: the forwarded signals and CHLD are blocked in `uswap run` before the program is
//! spawned and before the broker's threads start (the program is started with an empty
//! mask: crate::run::sys), and the main thread waits for them with `sigwaitinfo`,
//! reaping the program, and the tree's orphans re-parented to `uswap run`, at each CHLD:
//! no signal is lost between two waits, and none is handled in a signal handler.
//!
//! `uswap run` killed by SIGKILL forwards nothing: the program goes on, managed by the engine
//! inside it; the idle pollers' process dies with `uswap run` (`PR_SET_PDEATHSIG`); the run
//! directory goes with the run's last member (crate::rundir). docs/RUN.md, "Signals".

#![allow(unsafe_code)]

use anyhow::{bail, Result};

/// The signals forwarded (module essay).
pub fn forwarded() -> Vec<libc::c_int> {
    let mut signals = vec![
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGSTKFLT,
        libc::SIGCONT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGURG,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGWINCH,
        libc::SIGIO,
        libc::SIGPWR,
    ];
    signals.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    signals
}

/// The forwarded signals and CHLD, blocked in this thread (module essay) for the rest of
/// its life: one that arrives after the program ended waits, unhandled, while `uswap run`
/// prints its summary and exits with the program's status.
pub struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    /// Blocks them. Call before spawning the program and before starting any thread that
    /// must not take them (threads started later inherit the mask).
    pub fn block() -> Signals {
        // SAFETY: (1) sigsets are plain data, initialised by sigemptyset; (2) the mask is
        // this thread's.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in forwarded().into_iter().chain([libc::SIGCHLD]) {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals { set }
        }
    }

    /// Waits until process `pid` (the program, a child of this process) ends, forwarding
    /// every signal that arrives meanwhile, and reaping every other child that ends (the
    /// tree's orphans, re-parented to `uswap run`, a child subreaper); the program's wait
    /// status and resource usage.
    ///
    /// # Errors
    /// `wait4` or `sigwaitinfo` failing otherwise than by EINTR.
    pub fn wait(&self, pid: libc::pid_t) -> Result<(libc::c_int, libc::rusage)> {
        loop {
            let mut status = 0;
            // SAFETY: rusage is plain data, filled by the kernel.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: waits for any child of ours with valid out-pointers.
            let r = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
            if r == pid {
                return Ok((status, usage));
            }
            if r > 0 {
                continue; // an orphan of the tree (or the pollers' process), reaped
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                bail!("waiting for the program: {}", std::io::Error::last_os_error());
            }
            // SAFETY: waits for one of the blocked signals in `set` (no siginfo wanted).
            let signal = unsafe { libc::sigwaitinfo(&self.set, std::ptr::null_mut()) };
            if signal < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                bail!("waiting for signals: {}", std::io::Error::last_os_error());
            }
            if signal == libc::SIGCHLD {
                continue;
            }
            // SAFETY: signals our own child (kill takes integers).
            unsafe { libc::kill(pid, signal) };
            if matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
                // SAFETY: stops this process, as the stop request would have without uswap.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
        }
    }
}
