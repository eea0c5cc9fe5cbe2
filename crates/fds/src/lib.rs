//! The descriptors uswap holds inside a program (the shim's and the engine's: userfaultfds,
//! the swap file, the handler's eventfd, pagemap and /proc files, the trace), kept out of
//! the program's way.
//!
//! A program treats its descriptor table as its own: it closes every number from 3 up
//! (`closefrom`, `close_range`, a `close` loop), or puts files at the numbers it likes
//! (`dup2(fd, 4)`, a shell's `exec 4>>log`). Descriptors of uswap's at the low numbers the
//! kernel hands out first were closed so, or replaced, and what the engine then read or
//! wrote through them was the program's file: swapped pages written into a shell's log.
//! So every long-lived descriptor of uswap's is [`Fd::place`]d:
//!
//! - **high**: moved just under the soft `RLIMIT_NOFILE` (at most [`CEILING`]) with
//!   `F_DUPFD_CLOEXEC`, into a band [`STEP`] wide, falling back a step at a time below it
//!   when the band is full;
//! - **registered**: in one table of the process ([`SLOTS`] slots), which the shim's
//!   interposers of `close`, `closefrom`, `close_range`, `dup2`, `dup3` and `fcntl(F_DUPFD)`
//!   consult ([`program`]): a close of ours reports success and closes nothing, a range of
//!   closes closes everything around ours, and a dup onto one of ours first moves ours
//!   elsewhere, so the program gets the number it asked for and the engine keeps its file;
//! - **moved safely**: the engine's threads use a number through a guard ([`Fd::with`]),
//!   two counters indexed by the parity of the number's epoch, so a move publishes the new
//!   number and waits until every guard that loaded the old one has left (each one system
//!   call long) before the program's call puts its file there. No user ever issues a call
//!   on the program's new file;
//! - **checked**: raw system calls pass by the interposers. Before every transfer of data
//!   ([`Fd::checked`]: the swap file's writes, reads and discards, a userfaultfd's reads,
//!   the eventfd, the /proc reads, the trace) the descriptor's `fstat` device and inode
//!   are compared with those recorded when it was placed. A mismatch is never read or
//!   written through. A descriptor of a kind the keeper holds ([`Kind::keep`]: the
//!   userfaultfds, the swap file) is taken back from its second reference, outside the
//!   descriptor table (`keeper`: an io_uring's fixed files), placed high again, and the
//!   transfer made; any other, or where there is no keeper, is lost for good: said once on
//!   stderr in one line, counted, and every later transfer refused ([`Error::Lost`]); what
//!   that costs is the owner's to decide (the swap file's pages stay in the pool or in
//!   memory, and a page only it held reads as SIGBUS). A replacement in the one system call
//!   between the check and the transfer is not seen.
//!
//! ```text
//!   0 1 2  3 ... the program's ...            [band_low ........ band_top)  soft limit
//!                                                 uffd swap eventfd pagemap maps status
//! ```
//!
//! Transient descriptors are avoided: /proc files are opened once and read with `pread`
//! from offset 0 ([`ProcFile`]); the shim's files written or read whole (its stats files,
//! every thread's stat) are opened in a descriptor table of their own (the preload crate's
//! `files`). A descriptor the kernel or a system call makes after the program started (a
//! forked child's userfaultfd, a follower's stat file) sits at a low number until it is
//! placed; it is registered at once as a *transient* (a close of it is ignored, a dup
//! onto it waits), but not before the call that made it returns: that window, a few
//! instructions, is open to a program thread that puts a file at exactly that number.
//!
//! Only the process that placed the descriptors is served so: in a forked or vforked child
//! (another pid) every interposed call passes by, and acts on the child's own table.
//!
//! Context: every function here makes its system calls bare (`sys`), never through libc's
//! wrappers, which the shim interposes; nothing allocates. Engine threads never wait for
//! program threads ([`registry`] essay).

#![deny(unsafe_code)]

mod keeper;
pub mod program;
mod registry;
mod sys;

pub use registry::{CEILING, MIN_BASE, SLOTS, STEP};
pub use sys::Identity;

use registry::Slot;
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// What a descriptor is, and what its loss costs: both said in the line on stderr.
#[derive(Debug)]
pub struct Kind {
    /// A name: "swap file", "userfaultfd".
    pub what: &'static str,
    /// What its loss costs, in a few words.
    pub if_lost: &'static str,
    /// Whether the keeper holds a second reference to it ([`keep`]): for descriptors whose
    /// file must outlive a close of the number (the userfaultfds, the swap file).
    pub keep: bool,
}

