//! The shim's file work while the program runs (its stats files, the engine threads' CPU
//! time from /proc), done in a descriptor table of its own.
//!
//! Why: a descriptor opened for a moment by an engine thread takes the lowest free number
//! of the program's table. A shell's redirection frees a number and takes it back
//! (`close(1)`, then `dup2(file, 1)`), and `close(0); open(...)` expects 0 again. An open
//! between the two gets the program's number: the program's `dup2` replaces the engine's
//! file, and the engine's `close` that follows closes the program's (the `echo >> file`
//! fails with EBADF), or the program's `open` gets another number than the one it freed.
//! Long-lived descriptors avoid this by living high (crate `fds`); these are opened, used
//! and closed at once, many a second.
//!
//! How: one thread per process (`uswap-files`) leaves the shared table at its start for an
//! empty one of its own (`close_range` with `CLOSE_RANGE_UNSHARE` over every number), so
//! that it holds no file of the program's open (a pipe's write end would keep its reader
//! from seeing the end). Work is sent to it as a closure and waited for. Its opens take
//! numbers of its own table, which no thread of the program sees. The thread is started at
//! the shim's set-up ([`start`]), and in a forked child at its fork hook, before the
//! mappings the engine must never manage are noted, so that its stack is one of them: an
//! engine thread that faulted on it would wait for itself. The hand-off wakes through futex
//! words in the shim's arena only ([`Worker`]). Where the kernel refuses the thread a table
//! of its own (a seccomp filter), the work runs on the calling thread, in the shared table
//! (a file it writes placed and checked as crate `fds` does), and `shim_files_shared`
//! counts it.
//!
//! Context: engine threads and the exiting thread; allocates from the shim's arena; the
//! caller waits for one cross-thread wake-up and back, so nothing on the fault path comes
//! here.
//!
//! Unsafe code: the worker is a leaked box behind an atomic pointer (a lock held across a
//! fork would stay held in the child), and a system call with integer arguments.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// The private-table thread of one process.
///
/// Jobs and answers pass through mutexes and condition variables in the shim's arena,
/// never through std's channels: a channel wakes its receiver by unparking the receiving
/// thread, which writes that thread's handle, and std allocates thread handles from glibc's
/// heap. In a forked child the worker is started after the heap is managed, so its handle
/// lies in a page the engine may page out, and a handler thread that unparks it then
/// faults on a page only it can bring back. A futex word in the arena is never paged out.
struct Worker {
    pid: i32,
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

/// One answer, handed from the thread that makes it to the one waiting for it.
type Answer<R> = Arc<(Mutex<Option<R>>, Condvar)>;

fn answer<R>() -> Answer<R> {
    Arc::new((Mutex::new(None), Condvar::new()))
}

fn give<R>(answer: &Answer<R>, value: R) {
    *lock(&answer.0) = Some(value);
    answer.1.notify_one();
}

/// Waits for `answer`. Bounded: every answer awaited is given, a panicking job's included.
fn wait<R>(answer: &Answer<R>) -> R {
    let mut slot = lock(&answer.0);
    loop {
        if let Some(value) = slot.take() {
            return value;
        }
        slot = answer.1.wait(slot).unwrap_or_else(PoisonError::into_inner);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's worker (a forked child's copy names its parent's pid, and is replaced);
/// leaked, one per process that did file work.
static WORKER: AtomicPtr<Worker> = AtomicPtr::new(std::ptr::null_mut());

/// File work done on the calling thread, in the shared table, because no private one could
/// be made.
pub static SHARED: AtomicU64 = AtomicU64::new(0);

/// The descriptor table a piece of work runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// The worker's own: nobody else sees its numbers.
    Own,
    /// The program's, shared (no worker in this process): a descriptor kept past one call
    /// must be placed and checked (crate `fds`).
    Shared,
}

/// Runs `work` in the private descriptor table and returns what it returns; on the calling
/// thread where there is none (counted in [`SHARED`]). `None` if it panicked on the worker.
pub fn in_own_table<R: Send + 'static>(
    work: impl FnOnce(Table) -> R + Send + 'static,
) -> Option<R> {
    let Some(worker) = worker() else {
        SHARED.fetch_add(1, SeqCst);
        return Some(work(Table::Shared));
    };
    let result: Answer<Option<R>> = answer();
    let theirs = result.clone();
    let job: Job = Box::new(move || {
        give(&theirs, catch_unwind(AssertUnwindSafe(|| work(Table::Own))).ok());
    });
    lock(&worker.jobs).push_back(job);
    worker.ready.notify_one();
    wait(&result)
}

/// This process's worker, if [`start`] made one.
fn worker() -> Option<&'static Worker> {
    let pid = std::process::id() as i32;
    // SAFETY: a non-null pointer is a leaked `Worker`, never freed.
    unsafe { WORKER.load(SeqCst).as_ref() }.filter(|w| w.pid == pid)
}

