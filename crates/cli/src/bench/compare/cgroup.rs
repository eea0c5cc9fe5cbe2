//! The memory cgroups of a comparison: the one a kernel-side run is confined to (limit =
//! the budget), and the one a uswap-side run is measured in (no limit: `uswap run` keeps
//! the budget itself, and the group is the same instrument as the kernel side's, so both
//! peaks count the same things: anonymous memory, kernel memory such as page tables, and
//! page cache the run brought in, but not the pages of files it maps that were cached
//! before it started).
//!
//! ```text
//!   v1 (this machine): /sys/fs/cgroup/memory/<our cgroup>/uswap-bench-PID-N/
//!        memory.limit_in_bytes <- budget      memory.usage_in_bytes     (now)
//!        cgroup.procs          <- "0" (child) memory.max_usage_in_bytes (peak)
//!   v2: /sys/fs/cgroup/uswap-bench-PID-N/  (under the root, which may hold processes)
//!        memory.max <- budget   memory.swap.max <- max   memory.current / memory.peak
//! ```
//!
//! v1 nests the group under the harness's own memory cgroup (found in
//! /proc/self/cgroup), so whoever confines the harness still accounts for the run. v2
//! forbids processes in inner nodes that delegate controllers, so there the group goes
//! under the root. The workload joins the group between fork and exec (see `sys`), so its
//! first page is charged. On drop the group is emptied (any process left is killed) and
//! removed.

use super::machine::{Machine, Roots};
use super::sys;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup interface in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    fn limit_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        }
    }
    fn usage_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        }
    }
    fn peak_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            CgroupVersion::V2 => "memory.peak",
        }
    }
    /// What the limit file takes for "no limit".
    fn unlimited(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "-1",
            CgroupVersion::V2 => "max",
        }
    }
    /// The memory.stat line of the page cache charged to the group.
    fn cache_stat(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "cache",
            CgroupVersion::V2 => "file",
        }
    }
    /// The memory.stat line of the anonymous memory charged to the group and its children.
    fn anon_stat(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "total_rss",
            CgroupVersion::V2 => "anon",
        }
    }
}

/// The value of memory.stat's line `key` (`cache 4096`).
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Where new memory cgroups are made, and with which interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupParent {
    pub version: CgroupVersion,
    pub dir: PathBuf,
}

/// Finds the memory controller: v2 when the unified hierarchy offers `memory`, else v1.
///
/// # Errors
/// When neither interface has a memory controller.
pub fn locate(machine: &dyn Machine, roots: &Roots) -> Result<CgroupParent> {
    let fs = roots.sys.join("fs/cgroup");
    for unified in [fs.clone(), fs.join("unified")] {
        let controllers = machine.read(&unified.join("cgroup.subtree_control"));
        if controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
            return Ok(CgroupParent { version: CgroupVersion::V2, dir: unified });
        }
    }
    let v1 = fs.join("memory");
    if machine.exists(&v1.join("memory.limit_in_bytes")) {
        let own = machine.read(&roots.proc_file("self/cgroup")).unwrap_or_default();
        let relative = own_v1_memory_path(&own).unwrap_or_default();
        let dir = v1.join(relative.trim_start_matches('/'));
        let dir = if machine.exists(&dir.join("memory.limit_in_bytes")) { dir } else { v1 };
        return Ok(CgroupParent { version: CgroupVersion::V1, dir });
    }
    bail!("no memory cgroup controller (neither v2 memory.max nor v1 memory.limit_in_bytes)")
}

/// The path of our v1 memory cgroup from /proc/self/cgroup (`4:memory:/a/b`).
fn own_v1_memory_path(proc_self_cgroup: &str) -> Option<String> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then(|| path.to_string())
    })
}

/// A memory cgroup, limited to the budget or not limited; emptied and removed on drop.
pub struct MemCgroup<'m> {
    machine: &'m dyn Machine,
    version: CgroupVersion,
    dir: PathBuf,
}