/// The crate's errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The descriptor was closed or replaced behind the registry's back.
    Lost {
        /// What it was.
        what: &'static str,
        /// Its number.
        fd: RawFd,
    },
    /// A file could not be opened.
    Open {
        /// Its path.
        path: String,
        /// The errno.
        errno: i32,
    },
    /// A read failed.
    Read {
        /// The errno.
        errno: i32,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Lost { what, fd } => {
                write!(f, "the {what} (descriptor {fd}) was closed or replaced by a system call")
            }
            Error::Open { path, errno } => {
                write!(f, "open {path}: {}", std::io::Error::from_raw_os_error(*errno))
            }
            Error::Read { errno } => {
                write!(f, "read: {}", std::io::Error::from_raw_os_error(*errno))
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        match e {
            Error::Lost { .. } => std::io::Error::new(std::io::ErrorKind::BrokenPipe, e),
            Error::Open { errno, .. } | Error::Read { errno } => {
                std::io::Error::from_raw_os_error(errno)
            }
        }
    }
}

counters::table! {
    /// The registry's live counters.
    pub(crate) struct Counters;
    /// The registry's counters (in the shim's stats file as `fds_*`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Stats {
        prefix "fds_";
        counters {
            /// Descriptors placed.
            placed,
            /// Placements that found no free number in the band or below it: kept where they
            /// were.
            placed_low,
            /// Placements past [`SLOTS`]: kept unregistered.
            registry_full,
            /// Descriptors moved out of the way of a program's dup.
            moves,
            /// Closes of ours the program asked for, reported done.
            closes_ignored,
            /// Ranges of closes made around ours.
            ranges_closed,
            /// Descriptors found closed or replaced by a system call, for good.
            lost,
            /// Descriptors found so, and taken back from the keeper.
            recovered,
        }
    }
}

static STATS: Counters = Counters::new();

/// The counters now (names and values through [`Stats::each`], without allocating).
pub fn stats() -> Stats {
    let mut stats = Stats::default();
    STATS.snapshot_into(&mut stats);
    stats
}

/// Bumped by every move: a set of raw numbers (a poll set) built before it is stale.
pub fn generation() -> u64 {
    registry::GENERATION.load(SeqCst)
}

/// The one line on stderr for a lost descriptor (no allocation).
fn say_lost(kind: Option<&'static Kind>, fd: RawFd) {
    use std::io::Write;
    let (what, if_lost) =
        kind.map_or(("descriptor", "it is not used again"), |k| (k.what, k.if_lost));
    let mut line = [0u8; 512];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ = writeln!(
        cursor,
        "uswap: the {what} (descriptor {fd}) was closed or replaced by a direct system call, \
         behind uswap's back: {if_lost}"
    );
    let len = cursor.position() as usize;
    sys::write_stderr(&line[..len]);
}

/// The line on stderr for a descriptor taken back from the keeper.
fn say_recovered(kind: Option<&'static Kind>, fd: RawFd, new: RawFd) {
    use std::io::Write;
    let what = kind.map_or("descriptor", |k| k.what);
    let mut line = [0u8; 512];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ = writeln!(
        cursor,
        "uswap: the {what} (descriptor {fd}) was closed or replaced by a direct system call, \
         behind uswap's back: taken back from uswap's second reference, now descriptor {new}"
    );
    let len = cursor.position() as usize;
    sys::write_stderr(&line[..len]);
}

/// Starts the keeper of second references ([`Kind::keep`]; the `keeper` module): from then
/// on, a kept descriptor closed or replaced by a direct system call is taken back. Call it
/// before placing the descriptors to keep. Returns whether it runs (it needs io_uring's
/// `IORING_OP_FIXED_FD_INSTALL`, Linux 6.8).
pub fn keep() -> bool {
    keeper::enable()
}

/// One of uswap's long-lived descriptors (crate essay): owned, closed on drop.
#[derive(Debug)]
pub struct Fd {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Registered(&'static Slot),
    /// The registry was full: an ordinary descriptor, still checked.
    Plain {
        fd: OwnedFd,
        identity: Identity,
        kind: &'static Kind,
        lost: AtomicBool,
    },
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({})", self.number())
    }
}