/// Starts this process's worker, in the shim's set-up and in a forked child's fork hook
/// (module essay: before the mappings the engine must never manage are noted); false if
/// the kernel refused it a table of its own.
pub fn start() -> bool {
    let pid = std::process::id() as i32;
    if worker().is_some() {
        return true;
    }
    let current = WORKER.load(SeqCst);
    let fresh: &'static Worker = Box::leak(Box::new(Worker {
        pid,
        jobs: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
    }));
    let started: Answer<bool> = answer();
    let theirs = started.clone();
    let spawned = std::thread::Builder::new()
        .name("uswap-files".into())
        .spawn(move || {
            let own = leave_shared_table();
            give(&theirs, own);
            if own {
                serve(fresh);
            }
        })
        .is_ok();
    let own = spawned && wait(&started);
    // A worker that could not leave the shared table ended; its `Worker` stays leaked,
    // unpublished (a few words, once per process).
    if !own {
        return false;
    }
    // Another thread may have published one first: theirs serves, this one waits forever
    // on an empty queue.
    let _ = WORKER.compare_exchange(current, std::ptr::from_ref(fresh).cast_mut(), SeqCst, SeqCst);
    true
}

/// The worker's loop: each job in turn, forever.
fn serve(worker: &Worker) {
    let mut jobs = lock(&worker.jobs);
    loop {
        match jobs.pop_front() {
            Some(job) => {
                drop(jobs);
                job();
                jobs = lock(&worker.jobs);
            }
            None => jobs = worker.ready.wait(jobs).unwrap_or_else(PoisonError::into_inner),
        }
    }
}

/// Gives the calling thread a descriptor table of its own and closes every descriptor in
/// it; false if the kernel refused.
fn leave_shared_table() -> bool {
    // One call: with CLOSE_RANGE_UNSHARE over every number the kernel gives the thread a
    // new, empty table instead of copying the shared one (as large as the highest number
    // open, which crate `fds` keeps high) to close every entry of the copy after. A fork
    // of the program starts one such thread in each child.
    let flags = libc::CLOSE_RANGE_UNSHARE;
    // SAFETY: a plain system call with integer arguments, on this thread's own table.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, flags) == 0 }
}

static STATS_FILE: fds::Kind =
    fds::Kind { what: "stats file", if_lost: "that stats file is not written", keep: false };

/// Writes `text` to a new file at `path` (replaced if there; not through a symbolic link).
/// In the shared table the descriptor is placed out of the program's way at once, and
/// checked to be the file now at `path` before a byte is written: a program thread that put
/// a file of its own at the number in the moment after the open gets nothing written to it.
fn write_file(path: &Path, text: &[u8], table: Table) -> bool {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    if table == Table::Own {
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create(true).truncate(true).mode(0o600).custom_flags(libc::O_NOFOLLOW);
        return open.open(path).and_then(|mut f| f.write_all(text)).is_ok();
    }
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW;
    let Ok(fd) = fds::Fd::open(&name, flags, 0o600, &STATS_FILE) else { return false };
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    let id = fd.identity();
    (meta.dev(), meta.ino()) == (id.dev, id.ino) && fd.write_all(text).is_ok()
}

/// A process's stats files: `live-PID`, replaced while it runs, then `final-PID-NS`.
#[derive(Debug, Default)]
pub struct StatsFiles {
    /// Held while a file is written (live and final share the temporary name); true once
    /// the final one is. A live file renamed in after the final one would be counted
    /// twice by the summary.
    finished: Mutex<bool>,
}

