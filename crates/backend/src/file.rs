//! The file backend: a sparse swap file read and written with `pread` / `pwrite`.
//!
//! Setup refuses everything that could hurt: an existing path is never overwritten
//! (`O_EXCL`), the file is created mode 0600 and unlinked right after it is opened (unless
//! [`FileOptions::keep`]), so no other process can open it and read swapped data; a file
//! made inside a directory is made without a name at all (`O_TMPFILE`), so a process
//! killed while it creates one leaves nothing behind (where the file system has no
//! `O_TMPFILE`, a fresh name is unlinked at once, as for a path given), and the
//! free space of the file system (`statvfs`) is checked against the size before anything
//! is created (or, with [`FileOptions::keep_free_bytes`], the file may be larger than the
//! free space, and writes stop while the disk is nearly full). The file is sized with
//! `ftruncate`, so it is sparse: disk blocks are used only by slots that were written, and
//! a discard punches them out again (`fallocate(PUNCH_HOLE | KEEP_SIZE)`).
//!
//! ```text
//!   create(path or dir, size, opts)
//!     statvfs(dir) >= size? ── no ──> Error::NoSpace   (unless keep_free_bytes)
//!     in a directory, not kept: open(dir, O_TMPFILE|O_RDWR, 0600) (no name; else as below)
//!     open(O_CREAT|O_EXCL|O_RDWR, 0600) ── EEXIST ──> Error::Exists
//!     ftruncate(size)            (sparse: no blocks yet)
//!     unlink(path) unless keep   (the fd keeps the inode alive)
//! ```
//!
//! I/O: `pwrite` / `pread` of whole pages at `offset * PAGE_SIZE`. `O_DIRECT` (through an
//! aligned bounce buffer) measures 4-40x slower, and io_uring batches of 32 scattered
//! writes no faster (docs/benchmarks.md, `uswap bench slots`). Plain writes land in the
//! page cache and stay there, dirty and then clean, until the kernel writes them back and
//! reclaims them; a freed slot's old data stays too: memory outside any budget, 1.6-1.8 GiB
//! in a 1 GiB run under 256 MiB with the pool a share of the budget (docs/benchmarks.md,
//! `uswap run`).
//! [`FileOptions::uncached`] asks for `RWF_DONTCACHE` (Linux 6.14) instead: the kernel
//! drops a written page once it is on disk and a read page once it is copied out, as its
//! own swap keeps nothing of a swap file in the page cache. Where the kernel or the
//! file system refuses the flag (tried once, at creation), creation fails and says so.
//! Every error is returned and counted ([`FileStats`]).
//!
//! The descriptor is out of the program's way (crate `fds`): placed at a high number and
//! registered, so a program inside `uswap run` that closes every descriptor, or dups a file
//! of its own onto ours, leaves the swap file alone. Every write, read and discard checks
//! its identity first: one closed or replaced by a direct system call is never written
//! through (the program's file would be), and from then on every write is refused and the
//! backend reports itself out of space, so reclaim stops and pages stay in the pool or in
//! memory; a read fails (the engine poisons the page: SIGBUS, never other bytes).
//!
//! Locks: none. `pread` / `pwrite` at distinct offsets are safe from many threads.

use crate::quota::{ChunkSet, SpaceQuota, QUOTA_CHUNK_BYTES};
use crate::{check_range, check_request, Backend, Error, ForkStep, PAGE_SIZE};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How a swap file is created.
#[derive(Debug, Clone, Default)]
pub struct FileOptions {
    /// Keep the file's name after opening (default: unlink it at once, so nobody else can
    /// open it and it disappears with the process).
    pub keep: bool,
    /// Keep the file's pages out of the page cache (`RWF_DONTCACHE`: Linux 6.14 and a file
    /// system that takes it, else creation fails).
    pub uncached: bool,
    /// `None` (default): the file system must have the whole size free at creation.
    /// `Some(bytes)`: the file may be larger than the free space (its slots cost no disk
    /// until written, and a pool in front of it may never write most of them), and writes
    /// are refused (`ENOSPC`, counted in [`FileStats::refused_low_disk`]) while the file
    /// system has less than `bytes` free, looked up every [`DISK_CHECK_PAGES`] pages: the
    /// swap never fills the disk under everything else on it.
    pub keep_free_bytes: Option<u64>,
    /// A disk quota this file shares with others ([`crate::quota`]): every 2 MiB chunk of
    /// the file takes its bytes from it at its first write, and writes that need a chunk
    /// the quota cannot give are refused (`ENOSPC`, counted in
    /// [`FileStats::refused_quota`]).
    pub quota: Option<Arc<dyn SpaceQuota>>,
}