impl Fd {
    /// Places `fd`, which this process just made (crate essay): moved high, registered, its
    /// identity recorded.
    ///
    /// Context: any thread; a few system calls; waits for no program thread.
    pub fn place(fd: OwnedFd, kind: &'static Kind) -> Fd {
        match registry::claim(kind) {
            Some(slot) => {
                registry::place(slot, fd.into_raw_fd());
                Fd { inner: Inner::Registered(slot) }
            }
            None => {
                STATS.registry_full.fetch_add(1, SeqCst);
                let identity = sys::identity(fd.as_raw_fd()).unwrap_or_default();
                Fd { inner: Inner::Plain { fd, identity, kind, lost: AtomicBool::new(false) } }
            }
        }
    }

    /// Opens `path` (`flags`, always `O_CLOEXEC`; `mode` for a file it creates) and places
    /// it.
    ///
    /// # Errors
    /// [`Error::Open`] with the errno.
    pub fn open(
        path: &std::ffi::CStr,
        flags: i32,
        mode: u32,
        kind: &'static Kind,
    ) -> Result<Fd, Error> {
        let fd = sys::open(path, flags, mode)
            .map_err(|errno| Error::Open { path: path.to_string_lossy().into_owned(), errno })?;
        Ok(Fd::place(fd, kind))
    }

    /// The number now (unguarded: for a poll set, which [`generation`] says when to
    /// rebuild, and for messages).
    pub fn number(&self) -> RawFd {
        match &self.inner {
            Inner::Registered(slot) => slot.number(),
            Inner::Plain { fd, .. } => fd.as_raw_fd(),
        }
    }

    /// What it is.
    pub fn kind(&self) -> Option<&'static Kind> {
        match &self.inner {
            Inner::Registered(slot) => slot.kind(),
            Inner::Plain { kind, .. } => Some(kind),
        }
    }

    /// The identity recorded when it was placed.
    pub fn identity(&self) -> Identity {
        match &self.inner {
            Inner::Registered(slot) => slot.identity(),
            Inner::Plain { identity, .. } => *identity,
        }
    }

    /// Whether it was found closed or replaced.
    pub fn is_lost(&self) -> bool {
        match &self.inner {
            Inner::Registered(slot) => slot.is_lost(),
            Inner::Plain { lost, .. } => lost.load(SeqCst),
        }
    }

    /// Runs `f` with the descriptor, which no move changes meanwhile (crate essay): for a
    /// call that moves no data (an ioctl of a userfaultfd, `fallocate` is not one of them).
    ///
    /// Context: lock-free; `f` should be one short system call (a move waits for it).
    pub fn with<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
        match &self.inner {
            Inner::Registered(slot) => slot.with(f),
            Inner::Plain { fd, .. } => f(std::os::fd::AsFd::as_fd(fd)),
        }
    }

    /// As [`Fd::with`], once the descriptor's identity is checked (crate essay): for every
    /// call that reads or writes data through it.
    ///
    /// # Errors
    /// [`Error::Lost`] (now, or found before): `f` is not called.
    pub fn checked<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> Result<R, Error> {
        let expected = self.identity();
        // Twice at most: once more after the descriptor is taken back from the keeper.
        let mut f = Some(f);
        for _ in 0..2 {
            let outcome = self.with(|fd| {
                let number = fd.as_raw_fd();
                if self.is_lost() {
                    return Err(Some(number));
                }
                if sys::identity(number) != Ok(expected) {
                    return Err(None);
                }
                Ok(f.take().map(|f| f(fd)))
            });
            match outcome {
                Ok(Some(result)) => return Ok(result),
                Ok(None) => break,
                Err(Some(number)) => return Err(self.lost_error(number)),
                Err(None) => {
                    let number = self.number();
                    if !self.repair(number) {
                        return Err(self.lost_error(number));
                    }
                }
            }
        }
        Err(self.lost_error(self.number()))
    }

    /// A descriptor found closed or replaced: taken back (true), or not.
    fn repair(&self, number: RawFd) -> bool {
        match &self.inner {
            Inner::Registered(slot) => slot.repair(number),
            Inner::Plain { .. } => {
                self.mark_lost(number);
                false
            }
        }
    }

    fn mark_lost(&self, number: RawFd) {
        match &self.inner {
            Inner::Registered(slot) => slot.mark_lost(number),
            Inner::Plain { lost, kind, .. } => {
                if !lost.swap(true, SeqCst) {
                    STATS.lost.fetch_add(1, SeqCst);
                    say_lost(Some(kind), number);
                }
            }
        }
    }

    fn lost_error(&self, fd: RawFd) -> Error {
        Error::Lost { what: self.kind().map_or("descriptor", |k| k.what), fd }
    }

    /// `write(2)` of all of `buf`, checked (a trace, a stats file).
    ///
    /// # Errors
    /// [`Error::Lost`], or the write's errno as [`Error::Read`]'s sibling in `io::Error`.
    pub fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.checked(|fd| sys::write(fd.as_raw_fd(), &buf[done..]))? {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(libc::EINTR) => {}
                Err(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
            }
        }
        Ok(())
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        if let Inner::Registered(slot) = &self.inner {
            registry::drop_slot(slot);
        }
    }
}

