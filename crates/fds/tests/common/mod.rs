//! Helpers of the registry's tests (each test binary is a process of its own, and the
//! registry is the process's).

#![allow(dead_code)]

use std::os::fd::RawFd;

/// A fresh file in the temporary directory, and its path.
pub fn tmpfile(tag: &str) -> (std::fs::File, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("uswap-fds-{}-{tag}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (file, path)
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