/// How often a disk found low is looked at again while no writes come.
pub const DISK_LOW_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Pages written between two looks at the free space ([`FileOptions::keep_free_bytes`]):
/// one `statvfs` per 4 MiB.
pub const DISK_CHECK_PAGES: u64 = 1024;

/// `RWF_DONTCACHE` (Linux 6.14): buffered I/O whose pages leave the page cache once done.
const RWF_DONTCACHE: u32 = 0x80;

counters::table! {
    /// The live counters of one file backend.
    pub(crate) struct FileCounters;
    /// Counters of one file backend (in the stats file as `file_*`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct FileStats {
        prefix "file_";
        counters {
            /// Pages written.
            write_pages,
            /// Pages read.
            read_pages,
            /// Pages discarded (holes punched).
            discard_pages,
            /// Failed writes.
            write_errors,
            /// Failed reads.
            read_errors,
            /// Failed discards.
            discard_errors,
            /// Pages whose writes were refused because the file system was low on free space
            /// ([`FileOptions::keep_free_bytes`]; counted in `write_errors` too).
            refused_low_disk,
            /// Pages whose writes were refused because the shared quota was used up
            /// ([`FileOptions::quota`]; counted in `write_errors` too).
            refused_quota,
        }
    }
}

/// The registry's name for the swap file.
static SWAP_FILE: fds::Kind = fds::Kind {
    what: "swap file",
    if_lost: "no page goes to it any more (they stay in the pool or in memory), and a page \
              only it held reads back as SIGBUS",
    keep: true,
};

/// A sparse swap file.
#[derive(Debug)]
pub struct FileBackend {
    fd: fds::Fd,
    /// Where it was created (gone from the file system unless `keep`), or, for a file
    /// made without a name, its directory.
    path: PathBuf,
    nr_pages: u64,
    /// I/O goes with `RWF_DONTCACHE`.
    uncached: bool,
    /// Writes stop while the file system has less free ([`FileOptions::keep_free_bytes`]).
    keep_free_bytes: Option<u64>,
    /// Pages asked to be written, to pace the looks at the free space.
    pages_asked: AtomicU64,
    /// The last look found less free than `keep_free_bytes`.
    disk_low: AtomicBool,
    /// When the last look was, in nanoseconds from `created`.
    looked_ns: AtomicU64,
    created: std::time::Instant,
    /// The shared quota and the chunks reserved from it ([`FileOptions::quota`]).
    quota: Option<(Arc<dyn SpaceQuota>, ChunkSet)>,
    /// The last write found the quota used up: `out_of_space` says so until it has room.
    quota_full: AtomicBool,
    /// A forked child's copy of its parent's file ([`ForkStep::Inherited`]): the quota's
    /// reservations are the parent's, never given back from this copy.
    inherited: AtomicBool,
    stats: FileCounters,
}

/// Upper bound on names tried when creating inside a directory (each try is `O_EXCL`).
const NAME_TRIES: u32 = 64;

