//! The machine the kernel side changes, behind a trait so that setup and teardown can be
//! tested without root: [`RealMachine`] writes sysfs and runs `mkswap`/`swapon`;
//! the tests' fake records every step and keeps files in a map.
//!
//! Every path is absolute and built from [`Roots`], so a test can also point the real
//! file operations at a temporary directory that looks like /sys and /proc.

use super::sys;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where /sys, /proc and the cgroup mounts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots { sys: "/sys".into(), proc: "/proc".into() }
    }
}

impl Roots {
    pub fn zram(&self, file: &str) -> PathBuf {
        self.sys.join("block/zram0").join(file)
    }
    pub fn zswap(&self, parameter: &str) -> PathBuf {
        self.sys.join("module/zswap/parameters").join(parameter)
    }
    pub fn proc_file(&self, file: &str) -> PathBuf {
        self.proc.join(file)
    }
}

/// The operations setup and teardown are made of. Context: may block (commands, sysfs).
pub trait Machine {
    /// Reads a (sysfs) file, trimmed.
    fn read(&self, path: &Path) -> Result<String>;
    /// Writes `value` to a (sysfs) file.
    fn write(&self, path: &Path, value: &str) -> Result<()>;
    /// Runs a program to completion; a non-zero exit is an error carrying its stderr.
    fn run(&self, program: &str, args: &[&str]) -> Result<()>;
    fn exists(&self, path: &Path) -> bool;
    fn create_dir(&self, path: &Path) -> Result<()>;
    fn remove_dir(&self, path: &Path) -> Result<()>;
    /// Creates a file of `len` bytes with every block allocated (a swap file).
    fn create_allocated_file(&self, path: &Path, len: u64) -> Result<()>;
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// The names in a directory (empty if it cannot be read).
    fn list_dir(&self, path: &Path) -> Vec<String>;
    /// `path` with its symbolic links followed (itself if that fails): a merged slab
    /// cache's aliases resolve to one directory.
    fn resolve(&self, path: &Path) -> PathBuf;
}

/// The machine itself.
#[derive(Debug, Default)]
pub struct RealMachine;

impl Machine for RealMachine {
    fn read(&self, path: &Path) -> Result<String> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {path:?}"))?;
        Ok(text.trim().to_string())
    }

    fn write(&self, path: &Path, value: &str) -> Result<()> {
        std::fs::write(path, value).with_context(|| format!("write {value:?} to {path:?}"))
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<()> {
        let output = Command::new(program)
            .args(args)
            .output()
            .with_context(|| format!("run {program} {}", args.join(" ")))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            bail!("{program} {} failed ({}): {}", args.join(" "), output.status, stderr.trim());
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn create_dir(&self, path: &Path) -> Result<()> {
        std::fs::create_dir(path).with_context(|| format!("mkdir {path:?}"))
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir(path).with_context(|| format!("rmdir {path:?}"))
    }

    fn create_allocated_file(&self, path: &Path, len: u64) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("create {path:?}"))?;
        let allocated = sys::allocate(&file, len);
        if allocated.is_err() {
            let _ = std::fs::remove_file(path); // Nothing of ours to keep.
        }
        allocated.with_context(|| format!("fallocate {len} bytes for {path:?}"))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).with_context(|| format!("rm {path:?}"))
    }

    fn list_dir(&self, path: &Path) -> Vec<String> {
        let entries = std::fs::read_dir(path).into_iter().flatten().flatten();
        entries.filter_map(|e| e.file_name().into_string().ok()).collect()
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
    }
}

#[cfg(test)]
pub mod fake {
    //! A machine made of a map of files and a log of steps.
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    #[derive(Debug, Default)]
    pub struct FakeMachine {
        pub files: RefCell<BTreeMap<PathBuf, String>>,
        pub dirs: RefCell<Vec<PathBuf>>,
        pub log: RefCell<Vec<String>>,
        /// Commands (program name) that fail when run.
        pub failing: RefCell<Vec<String>>,
        /// Symbolic links: name -> target.
        pub links: RefCell<BTreeMap<PathBuf, PathBuf>>,
    }

    impl FakeMachine {
        pub fn with_files(files: &[(&str, &str)]) -> Self {
            let machine = FakeMachine::default();
            for (path, value) in files {
                machine.files.borrow_mut().insert(PathBuf::from(path), value.to_string());
            }
            machine
        }
        pub fn value(&self, path: &str) -> Option<String> {
            self.files.borrow().get(Path::new(path)).cloned()
        }
        pub fn steps(&self) -> Vec<String> {
            self.log.borrow().clone()
        }
    }

    impl Machine for FakeMachine {
        fn read(&self, path: &Path) -> Result<String> {
            let files = self.files.borrow();
            let value = files.get(path).with_context(|| format!("no file {path:?}"))?;
            Ok(value.trim().to_string())
        }
        fn write(&self, path: &Path, value: &str) -> Result<()> {
            self.log.borrow_mut().push(format!("write {} {value}", path.display()));
            self.files.borrow_mut().insert(path.to_path_buf(), value.to_string());
            Ok(())
        }
        fn run(&self, program: &str, args: &[&str]) -> Result<()> {
            self.log.borrow_mut().push(format!("run {program} {}", args.join(" ")));
            if self.failing.borrow().iter().any(|p| p == program) {
                bail!("{program} failed");
            }
            Ok(())
        }
        fn exists(&self, path: &Path) -> bool {
            self.files.borrow().contains_key(path) || self.dirs.borrow().iter().any(|d| d == path)
        }
        fn create_dir(&self, path: &Path) -> Result<()> {
            self.log.borrow_mut().push(format!("mkdir {}", path.display()));
            self.dirs.borrow_mut().push(path.to_path_buf());
            Ok(())
        }
        fn remove_dir(&self, path: &Path) -> Result<()> {
            self.log.borrow_mut().push(format!("rmdir {}", path.display()));
            self.dirs.borrow_mut().retain(|d| d != path);
            Ok(())
        }
        fn create_allocated_file(&self, path: &Path, len: u64) -> Result<()> {
            self.log.borrow_mut().push(format!("fallocate {} {len}", path.display()));
            Ok(())
        }
        fn remove_file(&self, path: &Path) -> Result<()> {
            self.log.borrow_mut().push(format!("rm {}", path.display()));
            Ok(())
        }
        fn list_dir(&self, path: &Path) -> Vec<String> {
            let files = self.files.borrow();
            let links = self.links.borrow();
            let mut names: Vec<String> = files
                .keys()
                .chain(links.keys())
                .filter_map(|p| p.strip_prefix(path).ok()?.components().next())
                .filter_map(|c| c.as_os_str().to_str().map(String::from))
                .collect();
            names.sort();
            names.dedup();
            names
        }
        fn resolve(&self, path: &Path) -> PathBuf {
            self.links.borrow().get(path).cloned().unwrap_or_else(|| path.to_path_buf())
        }
    }
}