impl<'m> MemCgroup<'m> {
    /// Creates `parent/name` with its memory limit set to `limit_bytes` (`None`: no limit,
    /// a group that only measures).
    ///
    /// # Errors
    /// mkdir or a limit write failed (a created directory is removed again).
    pub fn create(
        machine: &'m dyn Machine,
        parent: &CgroupParent,
        name: &str,
        limit_bytes: Option<u64>,
    ) -> Result<Self> {
        let dir = parent.dir.join(name);
        machine.create_dir(&dir)?;
        let group = MemCgroup { machine, version: parent.version, dir };
        let limit = limit_bytes.map_or_else(|| group.version.unlimited().into(), |b| b.to_string());
        machine.write(&group.file(group.version.limit_file()), &limit)?;
        if group.version == CgroupVersion::V2 {
            // Swap is what is measured: never limit it.
            machine.write(&group.file("memory.swap.max"), "max")?;
        }
        Ok(group)
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The file a process writes "0" to, to join (cgroup.procs in both versions).
    pub fn procs_file(&self) -> PathBuf {
        self.file("cgroup.procs")
    }

    /// Sets the group's limit (`--budget auto`'s kernel side moves it): v1's hard limit,
    /// v2's `memory.high` (reclaim above it, never an OOM kill, as Senpai uses it).
    ///
    /// Context: the kernel reclaims down to the new limit in this thread before the write
    /// returns; v1 fails with EBUSY when it cannot.
    ///
    /// # Errors
    /// The write's error.
    pub fn set_limit(&self, bytes: u64) -> Result<()> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.high",
        };
        self.machine.write(&self.file(file), &bytes.to_string())
    }

    /// Memory charged to the group now, bytes.
    pub fn usage_bytes(&self) -> u64 {
        self.read_number(self.version.usage_file())
    }

    /// The highest charge since creation, bytes.
    pub fn peak_bytes(&self) -> u64 {
        self.read_number(self.version.peak_file())
    }

    /// Page cache charged to the group now (v1 memory.stat `cache`, v2 `file`), bytes:
    /// files the run read or wrote first. `None` where memory.stat cannot be read.
    pub fn cache_bytes(&self) -> Option<u64> {
        self.stat_bytes(self.version.cache_stat())
    }

    /// Anonymous memory charged to the group now, its children's included (v1 memory.stat
    /// `total_rss`, which counts the swap cache too; v2 `anon`), bytes. `None` where
    /// memory.stat cannot be read.
    pub fn anon_bytes(&self) -> Option<u64> {
        self.stat_bytes(self.version.anon_stat())
    }

    /// A memory.stat line's value.
    fn stat_bytes(&self, key: &str) -> Option<u64> {
        let stat = self.machine.read(&self.file("memory.stat")).ok()?;
        stat_value(&stat, key)
    }

    /// Kernel memory charged at peak (v1 `memory.kmem.max_usage_in_bytes`; v2: the
    /// `zswap` line of memory.stat is the better figure and is read by the caller).
    pub fn kmem_peak_bytes(&self) -> Option<u64> {
        match self.version {
            CgroupVersion::V1 => Some(self.read_number("memory.kmem.max_usage_in_bytes")),
            CgroupVersion::V2 => None,
        }
    }

    /// How many times the group's OOM killer has killed a process (v1 `memory.oom_control`,
    /// v2 `memory.events`, line `oom_kill N`), when the kernel reports it.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let text = self.machine.read(&self.file(file)).ok()?;
        text.lines().find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    fn read_number(&self, name: &str) -> u64 {
        self.machine.read(&self.file(name)).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    fn pids(&self) -> Vec<u32> {
        let procs = self.machine.read(&self.procs_file()).unwrap_or_default();
        procs.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }
}