impl StatsFiles {
    /// Writes `text()`, the live file or the final one, in the private table.
    pub fn write(&self, dir: &Path, pid: i32, final_: bool, text: impl FnOnce() -> String) {
        let mut finished = self.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *finished {
            return;
        }
        let text = text();
        let dir = dir.to_path_buf();
        let final_name = final_.then(|| format!("final-{pid}-{}", unique_ns()));
        in_own_table(move |table| {
            let live = dir.join(format!("live-{pid}"));
            let tmp = dir.join(format!(".live-{pid}"));
            if !write_file(&tmp, text.as_bytes(), table) {
                return;
            }
            match final_name {
                Some(name) => {
                    let _ = std::fs::rename(&tmp, dir.join(name));
                    let _ = std::fs::remove_file(&live);
                }
                None => {
                    let _ = std::fs::rename(&tmp, &live);
                }
            }
        });
        *finished |= final_;
    }
}

/// A number that orders final files of one pid (exec'd images): ns since the epoch.
pub fn unique_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// CPU time of the engine's threads (named `uswap-*`) so far, in nanoseconds: what the
/// summary takes off the program's own CPU time. From /proc/self/task/*/stat (utime and
/// stime, in clock ticks of 10 ms), read in the private table; the threads are listed
/// without `opendir`, which calls glibc's malloc (crate essay).
pub fn engine_cpu_ns() -> u64 {
    in_own_table(|_| {
        let mut tids = [0u32; 512];
        let n = crate::member::task_ids(&mut tids);
        let mut ticks = 0u64;
        for tid in &tids[..n] {
            let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else { continue };
            if !text[open + 1..close].starts_with("uswap-") {
                continue;
            }
            // After the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt
            // cmajflt utime stime (fields 3 to 15 of proc(5)).
            let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
            let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            ticks += number(11).unwrap_or(0) + number(12).unwrap_or(0);
        }
        ticks * 10_000_000
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary once added a live file renamed in after the final one, and printed
    /// every far server twice with their addresses summed.
    #[test]
    fn a_live_stats_write_after_the_final_one_leaves_one_file() {
        let scratch = tempfile::Builder::new().prefix("uswap-stats-test-").tempdir().unwrap();
        let dir = scratch.path();
        let files = StatsFiles::default();
        files.write(dir, 7, false, || "final 0\n".into());
        files.write(dir, 7, true, || "final 1\n".into());
        files.write(dir, 7, false, || "final 0\n".into());
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with("final-7-"), "{names:?}");
    }

    /// The work runs in a table of its own: a file it opens takes no number of this
    /// thread's table, and the numbers this thread frees are free for it alone.
    #[test]
    fn file_work_takes_no_number_of_the_shared_table() {
        let scratch = tempfile::Builder::new().prefix("uswap-files-test-").tempdir().unwrap();
        let path = scratch.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let held = std::fs::File::open(&path).unwrap();
        // The calling thread's table's descriptors of the file (other tests open files of
        // their own beside this one, so the file is named rather than the lowest free
        // number probed).
        let open_here = |path: &Path| {
            std::fs::read_dir("/proc/thread-self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|target| target == path)
                .count()
        };
        let private = start();
        let theirs = path.clone();
        let (inside, other, seen) = in_own_table(move |_| {
            let file = std::fs::File::open(&theirs).unwrap();
            let number = std::os::fd::AsRawFd::as_raw_fd(&file);
            (number, std::fs::File::open("/dev/null").is_ok(), open_here(&theirs))
        })
        .unwrap();
        assert!(other);
        if private {
            assert_eq!(seen, 1, "its table holds its own descriptor of the file only");
        }
        assert_eq!(open_here(&path), 1, "nothing left open in this table");
        if private {
            assert_eq!(inside, 0, "every number of its table was closed at its start");
        }
        drop(held);
    }

    /// A job that panics answers `None`; the worker lives on and serves the next job.
    #[test]
    fn a_panicking_job_answers_none_and_the_worker_serves_on() {
        if !start() {
            return;
        }
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let panicked = in_own_table(|_| -> u32 { panic!("a job's bug") });
        std::panic::set_hook(hook);
        assert_eq!(panicked, None);
        assert_eq!(in_own_table(|table| (table, 7)), Some((Table::Own, 7)));
    }
}