impl FileBackend {
    /// Creates a swap file of `size_bytes` at `path`, or inside `path` when it is a
    /// directory (without a name, or where `O_TMPFILE` is refused or `keep` is set, a
    /// fresh name `.uswap-PID-N.swap`).
    ///
    /// # Errors
    /// [`Error::BadSize`] unless `size_bytes` is a positive multiple of [`PAGE_SIZE`];
    /// [`Error::Exists`] if `path` exists and is not a directory; [`Error::NoSpace`] if the
    /// file system has less free space than `size_bytes`; [`Error::Setup`] if the file
    /// cannot be created, sized or unlinked (not writable, no such directory, ...). On
    /// error nothing is left behind.
    ///
    /// Context: may block (file-system calls).
    pub fn create(path: &Path, size_bytes: u64, options: FileOptions) -> Result<Self, Error> {
        if size_bytes == 0 || !size_bytes.is_multiple_of(PAGE_SIZE as u64) {
            return Err(Error::BadSize { size_bytes });
        }
        let (dir, name) = if path.is_dir() {
            (path.to_path_buf(), None)
        } else {
            if path.symlink_metadata().is_ok() {
                return Err(Error::Exists { path: path.to_path_buf() });
            }
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            (parent.unwrap_or(Path::new(".")).to_path_buf(), Some(path.to_path_buf()))
        };
        if options.keep_free_bytes.is_none() {
            check_free_space(&dir, size_bytes)?;
        }
        let unnamed = if name.is_none() && !options.keep { open_unnamed(&dir) } else { None };
        let named = unnamed.is_none();
        let (file, path) = match (unnamed, name) {
            (Some(file), _) => (file, dir.clone()),
            (None, Some(path)) => (open_new(&path)?, path),
            (None, None) => open_in_dir(&dir)?,
        };
        let cleanup = |what, source| {
            if named {
                let _ = std::fs::remove_file(&path);
            }
            Error::Setup { what, path: path.clone(), source }
        };
        if let Err(e) = file.set_len(size_bytes) {
            return Err(cleanup("size", e));
        }
        if named && !options.keep {
            std::fs::remove_file(&path).map_err(|source| Error::Setup {
                what: "unlink",
                path: path.clone(),
                source,
            })?;
        }
        if options.uncached {
            if let Err(source) = try_dontcache(&file) {
                if named {
                    let _ = std::fs::remove_file(&path); // gone already unless `keep`
                }
                let what = "use uncached I/O (RWF_DONTCACHE: Linux 6.14 and a file system that \
                            takes it) on";
                return Err(Error::Setup { what, path, source });
            }
        }
        let nr_pages = size_bytes / PAGE_SIZE as u64;
        let uncached = options.uncached;
        let backend = FileBackend {
            fd: fds::Fd::place(file.into(), &SWAP_FILE),
            path,
            nr_pages,
            uncached,
            keep_free_bytes: options.keep_free_bytes,
            pages_asked: AtomicU64::new(0),
            disk_low: AtomicBool::new(false),
            looked_ns: AtomicU64::new(0),
            created: std::time::Instant::now(),
            quota: options.quota.map(|quota| (quota, ChunkSet::new(nr_pages))),
            quota_full: AtomicBool::new(false),
            inherited: AtomicBool::new(false),
            stats: FileCounters::new(),
        };
        backend.look_at_free_space();
        Ok(backend)
    }

    /// Whether a write of `nr` pages must be refused for lack of disk: the free space is
    /// looked up again each time the pages asked cross a multiple of [`DISK_CHECK_PAGES`].
    fn disk_too_low(&self, nr: u64) -> bool {
        if self.keep_free_bytes.is_none() {
            return false;
        }
        let before = self.pages_asked.fetch_add(nr, Ordering::Relaxed);
        if before / DISK_CHECK_PAGES != (before + nr) / DISK_CHECK_PAGES {
            self.look_at_free_space();
        }
        self.disk_low.load(Ordering::Relaxed)
    }

