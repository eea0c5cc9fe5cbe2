//! The default budget: inside a memory cgroup with a limit (a container), half of what the
//! cgroup has left under it; elsewhere half of MemAvailable.
//!
//! ```text
//!   /proc/self/cgroup   0::/user.slice/x          (v2)   8:memory:/docker/abc   (v1)
//!   each level, up to the root:  memory.max, memory.high   |  memory.limit_in_bytes
//!   the lowest limit found, less what that cgroup uses now (memory.current | usage_in_bytes)
//! ```
//!
//! Half, as outside one: the rest is for what the same cgroup is charged besides the
//! tree's budget, above all the swap file's pages in the page cache (`--swap-file-cache
//! keep`) and `uswap run` itself. The summary (`--verbose`) says which source it used.

use anyhow::{anyhow, Context, Result};
use std::path::{Path, PathBuf};

/// The default budget's share of what is left, percent.
const DEFAULT_BUDGET_PERCENT: u64 = 50;

/// v1's "no limit" is the largest page-aligned signed value; anything past 2^60 is none.
const NO_LIMIT: u64 = 1 << 60;

/// Where the budget came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetSource {
    /// `--budget`.
    Flag,
    /// Half of what a memory cgroup has left under its limit.
    Cgroup {
        /// The limit's file.
        file: PathBuf,
        /// The limit.
        limit_bytes: u64,
        /// What the cgroup used when the run started.
        used_bytes: u64,
    },
    /// Half of MemAvailable.
    MemAvailable {
        /// MemAvailable when the run started.
        available_bytes: u64,
    },
    /// `--budget auto`: a controller moves it, under a ceiling from `max=` or else the
    /// default budget's source.
    Auto {
        /// The target, in hundredths of a percent of the run.
        target_centi_percent: u64,
        /// Where the ceiling came from: `None` for `max=`.
        ceiling: Option<Box<BudgetSource>>,
    },
}

/// The budget `--budget` asks for (`flag`), where it came from, and `auto`'s spec when it
/// is `auto` (the budget is then its ceiling). `min_bytes` is one folio.
///
/// # Errors
/// A bad size or `auto` flag (one line), or no default to be had.
pub fn from_flag(
    flag: Option<&str>,
    min_bytes: u64,
) -> Result<(u64, BudgetSource, Option<runstat::auto::AutoSpec>)> {
    let default = || -> Result<(u64, BudgetSource)> {
        let (wanted, source) = default_budget()?;
        Ok((crate::preflight::default_budget(wanted), source))
    };
    let Some(text) = flag else {
        let (bytes, source) = default()?;
        return Ok((bytes, source, None));
    };
    let Some(spec) = runstat::auto::parse(text, min_bytes).map_err(|e| anyhow!("{e}"))? else {
        let bytes = runstat::parse_size(text).map_err(|e| anyhow!("--budget: {e}"))?;
        return Ok((bytes, BudgetSource::Flag, None));
    };
    let target_centi_percent = (spec.target_percent * 100.0).round() as u64;
    let (ceiling, source) = match spec.max_bytes {
        Some(max) => (max, None),
        None => default().map(|(bytes, source)| (bytes, Some(Box::new(source))))?,
    };
    Ok((ceiling, BudgetSource::Auto { target_centi_percent, ceiling: source }, Some(spec)))
}

impl BudgetSource {
    /// The source in words, for the verbose summary.
    pub fn describe(&self) -> String {
        use runstat::format_size;
        match self {
            BudgetSource::Flag => "--budget".to_string(),
            BudgetSource::Cgroup { file, limit_bytes, used_bytes } => format!(
                "half of what the memory cgroup had left under its limit ({} in {}, {} used)",
                format_size(*limit_bytes),
                file.display(),
                format_size(*used_bytes)
            ),
            BudgetSource::MemAvailable { available_bytes } => {
                format!("half of MemAvailable ({})", format_size(*available_bytes))
            }
            BudgetSource::Auto { target_centi_percent, ceiling } => format!(
                "auto: lowered while faults cost under {}% of the run, raised at once when \
                 they cost more; its ceiling {}",
                *target_centi_percent as f64 / 100.0,
                ceiling.as_ref().map_or("max=".to_string(), |s| s.describe())
            ),
        }
    }
}

