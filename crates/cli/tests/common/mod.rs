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
