//! `uswap run` and what programs and their callers do to the process around it (docs/RUN.md,
//! docs/SAFETY.md). Each test is named after the defect it guards against.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};

mod common;
use common::{can_run, shim, uswap};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `uswap run` with its stderr a pipe nobody reads (`... 2>&1 | true`): the summary cannot
/// be written, and the exit status is still the program's. Before, a panic on EPIPE made
/// it 101.
#[test]
fn a_closed_stderr_keeps_the_programs_exit_status() {
    if !can_run() {
        return;
    }
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both ends are new descriptors, owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read);
    let status = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--budget", "8M", "--", "sh", "-c", "exit 7"])
        .env("USWAP_PRELOAD", shim())
        .stderr(Stdio::from(write))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let out = uswap(&["run", "--budget", "8M", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}
