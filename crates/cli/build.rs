//! Builds the shim (`crates/preload`, a cdylib) for `uswap` to carry inside itself, so that
//! one binary is the whole tool: `cargo install --path crates/cli` installs a `uswap` whose
//! `run` works with nothing beside it (crates/cli/src/shim.rs writes the shim into each
//! run's private directory).
//!
//! The rule. Cargo cannot depend on a cdylib from a binary (artifact dependencies are
//! unstable), so this script runs `cargo build` of the preload crate itself, from the same
//! workspace (its Cargo.lock, its profiles) and with the same profile and target as the
//! binary being built, into a target directory of its own: `<target>/<profile>/shim`. Its
//! own, because cargo holds a lock on the binary's target directory while this script
//! runs, and a nested build there would wait for it forever. The nested cargo shares the
//! outer one's jobserver (it inherits `CARGO_MAKEFLAGS`), so the two together use no more
//! CPUs than asked for. The copy is built without debug information and stripped of it: it
//! is written to disk for every run, and 4.5 MiB is written faster than 25 (release) or
//! 50 (debug); `USWAP_PRELOAD` runs a shim with its debug information where one is wanted.
//!
//! The cost: the preload crate's dependencies (engine, zswap, the C of lz4, zstd and ring)
//! are compiled twice on a fresh checkout, once for `uswap` and once for the shim; after
//! that the nested build only recompiles what changed. The script runs again when any
//! source file of the shim changes: the nested build's dep-info lists them all.
//!
//! It needs the source tree: a `uswap` built from a packaged crate, without
//! `crates/preload` beside it, fails here, saying so.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let preload = manifest_dir.join("../preload/Cargo.toml");
    if !preload.is_file() {
        fail(&format!(
            "{} not found: uswap embeds the shim built from the source tree, so build it \
             from a checkout (cargo install --path crates/cli)",
            preload.display()
        ));
    }
    let profile = if var("PROFILE") == "release" { "release" } else { "dev" };
    let target = var("TARGET");
    // OUT_DIR is <target>/<profile>[/<triple>...]/build/uswap-<hash>/out: three levels up
    // is the directory of the profile, which the nested build gets a directory inside.
    let shim_target =
        out_dir.ancestors().nth(3).map_or_else(|| out_dir.join("shim"), |d| d.join("shim"));
    let status = nested_cargo()
        .arg("build")
        .arg("--manifest-path")
        .arg(&preload)
        .args(["--lib", "--profile", profile, "--target", &target, "--target-dir"])
        .arg(&shim_target)
        // The copy carried inside uswap: no debug information (module essay).
        .args(["--config", &format!("profile.{profile}.debug=false")])
        .args(["--config", &format!("profile.{profile}.strip=\"debuginfo\"")])
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => fail(&format!("cargo build of the shim ({}) {status}", preload.display())),
        Err(e) => fail(&format!("cannot run cargo to build the shim: {e}")),
    }
    let dir = shim_target.join(&target).join(if profile == "dev" { "debug" } else { "release" });
    let built = dir.join("libuswap_preload.so");
    if let Err(e) = std::fs::copy(&built, out_dir.join("libuswap_preload.so")) {
        fail(&format!("{}: {e}", built.display()));
    }
    rerun_if_sources_change(&dir.join("libuswap_preload.d"), &manifest_dir);
}

/// The cargo that runs this script, with the variables of the outer build that must not
/// reach the nested one: a lint wrapper (`cargo clippy`'s) would lint the shim's crates
/// again and make their artifacts differ from a plain build's, rebuilding them each time.
fn nested_cargo() -> Command {
    let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for name in ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS", "CARGO_TARGET_DIR"] {
        command.env_remove(name);
    }
    command
}

/// Tells cargo to run this script again when a file the shim was built from changes: every
/// path the nested build's dep-info lists, and the manifests that choose its dependencies.
fn rerun_if_sources_change(dep_info: &Path, manifest_dir: &Path) {
    let text = std::fs::read_to_string(dep_info)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", dep_info.display())));
    let Some((_, deps)) = text.split_once(": ") else {
        fail(&format!("{}: no dependencies listed", dep_info.display()));
    };
    // Paths are separated by spaces; a space inside a path is written "\ ".
    let deps = deps.trim().replace("\\ ", "\u{0}");
    for dep in deps.split_whitespace() {
        println!("cargo:rerun-if-changed={}", dep.replace('\u{0}', " "));
    }
    let root = manifest_dir.join("../..");
    println!("cargo:rerun-if-changed={}", root.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        for krate in crates.flatten() {
            println!("cargo:rerun-if-changed={}", krate.path().join("Cargo.toml").display());
        }
    }
}

fn var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| fail(&format!("{name} is not set (run by cargo?)")))
}

fn fail(message: &str) -> ! {
    eprintln!("uswap build: {message}");
    std::process::exit(1);
}
