//! The tree seen through /proc: its processes, their resident memory, their parents, and
//! why one runs without an engine.
//!
//! The descendants of `uswap run` are found through each task's `children` file (every
//! thread's: a child belongs to the thread that forked it, and an orphan to whichever
//! thread of the subreaper the kernel picked), which costs a read per thread of the tree
//! instead of one per process on the machine; a kernel without those files gets a walk of
//! every /proc/PID/stat.
//!
//! Context: the broker's thread; every read may fail (a process gone meanwhile), which
//! reads as "not there".

use std::collections::{BTreeMap, BTreeSet};

/// One process of the tree at one scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// Its resident set (statm), bytes.
    pub rss: u64,
}

/// How many processes a scan follows at most (a fork bomb must not stall the broker).
pub const SCAN_MAX: usize = 16_384;

/// The pids `pid`'s threads forked, or `None` where the kernel has no `children` files.
fn children(pid: u32) -> Option<Vec<u32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else { continue };
        any = true;
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    any.then_some(out)
}

/// `pid`'s parent (from /proc/PID/stat), `None` for a process gone.
pub fn parent(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` descends from `root` (its parent links lead there).
pub fn descends(pid: u32, root: u32) -> bool {
    let mut at = pid;
    for _ in 0..SCAN_MAX {
        match parent(at) {
            Some(p) if p == root => return true,
            Some(p) if p > 1 && p != at => at = p,
            _ => return false,
        }
    }
    false
}

/// `pid`'s resident set, bytes; `None` for a process gone, or one with no address space
/// left (a zombie: exited, not yet reaped by its parent, as a `multiprocessing` pool's
/// workers wait for the pool's thread; its exit is its member's, not an unmanaged
/// process's).
pub fn rss(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(size)), Some(Ok(pages))) = (fields.next(), fields.next()) else { return None };
    (size > 0).then_some(pages * 4096)
}

/// `pid`'s anonymous and shared memory (`RssAnon + RssShmem` of its status), bytes: what
/// a member's engine charges for its process (the preload crate's `charge_the_rest`); the
/// rest of its resident set is file-backed page cache.
pub fn anon_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(uffd::MemStatus::parse(&text).anon_bytes())
}

/// The anonymous memory only `pid` maps (`Private_Dirty` of smaps_rollup), bytes: what a
/// process that runs without an engine adds to the tree, measured as a member's charge is
/// ([`anon_bytes`]). A child forked without an exec shares its parent's pages
/// copy-on-write, and its resident set counts them again; its private pages are the ones
/// it wrote since. A private page that was never written is a file's (a library's text
/// that only this process maps): page cache, which the kernel drops under pressure.
pub fn private_anon_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Private_Dirty:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Every live descendant of `root` but those in `exclude` (and their subtrees), parents
/// before children.
pub fn descendants(root: u32, exclude: &[u32]) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut queue = vec![(root, 0u32)];
    let mut fallback = None;
    while let Some((pid, ppid)) = queue.pop() {
        if pid != root {
            let Some(rss) = rss(pid) else { continue };
            out.push(Proc { pid, ppid, rss });
        }
        if out.len() >= SCAN_MAX {
            break;
        }
        let kids = match children(pid) {
            Some(kids) => kids,
            None => {
                fallback.get_or_insert_with(parents_of_all).get(&pid).cloned().unwrap_or_default()
            }
        };
        queue.extend(kids.into_iter().filter(|k| !exclude.contains(k)).map(|k| (k, pid)));
    }
    out
}

/// Every process's children, from every /proc/PID/stat.
fn parents_of_all() -> BTreeMap<u32, Vec<u32>> {
    let mut map: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return map };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) = parent(pid) {
            map.entry(ppid).or_default().push(pid);
        }
    }
    map
}

/// A short name for `pid`: its program's file name, and its first argument's when that
/// is not a flag (`python3 child.py`, `sh`); at most 48 characters.
pub fn name(pid: u32) -> String {
    let basename = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).to_string())
        .collect();
    let mut name = match args.first() {
        Some(first) => basename(first),
        None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "?".to_string()),
    };
    if let Some(second) = args.get(1).filter(|a| !a.starts_with('-')) {
        name = format!("{name} {}", basename(second));
    }
    name.chars().take(48).collect()
}

/// Whether `pid` has the shim `shim` mapped: without a member's hello, a child forked
/// without an exec that has not joined (yet: it joins from its fork handler).
pub fn has_shim(pid: u32, shim: &str) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    !shim.is_empty() && maps.contains(shim)
}

/// Why `pid` runs without an engine, in words (the summary's warning line).
///
/// `ppid` is its parent, `was_member` whether it joined before, `members` the tree's
/// member pids, `shim` the shim's path, `run_dir` this run's directory, `refused` the
/// reason the broker refused it, if it did.
pub fn why_unmanaged(
    pid: u32,
    (ppid, was_member): (u32, bool),
    members: &BTreeSet<u32>,
    (shim, run_dir): (&str, &str),
    refused: Option<&str>,
) -> String {
    if let Some(reason) = refused {
        return format!("refused: {reason}");
    }
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        let ids = |key: &str| -> Option<(String, String)> {
            let line = status.lines().find_map(|l| l.strip_prefix(key))?;
            let mut f = line.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        };
        if ids("Uid:").is_some_and(|(real, effective)| real != effective)
            || ids("Gid:").is_some_and(|(real, effective)| real != effective)
        {
            return "set-user-ID or set-group-ID: the loader ignores LD_PRELOAD".to_string();
        }
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let var = |name: &str| -> Option<String> {
        let key = format!("{name}=");
        environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(key.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).to_string())
    };
    if has_shim(pid, shim) {
        if var(runstat::env::RUN_DIR).is_some_and(|dir| dir != run_dir) {
            return "its environment names another run, whose broker refused it".to_string();
        }
        if was_member {
            // The same image joined, and its connection closed while it runs: a program
            // that closes every descriptor it did not open (a daemon) closes it too.
            return "left the broker while running (its connection was closed, as a program \
                    closing every descriptor closes it): its engine goes on under its last \
                    share"
                .to_string();
        }
        // Loaded and never said hello: a fork without an exec (of a member, or of such a
        // child) that could not join as a member of its own (its broker's answer lost,
        // or its engine could not start: it says why on stderr).
        let of = if members.contains(&ppid) { "a member" } else { "a process" };
        return format!(
            "forked by {of} ({ppid}) without an exec and not a member: its engine, if it \
             has one, goes on under the share it inherited"
        );
    }
    let exe = read_head(&format!("/proc/{pid}/exe"), 64 << 10);
    if crate::preflight::elf_interp(&exe) == Some(false) {
        return "statically linked: the shim cannot load into it".to_string();
    }
    let preloaded = var("LD_PRELOAD").is_some_and(|v| !shim.is_empty() && v.contains(shim));
    if preloaded {
        "the shim did not load".to_string()
    } else {
        "started without the shim (LD_PRELOAD cleared)".to_string()
    }
}

/// The first `max` bytes of a file (empty if unreadable).
fn read_head(path: &str, max: usize) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(max as u64).read_to_end(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_descends_from_its_parent_and_is_among_its_descendants() {
        let me = std::process::id();
        let parent = parent(me).unwrap();
        assert!(descends(me, parent));
        assert!(!descends(parent, me));
        let child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let found = descendants(me, &[]);
        let _ = std::process::Command::new("kill").arg(child.id().to_string()).status();
        let mut child = child;
        let _ = child.wait();
        let c = found.iter().find(|p| p.pid == child.id()).expect("the child");
        assert_eq!(c.ppid, me);
        assert!(c.rss > 0);
        assert!(descendants(me, &[child.id()]).iter().all(|p| p.pid != child.id()));
        assert!(name(me).starts_with("uswap-"), "{}", name(me));
    }

    /// Eight MiB written by this process are in its anonymous and private anonymous
    /// memory, and its file pages (its own text, libc) are in neither.
    #[test]
    fn anonymous_memory_counts_what_was_written_and_no_file_page() {
        let me = std::process::id();
        let (anon, private) = (anon_bytes(me).unwrap(), private_anon_bytes(me).unwrap());
        let data = vec![7u8; 8 << 20];
        std::hint::black_box(&data);
        let grown_anon = anon_bytes(me).unwrap().saturating_sub(anon);
        let grown_private = private_anon_bytes(me).unwrap().saturating_sub(private);
        assert!(grown_anon >= 7 << 20, "anonymous memory grew by {grown_anon}");
        assert!(grown_private >= 7 << 20, "private anonymous memory grew by {grown_private}");
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let file_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert!(file_kib > 0, "a test binary has file pages mapped");
        assert!(anon_bytes(me).unwrap() + file_kib * 1024 <= rss(me).unwrap() + (1 << 20));
        drop(data);
    }
}
