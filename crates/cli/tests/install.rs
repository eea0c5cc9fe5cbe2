//! `cargo install --path crates/cli` gives a working tool: one binary, which carries the
//! shim it loads into programs (crates/cli/build.rs, crates/cli/src/shim.rs).
//!
//! The test installs into a temporary root, offline and locked, through the workspace's
//! own target directory and profile, so that the install reuses what `cargo test` built
//! (a cold install of the workspace takes minutes on two CPUs; this one seconds). Then it
//! runs the installed `uswap` from a directory outside the source tree, with no
//! `USWAP_PRELOAD`: `uswap run` must give the program's own output and the default
//! summary. The run needs userfaultfd with kernel-mode faults and python3, and skips,
//! saying so, without them; the install and the checks of the binary alone always run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
use common::{can_run, output_within, target_dir, TempDir, RUN_LIMIT};

/// The longest the install may take: it rebuilds the binary at most, and its shim when
/// the shim's sources changed since `cargo test` built them, on a loaded machine.
const INSTALL_LIMIT: Duration = Duration::from_secs(1200);

/// Installs `uswap` under `root`; its path.
fn install(root: &Path) -> PathBuf {
    let profile_dir = target_dir();
    let target = profile_dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["install", "--offline", "--locked", "--quiet", "--no-track", "--path"]);
    cargo.arg(env!("CARGO_MANIFEST_DIR")).arg("--root").arg(root);
    if profile_dir.ends_with("debug") {
        cargo.arg("--debug");
    }
    cargo.env("CARGO_TARGET_DIR", target).env_remove("USWAP_PRELOAD");
    let out = output_within(&mut cargo, INSTALL_LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo install: {err}");
    root.join("bin/uswap")
}

#[test]
fn an_installed_uswap_runs_a_program_with_nothing_beside_it() {
    let root = TempDir::new("install");
    let uswap = install(&root.0);
    let installed: Vec<String> = std::fs::read_dir(root.0.join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(installed, ["uswap"], "one binary, nothing beside it");
    let elsewhere = TempDir::new("install-cwd");
    let run = |args: &[&str]| {
        let mut command = Command::new(&uswap);
        command.args(args).current_dir(&elsewhere.0).env_remove("USWAP_PRELOAD");
        output_within(&mut command, RUN_LIMIT)
    };
    let check = run(&["check"]);
    let report = String::from_utf8_lossy(&check.stdout).to_string();
    let shim = report.lines().find(|l| l.contains(" shim ")).unwrap_or_default().to_string();
    assert!(shim.starts_with("ok") && shim.contains("inside uswap"), "{report}");
    if !can_run() {
        return;
    }
    // The interpreter itself, not a wrapper script that starts it (pyenv's): one process.
    let which = "import sys; print(sys.executable)";
    let found = output_within(Command::new("python3").args(["-c", which]), RUN_LIMIT);
    if !found.status.success() {
        eprintln!("skipped: no python3");
        return;
    }
    let python = String::from_utf8_lossy(&found.stdout).trim().to_string();
    let script = "x = [bytes([i % 251]) * 4000 for i in range(20000)]; print(sum(map(len, x)))";
    let plain = output_within(Command::new(&python).args(["-c", script]), RUN_LIMIT);
    assert!(plain.status.success());
    let out = run(&["run", "--budget", "32M", "--", &python, "-c", script]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{err}");
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, plain.stdout, "the program's own output: {err}");
    let summary: Vec<&str> = err.lines().filter(|l| l.starts_with("uswap: ")).collect();
    assert!(summary.len() == 3 || summary.len() == 4, "{err}");
    assert!(summary[1].starts_with("uswap: budget 32.0 MiB, peak "), "{err}");
    assert!(!err.contains("unmanaged"), "the installed shim managed it: {err}");
}
