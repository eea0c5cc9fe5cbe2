//! Helpers of the registry's tests (each test binary is a process of its own, and the
//! registry is the process's).

#![allow(dead_code)]

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// A file's path in a directory of its own, which goes (with the file) when this is
/// dropped.
pub struct TmpPath {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TmpPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TmpPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A fresh file in a directory of its own, and its path.
pub fn tmpfile(tag: &str) -> (std::fs::File, TmpPath) {
    let dir = tempfile::Builder::new().prefix(&format!("uswap-fds-{tag}-")).tempdir().unwrap();
    let path = dir.path().join(tag);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (file, TmpPath { path, _dir: dir })
}

/// The device and inode `fd` names, if it is open.
pub fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is plain data; fstat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is live and writable.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// dup3 by the system call, past every interposer (as a program's raw call is).
pub fn raw_dup3(old: RawFd, new: RawFd) -> RawFd {
    // SAFETY: dup3 takes integers.
    unsafe { libc::syscall(libc::SYS_dup3, old, new, 0) as RawFd }
}

/// Whether `fd` is open.
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD reads flags only.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}
