//! What the `uswap run` tests (run.rs, run_setup.rs) share: runs that hold the machine's
//! CPUs for reading or writing, and the summary's figures. Each declares `mod common;`
//! before this.

#![allow(dead_code)]

use crate::common::TempDir;
use std::process::{Command, Output};

/// Every `uswap` command of these tests holds this for reading; a test that needs the
/// machine's CPUs otherwise idle holds it for writing, so that no other test's program
/// runs meanwhile (the tests of a file run side by side, one a CPU).
pub static CPUS: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub fn uswap(args: &[&str]) -> Output {
    let _shared = CPUS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    uswap_alone(args)
}

/// [`uswap`], for a test that holds [`CPUS`] for writing. `uswap run` is given
/// `--verbose`: these tests read the engine's detail lines.
pub fn uswap_alone(args: &[&str]) -> Output {
    let mut args = args.to_vec();
    if args.first() == Some(&"run") {
        args.insert(1, "--verbose");
    }
    crate::common::uswap(&args)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The peak resident set `uswap run` reported, in MiB.
pub fn peak_mib(err: &str) -> f64 {
    summary_mib(err, "peak resident ")
}

/// The size after `key` on `uswap run`'s budget line, in MiB.
pub fn summary_mib(err: &str, key: &str) -> f64 {
    let line = err.lines().find(|l| l.contains(key)).expect("summary line");
    let text = line.split(key).nth(1).unwrap();
    let mut words = text.split([' ', ',']);
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "GiB" => value * 1024.0,
        "MiB" => value,
        "KiB" => value / 1024.0,
        other => panic!("unit {other}"),
    }
}

/// A file system of `size` mounted (tmpfs) on a fresh directory, unmounted on drop (and
/// the directory removed).
pub struct SmallDisk(pub std::path::PathBuf, #[allow(dead_code)] TempDir);

impl SmallDisk {
    pub fn mount(size: &str) -> Option<SmallDisk> {
        SmallDisk::mount_with(size, "")
    }

    /// [`SmallDisk::mount`] with more mount options (`,noexec`).
    pub fn mount_with(size: &str, more: &str) -> Option<SmallDisk> {
        let scratch = TempDir::new(&format!("small-{size}"));
        let dir = scratch.0.clone();
        let options = format!("size={size}{more}");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "uswap-small"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(SmallDisk(dir, scratch))
    }
}

impl Drop for SmallDisk {
    /// Unmounts, lazily if the file system is still busy (a process of the run that has not
    /// finished closing its swap file): the directory must go either way, or the suite's
    /// temporary directory keeps it.
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("--lazy").arg(&self.0).status();
        }
    }
}
