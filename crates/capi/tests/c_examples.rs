//! The C API from C: the examples under `examples/` are compiled with `cc` against
//! `include/uswap.h` and the `libuswap.so` cargo built for this test, then run.
//!
//! - `round_trip.c` (both delivery modes): bad input refused with its code and message,
//!   a region four times the budget written, paged out, read back word for word.
//! - `round_trip.c blocked`: under a seccomp filter denying userfaultfd(2), `uswap_open`
//!   returns `USWAP_ERR_UNAVAILABLE` and a message naming seccomp.
//! - `zero_page.c`: the seed's zero-page program; the reads of 20 MiB of paged-out zeros
//!   must grow VmRSS by less than 2 MiB (its output has every figure).
//!
//! An example exits 77 when userfaultfd is unavailable; that skips unless the environment
//! requires it (root, or `USWAP_REQUIRE_UFFD`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn required() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root || std::env::var_os("USWAP_REQUIRE_UFFD").is_some()
}

/// The directory holding the `libuswap.so` built with this test (target/<profile>/deps).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    for dir in [deps.clone(), deps.parent().expect("profile directory").to_path_buf()] {
        if dir.join("libuswap.so").exists() {
            return dir;
        }
    }
    panic!("libuswap.so not found next to {}", exe.display());
}

/// A compiled example, in a directory of its own that goes when this is dropped.
struct Program {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Program {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

/// Compiles `examples/<name>.c` into a fresh directory (one per test: `tag`).
fn compile(name: &str, tag: &str) -> Program {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_dir();
    let dir = tempfile::Builder::new().prefix(&format!("uswap-capi-{tag}-")).tempdir().unwrap();
    let exe = dir.path().join(name);
    let status = Command::new("cc")
        .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("examples").join(format!("{name}.c")))
        .arg("-L")
        .arg(&lib)
        .arg("-luswap")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on examples/{name}.c");
    Program { path: exe, _dir: dir }
}

/// Runs an example; returns its stdout, or `None` if it skipped.
fn run(exe: &Path, args: &[&str]) -> Option<String> {
    // cargo's LD_LIBRARY_PATH lists target/<profile> first, whose libuswap.so is only
    // refreshed by `cargo build`: point the loader at the one built for this test.
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", library_dir())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    if out.status.code() == Some(77) && !required() {
        return None;
    }
    assert!(out.status.success(), "{} {args:?} failed: {stderr}", exe.display());
    Some(stdout)
}

#[test]
fn round_trip_in_c_handler_mode() {
    let exe = compile("round_trip", "handler");
    if let Some(out) = run(&exe, &["handler"]) {
        assert!(out.contains("handler: 8192 pages written"), "{out}");
    }
}

#[test]
fn round_trip_in_c_sigbus_mode() {
    let exe = compile("round_trip", "sigbus");
    if let Some(out) = run(&exe, &["sigbus"]) {
        assert!(out.contains("sigbus: 8192 pages written"), "{out}");
    }
}

/// userfaultfd blocked by a seccomp filter: `uswap_open` returns `USWAP_ERR_UNAVAILABLE`
/// with a message naming seccomp.
#[test]
fn blocked_userfaultfd_is_an_error_code_with_a_message_in_c() {
    let exe = compile("round_trip", "blocked");
    let out = run(&exe, &["blocked"]).expect("the blocked case never skips");
    assert!(out.contains("blocked: userfaultfd(2) is blocked by this process's seccomp"), "{out}");
}

#[test]
fn zero_page_program_in_c() {
    let exe = compile("zero_page", "zero_page");
    if let Some(out) = run(&exe, &[]) {
        assert!(out.contains("growth over the reads"), "{out}");
        // Every page went out as zero and was mapped straight back as the zero page: the
        // reads fault nothing (ARCHITECTURE.md departure 26).
        let back = "swpout_zero 5120, swpin_zero 0, faults over the reads 0";
        assert!(out.contains(back), "every page mapped back at page-out: {out}");
    }
}