    fn look_at_free_space(&self) {
        let Some(keep_free) = self.keep_free_bytes else { return };
        self.looked_ns.store(self.created.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // A failed statvfs of an open file says nothing about the space: writes go on.
        if let Ok(stat) = self.fd.with(|fd| rustix::fs::fstatvfs(fd)) {
            let free = stat.f_bavail.saturating_mul(stat.f_frsize);
            self.disk_low.store(free < keep_free, Ordering::Relaxed);
        }
    }

    /// The path the file was created at (no longer linked unless `keep` was set).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The counters now.
    pub fn stats(&self) -> FileStats {
        let mut stats = FileStats::default();
        self.stats.snapshot_into(&mut stats);
        stats
    }

    /// The shared quota and this file's chunks in it, unless this is a forked child's copy
    /// of its parent's file, whose reservations are the parent's to give back.
    fn own_quota(&self) -> Option<&(Arc<dyn SpaceQuota>, ChunkSet)> {
        self.quota.as_ref().filter(|_| !self.inherited.load(Ordering::Relaxed))
    }

    /// Bytes of the shared quota this file holds ([`FileOptions::quota`]).
    pub fn quota_bytes(&self) -> u64 {
        self.quota.as_ref().map_or(0, |(_, chunks)| chunks.reserved_bytes())
    }

    /// Whether a write of slots `offset .. offset + nr` must be refused because its chunks
    /// cannot all be reserved from the shared quota.
    fn quota_refuses(&self, offset: u64, nr: u64) -> bool {
        let Some((quota, chunks)) = &self.quota else { return false };
        let refused = !chunks.cover(quota.as_ref(), offset, nr);
        self.quota_full.store(refused, Ordering::Relaxed);
        refused
    }

    fn io_error(&self, op: &'static str, offset: u64, source: std::io::Error) -> Error {
        let counter = match op {
            "write" => &self.stats.write_errors,
            "read" => &self.stats.read_errors,
            _ => &self.stats.discard_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Error::Io { op, offset, source }
    }
}

/// The file's blocks go with it: its chunks' reservations go back to the shared quota
/// (not from a forked child's copy: they are its parent's, and go with the parent's).
impl Drop for FileBackend {
    fn drop(&mut self) {
        if let Some((quota, chunks)) = self.own_quota() {
            chunks.release_all(quota.as_ref());
        }
    }
}

fn dontcache() -> rustix::io::ReadWriteFlags {
    rustix::io::ReadWriteFlags::from_bits_retain(RWF_DONTCACHE)
}

/// Tries one uncached read of page 0 (a hole: nothing is written, the file stays sparse).
fn try_dontcache(file: &File) -> std::io::Result<()> {
    let mut page = [0u8; 64];
    rustix::io::preadv2(file, &mut [std::io::IoSliceMut::new(&mut page)], 0, dontcache())?;
    Ok(())
}

fn open_new(path: &Path) -> Result<File, Error> {
    let mut open = OpenOptions::new();
    open.read(true).write(true).create_new(true).mode(0o600);
    open.open(path).map_err(|source| match source.kind() {
        ErrorKind::AlreadyExists => Error::Exists { path: path.to_path_buf() },
        _ => Error::Setup { what: "create", path: path.to_path_buf(), source },
    })
}

/// A file in `dir` that has no name (`O_TMPFILE`, mode 0600): nothing to unlink, so no
/// moment when a crash leaves a name behind. `None` where the file system (or kernel)
/// refuses it: the caller makes a named file instead.
fn open_unnamed(dir: &Path) -> Option<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    rustix::fs::open(dir, flags, Mode::from_raw_mode(0o600)).ok().map(File::from)
}

fn open_in_dir(dir: &Path) -> Result<(File, PathBuf), Error> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let mut last = Error::Exists { path: dir.to_path_buf() };
    for _ in 0..NAME_TRIES {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".uswap-{pid}-{n}.swap"));
        match open_new(&path) {
            Ok(file) => return Ok((file, path)),
            Err(e @ Error::Exists { .. }) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn check_free_space(dir: &Path, size_bytes: u64) -> Result<(), Error> {
    let stat = rustix::fs::statvfs(dir).map_err(|e| Error::Setup {
        what: "statvfs the directory of",
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    let available_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
    if available_bytes < size_bytes {
        return Err(Error::NoSpace {
            path: dir.to_path_buf(),
            needed_bytes: size_bytes,
            available_bytes,
        });
    }
    Ok(())
}

/// Repeats `step(done)` (one transfer starting `done` bytes in) until `len` bytes are
/// done, as `write_all_at` / `read_exact_at` do: retried on `EINTR`; a transfer of 0 bytes
/// is `short`.
fn all_of(
    len: usize,
    short: ErrorKind,
    mut step: impl FnMut(usize) -> rustix::io::Result<usize>,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        match step(done) {
            Ok(0) => return Err(short.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `pwrite` (`pwritev2(RWF_DONTCACHE)` if `uncached`) of all of `data` at `pos`.
fn write_all_at(fd: BorrowedFd<'_>, data: &[u8], pos: u64, uncached: bool) -> std::io::Result<()> {
    all_of(data.len(), ErrorKind::WriteZero, |done| {
        let at = pos + done as u64;
        if uncached {
            let slice = [std::io::IoSlice::new(&data[done..])];
            rustix::io::pwritev2(fd, &slice, at, dontcache())
        } else {
            rustix::io::pwrite(fd, &data[done..], at)
        }
    })
}

/// `pread` (`preadv2(RWF_DONTCACHE)` if `uncached`) of all of `buf` at `pos`.
fn read_exact_at(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    pos: u64,
    uncached: bool,
) -> std::io::Result<()> {
    all_of(buf.len(), ErrorKind::UnexpectedEof, |done| {
        let at = pos + done as u64;
        if uncached {
            let mut slice = [std::io::IoSliceMut::new(&mut buf[done..])];
            rustix::io::preadv2(fd, &mut slice, at, dontcache())
        } else {
            rustix::io::pread(fd, &mut buf[done..], at)
        }
    })
}

/// The I/O error a lost descriptor's transfer reports (counted as the transfer's own).
fn lost(error: fds::Error) -> std::io::Error {
    error.into()
}

impl Backend for FileBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let nr = check_request(offset, data.len(), self.nr_pages)?;
        let full = || std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        if self.disk_too_low(nr) {
            self.stats.refused_low_disk.fetch_add(nr, Ordering::Relaxed);
            return Err(self.io_error("write", offset, full()));
        }
        if self.quota_refuses(offset, nr) {
            self.stats.refused_quota.fetch_add(nr, Ordering::Relaxed);
            return Err(self.io_error("write", offset, full()));
        }
        let pos = offset * PAGE_SIZE as u64;
        let written = self.fd.checked(|fd| write_all_at(fd, data, pos, self.uncached));
        written.map_err(lost).and_then(|w| w).map_err(|e| self.io_error("write", offset, e))?;
        self.stats.write_pages.fetch_add(nr, Ordering::Relaxed);
        Ok(())
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let nr = check_request(offset, buf.len(), self.nr_pages)?;
        let pos = offset * PAGE_SIZE as u64;
        let read = self.fd.checked(|fd| read_exact_at(fd, buf, pos, self.uncached));
        read.map_err(lost).and_then(|r| r).map_err(|e| self.io_error("read", offset, e))?;
        self.stats.read_pages.fetch_add(nr, Ordering::Relaxed);
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages)?;
        let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        let (pos, len) = (offset * PAGE_SIZE as u64, nr * PAGE_SIZE as u64);
        let punched = self.fd.checked(|fd| rustix::fs::fallocate(fd, flags, pos, len));
        punched
            .map_err(lost)
            .and_then(|p| p.map_err(std::io::Error::from))
            .map_err(|e| self.io_error("discard", offset, e))?;
        if let Some((quota, chunks)) = self.own_quota() {
            chunks.uncover(quota.as_ref(), offset, nr);
        }
        self.stats.discard_pages.fetch_add(nr, Ordering::Relaxed);
        Ok(())
    }

    fn is_synchronous(&self) -> bool {
        false
    }

    fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// A forked child's copy: read only from now on (the overlay above it), and its quota
    /// reservations left to the parent, which still holds them.
    fn fork(&self, step: ForkStep) {
        if step == ForkStep::Inherited {
            self.inherited.store(true, Ordering::Relaxed);
        }
    }

    /// While the disk is low, looked up again every [`DISK_LOW_RECHECK`] at most (a
    /// refused device gets no writes, which would otherwise pace the looks); while the
    /// shared quota is used up, until it has a chunk's room again (another process gave
    /// some back); for good once the descriptor is lost (module essay).
    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.stats.each(out);
    }

    fn out_of_space(&self) -> bool {
        if self.fd.is_lost() {
            return true;
        }
        if self.quota_full.load(Ordering::Relaxed) {
            let room = self.quota.as_ref().is_some_and(|(q, _)| q.available(QUOTA_CHUNK_BYTES));
            self.quota_full.store(!room, Ordering::Relaxed);
            if !room {
                return true;
            }
        }
        if !self.disk_low.load(Ordering::Relaxed) {
            return false;
        }
        let now = self.created.elapsed().as_nanos() as u64;
        if now.saturating_sub(self.looked_ns.load(Ordering::Relaxed))
            >= DISK_LOW_RECHECK.as_nanos() as u64
        {
            self.look_at_free_space();
        }
        self.disk_low.load(Ordering::Relaxed)
    }
}
