//! The Debian package builds from the binary under test and holds what it should, and its
//! `uswap` runs a program from where it unpacks, with nothing of the source tree beside it:
//! `.ci/package` with `USWAP_BIN` set, so no release build is needed (contrib/deb).
//! Skipped, saying so, where `dpkg-deb` is missing.

use std::process::Command;
use std::time::Duration;

mod common;
use common::output_within;

/// The longest the package and its checks may take, on a loaded machine.
const LIMIT: Duration = Duration::from_secs(600);

#[test]
fn the_debian_package_builds_and_its_uswap_runs() {
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        eprintln!("skipped: no dpkg-deb");
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut package = Command::new(format!("{root}/.ci/package"));
    package.env("USWAP_BIN", env!("CARGO_BIN_EXE_uswap")).env_remove("USWAP_PRELOAD");
    let out = output_within(&mut package, LIMIT);
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "{text}");
    assert!(text.lines().any(|l| l == "package: ok"), "{text}");
}