/// The default budget and its source (module essay).
///
/// # Errors
/// Neither a cgroup limit nor MemAvailable could be read.
pub fn default_budget() -> Result<(u64, BudgetSource)> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some((file, limit_bytes, used_bytes)) =
        cgroup_limit(&cgroups, Path::new("/sys/fs/cgroup"))
    {
        let left = limit_bytes.saturating_sub(used_bytes);
        let source = BudgetSource::Cgroup { file, limit_bytes, used_bytes };
        return Ok((left * DEFAULT_BUDGET_PERCENT / 100, source));
    }
    let available_bytes = mem_available_bytes()?;
    let source = BudgetSource::MemAvailable { available_bytes };
    Ok((available_bytes * DEFAULT_BUDGET_PERCENT / 100, source))
}

/// The lowest memory limit over this process's cgroup and its ancestors, `root` being
/// where the cgroup file systems are mounted: the limit's file, the limit, and what that
/// cgroup uses now. `None` when no level has one.
pub fn cgroup_limit(proc_cgroup: &str, root: &Path) -> Option<(PathBuf, u64, u64)> {
    let mut best: Option<(PathBuf, u64, u64)> = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let (base, names, usage): (PathBuf, &[&str], &str) = if controllers.is_empty() {
            (root.to_path_buf(), &["memory.max", "memory.high"], "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), &["memory.limit_in_bytes"], "memory.usage_in_bytes")
        } else {
            continue;
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            for name in names {
                let Some(limit) = read_number(&dir.join(name)).filter(|&l| l < NO_LIMIT) else {
                    continue;
                };
                if best.as_ref().is_none_or(|(_, b, _)| limit < *b) {
                    let used = read_number(&dir.join(usage)).unwrap_or(0);
                    best = Some((dir.join(name), limit, used));
                }
            }
            if dir == base || !dir.pop() || !dir.starts_with(&base) {
                break;
            }
        }
    }
    best
}

/// A number in a cgroup file (`max`, or anything else, is `None`).
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn mem_available_bytes() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no MemAvailable in /proc/meminfo: give --budget"))?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake cgroup tree under a temporary root, removed (with the tree) when dropped.
    fn tree(name: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::Builder::new().prefix(&format!("uswap-cg-{name}-")).tempdir().unwrap();
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn v2_takes_the_lowest_limit_up_the_tree_and_its_usage() {
        let root = tree(
            "v2",
            &[
                ("a/memory.max", "max\n"),
                ("a/memory.high", "1073741824\n"),
                ("a/memory.current", "100\n"),
                ("a/b/memory.max", "2147483648\n"),
                ("a/b/memory.current", "5\n"),
            ],
        );
        let root = root.path();
        let (file, limit, used) = cgroup_limit("0::/a/b\n", root).unwrap();
        assert_eq!((limit, used), (1 << 30, 100));
        assert!(file.ends_with("a/memory.high"), "{}", file.display());
        assert_eq!(cgroup_limit("0::/elsewhere\n", root), None);
    }

    #[test]
    fn v1_reads_the_memory_controllers_limit_and_ignores_no_limit() {
        let root = tree(
            "v1",
            &[
                ("memory/docker/x/memory.limit_in_bytes", "536870912\n"),
                ("memory/docker/x/memory.usage_in_bytes", "1048576\n"),
                ("memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ],
        );
        let text = "12:cpu,cpuacct:/docker/x\n8:memory:/docker/x\n";
        let root = root.path();
        let (_, limit, used) = cgroup_limit(text, root).unwrap();
        assert_eq!((limit, used), (512 << 20, 1 << 20));
        assert_eq!(cgroup_limit("8:memory:/\n", root), None, "the root's is no limit");
    }
}