impl Drop for MemCgroup<'_> {
    fn drop(&mut self) {
        // Bounded: 50 x 100 ms for stragglers to die and the group to become removable.
        for attempt in 0..50 {
            for pid in self.pids() {
                sys::kill(pid, sys::SIGKILL);
            }
            match self.machine.remove_dir(&self.dir) {
                Ok(()) => return,
                Err(error) if attempt == 49 => {
                    eprintln!("uswap bench compare: teardown: {error:#}");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// Opens `procs` for writing, for [`sys::join_cgroup_before_exec`].
///
/// # Errors
/// The open error.
pub fn open_procs(procs: &Path) -> Result<std::os::fd::OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(procs)
        .with_context(|| format!("open {procs:?}"))?;
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::FakeMachine;
    use super::*;

    fn roots() -> Roots {
        Roots { sys: "/sys".into(), proc: "/proc".into() }
    }

    #[test]
    fn v1_group_nests_under_our_own() {
        let machine = FakeMachine::with_files(&[
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "max"),
            ("/sys/fs/cgroup/memory/api/x/memory.limit_in_bytes", "max"),
            ("/proc/self/cgroup", "5:devices:/\n4:memory:/api/x\n0::/"),
            ("/sys/fs/cgroup/unified/cgroup.subtree_control", ""),
        ]);
        let parent = locate(&machine, &roots()).unwrap();
        assert_eq!(parent.version, CgroupVersion::V1);
        assert_eq!(parent.dir, Path::new("/sys/fs/cgroup/memory/api/x"));
        let group =
            MemCgroup::create(&machine, &parent, "uswap-bench-1-0", Some(256 << 20)).unwrap();
        assert_eq!(
            group.procs_file(),
            Path::new("/sys/fs/cgroup/memory/api/x/uswap-bench-1-0/cgroup.procs")
        );
        drop(group);
        assert_eq!(
            machine.steps(),
            [
                "mkdir /sys/fs/cgroup/memory/api/x/uswap-bench-1-0",
                "write /sys/fs/cgroup/memory/api/x/uswap-bench-1-0/memory.limit_in_bytes 268435456",
                "rmdir /sys/fs/cgroup/memory/api/x/uswap-bench-1-0",
            ]
        );
    }

    #[test]
    fn v2_is_preferred_when_it_has_memory() {
        let machine = FakeMachine::with_files(&[
            ("/sys/fs/cgroup/cgroup.subtree_control", "cpu io memory pids"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "max"),
        ]);
        let parent = locate(&machine, &roots()).unwrap();
        assert_eq!(
            parent,
            CgroupParent { version: CgroupVersion::V2, dir: "/sys/fs/cgroup".into() }
        );
        let group = MemCgroup::create(&machine, &parent, "g", Some(1 << 20)).unwrap();
        assert_eq!(
            machine.steps()[1..],
            [
                "write /sys/fs/cgroup/g/memory.max 1048576",
                "write /sys/fs/cgroup/g/memory.swap.max max"
            ]
        );
        machine.files.borrow_mut().insert("/sys/fs/cgroup/g/memory.peak".into(), "4096".into());
        assert_eq!(group.peak_bytes(), 4096);
        assert_eq!(group.oom_kills(), None);
        let events = "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\noom_group_kill 0";
        machine.files.borrow_mut().insert("/sys/fs/cgroup/g/memory.events".into(), events.into());
        assert_eq!(group.oom_kills(), Some(1));
    }

    #[test]
    fn a_measuring_group_has_no_limit_and_reports_its_page_cache_and_anon() {
        for (version, dir, limit_file, unlimited, stat) in [
            (
                CgroupVersion::V1,
                "/v1",
                "memory.limit_in_bytes",
                "-1",
                "cache 8192\nrss 4096\ntotal_cache 8192\ntotal_rss 12288",
            ),
            (CgroupVersion::V2, "/v2", "memory.max", "max", "anon 12288\nfile 8192\nkernel 1"),
        ] {
            let machine = FakeMachine::default();
            let parent = CgroupParent { version, dir: dir.into() };
            let group = MemCgroup::create(&machine, &parent, "u", None).unwrap();
            assert_eq!(machine.steps()[1], format!("write {dir}/u/{limit_file} {unlimited}"));
            assert_eq!(group.cache_bytes(), None, "no memory.stat yet");
            machine.files.borrow_mut().insert(group.file("memory.stat"), stat.into());
            assert_eq!(group.cache_bytes(), Some(8192), "{version:?}");
            // v1's own `rss` leaves out its children's: the hierarchy's total is read.
            assert_eq!(group.anon_bytes(), Some(12288), "{version:?}");
        }
    }

    #[test]
    fn no_controller_is_an_error() {
        let machine = FakeMachine::default();
        assert!(locate(&machine, &roots()).is_err());
    }

    #[test]
    fn own_path_parsing() {
        assert_eq!(own_v1_memory_path("4:memory:/a/b\n").as_deref(), Some("/a/b"));
        assert_eq!(own_v1_memory_path("3:cpu,memory:/c").as_deref(), Some("/c"));
        assert_eq!(own_v1_memory_path("0::/"), None);
    }
}