/// A /proc file kept open at a high number and read whole from offset 0 (`pread`, which
/// restarts a seq_file), so reading it makes no descriptor.
#[derive(Debug)]
pub struct ProcFile {
    fd: Fd,
}

/// Bytes read at a time.
const CHUNK: usize = 64 << 10;

impl ProcFile {
    /// Opens `path` read-only.
    ///
    /// # Errors
    /// [`Error::Open`].
    pub fn open(path: &std::ffi::CStr, kind: &'static Kind) -> Result<ProcFile, Error> {
        Ok(ProcFile { fd: Fd::open(path, libc::O_RDONLY, 0, kind)? })
    }

    /// Reads the whole file into `buf` (cleared first; grown from the caller's allocator
    /// only when the file outgrows its capacity).
    ///
    /// # Errors
    /// [`Error::Lost`], or the read's errno.
    pub fn read(&self, buf: &mut Vec<u8>) -> Result<(), Error> {
        buf.clear();
        self.fd.checked(|fd| loop {
            let at = buf.len();
            buf.resize(at + CHUNK, 0);
            match sys::pread(fd.as_raw_fd(), &mut buf[at..], at as u64) {
                Ok(0) => {
                    buf.truncate(at);
                    return Ok(());
                }
                Ok(n) => buf.truncate(at + n),
                Err(libc::EINTR) => buf.truncate(at),
                Err(errno) => {
                    buf.truncate(at);
                    return Err(Error::Read { errno });
                }
            }
        })?
    }

    /// Reads the file's first `buf.len()` bytes at most into `buf` (one `pread` from offset
    /// 0: no allocation); how many.
    ///
    /// # Errors
    /// [`Error::Lost`], or the read's errno.
    pub fn read_into(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.fd
            .checked(|fd| sys::pread(fd.as_raw_fd(), buf, 0))?
            .map_err(|errno| Error::Read { errno })
    }

    /// The descriptor.
    pub fn fd(&self) -> &Fd {
        &self.fd
    }
}

/// A `/proc/self/...` file kept open for the process that reads it. `/proc/self` is
/// resolved at the open, so a forked child's copy of its parent's descriptor reads the
/// parent's file: the first read in another process opens the file again, and leaves the
/// parent's copy, never closed (its registry entry is the parent's too).
#[derive(Debug)]
pub struct OwnProcFile {
    path: &'static std::ffi::CStr,
    kind: &'static Kind,
    /// The pid that opened it, and what the open gave.
    file: std::sync::Mutex<Option<(i32, Result<ProcFile, Error>)>>,
}

impl OwnProcFile {
    /// `path` (under /proc/self), opened at the first read.
    pub const fn new(path: &'static std::ffi::CStr, kind: &'static Kind) -> OwnProcFile {
        OwnProcFile { path, kind, file: std::sync::Mutex::new(None) }
    }

    /// [`ProcFile::read`] of this process's file.
    ///
    /// # Errors
    /// The open's error (kept: not retried), [`Error::Lost`], or the read's errno.
    ///
    /// Context: takes a lock for the read; never call it across a fork.
    pub fn read(&self, buf: &mut Vec<u8>) -> Result<(), Error> {
        self.with_own(|opened| opened.as_ref().map_err(Clone::clone)?.read(buf))
    }

    /// Opens this process's file now if it is not open yet: a forked child calls it on its
    /// only thread, while no program code runs beside, so that its first read, on an engine
    /// thread, finds it placed (an open sits at the lowest free number until it is).
    pub fn open_here(&self) {
        self.with_own(|_| ());
    }

    fn with_own<R>(&self, f: impl FnOnce(&Result<ProcFile, Error>) -> R) -> R {
        let pid = sys::getpid();
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if file.as_ref().is_some_and(|(owner, _)| *owner != pid) {
            if let Some((_, Ok(inherited))) = file.take() {
                std::mem::forget(inherited);
            }
        }
        let (_, opened) = file.get_or_insert_with(|| (pid, ProcFile::open(self.path, self.kind)));
        f(opened)
    }
}
