//! Helpers shared by the integration tests that run the real `uswap` binary.

// Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding the `uswap` binary under test (target/debug or target/release).
pub fn target_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_uswap"));
    exe.parent().unwrap().to_path_buf()
}

/// The workload program beside the binary under test, if built (`cargo test --workspace`
/// builds it; `cargo test -p uswap` alone may not).
#[allow(dead_code)]
pub fn workload_binary() -> Option<PathBuf> {
    let candidate = target_dir().join("uswap-workload");
    candidate.exists().then_some(candidate)
}

/// The `uswap run` shim, built once per test process with the binary's profile:
/// `cargo test` builds the preload crate's test harness, not its cdylib, so a fresh
/// checkout has no libuswap_preload.so until this runs.
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = target_dir();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-q", "-p", "preload"]);
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        assert!(cargo.status().unwrap().success(), "cargo build -p preload");
        dir.join("libuswap_preload.so")
    })
}

/// Whether this machine lets `uswap run` work (kernel-mode faults); says so when it does
/// not, for the test to skip.
#[allow(dead_code)]
pub fn can_run() -> bool {
    let ok = uffd::probe().is_ok_and(|p| p.require_kernel_faults().is_ok());
    if !ok {
        eprintln!("skipped: userfaultfd without kernel-mode faults here");
    }
    ok
}

/// `uswap ARGS` with the shim under test; its output, echoed to stderr.
#[allow(dead_code)]
pub fn uswap(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(args)
        .env("USWAP_PRELOAD", shim())
        .output()
        .unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// Compiles `run_programs/{name}.c` to a path of its own (tests run in parallel: one
/// compiling over a binary another runs made that exec fail).
#[allow(dead_code)]
pub fn compile(name: &str) -> PathBuf {
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run_programs").join(format!("{name}.c"));
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("uswap-test-{}-{n}-{name}", std::process::id()));
    let status =
        Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&out).arg(&src).status().unwrap();
    assert!(status.success(), "cc {name}.c");
    out
}

/// A private directory in the temporary directory, removed (with what it holds) on drop.
#[allow(dead_code)]
pub struct TempDir(pub PathBuf);

#[allow(dead_code)]
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("uswap-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Every file in it, with its length.
    pub fn sizes(&self) -> Vec<(String, u64)> {
        let mut sizes: Vec<(String, u64)> = std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().to_string(), e.metadata().unwrap().len()))
            .collect();
        sizes.sort();
        sizes
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
