//! Records the git commit the simulator was built from, so a failure can print
//! `seed=N commit=REV` and be replayed from exactly that code (TigerBeetle's VOPR).
//!
//! The commit comes from `git rev-parse` at build time, with `-dirty` when the work tree
//! has uncommitted changes; outside a git checkout it is `unknown`. The build script re-runs
//! when HEAD moves or the index changes.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    let rev = if dirty { format!("{commit}-dirty") } else { commit };
    println!("cargo:rustc-env=USWAP_SIM_COMMIT={rev}");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/logs/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
