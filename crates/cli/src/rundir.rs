//! `uswap run`'s private run directory (0700, in $TMPDIR): the shim's stats files, the
//! default swap file (unlinked at once), the idle pollers' page, and the lock that says
//! who is still in the run.
//!
//! **Members.** Every process of a run holds a shared `flock` on the directory's lock file
//! (runstat's `RUN_LOCK`) for as long as it is in it: `uswap run` itself, and each managed
//! image of the program (the shim takes its own when it starts). Whoever leaves last
//! removes the directory: a member leaving takes the lock exclusively, without waiting,
//! and only that succeeds when no one else holds it. So `uswap run` killed by SIGKILL
//! leaves the program running, managed by its in-process engine, and the program's exit
//! removes the directory; a program that ended first leaves it to `uswap run`.
//!
//! **Sweeping.** A run whose members all died without leaving (all killed) leaves its
//! directory: each `uswap run` removes, as it starts, the `uswap-run-PID-*` directories of
//! the temporary directory whose creator (PID) is gone and whose lock no one holds.
//!
//! A forked child of the program holds its parent's lock (the same open file, inherited):
//! the directory outlives such children until they exit or exec.

#![allow(unsafe_code)]

use anyhow::{bail, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The private run directory and `uswap run`'s shared lock on it (module essay).
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    lock: File,
}

/// The prefix of every run directory's name.
const PREFIX: &str = "uswap-run-";

impl RunDir {
    /// Makes a fresh run directory in the temporary directory, with its lock file held
    /// shared.
    ///
    /// # Errors
    /// The directory or its lock file cannot be made.
    pub fn create() -> Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("{PREFIX}{}-{nanos:x}-{attempt}", std::process::id());
            let path = base.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let lock = lock_file(&path, true).map_err(|e| {
                        let _ = std::fs::remove_dir_all(&path);
                        anyhow::anyhow!("cannot lock the run directory {}: {e}", path.display())
                    })?;
                    flock(&lock, libc::LOCK_SH);
                    return Ok(RunDir { path, lock });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => bail!("cannot create a run directory in {}: {e}", base.display()),
            }
        }
        bail!("cannot create a run directory in {}", base.display())
    }
}

impl RunDir {
    /// Waits at most `wait` until this process is the run's last member, and stays so
    /// (its lock taken exclusively: a process that would join now waits); whether it is.
    pub fn alone_within(&self, wait: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if try_flock(&self.lock, libc::LOCK_EX) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Leaving the run: the directory goes if no other member is still in it.
impl Drop for RunDir {
    fn drop(&mut self) {
        if try_flock(&self.lock, libc::LOCK_EX) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Opens `dir`'s lock file (creating it, mode 0600, if `create`).
fn lock_file(dir: &Path, create: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut open = std::fs::OpenOptions::new();
    open.read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create {
        open.write(true).create_new(true).mode(0o600);
    }
    open.open(dir.join(runstat::env::RUN_LOCK))
}

/// `flock(file, op)`, waiting.
fn flock(file: &File, op: libc::c_int) {
    // SAFETY: flock on a descriptor this `File` owns; EINTR is retried.
    while unsafe { libc::flock(file.as_raw_fd(), op) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
}

/// `flock(file, op | LOCK_NB)`: whether it was taken.
fn try_flock(file: &File, op: libc::c_int) -> bool {
    // SAFETY: flock on a descriptor this `File` owns.
    unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) == 0 }
}

/// Whether process `pid` exists.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing.
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Removes the run directories of `base` left by runs whose members are all gone (module
/// essay); how many.
pub fn sweep(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || alive(pid) {
            continue; // its creator may still be setting it up
        }
        let path = entry.path();
        let free = match lock_file(&path, false) {
            Ok(lock) => try_flock(&lock, libc::LOCK_EX),
            // A run from before the lock, or one killed before it made it.
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        if free && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}
